/*
 * copyq — see copyq.h. A chunk is a small record (move, length) that the
 * backend hands back when its copy ends; the move counts chunks in flight
 * so it knows when it is finished, also when cancelled halfway.
 */
#include "copyq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "move.h"
#include "server.h"
#include "timeutil.h"

typedef struct copy_chunk {
        gmd_move *move;
        uint64_t len;
} copy_chunk;

void copyq_init(gmd_copyq *q, unsigned device)
{
        memset(q, 0, sizeof(*q));
        q->device = device;
        for (int d = 0; d < 2; d++)
                for (int c = 0; c < 3; c++)
                        list_init(&q->queued[d][c]);
        list_init(&q->failed);
}

#define COPYQ_BROKEN_US 1000000u

bool copyq_usable(gmd_server *server, unsigned device, gmd_copy_dir dir)
{
        return now_us() >= server->copyqs[device].broken_until_us[dir];
}

static gmd_move *next_move(gmd_copyq *q, gmd_copy_dir dir)
{
        for (int c = 0; c < 3; c++)
                if (!list_empty(&q->queued[dir][c]))
                        return container_of(q->queued[dir][c].next, gmd_move, qlink);
        return NULL;
}

static void copyq_issue(gmd_server *server, gmd_copyq *q, gmd_copy_dir dir)
{
        const gmd_config *c = &server->config;

        while (q->inflight[dir] < c->swap_copies_in_flight) {
                gmd_move *m = next_move(q, dir);
                copy_chunk *chunk;
                uint64_t len;
                int r;

                if (!m)
                        return;
                len = m->size - m->issued;
                if (len > c->swap_chunk_size)
                        len = c->swap_chunk_size;
                chunk = malloc(sizeof(*chunk));
                r = chunk ? server->backend->ops->copy_submit(server->backend,
                                q->device, dir, m->dst, m->issued, m->src,
                                m->issued, len, chunk) : -ENOMEM;
                if (r < 0) {
                        free(chunk);
                        log_error("device %u: cannot start a copy: %s; no new "
                                  "moves this way for a second", q->device,
                                  strerror(-r));
                        q->broken_until_us[dir] = now_us() + COPYQ_BROKEN_US;
                        server_retry_waitq_in(server, COPYQ_BROKEN_US / 1000 + 1);
                        m->status = r;
                        m->cancelled = true;
                        list_remove(&m->qlink);
                        m->queued = false;
                        if (m->inflight == 0) {
                                /* Finished from the close check, after the
                                 * caller that queued it is done with it. */
                                m->finished = true;
                                q->moves[m->dir]--;
                                list_add_tail(&q->failed, &m->qlink);
                                server_kick_closes(server);
                        }
                        continue;
                }
                chunk->move = m;
                chunk->len = len;
                if (q->inflight[dir]++ == 0)
                        q->busy_since[dir] = now_us();
                m->inflight++;
                m->issued += len;
                if (m->issued == m->size) {
                        list_remove(&m->qlink);
                        m->queued = false;
                }
        }
}

void copyq_push(gmd_server *server, gmd_move *m)
{
        gmd_copyq *q = &server->copyqs[m->device];

        list_add_tail(&q->queued[m->dir][m->cls], &m->qlink);
        m->queued = true;
        q->moves[m->dir]++;
        copyq_issue(server, q, m->dir);
}

void copyq_reclass(gmd_server *server, gmd_move *m, move_class cls)
{
        gmd_copyq *q = &server->copyqs[m->device];

        m->cls = cls;
        if (!m->queued)
                return;
        list_remove(&m->qlink);
        list_add_tail(&q->queued[m->dir][cls], &m->qlink);
}

void copyq_cancel(gmd_server *server, gmd_move *m)
{
        gmd_copyq *q = &server->copyqs[m->device];

        m->cancelled = true;
        if (m->queued) {
                list_remove(&m->qlink);
                m->queued = false;
        }
        if (m->inflight == 0 && !m->finished) {
                m->finished = true;
                q->moves[m->dir]--;
                move_copied(server, m);
        }
}

void copyq_on_done(void *ctx, void *cookie, int status)
{
        gmd_server *server = ctx;
        copy_chunk *chunk = cookie;
        gmd_move *m = chunk->move;
        gmd_copyq *q = &server->copyqs[m->device];
        gmd_copy_dir dir = m->dir;

        if (--q->inflight[dir] == 0) {
                uint64_t busy = now_us() - q->busy_since[dir];

                q->busy_us[dir] += busy;
                if (dir == GMD_COPY_OUT)
                        server->stats.copy_us_out += busy;
                else
                        server->stats.copy_us_in += busy;
        }
        q->bytes[dir] += chunk->len;
        if (dir == GMD_COPY_OUT)
                server->stats.bytes_out += chunk->len;
        else
                server->stats.bytes_in += chunk->len;
        m->inflight--;
        m->done += chunk->len;
        if (status < 0 && m->status == 0) {
                log_error("device %u: a copy failed: %s", q->device, strerror(-status));
                m->status = status;
                m->cancelled = true;       /* issue no more; finishes below */
                if (m->queued) {
                        list_remove(&m->qlink);
                        m->queued = false;
                }
        }
        free(chunk);
        if (m->inflight == 0 && !m->finished &&
            (m->cancelled || m->done == m->size)) {
                m->finished = true;
                q->moves[dir]--;
                move_copied(server, m);
        }
        copyq_issue(server, q, dir);
}

void copyq_finish_failed(gmd_server *server)
{
        for (unsigned d = 0; d < server->n_devices; d++) {
                gmd_copyq *q = &server->copyqs[d];

                while (!list_empty(&q->failed)) {
                        gmd_move *m = container_of(q->failed.next, gmd_move, qlink);

                        list_remove(&m->qlink);
                        move_copied(server, m);
                }
        }
}
