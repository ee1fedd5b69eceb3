/*
 * scheduler — see scheduler.h for the order of the pass (copies, closes,
 * room, evict, waits, answers), why, and who marks what. The
 * handles are closed by the pass itself once the server is stopping and no
 * copy is in flight any more: an orphaned move's memory is released by the
 * pass that follows its last copy.
 */
#include "scheduler.h"

#include <errno.h>

#include "alloc.h"
#include "answers.h"
#include "copyq.h"
#include "evict.h"
#include "loan.h"
#include "move.h"
#include "pending.h"
#include "persist.h"
#include "request.h"
#include "restore.h"
#include "server.h"
#include "session.h"
#include "session_io.h"
#include "slice.h"
#include "tiering.h"
#include "timeutil.h"
#include "waitq.h"

/* ---- what serving a waiter means (waitq.h) ----------------------------- */

/* Answer a waiting allocation: now, or — when it lent what its process
 * holds (GMD_ALLOC_YIELD) — once all of that is back in VRAM (loan.h). */
static void waiter_answer(gmd_waiter *w, gmd_outcome outcome, gmd_result *res)
{
        if (!w->loan) {
                request_answer(w->session, w->request_id, outcome, res);
                return;
        }
        loan_end(w->loan, outcome == OUTCOME_ALLOCATED ? ANSWER_ALLOCATED :
                          ANSWER_ERROR, res);
        w->loan = NULL;
}

/* Does another process's slice of `w`'s device run and keep what `w`
 * needs (server_slice_keeps)? Then `w` is served after the slice. */
static bool slice_holds_back(gmd_server *server, const gmd_waiter *w)
{
        uint64_t left_ms;

        if (!server_slice_keeps(server, w->device, w->session->pid, w->priority,
                                w->size + loan_out_bytes(w->loan, w->device),
                                &left_ms))
                return false;
        pending_mark_after(&server->pending, PENDING_ROOM, left_ms + 1);
        return true;
}

static int waiter_try(gmd_server *server, gmd_waiter *w)
{
        gmd_result res;
        int r;

        /* Served with room for what it lent too, or not yet. */
        if (w->loan && !loan_fits(w->loan, w->size, w->device))
                return -ENOSPC;
        if (w->rank != WAITQ_ALLOC)
                return move_in_begin(server, w->buffer);
        result_ok(&res);
        r = alloc_now_on(w->session, w->size, w->device, w->flags,
                         GMD_TIER_VRAM, w->since_us, &res);
        if (r == 0) {
                waiter_answer(w, OUTCOME_ALLOCATED, &res);
                server->stats.alloc_waited++;
        } else if (!alloc_must_wait(r)) {
                waiter_answer(w, OUTCOME_ERROR, &res);
        } else if (r == -ENOSPC) {
                /* GMD_ALLOC_NO_SELF_WAIT: only its own process could make
                 * the room: answered now, it leaves the queue. */
                gmd_outcome o = alloc_self_bound(w->session, w->size, w->device,
                                                 w->flags, w->since_us, &res);

                if (o == OUTCOME_LATER)
                        return r;
                if (o == OUTCOME_ALLOCATED)
                        server->stats.alloc_waited++;
                waiter_answer(w, o, &res);
                return 0;
        }
        return r;
}

static int waiter_serve(void *ctx, gmd_waiter *w)
{
        gmd_server *server = ctx;
        unsigned device = w->device;
        pid_t pid = w->session->pid;
        int r;

        if (slice_holds_back(server, w))
                return -ENOSPC;
        r = waiter_try(server, w);
        if (r == 0)
                slice_served(&server->slices, device, pid, now_ms());
        return r;
}

static uint64_t waiter_more(void *ctx, const gmd_waiter *w)
{
        (void)ctx;
        return loan_out_bytes(w->loan, w->device);
}

static waitq_reach waiter_reachable(void *ctx, const gmd_waiter *w)
{
        gmd_server *server = ctx;
        /* Its own process's lent buffers count as evictable VRAM, but are
         * no room for it: evicted, they are more to bring back; nor are
         * those of a priority above its own (evict.h). */
        uint64_t need = w->size + waiter_more(ctx, w) +
                        evict_lent_bytes(server, w->device, w->session->pid,
                                         w->priority);
        uint64_t lend;

        /* Another process's slice of the device runs: its memory is not
         * room for this one until it ends, so holding back would only
         * stall the holder. */
        if (server_slice_over(server, w->device, w->session->pid,
                              w->priority, now_ms(), NULL))
                return WAITQ_REACH_NO;
        if (evict_room_reachable(ctx, w->device, need))
                return WAITQ_REACH_NOW;
        /* VRAM in use by processes that lend when they wait: room once
         * they are held back and wait (waitq.h). Not that of a process
         * that never lent: holding it back could lock it out for good. */
        lend = loan_would_lend(server, w->device, w->session, w->priority);
        if (lend && evict_room_reachable(ctx, w->device,
                                         need > lend ? need - lend : 0))
                return WAITQ_REACH_LENT;
        return WAITQ_REACH_NO;
}

static void waiter_expire(void *ctx, gmd_waiter *w)
{
        gmd_result res;

        (void)ctx;
        result_ok(&res);
        waiter_answer(w, alloc_expired(w->session, w, &res), &res);
}

