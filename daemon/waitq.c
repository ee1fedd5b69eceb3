/*
 * waitq — see waitq.h. Each waiter has a uv_timer (armed only for an
 * allocation's deadline); a waiter leaves the queue at once when served,
 * timed out or cancelled, and its memory is freed from the timer's close
 * callback, so a waiter dropped from inside a callback stays valid until
 * that callback returns.
 */
#include "waitq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "backing.h"
#include "buffer.h"
#include "gpumem.pb-c.h"
#include "log.h"
#include "move.h"
#include "pending.h"
#include "server.h"
#include "session.h"
#include "timeutil.h"

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
        if (w->rank == WAITQ_ALLOC)
                w->session->n_waiting--;
        uv_timer_stop(&w->timer);
        uv_close((uv_handle_t *)&w->timer, waiter_on_closed);
}

static void waiter_on_deadline(uv_timer_t *timer)
{
        gmd_waiter *w = timer->data;
        gmd_pool *pool = server_vram_pool(w->server, w->device);
        char asked[32], free_b[32], cap[32], name[32], host[160] = "";

        /* VRAM first, then host: a SPILLABLE allocation that got no VRAM
         * in time lives on the host tier, where the GPU still reads it. */
        if ((w->flags & GMD_ALLOC_SPILLABLE) &&
            alloc_now_on(w->session, w->request_id, w->size, w->device, w->flags,
                         GMD_TIER_HOST, w->since_us) != -ENOSPC) {
                waitq_drop(w);
                return;
        }
        if (w->flags & GMD_ALLOC_SPILLABLE)
                backing_no_host_room(w->server, host, sizeof(host));
        size_format(w->size, asked, sizeof(asked));
        size_format(pool_free(pool), free_b, sizeof(free_b));
        size_format(pool->capacity, cap, sizeof(cap));
        session_send_error(w->session, w->request_id,
                           GMD__ERROR_CODE__ERR_TIMED_OUT,
                           "waited %lld ms for %s on %s; it has %s free of %s "
                           "and nothing idle could be moved out in time%s "
                           "(see gpu-memctl status)",
                           (long long)w->timeout_ms, asked,
                           pool_describe(pool, name, sizeof(name)), free_b, cap,
                           host);
        waitq_drop(w);
}

/* Insert behind every waiter of the same or a better rank. */
static void waitq_insert(gmd_server *server, gmd_waiter *w)
{
        gmd_list *pos;

        for (pos = server->waiters.prev; pos != &server->waiters; pos = pos->prev) {
                gmd_waiter *o = container_of(pos, gmd_waiter, link);

                if (o->rank <= w->rank)
                        break;
        }
        /* Link after `pos` (the head itself when every waiter ranks lower). */
        w->link.prev = pos;
        w->link.next = pos->next;
        pos->next->prev = &w->link;
        pos->next = &w->link;
}

static gmd_waiter *waiter_new(gmd_server *server, gmd_session *session,
                              waitq_rank rank, uint64_t size, unsigned device)
{
        gmd_waiter *w = calloc(1, sizeof(*w));

        if (!w)
                return NULL;
        if (uv_timer_init(server->loop, &w->timer) < 0) {
                free(w);
                return NULL;
        }
        w->server = server;
        w->session = session;
        w->rank = rank;
        w->size = size;
        w->device = device;
        w->since_us = now_us();
        w->timer.data = w;
        return w;
}

int waitq_add(gmd_server *server, gmd_session *session, uint32_t request_id,
              uint64_t asked, uint64_t size, unsigned device, unsigned flags,
              int64_t timeout_ms, uint64_t since_us)
{
        gmd_waiter *w = waiter_new(server, session, WAITQ_ALLOC, size, device);

        if (!w)
                return -ENOMEM;
        w->request_id = request_id;
        w->asked = asked;
        w->flags = flags;
        w->since_us = since_us;
        w->timeout_ms = timeout_ms;
        if (timeout_ms > 0)
                uv_timer_start(&w->timer, waiter_on_deadline, (uint64_t)timeout_ms, 0);
        waitq_insert(server, w);
        session->n_waiting++;
        pending_mark(&server->pending, PENDING_EVICT);
        return 0;
}

