/*
 * alloc — see alloc.h. Checks run cheapest first and each failure says
 * what to do about it; the pool is only touched once the request is known
 * to be valid and within the client's limits.
 */
#include "alloc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "persist.h"
#include "admission.h"
#include "backing.h"
#include "buffer.h"
#include "loan.h"
#include "log.h"
#include "move.h"
#include "outside.h"
#include "evict.h"
#include "reuse.h"
#include "parking.h"
#include "pending.h"
#include "placement.h"
#include "server.h"
#include "session.h"
#include "timeutil.h"
#include "vram.h"
#include "waitq.h"

#define KNOWN_ALLOC_FLAGS (GMD_ALLOC_PIN_VRAM | GMD_ALLOC_SPILLABLE | \
                           GMD_ALLOC_LEGACY_IPC | GMD_ALLOC_NO_SELF_WAIT | \
                           GMD_ALLOC_YIELD)
/* Flags that say how the request waits, not what the buffer is: the
 * buffer's record keeps none of them. */
#define REQUEST_ONLY_FLAGS (GMD_ALLOC_NO_SELF_WAIT | GMD_ALLOC_YIELD)
#define LEGACY_IPC_ALIGN (2ull << 20)

/* The quota of the client's user, against what all its clients hold
 * (quota_check). */
static quota_verdict alloc_quota(gmd_session *s, uint64_t size, gmd_tier tier,
                                 gmd_result *ret)
{
        gmd_usage u;

        if (!quota_applies(&s->limits, tier))
                return QUOTA_OK;
        session_user_usage(&s->server->sessions.all, s->uid, &u);
        /* VRAM its processes hold outside gpu-memd (outside.h). */
        if (!outside_charges(&s->server->config))
                u.outside = 0;
        return quota_check(&s->limits, s->uid, &u, size, tier, ret);
}

/* Has the client room for one more buffer under [limits]
 * max_buffers_per_client? Its parked buffers count: an unpark cannot be
 * refused (the application has the buffer back already), so they are
 * bounded when they are made. 0 yes; -EINPROGRESS not until parked ones
 * come back (asked now); -EMLINK no (`ret` says why). */
static int alloc_buffer_slot(gmd_session *s, gmd_result *ret)
{
        gmd_server *server = s->server;
        unsigned max = server->config.max_buffers_per_client;

        uint64_t now = now_us(), timeout_us = server->config.reclaim_timeout_ms * 1000ull;
        bool overdue = false;

        if (s->n_buffers < max)
                return 0;
        for (unsigned d = 0; d < server->devices.n; d++)
                overdue |= parking_overdue(&s->parking, d, now, timeout_us);
        if (s->parking.n && s->n_buffers - s->parking.n < max && !overdue) {
                evict_reclaim_session(s, server->devices.n);
                /* Look again when the ask may have gone unanswered. */
                pending_mark_after(&server->pending, PENDING_ROOM,
                                   server->config.reclaim_timeout_ms + 1);
                return -EINPROGRESS;
        }
        if (s->parking.n)
                result_error(ret, GMD_ERR_LIMIT,
                             "this client holds %u buffers, %u of them parked in "
                             "its cache of idle mappings and not given back when "
                             "asked ([limits] reclaim_timeout_ms), the most [limits] "
                             "max_buffers_per_client allows", s->n_buffers,
                             s->parking.n);
        else
                result_error(ret, GMD_ERR_LIMIT,
                             "this client already holds %u buffers, the most "
                             "[limits] max_buffers_per_client allows", s->n_buffers);
        return -EMLINK;
}

