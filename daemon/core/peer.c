/*
 * peer — see peer.h.
 */
#include "peer.h"

#include <errno.h>
#include <string.h>

#include "backing.h"
#include "buffer.h"
#include "log.h"
#include "pending.h"
#include "placement.h"
#include "server.h"
#include "session.h"
#include "size.h"
#include "vram.h"
#include "waitq.h"

void peer_init(gmd_server *server)
{
        const gmd_backend_ops *ops = server->backend->ops;
        gmd_peers *peers = &server->peers;
        const char *mode = server->config.peer_tier;
        unsigned n = server->devices.n;

        memset(peers->rate, 0, sizeof(peers->rate));
        peers->on = false;
        if (!ops->peer_rate || !ops->mem_grant || strcmp(mode, "off") == 0 ||
            n < 2 || !server_can_move(server))
                return;
        for (unsigned a = 0; a < n && a < GMD_MAX_DEVICES; a++) {
                for (unsigned b = 0; b < n && b < GMD_MAX_DEVICES; b++) {
                        uint64_t rate = a == b ? 0 :
                                        ops->peer_rate(server->backend, a, b);
                        char r[32];

                        if (!rate)
                                continue;
                        peers->rate[a][b] = rate;
                        peers->on = true;
                        size_format(rate, r, sizeof(r));
                        log_info("peer tier: device %u reaches device %u at "
                                 "%s/s", a, b, r);
                }
        }
        if (!peers->on)
                log_info("peer tier: no device reaches another; swap-outs go "
                         "to host memory");
}

/* Is `to` worth it for a swap-out of `home`'s: under "auto", a peer link
 * at least as fast as the home device's link to host memory (measured
 * soon after start; before that, any peer). */
static bool peer_worth(gmd_server *server, unsigned home, unsigned to)
{
        const gmd_backend_ops *ops = server->backend->ops;
        gmd_link_info host = { { 0, 0 } };

        if (strcmp(server->config.peer_tier, "on") == 0)
                return true;
        if (ops->link_info)
                ops->link_info(server->backend, home, &host);
        return !host.bytes_per_s[GMD_COPY_OUT] ||
               server->peers.rate[home][to] >= host.bytes_per_s[GMD_COPY_OUT];
}

bool peer_holds(const gmd_dbuffer *b)
{
        return b->tier == GMD_TIER_HOST && b->mem && b->mem->peer;
}

void peer_orphan(gmd_server *server, const gmd_mem *src, const gmd_mem *dst,
                 int sign)
{
        const gmd_mem *mems[2] = { src, dst };

        for (int i = 0; i < 2; i++) {
                const gmd_mem *mem = mems[i];

                if (!mem || !mem->peer || mem->device >= GMD_MAX_DEVICES)
                        continue;
                if (sign > 0)
                        server->peers.orphaned_on[mem->device] += mem->size;
                else
                        server->peers.orphaned_on[mem->device] -= mem->size;
        }
}

bool peer_keep(gmd_server *server, gmd_mem *mem)
{
        gmd_peers *peers = &server->peers;
        unsigned holder = mem->device;
        gmd_pool *pool = server_vram_pool(server, holder);
        int slot = -1;

        /* Memory whose fd went to a client (a SPILLABLE buffer's owner
         * mapped it) is never handed to another buffer (backend.h). */
        if (!mem->peer || mem->shared || holder >= GMD_MAX_DEVICES || !pool ||
            waitq_oldest(&server->waitq, holder) ||
            peers->spare_on[holder] + mem->size > pool->capacity / 4)
                return false;
        for (int i = 0; i < PEER_SPARES && slot < 0; i++)
                if (!peers->spare[holder][i])
                        slot = i;
        if (slot < 0)
                return false;
        /* No buffer's any more: out of the pair's count (peer_home stays:
         * the device it was last granted to). */
        backing_peer_count(server, mem, mem->peer_home, -1);
        peers->spare[holder][slot] = mem;
        peers->spare_on[holder] += mem->size;
        return true;
}

