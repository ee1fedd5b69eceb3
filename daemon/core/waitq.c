/*
 * waitq — see waitq.h. Each waiter has a uv_timer (armed only for an
 * allocation's deadline); a waiter leaves the queue at once when served,
 * timed out or cancelled, and its memory is freed from the timer's close
 * callback, so a waiter dropped from inside a callback stays valid until
 * that callback returns.
 */
#include "waitq.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "log.h"
#include "timeutil.h"

void waitq_init(gmd_waitq *q, uv_loop_t *loop, gmd_pending *pending,
                const gmd_waitq_ops *ops, void *ctx)
{
        q->loop = loop;
        q->pending = pending;
        q->ops = ops;
        q->ctx = ctx;
        list_init(&q->waiters);
        q->hold_after_us = 0;
        q->held = 0;
        q->held_lenders = 0;
        q->changes = 0;
        q->pass = 0;
        for (unsigned d = 0; d < 64; d++) {
                q->held_priority[d] = 0;
                q->holder[d] = NULL;
        }
}

void waitq_set_hold_after(gmd_waitq *q, uint64_t ms)
{
        q->hold_after_us = ms * 1000;
}

static void waiter_on_closed(uv_handle_t *handle)
{
        free(handle->data);
}

void waitq_drop(gmd_waiter *w)
{
        /* Serving a waiter can close its session, which drops the session's
         * waiters: the caller's drop that follows must then do nothing. */
        if (w->dropped)
                return;
        w->dropped = true;
        list_remove(&w->link);
        w->q->changes++;
        /* A waiter that held its device back does no longer: serve again. */
        if ((w->q->held >> (w->device % 64)) & 1) {
                w->q->held &= ~(1ull << (w->device % 64));
                w->q->held_lenders &= ~(1ull << (w->device % 64));
                pending_mark(w->q->pending, PENDING_ROOM);
        }
        if (w->rank == WAITQ_ALLOC)
                w->owner->n_waiting--;
        uv_timer_stop(&w->timer);
        uv_close((uv_handle_t *)&w->timer, waiter_on_closed);
}

static void waiter_on_deadline(uv_timer_t *timer)
{
        gmd_waiter *w = timer->data;

        w->q->ops->expire(w->q->ctx, w);
        waitq_drop(w);
}

/* Does `a` go before `b`? Rank, then priority, then the user's turn. */
static bool waiter_before(const gmd_waiter *a, const gmd_waiter *b)
{
        if (a->rank != b->rank)
                return a->rank < b->rank;
        if (a->priority != b->priority)
                return a->priority > b->priority;
        return a->turn < b->turn;
}

/* Its user's turn among the waiters of its rank and priority: one past
 * that user's last one there, or — for a user with none there — the turn
 * of the first one there, so a newcomer takes the next turn, not the
 * first one of all. */
static uint64_t waitq_turn(const gmd_waitq *q, const gmd_waiter *w)
{
        uint64_t first = UINT64_MAX, last = 0;
        bool mine = false;
        gmd_list *pos;

        list_for_each(pos, &q->waiters) {
                const gmd_waiter *o = container_of(pos, gmd_waiter, link);

                if (o->rank != w->rank || o->priority != w->priority)
                        continue;
                if (o->turn < first)
                        first = o->turn;
                if (o->uid == w->uid && (!mine || o->turn > last)) {
                        last = o->turn;
                        mine = true;
                }
        }
        if (mine)
                return last + 1;
        return first == UINT64_MAX ? 0 : first;
}

/* Insert behind every waiter that goes before it or ties with it. */
static void waitq_insert(gmd_waitq *q, gmd_waiter *w)
{
        gmd_list *pos;

        q->changes++;
        w->turn = waitq_turn(q, w);
        for (pos = q->waiters.prev; pos != &q->waiters; pos = pos->prev) {
                gmd_waiter *o = container_of(pos, gmd_waiter, link);

                if (!waiter_before(w, o))
                        break;
        }
        /* Link after `pos` (the head itself when every waiter goes after). */
        w->link.prev = pos;
        w->link.next = pos->next;
        pos->next->prev = &w->link;
        pos->next = &w->link;
}

static gmd_waiter *waiter_new(gmd_waitq *q, const gmd_waitq_who *who,
                              waitq_rank rank, uint64_t size, unsigned device)
{
        gmd_waiter *w = calloc(1, sizeof(*w));

        if (!w)
                return NULL;
        if (uv_timer_init(q->loop, &w->timer) < 0) {
                free(w);
                return NULL;
        }
        w->q = q;
        w->session = who->session;
        w->priority = who->priority;
        w->uid = who->uid;
        w->rank = rank;
        w->size = size;
        w->device = device;
        w->since_us = now_us();
        w->timer.data = w;
        return w;
}

