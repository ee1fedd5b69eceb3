/*
 * harness — runs the real gpu-memd for an integration test: a temporary
 * directory with a config file, the daemon's socket and its log; the daemon
 * started from the build tree with stderr to that log (and, for tests that
 * read them, its metrics on a Unix socket there); client programs run as
 * real processes against it.
 *
 * Every helper that can fail fails the running cmocka test itself (with the
 * reason and the daemon's log), so tests read as a list of steps. A test's
 * fixture (harness_fixture: the daemon, its connections and client
 * processes) is made and released here too, so every test file tears down
 * the same way and checks the same things (no process left, no fd leaked).
 */
#ifndef GMD_TEST_HARNESS_H
#define GMD_TEST_HARNESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpumem.h"

#define MiB (UINT64_C(1) << 20)

typedef struct harness {
        char dir[64];            /* mkdtemp'd; removed by harness_cleanup */
        char socket_path[108];
        char config_path[128];
        char log_path[128];
        char metrics_path[108];  /* where harness_start_small_metrics has
                                  * the daemon serve its metrics */
        pid_t pid;               /* the daemon; 0 when not running */
} harness;

/* A config for small, fast tests: sim backend, one 64 MiB device, 2 MiB
 * granularity. `extra` (may be NULL) is appended: more INI lines. */
#define HARNESS_SMALL_CONFIG \
        "[daemon]\nbackend = sim\n" \
        "[sim]\ndevices = 1\nvram = 64M\ngranularity = 2M\n"

/* Make the temp dir and write `config` (INI text) to it. */
void harness_init(harness *h, const char *config);

/* harness_init with HARNESS_SMALL_CONFIG followed by `extra_config` (may
 * be NULL); the daemon is not started. */
void harness_init_small(harness *h, const char *extra_config);

/* Replace the config file with HARNESS_SMALL_CONFIG followed by
 * `extra_config` (may be NULL), for the daemon's next start or reload. */
void harness_write_config(const harness *h, const char *extra_config);

/* Append `more_config` (INI lines; later keys win) to the config file. */
void harness_append_config(const harness *h, const char *more_config);

/* Write `text` to `path` (created or truncated); fails the test if it
 * cannot. */
void harness_write_file(const char *path, const char *text);

/* Start gpu-memd with --backend sim --socket --config and `extra_args`
 * (NULL-terminated, may be NULL); wait up to 10 s until it logs "ready: serving"
 * (it listens by then; the config must not raise log_level above info).
 * The daemon gets this process's environment as it is now (with
 * GPU_MEMD_SOCKET set): a test may setenv first. */
void harness_start(harness *h, const char *const *extra_args);

/* init + start with HARNESS_SMALL_CONFIG followed by `extra_config`. */
void harness_start_small(harness *h, const char *extra_config);

/* harness_start_small, with the metrics endpoint on the Unix socket
 * h->metrics_path ([metrics] listen after `extra_config`); returns once
 * the daemon's log says it serves there (5 s at most). */
void harness_start_small_metrics(harness *h, const char *extra_config);

/* Append `more_config` (INI lines; later keys win) to the config file,
 * SIGHUP the daemon and wait up to 5 s until its log says it reloaded. */
void harness_reload(harness *h, const char *more_config);

/* Scrape h->metrics_path and return the value of the sample whose name
 * and labels are exactly `series` (as "name{label=\"v\"}"); fails the
 * test, with the scrape, if there is none. */
double harness_metric(const harness *h, const char *series);

/* SIGTERM the daemon, wait (5 s at most), check exit status 0 and that
 * the socket file is gone. */
void harness_stop(harness *h);

/* Kill a daemon still running (SIGKILL; in the sanitizer build SIGTERM
 * first, so LeakSanitizer runs as it exits), remove the temp dir. Fails the
 * test if the daemon's log or the client log holds a sanitizer's report. */
void harness_cleanup(harness *h);

/* A whole file as text (free() it), or NULL when it cannot be opened. */
char *harness_read_file(const char *path);

/* The daemon's log so far ("" before it has one); free() it. */
char *harness_read_log(const harness *h);

/* How many log lines contain `needle`. */
int harness_log_count(const harness *h, const char *needle);

/* Wait up to `timeout_ms` until the log has a line containing `needle`;
 * returns that line (free() it) or NULL. */
char *harness_wait_log(const harness *h, const char *needle, int timeout_ms);

/* Entries of /proc/<pid>/fd. */
int harness_count_fds(pid_t pid);

/* Count fds of the test process itself. */
int harness_count_own_fds(void);

/* 0 when this process has `before` fds open again, else -1 after one
 * cmocka error line: for teardowns, which must not leak. */
