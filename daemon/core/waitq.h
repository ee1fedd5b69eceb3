/*
 * waitq — requests for VRAM that found no room and wait for it (ARCHITECTURE.md
 * decision 5): allocations, each with the deadline its client chose, and
 * buffers waiting to come back from host memory. The policy (ARCHITECTURE.md,
 * "The wait queue"):
 *   - order: by rank — passive swap-ins (an acquire waits), then
 *     allocations, then prefetches; within a rank the higher client
 *     priority first; among equal priorities the users take turns (a
 *     user's second waiter comes after every other user's first), and
 *     arrival order within one user's turn;
 *   - serve what fits: a waiter that does not fit is passed over, so a
 *     request for the whole pool does not hold back a 2 MiB one behind it;
 *   - no starvation: the first waiter in that order that has not fit for
 *     hold_after_ms, and for which room can be made (ops->reachable: free,
 *     kept, parked and evictable VRAM cover it), holds back every other
 *     waiter on its device of its priority or lower — ahead of it in the
 *     order too — and such new allocations there (waitq_holds),
 *     until it is served, so room accumulates for it. When room can be
 *     made only if processes holding VRAM in use lend it (ops->reachable
 *     says WAITQ_REACH_LENT), it holds back only what makes them lend:
 *     their waits that lend and their new requests that would lend or not
 *     wait at all (the shim's first try; its repeat lends) — for at most
 *     hold_after_ms more, in case those processes make no request (a
 *     lender that sits on its memory must not lock the others out). Else a
 *     training job stepping on memory it holds in use took every room the
 *     other's starved allocation could have had: the room that job freed
 *     between two steps was its own again before the waiter could use it. Ahead too: another
 *     process's swap-in ranks before an allocation, and two training jobs
 *     on one budget re-acquired their blocks between steps ahead of the
 *     other's starved allocation, which waited 10-13 s (H100, 2026-11-26).
 *     A higher priority is not held (a priority-0
 *     training job's starved allocation held an inference job's weights
 *     back for seconds, H100, 2026-11-26);
 *   - a copy queue resting after a refused copy (-EAGAIN) holds back its
 *     device; an allocation waiting for its user's own parked buffers to
 *     come back (-EINPROGRESS) holds back nobody.
 * Whatever still waits for room after a pass asks the evictor for room.
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
        WAITQ_RANKS
} waitq_rank;

/* Can room be made for a waiter (ops->reachable)? */
typedef enum waitq_reach {
        WAITQ_REACH_NO = 0,     /* holding back would help nobody */
        WAITQ_REACH_LENT,       /* if processes that lend when they wait lent */
        WAITQ_REACH_NOW,        /* free, kept, parked and evictable VRAM */
} waitq_reach;

/* What the layer above does with a waiter. */
typedef struct gmd_waitq_ops {
        /* Serve it now: 0 served (or answered: it leaves the queue),
         * -ENOSPC no room yet, -EAGAIN its device's copy queue rests after
         * a refused copy (holds back its device), -EINPROGRESS it waits
         * for something else than room — its user's quota for parked
         * buffers to come back, a swap-in for its buffer's move off a
         * peer to end (peer.h) — and holds back nobody. */
        int (*serve)(void *ctx, gmd_waiter *waiter);
        /* Can room be made for it on its device (waitq_reach)? Only such
         * a waiter holds the others back once it waited hold_after_ms;
         * NULL: always (WAITQ_REACH_NOW). */
        waitq_reach (*reachable)(void *ctx, const gmd_waiter *waiter);
        /* VRAM it needs on its device besides its size (what a waiting
         * allocation's loan must bring back, loan.h); NULL: none. */
        uint64_t (*more)(void *ctx, const gmd_waiter *waiter);
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
        gmd_list waiters;           /* in serving order (waitq_insert) */
        uint64_t hold_after_us;     /* [limits] wait_hold_ms */
        uint64_t held;              /* bit per device held by a starved waiter */
        uint64_t held_lenders;      /* of those, held only for what lends
                                     * (WAITQ_REACH_LENT) */
        int held_priority[64];      /* its priority: only waiters of that
                                     * priority or lower are held back */
        gmd_waiter *holder[64];     /* the starved waiter (NULL: a copy
                                     * queue that rests) */
        uint64_t changes;           /* waiters added, moved or dropped: a
                                     * pass sees what serving one changed */
        uint64_t pass;              /* the serving pass under way (tried) */
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
        int priority;               /* the client's; higher first */
        uint32_t uid;               /* whose turn (fair between users) */
        uint64_t turn;              /* the user's round among equals */
        uint64_t size;              /* VRAM bytes wanted (rounded) */
        unsigned device;
        uint64_t since_us;          /* when the request came */
        bool no_room;               /* its last serve found no room */
        uint64_t tried;             /* the pass that last served it and
                                     * left it waiting (q->pass) */
        uint64_t lent_hold_us;      /* since when it holds for lenders only
                                     * (WAITQ_REACH_LENT); 0: it does not */
        bool dropped;               /* left the queue; freed on timer close */
        uv_timer_t timer;

        /* WAITQ_ALLOC */
        uint32_t request_id;
        uint64_t asked;             /* as the client asked */
        unsigned flags;
        int64_t timeout_ms;         /* < 0: no deadline */

        /* WAITQ_SWAP_IN, WAITQ_PREFETCH */
        gmd_dbuffer *buffer;

        /* What its client's process lent while this allocation or the
         * acquire behind this swap-in waits (loan.h); set by the layer
         * above, NULL when none. */
        struct gmd_loan *loan;
};

