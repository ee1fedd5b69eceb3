/*
 * copyq — see copyq.h. A chunk is a small record (copy, length) that the
 * backend hands back when its copy ends; the copy counts chunks in flight
 * so it knows when it is over, also when stopped halfway.
 *
 * The host budget is settled lazily: the cuda backend measures the links
 * some time after start, so until its figures come each issue asks again
 * (host_link_info and link_info only read what the backend stored).
 */
#include "copyq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "timeutil.h"

static void host_model(gmd_copyqs *qs);

typedef struct copy_chunk {
        gmd_copy *copy;
        uint64_t len;
        bool urgent;        /* on the backend's urgent lane */
        bool waited;        /* issued while an acquire waited (urgent
                             * class, either lane) */
} copy_chunk;

/* The classes each lane serves: with the backend's urgent lane, urgent
 * copies go there and the others share the bulk lane; without it, one
 * lane serves all three in order. */
typedef enum copy_lane {
        LANE_BULK = 0,
        LANE_URGENT = 1,
} copy_lane;

void copyqs_init(gmd_copyqs *qs, gmd_copyq *q, unsigned n, gmd_backend *backend,
                 const gmd_config *config, gmd_stats *stats, gmd_pending *pending)
{
        qs->q = q;
        qs->n = n;
        qs->backend = backend;
        qs->config = config;
        qs->stats = stats;
        qs->pending = pending;
        qs->lanes = config->swap_preempt_step &&
                    backend->ops->copy_submit_urgent;
        for (unsigned i = 0; i < n; i++) {
                unsigned link = i;

                memset(&q[i], 0, sizeof(q[i]));
                q[i].device = i;
                /* Only a lower device can lead: a group is the devices
                 * that name the same first one. */
                if (backend->ops->link_shared_with)
                        link = backend->ops->link_shared_with(backend, i);
                q[i].link = link < i ? q[link].link : i;
                for (int d = 0; d < 2; d++)
                        for (int c = 0; c < 3; c++)
                                list_init(&q[i].queued[d][c]);
                list_init(&q[i].ended);
                if (q[i].link != i)
                        log_info("device %u shares its link to host memory "
                                 "with device %u: their copies are scheduled "
                                 "together", i, q[i].link);
        }
        memset(qs->host_budget, 0, sizeof(qs->host_budget));
        memset(qs->host_inflight, 0, sizeof(qs->host_inflight));
        memset(qs->host_held, 0, sizeof(qs->host_held));
        memset(qs->host_turn, 0, sizeof(qs->host_turn));
        qs->host_known = false;
        host_model(qs);
}

/* One link's own allowance of bytes in flight each way (copyq_room's
 * limits at full chunks): the L of copyq.h's budget. */
static uint64_t link_allowance(const gmd_config *cfg)
{
        uint64_t l = (uint64_t)cfg->swap_copies_in_flight * cfg->swap_chunk_size;

        return cfg->swap_bytes_in_flight > l ? cfg->swap_bytes_in_flight : l;
}

static double gbps(uint64_t bytes_per_s)
{
        return (double)bytes_per_s / 1e9;
}

/* Settle the host budget (copyq.h) once the backend has its figures:
 * with one link, or a backend that cannot tell, at once (no budget). */
