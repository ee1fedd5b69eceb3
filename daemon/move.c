/*
 * move — see move.h. Pool bytes follow the memory: the destination's tier
 * pays when its backing is created, the source's tier is paid back when
 * its backing is destroyed (after the ack, or when an orphaned copy ends),
 * so a pool never hands out memory that is still allocated. VRAM kept for
 * swap-ins (reuse.h) stays paid for while kept, and a swap-in into it
 * takes that payment over.
 */
#include "move.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "backing.h"
#include "buffer.h"
#include "log.h"
#include "reuse.h"
#include "server.h"
#include "session.h"
#include "tiering.h"
#include "timeutil.h"

/* Make the copy streams wait for the owner's last use of the buffer (the
 * event it released with). The event is forgotten only when a move that
 * waited for it is over (move_finish): the work before it is then done,
 * which a move cancelled before its copy ran does not show. */
static int wait_last_use(gmd_server *server, gmd_dbuffer *b, gmd_move *m)
{
        m->waited_gen = b->last_use_gen;
        if (!b->last_use)
                return 0;
        return server->backend->ops->event_wait(server->backend, b->last_use);
}

/* A swap-out's host copy. One only the daemon holds (the owner of a
 * SWAPPABLE buffer unmaps it; a SPILLABLE one maps its host copy) comes
 * from the backend's host arena, pinned ahead of time; when the arena has
 * no room the copy gets an allocation of its own, which pins on the
 * request path — said once a minute, with what to change. */
static int host_copy_create(gmd_server *server, const gmd_dbuffer *b,
                            gmd_mem **ret_mem)
{
        const gmd_backend_ops *ops = server->backend->ops;
        gmd_arena_info arena = { 0 };
        uint64_t now, *warned;
        int r;

        if (!ops->mem_create_private || (b->flags & GMD_ALLOC_SPILLABLE))
                return backing_create(server, GMD_TIER_HOST, b->device,
                                      b->size, true, ret_mem);
        r = ops->mem_create_private(server->backend, b->device, b->size, ret_mem);
        if (r != -ENOSPC)
                return r;
        now = now_ms();
        warned = &server->copyqs[b->device].arena_warned_ms;
        if (ops->arena_info)
                ops->arena_info(server->backend, b->device, &arena);
        /* No arena at all ([pools] host_stock = 0) is the operator's
         * choice: nothing to warn about. */
        if (ops->arena_info && arena.target &&
            (!*warned || now - *warned >= 60000)) {
                *warned = now;
                log_warning("device %u: the host arena has no room for a %llu MiB "
                            "swap-out (%llu of %llu MiB free%s): pinning its host "
                            "copy on the spot, which is slow; a larger [pools] "
                            "host_stock avoids it",
                            b->device, (unsigned long long)(b->size >> 20),
                            (unsigned long long)(arena.free >> 20),
                            (unsigned long long)(arena.target >> 20),
                            arena.built < arena.target ? ", still being built" : "");
        }
        return backing_create(server, GMD_TIER_HOST, b->device, b->size, true,
                              ret_mem);
}

static void move_send_remap(gmd_server *server, gmd_move *m, gmd_mem *mem,
                            gmd_tier tier);

bool move_busy(const gmd_dbuffer *b)
{
        return b->move || b->move_waiter;
}

/* ---- acquirers ------------------------------------------------------- */

static void acquirer_on_closed(uv_handle_t *handle)
{
        free(handle->data);
}

static void acquirer_done(gmd_acquirer *a)
{
        if (a->done)
                return;
        a->done = true;
        a->buffer->acquirer = NULL;
        uv_timer_stop(&a->timer);
        uv_close((uv_handle_t *)&a->timer, acquirer_on_closed);
}

/* The buffer is usable: the lease is the client's. */
static void acquirer_grant(gmd_acquirer *a)
{
        if (a->done)
                return;
        a->buffer->acquired = true;
        session_reply_ok(a->session, a->request_id);
        acquirer_done(a);
}

