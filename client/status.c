/*
 * status — gmd_query_status(): ask the daemon what it holds and turn its
 * StatusReply into the plain structs of gpumem.h, so applications and
 * gpu-memctl never see protobuf types. Strings are copied with truncation
 * into the fixed fields; the arrays are malloc'd and gmd_status_free()
 * releases them. gmd_report_plan() is the other way round: a client's
 * memory plan, sent for status to show, and remembered by the client to
 * be sent again after a daemon's restart.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "errors.h"
#include "gpumem.pb-c.h"

#define COPY_STRING(dst, src) \
        snprintf((dst), sizeof(dst), "%s", (src) ? (src) : "")

/* calloc that gives NULL without failing for n == 0. */
static int array_new(size_t n, size_t size, void **ret)
{
        *ret = NULL;
        if (n == 0)
                return 0;
        *ret = calloc(n, size);
        return *ret ? 0 : -ENOMEM;
}

static int status_from_wire(const Gmd__StatusReply *reply,
                            gmd_status **ret_status)
{
        gmd_status *s = calloc(1, sizeof(*s));

        if (!s)
                return -ENOMEM;
        COPY_STRING(s->daemon_version, reply->daemon_version);
        COPY_STRING(s->backend, reply->backend);
        s->uptime_ms = reply->uptime_ms;
        s->restores = reply->restores;
        s->restored_ms = reply->restored_ms;
        s->host_bytes_per_s_out = reply->host_bytes_per_s_out;
        s->host_bytes_per_s_in = reply->host_bytes_per_s_in;
        s->total_capacity = reply->total_capacity;
        s->total_used = reply->total_used;
        s->total_clients = reply->total_clients;
        s->total_buffers = reply->total_buffers;

        if (array_new(reply->n_pools, sizeof(*s->pools), (void **)&s->pools) < 0 ||
            array_new(reply->n_clients, sizeof(*s->clients),
                      (void **)&s->clients) < 0 ||
            array_new(reply->n_buffers, sizeof(*s->buffers),
                      (void **)&s->buffers) < 0 ||
            array_new(reply->n_gpu_processes, sizeof(*s->gpu_processes),
                      (void **)&s->gpu_processes) < 0 ||
            array_new(reply->n_peers, sizeof(*s->peers), (void **)&s->peers) < 0) {
                gmd_status_free(s);
                return -ENOMEM;
        }

        s->n_pools = reply->n_pools;
        for (size_t i = 0; i < reply->n_pools; i++) {
                const Gmd__PoolInfo *w = reply->pools[i];
                gmd_pool_status *p = &s->pools[i];

                p->device = w->device;
                p->tier = (gmd_tier)w->tier;
                p->capacity = w->capacity;
                p->used = w->used;
                p->free = w->free;
                p->queued_out = w->queued_out;
                p->queued_in = w->queued_in;
                p->bytes_out = w->bytes_out;
                p->bytes_in = w->bytes_in;
                p->copy_us_out = w->copy_us_out;
                p->copy_us_in = w->copy_us_in;
                p->arena_size = w->arena_size;
                p->arena_free = w->arena_free;
                p->kept = w->kept;
                p->device_free = w->device_free;
                p->unaccounted = w->unaccounted;
                p->link_bytes_per_s_out = w->link_bytes_per_s_out;
                p->link_bytes_per_s_in = w->link_bytes_per_s_in;
                /* 0: a daemon without the field, a link of its own. */
                p->link_group = w->link_group ? w->link_group - 1 : p->device;
                p->slice_pid = w->slice_pid;
                p->slice_left_ms = w->slice_left_ms;
                p->preempt_step = w->preempt_step;
                snprintf(p->uuid, sizeof(p->uuid), "%s", w->uuid ? w->uuid : "");
                snprintf(p->pci_bus_id, sizeof(p->pci_bus_id), "%s",
                         w->pci_bus_id ? w->pci_bus_id : "");
                p->peer_held = w->peer_held_bytes;
                p->peer_spare = w->peer_spare_bytes;
        }
        s->n_peers = reply->n_peers;
        for (size_t i = 0; i < reply->n_peers; i++) {
                s->peers[i].home = reply->peers[i]->home;
                s->peers[i].holder = reply->peers[i]->holder;
                s->peers[i].bytes_per_s = reply->peers[i]->bytes_per_s;
                s->peers[i].held = reply->peers[i]->held_bytes;
        }
        s->n_clients = reply->n_clients;
        for (size_t i = 0; i < reply->n_clients; i++) {
                const Gmd__ClientInfo *w = reply->clients[i];
                gmd_client_status *c = &s->clients[i];

                c->client_id = w->client_id;
                c->pid = w->pid;
                c->uid = w->uid;
                COPY_STRING(c->name, w->name);
                c->bytes = w->bytes;
                c->buffers = w->buffers;
                c->waiting = w->waiting;
                c->priority = w->priority;
                c->gid = w->gid;
                c->details_hidden = w->details_hidden ? 1 : 0;
                c->parked_bytes = w->parked_bytes;
                c->vram_bytes = w->vram_bytes;
                c->host_bytes = w->host_bytes;
                c->lent_bytes = w->lent_bytes;
                c->outside_bytes = w->outside_bytes;
                COPY_STRING(c->planner, w->planner);
                c->plan_kept_bytes = w->plan_kept_bytes;
                c->plan_offloaded_bytes = w->plan_offloaded_bytes;
                c->plan_recomputed_bytes = w->plan_recomputed_bytes;
                c->plan_streamed_bytes = w->plan_streamed_bytes;
        }
        s->n_buffers = reply->n_buffers;
        for (size_t i = 0; i < reply->n_buffers; i++) {
                const Gmd__BufferInfo *w = reply->buffers[i];
                gmd_buffer_status *b = &s->buffers[i];

                b->buffer_id = w->buffer_id;
                b->client_id = w->client_id;
                b->pid = w->pid;
                b->device = w->device;
                b->size = w->size;
                b->tier = (gmd_tier)w->tier;
                b->state = (gmd_buffer_state)w->state;
                b->flags = w->flags;
                b->acquired = w->acquired ? 1 : 0;
                b->parked = w->parked ? 1 : 0;
        }
        s->n_gpu_processes = reply->n_gpu_processes;
        for (size_t i = 0; i < reply->n_gpu_processes; i++) {
                const Gmd__GpuProcess *w = reply->gpu_processes[i];
                gmd_gpu_process_status *p = &s->gpu_processes[i];

                p->device = w->device;
                p->pid = w->pid;
                p->bytes = w->bytes;
                p->client_id = w->client_id;
        }
        *ret_status = s;
        return 0;
}