static void host_model(gmd_copyqs *qs)
{
        const gmd_backend_ops *ops = qs->backend->ops;
        uint64_t sum[2] = { 0, 0 }, most[2] = { 0, 0 };
        bool unknown[2] = { false, false };
        gmd_link_info host;
        unsigned links = 0;

        if (qs->host_known)
                return;
        for (unsigned i = 0; i < qs->n; i++)
                links += qs->q[i].link == i;
        if (links < 2 || !ops->host_link_info || !ops->link_info) {
                qs->host_known = true;
                return;
        }
        ops->host_link_info(qs->backend, &host);
        if (!host.bytes_per_s[GMD_COPY_OUT] && !host.bytes_per_s[GMD_COPY_IN])
                return;         /* not yet: asked again at the next issue */
        for (unsigned l = 0; l < qs->n; l++) {
                uint64_t rate[2] = { 0, 0 };

                if (qs->q[l].link != l)
                        continue;
                /* A link shared by devices: its fastest device's rate. */
                for (unsigned i = 0; i < qs->n; i++) {
                        gmd_link_info info;

                        if (qs->q[i].link != l)
                                continue;
                        ops->link_info(qs->backend, i, &info);
                        for (int d = 0; d < 2; d++)
                                if (info.bytes_per_s[d] > rate[d])
                                        rate[d] = info.bytes_per_s[d];
                }
                for (int d = 0; d < 2; d++) {
                        unknown[d] |= !rate[d];
                        sum[d] += rate[d];
                        if (rate[d] > most[d])
                                most[d] = rate[d];
                }
        }
        for (int d = 0; d < 2; d++) {
                uint64_t h = host.bytes_per_s[d];

                qs->host_budget[d] = 0;
                if (unknown[d] || !h)
                        continue;
                /* Together is at least the fastest link alone and at most
                 * all of them: a measurement's noise beyond is not a model. */
                if (h < most[d])
                        h = most[d];
                if (h >= sum[d])
                        continue;
                qs->host_budget[d] = (uint64_t)((double)link_allowance(qs->config) *
                                                (double)h * links / (double)sum[d]);
        }
        qs->host_known = true;
        if (qs->host_budget[GMD_COPY_OUT] || qs->host_budget[GMD_COPY_IN])
                log_info("copies: the host carries %.1f GB/s out and %.1f in "
                         "with all %u links busy, of %.1f and %.1f alone: at "
                         "most %llu MiB out and %llu MiB in in flight across "
                         "devices (0: no limit), urgent copies excepted",
                         gbps(host.bytes_per_s[GMD_COPY_OUT]),
                         gbps(host.bytes_per_s[GMD_COPY_IN]), links,
                         gbps(sum[GMD_COPY_OUT]), gbps(sum[GMD_COPY_IN]),
                         (unsigned long long)(qs->host_budget[GMD_COPY_OUT] >> 20),
                         (unsigned long long)(qs->host_budget[GMD_COPY_IN] >> 20));
        else
                log_info("copies: the host carries %.1f GB/s out and %.1f in "
                         "with all %u links busy, of %.1f and %.1f alone: no "
                         "limit across devices beyond each link's own",
                         gbps(host.bytes_per_s[GMD_COPY_OUT]),
                         gbps(host.bytes_per_s[GMD_COPY_IN]), links,
                         gbps(sum[GMD_COPY_OUT]), gbps(sum[GMD_COPY_IN]));
}

bool copyqs_busy(const gmd_copyqs *qs)
{
        for (unsigned i = 0; i < qs->n; i++)
                if (qs->q[i].inflight[0] || qs->q[i].inflight[1])
                        return true;
        return false;
}

#define COPYQ_BROKEN_US 1000000u

bool copyq_usable(const gmd_copyqs *qs, unsigned device, gmd_copy_dir dir)
{
        return now_us() >= qs->q[device].broken_until_us[dir];
}

/* The classes `lane` serves, first to last. */
static void lane_classes(const gmd_copyqs *qs, copy_lane lane, int *ret_first,
                         int *ret_last)
{
        *ret_first = lane == LANE_URGENT || !qs->lanes ? MOVE_URGENT : MOVE_EVICT;
        *ret_last = lane == LANE_URGENT ? MOVE_URGENT : MOVE_BULK;
}

/* The first copy of class `cls` on any of `link`'s devices this way, the
 * devices taken in turn after the one served last; NULL when none. */
static gmd_copy *next_of_class(gmd_copyqs *qs, gmd_copyq *link,
                               gmd_copy_dir dir, int cls)
{
        for (unsigned k = 1; k <= qs->n; k++) {
                unsigned d = (link->link_turn[dir] + k) % qs->n;
                gmd_copyq *q = &qs->q[d];

                if (q->link != link->device || list_empty(&q->queued[dir][cls]))
                        continue;
                link->link_turn[dir] = d;
                return container_of(q->queued[dir][cls].next, gmd_copy, qlink);
        }
        return NULL;
}

/* The next copy to issue a chunk of on `link` (its first device's
 * queue) this way, of the classes `lane` serves: the best class on any of
 * its devices, the devices taken in turn after the one served last. */
static gmd_copy *next_copy(gmd_copyqs *qs, gmd_copyq *link, gmd_copy_dir dir,
                           copy_lane lane)
{
        int first, last;

        lane_classes(qs, lane, &first, &last);
        for (int c = first; c <= last; c++) {
                gmd_copy *copy = next_of_class(qs, link, dir, c);

                if (copy)
                        return copy;
        }
        return NULL;
}

/* Nothing of the copy is in flight and nothing more will be issued. */
static void copy_end(gmd_copyq *q, gmd_copy *c)
{
        c->phase = COPY_ENDED;
        q->moves[c->dir]--;
}

/* Stop issuing (a stop, a failed chunk, a refused submit). */
static void copy_halt(gmd_copy *c)
{
        if (c->phase == COPY_ISSUING)
                list_remove(&c->qlink);
        c->phase = COPY_STOPPING;
}

/* Over, for the pass to take: never ended inside the call that queued
 * or stopped it. */
static void copy_end_later(gmd_copyqs *qs, gmd_copyq *q, gmd_copy *c)
{
        copy_end(q, c);
        list_add_tail(&q->ended, &c->qlink);
        pending_mark(qs->pending, PENDING_COPIES);
}

