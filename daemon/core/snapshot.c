/*
 * snapshot — see snapshot.h. Everything is read on the loop thread, which
 * owns the state, in one pass per list; the arrays are sized from the
 * lists' lengths first, so a snapshot is either whole or not made.
 */
#include "snapshot.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backing.h"
#include "buffer.h"
#include "copyq.h"
#include "gpumem.h"
#include "pool.h"
#include "reuse.h"
#include "server.h"
#include "session.h"
#include "timeutil.h"
#include "vram.h"

static void take_pool(const gmd_server *server, unsigned i,
                      gmd_pool_snapshot *ret)
{
        const gmd_pool *p = i < server->devices.n ?
                &server->devices.pools[i] : &server->host.pool;

        ret->device = p->device;
        ret->tier = p->tier;
        ret->capacity = p->capacity;
        /* What is charged for memory clients hold outside gpu-memd is in
         * use as far as the pool is concerned (outside.h). */
        ret->used = p->used + p->outside + p->kept_fds;
        ret->outside = p->outside + p->kept_fds;
        ret->free = pool_free(p);
        if (i >= server->devices.n)
                return;
        for (unsigned d = 0; d < 2; d++) {
                ret->queued[d] = server->copyqs.q[i].moves[d];
                ret->bytes[d] = server->copyqs.q[i].bytes[d];
                ret->busy_us[d] = server->copyqs.q[i].busy_us[d];
        }
        ret->kept = reuse_bytes(&server->reuse, i);
        if (i < GMD_MAX_DEVICES) {
                ret->peer_held = server->peers.held_on[i];
                ret->peer_spare = server->peers.spare_on[i];
        }
        ret->link_group = server->copyqs.q[i].link;
        if (server->copyqs.lanes && server->backend->ops->copy_preempt_step)
                ret->preempt_step = server->backend->ops->copy_preempt_step(
                                        server->backend, i);
        ret->slice_pid = slice_holder(&server->slices, i, now_ms(),
                                      &ret->slice_left_ms);
        if (server->devices.vram[i].known) {
                const gmd_vram_view *v = &server->devices.vram[i];
                /* Free is what an allocation would get: not more than the
                 * driver offers (vram_room: less its slack, in whole
                 * granules). Memory held outside gpu-memd and not charged
                 * (other processes' CUDA contexts, within
                 * outside_vram_allowance) had made the pool say 130.3 GiB
                 * free where the GPU had 130.2. */
                uint64_t can = vram_room(v, true, p->granularity);

                ret->has_driver_view = true;
                ret->device_free = v->free;
                ret->unaccounted = v->unaccounted;
                if (ret->free > can)
                        ret->free = can;
        }
        if (server->backend->ops->link_info) {
                gmd_link_info link;

                server->backend->ops->link_info(server->backend, i, &link);
                ret->link[GMD_COPY_OUT] = link.bytes_per_s[GMD_COPY_OUT];
                ret->link[GMD_COPY_IN] = link.bytes_per_s[GMD_COPY_IN];
        }
        if (server->backend->ops->arena_info) {
                gmd_arena_info arena;

                server->backend->ops->arena_info(server->backend, i, &arena);
                ret->has_arena = true;
                ret->arena_built = arena.built;
                ret->arena_free = arena.free;
        }
}

/*
 * May `s` hold lent buffers? A buffer is lent (b->loan) only while a
 * connection of its process waits with a loan (s->loan, loan.h): set with
 * the loan's buffers, kept until the last is back, and every b->loan is
 * cleared when the loan ends. So the walk of a client's buffers for what
 * it lent is only made where that can be: made for every client, it
 * walked every buffer at every status request and metrics scrape (a
 * client holding 10,000 buffers: 3-9 ms of the loop per summary, sim, 2
 * CPUs; BENCHMARKS.md).
 */
static bool client_may_lend(const gmd_server *server, const gmd_session *s,
                            unsigned n_lending)
{
        const gmd_list *pos;

        if (!n_lending)
                return false;
        list_for_each(pos, &server->sessions.all) {
                const gmd_session *o = container_of(pos, gmd_session, link);

                if (o->loan && session_same_process(o, s))
                        return true;
        }
        return false;
}

