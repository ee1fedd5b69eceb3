/*
 * stuck — see stuck.h. Walks every buffer once, so only at debug level
 * and only when the evictor fell short.
 */
#include "stuck.h"

#include <stdio.h>
#include <string.h>

#include "buffer.h"
#include "log.h"
#include "pool.h"
#include "server.h"
#include "session.h"
#include "size.h"
#include "slice.h"
#include "timeutil.h"
#include "waitq.h"

#define STUCK_PIDS 6

typedef struct stuck_pid {
        pid_t pid;
        uint64_t in_use, lent, released, moving, parked, waits;
        unsigned n_waits;
} stuck_pid;

/* The slot of `pid`; past STUCK_PIDS - 1 processes, the last slot holds
 * the rest together (pid -1, shown as "others"). */
static stuck_pid *stuck_slot(stuck_pid *p, unsigned *n, pid_t pid)
{
        for (unsigned i = 0; i < *n; i++)
                if (p[i].pid == pid)
                        return &p[i];
        if (*n == STUCK_PIDS) {
                p[STUCK_PIDS - 1].pid = -1;
                return &p[STUCK_PIDS - 1];
        }
        memset(&p[*n], 0, sizeof(p[*n]));
        p[*n].pid = pid;
        return &p[(*n)++];
}

static void stuck_count(gmd_server *server, unsigned device, stuck_pid *p,
                        unsigned *n)
{
        gmd_list *pos;

        list_for_each(pos, &server->buffers.all) {
                const gmd_dbuffer *b = container_of(pos, gmd_dbuffer, server_link);
                stuck_pid *s;

                if (b->device != device || b->tier != GMD_TIER_VRAM ||
                    b->state != GMD_STATE_RESIDENT)
                        continue;
                s = stuck_slot(p, n, b->owner->pid);
                if (b->move)
                        s->moving += b->size;
                else if (b->parked)
                        s->parked += b->size;
                else if (b->loan)
                        s->lent += b->size;
                else if (b->acquired)
                        s->in_use += b->size;
                else
                        s->released += b->size;
        }
        list_for_each(pos, &server->waitq.waiters) {
                const gmd_waiter *w = container_of(pos, gmd_waiter, link);
                stuck_pid *s;

                if (w->device != device)
                        continue;
                s = stuck_slot(p, n, w->session->pid);
                s->waits += w->size;
                s->n_waits++;
        }
}

static int stuck_size(char *buf, size_t len, const char *what, uint64_t bytes)
{
        char b[32];

        if (!bytes)
                return 0;
        return snprintf(buf, len, " %s %s", what, size_format(bytes, b, sizeof(b)));
}

void stuck_log(gmd_server *server, unsigned device, uint64_t wanted,
               uint64_t chosen)
{
        stuck_pid p[STUCK_PIDS];
        unsigned n = 0;
        uint64_t now = now_ms(), left_ms = 0, sum = 0;
        pid_t holder;
        char line[900], w[32], c[32], f[32];
        size_t len = 0;

        if (chosen >= wanted || device >= GMD_MAX_DEVICES ||
            !log_enabled(GMD_LOG_DEBUG))
                return;
        stuck_count(server, device, p, &n);
        /* The picture, summed loosely: a new one is logged at once. */
        for (unsigned i = 0; i < n; i++)
                sum = sum * 31 + (uint64_t)p[i].pid + p[i].in_use * 3 +
                      p[i].lent * 5 + p[i].released * 7 + p[i].waits * 11;
        if (sum == server->stuck.sum[device] &&
            now - server->stuck.ms[device] < STUCK_LOG_MS)
                return;
        server->stuck.sum[device] = sum;
        server->stuck.ms[device] = now;
        holder = slice_holder(&server->slices, device, now, &left_ms);
        len += (size_t)snprintf(line, sizeof(line),
                "device %u: %s more wanted, %s chosen to move out, %s free;",
                device, size_format(wanted, w, sizeof(w)),
                size_format(chosen, c, sizeof(c)),
                size_format(pool_free(server_vram_pool(server, device)), f,
                            sizeof(f)));
        if (holder && len < sizeof(line))
                len += (size_t)snprintf(line + len, sizeof(line) - len,
                                        " slice: pid %d, %llu ms left;",
                                        (int)holder, (unsigned long long)left_ms);
        for (unsigned i = 0; i < n && len < sizeof(line); i++) {
                len += (size_t)(p[i].pid < 0 ?
                        snprintf(line + len, sizeof(line) - len, " others:") :
                        snprintf(line + len, sizeof(line) - len, " pid %d:",
                                 (int)p[i].pid));
                len += (size_t)stuck_size(line + len, sizeof(line) - len,
                                          "in use", p[i].in_use);
                len += (size_t)stuck_size(line + len, sizeof(line) - len,
                                          "lent", p[i].lent);
                len += (size_t)stuck_size(line + len, sizeof(line) - len,
                                          "released", p[i].released);
                len += (size_t)stuck_size(line + len, sizeof(line) - len,
                                          "moving", p[i].moving);
                len += (size_t)stuck_size(line + len, sizeof(line) - len,
                                          "parked", p[i].parked);
                if (p[i].n_waits && len < sizeof(line))
                        len += (size_t)snprintf(line + len, sizeof(line) - len,
                                                " waits %u for %s", p[i].n_waits,
                                                size_format(p[i].waits, w,
                                                            sizeof(w)));
                if (len < sizeof(line))
                        len += (size_t)snprintf(line + len, sizeof(line) - len, ";");
        }
        log_debug("%s", line);
}
