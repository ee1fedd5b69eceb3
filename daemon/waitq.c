/*
 * waitq — see waitq.h. Each waiter has its own uv_timer for its deadline;
 * a waiter leaves the queue at once when served, timed out or cancelled,
 * and its memory is freed from the timer's close callback.
 */
#include "waitq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem.pb-c.h"
#include "log.h"
#include "alloc.h"
#include "server.h"
#include "session.h"
#include "timeutil.h"

static void waiter_on_closed(uv_handle_t *handle)
{
        free(handle->data);
}

static void waiter_drop(gmd_waiter *w)
{
        /* Serving a waiter can close its session, which drops the session's
         * waiters: the caller's drop that follows must then do nothing. */
        if (w->dropped)
                return;
        w->dropped = true;
        list_remove(&w->link);
        w->session->n_waiting--;
        uv_timer_stop(&w->timer);
        uv_close((uv_handle_t *)&w->timer, waiter_on_closed);
}

static void waiter_on_deadline(uv_timer_t *timer)
{
        gmd_waiter *w = timer->data;
        gmd_pool *pool = server_vram_pool(w->server, w->device);
        char asked[32], free_b[32], cap[32], name[32];

        size_format(w->size, asked, sizeof(asked));
        size_format(pool_free(pool), free_b, sizeof(free_b));
        size_format(pool->capacity, cap, sizeof(cap));
        session_send_error(w->session, w->request_id,
                           GMD__ERROR_CODE__ERR_TIMED_OUT,
                           "waited %lld ms for %s on %s; it has %s free of %s "
                           "(others hold the rest: see gpu-memctl status)",
                           (long long)w->timeout_ms, asked,
                           pool_describe(pool, name, sizeof(name)), free_b, cap);
        waiter_drop(w);
}

int waitq_add(gmd_server *server, gmd_session *session, uint32_t request_id,
              uint64_t asked, uint64_t size, unsigned device, unsigned flags,
              int64_t timeout_ms, uint64_t since_us)
{
        gmd_waiter *w = calloc(1, sizeof(*w));
        int r;

        if (!w)
                return -ENOMEM;
        w->server = server;
        w->session = session;
        w->request_id = request_id;
        w->asked = asked;
        w->size = size;
        w->device = device;
        w->flags = flags;
        w->since_us = since_us;
        w->timeout_ms = timeout_ms;
        r = uv_timer_init(server->loop, &w->timer);
        if (r < 0) {
                free(w);
                return r;
        }
        w->timer.data = w;
        if (timeout_ms > 0)
                uv_timer_start(&w->timer, waiter_on_deadline, (uint64_t)timeout_ms, 0);
        list_add_tail(&server->waiters, &w->link);
        session->n_waiting++;
        return 0;
}

void waitq_run(gmd_server *server)
{
        gmd_list *pos, *tmp;
        uint64_t blocked = 0;   /* bit per device whose head does not fit */

        list_for_each_safe(pos, tmp, &server->waiters) {
                gmd_waiter *w = container_of(pos, gmd_waiter, link);
                uint64_t bit = 1ull << (w->device % 64);
                int r;

                if (blocked & bit)
                        continue;
                r = alloc_now(w->session, w->request_id, w->size,
                              w->device, w->flags, w->since_us);
                if (r == -ENOSPC) {
                        blocked |= bit;
                        continue;
                }
                if (r == 0)
                        w->server->stats.alloc_waited++;
                log_debug("client %llu: allocation of %llu bytes served after %llu ms",
                          (unsigned long long)w->session->id,
                          (unsigned long long)w->size,
                          (unsigned long long)((now_us() - w->since_us) / 1000));
                /* tmp may have been freed if serving closed a session that
                 * had waiters behind this one; restart from the head. */
                waiter_drop(w);
                tmp = server->waiters.next;
                blocked = 0;
        }
}

void waitq_cancel_session(gmd_server *server, gmd_session *session)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &server->waiters) {
                gmd_waiter *w = container_of(pos, gmd_waiter, link);

                if (w->session == session)
                        waiter_drop(w);
        }
}

void waitq_fail_all(gmd_server *server, int code, const char *message)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &server->waiters) {
                gmd_waiter *w = container_of(pos, gmd_waiter, link);

                session_send_error(w->session, w->request_id, code, "%s", message);
                waiter_drop(w);
        }
}