static void take_client(const gmd_session *s, bool may_lend,
                        gmd_client_snapshot *ret)
{
        const gmd_list *pos;

        ret->id = s->id;
        ret->pid = s->pid;
        ret->uid = s->uid;
        ret->gid = s->gid;
        snprintf(ret->name, sizeof(ret->name), "%s", s->name);
        ret->priority = s->priority;
        ret->n_buffers = s->n_buffers;
        ret->waiting = s->waitq.n_waiting;
        ret->bytes = s->bytes;
        ret->tier_bytes[0] = s->tier_bytes[0];
        ret->tier_bytes[1] = s->tier_bytes[1];
        ret->parked_bytes = s->parking.bytes;
        snprintf(ret->planner, sizeof(ret->planner), "%s", s->plan.planner);
        ret->plan_kept = s->plan.kept;
        ret->plan_offloaded = s->plan.offloaded;
        ret->plan_recomputed = s->plan.recomputed;
        ret->plan_streamed = s->plan.streamed;
        for (unsigned d = 0; d < GMD_MAX_DEVICES; d++)
                ret->outside_bytes += s->outside_on[d];
        ret->outside_bytes += s->kept_outside;      /* keptfd.h */
        if (!may_lend)
                return;
        list_for_each(pos, &s->buffers) {
                const gmd_dbuffer *b = container_of(pos, gmd_dbuffer, owner_link);

                if (b->loan)
                        ret->lent_bytes += b->size;
        }
}

static void take_buffer(const gmd_dbuffer *b, gmd_buffer_snapshot *ret)
{
        ret->id = b->id;
        ret->client_id = b->owner->id;
        ret->pid = b->owner->pid;
        ret->uid = b->owner->uid;
        ret->device = b->device;
        ret->size = b->size;
        ret->tier = b->tier;
        ret->state = b->state;
        ret->flags = b->flags;
        ret->acquired = b->acquired;
        ret->parked = b->parked;
}

/* The client of process `pid`, or 0. */
static uint64_t client_of_pid(const gmd_server *server, pid_t pid)
{
        const gmd_list *pos;

        list_for_each(pos, &server->sessions.all) {
                const gmd_session *c = container_of(pos, gmd_session, link);

                if (c->hello_done && c->pid == pid)
                        return c->id;
        }
        return 0;
}

static void take_processes(const gmd_server *server, gmd_snapshot *s)
{
        for (unsigned d = 0; d < server->devices.n; d++) {
                const gmd_vram_view *v = &server->devices.vram[d];

                for (unsigned i = 0; i < v->n_processes; i++) {
                        gmd_process_snapshot *p = &s->processes[s->n_processes++];

                        p->device = d;
                        p->pid = (pid_t)v->processes[i].pid;
                        p->bytes = v->processes[i].bytes;
                        p->client_id = client_of_pid(server, p->pid);
                }
        }
}

static size_t list_length(const gmd_list *list)
{
        const gmd_list *pos;
        size_t n = 0;

        list_for_each(pos, list)
                n++;
        return n;
}

static bool filter_match(const gmd_buffer_filter *f, const gmd_dbuffer *b)
{
        return !f || (b->id > f->after_id && (!f->pid || b->owner->pid == f->pid) &&
                      (f->all_users || b->owner->uid == f->uid));
}

/* The pairs of devices the peer tier may use, and what each holds. */
static void take_peers(const gmd_server *server, gmd_snapshot *s)
{
        const gmd_peers *peers = &server->peers;
        unsigned n = server->devices.n < GMD_MAX_DEVICES ?
                     server->devices.n : GMD_MAX_DEVICES;
        size_t count = 0;

        if (!peers->on)
                return;
        for (unsigned a = 0; a < n; a++)
                for (unsigned b = 0; b < n; b++)
                        count += peers->rate[a][b] != 0;
        s->peers = calloc(count ? count : 1, sizeof(*s->peers));
        if (!s->peers)
                return;         /* status without them */
        for (unsigned a = 0; a < n; a++) {
                for (unsigned b = 0; b < n; b++) {
                        gmd_peer_snapshot *p;

                        if (!peers->rate[a][b])
                                continue;
                        p = &s->peers[s->n_peers++];
                        p->home = a;
                        p->holder = b;
                        p->bytes_per_s = peers->rate[a][b];
                        p->held = peers->held[b][a];
                }
        }
}

