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

#include "admission.h"
#include "backing.h"
#include "buffer.h"
#include "log.h"
#include "evict.h"
#include "reuse.h"
#include "parking.h"
#include "server.h"
#include "session.h"
#include "timeutil.h"
#include "waitq.h"

#define KNOWN_ALLOC_FLAGS (GMD_ALLOC_PIN_VRAM | GMD_ALLOC_SPILLABLE | \
                           GMD_ALLOC_LEGACY_IPC)
#define LEGACY_IPC_ALIGN (2ull << 20)

typedef enum quota_verdict {
        QUOTA_OK,
        QUOTA_REFUSED,      /* an error reply was sent */
        QUOTA_PARKED,       /* over only by what the user's caches hold */
} quota_verdict;

/* Would `size` more bytes on `tier` pass the quota of the client's user?
 * Parked buffers count (an unpark cannot be refused), but when they are
 * all that is in the way the caller asks for them back and waits. */
static quota_verdict quota_check(gmd_session *s, uint32_t id, uint64_t size,
                                 gmd_tier tier)
{
        const gmd_limits *l = &s->limits;
        uint64_t quota = tier == GMD_TIER_HOST ? l->host_quota : l->vram_quota;
        const char *from = tier == GMD_TIER_HOST ? l->host_from : l->vram_from;
        char held[32], asked[32], limit[32];
        gmd_usage u;

        if (!quota && !l->max_buffers)
                return QUOTA_OK;
        server_user_usage(s->server, s->uid, &u);
        if (quota && u.bytes[tier] + size > quota) {
                uint64_t parked = tier == GMD_TIER_VRAM ? u.parked : 0;

                /* A client that parked a buffer it had released may see it
                 * moved to host memory after all: never count more parked
                 * than there is. */
                if (parked > u.bytes[tier])
                        parked = u.bytes[tier];

                if (u.bytes[tier] - parked + size <= quota)
                        return QUOTA_PARKED;
                session_send_error(s, id, GMD__ERROR_CODE__ERR_QUOTA,
                                   "uid %u holds %s of %s; %s more would pass its "
                                   "%s_quota of %s set in %s", (unsigned)s->uid,
                                   size_format(u.bytes[tier] - parked, held, sizeof(held)),
                                   tier == GMD_TIER_HOST ? "host memory" : "VRAM",
                                   size_format(size, asked, sizeof(asked)),
                                   tier == GMD_TIER_HOST ? "host" : "vram",
                                   size_format(quota, limit, sizeof(limit)), from);
                return QUOTA_REFUSED;
        }
        if (l->max_buffers && u.buffers + 1 > l->max_buffers) {
                if (u.buffers - u.parked_buffers + 1 <= l->max_buffers)
                        return QUOTA_PARKED;
                session_send_error(s, id, GMD__ERROR_CODE__ERR_QUOTA,
                                   "uid %u holds %u buffers, the max_buffers quota "
                                   "set in %s", (unsigned)s->uid,
                                   u.buffers - u.parked_buffers, l->buffers_from);
                return QUOTA_REFUSED;
        }
        return QUOTA_OK;
}

int alloc_now_on(gmd_session *s, uint32_t id, uint64_t size, unsigned device,
                 unsigned flags, gmd_tier tier, uint64_t since_us)
{
        gmd_server *server = s->server;
        Gmd__AllocReply reply = GMD__ALLOC_REPLY__INIT;
        Gmd__Segment segment = GMD__SEGMENT__INIT, *segments[1] = { &segment };
        gmd_dbuffer *b;
        int r;

        /* Checked again when a waiter is served: the user's other clients
         * may have allocated meanwhile, or a reload lowered the quota. A
         * quota full of parked buffers waits for them to come back. */
        switch (quota_check(s, id, size, tier)) {
        case QUOTA_REFUSED:
                return -EDQUOT;
        case QUOTA_PARKED:
                parking_reclaim_user(server, s->uid);
                return -ENOSPC;
        case QUOTA_OK:
                break;
        }
        r = buffer_new(server, s, device, tier, size, flags, &b);
        if (r == -ENOSPC)
                return r;
        if (r == -EMFILE || r == -ENFILE) {
                /* Not the driver's failure: the daemon's fd table is full
                 * (each buffer keeps an fd). Said so, as a limit. */
                log_warning("creating a buffer: %s", strerror(-r));
                session_send_error(s, id, GMD__ERROR_CODE__ERR_LIMIT,
                                   "gpu-memd has no file descriptor left for "
                                   "another buffer (%s): free buffers, or ask the "
                                   "administrator to raise LimitNOFILE or lower "
                                   "[limits] max_buffers_per_user", strerror(-r));
                return r;
        }
        if (r < 0) {
                log_error("creating %llu bytes on device %u failed: %s",
                          (unsigned long long)size, device, strerror(-r));
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INTERNAL,
                                   "the %s backend could not create %llu bytes on "
                                   "device %u: %s", server->backend->ops->name,
                                   (unsigned long long)size, device, strerror(-r));
                return r;
        }
        reply.buffer_id = b->id;
        reply.size = b->size;
        reply.tier = (Gmd__Tier)b->tier;
        if (b->mem->fd < 0) {
                /* Legacy IPC: the handle instead of segments and an fd. */
                reply.ipc_handle.len = sizeof(b->mem->ipc_handle);
                reply.ipc_handle.data = b->mem->ipc_handle;
                session_send(s, GMD__MSG_TYPE__MSG_ALLOC_REPLY, id, &reply.base,
                             NULL, 0);
        } else {
                segment.fd_index = 0;
                segment.offset = 0;
                segment.size = b->mem->size;
                reply.n_segments = 1;
                reply.segments = segments;
                b->mem->shared = true;
                session_send(s, GMD__MSG_TYPE__MSG_ALLOC_REPLY, id, &reply.base,
                             &b->mem->fd, 1);
        }
        server->stats.allocations++;
        stats_alloc_latency(&server->stats, now_us() - since_us);
        return 0;
}