/* May one more chunk go to the backend this way on `link`'s `lane`,
 * counting that lane's chunks in flight of all its devices? (copyq.h) */
static bool copyq_room(const gmd_copyqs *qs, const gmd_copyq *link,
                       gmd_copy_dir dir, copy_lane lane)
{
        const gmd_config *cfg = qs->config;
        unsigned chunks = 0;
        uint64_t bytes = 0;

        for (unsigned d = 0; d < qs->n; d++) {
                const gmd_copyq *q = &qs->q[d];

                if (q->link != link->device)
                        continue;
                if (lane == LANE_URGENT) {
                        chunks += q->urgent_inflight[dir];
                        bytes += q->urgent_bytes[dir];
                } else {
                        chunks += q->inflight[dir] - q->urgent_inflight[dir];
                        bytes += q->inflight_bytes[dir] - q->urgent_bytes[dir];
                }
        }
        if (chunks < cfg->swap_copies_in_flight)
                return true;
        return chunks < COPYQ_MAX_CHUNKS && bytes < cfg->swap_bytes_in_flight;
}

/* The bytes of copy `c`'s next chunk. */
static uint64_t chunk_len(const gmd_copyqs *qs, const gmd_copy *c)
{
        uint64_t len = c->size - c->issued;

        return len > qs->config->swap_chunk_size ? qs->config->swap_chunk_size :
               len;
}

/* Hand the next chunk of `c` to the backend on `lane`. A refused submit
 * halts the copy (ended later when nothing of it is in flight) and rests
 * the queue. */
static void issue_chunk(gmd_copyqs *qs, gmd_copy *c, gmd_copy_dir dir,
                        copy_lane lane)
{
        gmd_backend *be = qs->backend;
        gmd_copyq *q = &qs->q[c->device];
        uint64_t len = chunk_len(qs, c);
        copy_chunk *chunk;
        int r;

        chunk = malloc(sizeof(*chunk));
        r = !chunk ? -ENOMEM : lane == LANE_URGENT ?
            be->ops->copy_submit_urgent(be, q->device, dir, c->dst,
                                        c->issued, c->src, c->issued,
                                        len, chunk) :
            be->ops->copy_submit(be, q->device, dir, c->dst,
                                 c->issued, c->src, c->issued, len,
                                 chunk);
        if (r < 0) {
                free(chunk);
                log_error("device %u: cannot start a copy: %s; no new "
                          "moves this way for a second", q->device,
                          strerror(-r));
                q->broken_until_us[dir] = now_us() + COPYQ_BROKEN_US;
                pending_mark_after(qs->pending, PENDING_ROOM,
                                   COPYQ_BROKEN_US / 1000 + 1);
                c->status = r;
                copy_halt(c);
                if (c->inflight == 0)
                        copy_end_later(qs, q, c);
                return;
        }
        chunk->copy = c;
        chunk->len = len;
        chunk->urgent = lane == LANE_URGENT;
        chunk->waited = c->cls == MOVE_URGENT;
        if (q->inflight[dir]++ == 0)
                q->busy_since[dir] = now_us();
        q->inflight_bytes[dir] += len;
        qs->host_inflight[dir] += len;
        if (chunk->urgent) {
                q->urgent_inflight[dir]++;
                q->urgent_bytes[dir] += len;
        }
        if (c->issued == 0)
                c->issued_us = now_us();
        c->inflight++;
        c->issued += len;
        if (c->issued == c->size) {
                list_remove(&c->qlink);
                c->phase = COPY_ISSUED;
        }
}

/* Issue chunks on `lane` of `link` while it has room. */
static void copyq_issue_lane(gmd_copyqs *qs, gmd_copyq *link, gmd_copy_dir dir,
                             copy_lane lane)
{
        while (copyq_room(qs, link, dir, lane)) {
                gmd_copy *c = next_copy(qs, link, dir, lane);

                if (!c)
                        return;
                issue_chunk(qs, c, dir, lane);
        }
}

/* Under the host budget (copyq.h): issue bulk-lane chunks on every link
 * while the budget has room, each time the best class on any link with
 * room of its own, links taken in turn within a class. An urgent chunk
 * (the one lane serves it with no urgent lane) is never held back. */
