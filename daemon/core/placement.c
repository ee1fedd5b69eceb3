/*
 * placement — see placement.h. Each answer reads the buffer's flags and
 * state only: no pool, no queue, so the policy can be read, and tested,
 * on its own.
 */
#include "placement.h"

#include "buffer.h"

bool placement_pinned(const gmd_dbuffer *b)
{
        return (b->flags & (GMD_ALLOC_PIN_VRAM | GMD_ALLOC_LEGACY_IPC)) != 0;
}

bool placement_host_fallback(unsigned flags)
{
        return (flags & GMD_ALLOC_SPILLABLE) != 0;
}

bool placement_usable_on_host(const gmd_dbuffer *b)
{
        return (b->flags & GMD_ALLOC_SPILLABLE) != 0;
}

bool placement_owner_maps(const gmd_dbuffer *b, const gmd_mem *mem,
                          gmd_tier tier)
{
        return !mem->daemon_only &&
               (tier == GMD_TIER_VRAM || placement_usable_on_host(b));
}

bool placement_may_move(const gmd_dbuffer *b)
{
        return !b->acquired || b->loan;
}

bool placement_pageout_allowed(const gmd_dbuffer *b, const char **ret_why)
{
        /* Its owner's view: a buffer it lent is still its lease. */
        if (b->acquired) {
                *ret_why = "is acquired: release it first (a buffer in use "
                           "never moves; a SPILLABLE one in use stays where "
                           "it is)";
                return false;
        }
        return true;
}

bool placement_evictable(const gmd_dbuffer *b)
{
        return b->tier == GMD_TIER_VRAM && b->state == GMD_STATE_RESIDENT &&
               !b->move && placement_may_move(b) && !b->parked && b->mem &&
               b->mem->fd >= 0 && !placement_pinned(b);
}

bool placement_early_out(const gmd_dbuffer *b)
{
        return !placement_usable_on_host(b) && placement_may_move(b) &&
               !b->last_use;
}

bool placement_early_in(const gmd_dbuffer *b, bool dst_kept)
{
        return dst_kept && !placement_usable_on_host(b);
}

bool placement_keep_mapping(const gmd_dbuffer *b, bool owner_keeps)
{
        return owner_keeps && !placement_usable_on_host(b) &&
               b->tier == GMD_TIER_VRAM && b->mem && !b->mem->daemon_only;
}

bool placement_host_copy_private(const gmd_dbuffer *b)
{
        return !placement_usable_on_host(b);
}
