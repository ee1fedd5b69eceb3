/*
 * tiering — see tiering.h. A request naming buffers is checked whole
 * before anything moves: one bad id answers an error and moves nothing.
 * An empty list means "all of mine", skipping what cannot move instead of
 * failing on it.
 */
#include "tiering.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backing.h"
#include "buffer.h"
#include "log.h"
#include "move.h"
#include "server.h"
#include "session.h"
#include "timeutil.h"

/* Ids one request may name (the packet bound keeps it lower anyway). */
#define TIERING_MAX_IDS 8192

void tiering_handle_acquire(gmd_session *s, uint32_t id,
                            const Gmd__AcquireRequest *m)
{
        gmd_dbuffer *b = buffer_find(s->server, s, m->buffer_id);

        if (!b || b->parked) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_NOT_FOUND,
                                   "no buffer %llu belongs to this client",
                                   (unsigned long long)m->buffer_id);
                return;
        }
        move_acquire(s, id, b, m->timeout_ms);
}

static bool pinned(const gmd_dbuffer *b)
{
        return (b->flags & (GMD_ALLOC_PIN_VRAM | GMD_ALLOC_LEGACY_IPC)) != 0;
}

/* Check every named buffer; NULL after an error reply. */
static gmd_dbuffer **named_buffers(gmd_session *s, uint32_t id, const uint64_t *ids,
                                   size_t n, bool for_pageout)
{
        gmd_dbuffer **out;

        if (n > TIERING_MAX_IDS) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_LIMIT,
                                   "at most %d buffers per request", TIERING_MAX_IDS);
                return NULL;
        }
        out = calloc(n ? n : 1, sizeof(*out));
        if (!out) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INTERNAL, "out of memory");
                return NULL;
        }
        for (size_t i = 0; i < n; i++) {
                gmd_dbuffer *b = buffer_find(s->server, s, ids[i]);
                const char *why = NULL;
                int code = GMD__ERROR_CODE__ERR_INVALID;

                if (!b || b->parked) {
                        code = GMD__ERROR_CODE__ERR_NOT_FOUND;
                        why = "does not belong to this client";
                } else if (pinned(b)) {
                        why = "cannot move (PIN_VRAM or legacy IPC)";
                } else if (b->acquirer) {
                        code = GMD__ERROR_CODE__ERR_BUSY;
                        why = "has an acquire waiting for it";
                } else if (for_pageout && b->acquired) {
                        /* SPILLABLE too: its owner may write it at any
                         * moment, and no copy can hold what is written
                         * after it (move.h). */
                        code = GMD__ERROR_CODE__ERR_BUSY;
                        why = "is acquired: release it first (a buffer in use "
                              "never moves; a SPILLABLE one in use stays where "
                              "it is)";
                } else if (!for_pageout && b->acquired) {
                        code = GMD__ERROR_CODE__ERR_BUSY;
                        why = "is acquired where it is: release it, and the "
                              "next acquire brings it to VRAM";
                }
                if (why) {
                        session_send_error(s, id, code, "buffer %llu %s",
                                           (unsigned long long)ids[i], why);
                        free(out);
                        return NULL;
                }
                out[i] = b;
        }
        return out;
}

/* Answer and return false when this backend cannot move buffers. */
static bool can_move_or_reply(gmd_session *s, uint32_t id)
{
        if (server_can_move(s->server))
                return true;
        session_send_error(s, id, GMD__ERROR_CODE__ERR_UNSUPPORTED,
                           "the %s backend cannot move buffers between VRAM and "
                           "host memory yet", s->server->backend->ops->name);
        return false;
}

static int pageout_one(gmd_server *server, gmd_dbuffer *b, move_class cls)
{
        if (b->tier == GMD_TIER_HOST) {
                move_cancel(server, b);   /* a pageout overrides a prefetch */
                return 0;
        }
        if (b->move || b->move_waiter)
                return 0;                 /* already leaving */
        return move_out_start(server, b, cls);
}