int harness_check_own_fds(int before);

/* A wait status as a shell shows it: the exit code, or 128 + signal. */
int harness_exit_code(int status);

/*
 * Programs run as another user. A child that gives up root before exec
 * may not reach the program by its path: in a checkout other users cannot
 * enter (a clone under /root, mode 0700) its execve fails with EACCES and
 * the test saw exit 127. So the test process, still root, opens the
 * program (O_PATH) before the fork, and the child runs that file with
 * harness_exec_program: the kernel checks only the file's own execute
 * bits. The programs so run (gpu-memctl, gmd_test_client) link the
 * project's libraries statically and load system libraries only, so
 * nothing else in the tree needs to be reachable; the temp dir, socket and
 * config are under /tmp.
 *
 * harness_open_program returns the fd (close it once the child is
 * forked), failing the test if the program cannot be opened.
 * harness_exec_program is for the child (async-signal-safe); it returns
 * only on failure, like execve.
 */
int harness_open_program(const char *path);
int harness_exec_program(int fd, const char *const *argv, char *const *envp);

/* A running client program: its pid and the read end of its stdout. */
typedef struct harness_proc {
        pid_t pid;
        int out_fd;
} harness_proc;

/* Start `argv` (argv[0] a path) with GPU_MEMD_SOCKET set to the daemon's
 * socket (or to `socket_override` if not NULL), stdout piped back,
 * stderr into the temp dir's client log. */
harness_proc harness_spawn(const harness *h, const char *socket_override,
                           const char *const *argv);

/* Start the test client helper with these arguments (NULL-terminated). */
harness_proc harness_spawn_client(const harness *h, const char *const *args);

/* Read the process's stdout until a line starting with `prefix` appears
 * (within timeout_ms); returns the line without "\n" (free() it) or NULL. */
char *harness_read_line(harness_proc *p, const char *prefix, int timeout_ms);

/* Wait up to timeout_ms for the process to end; returns its wait status,
 * or fails the test (after killing it) on timeout. */
int harness_wait_proc(harness_proc *p, int timeout_ms);

/* Everything left on stdout until EOF, then wait for exit (timeout_ms in
 * all). *ret_output gets the text (free() it); returns the wait status. */
int harness_finish(harness_proc *p, char **ret_output, int timeout_ms);

/* Run to completion: returns the wait status; output as above. `err`, if
 * not NULL, receives stderr instead of the client log. Fails the test if
 * the output holds a sanitizer's report. */
int harness_run(const harness *h, const char *socket_override,
                const char *const *argv, char **ret_out, char **ret_err,
                int timeout_ms);

/* Monotonic milliseconds. */
uint64_t harness_now_ms(void);

/* Sleep. */
void harness_sleep_ms(int ms);

/* Connect a raw SOCK_SEQPACKET socket to the daemon; -1 on failure. */
int harness_connect_raw(const harness *h);

/* ---- the fixture of a test --------------------------------------------------- */

#define HARNESS_PROCS 8

/* What one integration test holds. harness_setup makes it (the cmocka
 * state), the test fills in what it uses, and harness_teardown releases
 * all of it, whatever the test got to before it ended or failed: client
 * processes killed and reaped, connections closed, the daemon killed, the
 * temp dir removed, and no fd of the test process leaked. */
typedef struct harness_fixture {
        harness h;
        int own_fds;                        /* the test process's, at setup */
        gmd_client *client;                 /* the test's own connections, */
        gmd_client *other;                  /* or NULL */
        harness_proc procs[HARNESS_PROCS];  /* client processes, */
        size_t n_procs;                     /* from harness_track */
} harness_fixture;

/* cmocka setup and teardown for a harness_fixture. */
int harness_setup(void **state);
int harness_teardown(void **state);

/* A cmocka test with them. */
#define HARNESS_TEST(name) \
        cmocka_unit_test_setup_teardown(name, harness_setup, harness_teardown)

/* A slot for a client process that teardown kills (pid -1 and out_fd -1
 * until the test sets them); fails the test when all are taken. */
harness_proc *harness_track(harness_fixture *f);

/* harness_spawn_client into a tracked slot. */
harness_proc *harness_track_client(harness_fixture *f, const char *const *args);

/* harness_spawn `argv` into a tracked slot, then read its stdout (10 s at
 * most) until a line starts with `prefix`; if none does, fails the test
 * with "the client process did not `what`" and the daemon's log. */
harness_proc *harness_track_ready(harness_fixture *f, const char *const *argv,
                                  const char *prefix, const char *what);