static void acquirer_fail(gmd_acquirer *a, int code, const char *why)
{
        if (a->done)
                return;
        session_send_error(a->session, a->request_id, code,
                           "buffer %llu: %s", (unsigned long long)a->buffer->id, why);
        acquirer_done(a);
}

static void acquirer_on_deadline(uv_timer_t *timer)
{
        gmd_acquirer *a = timer->data;
        gmd_dbuffer *b = a->buffer;
        gmd_server *server = b->owner->server;
        char why[160];

        /* VRAM first, then host: a SPILLABLE buffer is used where it is.
         * Its swap-in stops, since a buffer in use must not move. */
        if ((b->flags & GMD_ALLOC_SPILLABLE) && b->tier == GMD_TIER_HOST &&
            !(b->move && b->move->dir == GMD_COPY_OUT)) {
                move_cancel(server, b);
                acquirer_grant(a);
                return;
        }
        snprintf(why, sizeof(why), "not back in VRAM after %lld ms; its swap-in "
                 "goes on as a prefetch (see gpu-memctl status)",
                 (long long)a->timeout_ms);
        if (b->move && b->move->dir == GMD_COPY_IN && !b->move->finished)
                copyq_reclass(server, b->move, MOVE_BULK);
        if (b->move_waiter)
                waitq_set_rank(server, b->move_waiter, WAITQ_PREFETCH);
        acquirer_fail(a, GMD__ERROR_CODE__ERR_TIMED_OUT, why);
}

/* ---- moving out -------------------------------------------------------- */

static gmd_move *move_new(gmd_dbuffer *b, gmd_copy_dir dir, move_class cls,
                          gmd_mem *dst)
{
        gmd_move *m = calloc(1, sizeof(*m));

        if (!m)
                return NULL;
        m->buffer = b;
        m->device = b->device;
        m->dir = dir;
        m->cls = cls;
        m->src = b->mem;
        m->src_tier = b->tier;
        m->dst = dst;
        m->dst_tier = dir == GMD_COPY_OUT ? GMD_TIER_HOST : GMD_TIER_VRAM;
        m->size = b->size;
        m->start_us = now_us();
        list_init(&m->qlink);
        return m;
}

int move_out_start(gmd_server *server, gmd_dbuffer *b, move_class cls)
{
        gmd_mem *dst;
        gmd_move *m;
        bool early;
        int r;

        if (!server_can_move(server))
                return -EOPNOTSUPP;
        /* Never a buffer its owner holds, SPILLABLE or not: the owner may
         * write it at any moment (its threads, its kernels), and what it
         * writes after a chunk was copied would stay behind in the VRAM
         * the remap drops. Callers skip or refuse such buffers; this is
         * the last guard. */
        if (b->acquired)
                return -EBUSY;
        if (!copyq_usable(server, b->device, GMD_COPY_OUT))
                return -EIO;
        r = pool_take(&server->host_pool, b->size);
        if (r < 0)
                return r;
        r = host_copy_create(server, b, &dst);
        if (r < 0) {
                pool_give(&server->host_pool, b->size);
                return r;
        }
        b->move_error = 0;
        m = move_new(b, GMD_COPY_OUT, cls, dst);
        if (!m) {
                backing_release(server, dst);
                return -ENOMEM;
        }
        /* The owner's last use, recorded on its stream when it released:
         * the copy streams wait for it on the GPU, not the owner on the
         * host. */
        early = !(b->flags & GMD_ALLOC_SPILLABLE) && !b->last_use;
        r = wait_last_use(server, b, m);
        if (r < 0) {
                free(m);
                backing_release(server, dst);
                return r;
        }
        b->move = m;
        b->state = GMD_STATE_MOVING_OUT;
        /* Released with no GPU work pending on it, a SWAPPABLE buffer is
         * touched by nobody: its owner can unmap while the copy runs
         * (move.h). Work that a last-use event waits for may still run on
         * the GPU, so then the owner unmaps only after the copy, which
         * waited for it. */
        if (early) {
                m->early = true;
                move_send_remap(server, m, dst, GMD_TIER_HOST);
        }
        copyq_push(server, m);
        return 0;
}

/* ---- moving in --------------------------------------------------------- */

