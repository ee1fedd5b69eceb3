/*
 * status — see status.h. The reply is rendered from a snapshot of the
 * daemon's state (snapshot.h, the one the metrics page is rendered from):
 * scratch arrays of protobuf rows point into it, session_send packs them,
 * and both are forgotten. A buffer list too long for one packet is cut
 * where the packed size would pass the limit, and the reply says so
 * (more_buffers) so the client asks for the rest.
 *
 * Who sees what: everyone sees the pools and every client's pid, uid and
 * bytes (what is using the GPU is no secret on a shared machine); only root,
 * the admin group and the client's own user see its name, buffer counts and
 * buffers.
 */
#include "status.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "backend.h"
#include "gpumem.h"
#include "gpumem.pb-c.h"
#include "server.h"
#include "session.h"
#include "session_io.h"
#include "snapshot.h"
#include "vram.h"
#include "wire.h"

/* Room kept in the packet for everything but the buffer rows. */
#define STATUS_BUFFER_BUDGET (GMD_WIRE_MAX_PAYLOAD / 2)
#define STATUS_MAX_CLIENTS 1024

static bool may_see_details(const gmd_session *viewer, uid_t owner_uid)
{
        return viewer->admin || viewer->uid == owner_uid;
}

static void render_pool(const gmd_pool_snapshot *p, Gmd__PoolInfo *ret)
{
        gmd__pool_info__init(ret);
        ret->device = p->device;
        ret->tier = (Gmd__Tier)p->tier;
        ret->capacity = p->capacity;
        ret->used = p->used;
        ret->free = p->free;
        ret->queued_out = p->queued[GMD_COPY_OUT];
        ret->queued_in = p->queued[GMD_COPY_IN];
        ret->bytes_out = p->bytes[GMD_COPY_OUT];
        ret->bytes_in = p->bytes[GMD_COPY_IN];
        ret->copy_us_out = p->busy_us[GMD_COPY_OUT];
        ret->copy_us_in = p->busy_us[GMD_COPY_IN];
        ret->kept = p->kept;
        ret->arena_size = p->arena_built;
        ret->arena_free = p->arena_free;
        ret->device_free = p->device_free;
        ret->unaccounted = p->unaccounted;
        ret->link_bytes_per_s_out = p->link[GMD_COPY_OUT];
        ret->link_bytes_per_s_in = p->link[GMD_COPY_IN];
        if (p->tier == GMD_TIER_VRAM)
                ret->link_group = p->link_group + 1;
        ret->slice_pid = p->slice_pid > 0 ? (uint32_t)p->slice_pid : 0;
        ret->slice_left_ms = ret->slice_pid ? p->slice_left_ms : 0;
        ret->preempt_step = p->preempt_step;
        ret->peer_held_bytes = p->peer_held;
        ret->peer_spare_bytes = p->peer_spare;
}

static void render_client(const gmd_session *viewer,
                          const gmd_client_snapshot *c, Gmd__ClientInfo *ret)
{
        gmd__client_info__init(ret);
        ret->client_id = c->id;
        ret->pid = (uint32_t)c->pid;
        ret->uid = c->uid;
        ret->gid = c->gid;
        ret->bytes = c->bytes;
        ret->priority = c->priority;
        ret->waiting = c->waiting;
        ret->parked_bytes = c->parked_bytes;
        ret->vram_bytes = c->tier_bytes[GMD_TIER_VRAM];
        ret->host_bytes = c->tier_bytes[GMD_TIER_HOST];
        ret->lent_bytes = c->lent_bytes;
        ret->outside_bytes = c->outside_bytes;
        ret->plan_kept_bytes = c->plan_kept;
        ret->plan_offloaded_bytes = c->plan_offloaded;
        ret->plan_recomputed_bytes = c->plan_recomputed;
        ret->plan_streamed_bytes = c->plan_streamed;
        if (may_see_details(viewer, c->uid)) {
                ret->name = (char *)c->name;
                ret->planner = (char *)c->planner;
                ret->buffers = c->n_buffers;
        } else {
                ret->name = "";
                ret->details_hidden = true;
        }
}

