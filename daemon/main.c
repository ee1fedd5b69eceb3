/*
 * gpu-memd — the daemon's entry point: settings, backend, pools, socket,
 * then the libuv loop until SIGTERM or SIGINT. SIGHUP re-reads the settings
 * (argv again, over fresh defaults, so the file and the options layer as at
 * start). A one-second tick keeps systemd's STATUS= line current and feeds
 * the watchdog when the unit asks for one.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "backend.h"
#include "config.h"
#include "log.h"
#include "options.h"
#include "scheduler.h"
#include "fdstore.h"
#include "keep.h"
#include "lifecycle.h"
#include "restore.h"
#include "systemd.h"
#include "wire.h"

typedef struct daemon_state {
        int argc;
        char **argv;
        gmd_server *server;
        gmd_keep *keep;                 /* fds that outlive this run, or NULL */
        bool discard;                   /* stopped for good (SIGINT) */
        uv_signal_t term, intr, hup;
        uv_timer_t tick;
        char status[160];
} daemon_state;

static void on_stop_signal(uv_signal_t *handle, int signum)
{
        daemon_state *d = handle->data;

        log_info("%s: stopping", strsignal(signum));
        systemd_notify_stopping();
        /* SIGTERM (systemctl stop or restart, kill) leaves the state for
         * the next gpu-memd; SIGINT (Ctrl-C on `make run`) stops for good. */
        d->discard = signum == SIGINT || !d->keep;
        if (!d->discard) {
                /* Left as a SIGKILL leaves it, the path test_restart kills
                 * a hundred times: no teardown. One changed what the next
                 * daemon takes over: waiting requests were refused ("gpu-
                 * memd is stopping") instead of being sent again by their
                 * clients, and the buffers freed with each session gave
                 * their host copies back to the arena, which the sim
                 * backend punches out, so restored buffers read zeros. The
                 * record, the kept fds and the clients' connections end
                 * with the process. */
                log_info("restart: the state is left for the next gpu-memd; "
                         "clients are not told to stop");
                _exit(0);
        }
        server_stop(d->server);
        uv_close((uv_handle_t *)&d->term, NULL);
        uv_close((uv_handle_t *)&d->intr, NULL);
        uv_close((uv_handle_t *)&d->hup, NULL);
        uv_close((uv_handle_t *)&d->tick, NULL);
}

static void on_reload_signal(uv_signal_t *handle, int signum)
{
        daemon_state *d = handle->data;
        options_action action;
        gmd_config *config;

        systemd_notify_reloading();
        config = malloc(sizeof(*config));
        if (!config) {
                log_error("reload: out of memory; keeping the running settings");
                systemd_notify_ready(d->status);
                return;
        }
        config_init_defaults(config);
        /* options_parse reports a bad line on stderr, which is our log. */
        if (options_parse(d->argc, d->argv, config, &action, stderr) < 0)
                log_error("reload: the new settings are not valid (see above); "
                          "keeping the running ones");
        else
                server_reload(d->server, config);
        free(config);
        systemd_notify_ready(d->status);
}

static void on_tick(uv_timer_t *handle)
{
        daemon_state *d = handle->data;
        char status[sizeof(d->status)];

        server_summary(d->server, status, sizeof(status));
        if (strcmp(status, d->status) != 0) {
                strcpy(d->status, status);
                systemd_notify_status(status);
        }
        systemd_notify_watchdog();
}

static void handles_start(daemon_state *d, uv_loop_t *loop)
{
        uint64_t watchdog_us = systemd_watchdog_usec(), tick_ms = 1000;

        uv_signal_init(loop, &d->term);
        uv_signal_init(loop, &d->intr);
        uv_signal_init(loop, &d->hup);
        uv_timer_init(loop, &d->tick);
        d->term.data = d->intr.data = d->hup.data = d->tick.data = d;
        uv_signal_start(&d->term, on_stop_signal, SIGTERM);
        uv_signal_start(&d->intr, on_stop_signal, SIGINT);
        uv_signal_start(&d->hup, on_reload_signal, SIGHUP);
        /* Twice per watchdog interval, as sd_watchdog_enabled(3) advises. */
        if (watchdog_us && watchdog_us / 2000 < tick_ms)
                tick_ms = watchdog_us / 2000 ? watchdog_us / 2000 : 1;
        uv_timer_start(&d->tick, on_tick, tick_ms, tick_ms);
        signal(SIGPIPE, SIG_IGN);
}

/* Every buffer keeps an fd open (its memfd or exported handle): raise
 * the soft open-file limit (often 1024) to the hard one. */
static void nofile_raise(void)
{
        struct rlimit rl;

        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return;
        if (rl.rlim_cur < rl.rlim_max) {
                rlim_t was = rl.rlim_cur;

                rl.rlim_cur = rl.rlim_max;
                if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
                        log_warning("cannot raise the open-file limit from %llu: %s",
                                    (unsigned long long)was, strerror(errno));
                        return;
                }
        }
        log_info("open-file limit %llu", (unsigned long long)rl.rlim_cur);
}

/* The fds that outlive this run ([restart] keep): systemd's fd store
 * (systemd, or auto under systemd), a keeper process beside the socket
 * (keeper), or none (off, or auto outside systemd). Opened before the
 * backend: a keeper is forked before CUDA is initialised. */
