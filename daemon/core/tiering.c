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
#include "loan.h"
#include "log.h"
#include "move.h"
#include "result.h"
#include "placement.h"
#include "server.h"
#include "session.h"
#include "timeutil.h"

/* Ids one request may name (the packet bound keeps it lower anyway). */
#define TIERING_MAX_IDS 8192

gmd_outcome tiering_handle_acquire(gmd_session *s, uint32_t id,
                                   const gmd_acquire_ask *m, gmd_result *ret)
{
        const uint32_t known = GMD_ACQUIRE_READ_ONLY | GMD_ACQUIRE_YIELD;
        gmd_dbuffer *b = buffer_find(s->server, s, m->buffer_id);
        gmd_outcome o;
        gmd_loan *loan;

        if (m->flags & ~known)
                return result_error(ret, GMD_ERR_INVALID,
                                    "unknown acquire flags 0x%x",
                                    m->flags & ~known);
        if (!b || b->parked)
                return result_error(ret, GMD_ERR_NOT_FOUND,
                                    "no buffer %llu belongs to this client",
                                    (unsigned long long)m->buffer_id);
        o = move_acquire(s, id, b, m->timeout_ms,
                         m->flags & GMD_ACQUIRE_READ_ONLY, ret);
        /* GMD_ACQUIRE_YIELD: while it waits, what the process holds may
         * move; its answer waits for all of that to be back (loan.h). */
        if (o == OUTCOME_LATER && (m->flags & GMD_ACQUIRE_YIELD) &&
            b->acquirer && (loan = loan_start(s, id)))
                loan_take_acquire(loan, b);
        return o;
}

/* Check every named buffer: the array, or NULL with `ret` filled. */
static gmd_dbuffer **named_buffers(gmd_session *s, const uint64_t *ids, size_t n,
                                   bool for_pageout, gmd_result *ret)
{
        gmd_dbuffer **out;

        if (n > TIERING_MAX_IDS) {
                result_error(ret, GMD_ERR_LIMIT,
                             "at most %d buffers per request", TIERING_MAX_IDS);
                return NULL;
        }
        out = calloc(n ? n : 1, sizeof(*out));
        if (!out) {
                result_error(ret, GMD_ERR_INTERNAL, "out of memory");
                return NULL;
        }
        for (size_t i = 0; i < n; i++) {
                gmd_dbuffer *b = buffer_find(s->server, s, ids[i]);
                const char *why = NULL;
                int code = GMD_ERR_INVALID;

                if (!b || b->parked) {
                        code = GMD_ERR_NOT_FOUND;
                        why = "does not belong to this client";
                } else if (placement_pinned(b)) {
                        why = "cannot move (PIN_VRAM or legacy IPC)";
                } else if (b->acquirer) {
                        code = GMD_ERR_BUSY;
                        why = "has an acquire waiting for it";
                } else if (for_pageout && !placement_pageout_allowed(b, &why)) {
                        /* SPILLABLE too: its owner may write it at any
                         * moment, and no copy can hold what is written
                         * after it (placement.h). */
                        code = GMD_ERR_BUSY;
                } else if (!for_pageout && b->acquired) {
                        code = GMD_ERR_BUSY;
                        why = "is acquired where it is: release it, and the "
                              "next acquire brings it to VRAM";
                }
                if (why) {
                        result_error(ret, code, "buffer %llu %s",
                                     (unsigned long long)ids[i], why);
                        free(out);
                        return NULL;
                }
                out[i] = b;
        }
        return out;
}

/* Can this backend move buffers? If not, `ret` says so. */
static bool can_move(gmd_session *s, gmd_result *ret)
{
        if (server_can_move(s->server))
                return true;
        result_error(ret, GMD_ERR_UNSUPPORTED,
                     "the %s backend cannot move buffers between VRAM and "
                     "host memory yet", s->server->backend->ops->name);
        return false;
}