void waitq_init(gmd_waitq *q, uv_loop_t *loop, gmd_pending *pending,
                const gmd_waitq_ops *ops, void *ctx);

/* Who waits: the client's priority and user. */
typedef struct gmd_waitq_who {
        gmd_session *session;
        int priority;
        uint32_t uid;
} gmd_waitq_who;

/* Queue an allocation of `who` (its side: `owner`); its deadline timer
 * starts now. *ret_waiter (if not NULL) is the waiter, valid until it
 * leaves the queue. */
int waitq_add(gmd_waitq *q, const gmd_waitq_who *who, gmd_waitq_owner *owner,
              uint32_t request_id, uint64_t asked, uint64_t size,
              unsigned device, unsigned flags, int64_t timeout_ms,
              uint64_t since_us, gmd_waiter **ret_waiter);

/* Queue `buffer`'s return to VRAM (`size` bytes on `device`, owned by
 * `who`); *ret_waiter lets the mover promote or cancel it. */
int waitq_add_move_in(gmd_waitq *q, const gmd_waitq_who *who, gmd_dbuffer *buffer,
                      uint64_t size, unsigned device, waitq_rank rank,
                      gmd_waiter **ret_waiter);

/* Serve a waiting swap-in in another rank: ahead when an acquire now
 * waits for it, behind again when that acquire gave up. */
void waitq_set_rank(gmd_waiter *waiter, waitq_rank rank);

/* Take a waiter out of the queue without answering. */
void waitq_drop(gmd_waiter *waiter);

/* How long a waiter that does not fit may be passed over before it holds
 * back those behind it (0: at once, strict order). */
void waitq_set_hold_after(gmd_waitq *q, uint64_t ms);

/* Serve every waiter that fits now, in order (the scheduling pass, after
 * PENDING_ROOM), in one walk of the queue: each waiter is asked at most
 * once a pass. Returns whether some still wait for room: the pass then
 * asks the evictor. */
bool waitq_serve(gmd_waitq *q);

/* Must a new allocation of a client at `priority` on `device` queue
 * behind the waiters rather than take room now (a starved waiter of that
 * priority or higher holds the device, see above)? `lends`: the request
 * would lend while it waits, or not wait at all. */
static inline bool waitq_holds(const gmd_waitq *q, unsigned device,
                               int priority, bool lends)
{
        unsigned d = device % 64;

        return ((q->held >> d) & 1) && priority <= q->held_priority[d] &&
               (lends || !((q->held_lenders >> d) & 1));
}

/* Is `w` held back on its device (waitq_holds, as the last pass found
 * the holders)? *ret_holder is the starved waiter that holds it back,
 * NULL when a resting copy queue does. */
bool waitq_held_by(const gmd_waitq *q, const gmd_waiter *w,
                   const gmd_waiter **ret_holder);

/* The waiter that has waited longest for room on `device`, or NULL. */
const gmd_waiter *waitq_oldest(const gmd_waitq *q, unsigned device);

/* The highest client priority among the waiters on `device` (INT_MIN
 * when none waits). */
int waitq_top_priority(const gmd_waitq *q, unsigned device);

/* VRAM bytes waited for on `device` (sizes and ops->more). */
uint64_t waitq_demand(const gmd_waitq *q, unsigned device);

/* Of those, the bytes waited for by ranks before `rank` (WAITQ_PREFETCH:
 * acquires and allocations, what a buffer about to be used may have to
 * yield to, evict.h), but for the waiters `skip` (may be NULL) says to
 * leave out. */
uint64_t waitq_demand_before(const gmd_waitq *q, unsigned device,
                             waitq_rank rank,
                             bool (*skip)(void *ctx, const gmd_waiter *w),
                             void *ctx);

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
