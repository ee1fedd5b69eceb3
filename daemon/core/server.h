/*
 * server — the daemon's state. One libuv loop thread owns everything
 * reachable from gmd_server (single writer, no locks). The record holds
 * each subsystem's state in that subsystem's own struct, behind its own
 * header and functions (devices.h, host_tier.h, session.h's table,
 * buffer.h's index, waitq.h, reuse.h, slice.h, copyq.h, ...), so a
 * reader, or a restore, finds every piece of state in one place; the
 * dispatch layer's part (its listener) is held by pointer, opaque here.
 * Long work runs elsewhere and reports back through uv_async_t. The
 * record and its lookups are here, below every module that uses them; its
 * life (start-up, listening, reload, stop) is lifecycle.h's.
 */
#ifndef GMD_SERVER_H
#define GMD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "backend.h"
#include "config.h"
#include "copyq.h"
#include "devices.h"
#include "host_tier.h"
#include "keptfd.h"
#include "peer.h"
#include "buffer.h"
#include "list.h"
#include "pending.h"
#include "pool.h"
#include "restore.h"
#include "reuse.h"
#include "slice.h"
#include "server_limits.h"
#include "session.h"
#include "stats.h"
#include "stuck.h"
#include "users.h"
#include "vram.h"
#include "waitq.h"

typedef struct gmd_session gmd_session;

typedef struct gmd_server {
        uv_loop_t *loop;
        gmd_config config;
        gmd_backend *backend;
        uint64_t start_ms;

        gmd_devices devices;          /* the GPUs served: their pools,
                                       * what the backend and the driver
                                       * say of them (devices.h) */
        gmd_host_tier host;           /* host memory: its pool, pinned
                                       * bytes, kept copies (host_tier.h) */
        gmd_peers peers;              /* other GPUs' VRAM as a swap tier:
                                       * links, bytes held (peer.h) */

        /* The socket clients connect to, accepting, and the scratch
         * their packets are read into: the dispatch layer's
         * (dispatch/listener.h). */
        struct gmd_listener *listener;
        uv_prepare_t turn_prepare;    /* a new loop turn (users.h) */
        bool turn_open;

        gmd_sessions sessions;        /* the connected clients, and those
                                       * the pass closes or answers
                                       * (session.h) */
        gmd_users users;              /* per user: counts, turns (users.h) */

        gmd_buffers buffers;          /* every live buffer, by id, and the
                                       * pass's short lists (buffer.h) */

        gmd_waitq waitq;              /* VRAM requests waiting (waitq.h) */
        gmd_reuse reuse;              /* VRAM kept for swap-ins (reuse.h) */
        gmd_keptfd keptfd;            /* fds of freed buffers processes
                                       * keep: witnesses (keptfd.h) */
        gmd_slices slices;            /* whose slice of each device's
                                       * memory runs (slice.h) */

        gmd_pending pending;          /* work marked for the scheduling
                                       * pass (scheduler.h) */

        gmd_copyqs copyqs;            /* one copy queue per device, and
                                       * the backend's wake (copyq.h) */
        uint64_t next_remap_seq;

        /* Backend upkeep off the request path (the cuda reserve). */
        uv_timer_t maintain_timer;
        bool maintaining;

        /* Restart recovery: the state record (NULL: [restart] keep =
         * off), what persist.c could not record, the arena bytes it kept
         * so far per device, and a restore under way (restore.h). */
        struct gmd_ledger *ledger;
        uint64_t persist_errors;
        uint64_t persist_built[GMD_MAX_DEVICES];
        gmd_restore restore;
        uint64_t instance;            /* this run's random number */

        gmd_stats stats;
        gmd_stuck stuck;              /* its last lines (stuck.h) */
        struct gmd_metrics *metrics;  /* the metrics endpoint, or NULL */

        bool stopping;
} gmd_server;


/* Can this backend move buffers between tiers? */
static inline bool server_can_move(const gmd_server *server)
{
        return server->backend->ops->copy_submit != NULL;
}

/* The VRAM pool of `device`, or NULL. */
gmd_pool *server_vram_pool(gmd_server *server, unsigned device);

/* The pool a tier of `device` draws from (the host pool for any device). */
gmd_pool *server_pool(gmd_server *server, gmd_tier tier, unsigned device);

/* slice_over for the requests of process `pid` at `priority` on
 * `device`: the holder of the slice that holds them back, 0 when none;
 * but a slice whose holder is stalled (slice.h, slice_stall) does not
 * hold back a process that holds VRAM there in use. */
pid_t server_slice_over(gmd_server *server, unsigned device, pid_t pid,
                        int priority, uint64_t now, uint64_t *ret_left_ms);

/* Does a slice of `device`'s memory that another process holds (slice.h)
 * keep `need` bytes from process `pid` at `priority` now? It does while
 * the holder waits there (a prefetch too), and otherwise unless the room
 * free now covers `need` beside what the holder may take again: the most
 * it held there at once (its connections' peaks) less what it holds now.
 * What it would give up is its own (the VRAM kept for its swap-ins,
 * reuse.h, its parked buffers) and what it takes back waits for the
 * taker's in-use memory, which no slice moves. Then the request waits
 * for the slice to end, in *ret_left_ms (may be NULL). */
bool server_slice_keeps(gmd_server *server, unsigned device, pid_t pid,
                        int priority, uint64_t need, uint64_t *ret_left_ms);

/* Does process `pid` wait for room on `device` (a prefetch too)? */
bool server_waits(gmd_server *server, unsigned device, pid_t pid);

/* Does a process other than `pid`, of a priority above `priority`, use
 * `device` at `now`: wait for room there (a prefetch too), hold a buffer
 * there acquired, or hold VRAM there it used less than [limits]
 * priority_grace_ms ago (which no lower priority may take meanwhile)?
 * For the last, *ret_again_ms is when that grace ends (untouched
 * otherwise). A memory slice's clock stops meanwhile (slice.h). */
bool server_busy_above(gmd_server *server, unsigned device, pid_t pid,
                       int priority, uint64_t now, uint64_t *ret_again_ms);

/* How long process `pid` has had none of its buffers of `device`
 * acquired and nothing waiting there, in *ret_ms; false while it has. */
bool server_idle(gmd_server *server, unsigned device, pid_t pid, uint64_t now,
                 uint64_t *ret_ms);

#endif
