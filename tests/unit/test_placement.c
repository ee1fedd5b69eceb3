/*
 * test_placement — daemon/core/placement.c, the one policy for where a buffer
 * may live and whether it may move: PIN_VRAM and legacy IPC never move,
 * SPILLABLE falls back to host memory and is used where it rests, no
 * buffer its owner holds ever moves, and a SWAPPABLE owner maps nothing
 * on host memory.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "buffer.h"
#include "placement.h"

static gmd_mem mem_vram = { .fd = 5, .tier = GMD_TIER_VRAM };
static gmd_mem mem_host = { .fd = 6, .tier = GMD_TIER_HOST };
static gmd_mem mem_arena = { .fd = -1, .tier = GMD_TIER_HOST, .daemon_only = true };

static gmd_dbuffer idle(unsigned flags)
{
        gmd_dbuffer b;

        memset(&b, 0, sizeof(b));
        b.flags = flags;
        b.tier = GMD_TIER_VRAM;
        b.state = GMD_STATE_RESIDENT;
        b.mem = &mem_vram;
        return b;
}

static void test_pinned_never_moves(void **state)
{
        gmd_dbuffer pin = idle(GMD_ALLOC_PIN_VRAM), ipc = idle(GMD_ALLOC_LEGACY_IPC);
        gmd_dbuffer swap = idle(0);

        (void)state;
        assert_true(placement_pinned(&pin));
        assert_true(placement_pinned(&ipc));
        assert_false(placement_pinned(&swap));
        assert_false(placement_evictable(&pin));
        assert_false(placement_evictable(&ipc));
        assert_true(placement_evictable(&swap));
}

static void test_evictable_only_idle(void **state)
{
        gmd_dbuffer b = idle(GMD_ALLOC_SPILLABLE);
        gmd_mem no_fd = mem_vram;

        (void)state;
        assert_true(placement_evictable(&b));
        b.acquired = true;
        assert_false(placement_evictable(&b));
        b = idle(0);
        b.parked = true;
        assert_false(placement_evictable(&b));
        b = idle(0);
        b.tier = GMD_TIER_HOST;
        assert_false(placement_evictable(&b));
        b = idle(0);
        b.state = GMD_STATE_MOVING_OUT;
        assert_false(placement_evictable(&b));
        b = idle(0);
        no_fd.fd = -1;
        b.mem = &no_fd;
        assert_false(placement_evictable(&b));
}

static void test_spillable_lives_anywhere(void **state)
{
        gmd_dbuffer spill = idle(GMD_ALLOC_SPILLABLE), swap = idle(0);

        (void)state;
        assert_true(placement_host_fallback(GMD_ALLOC_SPILLABLE));
        assert_false(placement_host_fallback(0));
        assert_false(placement_host_fallback(GMD_ALLOC_PIN_VRAM));
        assert_true(placement_usable_on_host(&spill));
        assert_false(placement_usable_on_host(&swap));
        /* Its owner maps its host copy; a SWAPPABLE owner maps nothing
         * there, and an arena piece is never handed out. */
        assert_true(placement_owner_maps(&spill, &mem_host, GMD_TIER_HOST));
        assert_false(placement_owner_maps(&swap, &mem_host, GMD_TIER_HOST));
        assert_true(placement_owner_maps(&swap, &mem_vram, GMD_TIER_VRAM));
        assert_false(placement_owner_maps(&spill, &mem_arena, GMD_TIER_HOST));
        assert_false(placement_host_copy_private(&spill));
        assert_true(placement_host_copy_private(&swap));
}

/* A buffer its owner holds never moves, SPILLABLE ones included: the
 * owner may be writing it. */
static void test_held_never_moves(void **state)
{
        gmd_dbuffer spill = idle(GMD_ALLOC_SPILLABLE), swap = idle(0);
        const char *why = NULL;

        (void)state;
        spill.acquired = swap.acquired = true;
        assert_false(placement_may_move(&spill));
        assert_false(placement_may_move(&swap));
        assert_false(placement_pageout_allowed(&swap, &why));
        assert_non_null(why);
        assert_non_null(strstr(why, "release it first"));
        why = NULL;
        assert_false(placement_pageout_allowed(&spill, &why));
        assert_non_null(strstr(why, "a buffer in use never moves"));
        assert_false(placement_evictable(&spill));
        spill.acquired = swap.acquired = false;
        assert_true(placement_may_move(&spill));
        assert_true(placement_pageout_allowed(&swap, &why));
        assert_true(placement_pageout_allowed(&spill, &why));
}

static void test_early_remaps(void **state)
{
        gmd_dbuffer swap = idle(0), spill = idle(GMD_ALLOC_SPILLABLE);

        (void)state;
        assert_true(placement_early_out(&swap));
        swap.acquired = true;
        assert_false(placement_early_out(&swap));
        swap.acquired = false;
        swap.last_use = (gmd_event *)&swap;     /* GPU work pending on it */
        assert_false(placement_early_out(&swap));
        assert_false(placement_early_out(&spill));
        assert_true(placement_early_in(&swap, true));
        assert_false(placement_early_in(&swap, false));  /* new VRAM */
        assert_false(placement_early_in(&spill, true));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pinned_never_moves),
                cmocka_unit_test(test_evictable_only_idle),
                cmocka_unit_test(test_spillable_lives_anywhere),
                cmocka_unit_test(test_held_never_moves),
                cmocka_unit_test(test_early_remaps),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