static int pageout_one(gmd_server *server, gmd_dbuffer *b, move_class cls)
{
        /* Out on a peer and on its way to host memory (peer.h): out it
         * is, and going further. */
        if (b->move && b->move->relocate)
                return 0;
        if (b->tier == GMD_TIER_HOST) {
                move_cancel(server, b);   /* a pageout overrides a prefetch */
                return 0;
        }
        if (b->move || b->move_waiter)
                return 0;                 /* already leaving */
        return move_out_start(server, b, cls);
}

static gmd_outcome host_full_error(gmd_session *s, gmd_result *ret)
{
        gmd_pool *host = &s->server->host.pool;
        char f[32], c[32], p[32];

        return result_error(ret, GMD_ERR_NO_MEMORY,
                            "not enough host memory to page out: the host pool "
                            "has %s free of %s, and %s is pinned (host arena "
                            "included); raise [pools] host_limit (--host-limit)",
                            size_format(pool_free(host), f, sizeof(f)),
                            size_format(host->capacity, c, sizeof(c)),
                            size_format(backing_pinned(s->server), p, sizeof(p)));
}

/* Will a pageout move `b` (it is on VRAM, not leaving already)? */
static bool pageout_moves(const gmd_dbuffer *b)
{
        return b->tier == GMD_TIER_VRAM && !b->move && !b->move_waiter;
}

/* Would `bytes` more on host memory pass the host_quota of `s`'s user?
 * What its clients are paging out already counts as on host. A pageout is
 * the client's own choice, so it is held to the quota like a host
 * allocation; an eviction is the daemon's (to make room for others) and
 * is not refused, but its bytes count against later host allocations. */
static bool pageout_within_quota(gmd_session *s, uint64_t bytes, gmd_result *ret)
{
        gmd_result why;
        gmd_usage u;
        gmd_list *pos, *bpos;

        result_ok(&why);
        if (!bytes || !quota_applies(&s->limits, GMD_TIER_HOST))
                return true;
        session_user_usage(&s->server->sessions.all, s->uid, &u);
        list_for_each(pos, &s->server->sessions.all) {
                gmd_session *o = container_of(pos, gmd_session, link);

                if (o->uid != s->uid)
                        continue;
                list_for_each(bpos, &o->buffers) {
                        gmd_dbuffer *b = container_of(bpos, gmd_dbuffer, owner_link);

                        if (b->tier == GMD_TIER_VRAM && b->move &&
                            b->move->copy.dir == GMD_COPY_OUT)
                                u.bytes[GMD_TIER_HOST] += b->size;
                }
        }
        if (quota_check(&s->limits, s->uid, &u, bytes, GMD_TIER_HOST, &why) == QUOTA_OK)
                return true;
        result_error(ret, GMD_ERR_QUOTA,
                     "cannot page out %llu bytes: %s (a pageout counts against the "
                     "host quota; free buffers on host memory, or page out fewer)",
                     (unsigned long long)bytes, why.text);
        return false;
}

int tiering_pageout_all(gmd_session *s, move_class cls)
{
        gmd_list *pos, *tmp;
        int n = 0, r;

        list_for_each_safe(pos, tmp, &s->buffers) {
                gmd_dbuffer *b = container_of(pos, gmd_dbuffer, owner_link);

                if (placement_pinned(b) || b->parked || b->acquired || b->acquirer ||
                    b->tier != GMD_TIER_VRAM || move_busy(b))
                        continue;
                r = move_out_start(s->server, b, cls);
                if (r < 0)
                        return r;
                n++;
        }
        return n;
}

