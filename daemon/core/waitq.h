/*
 * waitq — requests for VRAM that found no room and wait for it (ARCHITECTURE.md
 * decision 5): allocations, each with the deadline its client chose, and
 * buffers waiting to come back from host memory. They are served in rank
 * order — passive swap-ins (an acquire waits), then allocations, then
 * prefetches — and in arrival order within a rank. A waiter that does not
 * fit yet holds back those behind it on the same device, so a large
 * request is not starved by a stream of small ones. Whatever still waits
 * after a pass asks the evictor for room.
 *
 * The queue owns its state (gmd_waitq in the server, gmd_waitq_owner in
 * each session) and knows nothing of allocations or moves: what serving,
 * expiring or cancelling a waiter means is the ops the layer above gave
 * it (scheduler.c). Adding a waiter or moving one up only marks the work
 * (pending.h): the scheduling pass serves the queue.
 */
#ifndef GMD_WAITQ_H
#define GMD_WAITQ_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "list.h"
#include "pending.h"

typedef struct gmd_session gmd_session;
typedef struct gmd_dbuffer gmd_dbuffer;
typedef struct gmd_waiter gmd_waiter;

typedef enum waitq_rank {
        WAITQ_SWAP_IN = 0,      /* an acquire waits for this buffer */
        WAITQ_ALLOC = 1,
        WAITQ_PREFETCH = 2,
} waitq_rank;

/* What the layer above does with a waiter. */
typedef struct gmd_waitq_ops {
        /* Serve it now: 0 served (or answered: it leaves the queue),
         * -ENOSPC no room yet, -EAGAIN its device's copy queue rests after
         * a refused copy. Either error holds back those behind it. */
        int (*serve)(void *ctx, gmd_waiter *waiter);
        /* An allocation's deadline passed: answer it (it leaves after). */
        void (*expire)(void *ctx, gmd_waiter *waiter);
        /* Dropped unserved because the daemon stops: an allocation is
         * answered with `code` and `message`, a swap-in forgotten. */
        void (*cancel)(void *ctx, gmd_waiter *waiter, int code,
                       const char *message);
} gmd_waitq_ops;

typedef struct gmd_waitq {
        uv_loop_t *loop;
        gmd_pending *pending;
        const gmd_waitq_ops *ops;
        void *ctx;
        gmd_list waiters;           /* in rank order */
} gmd_waitq;

/* A session's side: its allocations waiting. */
typedef struct gmd_waitq_owner {
        unsigned n_waiting;
} gmd_waitq_owner;

struct gmd_waiter {
        gmd_waitq *q;
        gmd_session *session;
        gmd_waitq_owner *owner;
        gmd_list link;              /* in q->waiters */
        waitq_rank rank;
        uint64_t size;              /* VRAM bytes wanted (rounded) */
        unsigned device;
        uint64_t since_us;          /* when the request came */
        bool dropped;               /* left the queue; freed on timer close */
        uv_timer_t timer;

        /* WAITQ_ALLOC */
        uint32_t request_id;
        uint64_t asked;             /* as the client asked */
        unsigned flags;
        int64_t timeout_ms;         /* < 0: no deadline */

        /* WAITQ_SWAP_IN, WAITQ_PREFETCH */
        gmd_dbuffer *buffer;
};

void waitq_init(gmd_waitq *q, uv_loop_t *loop, gmd_pending *pending,
                const gmd_waitq_ops *ops, void *ctx);

/* Queue an allocation of `session` (its side: `owner`); its deadline
 * timer starts now. */
int waitq_add(gmd_waitq *q, gmd_session *session, gmd_waitq_owner *owner,
              uint32_t request_id, uint64_t asked, uint64_t size,
              unsigned device, unsigned flags, int64_t timeout_ms,
              uint64_t since_us);

/* Queue `buffer`'s return to VRAM (`size` bytes on `device`, owned by
 * `session`); *ret_waiter lets the mover promote or cancel it. */
int waitq_add_move_in(gmd_waitq *q, gmd_session *session, gmd_dbuffer *buffer,
                      uint64_t size, unsigned device, waitq_rank rank,
                      gmd_waiter **ret_waiter);

/* Serve a waiting swap-in in another rank: ahead when an acquire now
 * waits for it, behind again when that acquire gave up. */
void waitq_set_rank(gmd_waiter *waiter, waitq_rank rank);

/* Take a waiter out of the queue without answering. */
void waitq_drop(gmd_waiter *waiter);

/* Serve every waiter that fits now, in order (the scheduling pass, after
 * PENDING_ROOM). Returns whether some still wait for room: the pass then
 * asks the evictor. */
bool waitq_serve(gmd_waitq *q);

/* VRAM bytes waited for on `device`. */
uint64_t waitq_demand(const gmd_waitq *q, unsigned device);

/* Waiters of every kind. */
unsigned waitq_count(const gmd_waitq *q);

/* Is anything waiting? */
static inline bool waitq_empty(const gmd_waitq *q)
{
        return list_empty(&q->waiters);
}

/* Drop a session's allocation waiters without answering (it is going
 * away). */
void waitq_cancel_session(gmd_waitq *q, gmd_session *session);

/* Cancel every waiter (ops->cancel) and drop it (the daemon is stopping). */
void waitq_fail_all(gmd_waitq *q, int code, const char *message);

#endif