/** Ask the daemon for pools, clients and buffers; see gpumem.h. */
int gmd_query_status(gmd_client *client, gmd_status_what what, uint32_t pid,
                     gmd_status **ret_status)
{
        Gmd__StatusRequest msg = GMD__STATUS_REQUEST__INIT;
        gmd_request req = { .device = 0 };
        int r;

        if (!client || !ret_status) {
                gmd__error_set("gmd_query_status: client and ret_status must be given");
                return -EINVAL;
        }
        switch (what) {
        case GMD_STATUS_POOLS:
                msg.what = GMD__STATUS_WHAT__STATUS_POOLS;
                break;
        case GMD_STATUS_CLIENTS:
                msg.what = GMD__STATUS_WHAT__STATUS_CLIENTS;
                break;
        case GMD_STATUS_BUFFERS:
                msg.what = GMD__STATUS_WHAT__STATUS_BUFFERS;
                break;
        default:
                gmd__error_set("gmd_query_status: unknown 'what' %d", (int)what);
                return -EINVAL;
        }
        msg.pid = pid;

        r = gmd__client_call(client, &req, GMD__MSG_TYPE__MSG_STATUS, &msg.base);
        if (r == 0) {
                r = status_from_wire((const Gmd__StatusReply *)req.reply,
                                     ret_status);
                if (r < 0)
                        gmd__error_set("out of memory for the status reply");
        }
        gmd__request_clear(&req);
        return r;
}

/** Free a status from gmd_query_status(); accepts NULL, returns NULL. */
gmd_status *gmd_status_free(gmd_status *status)
{
        if (!status)
                return NULL;
        free(status->pools);
        free(status->clients);
        free(status->buffers);
        free(status->gpu_processes);
        free(status->peers);
        free(status);
        return NULL;
}

/* The daemon closes a connection whose planner name is not printable or
 * too long (a protocol error): refuse it here, where the caller learns why. */
#define PLAN_NAME_MAX 32
_Static_assert(sizeof(((gmd_plan_report *)0)->planner) > PLAN_NAME_MAX,
               "a remembered plan holds the longest name and its NUL");

int gmd_report_plan(gmd_client *client, const char *planner, uint64_t kept,
                    uint64_t offloaded, uint64_t recomputed, uint64_t streamed)
{
        gmd_plan_report plan;
        size_t len;

        if (!client) {
                gmd__error_set("gmd_report_plan: no client");
                return -EINVAL;
        }
        if (!planner)
                planner = "";
        len = strlen(planner);
        if (len > PLAN_NAME_MAX) {
                gmd__error_set("gmd_report_plan: planner name longer than "
                               "%d bytes", PLAN_NAME_MAX);
                return -EINVAL;
        }
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)planner[i];

                if (c < 0x20 || c > 0x7e) {
                        gmd__error_set("gmd_report_plan: planner name is not "
                                       "printable ASCII");
                        return -EINVAL;
                }
        }
        memcpy(plan.planner, planner, len + 1);
        plan.kept = kept;
        plan.offloaded = offloaded;
        plan.recomputed = recomputed;
        plan.streamed = streamed;
        /* Remembered, so that a daemon that restarts under the client
         * hears it again once the client is back (reconnect.c). */
        return gmd__client_report_plan(client, &plan);
}
