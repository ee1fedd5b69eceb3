/*
 * move — moving a buffer's backing between VRAM and host memory without
 * changing the address its owner holds (ARCHITECTURE.md decision 2).
 *
 * A move creates the new backing (for a swap-in, or takes the VRAM kept
 * from the owner's last swap-out, reuse.h), copies into it (copyq), then
 * sends the owner a remap naming it; the owner maps it at the same address
 * and acks, and only then is the old backing freed (old VRAM: kept) — the
 * daemon never frees backing its owner may still have mapped. A move of a
 * SWAPPABLE buffer nobody can be touching gets its remap when the copy
 * starts instead (an early remap), so the owner's unmap or import and map
 * overlap the copy: coming back from host memory, where its owner maps
 * nothing, into VRAM kept from its own swap-out (new VRAM is not zeroed:
 * the owner must not see it before the copy filled it), and going out when
 * it was released with no GPU work pending on it (no last-use event). The
 * move then ends when both the copy and the ack are done. Such a move
 * cancelled or failed sends a second remap back to the old backing and
 * ends on its ack. A buffer moves, either way, only while released,
 * SPILLABLE ones too: its owner may write a buffer it holds at any moment
 * (from its threads or its kernels), so no copy of it could be complete. A
 * SPILLABLE buffer is only ever *placed* on host memory while in use (an
 * allocation or an acquire that found no VRAM) and stays there until it
 * is released. An acquire on a buffer that is out brings it back first,
 * ahead of every other move. A buffer freed while its copy runs leaves an
 * orphaned move that frees both backings once the copy is over.
 *
 * A move's life is one state, changed only by move_change_state(), which
 * logs each change at debug level and refuses one the table does not
 * allow. The copy's own progress (bytes issued and in flight) is copyq's
 * (gmd_copy, embedded); two facts are fixed when the move starts: when
 * its owner gets the remap (remap) and where its destination came from
 * (dst_from).
 *
 *   COPYING       the copy runs. An early move's remap is out.
 *   COPYING_ACKED an early move's owner acked its remap; the copy runs.
 *   CANCELLING    cancelled, or a chunk or submit failed: what is in
 *                 flight finishes, nothing more is issued.
 *   AWAITING_ACK  every byte copied; the remap to the destination is out
 *                 (sent now, or early and not acked yet).
 *   ROLLING_BACK  an early move stopped short, or its owner could not map
 *                 a peer's VRAM (peer.h): a remap back to the source is
 *                 out.
 *   ORPHANED      its buffer was freed while chunks were in flight: both
 *                 backings are released once they are back.
 *   FINISHED      (final) the buffer lives on the destination.
 *   ABANDONED     (final) the buffer stays on the source.
 *   DROPPED       (final) its buffer was freed; backings released.
 *
 * Legal changes (any other is refused and logged as an error):
 *   COPYING       -> COPYING_ACKED (ack of the early remap)
 *                    AWAITING_ACK (copy over) | CANCELLING (cancel, failure)
 *                    ORPHANED | DROPPED (buffer freed, copy running | over)
 *   COPYING_ACKED -> FINISHED (copy over) | CANCELLING | ORPHANED | DROPPED
 *   CANCELLING    -> ROLLING_BACK (copy over, early) | ABANDONED (copy
 *                    over, late) | ORPHANED | DROPPED
 *   AWAITING_ACK  -> FINISHED (ack) | ROLLING_BACK (a failed ack of a
 *                    SPILLABLE buffer's remap to a peer's VRAM, which said
 *                    falls_back) | DROPPED (freed, or any other failed ack)
 *   ROLLING_BACK  -> ABANDONED (ack) | DROPPED
 *   ORPHANED      -> DROPPED (copy over)
 */
#ifndef GMD_MOVE_H
#define GMD_MOVE_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "acquirer.h"
#include "copyq.h"
#include "list.h"
#include "result.h"
#include "waitq.h"

typedef struct gmd_dbuffer gmd_dbuffer;
typedef struct gmd_server gmd_server;
typedef struct gmd_session gmd_session;