static void render_buffer(const gmd_buffer_snapshot *b, Gmd__BufferInfo *ret)
{
        gmd__buffer_info__init(ret);
        ret->buffer_id = b->id;
        ret->client_id = b->client_id;
        ret->pid = (uint32_t)b->pid;
        ret->device = b->device;
        ret->size = b->size;
        ret->tier = (Gmd__Tier)b->tier;
        ret->state = (Gmd__BufferState)b->state;
        ret->flags = b->flags;
        ret->acquired = b->acquired;
        ret->parked = b->parked;
}

/* Fit the reply in one packet: client rows go first, from the end
 * (total_clients still counts them all), then buffer rows, down to one
 * (more_buffers: the client asks for the rest). 1024 client rows of up to
 * ~175 bytes, beside a buffer page of half a packet, would not fit. */
static void status_fit(Gmd__StatusReply *reply)
{
        while (gmd__status_reply__get_packed_size(reply) > GMD_WIRE_MAX_PAYLOAD) {
                if (reply->n_clients > 0) {
                        reply->n_clients /= 2;
                } else if (reply->n_buffers > 1) {
                        reply->n_buffers /= 2;
                        reply->more_buffers = true;
                } else {
                        break;  /* session_send refuses it: an error reply */
                }
        }
}

gmd_outcome status_reply(gmd_session *s, uint32_t id,
                         const Gmd__StatusRequest *req, gmd_result *ret)
{
        Gmd__StatusReply reply = GMD__STATUS_REPLY__INIT;
        Gmd__PoolInfo *pools = NULL, **pool_ptrs = NULL;
        Gmd__ClientInfo *clients = NULL, **client_ptrs = NULL;
        Gmd__BufferInfo *buffers = NULL, **buffer_ptrs = NULL;
        Gmd__GpuProcess *procs = NULL, **proc_ptrs = NULL;
        Gmd__PeerLink *peers = NULL, **peer_ptrs = NULL;
        bool want_buffers = req->what == GMD__STATUS_WHAT__STATUS_BUFFERS;
        /* A row packs to at most ~60 bytes. */
        size_t max_buffers = STATUS_BUFFER_BUDGET / 64, budget = 0, n = 0;
        /* The page asked for, and one more row to know there are more. */
        gmd_buffer_filter filter = {
                .after_id = req->after_buffer_id, .pid = (pid_t)req->pid,
                .all_users = s->admin, .uid = s->uid, .max = max_buffers + 1,
        };
        gmd_snapshot snap = { 0 };
        int r;

        /* The driver's view as of now (a few µs a device, vram.h). */
        for (unsigned d = 0; d < s->server->devices.n; d++) {
                (void)vram_refresh(s->server, d);
                vram_refresh_processes(s->server, d);
        }
        r = snapshot_take(s->server, want_buffers ? SNAPSHOT_BUFFERS : 0, &filter,
                          &snap);
        if (r < 0)
                goto out;
        r = -ENOMEM;
        pools = calloc(snap.n_pools, sizeof(*pools));
        pool_ptrs = calloc(snap.n_pools, sizeof(*pool_ptrs));
        if (!pools || !pool_ptrs)
                goto out;
        for (unsigned i = 0; i < snap.n_pools; i++) {
                const gmd_pool_snapshot *p = &snap.pools[i];

                render_pool(p, &pools[i]);
                if (p->tier == GMD_TIER_VRAM && p->device < s->server->devices.n) {
                        gmd_device_info *info = &s->server->devices.info[p->device];

                        pools[i].uuid = info->uuid;
                        pools[i].pci_bus_id = info->pci_bus_id;
                }
                pool_ptrs[i] = &pools[i];
        }
        reply.n_pools = snap.n_pools;
        reply.pools = pool_ptrs;
        reply.total_capacity = snap.total_capacity;
        reply.total_used = snap.total_used;
        reply.total_clients = snap.n_clients;
        reply.total_buffers = snap.total_buffers;

        if (req->what >= GMD__STATUS_WHAT__STATUS_CLIENTS) {
                clients = calloc(STATUS_MAX_CLIENTS, sizeof(*clients));
                client_ptrs = calloc(STATUS_MAX_CLIENTS, sizeof(*client_ptrs));
                if (!clients || !client_ptrs)
                        goto out;
                for (n = 0; n < snap.n_clients && n < STATUS_MAX_CLIENTS; n++) {
                        render_client(s, &snap.clients[n], &clients[n]);
                        client_ptrs[n] = &clients[n];
                }
                reply.n_clients = n;
                reply.clients = client_ptrs;
        }

        if (want_buffers) {
                buffers = calloc(max_buffers, sizeof(*buffers));
                buffer_ptrs = calloc(max_buffers, sizeof(*buffer_ptrs));
                if (!buffers || !buffer_ptrs)
                        goto out;
                n = 0;
                for (size_t i = 0; i < snap.n_buffers; i++) {
                        const gmd_buffer_snapshot *b = &snap.buffers[i];

                        if (b->id <= req->after_buffer_id)
                                continue;
                        if (req->pid && (uint32_t)b->pid != req->pid)
                                continue;
                        if (!may_see_details(s, b->uid))
                                continue;
                        if (n == max_buffers) {
                                reply.more_buffers = true;
                                break;
                        }
                        render_buffer(b, &buffers[n]);
                        budget += gmd__buffer_info__get_packed_size(&buffers[n]) + 4;
                        buffer_ptrs[n] = &buffers[n];
                        n++;
                        if (budget > STATUS_BUFFER_BUDGET) {
                                reply.more_buffers = true;
                                break;
                        }
                }
                reply.n_buffers = n;
                reply.buffers = buffer_ptrs;
        }

        if (snap.n_processes) {
                procs = calloc(snap.n_processes, sizeof(*procs));
                proc_ptrs = calloc(snap.n_processes, sizeof(*proc_ptrs));
                if (!procs || !proc_ptrs)
                        goto out;
                for (size_t i = 0; i < snap.n_processes; i++) {
                        gmd__gpu_process__init(&procs[i]);
                        procs[i].device = snap.processes[i].device;
                        procs[i].pid = (uint32_t)snap.processes[i].pid;
                        procs[i].bytes = snap.processes[i].bytes;
                        procs[i].client_id = snap.processes[i].client_id;
                        proc_ptrs[i] = &procs[i];
                }
                reply.n_gpu_processes = snap.n_processes;
                reply.gpu_processes = proc_ptrs;
        }

        if (snap.n_peers) {
                peers = calloc(snap.n_peers, sizeof(*peers));
                peer_ptrs = calloc(snap.n_peers, sizeof(*peer_ptrs));
                if (!peers || !peer_ptrs)
                        goto out;
                for (size_t i = 0; i < snap.n_peers; i++) {
                        gmd__peer_link__init(&peers[i]);
                        peers[i].home = snap.peers[i].home;
                        peers[i].holder = snap.peers[i].holder;
                        peers[i].bytes_per_s = snap.peers[i].bytes_per_s;
                        peers[i].held_bytes = snap.peers[i].held;
                        peer_ptrs[i] = &peers[i];
                }
                reply.n_peers = snap.n_peers;
                reply.peers = peer_ptrs;
        }

        reply.daemon_version = (char *)snap.version;
        reply.backend = (char *)snap.backend;
        reply.uptime_ms = snap.uptime_ms;
        reply.restores = snap.restores;
        reply.restored_ms = snap.restored_ms;
        reply.host_bytes_per_s_out = snap.host_link[GMD_COPY_OUT];
        reply.host_bytes_per_s_in = snap.host_link[GMD_COPY_IN];
        status_fit(&reply);
        r = session_send(s, GMD__MSG_TYPE__MSG_STATUS_REPLY, id, &reply.base,
                         NULL, 0);
out:
        if (r == -ENOMEM)
                result_error(ret, GMD__ERROR_CODE__ERR_INTERNAL,
                             "out of memory building the status reply");
        /* Nothing was sent: an error the client can read, not silence. */
        if (r == -EMSGSIZE)
                result_error(ret, GMD__ERROR_CODE__ERR_INTERNAL,
                             "the status reply exceeds the protocol's packet "
                             "limit (too many clients to list); the metrics "
                             "endpoint shows the same figures");
        free(pools);
        free(pool_ptrs);
        free(procs);
        free(proc_ptrs);
        free(peers);
        free(peer_ptrs);
        free(clients);
        free(client_ptrs);
        free(buffers);
        free(buffer_ptrs);
        snapshot_clear(&snap);
        return r == -ENOMEM || r == -EMSGSIZE ? OUTCOME_ERROR : OUTCOME_ANSWERED;
}