void alloc_handle(gmd_session *s, uint32_t id, const Gmd__AllocRequest *m)
{
        gmd_server *server = s->server;
        gmd_pool *pool = server_vram_pool(server, m->device);
        char name[32], asked[32], cap[32], free_b[32];
        quota_verdict verdict;
        int64_t timeout_ms;
        uint64_t size;
        int r;

        if (!pool) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INVALID,
                                   "no device %u: this daemon serves %u device%s",
                                   m->device, server->n_devices,
                                   server->n_devices == 1 ? "" : "s");
                return;
        }
        if (m->flags & ~KNOWN_ALLOC_FLAGS) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INVALID,
                                   "unknown allocation flags 0x%x", m->flags);
                return;
        }
        if ((m->flags & GMD_ALLOC_PIN_VRAM) && (m->flags & GMD_ALLOC_SPILLABLE)) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INVALID,
                                   "PIN_VRAM and SPILLABLE exclude each other");
                return;
        }
        if ((m->flags & GMD_ALLOC_LEGACY_IPC) && !server->backend->ops->mem_create_ipc) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_UNSUPPORTED,
                                   "legacy CUDA IPC handles need the cuda backend; "
                                   "this daemon runs %s", server->backend->ops->name);
                return;
        }
        size = pool_round(pool, m->size);
        /* cudaMalloc'd IPC buffers come in 2 MiB steps whatever the VMM
         * granularity. */
        if (m->flags & GMD_ALLOC_LEGACY_IPC)
                size = size ? (size + LEGACY_IPC_ALIGN - 1) / LEGACY_IPC_ALIGN *
                              LEGACY_IPC_ALIGN : 0;
        if (m->size == 0 || size == 0) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INVALID,
                                   "size must be between 1 byte and the pool's capacity");
                return;
        }
        pool_describe(pool, name, sizeof(name));
        size_format(m->size, asked, sizeof(asked));
        size_format(pool->capacity, cap, sizeof(cap));
        if (size > pool->capacity) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_TOO_LARGE,
                                   "%s is larger than the whole %s pool (%s); "
                                   "ask for less or raise --vram-limit",
                                   asked, name, cap);
                return;
        }
        if (s->n_buffers - s->n_parked >= server->config.max_buffers_per_client) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_LIMIT,
                                   "this client already holds %u buffers, the most "
                                   "[limits] max_buffers_per_client allows",
                                   s->n_buffers - s->n_parked);
                return;
        }
        if (!admission_allow_buffer(s, id))
                return;
        verdict = quota_check(s, id, size, GMD_TIER_VRAM);
        if (verdict == QUOTA_REFUSED)
                return;
        if (verdict == QUOTA_PARKED)
                parking_reclaim_user(server, s->uid);
        /* Behind requests already waiting on this device, never past them. */
        if (verdict == QUOTA_OK && waitq_demand(server, m->device) == 0) {
                r = alloc_now_on(s, id, size, m->device, m->flags, GMD_TIER_VRAM,
                                 now_us());
                if (r != -ENOSPC)
                        return;
        }
        timeout_ms = m->timeout_ms;
        if (timeout_ms == 0 && (m->flags & GMD_ALLOC_SPILLABLE)) {
                /* No wait and no VRAM: VRAM first, then host. */
                r = alloc_now_on(s, id, size, m->device, m->flags, GMD_TIER_HOST,
                                 now_us());
                if (r != -ENOSPC)
                        return;
        }
        /* Room that idle buffers and clients' caches of idle mappings hold
         * is as good as free: it takes a copy or a message to get it, so
         * even a no-wait request waits for that, briefly. */
        if (timeout_ms == 0 &&
            (verdict == QUOTA_PARKED ||
             pool_free(pool) + reuse_bytes(server, m->device) +
             parking_reclaimable(server, m->device) +
             evict_evictable(server, m->device) >= size + waitq_demand(server, m->device)))
                timeout_ms = GMD_RECLAIM_GRACE_MS;
        if (timeout_ms == 0) {
                char host[160] = "";

                if (m->flags & GMD_ALLOC_SPILLABLE)
                        backing_no_host_room(server, host, sizeof(host));
                size_format(pool_free(pool), free_b, sizeof(free_b));
                session_send_error(s, id, GMD__ERROR_CODE__ERR_NO_MEMORY,
                                   "%s has %s free of %s, not enough for %s%s; "
                                   "not waiting (timeout 0)", name, free_b, cap,
                                   asked, host);
                return;
        }
        if (s->n_waiting >= server->config.max_waiting_per_client) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_LIMIT,
                                   "this client already has %u allocations waiting, "
                                   "the most [limits] max_waiting_per_client allows",
                                   s->n_waiting);
                return;
        }
        r = waitq_add(server, s, id, m->size, size, m->device, m->flags,
                      timeout_ms, now_us());
        if (r < 0)
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INTERNAL,
                                   "cannot queue the allocation: %s", strerror(-r));
}