/* Room on host memory for what a test pages out, moved in 2 MiB chunks. */
#define HARNESS_SWAP_CONFIG \
        "[pools]\nhost_limit = 256M\n[swap]\nchunk_size = 2M\n"

/* harness_start_small_metrics with HARNESS_SWAP_CONFIG followed by
 * `extra_config` (may be NULL), then f->client connected as "owner". */
void harness_start_owner(harness_fixture *f, const char *extra_config);

/* ---- through libgpumem ---------------------------------------------------- */

/* A gmd_* call that must succeed: fails the test with the library's
 * message otherwise. Needs cmocka.h (fail_msg) before this header's use. */
#define OK(call) do {                                                         \
                int r_ = (call);                                              \
                if (r_ != 0)                                                  \
                        fail_msg("%s = %d (%s)", #call, r_, gmd_last_error()); \
        } while (0)

/* A SWAPPABLE buffer of `size` on device 0 holding pattern `seed`
 * (pattern.h), released; fails the test if it cannot be made. */
gmd_buffer *harness_released_buffer(gmd_client *client, uint64_t size,
                                    uint64_t seed);

/* gmd_pageout `buffer`, wait for it, and check it went to host memory. */
void harness_page_out(gmd_client *client, gmd_buffer *buffer);

/* gmd_prefetch `buffer`, wait for it, check it is in VRAM, acquire it,
 * and check it holds pattern `seed` (pattern_check, naming `when`). */
void harness_bring_back(gmd_client *client, gmd_buffer *buffer, uint64_t seed,
                        const char *when);

/* Poll (2 s at most) until device 0's VRAM pool shows `used` and `kept`;
 * fails the test, with the daemon's log, if it does not. */
void harness_expect_vram(const harness *h, gmd_client *client, uint64_t used,
                         uint64_t kept, const char *when);

/* gmd_connect to the daemon, failing the test if it cannot. */
gmd_client *harness_client(const harness *h, const char *name);

/* Query status (GMD_STATUS_CLIENTS), failing the test on error. */
gmd_status *harness_status(gmd_client *client);

/* A device's VRAM pool entry from status (used, kept, ...); fails the
 * test if there is no such pool. */
gmd_pool_status harness_vram_pool(gmd_client *client, unsigned device);

/* The host pool's entry from status; fails the test if there is none. */
gmd_pool_status harness_host_pool(gmd_client *client);

/* The daemon's row for buffer `id`, any client's (GMD_STATUS_BUFFERS);
 * fails the test if there is none. */
gmd_buffer_status harness_buffer_status(gmd_client *client, uint64_t id);

/* `used` of a device's VRAM pool; fails the test if there is no such pool. */
uint64_t harness_vram_used(gmd_client *client, unsigned device);

/* Poll until the VRAM pool's `used` equals `want` (timeout_ms at most);
 * returns the last value seen. */
uint64_t harness_wait_vram_used(gmd_client *client, unsigned device,
                                uint64_t want, int timeout_ms);

/* Poll until `total_clients` equals `want`; returns the last value seen. */
unsigned harness_wait_clients(gmd_client *client, unsigned want,
                              int timeout_ms);

/* Poll until the daemon's fd count equals `want`; returns the last count. */
int harness_wait_fds(pid_t pid, int want, int timeout_ms);

/* Send the daemon `sig` (SIGKILL: a crash; SIGINT: stop for good, the
 * keeper dropping what it held) and wait until it has exited, with no
 * check of how; the harness then has no daemon (start one again with
 * harness_start). */
void harness_kill(harness *h, int sig);

/* Stop `pid`, a child of the test, with SIGSTOP and wait until it has
 * stopped, every thread of it, before what follows can race it. */
void harness_suspend(pid_t pid);

/* One gmd_alloc (no flags, device 0) on a thread of its own: its result,
 * words and buffer once `done`. */
typedef struct harness_waiter {
        gmd_client *client;
        uint64_t size;
        int64_t timeout_ms;
        pthread_t thread;
        int r;
        char error[512];
        gmd_buffer *buffer;
        bool done;                      /* __atomic: the call returned */
} harness_waiter;

void harness_waiter_start(harness_waiter *w, gmd_client *client,
                          uint64_t size, int64_t timeout_ms);
void harness_waiter_join(harness_waiter *w);

/* Allocations the client named `name` has waiting, by the daemon's
 * status. */
unsigned harness_waiting_of(gmd_client *observer, const char *name);

/* Poll until `name` has `want` allocations waiting (20 s at most, then
 * fail with the daemon's log). */
void harness_wait_waiting(const harness *h, gmd_client *observer,
                          const char *name, unsigned want);

#endif