int waitq_add(gmd_waitq *q, const gmd_waitq_who *who, gmd_waitq_owner *owner,
              uint32_t request_id, uint64_t asked, uint64_t size,
              unsigned device, unsigned flags, int64_t timeout_ms,
              uint64_t since_us, gmd_waiter **ret_waiter)
{
        gmd_waiter *w = waiter_new(q, who, WAITQ_ALLOC, size, device);

        if (!w)
                return -ENOMEM;
        w->owner = owner;
        w->request_id = request_id;
        w->asked = asked;
        w->flags = flags;
        w->since_us = since_us;
        w->timeout_ms = timeout_ms;
        if (timeout_ms > 0)
                uv_timer_start(&w->timer, waiter_on_deadline, (uint64_t)timeout_ms, 0);
        waitq_insert(q, w);
        owner->n_waiting++;
        /* Room: the pass serves it once, which decides whether it holds
         * its device back already (wait_hold_ms 0) and times the serve
         * at which it may; evict: make room for it. */
        pending_mark(q->pending, PENDING_ROOM | PENDING_EVICT);
        if (ret_waiter)
                *ret_waiter = w;
        return 0;
}

int waitq_add_move_in(gmd_waitq *q, const gmd_waitq_who *who, gmd_dbuffer *buffer,
                      uint64_t size, unsigned device, waitq_rank rank,
                      gmd_waiter **ret_waiter)
{
        gmd_waiter *w = waiter_new(q, who, rank, size, device);

        if (!w)
                return -ENOMEM;
        w->buffer = buffer;
        waitq_insert(q, w);
        pending_mark(q->pending, PENDING_ROOM);
        *ret_waiter = w;
        return 0;
}

void waitq_set_rank(gmd_waiter *w, waitq_rank rank)
{
        if (w->dropped || w->rank == rank || w->rank == WAITQ_ALLOC)
                return;
        list_remove(&w->link);
        w->rank = rank;
        waitq_insert(w->q, w);
        pending_mark(w->q->pending, PENDING_ROOM);
}

/* Has `w` waited long enough to hold back its device, and would holding
 * help (how room can be made for it; WAITQ_REACH_NO: not starved)? */
static waitq_reach waiter_starved(const gmd_waitq *q, const gmd_waiter *w,
                                  uint64_t now)
{
        if (now - w->since_us < q->hold_after_us)
                return WAITQ_REACH_NO;
        return q->ops->reachable ? q->ops->reachable(q->ctx, w) : WAITQ_REACH_NOW;
}

/* How long a hold for lenders only lasts: hold_after_ms, 1 s with strict
 * order (0). */
static uint64_t waitq_lent_hold_us(const gmd_waitq *q)
{
        return q->hold_after_us ? q->hold_after_us : 1000000;
}

/* Make `w`, which found no room, its device's holder if it is starved and
 * the device has none yet. `before`: the devices held already (logged
 * when they were). A hold for lenders only lasts hold_after_ms at most
 * (waitq.h), counted until the waiter is reachable now. */
static void waitq_try_hold(gmd_waitq *q, gmd_waiter *w, uint64_t before,
                           uint64_t now)
{
        unsigned dev = w->device % 64;
        uint64_t bit = 1ull << dev;
        waitq_reach reach;

        if ((q->held & bit) || !w->no_room)
                return;
        reach = waiter_starved(q, w, now);
        if (reach != WAITQ_REACH_LENT) {
                w->lent_hold_us = 0;
        } else {
                uint64_t limit = waitq_lent_hold_us(q);

                if (!w->lent_hold_us)
                        w->lent_hold_us = now;
                if (now - w->lent_hold_us > limit)
                        return;         /* the lenders did not come */
                /* Let go then, even if nothing else happens (marked at
                 * every pass: a timed mark may come early, pending.h). */
                pending_mark_after(q->pending, PENDING_ROOM,
                                   (limit - (now - w->lent_hold_us)) / 1000 + 1);
        }
        if (reach == WAITQ_REACH_NO)
                return;
        if (!(before & bit))
                log_info("a request for %llu bytes on device %u has waited "
                         "%llu ms: holding back smaller ones there%s "
                         "until it fits", (unsigned long long)w->size,
                         w->device,
                         (unsigned long long)((now - w->since_us) / 1000),
                         reach == WAITQ_REACH_LENT ? " that lend" : "");
        q->held |= bit;
        if (reach == WAITQ_REACH_LENT)
                q->held_lenders |= bit;
        q->held_priority[dev] = w->priority;
        q->holder[dev] = w;
}