/* Release `holder`'s spares; the bytes given back. */
static uint64_t drop_spares(gmd_server *server, unsigned holder)
{
        gmd_peers *peers = &server->peers;
        uint64_t bytes = 0;

        for (int i = 0; i < PEER_SPARES; i++) {
                gmd_mem *mem = peers->spare[holder][i];

                if (!mem)
                        continue;
                peers->spare[holder][i] = NULL;
                peers->spare_on[holder] -= mem->size;
                bytes += mem->size;
                backing_release(server, mem);
        }
        /* Room now: the wait queue is served again. */
        if (bytes)
                pending_mark(&server->pending, PENDING_ROOM);
        return bytes;
}

void peer_drop_spares(gmd_server *server)
{
        for (unsigned d = 0; d < server->devices.n && d < GMD_MAX_DEVICES; d++)
                drop_spares(server, d);
}

/* A spare of `size` on `holder`, taken out of the spares; else NULL. */
static gmd_mem *take_spare(gmd_peers *peers, unsigned holder, uint64_t size)
{
        for (int i = 0; i < PEER_SPARES; i++) {
                gmd_mem *mem = peers->spare[holder][i];

                if (mem && mem->size == size) {
                        peers->spare[holder][i] = NULL;
                        peers->spare_on[holder] -= size;
                        return mem;
                }
        }
        return NULL;
}

int peer_destination(gmd_server *server, const gmd_dbuffer *b,
                     gmd_mem **ret_mem)
{
        const gmd_backend_ops *ops = server->backend->ops;
        unsigned home = b->device, best = GMD_MAX_DEVICES;
        uint64_t best_free = 0;
        gmd_result why;
        gmd_pool *pool;
        gmd_mem *mem;
        int r;

        /* A SWAPPABLE buffer only read since its swap-in goes to host
         * memory: a swap-in from there keeps the host copy, and its later
         * pageouts copy nothing at all (hostcopy.h), where each to a peer
         * would copy it again (streamed weights, GPU suite
         * test_offload.py). A SPILLABLE one keeps no host copy: its owner
         * maps it wherever it rests, a peer's VRAM too. */
        if (!server->peers.on || home >= GMD_MAX_DEVICES ||
            (placement_host_copy_private(b) && b->lease_ro))
                return -ENOSPC;
        for (unsigned p = 0; p < server->devices.n && p < GMD_MAX_DEVICES; p++) {
                uint64_t free_now;

                if (!server->peers.rate[home][p] || !peer_worth(server, home, p))
                        continue;
                /* A SPILLABLE buffer's owner maps it there: only where its
                 * process said it can (MSG_REACH); else host memory. */
                if (placement_usable_on_host(b) &&
                    !peer_owner_maps(b->owner, home, p))
                        continue;
                /* Its own clients first: not while anything waits there,
                 * and never its last peer_headroom bytes. */
                if (waitq_oldest(&server->waitq, p))
                        continue;
                /* VRAM kept there for this size: paid for, mapped. */
                mem = take_spare(&server->peers, p, b->size);
                if (mem) {
                        best = p;
                        goto granted;
                }
                free_now = pool_free(server_vram_pool(server, p));
                if (free_now < b->size + server->config.peer_headroom ||
                    free_now <= best_free)
                        continue;
                best = p;
                best_free = free_now;
        }
        if (best == GMD_MAX_DEVICES)
                return -ENOSPC;
        pool = server_vram_pool(server, best);
        if (pool_take(pool, b->size) < 0)
                return -ENOSPC;
        /* The pool has room; the GPU may not (memory held outside). */
        result_ok(&why);
        r = vram_check(server, best, b->size, &why);
        if (r == 0) {
                r = backing_create(server, GMD_TIER_VRAM, best, b->size, true,
                                   &mem);
                if (r == 0)
                        backing_vram_taken(server, best);
        } else
                r = -ENOSPC;
        if (r < 0) {
                pool_give(pool, b->size);
                return -ENOSPC;
        }
        mem->peer_home = best;      /* granted to none but its own */
granted:
        r = mem->peer_home == home ? 0 :
            ops->mem_grant(server->backend, mem, home);
        if (r < 0) {
                log_warning("peer tier: device %u cannot reach the VRAM of "
                            "device %u (%s): not using it", home, best,
                            strerror(-r));
                server->peers.rate[home][best] = 0;
                backing_release(server, mem);
                return -ENOSPC;
        }
        /* Its owner will map it: it needs an fd to be sent. */
        if (placement_usable_on_host(b) && (mem->fd < 0 || mem->daemon_only)) {
                backing_release(server, mem);
                return -ENOSPC;
        }
        backing_peer_count(server, mem, home, 1);
        server->peers.placed++;
        *ret_mem = mem;
        return 0;
}

