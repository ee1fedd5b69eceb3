/*
 * placement — the one policy for where a buffer may live and whether it
 * may move, from its allocation flags and its state:
 *
 *   PIN_VRAM      lives in VRAM, never moves.
 *   LEGACY_IPC    a cudaMalloc'd buffer behind a CUDA IPC handle: lives in
 *                 VRAM, never moves (no fd to remap).
 *   SPILLABLE     VRAM first, then host: an allocation that finds no VRAM
 *                 in time is placed on the host tier, where the GPU still
 *                 reads it through its mapping; its owner maps its host
 *                 copy (or, moved out of a full device, the peer VRAM it
 *                 rests in: peer.h), so it is usable wherever it rests.
 *   (none)        SWAPPABLE: VRAM, moved to host memory only while
 *                 released; its owner maps nothing of its host copy
 *                 while it is out (at most the VRAM it left, kept for
 *                 it: placement_keep_mapping), and an acquire brings it
 *                 back first.
 *
 * Whatever the flags, a buffer its owner holds (acquired) never moves:
 * the owner may write it at any moment (its threads, its kernels), and no
 * copy could hold what is written after it. SPILLABLE is about placement
 * only: such a buffer is placed on host memory while in use (an
 * allocation or an acquire that found no VRAM) and stays there until it
 * is released.
 *
 * Every module asks here instead of testing flags itself, so the rule is
 * written once.
 */
#ifndef GMD_PLACEMENT_H
#define GMD_PLACEMENT_H

#include <stdbool.h>

#include "backend.h"
#include "gpumem.h"

typedef struct gmd_dbuffer gmd_dbuffer;

/* PIN_VRAM or legacy IPC: it never leaves VRAM. */
bool placement_pinned(const gmd_dbuffer *b);

/* VRAM first, then host: an allocation of these flags that finds no VRAM
 * (at once with no wait, or by its deadline) is placed on host memory. */
bool placement_host_fallback(unsigned flags);

/* Is the buffer used where it rests, on either tier (its owner maps its
 * host copy)? Otherwise only VRAM is usable, and its owner maps nothing
 * while it is on host memory. */
bool placement_usable_on_host(const gmd_dbuffer *b);

/* Does the owner map `mem`, on `tier`, behind the buffer's address?
 * Always VRAM; host memory only where it is usable. Host memory that only
 * the daemon holds (an arena piece) is never handed out. */
bool placement_owner_maps(const gmd_dbuffer *b, const gmd_mem *mem,
                          gmd_tier tier);

/* May it be moved now, either way? Not while its owner holds it, unless
 * the owner lent it while it waits (loan.h). */
bool placement_may_move(const gmd_dbuffer *b);

/* May a pageout the owner asks for move it now? Not while acquired,
 * SPILLABLE or not. Sets *ret_why when not. */
bool placement_pageout_allowed(const gmd_dbuffer *b, const char **ret_why);

/* May the daemon move it out of VRAM on its own, to make room for what
 * waits (eviction)? Only idle, resident, unparked, unpinned buffers with
 * an fd to remap. */
bool placement_evictable(const gmd_dbuffer *b);

/* May a move out send its remap when the copy starts (move.h)? Only for a
 * buffer nobody can be touching: not usable on host (its owner unmaps),
 * released, with no GPU work pending on it (no last-use event). */
bool placement_early_out(const gmd_dbuffer *b);

/* May a move in send its remap when the copy starts? Only into VRAM kept
 * from the owner's own swap-out (new VRAM is not zeroed: the owner must
 * not see it before the copy filled it), and only where the owner maps
 * nothing meanwhile. */
bool placement_early_in(const gmd_dbuffer *b, bool dst_kept);

/* May the owner keep mapping the VRAM the buffer moves out of, for its
 * way back (reuse.h)? Only if the owner said it can (`owner_keeps`:
 * Hello.keeps_mappings and VRAM kept for it) and maps nothing of the
 * buffer on host memory: a SPILLABLE buffer's owner must be remapped to
 * the host copy it may use. */
bool placement_keep_mapping(const gmd_dbuffer *b, bool owner_keeps);

/* Does a swap-out's host copy come from the daemon's own host arena? Not
 * for a buffer its owner maps on host memory: that one gets a pinned
 * allocation it can be given. */
bool placement_host_copy_private(const gmd_dbuffer *b);

#endif