gmd_outcome tiering_handle_pageout(gmd_session *s, uint32_t id,
                                   const gmd_buffers_ask *m, gmd_result *ret)
{
        gmd_dbuffer **bufs;
        int r = 0;

        (void)id;
        if (!can_move(s, ret))
                return OUTCOME_ERROR;
        if (m->n_buffer_ids == 0) {
                gmd_list *pos;
                uint64_t bytes = 0;

                list_for_each(pos, &s->buffers) {
                        gmd_dbuffer *b = container_of(pos, gmd_dbuffer, owner_link);

                        if (!placement_pinned(b) && !b->parked && !b->acquired &&
                            !b->acquirer && pageout_moves(b) && !move_busy(b))
                                bytes += b->size;
                }
                if (!pageout_within_quota(s, bytes, ret))
                        return OUTCOME_ERROR;
                r = tiering_pageout_all(s, MOVE_BULK);
        } else {
                uint64_t bytes = 0;

                bufs = named_buffers(s, m->buffer_ids, m->n_buffer_ids, true, ret);
                if (!bufs)
                        return OUTCOME_ERROR;
                for (size_t i = 0; i < m->n_buffer_ids; i++)
                        if (pageout_moves(bufs[i]))
                                bytes += bufs[i]->size;
                if (!pageout_within_quota(s, bytes, ret)) {
                        free(bufs);
                        return OUTCOME_ERROR;
                }
                for (size_t i = 0; i < m->n_buffer_ids && r >= 0; i++)
                        r = pageout_one(s->server, bufs[i], MOVE_BULK);
                free(bufs);
        }
        if (r == -ENOSPC)
                return host_full_error(s, ret);
        if (r < 0)
                return result_error(ret, GMD_ERR_INTERNAL,
                                    "cannot start the move: %s", strerror(-r));
        return OUTCOME_OK;
}

static int prefetch_one(gmd_server *server, gmd_dbuffer *b)
{
        if (b->acquired || b->acquirer)
                return 0;       /* in use where it is, or on its way */
        /* Leaving a peer that needs the room (peer.h): it comes back from
         * host memory when acquired; a prefetch does not hold it there. */
        if (b->move && b->move->relocate)
                return 0;
        /* Still in VRAM: keep it there, as about to be used (evict.h). */
        if (b->move && b->move->copy.dir == GMD_COPY_OUT && move_copying(b->move)) {
                move_cancel(server, b);
                b->prefetched_us = now_us();
                return 0;
        }
        if (b->tier == GMD_TIER_VRAM && !b->move)
                b->prefetched_us = now_us();
        if (b->tier != GMD_TIER_HOST || move_busy(b))
                return 0;
        return move_in_request(server, b, WAITQ_PREFETCH);
}

/*
 * The answer is queued before the swap-ins start: one that can start at
 * once sends its owner an early remap, which the client's I/O thread
 * applies (import, map, access: ~1 ms for 96 MiB on the H200) before it
 * reads the next packet, so a reply sent after it kept gmd_prefetch from
 * returning for that long; queued first, the remap is held behind it
 * (answers.h). The request was checked before; what can still fail is
 * the daemon's own memory for a waiter, logged: the buffer stays where it
 * is until acquired, as after any prefetch the daemon could not serve.
 */
gmd_outcome tiering_handle_prefetch(gmd_session *s, uint32_t id,
                                    const gmd_buffers_ask *m, gmd_result *ret)
{
        gmd_dbuffer **bufs = NULL;
        gmd_list *pos, *tmp;
        gmd_result ok;
        int r = 0;

        if (!can_move(s, ret))
                return OUTCOME_ERROR;
        if (m->n_buffer_ids > 0) {
                bufs = named_buffers(s, m->buffer_ids, m->n_buffer_ids, false, ret);
                if (!bufs)
                        return OUTCOME_ERROR;
        }
        result_ok(&ok);
        session_answer(s, ANSWER_OK, id, &ok);
        if (!bufs) {
                list_for_each_safe(pos, tmp, &s->buffers) {
                        gmd_dbuffer *b = container_of(pos, gmd_dbuffer, owner_link);

                        if (!placement_pinned(b) && !b->parked && r >= 0)
                                r = prefetch_one(s->server, b);
                }
        } else {
                for (size_t i = 0; i < m->n_buffer_ids && r >= 0; i++)
                        r = prefetch_one(s->server, bufs[i]);
                free(bufs);
        }
        if (r < 0)
                log_warning("client %llu: prefetch not queued: %s",
                            (unsigned long long)s->id, strerror(-r));
        return OUTCOME_ANSWERED;
}