static void host_full_error(gmd_session *s, uint32_t id)
{
        gmd_pool *host = &s->server->host_pool;
        char f[32], c[32], p[32];

        session_send_error(s, id, GMD__ERROR_CODE__ERR_NO_MEMORY,
                           "not enough host memory to page out: the host pool "
                           "has %s free of %s, and %s is pinned (host arena "
                           "included); raise [pools] host_limit (--host-limit)",
                           size_format(pool_free(host), f, sizeof(f)),
                           size_format(host->capacity, c, sizeof(c)),
                           size_format(backing_pinned(s->server), p, sizeof(p)));
}

int tiering_pageout_all(gmd_session *s, move_class cls)
{
        gmd_list *pos, *tmp;
        int n = 0, r;

        list_for_each_safe(pos, tmp, &s->buffers) {
                gmd_dbuffer *b = container_of(pos, gmd_dbuffer, owner_link);

                if (pinned(b) || b->parked || b->acquired || b->acquirer ||
                    b->tier != GMD_TIER_VRAM || move_busy(b))
                        continue;
                r = move_out_start(s->server, b, cls);
                if (r < 0)
                        return r;
                n++;
        }
        return n;
}

void tiering_handle_pageout(gmd_session *s, uint32_t id, const Gmd__MoveRequest *m)
{
        gmd_dbuffer **bufs;
        int r = 0;

        if (!can_move_or_reply(s, id))
                return;
        if (m->n_buffer_ids == 0) {
                r = tiering_pageout_all(s, MOVE_BULK);
        } else {
                bufs = named_buffers(s, id, m->buffer_ids, m->n_buffer_ids, true);
                if (!bufs)
                        return;
                for (size_t i = 0; i < m->n_buffer_ids && r >= 0; i++)
                        r = pageout_one(s->server, bufs[i], MOVE_BULK);
                free(bufs);
        }
        if (r == -ENOSPC)
                host_full_error(s, id);
        else if (r < 0)
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INTERNAL,
                                   "cannot start the move: %s", strerror(-r));
        else
                session_reply_ok(s, id);
}

static int prefetch_one(gmd_server *server, gmd_dbuffer *b)
{
        if (b->acquired || b->acquirer)
                return 0;       /* in use where it is, or on its way */
        if (b->move && b->move->dir == GMD_COPY_OUT && !b->move->finished) {
                move_cancel(server, b);   /* still in VRAM: keep it there */
                return 0;
        }
        if (b->tier != GMD_TIER_HOST || move_busy(b))
                return 0;
        return move_in_request(server, b, WAITQ_PREFETCH);
}

void tiering_handle_prefetch(gmd_session *s, uint32_t id, const Gmd__MoveRequest *m)
{
        gmd_dbuffer **bufs;
        gmd_list *pos, *tmp;
        int r = 0;

        if (!can_move_or_reply(s, id))
                return;
        if (m->n_buffer_ids == 0) {
                list_for_each_safe(pos, tmp, &s->buffers) {
                        gmd_dbuffer *b = container_of(pos, gmd_dbuffer, owner_link);

                        if (!pinned(b) && !b->parked && r >= 0)
                                r = prefetch_one(s->server, b);
                }
        } else {
                bufs = named_buffers(s, id, m->buffer_ids, m->n_buffer_ids, false);
                if (!bufs)
                        return;
                for (size_t i = 0; i < m->n_buffer_ids && r >= 0; i++)
                        r = prefetch_one(s->server, bufs[i]);
                free(bufs);
        }
        if (r < 0)
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INTERNAL,
                                   "cannot queue the prefetch: %s", strerror(-r));
        else
                session_reply_ok(s, id);
}

/* ---- wait -------------------------------------------------------------- */

static void wait_on_closed(uv_handle_t *handle)
{
        gmd_move_wait *w = handle->data;

        free(w->ids);
        free(w);
}

static void wait_done(gmd_move_wait *w)
{
        if (w->done)
                return;         /* a reply's side effects got here first */
        w->done = true;
        w->session->n_waits--;
        list_remove(&w->link);
        uv_timer_stop(&w->timer);
        uv_close((uv_handle_t *)&w->timer, wait_on_closed);
}

static bool wait_met(const gmd_move_wait *w)
{
        gmd_server *server = w->session->server;
        gmd_list *pos;

        if (!w->ids) {
                list_for_each(pos, &w->session->buffers)
                        if (move_busy(container_of(pos, gmd_dbuffer, owner_link)))
                                return false;
                return true;
        }
        for (size_t i = 0; i < w->n_ids; i++) {
                gmd_dbuffer *b = buffer_find(server, w->session, w->ids[i]);

                if (b && move_busy(b))
                        return false;
        }
        return true;
}