int alloc_now_on(gmd_session *s, uint64_t size, unsigned device, unsigned flags,
                 gmd_tier tier, uint64_t since_us, gmd_result *ret)
{
        gmd_server *server = s->server;
        gmd_dbuffer *b;
        int r;

        r = alloc_buffer_slot(s, ret);
        if (r < 0)
                return r;

        /* Checked again when a waiter is served: the user's other clients
         * may have allocated meanwhile, or a reload lowered the quota. A
         * quota full of parked buffers waits for them to come back. */
        switch (alloc_quota(s, size, tier, ret)) {
        case QUOTA_REFUSED:
                return -EDQUOT;
        case QUOTA_PARKED: {
                uint64_t ignored;
                char bytes[32];

                if (evict_user_reclaim_overdue(&server->sessions.all, server->devices.n,
                                               s->uid, server->config.reclaim_timeout_ms,
                                               &ignored)) {
                        size_format(ignored, bytes, sizeof(bytes));
                        result_error(ret, GMD_ERR_QUOTA,
                                     "over quota: it counts on %s of parked buffers "
                                     "that uid %u's clients were asked to return "
                                     "and did not within %u ms ([limits] "
                                     "reclaim_timeout_ms); free buffers, or let "
                                     "libgpumem's I/O thread run (a process "
                                     "stopped or not reading its socket)", bytes,
                                     (unsigned)s->uid,
                                     server->config.reclaim_timeout_ms);
                        return -EDQUOT;
                }
                evict_reclaim_user(&server->sessions.all, server->devices.n, s->uid);
                return -EINPROGRESS;
        }
        case QUOTA_OK:
                break;
        }
        /* The pool has room: does the GPU? Memory held outside gpu-memd
         * (vram.h) is refused here, in words, not by the driver. */
        if (tier == GMD_TIER_VRAM &&
            pool_free(server_vram_pool(server, device)) >= size &&
            vram_check(server, device, size, ret) < 0)
                return -ENOMEM;
        r = buffer_new(server, s, device, tier, size, flags & ~REQUEST_ONLY_FLAGS,
                       &b);
        if (r == -ENOSPC)
                return r;
        if (r == -ENOMEM && tier == GMD_TIER_VRAM) {
                /* The driver said out of memory after all (memory taken
                 * outside gpu-memd since the check): the same sentence. */
                vram_explain(server, device, size, ret);
                return r;
        }
        if (r == -EMFILE || r == -ENFILE) {
                /* Not the driver's failure: the daemon's fd table is full
                 * (each buffer keeps an fd). Said so, as a limit. */
                log_warning("creating a buffer: %s", strerror(-r));
                result_error(ret, GMD_ERR_LIMIT,
                             "gpu-memd has no file descriptor left for "
                             "another buffer (%s): free buffers, or ask the "
                             "administrator to raise LimitNOFILE or lower "
                             "[limits] max_buffers_per_user", strerror(-r));
                return r;
        }
        if (r < 0) {
                log_error("creating %llu bytes on device %u failed: %s",
                          (unsigned long long)size, device, strerror(-r));
                result_error(ret, GMD_ERR_INTERNAL,
                             "the %s backend could not create %llu bytes on "
                             "device %u: %s", server->backend->ops->name,
                             (unsigned long long)size, device, strerror(-r));
                /* Failed, not "wait": -EAGAIN means a full quota here. */
                return r == -EAGAIN ? -EIO : r;
        }
        /* Recorded before its owner hears of it (persist.h). */
        persist_buffer(server, b);
        ret->buffer = b;
        ret->buffer_id = b->id;
        ret->since_us = since_us;
        return 0;
}