/* A client's answer to a remap notice (MSG_REMAP_ACK's fields, decoded
 * by request.c). */
typedef struct gmd_remap_ack {
        uint64_t buffer_id;
        uint64_t sequence;          /* the notice's */
        int32_t result;             /* 0, or a negative errno: it could
                                     * not map the new backing */
} gmd_remap_ack;

typedef enum move_state {
        MOVE_COPYING,
        MOVE_COPYING_ACKED,
        MOVE_CANCELLING,
        MOVE_AWAITING_ACK,
        MOVE_ROLLING_BACK,
        MOVE_ORPHANED,
        MOVE_FINISHED,
        MOVE_ABANDONED,
        MOVE_DROPPED,
} move_state;

/* When the owner is told to map the destination. */
typedef enum move_remap {
        MOVE_REMAP_LATE,            /* once the copy is over */
        MOVE_REMAP_EARLY,           /* when the copy starts (move.h top) */
} move_remap;

/* Where the destination came from. */
typedef enum move_dst_from {
        MOVE_DST_NEW,               /* created for this move */
        MOVE_DST_KEPT,              /* VRAM kept from the owner's own
                                     * swap-out (reuse.h) */
        MOVE_DST_MAPPED,            /* ... and still mapped by the owner
                                     * for this buffer */
} move_dst_from;

typedef struct gmd_move {
        gmd_dbuffer *buffer;        /* NULL once orphaned */
        uint64_t buffer_id;         /* for the log, also once orphaned */
        move_state state;
        move_remap remap;
        move_dst_from dst_from;
        gmd_copy copy;              /* device, dir, class, src, dst, bytes */
        gmd_tier src_tier, dst_tier;
        bool relocate;              /* out of a peer's VRAM to host memory
                                     * (peer.h): the buffer stays out; its
                                     * owner is told nothing (SWAPPABLE)
                                     * or remapped (SPILLABLE) */
        bool clean;                 /* out to the host copy kept since the
                                     * swap-in: an empty copy (hostcopy.h) */
        bool keep_mapping;          /* the owner's mapping of the VRAM side
                                     * stays: its remaps carry keep_mapping
                                     * and no segments (reuse.h) */
        uint32_t waited_gen;        /* the last-use event its copy waits
                                     * for (buffer's last_use_gen) */
        uint64_t seq;               /* of the remap out, awaiting its ack;
                                     * 0 when none is */
        uint64_t start_us;          /* queued */
        uint64_t copied_us;         /* copies over */
} gmd_move;

/* Move `b`, out on a peer's VRAM (peer.h), on to host memory, class
 * eviction: a SWAPPABLE buffer's copy on the peer's queue, its owner
 * sees nothing (no remap); a SPILLABLE buffer's, released, on its home
 * device's queue after its last use, its owner remapped to the host
 * memory at the copy's end (COPYING -> AWAITING_ACK -> FINISHED on the
 * ack, as any move out). An acquire meanwhile stops it and brings the
 * buffer back from the peer. 0, or a negative errno with nothing started
 * (-ENOSPC: no host room; -EBUSY: a SPILLABLE buffer its owner holds). */
int move_relocate_start(gmd_server *server, gmd_dbuffer *b);

/* Change a move's state: logged at debug level; a change the table above
 * does not allow is refused (false) and logged as an error. */
bool move_change_state(gmd_move *move, move_state next);

/* The state's name, for logs and status. */
const char *move_state_name(move_state state);

/* Is the copy still running (not over, stopped or not)? */
static inline bool move_copying(const gmd_move *move)
{
        return move->copy.phase != COPY_ENDED;
}

/* Will the move end without moving (cancelled or failed)? */
static inline bool move_stopping(const gmd_move *move)
{
        return move->state == MOVE_CANCELLING ||
               move->state == MOVE_ROLLING_BACK ||
               move->state == MOVE_ORPHANED || move->copy.status < 0;
}

