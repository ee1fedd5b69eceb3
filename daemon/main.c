/*
 * gpu-memd — the daemon's entry point: settings, backend, pools, socket,
 * then the libuv loop until SIGTERM or SIGINT. Everything here happens
 * once; the work is in server.c and session.c.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "backend.h"
#include "config.h"
#include "log.h"
#include "options.h"
#include "server.h"
#include "systemd.h"

typedef struct daemon_signals {
        uv_signal_t term, intr;
        gmd_server *server;
} daemon_signals;

static void on_signal(uv_signal_t *handle, int signum)
{
        daemon_signals *sig = handle->data;

        log_info("%s: stopping", strsignal(signum));
        systemd_notify_stopping();
        server_stop(sig->server);
        uv_close((uv_handle_t *)&sig->term, NULL);
        uv_close((uv_handle_t *)&sig->intr, NULL);
}

static int run(const gmd_config *config)
{
        daemon_signals sig;
        gmd_backend *backend = NULL;
        gmd_server *server = NULL;
        uv_loop_t loop;
        char status[160], cap[32];
        int fd, r;

        r = uv_loop_init(&loop);
        if (r < 0) {
                log_error("cannot start the event loop: %s", uv_strerror(r));
                return 1;
        }
        r = backend_open(config, &backend);
        if (r < 0) {
                log_error("cannot open the %s backend: %s", config->backend,
                          strerror(-r));
                return 1;
        }
        r = server_new(&loop, config, backend, &server);
        if (r < 0) {
                backend_close(backend);
                return 1;
        }
        r = systemd_listen_fd(&fd);
        if (r >= 0)
                r = server_listen(server, fd);
        if (r < 0) {
                log_error("cannot listen: %s", strerror(-r));
                server_free(server);
                return 1;
        }

        sig.server = server;
        uv_signal_init(&loop, &sig.term);
        uv_signal_init(&loop, &sig.intr);
        sig.term.data = sig.intr.data = &sig;
        uv_signal_start(&sig.term, on_signal, SIGTERM);
        uv_signal_start(&sig.intr, on_signal, SIGINT);
        signal(SIGPIPE, SIG_IGN);

        snprintf(status, sizeof(status), "serving %s: %s backend, %u device%s, %s VRAM",
                 fd >= 0 ? "the socket systemd passed" : server->config.socket_path,
                 backend->ops->name, server->n_devices,
                 server->n_devices == 1 ? "" : "s",
                 size_format(server->n_devices ? server->vram_pools[0].capacity : 0,
                             cap, sizeof(cap)));
        log_info("ready: %s", status);
        systemd_notify_ready(status);

        uv_run(&loop, UV_RUN_DEFAULT);

        server_free(server);
        r = uv_loop_close(&loop);
        if (r < 0)
                log_warning("event loop closed with handles open: %s", uv_strerror(r));
        log_info("stopped");
        return 0;
}

int main(int argc, char **argv)
{
        options_action action;
        gmd_config config;

        config_init_defaults(&config);
        if (options_parse(argc, argv, &config, &action, stderr) < 0)
                return 2;
        switch (action) {
        case OPTIONS_HELP:
                options_usage(stdout);
                return 0;
        case OPTIONS_VERSION:
                printf("gpu-memd %s (protocol %u)\n", GMD_VERSION_STRING, GMD_WIRE_VERSION);
                return 0;
        case OPTIONS_PRINT_CONFIG:
                config_dump(&config, stdout);
                return 0;
        case OPTIONS_RUN:
                break;
        }
        log_setup(config.log_level);
        return run(&config);
}
