/*
 * server — the daemon's state and its listening socket. One libuv loop
 * thread owns everything reachable from gmd_server (single writer, no
 * locks): the pools, the sessions, the buffers and the waiting requests.
 * Long work will run elsewhere and report back through uv_async_t.
 */
#ifndef GMD_SERVER_H
#define GMD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "config.h"
#include "copyq.h"
#include "idmap.h"
#include "list.h"
#include "pool.h"
#include "server_limits.h"
#include "stats.h"
#include "wire.h"

typedef struct gmd_server {
        uv_loop_t *loop;
        gmd_config config;
        gmd_backend *backend;
        uint64_t start_ms;

        unsigned n_devices;
        gmd_pool *vram_pools;         /* one per device */
        gmd_device_info *devices;
        gmd_pool host_pool;
        uint64_t host_pinned_own;     /* host backings outside the arenas
                                       * (backing.h) */

        int listen_fd;
        bool listen_fd_owned;         /* false when systemd passed it */
        bool listening;               /* listen_poll is initialised */
        uv_poll_t listen_poll;
        int spare_fd;                 /* /dev/null, given up to refuse a
                                       * client when out of fds */
        uv_timer_t accept_timer;      /* accepting again after EMFILE */
        uv_timer_t sweep_timer;       /* hello deadlines (admission.h) */
        bool sweep_open;              /* both timers are initialised */

        gmd_list sessions;
        unsigned n_sessions;
        uint64_t next_client_id;

        gmd_list buffers;             /* every live buffer, oldest first */
        gmd_idmap buffers_by_id;
        uint64_t next_buffer_id;

        gmd_list waiters;             /* VRAM requests waiting, in rank order */
        gmd_list kept;                /* VRAM kept for swap-ins (reuse.h) */
        uint64_t kept_on[GMD_MAX_DEVICES];   /* its bytes per device */

        uv_timer_t retry_timer;       /* waitq_run again when a copy queue
                                       * is usable again */
        bool retry_open;
        gmd_list close_pending;       /* sessions to close on the next check */
        uv_check_t close_check;
        bool close_check_open;
        bool waitq_running, waitq_again;   /* waitq_run is not re-entered */

        gmd_copyq *copyqs;            /* one per device */
        uv_async_t copy_async;        /* the backend finished copies */
        bool copy_async_open;
        uint64_t next_remap_seq;

        /* Backend upkeep off the request path (the cuda reserve). */
        uv_timer_t maintain_timer;
        bool maintaining;

        gmd_stats stats;
        struct gmd_metrics *metrics;  /* the metrics endpoint, or NULL */

        bool stopping;
        /* Receive and encode scratch: one loop thread, so one of each. */
        uint8_t rx[GMD_WIRE_MAX_PACKET];
        uint8_t tx[GMD_WIRE_MAX_PAYLOAD];
} gmd_server;

/*
 * Build pools from the backend's devices and the config. The server is
 * allocated and returned ready to listen; the backend now belongs to it.
 */
int server_new(uv_loop_t *loop, const gmd_config *config,
               gmd_backend *backend, gmd_server **ret_server);

/* Listen on config.socket_path, or on `fd` when >= 0 (socket activation). */
int server_listen(gmd_server *server, int fd);

/*
 * Apply a re-read config: limits, quotas, priorities, pool sizes, log
 * level, socket permissions and the metrics endpoint change now; settings
 * that cannot change while running (socket path, backend, [sim]) are named
 * in the log and keep their old values.
 */
void server_reload(gmd_server *server, const gmd_config *config);

/* One line for systemd's STATUS= and the log: clients, use, waiters. */
void server_summary(const gmd_server *server, char *buf, size_t len);

/* Stop accepting, tell every client, close every session (freeing their
 * buffers). The loop ends once the handles have closed. */
void server_stop(gmd_server *server);

/* Free what is left after the loop ended. Accepts NULL, returns NULL. */
gmd_server *server_free(gmd_server *server);

/* What all clients of one user hold together. */
typedef struct gmd_usage {
        uint64_t bytes[2];          /* by tier, parked buffers included */
        uint64_t parked;            /* of bytes[GMD_TIER_VRAM], parked */
        unsigned buffers;           /* parked included */
        unsigned parked_buffers;
} gmd_usage;

void server_user_usage(gmd_server *server, uid_t uid, gmd_usage *ret_usage);

/* Start the timer that closes connections that stay silent past
 * [limits] hello_timeout_ms, unless it runs. */
void server_arm_hello_sweep(gmd_server *server);

/* Make sure sessions marked with session_close_later are closed once the
 * current callback returns. */
void server_kick_closes(gmd_server *server);

/* Run waitq_run in `ms` milliseconds (a copy queue refused a copy and is
 * not used for a while: what waits for it is served once it is again). */
void server_retry_waitq_in(gmd_server *server, uint64_t ms);

/* Can this backend move buffers between tiers? */
static inline bool server_can_move(const gmd_server *server)
{
        return server->backend->ops->copy_submit != NULL;
}

/* The VRAM pool of `device`, or NULL. */
gmd_pool *server_vram_pool(gmd_server *server, unsigned device);

#endif
