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

typedef struct gmd_pending {
        unsigned work;              /* pending_work bits */
        bool open;                  /* the handles below are initialised */
        uv_check_t check;           /* runs the pass */
        uv_idle_t idle;             /* keeps the poll from blocking */
        uv_check_cb run;
        uv_idle_cb spin;
        uv_timer_t later;           /* pending_mark_after */
        unsigned later_work;
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

static inline void pending_on_later(uv_timer_t *timer)
{
        gmd_pending *p = container_of(timer, gmd_pending, later);
        unsigned work = p->later_work;

        p->later_work = 0;
        pending_mark(p, work);
}

/* Mark `work` in `ms` milliseconds, counted on the real clock (a copy
 * queue that refused a copy rests for a while: what waits for it is
 * served once it is usable again). A mark already timed stays as timed. */
static inline void pending_mark_after(gmd_pending *p, unsigned work, uint64_t ms)
{
        if (!p->open)
                return;
        p->later_work |= work;
        if (!uv_is_active((uv_handle_t *)&p->later)) {
                uv_update_time(p->later.loop);
                uv_timer_start(&p->later, pending_on_later, ms, 0);
        }
}

#endif