int move_in_request(gmd_server *server, gmd_dbuffer *b, waitq_rank rank)
{
        int r;

        if (!server_can_move(server))
                return -EOPNOTSUPP;
        r = waitq_add_move_in(server, b, rank, &b->move_waiter);
        if (r < 0)
                return r;
        b->state = GMD_STATE_MOVING_IN;
        waitq_run(server);
        return 0;
}

int move_in_begin(gmd_server *server, gmd_dbuffer *b)
{
        gmd_pool *pool = server_vram_pool(server, b->device);
        move_class cls;
        gmd_mem *dst;
        gmd_move *m;
        bool kept;
        int r;

        if (!b->move_waiter || b->move)
                return 0;       /* served already: the waitq drops it */
        cls = b->move_waiter->rank == WAITQ_SWAP_IN ? MOVE_URGENT : MOVE_BULK;
        if (!copyq_usable(server, b->device, GMD_COPY_IN))
                return -ENOSPC; /* a copy just failed: wait, do not spin */
        /* The VRAM its own last move out left, if kept: no scrub of
         * released memory competing with the copy, nothing to create. */
        dst = reuse_take(server, b->owner, b->device, b->size);
        kept = dst != NULL;
        if (!dst) {
                r = reuse_pool_take(server, b->device, b->size);
                if (r < 0)
                        return r;
        }
        b->move_waiter = NULL;   /* the waitq drops it once we return */
        r = dst ? 0 : backing_create(server, GMD_TIER_VRAM, b->device, b->size,
                                     true, &dst);
        b->move_error = 0;
        m = r < 0 ? NULL : move_new(b, GMD_COPY_IN, cls, dst);
        if (!m) {
                log_error("buffer %llu: cannot create VRAM to bring it back: %s",
                          (unsigned long long)b->id, strerror(r < 0 ? -r : ENOMEM));
                if (r == 0)
                        backing_release(server, dst);
                else
                        pool_give(pool, b->size);
                b->state = GMD_STATE_RESIDENT;
                if (b->acquirer)
                        acquirer_fail(b->acquirer, GMD__ERROR_CODE__ERR_INTERNAL,
                                      "the backend could not create VRAM for it");
                tiering_moves_changed(b->owner);
                return 0;
        }
        /* A SPILLABLE buffer used on host memory and released with an
         * event: the copy back waits for that use too. */
        r = wait_last_use(server, b, m);
        if (r < 0) {
                log_error("buffer %llu: cannot wait for its last use: %s",
                          (unsigned long long)b->id, strerror(-r));
                free(m);
                backing_release(server, dst);
                b->state = GMD_STATE_RESIDENT;
                if (b->acquirer)
                        acquirer_fail(b->acquirer, GMD__ERROR_CODE__ERR_INTERNAL,
                                      "cannot order the copy after its last use");
                tiering_moves_changed(b->owner);
                return 0;
        }
        b->move = m;
        m->dst_kept = kept;
        /* Its owner maps nothing while a SWAPPABLE buffer is out, so it
         * can map the new VRAM while the copy runs (move.h) — if that VRAM
         * holds nothing but the owner's own bytes: new VRAM is not zeroed
         * (the copy fills it), and the owner could read it before. */
        if (kept && !(b->flags & GMD_ALLOC_SPILLABLE)) {
                m->early = true;
                move_send_remap(server, m, dst, GMD_TIER_VRAM);
        }
        copyq_push(server, m);
        return 0;
}

void move_in_cancelled(gmd_dbuffer *b)
{
        b->move_waiter = NULL;
        b->state = GMD_STATE_RESIDENT;
}

void move_cancel(gmd_server *server, gmd_dbuffer *b)
{
        if (b->move_waiter) {
                waitq_drop(b->move_waiter);
                move_in_cancelled(b);
                tiering_moves_changed(b->owner);
                return;
        }
        if (b->move && !b->move->finished)
                copyq_cancel(server, b->move);
}

/* ---- end of the copy, the remap, the ack ------------------------------- */

