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
 */
#ifndef GMD_MOVE_H
#define GMD_MOVE_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "copyq.h"
#include "gpumem.pb-c.h"
#include "list.h"
#include "waitq.h"

typedef struct gmd_dbuffer gmd_dbuffer;
typedef struct gmd_session gmd_session;

typedef struct gmd_move {
        gmd_dbuffer *buffer;        /* NULL once the buffer was freed */
        unsigned device;
        gmd_copy_dir dir;
        move_class cls;
        gmd_mem *src, *dst;
        gmd_tier src_tier, dst_tier;
        uint64_t size;
        uint64_t issued, done;      /* bytes handed to the backend, copied */
        unsigned inflight;          /* chunks with the backend */
        int status;                 /* first copy error */
        bool queued;                /* in a copyq list (bytes left to issue) */
        bool cancelled;
        bool finished;              /* copies over; move_copied ran */
        bool awaiting_ack;          /* remap sent, old backing still mapped */
        bool early;                 /* remap sent before the copies ended */
        bool acked;                 /* ... and the owner acked it */
        bool rolling_back;          /* cancelled after an early remap: a
                                     * remap back to src is out */
        bool copied;                /* every byte copied (move_copied ran
                                     * on a copy that was not cancelled) */
        bool dst_kept;              /* dst is VRAM kept from the owner's
                                     * own swap-out (reuse.h) */
        uint32_t waited_gen;        /* the last-use event its copy waits
                                     * for (buffer's last_use_gen) */
        bool owns_src;              /* orphaned: frees src too */
        uint64_t seq;               /* of the remap */
        uint64_t start_us;          /* queued */
        uint64_t copied_us;         /* copies over */
        gmd_list qlink;
} gmd_move;

/* An acquire waiting for its buffer to be usable. */
typedef struct gmd_acquirer {
        gmd_dbuffer *buffer;
        gmd_session *session;
        uint32_t request_id;
        int64_t timeout_ms;
        uint64_t since_us;
        bool done;                  /* answered; freed on the timer's close */
        uv_timer_t timer;
} gmd_acquirer;

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
 * refused copy. */
int move_in_begin(gmd_server *server, gmd_dbuffer *buffer);

/* The waitq dropped a buffer's swap-in without serving it. */
void move_in_cancelled(gmd_dbuffer *buffer);

/* Stop a move whose copy has not ended (prefetch over pageout, acquire
 * over eviction): the buffer stays where it was. */
void move_cancel(gmd_server *server, gmd_dbuffer *buffer);

/* copyq: every chunk of the move is over (or it was cancelled). */
void move_copied(gmd_server *server, gmd_move *move);

/* MSG_REMAP_ACK. */
void move_handle_ack(gmd_session *session, uint32_t request_id,
                     const Gmd__RemapAck *ack);

/* buffer_free is about to free `buffer`: settle its move and acquirer. */
void move_buffer_freed(gmd_server *server, gmd_dbuffer *buffer);

/* VRAM bytes on `device` that moves under way will free. */
uint64_t move_leaving_bytes(gmd_server *server, unsigned device);

/* Is the buffer moving, or waiting to? */
bool move_busy(const gmd_dbuffer *buffer);

/* MSG_ACQUIRE. */
void move_acquire(gmd_session *session, uint32_t request_id,
                  gmd_dbuffer *buffer, int64_t timeout_ms);

#endif