static int restart_keep_open(const gmd_config *config, gmd_keep **ret_keep)
{
        const char *mode = config->restart_keep;
        bool automatic = strcmp(mode, "auto") == 0;
        bool systemd = strcmp(mode, "systemd") == 0 ||
                       (automatic && getenv("NOTIFY_SOCKET"));
        char path[sizeof(config->socket_path) + 8];
        int r;

        *ret_keep = NULL;
        if (strcmp(mode, "off") == 0 || (automatic && !systemd))
                return 0;
        if (systemd) {
                r = systemd_keep_open(ret_keep);
        } else {
                snprintf(path, sizeof(path), "%s.keep", config->socket_path);
                /* A daemon killed a moment ago: its keeper may not have
                 * seen the connection end yet, and refuses a second one. */
                for (int tries = 0; tries < 100; tries++) {
                        r = keep_keeper_open(path, config->restart_hold_s, ret_keep);
                        if (r != -EBUSY)
                                break;
                        usleep(20000);
                }
        }
        if (r < 0) {
                log_error("restart: cannot keep state across restarts (%s): %s; "
                          "set [restart] keep = off to run without",
                          systemd ? "systemd's fd store" : "keeper process",
                          strerror(-r));
                return r;
        }
        log_info("restart: state is kept across restarts by %s%s",
                 (*ret_keep)->ops->name, (*ret_keep)->n_restored ?
                 "; an earlier gpu-memd left some" : "");
        return 0;
}

/* A start that fails after taking over an earlier run's state leaves it
 * as it found it, for the next gpu-memd: a teardown would free the
 * buffers the clients are about to claim (their host copies go back to
 * the arena, which the sim backend punches out). As a SIGKILL leaves it:
 * no teardown. */
static _Noreturn void leave_state(void)
{
        log_error("restart: gpu-memd did not start; the state an earlier "
                  "gpu-memd left is left untouched for the next one");
        _exit(1);
}

/* Every way out closes the event loop: a start that fails after
 * uv_loop_init leaves nothing behind either (LeakSanitizer checks it). */
static int run(daemon_state *d, const gmd_config *config)
{
        gmd_backend *backend = NULL;
        uv_loop_t loop;
        char ready[400];
        const char *step;
        int fd = -1, r, status = 1;

        r = uv_loop_init(&loop);
        if (r < 0) {
                log_error("cannot start the event loop: %s", uv_strerror(r));
                return 1;
        }
        /* Before the restore: it closes passed fds it does not need, and
         * libsystemd's reading of the list checks every passed fd (it sets
         * FD_CLOEXEC on each), so a later read fails with EBADF. */
        r = systemd_listen_fd(&fd);
        if (r < 0) {
                log_error("cannot take the socket systemd passed: %s",
                          strerror(-r));
                goto close_loop;
        }
        /* A restore adopts the previous run's arena: none pinned meanwhile. */
        r = backend_open(config, d->keep && d->keep->n_restored ?
                         GMD_BACKEND_ARENA_HELD : 0, &backend);
        if (r < 0) {
                log_error("cannot open the %s backend: %s", config->backend,
                          strerror(-r));
                goto close_loop;
        }
        r = server_new(&loop, config, backend, &d->server);
        if (r < 0) {
                backend_close(backend);
                goto close_loop;
        }
        if (getrandom(&d->server->instance, sizeof(d->server->instance), 0) < 0)
                d->server->instance = (uint64_t)getpid() << 32 | (uint64_t)time(NULL);
        if (d->keep) {
                r = restore_begin(d->server, d->keep);
                /* Arenas the restore did not adopt build from here. */
                for (unsigned i = 0; backend->ops->arena_adopt &&
                                     i < backend->ops->device_count(backend); i++)
                        (void)backend->ops->arena_adopt(backend, i, NULL, 0);
                if (r < 0 && d->keep->n_restored)
                        leave_state();
                if (r < 0) {
                        d->server = server_free(d->server);
                        goto close_loop;
                }
        }
        step = "start the scheduler";
        r = scheduler_start(d->server);
        if (r >= 0) {
                step = "listen";
                r = server_listen(d->server, fd);
        }
        if (r < 0) {
                if (fd >= 0)
                        log_error("cannot %s (fd %d, passed by systemd): %s",
                                  step, fd, strerror(-r));
                else
                        log_error("cannot %s: %s", step, strerror(-r));
                if (d->server->restore.restores)
                        leave_state();
                server_stop(d->server);
        } else {
                handles_start(d, &loop);
                server_summary(d->server, d->status, sizeof(d->status));
                snprintf(ready, sizeof(ready), "serving %s with the %s backend: %s",
                         fd >= 0 ? "the socket systemd passed" : config->socket_path,
                         backend->ops->name, d->status);
                log_info("ready: %s", ready);
                systemd_notify_ready(d->status);
                status = 0;
        }

        /* Until every handle is closed: server_stop closed the server's
         * above, or a signal stops it all. */
        uv_run(&loop, UV_RUN_DEFAULT);
        d->server = server_free(d->server);
close_loop:
        r = uv_loop_close(&loop);
        if (r < 0)
                log_warning("event loop closed with handles open: %s", uv_strerror(r));
        if (status == 0)
                log_info("stopped");
        return status;
}

int main(int argc, char **argv)
{
        daemon_state d = { .argc = argc, .argv = argv };
        options_action action;
        int r;
        static gmd_config config;   /* large (quota rules): not on the stack */

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
        nofile_raise();
        if (restart_keep_open(&config, &d.keep) < 0)
                return 1;
        r = run(&d, &config);
        d.keep = keep_close(d.keep, d.discard);
        return r;
}