int waitq_add_move_in(gmd_server *server, gmd_dbuffer *buffer, waitq_rank rank,
                      gmd_waiter **ret_waiter)
{
        gmd_waiter *w = waiter_new(server, buffer->owner, rank, buffer->size,
                                   buffer->device);

        if (!w)
                return -ENOMEM;
        w->buffer = buffer;
        waitq_insert(server, w);
        pending_mark(&server->pending, PENDING_ROOM);
        *ret_waiter = w;
        return 0;
}

void waitq_set_rank(gmd_server *server, gmd_waiter *w, waitq_rank rank)
{
        if (w->dropped || w->rank == rank || w->rank == WAITQ_ALLOC)
                return;
        list_remove(&w->link);
        w->rank = rank;
        waitq_insert(server, w);
        pending_mark(&server->pending, PENDING_ROOM);
}

/* Try to serve one waiter: 0 served (or answered), -ENOSPC no room yet,
 * -EAGAIN its device's copy queue rests after a refused copy (a swap-in).
 * Either holds back those behind it on its device. */
static int waiter_serve(gmd_waiter *w)
{
        int r;

        if (w->rank == WAITQ_ALLOC) {
                r = alloc_now_on(w->session, w->request_id, w->size, w->device,
                                 w->flags, GMD_TIER_VRAM, w->since_us);
                if (r == 0)
                        w->server->stats.alloc_waited++;
                return r;
        }
        return move_in_begin(w->server, w->buffer);
}

bool waitq_serve(gmd_server *server)
{
        gmd_list *pos, *tmp;
        uint64_t blocked = 0;   /* bit per device whose first waiter does not fit */
        int r;

        list_for_each_safe(pos, tmp, &server->waiters) {
                gmd_waiter *w = container_of(pos, gmd_waiter, link);
                uint64_t bit = 1ull << (w->device % 64);

                if (blocked & bit)
                        continue;
                r = waiter_serve(w);
                if (r == -ENOSPC || r == -EAGAIN) {
                        blocked |= bit;
                        continue;
                }
                log_debug("client %llu: %s of %llu bytes served after %llu ms",
                          (unsigned long long)w->session->id,
                          w->rank == WAITQ_ALLOC ? "allocation" : "swap-in",
                          (unsigned long long)w->size,
                          (unsigned long long)((now_us() - w->since_us) / 1000));
                /* Serving may close a session and drop waiters behind this
                 * one: drop this one and restart from the head. */
                waitq_drop(w);
                tmp = server->waiters.next;
                blocked = 0;
        }
        return blocked != 0;
}

uint64_t waitq_demand(gmd_server *server, unsigned device)
{
        uint64_t bytes = 0;
        gmd_list *pos;

        list_for_each(pos, &server->waiters) {
                gmd_waiter *w = container_of(pos, gmd_waiter, link);

                if (w->device == device)
                        bytes += w->size;
        }
        return bytes;
}

void waitq_cancel_session(gmd_server *server, gmd_session *session)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &server->waiters) {
                gmd_waiter *w = container_of(pos, gmd_waiter, link);

                if (w->session == session && w->rank == WAITQ_ALLOC)
                        waitq_drop(w);
        }
}

void waitq_fail_all(gmd_server *server, int code, const char *message)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &server->waiters) {
                gmd_waiter *w = container_of(pos, gmd_waiter, link);

                if (w->rank == WAITQ_ALLOC)
                        session_send_error(w->session, w->request_id, code, "%s",
                                           message);
                else
                        move_in_cancelled(w->buffer);
                waitq_drop(w);
        }
}