/* Start moving a VRAM-resident, released buffer to host memory. Nothing
 * changed on failure: -EBUSY when its owner holds it (acquired), -ENOSPC
 * when the host pool or [pools] host_limit has no room,
 * -EIO while the copy queue rests after a refused copy, -EOPNOTSUPP when
 * the backend cannot move, -ENOMEM. */
int move_out_start(gmd_server *server, gmd_dbuffer *buffer, move_class cls);

/* Ask for a host-resident buffer to come back to VRAM: it waits in the
 * waitq with `rank` until VRAM is free, then copies. */
int move_in_request(gmd_server *server, gmd_dbuffer *buffer, waitq_rank rank);

/* The waitq found VRAM for a swap-in: take it and start the copy. 0, or
 * -ENOSPC when the room is not there yet or the copy queue rests after a
 * refused copy, or -EINPROGRESS when the buffer is being moved off a peer
 * (the swap-in holds no one back and copies from host memory once that
 * move is over). */
int move_in_begin(gmd_server *server, gmd_dbuffer *buffer);

/* The waitq dropped a buffer's swap-in without serving it. */
void move_in_cancelled(gmd_dbuffer *buffer);

/* Stop a move whose copy has not ended (prefetch over pageout, acquire
 * over eviction): the buffer stays where it was. */
void move_cancel(gmd_server *server, gmd_dbuffer *buffer);

/* The scheduling pass: a copy on copyq's ended list is over (every byte
 * copied, or stopped, or failed): go on with its move. */
void move_copy_ended(gmd_server *server, gmd_copy *copy);

/* reuse.h's ask_unmap: tell the owner of `buffer`, which is out, to unmap
 * the VRAM kept for it that it still maps (a remap to HOST without
 * segments); its ack releases that VRAM (reuse_unmapped). 0, or the send's
 * error. */
int move_ask_unmap(gmd_server *server, gmd_dbuffer *buffer);

/* MSG_REMAP_ACK, a notification (OUTCOME_NONE). */
gmd_outcome move_handle_ack(gmd_session *session, uint32_t request_id,
                            const gmd_remap_ack *ack, gmd_result *ret);

/* Free `buffer` (buffer_free), settling its move and acquirer first: an
 * acquire waiting for it is told, a swap-in waiting for VRAM is dropped,
 * a move whose copy still runs is orphaned and releases both backings
 * once it is over. */
void move_free_buffer(gmd_server *server, gmd_dbuffer *buffer);

/* VRAM bytes on `device` that moves under way will free, and sessions
 * closing in steps (session.h). */
uint64_t move_leaving_bytes(gmd_server *server, unsigned device);

/* Is a move of a buffer of `device` under way, either way? (Reads the
 * short list of moving buffers.) */
bool move_any_on(gmd_server *server, unsigned device);

/* Is the buffer moving, or waiting to? */
bool move_busy(const gmd_dbuffer *buffer);

/* MSG_ACQUIRE of `buffer`: OUTCOME_OK (usable now), OUTCOME_ERROR (busy,
 * out of memory) or OUTCOME_LATER / OUTCOME_ANSWERED (an acquirer answers
 * it when the buffer is usable, fails or the deadline passes). */
gmd_outcome move_acquire(gmd_session *session, uint32_t request_id,
                         gmd_dbuffer *buffer, int64_t timeout_ms,
                         bool read_only, gmd_result *ret);

/* Bring `buffer` back to VRAM and acquire it for its owner, as an acquire
 * with no deadline would, without a request to answer (loan.h): 1 when it
 * is acquired now (`done` is not called), 0 when `done(ctx, ...)` will be,
 * when it is back or cannot come (possibly before this returns), -EBUSY
 * when an acquire waits for it already, -ENOMEM. */
int move_acquire_for(gmd_server *server, gmd_dbuffer *buffer,
                     move_acquired_fn done, void *ctx);

/* The acquire waiting for `buffer` (move_acquire's OUTCOME_LATER) is
 * answered by `done(ctx, ...)` instead of a reply to its client (`done`
 * NULL: by the reply again). */
void move_acquire_divert(gmd_dbuffer *buffer, move_acquired_fn done, void *ctx);

#endif
