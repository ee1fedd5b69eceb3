/*
 * lifecycle — starting, reloading and stopping the server (see
 * lifecycle.c for how it is wired).
 */
#ifndef GMD_LIFECYCLE_H
#define GMD_LIFECYCLE_H

#include <stddef.h>
#include <uv.h>

#include "server.h"

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

#endif