/* The holders, found before serving (waitq.h: a holder holds back those
 * ahead of it in the order too): on each device the first starved waiter
 * in order that found no room when last served. */
static void waitq_find_holders(gmd_waitq *q, uint64_t before)
{
        uint64_t now = now_us();
        gmd_list *pos;

        q->held = 0;
        q->held_lenders = 0;
        list_for_each(pos, &q->waiters)
                waitq_try_hold(q, container_of(pos, gmd_waiter, link), before, now);
}

static bool waitq_held_back(const gmd_waitq *q, const gmd_waiter *w)
{
        return waitq_holds(q, w->device, w->priority, w->loan != NULL) &&
               w != q->holder[w->device % 64];
}

/* The device `dev` was held (by `holder` at `priority`, for lenders only
 * or not) and a waiter there was just served: find its holder again, as
 * waitq_find_holders would. The holder stays while it still may hold and
 * no waiter there found no room in this pass (`fresh`: one of those could
 * come before it in the order); else the first in order that may. Returns
 * whether the hold loosened, so that waiters it held back — ahead of the
 * walk too — may be served now. */
static bool waitq_rehold(gmd_waitq *q, unsigned dev, gmd_waiter *holder,
                         int priority, bool lenders, bool fresh,
                         uint64_t before)
{
        uint64_t bit = 1ull << dev, now = now_us();
        gmd_list *pos;

        q->held &= ~bit;
        q->held_lenders &= ~bit;
        q->holder[dev] = NULL;
        if (holder && !holder->dropped && !fresh)
                waitq_try_hold(q, holder, before, now);
        list_for_each(pos, &q->waiters) {
                gmd_waiter *o = container_of(pos, gmd_waiter, link);

                if (q->held & bit)
                        break;
                if (o->device % 64 == dev)
                        waitq_try_hold(q, o, before, now);
        }
        if (!(q->held & bit))
                return true;
        return q->held_priority[dev] < priority ||
               (((q->held_lenders >> dev) & 1) && !lenders);
}

/* The devices in `resting` (a waiter's copy queue rests after a refused
 * copy) hold back every waiter there. */
static void waitq_hold_resting(gmd_waitq *q, uint64_t resting)
{
        for (unsigned dev = 0; dev < 64; dev++) {
                if (!((resting >> dev) & 1))
                        continue;
                q->held |= 1ull << dev;
                q->held_lenders &= ~(1ull << dev);
                q->held_priority[dev] = INT_MAX;
                q->holder[dev] = NULL;
        }
}

/*
 * One walk in the queue's order. A waiter asked in this pass and left
 * waiting (no room, a resting copy queue, its quota) is not asked again
 * in it: serving others only takes room. What does send the walk back to
 * the head is a hold that loosened (its holder served, or left without
 * room to be made for it by what was served) — the waiters it held back
 * ahead of the walk go then, in their order, as the holder's own serve
 * would have let them — or serving one that changed the queue (its
 * session closed, a loan brought buffers back): holders are found again
 * and what was not asked yet is served in order. Before, the walk went
 * back to the head after every waiter served and asked again every one
 * that had not fit: k served among n waiting cost k * n asks.
 */