/* Take the failure of a move of `b` for a wait's answer: the first one
 * found is told, every one is cleared (told once). */
static void wait_take_error(gmd_dbuffer *b, gmd_dbuffer **failed, int *error)
{
        if (!b || !b->move_error)
                return;
        if (!*failed) {
                *failed = b;
                *error = b->move_error;
        }
        b->move_error = 0;
}

/* Answer a wait whose buffers stopped moving: OK, or the failure of a
 * move of one of them since it started. */
static void wait_answer(gmd_move_wait *w)
{
        gmd_session *s = w->session;
        gmd_dbuffer *failed = NULL;
        gmd_list *pos;
        int error = 0;

        if (w->ids) {
                for (size_t i = 0; i < w->n_ids; i++)
                        wait_take_error(buffer_find(s->server, s, w->ids[i]),
                                        &failed, &error);
        } else {
                list_for_each(pos, &s->buffers)
                        wait_take_error(container_of(pos, gmd_dbuffer, owner_link),
                                        &failed, &error);
        }
        if (!failed) {
                session_reply_ok(s, w->request_id);
                return;
        }
        session_send_error(s, w->request_id, GMD__ERROR_CODE__ERR_INTERNAL,
                           "moving buffer %llu failed (%s); it stays on %s, "
                           "intact (the daemon's log has the cause)",
                           (unsigned long long)failed->id, strerror(-error),
                           failed->tier == GMD_TIER_VRAM ? "VRAM" : "host memory");
}

static void wait_on_deadline(uv_timer_t *timer)
{
        gmd_move_wait *w = timer->data;

        session_send_error(w->session, w->request_id, GMD__ERROR_CODE__ERR_TIMED_OUT,
                           "moves still under way after %lld ms",
                           (long long)w->timeout_ms);
        wait_done(w);
}

void tiering_handle_wait(gmd_session *s, uint32_t id, const Gmd__WaitRequest *m)
{
        gmd_move_wait *w;

        if (m->n_buffer_ids > TIERING_MAX_IDS) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_LIMIT,
                                   "at most %d buffers per request", TIERING_MAX_IDS);
                return;
        }
        if (s->n_waits >= s->server->config.max_waiting_per_client) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_LIMIT,
                                   "this client already has %u waits pending, the "
                                   "most [limits] max_waiting_per_client allows",
                                   s->n_waits);
                return;
        }
        w = calloc(1, sizeof(*w));
        if (!w || uv_timer_init(s->server->loop, &w->timer) < 0) {
                free(w);
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INTERNAL, "out of memory");
                return;
        }
        w->session = s;
        w->request_id = id;
        w->timeout_ms = m->timeout_ms;
        w->timer.data = w;
        list_add_tail(&s->waits, &w->link);
        s->n_waits++;
        if (m->n_buffer_ids) {
                w->ids = malloc(m->n_buffer_ids * sizeof(*w->ids));
                if (!w->ids) {
                        session_send_error(s, id, GMD__ERROR_CODE__ERR_INTERNAL,
                                           "out of memory");
                        wait_done(w);
                        return;
                }
                memcpy(w->ids, m->buffer_ids, m->n_buffer_ids * sizeof(*w->ids));
                w->n_ids = m->n_buffer_ids;
        }
        if (wait_met(w)) {
                wait_answer(w);
                wait_done(w);
                return;
        }
        if (m->timeout_ms == 0) {
                wait_on_deadline(&w->timer);
                return;
        }
        if (m->timeout_ms > 0)
                uv_timer_start(&w->timer, wait_on_deadline, (uint64_t)m->timeout_ms, 0);
}

void tiering_moves_changed(gmd_session *s)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &s->waits) {
                gmd_move_wait *w = container_of(pos, gmd_move_wait, link);

                if (wait_met(w)) {
                        wait_answer(w);
                        wait_done(w);
                }
        }
}

void tiering_session_closed(gmd_session *s)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &s->waits)
                wait_done(container_of(pos, gmd_move_wait, link));
}