static void copyq_issue_host(gmd_copyqs *qs, gmd_copy_dir dir)
{
        int first, last;

        lane_classes(qs, LANE_BULK, &first, &last);
        for (;;) {
                gmd_copy *c = NULL;
                int cls;

                for (cls = first; cls <= last && !c; cls++) {
                        for (unsigned k = 1; k <= qs->n && !c; k++) {
                                unsigned l = (qs->host_turn[dir] + k) % qs->n;
                                gmd_copyq *link = &qs->q[l];

                                if (link->link != l ||
                                    !copyq_room(qs, link, dir, LANE_BULK))
                                        continue;
                                c = next_of_class(qs, link, dir, cls);
                                if (c)
                                        qs->host_turn[dir] = l;
                        }
                }
                if (!c)
                        return;
                /* Held: room comes back as chunks end (copyq_on_done).
                 * Nothing else goes meanwhile, so a better class is not
                 * overtaken on another link. With nothing in flight one
                 * chunk always goes. */
                if (c->cls != MOVE_URGENT && qs->host_inflight[dir] &&
                    qs->host_inflight[dir] + chunk_len(qs, c) >
                    qs->host_budget[dir]) {
                        qs->host_held[dir]++;
                        return;
                }
                issue_chunk(qs, c, dir, LANE_BULK);
        }
}

/* Issue chunks on the link of device `device` while it has room: the
 * urgent lane first. Under a host budget the bulk lanes of every link
 * are served together (copyq_issue_host): room a chunk's end gives back
 * to the host may be another link's. */
static void copyq_issue(gmd_copyqs *qs, unsigned device, gmd_copy_dir dir)
{
        gmd_copyq *link = &qs->q[qs->q[device].link];

        host_model(qs);
        if (qs->lanes)
                copyq_issue_lane(qs, link, dir, LANE_URGENT);
        if (qs->host_budget[dir])
                copyq_issue_host(qs, dir);
        else
                copyq_issue_lane(qs, link, dir, LANE_BULK);
}

void copyq_push(gmd_copyqs *qs, gmd_copy *c)
{
        gmd_copyq *q = &qs->q[c->device];

        c->phase = COPY_ISSUING;
        list_add_tail(&q->queued[c->dir][c->cls], &c->qlink);
        q->moves[c->dir]++;
        copyq_issue(qs, c->device, c->dir);
}

void copyq_reclass(gmd_copyqs *qs, gmd_copy *c, move_class cls)
{
        gmd_copyq *q = &qs->q[c->device];

        c->cls = cls;
        if (c->phase != COPY_ISSUING)
                return;
        list_remove(&c->qlink);
        list_add_tail(&q->queued[c->dir][cls], &c->qlink);
        /* Its own lane may have room where the other had none. */
        copyq_issue(qs, c->device, c->dir);
}

bool copyq_stop(gmd_copyqs *qs, gmd_copy *c)
{
        gmd_copyq *q = &qs->q[c->device];

        if (c->phase == COPY_ENDED)
                return false;   /* on the ended list already */
        copy_halt(c);
        if (c->inflight)
                return false;
        copy_end(q, c);
        return true;
}

void copyq_on_done(void *ctx, void *cookie, int status)
{
        gmd_copyqs *qs = ctx;
        copy_chunk *chunk = cookie;
        gmd_copy *c = chunk->copy;
        gmd_copyq *q = &qs->q[c->device];
        gmd_copy_dir dir = c->dir;

        if (--q->inflight[dir] == 0) {
                uint64_t busy = now_us() - q->busy_since[dir];

                q->busy_us[dir] += busy;
                if (dir == GMD_COPY_OUT)
                        qs->stats->copy_us_out += busy;
                else
                        qs->stats->copy_us_in += busy;
        }
        q->bytes[dir] += chunk->len;
        q->inflight_bytes[dir] -= chunk->len;
        qs->host_inflight[dir] -= chunk->len;
        if (chunk->urgent) {
                q->urgent_inflight[dir]--;
                q->urgent_bytes[dir] -= chunk->len;
        }
        if (dir == GMD_COPY_OUT)
                qs->stats->bytes_out += chunk->len;
        else
                qs->stats->bytes_in += chunk->len;
        if (dir == GMD_COPY_IN && chunk->waited)
                qs->stats->bytes_in_waited += chunk->len;
        c->inflight--;
        c->done += chunk->len;
        if (status < 0 && c->status == 0) {
                log_error("device %u: a copy failed: %s", q->device, strerror(-status));
                c->status = status;
                copy_halt(c);      /* issue no more; ends below */
        }
        free(chunk);
        if (c->inflight == 0 && c->phase != COPY_ENDED &&
            (c->phase == COPY_STOPPING || c->done == c->size))
                copy_end_later(qs, q, c);
        copyq_issue(qs, q->device, dir);
}

gmd_copy *copyq_take_ended(gmd_copyqs *qs)
{
        for (unsigned d = 0; d < qs->n; d++) {
                gmd_copyq *q = &qs->q[d];

                if (!list_empty(&q->ended)) {
                        gmd_copy *c = container_of(q->ended.next, gmd_copy, qlink);

                        list_remove(&c->qlink);
                        return c;
                }
        }
        return NULL;
}
