/*
 * metrics — the Prometheus text-format endpoint: an HTTP/1.0 GET on a
 * loopback TCP port or a Unix socket ([metrics] listen), answered from the
 * daemon's state on the loop thread. Off by default.
 */
#ifndef GMD_METRICS_H
#define GMD_METRICS_H

typedef struct gmd_server gmd_server;
typedef struct gmd_metrics gmd_metrics;

/*
 * Start serving on `listen`: "off" (nothing; *ret_metrics = NULL),
 * "127.0.0.1:PORT" / "[::1]:PORT" / "localhost:PORT" (loopback only: other
 * addresses are refused), or "unix:PATH" — a value config_listen_parse
 * accepts, as the config checked when it was read. Returns 0 or a
 * negative errno after logging why: -EINVAL or -EPERM for a value that
 * did not come through the config, else what binding it failed with,
 * logged with where [metrics] listen was set (config_origin).
 */
int metrics_start(gmd_server *server, const char *listen, gmd_metrics **ret_metrics);

/* Stop serving; connections in progress are closed. The memory is freed
 * once libuv has closed the handles. Accepts NULL, returns NULL. */
gmd_metrics *metrics_stop(gmd_metrics *metrics);

#endif
