/*
 * copyq — see copyq.h. A chunk is a small record (copy, length) that the
 * backend hands back when its copy ends; the copy counts chunks in flight
 * so it knows when it is over, also when stopped halfway.
 */
#include "copyq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "timeutil.h"

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

/* The next copy to issue a chunk of on `link` (its first device's
 * queue) this way, of the classes `lane` serves: the best class on any of
 * its devices, the devices taken in turn after the one served last. */
static gmd_copy *next_copy(gmd_copyqs *qs, gmd_copyq *link, gmd_copy_dir dir,
                           copy_lane lane)
{
        int first = lane == LANE_URGENT || !qs->lanes ? MOVE_URGENT : MOVE_EVICT;
        int last = lane == LANE_URGENT ? MOVE_URGENT : MOVE_BULK;

        for (int c = first; c <= last; c++) {
                for (unsigned k = 1; k <= qs->n; k++) {
                        unsigned d = (link->link_turn[dir] + k) % qs->n;
                        gmd_copyq *q = &qs->q[d];

                        if (q->link != link->device || list_empty(&q->queued[dir][c]))
                                continue;
                        link->link_turn[dir] = d;
                        return container_of(q->queued[dir][c].next, gmd_copy, qlink);
                }
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

/* Issue chunks on `lane` of `link` while it has room. */
static void copyq_issue_lane(gmd_copyqs *qs, gmd_copyq *link, gmd_copy_dir dir,
                             copy_lane lane)
{
        const gmd_config *cfg = qs->config;
        gmd_backend *be = qs->backend;

        while (copyq_room(qs, link, dir, lane)) {
                gmd_copy *c = next_copy(qs, link, dir, lane);
                gmd_copyq *q;
                copy_chunk *chunk;
                uint64_t len;
                int r;

                if (!c)
                        return;
                q = &qs->q[c->device];
                len = c->size - c->issued;
                if (len > cfg->swap_chunk_size)
                        len = cfg->swap_chunk_size;
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
                        continue;
                }
                chunk->copy = c;
                chunk->len = len;
                chunk->urgent = lane == LANE_URGENT;
                chunk->waited = c->cls == MOVE_URGENT;
                if (q->inflight[dir]++ == 0)
                        q->busy_since[dir] = now_us();
                q->inflight_bytes[dir] += len;
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
}

/* Issue chunks on the link of device `device` while it has room: the
 * urgent lane first. */
static void copyq_issue(gmd_copyqs *qs, unsigned device, gmd_copy_dir dir)
{
        gmd_copyq *link = &qs->q[qs->q[device].link];

        if (qs->lanes)
                copyq_issue_lane(qs, link, dir, LANE_URGENT);
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