gmd_outcome alloc_self_bound(gmd_session *s, uint64_t size, unsigned device,
                             unsigned flags, uint64_t since_us, gmd_result *ret)
{
        gmd_server *server = s->server;
        gmd_pool *pool = server_vram_pool(server, device);
        uint64_t kept, mine = 0;
        unsigned n = 0;
        const gmd_list *pos;
        char asked[32], held[32], free_b[32], cap[32], name[32], who[96];
        int r;

        if (!(flags & GMD_ALLOC_NO_SELF_WAIT) || !pool || s->pid <= 0 ||
            device >= GMD_MAX_DEVICES || pool_free(pool) >= size)
                return OUTCOME_LATER;
        /* Room something else could make: kept VRAM (released on demand),
         * parked mappings (asked back), released buffers (evicted, as if
         * the host pool had room: another client may give some back), a
         * move under way (its end changes the picture: asked again then). */
        kept = reuse_reachable_bytes(&server->reuse, device);
        if (pool_free(pool) + kept +
            evict_reclaimable(&server->sessions.all, device,
                              server->config.reclaim_timeout_ms) +
            evict_idle_bytes(server, device) -
            evict_lent_bytes(server, device, s->pid,
                             s->priority) >= size ||
            move_any_on(server, device))
                return OUTCOME_LATER;
        /* Per-session counts, one step per connection, not per buffer. */
        list_for_each(pos, &server->sessions.all) {
                const gmd_session *o = container_of(pos, gmd_session, link);

                /* Not one closing in steps: its VRAM is room on its
                 * way, as a move out's. */
                if (session_same_process(s, o) && !o->closing) {
                        mine += o->vram_on[device];
                        n += o->vram_n_on[device];
                }
        }
        /* Anything else in use (another process's buffers, a copy's
         * destination) may be freed by someone else: wait for it. */
        if (mine + kept < pool->used)
                return OUTCOME_LATER;
        /* A SPILLABLE buffer has a place that does not wait on itself. */
        if (placement_host_fallback(flags)) {
                r = alloc_now_on(s, size, device, flags, GMD_TIER_HOST, since_us, ret);
                if (r == 0)
                        return OUTCOME_ALLOCATED;
                if (!alloc_must_wait(r))
                        return OUTCOME_ERROR;
                result_ok(ret);
                return OUTCOME_LATER;
        }
        size_format(size, asked, sizeof(asked));
        size_format(mine, held, sizeof(held));
        size_format(pool_free(pool), free_b, sizeof(free_b));
        size_format(pool->capacity, cap, sizeof(cap));
        log_info("%s: %s on device %u refused (GMD_ALLOC_NO_SELF_WAIT): only "
                 "pid %d holds the pool", session_describe(s, who, sizeof(who)),
                 asked, device, (int)s->pid);
        return result_error(ret, GMD_ERR_NO_MEMORY,
                            "%s: the %s asked for can only come from memory this "
                            "process holds itself (pid %d: %s in %u buffer%s "
                            "there, in use or pinned; %s free of %s; nothing else "
                            "to evict, no move under way): waiting cannot help; "
                            "free some", pool_describe(pool, name, sizeof(name)),
                            asked, (int)s->pid, held, n, n == 1 ? "" : "s",
                            free_b, cap);
}

/* How many allocations all clients of `uid` have waiting. */
static unsigned alloc_user_waiting(const gmd_list *sessions, uid_t uid)
{
        const gmd_list *pos;
        unsigned n = 0;

        list_for_each(pos, sessions) {
                const gmd_session *o = container_of(pos, gmd_session, link);

                if (o->uid == uid)
                        n += o->waitq.n_waiting;
        }
        return n;
}

/* Does every process holding VRAM on `device` wait for room there
 * itself (an allocation, or a swap-in an acquire waits for)? Then they
 * may be waiting for each other: how many, their pids in `pids` (at most
 * `max` listed); 0 when one of them does not wait. */
static unsigned alloc_waiting_holders(gmd_server *server, unsigned device,
                                      pid_t *pids, unsigned max)
{
        unsigned n = 0;
        gmd_list *pos, *wpos;

        list_for_each(pos, &server->sessions.all) {
                const gmd_session *o = container_of(pos, gmd_session, link);
                bool waits = false, listed = false;

                if (!o->vram_on[device])
                        continue;
                list_for_each(wpos, &server->waitq.waiters) {
                        const gmd_waiter *w = container_of(wpos, gmd_waiter, link);

                        if (w->device == device && w->rank != WAITQ_PREFETCH &&
                            session_same_process(o, w->session))
                                waits = true;
                }
                if (!waits)
                        return 0;
                for (unsigned i = 0; i < n && i < max; i++)
                        listed |= pids[i] == o->pid;
                if (!listed) {
                        if (n < max)
                                pids[n] = o->pid;
                        n++;
                }
        }
        return n;
}

/* Why `w`, an allocation of `size` on `device` still waiting, waited: what
 * holds the pool, and the request it was held behind, if one was: its
 * device's holder (waitq.h), which is neither always the oldest waiter
 * there nor older than `w` (a higher priority holds too). Before, this
 * named the oldest waiter, which may have held nothing back. */
