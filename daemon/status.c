/*
 * status — see status.h. The reply is built from stack and scratch arrays
 * pointing into live daemon state (nothing is copied or allocated beyond
 * the row arrays), packed by session_send, and forgotten. A buffer list too
 * long for one packet is cut where the packed size would pass the limit,
 * and the reply says so (more_buffers) so the client asks for the rest.
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

#include "buffer.h"
#include "gpumem.pb-c.h"
#include "reuse.h"
#include "server.h"
#include "session.h"
#include "timeutil.h"

/* Room kept in the packet for everything but the buffer rows. */
#define STATUS_BUFFER_BUDGET (GMD_WIRE_MAX_PAYLOAD / 2)
#define STATUS_MAX_CLIENTS 1024

static bool may_see_details(const gmd_session *viewer, const gmd_session *c)
{
        return viewer->admin || viewer->uid == c->uid;
}

gmd_outcome status_reply(gmd_session *s, uint32_t id,
                         const Gmd__StatusRequest *req, gmd_result *ret)
{
        gmd_server *server = s->server;
        Gmd__StatusReply reply = GMD__STATUS_REPLY__INIT;
        Gmd__PoolInfo *pools = NULL, **pool_ptrs = NULL;
        Gmd__ClientInfo *clients = NULL, **client_ptrs = NULL;
        Gmd__BufferInfo *buffers = NULL, **buffer_ptrs = NULL;
        unsigned n_pools = server->n_devices + 1, n = 0;
        size_t max_buffers = 0, budget = 0;
        gmd_list *pos;
        int r = -ENOMEM;

        pools = calloc(n_pools, sizeof(*pools));
        pool_ptrs = calloc(n_pools, sizeof(*pool_ptrs));
        if (!pools || !pool_ptrs)
                goto out;
        for (unsigned i = 0; i < n_pools; i++) {
                const gmd_pool *p = i < server->n_devices ?
                        &server->vram_pools[i] : &server->host_pool;

                gmd__pool_info__init(&pools[i]);
                pools[i].device = p->device;
                pools[i].tier = (Gmd__Tier)p->tier;
                pools[i].capacity = p->capacity;
                pools[i].used = p->used;
                pools[i].free = pool_free(p);
                if (i < server->n_devices) {
                        const gmd_copyq *q = &server->copyqs.q[i];

                        pools[i].queued_out = q->moves[GMD_COPY_OUT];
                        pools[i].queued_in = q->moves[GMD_COPY_IN];
                        pools[i].bytes_out = q->bytes[GMD_COPY_OUT];
                        pools[i].bytes_in = q->bytes[GMD_COPY_IN];
                        pools[i].copy_us_out = q->busy_us[GMD_COPY_OUT];
                        pools[i].copy_us_in = q->busy_us[GMD_COPY_IN];
                        pools[i].kept = reuse_bytes(&server->reuse, i);
                        if (server->backend->ops->arena_info) {
                                gmd_arena_info arena;

                                server->backend->ops->arena_info(server->backend,
                                                                 i, &arena);
                                pools[i].arena_size = arena.built;
                                pools[i].arena_free = arena.free;
                        }
                }
                pool_ptrs[i] = &pools[i];
                reply.total_capacity += p->capacity;
                reply.total_used += p->used;
        }
        reply.n_pools = n_pools;
        reply.pools = pool_ptrs;

        if (req->what >= GMD__STATUS_WHAT__STATUS_CLIENTS) {
                clients = calloc(STATUS_MAX_CLIENTS, sizeof(*clients));
                client_ptrs = calloc(STATUS_MAX_CLIENTS, sizeof(*client_ptrs));
                if (!clients || !client_ptrs)
                        goto out;
        }
        list_for_each(pos, &server->sessions) {
                gmd_session *c = container_of(pos, gmd_session, link);

                if (!c->hello_done)
                        continue;
                reply.total_clients++;
                reply.total_buffers += c->n_buffers;
                if (!clients || n >= STATUS_MAX_CLIENTS)
                        continue;
                gmd__client_info__init(&clients[n]);
                clients[n].client_id = c->id;
                clients[n].pid = (uint32_t)c->pid;
                clients[n].uid = c->uid;
                clients[n].gid = c->gid;
                clients[n].bytes = c->bytes;
                clients[n].priority = c->priority;
                clients[n].waiting = c->waitq.n_waiting;
                clients[n].parked_bytes = c->parking.bytes;
                clients[n].vram_bytes = c->tier_bytes[GMD_TIER_VRAM];
                clients[n].host_bytes = c->tier_bytes[GMD_TIER_HOST];
                if (may_see_details(s, c)) {
                        clients[n].name = c->name;
                        clients[n].buffers = c->n_buffers;
                } else {
                        clients[n].name = "";
                        clients[n].details_hidden = true;
                }
                client_ptrs[n] = &clients[n];
                n++;
        }
        reply.n_clients = n;
        reply.clients = client_ptrs;

        if (req->what == GMD__STATUS_WHAT__STATUS_BUFFERS) {
                /* A row packs to at most ~60 bytes. */
                max_buffers = STATUS_BUFFER_BUDGET / 64;
                buffers = calloc(max_buffers, sizeof(*buffers));
                buffer_ptrs = calloc(max_buffers, sizeof(*buffer_ptrs));
                if (!buffers || !buffer_ptrs)
                        goto out;
                n = 0;
                list_for_each(pos, &server->buffers) {
                        gmd_dbuffer *b = container_of(pos, gmd_dbuffer, server_link);
                        Gmd__BufferInfo *row = &buffers[n];

                        if (b->id <= req->after_buffer_id)
                                continue;
                        if (req->pid && (uint32_t)b->owner->pid != req->pid)
                                continue;
                        if (!may_see_details(s, b->owner))
                                continue;
                        if (n == max_buffers) {
                                reply.more_buffers = true;
                                break;
                        }
                        gmd__buffer_info__init(row);
                        row->buffer_id = b->id;
                        row->client_id = b->owner->id;
                        row->pid = (uint32_t)b->owner->pid;
                        row->device = b->device;
                        row->size = b->size;
                        row->tier = (Gmd__Tier)b->tier;
                        row->state = (Gmd__BufferState)b->state;
                        row->flags = b->flags;
                        row->acquired = b->acquired;
                        row->parked = b->parked;
                        budget += gmd__buffer_info__get_packed_size(row) + 4;
                        buffer_ptrs[n++] = row;
                        if (budget > STATUS_BUFFER_BUDGET) {
                                reply.more_buffers = true;
                                break;
                        }
                }
                reply.n_buffers = n;
                reply.buffers = buffer_ptrs;
        }

        reply.daemon_version = GMD_VERSION_STRING;
        reply.backend = (char *)server->backend->ops->name;
        reply.uptime_ms = now_ms() - server->start_ms;
        r = session_send(s, GMD__MSG_TYPE__MSG_STATUS_REPLY, id, &reply.base,
                         NULL, 0);
out:
        if (r == -ENOMEM)
                result_error(ret, GMD__ERROR_CODE__ERR_INTERNAL,
                             "out of memory building the status reply");
        free(pools);
        free(pool_ptrs);
        free(clients);
        free(client_ptrs);
        free(buffers);
        free(buffer_ptrs);
        return r == -ENOMEM ? OUTCOME_ERROR : OUTCOME_ANSWERED;
}