int snapshot_take(const gmd_server *server, unsigned what,
                  const gmd_buffer_filter *filter, gmd_snapshot *ret)
{
        gmd_snapshot s = { 0 };
        const gmd_list *pos;
        size_t n_sessions = list_length(&server->sessions.all);
        unsigned n_lending = 0;

        s.n_pools = server->devices.n + 1;
        s.pools = calloc(s.n_pools, sizeof(*s.pools));
        s.clients = calloc(n_sessions ? n_sessions : 1, sizeof(*s.clients));
        s.processes = calloc(server->devices.n * VRAM_MAX_PROCESSES + 1,
                             sizeof(*s.processes));
        if (what & SNAPSHOT_BUFFERS) {
                /* A page is at most `max` long: no walk to count them all. */
                size_t n = filter && filter->max ? filter->max :
                           list_length(&server->buffers.all);

                s.buffers = calloc(n ? n : 1, sizeof(*s.buffers));
        }
        if (!s.pools || !s.clients || !s.processes || ((what & SNAPSHOT_BUFFERS) && !s.buffers)) {
                snapshot_clear(&s);
                return -ENOMEM;
        }

        for (unsigned i = 0; i < s.n_pools; i++) {
                take_pool(server, i, &s.pools[i]);
                s.total_capacity += s.pools[i].capacity;
                s.total_used += s.pools[i].used;
        }
        list_for_each(pos, &server->sessions.all)
                n_lending += container_of(pos, gmd_session, link)->loan != NULL;
        list_for_each(pos, &server->sessions.all) {
                const gmd_session *c = container_of(pos, gmd_session, link);

                if (!c->hello_done)
                        continue;
                take_client(c, client_may_lend(server, c, n_lending),
                            &s.clients[s.n_clients++]);
                s.total_buffers += c->n_buffers;
        }
        if (s.buffers) {
                size_t max = filter && filter->max ? filter->max : SIZE_MAX;

                list_for_each(pos, &server->buffers.all) {
                        const gmd_dbuffer *b = container_of(pos, gmd_dbuffer,
                                                            server_link);

                        if (s.n_buffers == max)
                                break;
                        if (filter_match(filter, b))
                                take_buffer(b, &s.buffers[s.n_buffers++]);
                }
        }
        take_processes(server, &s);
        take_peers(server, &s);
        if (server->backend->ops->host_link_info) {
                gmd_link_info host;

                server->backend->ops->host_link_info(server->backend, &host);
                s.host_link[GMD_COPY_OUT] = host.bytes_per_s[GMD_COPY_OUT];
                s.host_link[GMD_COPY_IN] = host.bytes_per_s[GMD_COPY_IN];
        }
        s.waiting_allocations = waitq_count(&server->waitq);
        s.host_pinned = backing_pinned(server);
        s.host_limit = server->host.pool.capacity;
        s.stats = server->stats;
        s.slices_given = server->slices.passed;
        s.uptime_ms = now_ms() - server->start_ms;
        s.restores = server->restore.restores;
        s.restored_ms = server->restore.restored_ms;
        s.restore_lost = server->restore.buffers_lost;
        s.version = GMD_VERSION_STRING;
        s.backend = server->backend->ops->name;
        *ret = s;
        return 0;
}

void snapshot_clear(gmd_snapshot *snapshot)
{
        free(snapshot->pools);
        free(snapshot->clients);
        free(snapshot->buffers);
        free(snapshot->processes);
        free(snapshot->peers);
        *snapshot = (gmd_snapshot){ 0 };
}