/* ---- wait -------------------------------------------------------------- */

static bool wait_met(const gmd_move_wait *w)
{
        gmd_session *s = w->owner;
        gmd_list *pos;

        if (!w->ids) {
                list_for_each(pos, &s->buffers)
                        if (move_busy(container_of(pos, gmd_dbuffer, owner_link)))
                                return false;
                return true;
        }
        for (size_t i = 0; i < w->n_ids; i++) {
                gmd_dbuffer *b = buffer_find(s->server, s, w->ids[i]);

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

/* What a wait whose buffers stopped moving comes to: OK, or the failure
 * of a move of one of them since it started. */
static gmd_outcome wait_result(gmd_move_wait *w, gmd_result *ret)
{
        gmd_session *s = w->owner;
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
        if (!failed)
                return OUTCOME_OK;
        return result_error(ret, GMD_ERR_INTERNAL,
                            "moving buffer %llu failed (%s); it stays on %s, "
                            "intact (the daemon's log has the cause)",
                            (unsigned long long)failed->id, strerror(-error),
                            failed->tier == GMD_TIER_VRAM ? "VRAM" : "host memory");
}

static gmd_outcome wait_timed_out(const gmd_move_wait *w, gmd_result *ret)
{
        return result_error(ret, GMD_ERR_TIMED_OUT,
                            "moves still under way after %lld ms",
                            (long long)w->timeout_ms);
}

/* A wait met later (the scheduling pass's waits step) or timed out (its
 * timer): the answer is owed to its session, and request.c sends it. */
static void wait_answer(gmd_move_wait *w)
{
        gmd_result res;

        result_ok(&res);
        session_answer(w->owner, wait_result(w, &res) == OUTCOME_OK ?
                       ANSWER_OK : ANSWER_ERROR, w->request_id, &res);
}

static void wait_expire(gmd_move_wait *w)
{
        gmd_result res;

        wait_timed_out(w, &res);
        session_answer(w->owner, ANSWER_ERROR, w->request_id, &res);
}

gmd_outcome tiering_handle_wait(gmd_session *s, uint32_t id,
                                const gmd_buffers_ask *m, gmd_result *ret)
{
        gmd_move_wait *w;
        int r;

        if (m->n_buffer_ids > TIERING_MAX_IDS)
                return result_error(ret, GMD_ERR_LIMIT,
                                    "at most %d buffers per request", TIERING_MAX_IDS);
        if (s->waits.n >= s->server->config.max_waiting_per_client)
                return result_error(ret, GMD_ERR_LIMIT,
                                    "this client already has %u waits pending, the "
                                    "most [limits] max_waiting_per_client allows",
                                    s->waits.n);
        r = waits_add(&s->waits, s->server->loop, s, id, m->buffer_ids,
                      m->n_buffer_ids, m->timeout_ms, wait_expire, &w);
        if (r < 0)
                return result_error(ret, GMD_ERR_INTERNAL, "out of memory");
        /* Met already, or no time to wait: answered as any request is. */
        if (wait_met(w)) {
                gmd_outcome outcome = wait_result(w, ret);

                waits_done(w);
                return outcome;
        }
        if (m->timeout_ms == 0) {
                gmd_outcome outcome = wait_timed_out(w, ret);

                waits_done(w);
                return outcome;
        }
        waits_arm(w);
        return OUTCOME_LATER;
}

void tiering_waits_answer(gmd_session *s)
{
        waits_answer_met(&s->waits, wait_met, wait_answer);
}

void tiering_session_closed(gmd_session *s)
{
        waits_drop_all(&s->waits);
}
