/*
 * loan — what a waiting process lends the daemon (GMD_ALLOC_YIELD).
 *
 * Two processes that each hold VRAM in use and each wait for more wait for
 * each other for ever: nothing of theirs is released, so nothing can be
 * evicted. Measured: two training jobs mid-step and an inference job on a
 * 4 GiB budget (H100, bench_cotenancy --quick, 2026-11-26) all waited out
 * their 120 s, every byte of the pool acquired by one of them. An
 * allocation that waits with GMD_ALLOC_YIELD comes with its caller's
 * promise that no thread or kernel of its process touches the buffers the
 * process holds until the call returns (PyTorch's allocator synchronizes
 * the device first). The daemon may then move those buffers out like
 * released ones — last of all victims, and only for another process's
 * acquire or allocation — and brings every one back into VRAM, at the
 * same address, before it answers the call. What a process lends goes
 * out only for requests of its priority or above (evict.c). Of processes
 * that all wait this way, one is always served: its allocation is served
 * only once the pool has room for it and for everything it lent that is
 * out, taken in one pass. A lower priority's request that waits without
 * lending, holding VRAM in use, while the lender's own request cannot be
 * served without such memory, inherits the loan once it has waited
 * [limits] priority_grace_ms (1 s at least, 5 s at most; evict.c,
 * lent_inherits): the two never wait for each other until a timeout.
 *
 * A loan belongs to the waiting allocation that made it; it lends the
 * buffers of every connection of the process (the same pid; the waiting
 * one alone when the pid is unknown), and one buffer is lent to one loan
 * at a time. A lent buffer keeps b->acquired — for its owner it is still
 * acquired: another acquire is EBUSY, a pageout refused, a release or free
 * takes it out of the loan — and has b->loan set, which lets it move
 * (placement_may_move) and puts it among the idle buffers (buffer_index).
 * When the wait ends (served, timed out, failed) the loan returns what it
 * lent (move_acquire_for: a swap-in ahead of every other move) and the
 * answer is queued once the last one is back. A session that closes
 * returns its loan's buffers of its process's other connections without
 * an answer; the loan is freed when nothing of it is on the way back.
 */
#ifndef GMD_LOAN_H
#define GMD_LOAN_H

#include <stdbool.h>
#include <stdint.h>

#include "answers.h"
#include "result.h"

typedef struct gmd_dbuffer gmd_dbuffer;
typedef struct gmd_session gmd_session;
typedef struct gmd_server gmd_server;

typedef struct gmd_loan {
        gmd_server *server;
        gmd_session *session;       /* NULL once it closed: nobody to answer */
        uint32_t request_id;        /* the waiting allocation */
        unsigned lent;              /* buffers lent (for the log) */
        unsigned returning;         /* on their way back */
        bool ended;                 /* the wait is over */
        answer_kind kind;           /* the answer, queued when all are back */
        gmd_result result;
} gmd_loan;

/* VRAM on `device` that processes other than `waiter`'s, at `priority` or
 * lower, hold in use and would lend if they waited: those that made a
 * wait that lends before (their client code lends when it waits, as
 * gpumem.torch does). Room a starved waiter may count on when it holds
 * such processes back (waitq.h). Walks the sessions once per session. */
uint64_t loan_would_lend(gmd_server *server, unsigned device,
                         const gmd_session *waiter, int priority);

/* Lend the buffers in VRAM that `s`'s process holds acquired (not pinned,
 * parked or lent already) for the allocation `request_id`, which waits.
 * NULL when there is nothing to lend (or no memory): it waits as without
 * the flag. */
gmd_loan *loan_start(gmd_session *s, uint32_t request_id);

/* VRAM on `device` that the loan's buffers need to come back: those out
 * on host memory or on their way there. */
uint64_t loan_out_bytes(const gmd_loan *loan, unsigned device);

/* Can the allocation of `size` bytes on `device` be served with room for
 * everything the loan must bring back there, all at once? */
bool loan_fits(const gmd_loan *loan, uint64_t size, unsigned device);

/* The wait is over with `kind` (ANSWER_ALLOCATED: `result` holds the new
 * buffer; ANSWER_ERROR: its text): bring back what was lent, and queue the
 * answer when the last one is back (at once when none is away). */
void loan_end(gmd_loan *loan, answer_kind kind, const gmd_result *result);

/* The loan was made for the client's acquire of `buffer`, which waits:
 * its grant or failure ends the loan (the answer, OK or the error, is
 * queued once what was lent is back), and its swap-in is served only with
 * room for what the loan must bring back too. */
void loan_take_acquire(gmd_loan *loan, gmd_dbuffer *buffer);

/* The owner released or freed a lent buffer: it is no longer the loan's
 * to bring back. */
void loan_forget(gmd_dbuffer *buffer);

/* `s` closes: its own buffers are freed next; what it lent of its
 * process's other connections goes back to them, unanswered. */
void loan_session_closed(gmd_session *s);

#endif
