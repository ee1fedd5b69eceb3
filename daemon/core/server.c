/*
 * server — see server.h: the record's lookups (its pools, what a running
 * memory slice keeps, whether a process is idle on a device). Its life
 * (start-up, listening, reload, stop) is lifecycle.c's.
 */
#include "server.h"

#include "session.h"
#include "slice.h"
#include "timeutil.h"
#include "waitq.h"


gmd_pool *server_vram_pool(gmd_server *server, unsigned device)
{
        return device < server->devices.n ? &server->devices.pools[device] : NULL;
}

gmd_pool *server_pool(gmd_server *server, gmd_tier tier, unsigned device)
{
        return tier == GMD_TIER_HOST ? &server->host.pool :
               server_vram_pool(server, device);
}

bool server_waits(gmd_server *server, unsigned device, pid_t pid)
{
        gmd_list *pos;

        list_for_each(pos, &server->waitq.waiters) {
                const gmd_waiter *w = container_of(pos, gmd_waiter, link);

                if (w->device == device && w->session->pid == pid)
                        return true;
        }
        return false;
}

/* Does process `pid` hold a buffer on `device` acquired? */
static bool process_holds_in_use(gmd_server *server, unsigned device,
                                 pid_t pid)
{
        gmd_list *pos;

        list_for_each(pos, &server->sessions.all) {
                const gmd_session *s = container_of(pos, gmd_session, link);

                if (s->pid == pid && !s->closing && s->acquired_on[device])
                        return true;
        }
        return false;
}

pid_t server_slice_over(gmd_server *server, unsigned device, pid_t pid,
                        int priority, uint64_t now, uint64_t *ret_left_ms)
{
        pid_t holder = slice_over(&server->slices, device, pid, priority, now,
                                  ret_left_ms);

        /* Its holder waits for memory in use, maybe this process's, which
         * it cannot let go of while held back: the two would wait for
         * each other until the slice passed (slice.h, slice_stall). */
        if (holder && slice_stalled(&server->slices, device) &&
            process_holds_in_use(server, device, pid))
                return 0;
        return holder;
}

bool server_slice_keeps(gmd_server *server, unsigned device, pid_t pid,
                        int priority, uint64_t need, uint64_t *ret_left_ms)
{
        uint64_t left_ms = 0, held = 0, peak = 0, again;
        gmd_pool *pool = server_vram_pool(server, device);
        pid_t holder;
        gmd_list *pos;

        if (!pool)
                return false;
        holder = server_slice_over(server, device, pid, priority, now_ms(),
                                   &left_ms);
        if (!holder)
                return false;
        if (ret_left_ms)
                *ret_left_ms = left_ms;
        if (server_waits(server, device, holder))
                return true;
        list_for_each(pos, &server->sessions.all) {
                const gmd_session *s = container_of(pos, gmd_session, link);

                if (s->pid == holder) {
                        held += s->vram_on[device];
                        peak += s->vram_peak[device];
                }
        }
        again = peak > held ? peak - held : 0;
        return pool_free(pool) < need + again;
}

bool server_idle(gmd_server *server, unsigned device, pid_t pid, uint64_t now,
                 uint64_t *ret_ms)
{
        uint64_t since = 0;
        gmd_list *pos;

        if (device >= GMD_MAX_DEVICES || server_waits(server, device, pid))
                return false;
        list_for_each(pos, &server->sessions.all) {
                const gmd_session *s = container_of(pos, gmd_session, link);

                if (s->pid != pid)
                        continue;
                if (s->acquired_on[device])
                        return false;
                if (s->unused_since_ms[device] > since)
                        since = s->unused_since_ms[device];
        }
        *ret_ms = now > since ? now - since : 0;
        return true;
}

bool server_busy_above(gmd_server *server, unsigned device, pid_t pid,
                       int priority, uint64_t now, uint64_t *ret_again_ms)
{
        uint64_t grace = server->config.priority_grace_ms;
        bool busy = false;
        gmd_list *pos;

        if (device >= GMD_MAX_DEVICES)
                return false;
        list_for_each(pos, &server->waitq.waiters) {
                const gmd_waiter *w = container_of(pos, gmd_waiter, link);

                if (w->device == device && w->priority > priority &&
                    w->session->pid != pid)
                        return true;
        }
        list_for_each(pos, &server->sessions.all) {
                const gmd_session *s = container_of(pos, gmd_session, link);
                uint64_t since;

                if (s->pid == pid || s->priority <= priority || s->closing)
                        continue;
                if (s->acquired_on[device])
                        return true;
                since = now > s->unused_since_ms[device] ?
                        now - s->unused_since_ms[device] : 0;
                if (grace && s->vram_on[device] && since < grace) {
                        if (grace - since < *ret_again_ms)
                                *ret_again_ms = grace - since;
                        busy = true;
                }
        }
        return busy;
}
