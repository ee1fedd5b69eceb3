/*
 * outside — see outside.h. The walk is sessions × processes of a device,
 * both bounded ([limits] max_clients; the backend's list), and runs with
 * the per-process figures only, every few seconds and for status.
 */
#include "outside.h"

#include <stdio.h>
#include <string.h>

#include "config.h"
#include "kepttally.h"
#include "log.h"
#include "pending.h"
#include "reuse.h"
#include "server.h"
#include "session.h"
#include "size.h"

uint64_t outside_process_bytes(uint64_t driver, uint64_t held,
                               uint64_t allowance)
{
        uint64_t mine = held > UINT64_MAX - allowance ? UINT64_MAX :
                        held + allowance;

        return driver > mine ? driver - mine : 0;
}

bool outside_charges(const gmd_config *config)
{
        return strcmp(config->outside_vram, "ignore") != 0;
}

/* The oldest live session of process `pid`, or NULL: not a client. */
static gmd_session *process_session(gmd_server *server, pid_t pid)
{
        gmd_list *pos;

        list_for_each(pos, &server->sessions.all) {
                gmd_session *s = container_of(pos, gmd_session, link);

                if (s->pid == pid && !s->closing && !s->close_pending)
                        return s;
        }
        return NULL;
}

/* What gpu-memd accounts to process `pid` on `device`: its sessions'
 * buffers there (parked ones included) and the VRAM kept for them. */
static uint64_t process_held(gmd_server *server, pid_t pid, unsigned device)
{
        uint64_t held = 0;
        gmd_list *pos;

        list_for_each(pos, &server->sessions.all) {
                gmd_session *s = container_of(pos, gmd_session, link);

                if (s->pid != pid)
                        continue;
                held += s->vram_on[device];
                held += reuse_owner_bytes(&server->reuse, &s->reuse, device);
        }
        return held;
}

/* outside_vram = disconnect: end the sessions of process `first`'s pid,
 * whose user holds `usage` with `quota`. */
static void outside_disconnect(gmd_server *server, gmd_session *first,
                               uint64_t outside, const gmd_usage *usage)
{
        char out[32], held[32], limit[32], who[128], reason[96];
        pid_t pid = first->pid;
        gmd_result res;
        gmd_list *pos;

        size_format(outside, out, sizeof(out));
        result_error(&res, GMD_ERR_QUOTA,
                     "gpu-memd closed the connection: this process holds %s of "
                     "VRAM outside gpu-memd (fds it kept after freeing buffers, "
                     "or memory allocated beside gpu-memd), and uid %u with %s "
                     "in gpu-memd is over its vram_quota of %s set in %s "
                     "([limits] outside_vram = disconnect): close those fds",
                     out, (unsigned)first->uid,
                     size_format(usage->bytes[GMD_TIER_VRAM], held, sizeof(held)),
                     size_format(first->limits.vram_quota, limit, sizeof(limit)),
                     first->limits.vram_from);
        snprintf(reason, sizeof(reason), "%.24s of VRAM outside gpu-memd, "
                 "over vram_quota", out);
        log_warning("%s: disconnected: holds %s of VRAM outside gpu-memd, "
                    "which puts uid %u over its vram_quota ([limits] "
                    "outside_vram = disconnect)",
                    session_describe(first, who, sizeof(who)), out,
                    (unsigned)first->uid);
        list_for_each(pos, &server->sessions.all) {
                gmd_session *s = container_of(pos, gmd_session, link);

                if (s->pid != pid || s->closing || s->close_pending ||
                    s->answers.close_after)
                        continue;
                server->stats.disconnects_outside++;
                session_answer(s, ANSWER_NOTICE, 0, &res);
                session_close_after_answers(s, reason);
        }
}

/* outside_vram = disconnect: the processes holding memory outside whose
 * user that puts over its vram_quota. */