static void alloc_why_waited(gmd_server *server, const gmd_waiter *w,
                             char *buf, size_t len)
{
        unsigned device = w->device;
        gmd_pool *pool = server_vram_pool(server, device);
        const gmd_waiter *holder = NULL;
        uint64_t movable = move_leaving_bytes(server, device) +
                           reuse_reachable_bytes(&server->reuse, device) +
                           evict_reclaimable(&server->sessions.all, device,
                                             server->config.reclaim_timeout_ms) +
                           evict_evictable(server, device);
        uint64_t used = pool->capacity - pool_free(pool);
        uint64_t stuck = used > movable ? used - movable : 0;
        char stuck_b[32], movable_b[32], other[32], who[128];
        bool held;
        int n;

        size_format(stuck, stuck_b, sizeof(stuck_b));
        size_format(movable, movable_b, sizeof(movable_b));
        n = snprintf(buf, len, "; %s of it is in use (acquired, pinned or moving: "
                     "cannot be moved out) and %s idle could not be moved out "
                     "in time", stuck_b, movable_b);
        if (n < 0 || (size_t)n >= len)
                return;
        held = waitq_held_by(&server->waitq, w, &holder);
        if (held && holder) {
                size_format(holder->size, other, sizeof(other));
                snprintf(buf + n, len - (size_t)n, "; it was held behind %s "
                         "request for %s of %s, priority %d, waiting %llu ms, "
                         "for which room is being made ([limits] "
                         "wait_hold_ms)",
                         holder->since_us < w->since_us ? "an older" : "a",
                         other, session_describe(holder->session, who,
                                                 sizeof(who)),
                         holder->priority,
                         (unsigned long long)((now_us() - holder->since_us) /
                                              1000));
        } else if (held) {
                snprintf(buf + n, len - (size_t)n, "; it was held behind the "
                         "device's copy queue, resting after a refused copy");
        } else if (stuck + w->size > pool->capacity) {
                pid_t pids[4];
                unsigned k = alloc_waiting_holders(server, device, pids, 4);
                char list[64] = "";
                size_t l = 0;

                for (unsigned i = 0; i < k && i < 4; i++)
                        l += (size_t)snprintf(list + l, sizeof(list) - l, "%s%d",
                                              i ? ", " : "", (int)pids[i]);
                if (k < 2)
                        snprintf(buf + n, len - (size_t)n, "; it cannot fit "
                                 "until buffers in use are released or freed");
                else
                        snprintf(buf + n, len - (size_t)n, "; every process "
                                 "holding it waits for room itself (pids "
                                 "%s%s): they wait for each other "
                                 "(GMD_ALLOC_YIELD lets what a waiting "
                                 "process holds move)", list,
                                 k > 4 ? ", ..." : "");
        }
}

gmd_outcome alloc_expired(gmd_session *s, const gmd_waiter *w, gmd_result *ret)
{
        gmd_server *server = s->server;
        gmd_pool *pool = server_vram_pool(server, w->device);
        char asked[32], free_b[32], cap[32], name[32], host[160] = "";
        char why[640];
        int r;

        /* VRAM first, then host: a SPILLABLE allocation that got no VRAM
         * in time lives on the host tier, where the GPU still reads it. */
        if (placement_host_fallback(w->flags)) {
                r = alloc_now_on(s, w->size, w->device, w->flags,
                                 GMD_TIER_HOST, w->since_us, ret);
                if (!alloc_must_wait(r))
                        return r == 0 ? OUTCOME_ALLOCATED : OUTCOME_ERROR;
        }
        if (placement_host_fallback(w->flags))
                backing_no_host_room(server, host, sizeof(host));
        alloc_why_waited(server, w, why, sizeof(why));
        size_format(w->size, asked, sizeof(asked));
        size_format(pool_free(pool), free_b, sizeof(free_b));
        size_format(pool->capacity, cap, sizeof(cap));
        return result_error(ret, GMD_ERR_TIMED_OUT,
                            "waited %lld ms for %s on %s; it has %s free of %s%s%s "
                            "(see gpu-memctl status)",
                            (long long)w->timeout_ms, asked,
                            pool_describe(pool, name, sizeof(name)), free_b, cap,
                            why, host);
}