static void move_free_orphan(gmd_server *server, gmd_move *m)
{
        backing_release(server, m->dst);
        if (m->owns_src)
                backing_release(server, m->src);
        free(m);
        waitq_run(server);
}

/* Whether the owner maps `mem` on `tier`: always VRAM; on host memory
 * only a SPILLABLE buffer, which is used where it is. A SWAPPABLE one out
 * on host is touched by nobody until it comes back, so its owner just
 * unmaps, and its host memory never leaves the daemon. */
static bool owner_maps(const gmd_dbuffer *b, const gmd_mem *mem, gmd_tier tier)
{
        return !mem->daemon_only && (tier == GMD_TIER_VRAM ||
                                     (b->flags & GMD_ALLOC_SPILLABLE));
}

/* Tell the owner to put `mem` (on `tier`) behind the buffer's address:
 * the move's destination, or its source again after an early remap. */
static void move_send_remap(gmd_server *server, gmd_move *m, gmd_mem *mem,
                            gmd_tier tier)
{
        Gmd__RemapNotify note = GMD__REMAP_NOTIFY__INIT;
        Gmd__Segment segment = GMD__SEGMENT__INIT, *segments[1] = { &segment };
        bool maps = owner_maps(m->buffer, mem, tier);

        m->seq = ++server->next_remap_seq;
        m->awaiting_ack = true;
        note.buffer_id = m->buffer->id;
        note.sequence = m->seq;
        note.tier = (Gmd__Tier)tier;
        if (maps) {
                segment.fd_index = 0;
                segment.offset = 0;
                segment.size = mem->size;
                note.n_segments = 1;
                note.segments = segments;
                mem->shared = true;
        }
        session_send(m->buffer->owner, GMD__MSG_TYPE__MSG_REMAP, 0, &note.base,
                     maps ? &mem->fd : NULL, maps ? 1 : 0);
}

/* A move that ends without moving (cancelled, failed, or rolled back after
 * an early remap): the buffer stays on its old backing. VRAM it took from
 * what was kept for the owner is kept again. */
static void move_abandon(gmd_server *server, gmd_dbuffer *b, gmd_move *m)
{
        /* A pageout or prefetch the owner asked for that failed: its next
         * wait says so (an acquire hears of its own swap-in below). */
        if (m->status < 0 && m->cls == MOVE_BULK)
                b->move_error = m->status;
        /* Kept again only if it held nothing but the owner's bytes before:
         * new VRAM is not zeroed, and a cancelled copy filled part of it. */
        if (m->dst_kept)
                reuse_keep(server, b->owner, m->dst);
        else
                backing_release(server, m->dst);
        b->move = NULL;
        b->state = GMD_STATE_RESIDENT;
        if (b->acquirer) {
                /* A move out that failed leaves the buffer where the
                 * acquire wants it. */
                if (b->tier == GMD_TIER_VRAM)
                        acquirer_grant(b->acquirer);
                else if (m->status < 0)
                        acquirer_fail(b->acquirer, GMD__ERROR_CODE__ERR_INTERNAL,
                                      "copying it back to VRAM failed");
                else if (move_in_request(server, b, WAITQ_SWAP_IN) < 0)
                        acquirer_fail(b->acquirer, GMD__ERROR_CODE__ERR_INTERNAL,
                                      "cannot queue its swap-in");
        }
        free(m);
        tiering_moves_changed(b->owner);
        waitq_run(server);
}

static void move_finish(gmd_server *server, gmd_dbuffer *b, gmd_move *m);

void move_copied(gmd_server *server, gmd_move *m)
{
        gmd_dbuffer *b = m->buffer;

        if (!b) {
                move_free_orphan(server, m);
                return;
        }
        m->copied_us = now_us();
        if (!m->cancelled) {
                m->copied = true;
                if (!m->early)
                        move_send_remap(server, m, m->dst, m->dst_tier);
                else if (m->acked)
                        move_finish(server, b, m);
                /* else the ack ends it */
                return;
        }
        if (m->early) {
                /* The owner maps the new VRAM, or is about to: back to the
                 * host copy first, then abandon (move_handle_ack). */
                m->rolling_back = true;
                move_send_remap(server, m, m->src, m->src_tier);
                return;
        }
        move_abandon(server, b, m);
}