static void outside_enforce(gmd_server *server, unsigned device)
{
        gmd_list *pos;

        list_for_each(pos, &server->sessions.all) {
                gmd_session *s = container_of(pos, gmd_session, link);
                gmd_usage u;

                if (!s->outside_on[device] || !s->limits.vram_quota ||
                    s->closing || s->close_pending || s->answers.close_after)
                        continue;
                session_user_usage(&server->sessions.all, s->uid, &u);
                if (u.bytes[GMD_TIER_VRAM] + u.outside > s->limits.vram_quota)
                        outside_disconnect(server, s, s->outside_on[device], &u);
        }
}

void outside_refresh(gmd_server *server, unsigned device,
                     const gmd_gpu_process *procs, unsigned n)
{
        const gmd_config *c = &server->config;
        bool imports = server->backend->ops->processes_count_imports;
        gmd_pool *pool = server_vram_pool(server, device);
        uint64_t total = 0, before;
        gmd_list *pos;

        if (!pool || device >= GMD_MAX_DEVICES)
                return;
        list_for_each(pos, &server->sessions.all) {
                gmd_session *s = container_of(pos, gmd_session, link);

                s->outside_on[device] = 0;
        }
        for (unsigned i = 0; i < n; i++) {
                gmd_session *s = process_session(server, (pid_t)procs[i].pid);
                uint64_t held, bytes;

                if (!s)
                        continue;       /* not a client: vram.h's to show */
                held = imports ? process_held(server, s->pid, device) : 0;
                bytes = outside_process_bytes(procs[i].bytes, held,
                                              c->outside_vram_allowance);
                s->outside_on[device] += bytes;
                total += bytes;
        }
        before = pool->outside;
        pool->outside = outside_charges(c) ? total : 0;
        if (pool->outside != before) {
                char was[32], now[32], name[32];

                log_info("%s: VRAM clients hold outside gpu-memd, charged: "
                         "%s (was %s)", pool_describe(pool, name, sizeof(name)),
                         size_format(pool->outside, now, sizeof(now)),
                         size_format(before, was, sizeof(was)));
        }
        /* Room came back: waiters may fit now. */
        if (pool->outside < before)
                pending_mark(&server->pending, PENDING_ROOM);
        if (strcmp(c->outside_vram, "disconnect") == 0)
                outside_enforce(server, device);
}

static void kept_pool(gmd_server *server, gmd_pool *pool, bool charges,
                      bool *room)
{
        uint64_t before = pool->kept_fds;
        char was[32], now[32], name[32];

        pool->kept_fds = charges ? kepttally_charged(&server->keptfd.tally,
                                                     pool->tier,
                                                     pool->device) : 0;
        if (pool->kept_fds == before)
                return;
        *room |= pool->kept_fds < before;
        log_info("%s: held through kept fds of freed buffers, charged: %s "
                 "(was %s)", pool_describe(pool, name, sizeof(name)),
                 size_format(pool->kept_fds, now, sizeof(now)),
                 size_format(before, was, sizeof(was)));
}

void outside_kept_refresh(gmd_server *server)
{
        bool charges = outside_charges(&server->config), room = false;
        gmd_list *pos;

        for (unsigned d = 0; d < server->devices.n; d++)
                kept_pool(server, &server->devices.pools[d], charges, &room);
        kept_pool(server, &server->host.pool, charges, &room);
        /* Room came back: waiters may fit now. */
        if (room)
                pending_mark(&server->pending, PENDING_ROOM);
        if (strcmp(server->config.outside_vram, "disconnect") != 0)
                return;
        list_for_each(pos, &server->sessions.all) {
                gmd_session *s = container_of(pos, gmd_session, link);
                uint64_t out = s->kept_outside;
                gmd_usage u;

                if (!out || !s->limits.vram_quota || s->closing ||
                    s->close_pending || s->answers.close_after)
                        continue;
                session_user_usage(&server->sessions.all, s->uid, &u);
                for (unsigned d = 0; d < GMD_MAX_DEVICES; d++)
                        out += s->outside_on[d];
                if (u.bytes[GMD_TIER_VRAM] + u.outside > s->limits.vram_quota)
                        outside_disconnect(server, s, out, &u);
        }
}
