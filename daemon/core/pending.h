/*
 * pending — what changed since the scheduling pass (scheduler.h) last ran.
 *
 * Lower modules never restart the scheduler themselves: when room comes
 * back, a copy ends, a session is to be closed, a move ends or a session
 * is owed an answer, they mark it here and return. The mark arms a libuv
 * check handle (run right after this loop iteration's I/O callbacks) and
 * an idle handle (which only keeps the poll from blocking when the mark
 * came from a timer), and the pass then does the work once, in its fixed
 * order, before the loop waits again. This header is all a lower module
 * needs, so nothing below the pass includes the pass.
 */
#ifndef GMD_PENDING_H
#define GMD_PENDING_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "list.h"

typedef enum pending_work {
        PENDING_COPIES = 1u << 0,   /* a copy ended: end its move */
        PENDING_CLOSES = 1u << 1,   /* a session is to be closed */
        PENDING_ROOM = 1u << 2,     /* memory came back, or a waiter came or
                                     * moved up: serve the wait queue */
        PENDING_EVICT = 1u << 3,    /* a waiter does not fit, or a buffer
                                     * became evictable: make room */
        PENDING_WAITS = 1u << 4,    /* a move ended or was dropped: answer
                                     * the MSG_WAITs now met */
        PENDING_ANSWERS = 1u << 5,  /* a session is owed answers (answers.h):
                                     * request.c builds and sends them */
} pending_work;

/* Timed marks kept apart; past that many, a new one joins the nearest
 * (and so may run early: whoever asked for it asks again from that pass). */
#define PENDING_LATERS 8

typedef struct gmd_pending {
        unsigned work;              /* pending_work bits */
        unsigned next;              /* for the next loop iteration's pass
                                     * (pending_mark_next) */
        bool open;                  /* the handles below are initialised */
        uv_check_t check;           /* runs the pass */
        uv_idle_t idle;             /* keeps the poll from blocking */
        uv_check_cb run;
        uv_idle_cb spin;
        uv_timer_t later;           /* pending_mark_after: armed for the
                                     * earliest of the marks below */
        struct pending_later {
                uint64_t due_ms;    /* loop clock (uv_now) */
                unsigned work;
        } laters[PENDING_LATERS];   /* timed marks, soonest first */
        unsigned n_laters;
} gmd_pending;

/* Something changed: the pass runs before the loop waits again. */
static inline void pending_mark(gmd_pending *p, unsigned work)
{
        p->work |= work;
        if (p->open) {
                uv_check_start(&p->check, p->run);
                uv_idle_start(&p->idle, p->spin);
        }
}

/*
 * Mark `work` for the pass of the next loop iteration, not this one's: a
 * step that does a bounded part of a long job each pass (closing a
 * session with many buffers, a batch at a time) lets the loop read every
 * socket between two parts. The handles stay started, so the loop polls
 * without blocking in between. A mark made outside the pass also runs
 * this iteration's pass, which hands it on.
 */
static inline void pending_mark_next(gmd_pending *p, unsigned work)
{
        if (!p->open) {
                p->work |= work;
                return;
        }
        p->next |= work;
        uv_check_start(&p->check, p->run);
        uv_idle_start(&p->idle, p->spin);
}

static inline void pending_on_later(uv_timer_t *timer);

/* Arm the timer for the soonest timed mark, or stop it. */
static inline void pending_arm(gmd_pending *p)
{
        uint64_t now = uv_now(p->later.loop);

        if (!p->n_laters) {
                uv_timer_stop(&p->later);
                return;
        }
        uv_timer_start(&p->later, pending_on_later,
                       p->laters[0].due_ms > now ? p->laters[0].due_ms - now : 0, 0);
}

/* The timer: mark what is due, arm for the next. */
static inline void pending_on_later(uv_timer_t *timer)
{
        gmd_pending *p = container_of(timer, gmd_pending, later);
        uint64_t now = uv_now(timer->loop);
        unsigned work = 0, i = 0;

        while (i < p->n_laters && p->laters[i].due_ms <= now)
                work |= p->laters[i++].work;
        p->n_laters -= i;
        for (unsigned j = 0; j < p->n_laters; j++)
                p->laters[j] = p->laters[j + i];
        pending_arm(p);
        if (work)
                pending_mark(p, work);
}

/* Mark `work` in `ms` milliseconds, counted on the real clock (a copy
 * queue that refused a copy rests for a while: what waits for it is
 * served once it is usable again). Each mark keeps its own time (up to
 * PENDING_LATERS of them; one within a millisecond of another joins it):
 * a priority's grace of 400 ms behind a waiter's 5 s hold waited the 5 s
 * when one timer kept the first time asked. */
static inline void pending_mark_after(gmd_pending *p, unsigned work, uint64_t ms)
{
        uint64_t due;
        unsigned i;

        if (!p->open)
                return;
        uv_update_time(p->later.loop);
        due = uv_now(p->later.loop) + ms;
        for (i = 0; i < p->n_laters; i++) {
                uint64_t d = p->laters[i].due_ms;

                if (d <= due + 1 && due <= d + 1) {
                        p->laters[i].work |= work;
                        return;
                }
        }
        if (p->n_laters == PENDING_LATERS) {
                /* Full: join the last (it runs no later than asked). */
                struct pending_later *last = &p->laters[PENDING_LATERS - 1];

                last->work |= work;
                if (due < last->due_ms)
                        last->due_ms = due;
        } else {
                p->laters[p->n_laters++] = (struct pending_later){ due, work };
        }
        /* Soonest first: one insertion step. */
        for (i = p->n_laters - 1; i > 0 &&
             p->laters[i].due_ms < p->laters[i - 1].due_ms; i--) {
                struct pending_later t = p->laters[i];

                p->laters[i] = p->laters[i - 1];
                p->laters[i - 1] = t;
        }
        pending_arm(p);
}

#endif