static void move_finish(gmd_server *server, gmd_dbuffer *b, gmd_move *m)
{
        uint64_t acked_us = now_us(), released_us;
        gmd_mem *old = m->src;
        gmd_tier old_tier = m->src_tier;
        gmd_session *owner = b->owner;

        owner->tier_bytes[m->src_tier] -= b->size;
        owner->tier_bytes[m->dst_tier] += b->size;
        b->mem = m->dst;
        b->tier = m->dst_tier;
        b->state = GMD_STATE_RESIDENT;
        b->move = NULL;
        /* Its copy waited for the last use, unless the owner released
         * with a newer one meanwhile (a SPILLABLE buffer may be in use). */
        if (b->last_use_gen == m->waited_gen)
                buffer_set_last_use(server, b, NULL);
        /* VRAM it left is kept before anything else, so that the swap-in
         * an acquirer starts below copies into it. */
        if (old_tier == GMD_TIER_VRAM) {
                reuse_keep(server, owner, old);
                old = NULL;
        }
        /* Answer whoever waits for this move first: releasing the old
         * backing is the driver's slow part, and nobody waits for it but
         * the pool. */
        if (b->acquirer) {
                if (b->tier == GMD_TIER_VRAM)
                        acquirer_grant(b->acquirer);
                else if (move_in_request(server, b, WAITQ_SWAP_IN) < 0)
                        acquirer_fail(b->acquirer, GMD__ERROR_CODE__ERR_INTERNAL,
                                      "cannot queue its swap-in");
        }
        tiering_moves_changed(owner);
        if (old)
                backing_release(server, old);
        /* Back in VRAM, into kept memory or not: what its size keeps
         * beyond the buffers still out is of no use now. */
        if (b->tier == GMD_TIER_VRAM)
                reuse_trim(server, owner, b->device, b->size);
        released_us = now_us();
        /* Where a move's time goes: queue and copy, the owner's remap, and
         * releasing the old backing. */
        log_debug("buffer %llu: %s %llu bytes in %llu us (copy %llu, remap and "
                  "ack %llu, release %llu)", (unsigned long long)b->id,
                  m->dir == GMD_COPY_OUT ? "moved out" : "moved in",
                  (unsigned long long)m->size,
                  (unsigned long long)(released_us - m->start_us),
                  (unsigned long long)(m->copied_us - m->start_us),
                  (unsigned long long)(acked_us - m->copied_us),
                  (unsigned long long)(released_us - acked_us));
        free(m);
        waitq_run(server);
}

void move_handle_ack(gmd_session *s, uint32_t id, const Gmd__RemapAck *ack)
{
        gmd_dbuffer *b = buffer_find(s->server, s, ack->buffer_id);
        gmd_move *m = b ? b->move : NULL;

        if (!m || !m->awaiting_ack || m->seq != ack->sequence) {
                log_debug("client %llu: stale remap ack for buffer %llu ignored",
                          (unsigned long long)s->id,
                          (unsigned long long)ack->buffer_id);
                return;
        }
        if (ack->result < 0) {
                char who[128];

                /* The client could not map the new backing and gave the
                 * buffer up (its library marks it revoked): so do we. */
                log_warning("%s could not map buffer %llu after its move (%s); "
                            "freeing it", session_describe(s, who, sizeof(who)),
                            (unsigned long long)b->id, strerror(-ack->result));
                buffer_free(s->server, b);
                waitq_run(s->server);
                return;
        }
        m->awaiting_ack = false;
        if (m->rolling_back) {
                move_abandon(s->server, b, m);
                return;
        }
        if (!m->copied) {
                /* Early: the copy ends it, or, cancelled or failed (perhaps
                 * still waiting in its queue's failed list), rolls it back. */
                m->acked = true;
                return;
        }
        move_finish(s->server, b, m);
}