uint64_t peer_drop_spares_on(gmd_server *server, unsigned device)
{
        return device < GMD_MAX_DEVICES ? drop_spares(server, device) : 0;
}

bool peer_relocatable(const gmd_dbuffer *b, unsigned device)
{
        /* What rests there, its swap-in queued or not: not one on its way
         * back (that copy reads it; its end frees the peer), nor a leaving
         * client's (freed within a few loop iterations).
         *
         * A queued swap-in is not about to free the peer: it waits for
         * room on its home device, which may not come for as long as that
         * device's clients hold their memory. Kept on the peer for it, the
         * buffer made the peer's own clients wait on the other device
         * (test_peer's test_relocated_while_its_swap_in_waits: nothing was
         * moved off for device 1's allocation while the acquire waited
         * for a full device 0) — for ever where that room was held by a
         * process that itself waited on the peer with no deadline. Moved
         * on, the swap-in waits for that move's end and copies from host
         * memory (move_in_begin); evict.c moves such buffers after those
         * nobody waits for. */
        /* A SPILLABLE buffer's owner maps it there and may use it: moved
         * only while released, like any buffer (placement.h); counted
         * meanwhile in peers.busy_on, so not as room there. */
        return peer_holds(b) && b->mem->device == device && !b->move &&
               (!b->acquirer || b->move_waiter) && !b->owner->closing &&
               placement_may_move(b);
}

void peer_index(gmd_server *server, gmd_dbuffer *b, bool gone)
{
        uint64_t *busy = server->peers.busy_on;
        unsigned want = 0;

        /* On a peer (a restore counts the pair only after it adopted the
         * buffer, so the memory's tier says it, not mem->peer). */
        if (!gone && b->tier == GMD_TIER_HOST && b->mem &&
            b->mem->tier == GMD_TIER_VRAM && b->mem->device < GMD_MAX_DEVICES &&
            !placement_may_move(b))
                want = b->mem->device + 1;
        if (want == b->peer_busy)
                return;
        if (b->peer_busy)
                busy[b->peer_busy - 1] -= b->size;
        if (want)
                busy[want - 1] += b->size;
        b->peer_busy = want;
}

void peer_owner_reach(gmd_session *s, const uint64_t maps[GMD_MAX_DEVICES])
{
        unsigned n = s->server->devices.n;
        uint64_t known = n >= 64 ? ~0ull : (1ull << n) - 1;

        for (unsigned d = 0; d < GMD_MAX_DEVICES; d++)
                s->maps[d] = d < n ? maps[d] & known & ~(1ull << d) : 0;
}

bool peer_owner_maps(const gmd_session *s, unsigned home, unsigned holder)
{
        if (home == holder)
                return true;
        return home < GMD_MAX_DEVICES && holder < GMD_MAX_DEVICES &&
               (s->maps[home] >> holder) & 1;
}

void peer_owner_cannot_map(gmd_session *s, unsigned home, unsigned holder)
{
        if (home < GMD_MAX_DEVICES && holder < GMD_MAX_DEVICES)
                s->maps[home] &= ~(1ull << holder);
}