static void waiter_cancel(void *ctx, gmd_waiter *w, int code, const char *message)
{
        gmd_result res;

        (void)ctx;
        if (w->rank == WAITQ_ALLOC) {
                result_error(&res, code, "%s", message);
                waiter_answer(w, OUTCOME_ERROR, &res);
        } else {
                move_in_cancelled(w->buffer);
        }
}

const gmd_waitq_ops scheduler_waitq_ops = {
        .serve = waiter_serve,
        .reachable = waiter_reachable,
        .more = waiter_more,
        .expire = waiter_expire,
        .cancel = waiter_cancel,
};

/* ---- the pass ------------------------------------------------------------ */

static void pass_end_copies(gmd_server *server)
{
        gmd_copy *c;

        while ((c = copyq_take_ended(&server->copyqs)))
                move_copy_ended(server, c);
}

/* Close the sessions marked, then free a batch of the buffers of those
 * closing in steps (session.h): as many as this loop iteration may still
 * free, oldest close first; one whose last buffer goes is closed. While
 * any is left, the step is marked again for the next iteration's pass,
 * so the loop reads every socket in between. */
static void pass_close_sessions(gmd_server *server)
{
        gmd_sessions *sessions = &server->sessions;

        while (!list_empty(&sessions->close_pending)) {
                gmd_session *s = container_of(sessions->close_pending.next,
                                              gmd_session, close_link);

                /* An empty reason: the peer went, nothing to warn of. */
                session_close(s, s->close_reason[0] ? s->close_reason : NULL);
        }
        while (!list_empty(&sessions->closing) && sessions->release_left > 0) {
                gmd_session *s = container_of(sessions->closing.next,
                                              gmd_session, close_link);

                session_close(s, NULL);
                /* Still first: its batch's time ran out. */
                if (sessions->closing.next == &s->close_link)
                        break;
        }
        if (!list_empty(&sessions->closing))
                pending_mark_next(&server->pending, PENDING_CLOSES);
}

static void pass_answer_waits(gmd_server *server)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &server->sessions.all)
                tiering_waits_answer(container_of(pos, gmd_session, link));
}

/* Each session owed answers, in the order they were queued: request.c
 * builds each reply and sends the packets held behind them. A session
 * leaves the due list once nothing is left (or it closed). */
static void pass_send_answers(gmd_server *server)
{
        gmd_answers *q;

        while ((q = answers_first_due(&server->sessions.answers_due)))
                request_send_answers(container_of(q, gmd_session, answers));
}

static void pass_run(gmd_server *server)
{
        gmd_pending *p = &server->pending;

        while (p->work) {
                if (p->work & PENDING_COPIES) {
                        p->work &= ~PENDING_COPIES;
                        pass_end_copies(server);
                }
                if (p->work & PENDING_CLOSES) {
                        p->work &= ~PENDING_CLOSES;
                        pass_close_sessions(server);
                }
                if (p->work & PENDING_ROOM) {
                        p->work &= ~PENDING_ROOM;
                        /* Claims past due give their room back first;
                         * arena pieces grown since are kept (persist.h). */
                        restore_tick(server);
                        persist_upkeep(server);
                        if (waitq_serve(&server->waitq))
                                p->work |= PENDING_EVICT;
                }
                if (p->work & PENDING_EVICT) {
                        p->work &= ~PENDING_EVICT;
                        if (evict_balance(server))
                                p->work |= PENDING_ROOM;
                }
                if (p->work & PENDING_WAITS) {
                        p->work &= ~PENDING_WAITS;
                        pass_answer_waits(server);
                }
                if (p->work & PENDING_ANSWERS) {
                        p->work &= ~PENDING_ANSWERS;
                        pass_send_answers(server);
                }
        }
}

static void scheduler_on_check(uv_check_t *check)
{
        gmd_server *server = container_of(check, gmd_server, pending.check);
        gmd_pending *p = &server->pending;

        pass_run(server);
        if (p->next) {
                /* Marked for the next iteration (pending_mark_next): the
                 * handles stay started, so the loop polls without
                 * blocking and this runs again after its I/O. */
                p->work |= p->next;
                p->next = 0;
        } else {
                uv_check_stop(&p->check);
                uv_idle_stop(&p->idle);
        }
        if (server->stopping && !server->copyqs.wake_open && p->open) {
                p->open = false;
                uv_close((uv_handle_t *)&p->check, NULL);
                uv_close((uv_handle_t *)&p->idle, NULL);
                uv_close((uv_handle_t *)&p->later, NULL);
        }
}

static void scheduler_on_idle(uv_idle_t *idle)
{
        (void)idle;     /* only keeps the poll from blocking */
}

int scheduler_start(gmd_server *server)
{
        gmd_pending *p = &server->pending;
        int r;

        r = uv_check_init(server->loop, &p->check);
        if (r < 0)
                return r;
        r = uv_idle_init(server->loop, &p->idle);
        if (r < 0) {
                uv_close((uv_handle_t *)&p->check, NULL);
                return r;
        }
        r = uv_timer_init(server->loop, &p->later);
        if (r < 0) {
                uv_close((uv_handle_t *)&p->check, NULL);
                uv_close((uv_handle_t *)&p->idle, NULL);
                return r;
        }
        p->run = scheduler_on_check;
        p->spin = scheduler_on_idle;
        p->open = true;
        if (p->work)
                pending_mark(p, 0);
        return 0;
}