bool waitq_serve(gmd_waitq *q)
{
        gmd_list *pos;
        uint64_t before = q->held, fresh = 0, resting = 0;
        bool waiting = false;   /* some did not fit */
        int r;

        q->pass++;
        waitq_find_holders(q, before);
        before |= q->held;
        pos = q->waiters.next;
        while (pos != &q->waiters) {
                gmd_waiter *w = container_of(pos, gmd_waiter, link);
                unsigned dev = w->device % 64;
                uint64_t bit = 1ull << dev, changes;
                gmd_waiter *holder = q->holder[dev];
                int priority = q->held_priority[dev];
                bool held = (q->held >> dev) & 1;
                bool lenders = (q->held_lenders >> dev) & 1;

                if (w->tried == q->pass || waitq_held_back(q, w)) {
                        pos = pos->next;
                        continue;
                }
                changes = q->changes;
                r = q->ops->serve(q->ctx, w);
                w->no_room = r == -ENOSPC;
                if (r != 0)
                        w->tried = q->pass;
                if (r == -EAGAIN)
                        resting |= bit;
                if (q->changes != changes) {
                        /* The queue changed under the walk: the waiter
                         * served leaves, the rest goes again from the
                         * head with the holders found again. */
                        if (r == 0)
                                waitq_drop(w);
                        waitq_find_holders(q, before);
                        waitq_hold_resting(q, resting);
                        before |= q->held;
                        pos = q->waiters.next;
                        continue;
                }
                pos = pos->next;
                if (r == -EAGAIN) {
                        /* Its copy queue rests: every waiter behind it
                         * there waits too. */
                        waitq_hold_resting(q, resting);
                        continue;
                }
                if (r == -ENOSPC) {
                        uint64_t waited = now_us() - w->since_us;

                        waiting = true;
                        if (held)
                                fresh |= bit;
                        if (waited < q->hold_after_us)
                                /* Serve again when it may start to hold. */
                                pending_mark_after(q->pending, PENDING_ROOM,
                                                   (q->hold_after_us - waited) / 1000 + 1);
                        /* Starved: it holds those behind it from now on,
                         * those ahead from the next pass. */
                        waitq_try_hold(q, w, before, now_us());
                        before |= q->held;
                        continue;
                }
                if (r == -EINPROGRESS) {
                        /* A holder that waits for its own parked buffers
                         * holds back nobody: the holder is found again,
                         * and those it held go in this pass. */
                        if (w == holder && held &&
                            waitq_rehold(q, dev, NULL, priority, lenders,
                                         true, before))
                                pos = q->waiters.next;
                        before |= q->held;
                        continue;
                }
                log_debug("%s of %llu bytes served after %llu ms",
                          w->rank == WAITQ_ALLOC ? "allocation" : "swap-in",
                          (unsigned long long)w->size,
                          (unsigned long long)((now_us() - w->since_us) / 1000));
                waitq_drop(w);
                /* Served on a held device: the room it took may leave the
                 * holder with none to be made (or it was the holder). */
                if (held && waitq_rehold(q, dev, holder, priority, lenders,
                                         (fresh & bit) != 0, before))
                        pos = q->waiters.next;
                before |= q->held;
        }
        return waiting || q->held != 0;
}

bool waitq_held_by(const gmd_waitq *q, const gmd_waiter *w,
                   const gmd_waiter **ret_holder)
{
        if (!waitq_held_back(q, w))
                return false;
        *ret_holder = q->holder[w->device % 64];
        return true;
}

const gmd_waiter *waitq_oldest(const gmd_waitq *q, unsigned device)
{
        const gmd_waiter *oldest = NULL;
        gmd_list *pos;

        list_for_each(pos, &q->waiters) {
                const gmd_waiter *w = container_of(pos, gmd_waiter, link);

                if (w->device == device && (!oldest || w->since_us < oldest->since_us))
                        oldest = w;
        }
        return oldest;
}

int waitq_top_priority(const gmd_waitq *q, unsigned device)
{
        int top = INT_MIN;
        gmd_list *pos;

        list_for_each(pos, &q->waiters) {
                const gmd_waiter *w = container_of(pos, gmd_waiter, link);

                if (w->device == device && w->priority > top)
                        top = w->priority;
        }
        return top;
}

uint64_t waitq_demand_before(const gmd_waitq *q, unsigned device,
                             waitq_rank rank,
                             bool (*skip)(void *ctx, const gmd_waiter *w),
                             void *ctx)
{
        uint64_t bytes = 0;
        gmd_list *pos;

        list_for_each(pos, &q->waiters) {
                gmd_waiter *w = container_of(pos, gmd_waiter, link);

                if (w->device == device && w->rank < rank &&
                    !(skip && skip(ctx, w)))
                        bytes += w->size +
                                 (q->ops->more ? q->ops->more(q->ctx, w) : 0);
        }
        return bytes;
}

uint64_t waitq_demand(const gmd_waitq *q, unsigned device)
{
        return waitq_demand_before(q, device, WAITQ_RANKS, NULL, NULL);
}

unsigned waitq_count(const gmd_waitq *q)
{
        unsigned n = 0;
        gmd_list *pos;

        list_for_each(pos, &q->waiters)
                n++;
        return n;
}

void waitq_cancel_session(gmd_waitq *q, gmd_session *session)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &q->waiters) {
                gmd_waiter *w = container_of(pos, gmd_waiter, link);

                if (w->session == session && w->rank == WAITQ_ALLOC)
                        waitq_drop(w);
        }
}

void waitq_fail_all(gmd_waitq *q, int code, const char *message)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &q->waiters) {
                gmd_waiter *w = container_of(pos, gmd_waiter, link);

                q->ops->cancel(q->ctx, w, code, message);
                waitq_drop(w);
        }
}