void move_buffer_freed(gmd_server *server, gmd_dbuffer *b)
{
        gmd_move *m = b->move;

        if (b->acquirer)
                acquirer_fail(b->acquirer, GMD__ERROR_CODE__ERR_NOT_FOUND,
                              "freed while an acquire waited for it");
        if (b->move_waiter) {
                waitq_drop(b->move_waiter);
                b->move_waiter = NULL;
        }
        if (!m)
                return;
        b->move = NULL;
        if (m->finished) {
                /* Remap sent or not, no copy touches the memory any more.
                 * A move refused at submit still waits in its queue's
                 * failed list: out of it first. */
                list_remove(&m->qlink);
                backing_release(server, m->dst);
                free(m);
                return;
        }
        /* Copies still run on both backings: the move frees them after. */
        m->buffer = NULL;
        m->owns_src = true;
        b->mem = NULL;
        copyq_cancel(server, m);
}

uint64_t move_leaving_bytes(gmd_server *server, unsigned device)
{
        uint64_t bytes = 0;
        gmd_list *pos;

        list_for_each(pos, &server->buffers) {
                gmd_dbuffer *b = container_of(pos, gmd_dbuffer, server_link);

                if (b->device == device && b->move && b->move->dir == GMD_COPY_OUT &&
                    !b->move->cancelled)
                        bytes += b->size;
        }
        return bytes;
}

/* ---- acquire ------------------------------------------------------------ */

void move_acquire(gmd_session *s, uint32_t id, gmd_dbuffer *b, int64_t timeout_ms)
{
        gmd_server *server = s->server;
        gmd_acquirer *a;

        if (b->acquired || b->acquirer) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_BUSY,
                                   "buffer %llu is already acquired%s",
                                   (unsigned long long)b->id,
                                   b->acquirer ? " (an acquire waits for it)" : "");
                return;
        }
        /* Usable now: in VRAM and staying, or SPILLABLE anywhere it rests. */
        if ((b->tier == GMD_TIER_VRAM && !b->move) ||
            ((b->flags & GMD_ALLOC_SPILLABLE) && !b->move && !b->move_waiter &&
             (timeout_ms == 0 || !server_can_move(server)))) {
                b->acquired = true;
                session_reply_ok(s, id);
                return;
        }
        a = calloc(1, sizeof(*a));
        if (!a || uv_timer_init(server->loop, &a->timer) < 0) {
                free(a);
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INTERNAL,
                                   "out of memory");
                return;
        }
        a->buffer = b;
        a->session = s;
        a->request_id = id;
        a->timeout_ms = timeout_ms;
        a->since_us = now_us();
        a->timer.data = a;
        b->acquirer = a;

        if (b->move && b->move->dir == GMD_COPY_OUT && !b->move->finished) {
                /* Still copying out: stop, it never left. */
                copyq_cancel(server, b->move);
        } else if (b->move && b->move->dir == GMD_COPY_IN) {
                if (!b->move->finished)
                        copyq_reclass(server, b->move, MOVE_URGENT);
        } else if (b->move_waiter) {
                waitq_set_rank(server, b->move_waiter, WAITQ_SWAP_IN);
                waitq_run(server);
        } else if (!b->move && b->tier == GMD_TIER_HOST) {
                if (move_in_request(server, b, WAITQ_SWAP_IN) < 0) {
                        acquirer_fail(a, GMD__ERROR_CODE__ERR_INTERNAL,
                                      "cannot queue its swap-in");
                        return;
                }
        }
        /* else: a move out awaits its ack; move_finish swaps it back in. */

        if (b->acquirer != a)
                return;   /* granted or failed already */
        /* A move out that had its owner unmap early is undone by one more
         * remap: it is in VRAM, usable after that round trip. */
        if (timeout_ms == 0 && b->move && b->move->dir == GMD_COPY_OUT &&
            b->move->early && b->move->cancelled)
                timeout_ms = GMD_RECLAIM_GRACE_MS;
        if (timeout_ms == 0)
                acquirer_on_deadline(&a->timer);
        else if (timeout_ms > 0)
                uv_timer_start(&a->timer, acquirer_on_deadline, (uint64_t)timeout_ms, 0);
}