gmd_outcome alloc_handle(gmd_session *s, uint32_t id, const gmd_alloc_ask *m,
                         gmd_result *ret)
{
        gmd_server *server = s->server;
        gmd_pool *pool = server_vram_pool(server, m->device);
        char name[32], asked[32], cap[32], free_b[32];
        quota_verdict verdict;
        gmd_waitq_who who;
        gmd_waiter *w;
        int64_t timeout_ms;
        uint64_t size;
        int r;

        if (!pool)
                return result_error(ret, GMD_ERR_INVALID,
                                    "no device %u: this daemon serves %u device%s",
                                    m->device, server->devices.n,
                                    server->devices.n == 1 ? "" : "s");
        if (m->flags & ~KNOWN_ALLOC_FLAGS)
                return result_error(ret, GMD_ERR_INVALID,
                                    "unknown allocation flags 0x%x", m->flags);
        if ((m->flags & GMD_ALLOC_PIN_VRAM) && (m->flags & GMD_ALLOC_SPILLABLE))
                return result_error(ret, GMD_ERR_INVALID,
                                    "PIN_VRAM and SPILLABLE exclude each other");
        if ((m->flags & GMD_ALLOC_LEGACY_IPC) && !server->backend->ops->mem_create_ipc)
                return result_error(ret, GMD_ERR_UNSUPPORTED,
                                    "legacy CUDA IPC handles need the cuda backend; "
                                    "this daemon runs %s", server->backend->ops->name);
        size = pool_round(pool, m->size);
        /* cudaMalloc'd IPC buffers come in 2 MiB steps whatever the VMM
         * granularity. */
        if (m->flags & GMD_ALLOC_LEGACY_IPC)
                size = size ? (size + LEGACY_IPC_ALIGN - 1) / LEGACY_IPC_ALIGN *
                              LEGACY_IPC_ALIGN : 0;
        if (m->size == 0 || size == 0)
                return result_error(ret, GMD_ERR_INVALID,
                                    "size must be between 1 byte and the "
                                    "pool's capacity");
        pool_describe(pool, name, sizeof(name));
        size_format(m->size, asked, sizeof(asked));
        size_format(pool->capacity, cap, sizeof(cap));
        if (size > pool->capacity && placement_host_fallback(m->flags) &&
            size <= server->host.pool.capacity) {
                /* VRAM could never hold it, host memory can: a SPILLABLE
                 * buffer lives there from the start, where the GPU reads it
                 * directly. */
                char host[160] = "";

                if (alloc_buffer_slot(s, ret) == -EMLINK ||
                    !admission_allow_buffer(s, ret))
                        return OUTCOME_ERROR;
                r = alloc_now_on(s, size, m->device, m->flags, GMD_TIER_HOST,
                                 now_us(), ret);
                if (r == 0)
                        return OUTCOME_ALLOCATED;
                if (!alloc_must_wait(r))
                        return OUTCOME_ERROR;
                backing_no_host_room(server, host, sizeof(host));
                return result_error(ret, GMD_ERR_NO_MEMORY,
                                    "%s is larger than the whole %s pool (%s), so "
                                    "this SPILLABLE buffer can only live on host "
                                    "memory%s; free host buffers or raise [pools] "
                                    "host_limit", asked, name, cap, host);
        }
        if (size > pool->capacity)
                return result_error(ret, GMD_ERR_TOO_LARGE,
                                    "%s is larger than the whole %s pool (%s); "
                                    "ask for less or raise --vram-limit",
                                    asked, name, cap);
        if (alloc_buffer_slot(s, ret) == -EMLINK)
                return OUTCOME_ERROR;
        if (!admission_allow_buffer(s, ret))
                return OUTCOME_ERROR;
        verdict = alloc_quota(s, size, GMD_TIER_VRAM, ret);
        if (verdict == QUOTA_REFUSED)
                return OUTCOME_ERROR;
        if (verdict == QUOTA_PARKED)
                evict_reclaim_user(&server->sessions.all, server->devices.n, s->uid);
        /* Its own parked buffers fill max_buffers_per_client: asked back
         * (above), it waits for them like for a quota full of them. */
        if (verdict == QUOTA_OK && s->n_buffers >= server->config.max_buffers_per_client)
                verdict = QUOTA_PARKED;
        /* What fits is served now, past waiters that do not fit — unless
         * one of them has waited past [limits] wait_hold_ms and holds the
         * device so that room accumulates for it (waitq.h), or another
         * process's memory slice keeps what is not free (slice.h). */
        if (verdict == QUOTA_OK &&
            !waitq_holds(&server->waitq, m->device, s->priority,
                         (m->flags & GMD_ALLOC_YIELD) || m->timeout_ms == 0) &&
            !server_slice_keeps(server, m->device, s->pid, s->priority, size,
                               NULL)) {
                r = alloc_now_on(s, size, m->device, m->flags, GMD_TIER_VRAM,
                                 now_us(), ret);
                if (!alloc_must_wait(r))
                        return r == 0 ? OUTCOME_ALLOCATED : OUTCOME_ERROR;
        }
        timeout_ms = m->timeout_ms;
        if (timeout_ms == 0 && placement_host_fallback(m->flags)) {
                /* No wait and no VRAM: VRAM first, then host. */
                r = alloc_now_on(s, size, m->device, m->flags, GMD_TIER_HOST,
                                 now_us(), ret);
                if (!alloc_must_wait(r))
                        return r == 0 ? OUTCOME_ALLOCATED : OUTCOME_ERROR;
        }
        /* Room that idle buffers and clients' caches of idle mappings hold
         * is as good as free: it takes a copy or a message to get it, so
         * even a no-wait request waits for that, briefly. */
        if (timeout_ms == 0 &&
            (verdict == QUOTA_PARKED ||
             evict_room_reachable(server, m->device,
                                  size + waitq_demand(&server->waitq, m->device))))
                timeout_ms = GMD_RECLAIM_GRACE_MS;
        if (timeout_ms == 0) {
                char host[160] = "";

                if (placement_host_fallback(m->flags))
                        backing_no_host_room(server, host, sizeof(host));
                size_format(pool_free(pool), free_b, sizeof(free_b));
                return result_error(ret, GMD_ERR_NO_MEMORY,
                                    "%s has %s free of %s, not enough for %s%s; "
                                    "not waiting (timeout 0)", name, free_b, cap,
                                    asked, host);
        }
        /* GMD_ALLOC_NO_SELF_WAIT: not queued when only this process could
         * make the room (the pass checks again while it waits). */
        if (verdict == QUOTA_OK) {
                gmd_outcome o = alloc_self_bound(s, size, m->device, m->flags,
                                                 now_us(), ret);

                if (o != OUTCOME_LATER)
                        return o;
        }
        if (s->waitq.n_waiting >= server->config.max_waiting_per_client)
                return result_error(ret, GMD_ERR_LIMIT,
                                    "this client already has %u allocations waiting, "
                                    "the most [limits] max_waiting_per_client allows",
                                    s->waitq.n_waiting);
        if (server->config.max_waiting_per_user &&
            alloc_user_waiting(&server->sessions.all, s->uid) >=
            server->config.max_waiting_per_user)
                return result_error(ret, GMD_ERR_LIMIT,
                                    "uid %u's clients already have %u allocations "
                                    "waiting for room, the most [limits] "
                                    "max_waiting_per_user allows; wait for them or "
                                    "ask with a shorter timeout",
                                    (unsigned)s->uid,
                                    alloc_user_waiting(&server->sessions.all, s->uid));
        who = (gmd_waitq_who){ s, s->priority, (uint32_t)s->uid };
        r = waitq_add(&server->waitq, &who, &s->waitq, id, m->size, size, m->device,
                      m->flags, timeout_ms, now_us(), &w);
        if (r < 0)
                return result_error(ret, GMD_ERR_INTERNAL,
                                    "cannot queue the allocation: %s", strerror(-r));
        /* GMD_ALLOC_YIELD: what the process holds may move meanwhile. */
        if (m->flags & GMD_ALLOC_YIELD)
                w->loan = loan_start(s, id);
        return OUTCOME_LATER;
}
