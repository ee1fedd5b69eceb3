/*
 * test_service — the lab-service layer with the real daemon: socket
 * activation (systemd-socket-activate, and a hand-made LISTEN_FDS hand-off
 * for machines without it), quotas and priorities per user with clients
 * running as other users, live changes by SIGHUP, SIGTERM with clients
 * attached, who sees what in gpu-memctl, admin verbs refused to others
 * (the install tree is test_install.c).
 *
 * Tests that switch users need root: they create the users gmdtest-a and
 * gmdtest-b and the group gmdtest-g (a is a member) when missing and leave
 * them for the next run; without root they are skipped with a message.
 * Processes are started with spawn.c rather than harness_spawn because
 * they need what it does not do: another identity, extra environment, or
 * a listening socket at fd 3. The daemon too, where it runs under
 * systemd-socket-activate or without --socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "harness.h"
#include "spawn.h"

#define SOCKET_ACTIVATE "/usr/bin/systemd-socket-activate"
#define USER_A "gmdtest-a"
#define USER_B "gmdtest-b"
#define GROUP_G "gmdtest-g"

typedef harness_fixture fixture;

/* ---- small utilities ------------------------------------------------------- */

/* fail_msg without cmocka's 1 KiB cut, so whole logs and outputs show;
 * a macro so the failure names the caller's line. */
static void print_long(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void print_long(const char *fmt, ...)
{
        va_list ap;

        fflush(stdout);
        fputs("ERROR: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputs("\n", stderr);
}

#define fail_long(...) do { print_long(__VA_ARGS__); fail(); } while (0)

static void skip_because(const char *fmt, ...)
{
        char why[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        print_message("[  SKIPPED ] %s\n", why);
        skip();
}

static bool path_exists(const char *path)
{
        struct stat st;

        return lstat(path, &st) == 0;
}

/* ---- processes ------------------------------------------------------------- */

/* `gmd_test_client hold SIZE N` as `as` (NULL: us) with `env`; waits for
 * its "ready" line. */
static harness_proc *hold_start(fixture *f, const spawn_identity *as,
                                const char *const *env, const char *size,
                                const char *n)
{
        const char *argv[] = { GMD_TEST_CLIENT_PATH, "hold", size, n, NULL };
        spawn_opts o = { .as = as, .socket = f->h.socket_path, .env = env,
                         .listen_fd = -1 };
        harness_proc *p = spawn_tracked(f, &o, argv);
        char *line = harness_read_line(p, "ready", 5000);

        if (!line) {
                char *log = harness_read_log(&f->h);

                fail_long("hold %s x%s as %s did not get ready; daemon log:\n%s",
                          size, n, as ? as->name : "us", log);
        }
        free(line);
        return p;
}

/* `gmd_test_client alloc SIZE 0` as `as`: the rc it printed; the error
 * line goes to ret_error (free() it) when not NULL. */
static int alloc_as(const harness *h, const spawn_identity *as, const char *size,
                    char **ret_error)
{
        const char *argv[] = { GMD_TEST_CLIENT_PATH, "alloc", size, "0", NULL };
        spawn_opts o = { .as = as, .socket = h->socket_path, .listen_fd = -1 };
        char *out = NULL, *err = NULL, *rc_line, *error_line;
        int status, rc;

        status = spawn_run(argv, &o, &out, &err, 10000);
        rc_line = strstr(out, "rc ");
        if (!rc_line)
                fail_long("alloc %s as %s printed no rc (exit %d):\n%s%s",
                          size, as ? as->name : "us", spawn_exit_code(status), out, err);
        rc = atoi(rc_line + 3);
        if ((rc == 0) != (spawn_exit_code(status) == 0))
                fail_long("alloc %s as %s: rc %d but exit %d:\n%s%s", size,
                          as ? as->name : "us", rc, spawn_exit_code(status), out, err);
        if (ret_error) {
                error_line = strstr(out, "error ");
                *ret_error = strndup(error_line ? error_line + 6 : "",
                                     error_line ? strcspn(error_line + 6, "\n") : 0);
        }
        free(out);
        free(err);
        return rc;
}

/* ---- the daemon started our own way ------------------------------------------ */

/* Start `argv` (the daemon, or a wrapper that execs it) with its stdout
 * and stderr in the harness log. */
static void daemon_spawn(harness *h, const char *const *argv,
                         const char *const *env, int listen_fd)
{
        spawn_opts o = { .env = env, .listen_fd = listen_fd };
        int log_fd = open(h->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                          0644);

        assert_true(log_fd >= 0);
        h->pid = spawn_start(argv, &o, log_fd, log_fd);
        close(log_fd);
}

/* Wait for a log line containing `needle`; fail with the log if the
 * daemon exits or 5 s pass first. */
static void daemon_wait_log(harness *h, const char *needle)
{
        uint64_t deadline = harness_now_ms() + 5000;
        int status;

        for (;;) {
                char *line = harness_wait_log(h, needle, 0);

                if (line) {
                        free(line);
                        return;
                }
                if (waitpid(h->pid, &status, WNOHANG) == h->pid) {
                        h->pid = 0;
                        fail_long("the daemon exited (status %d) before logging "
                                  "'%s'; log:\n%s", spawn_exit_code(status), needle,
                                  harness_read_log(h));
                }
                if (harness_now_ms() >= deadline)
                        fail_long("no '%s' in the daemon's log within 5 s; "
                                  "log:\n%s", needle, harness_read_log(h));
                harness_sleep_ms(5);
        }
}

/* SIGTERM (if `sig`) and wait up to 5 s; returns the wait status. */
static int daemon_stop(harness *h, int sig)
{
        uint64_t deadline = harness_now_ms() + 5000;
        int status = 0;

        assert_true(h->pid > 0);
        if (sig)
                assert_int_equal(kill(h->pid, sig), 0);
        while (waitpid(h->pid, &status, WNOHANG) == 0) {
                if (harness_now_ms() >= deadline)
                        fail_long("the daemon did not exit within 5 s; log:\n%s",
                                  harness_read_log(h));
                harness_sleep_ms(2);
        }
        h->pid = 0;
        return status;
}

/* SIGHUP and wait for the reload to finish: the log gains a line with
 * `needle` beyond the `before` it had. */
static void reload_and_wait(harness *h, const char *needle)
{
        int before = harness_log_count(h, needle);
        uint64_t deadline = harness_now_ms() + 5000;

        assert_int_equal(kill(h->pid, SIGHUP), 0);
        while (harness_log_count(h, needle) <= before) {
                if (harness_now_ms() >= deadline)
                        fail_long("no new '%s' line within 5 s of SIGHUP; log:\n%s",
                                  needle, harness_read_log(h));
                harness_sleep_ms(5);
        }
}

static void assert_log_has(const harness *h, const char *needle)
{
        if (harness_log_count(h, needle) == 0)
                fail_long("the daemon's log has no '%s'; log:\n%s", needle,
                          harness_read_log(h));
}

/* ---- users (root only) ------------------------------------------------------- */

static int run_quiet(const char *const *argv)
{
        spawn_opts o = { .listen_fd = -1 };
        char *out = NULL, *err = NULL;
        int status = spawn_run(argv, &o, &out, &err, 20000);

        if (spawn_exit_code(status) != 0)
                print_error("%s failed (exit %d): %s%s\n", argv[0],
                            spawn_exit_code(status), out, err);
        free(out);
        free(err);
        return spawn_exit_code(status);
}

static bool user_in_group(const char *user, const char *group)
{
        struct group *g = getgrnam(group);

        for (char **m = g ? g->gr_mem : NULL; m && *m; m++)
                if (strcmp(*m, user) == 0)
                        return true;
        return false;
}

/* Create gmdtest-a (in gmdtest-g), gmdtest-b and gmdtest-g if missing.
 * Skips the test when not root. */
static void users_ensure(void)
{
        static bool done;

        if (geteuid() != 0)
                skip_because("needs root to create test users and run clients "
                             "as them (run the suite as root, as CI does)");
        if (done)
                return;
        if (!getgrnam(GROUP_G)) {
                const char *argv[] = { "/usr/sbin/groupadd", "--system", GROUP_G, NULL };

                assert_int_equal(run_quiet(argv), 0);
        }
        if (!getpwnam(USER_A)) {
                const char *argv[] = { "/usr/sbin/useradd", "--system",
                                       "--no-create-home", "--shell",
                                       "/usr/sbin/nologin", "-G", GROUP_G,
                                       USER_A, NULL };

                assert_int_equal(run_quiet(argv), 0);
        } else if (!user_in_group(USER_A, GROUP_G)) {
                const char *argv[] = { "/usr/sbin/usermod", "-a", "-G", GROUP_G,
                                       USER_A, NULL };

                assert_int_equal(run_quiet(argv), 0);
        }
        if (!getpwnam(USER_B)) {
                const char *argv[] = { "/usr/sbin/useradd", "--system",
                                       "--no-create-home", "--shell",
                                       "/usr/sbin/nologin", USER_B, NULL };

                assert_int_equal(run_quiet(argv), 0);
        }
        done = true;
}

/* A harness whose temp dir and socket other users can reach. */
static void start_shared(harness *h, const char *extra_config)
{
        harness_init_small(h, "[daemon]\nsocket_mode = 0666\n");
        harness_append_config(h, extra_config);
        assert_int_equal(chmod(h->dir, 0755), 0);
        harness_start(h, NULL);
}

/* ---- JSON from gpu-memctl: flat objects in arrays ------------------------------ */

/* The objects of array `key`, one after the other: *pos starts at NULL;
 * returns the next object (strndup'd) or NULL at the end. */
static char *json_next_object(const char *json, const char *key, const char **pos)
{
        char pattern[64];
        const char *p = *pos, *end;

        if (!p) {
                snprintf(pattern, sizeof(pattern), "\"%s\": [", key);
                p = strstr(json, pattern);
                if (!p)
                        return NULL;
                p += strlen(pattern);
        }
        p += strspn(p, " \n\t,");
        if (*p != '{')
                return NULL;
        end = strchr(p, '}');
        if (!end)
                return NULL;
        *pos = end + 1;
        return strndup(p, (size_t)(end - p + 1));
}

static bool json_has(const char *obj, const char *key)
{
        char pattern[64];

        snprintf(pattern, sizeof(pattern), "\"%s\":", key);
        return strstr(obj, pattern) != NULL;
}

static long long json_int(const char *obj, const char *key)
{
        char pattern[64];
        const char *p;

        snprintf(pattern, sizeof(pattern), "\"%s\": ", key);
        p = strstr(obj, pattern);
        if (!p)
                fail_long("no \"%s\" in %s", key, obj);
        return strtoll(p + strlen(pattern), NULL, 10);
}

static bool json_bool(const char *obj, const char *key)
{
        char pattern[64];
        const char *p;

        snprintf(pattern, sizeof(pattern), "\"%s\": ", key);
        p = strstr(obj, pattern);
        if (!p)
                fail_long("no \"%s\" in %s", key, obj);
        return strncmp(p + strlen(pattern), "true", 4) == 0;
}

/* The object of array `key` whose "pid" is `pid`; NULL if none. */
static char *json_find_pid(const char *json, const char *key, pid_t pid)
{
        const char *pos = NULL;
        char *obj;

        while ((obj = json_next_object(json, key, &pos))) {
                if (json_int(obj, "pid") == (long long)pid)
                        return obj;
                free(obj);
        }
        return NULL;
}

/* `gpu-memctl --json WHAT` as `as`; fails unless it exits 0. */
static char *memctl_json(const harness *h, const spawn_identity *as, const char *what)
{
        const char *argv[] = { GMD_CTL_PATH, "--json", what, NULL };
        spawn_opts o = { .as = as, .socket = h->socket_path, .listen_fd = -1 };
        char *out = NULL, *err = NULL;
        int status = spawn_run(argv, &o, &out, &err, 10000);

        if (spawn_exit_code(status) != 0)
                fail_long("gpu-memctl --json %s as %s: exit %d\n%s%s", what,
                          as ? as->name : "us", spawn_exit_code(status), out, err);
        free(err);
        return out;
}

/* A client's row in an in-process status query; fails if absent. */
static gmd_client_status client_row(gmd_client *client, pid_t pid)
{
        gmd_status *status = harness_status(client);
        gmd_client_status row;

        for (size_t i = 0; i < status->n_clients; i++) {
                if (status->clients[i].pid == (uint32_t)pid) {
                        row = status->clients[i];
                        gmd_status_free(status);
                        return row;
                }
        }
        gmd_status_free(status);
        fail_long("no client with pid %d in the status", (int)pid);
        return row;   /* not reached */
}

/* ---- fixture ---------------------------------------------------------------- */



/* ---- 1. socket activation ------------------------------------------------------ */

/* systemd-socket-activate creates the socket, waits for the first
 * connection and execs gpu-memd with it as fd 3: the daemon serves that
 * socket and leaves the file to systemd on exit. As in the installed
 * units, its configured socket is the same path: it must neither try to
 * claim that path (a live socket: it would refuse to start) nor remove it. */
static void test_socket_activate(void **state)
{
        fixture *f = *state;
        harness *h = &f->h;
        struct stat st;
        int status;

        if (access(SOCKET_ACTIVATE, X_OK) != 0)
                skip_because(SOCKET_ACTIVATE " is missing: install Debian's "
                             "systemd package (scripts/deps.sh should list it)");
        harness_init_small(h, NULL);
        const char *argv[] = {
                SOCKET_ACTIVATE, "--seqpacket", "-l", h->socket_path,
                GMD_DAEMON_PATH, "--backend", "sim", "--config", h->config_path,
                "--socket", h->socket_path, NULL,
        };
        daemon_spawn(h, argv, NULL, -1);
        daemon_wait_log(h, "Listening on");

        /* The first connection starts the daemon and is served by it. */
        char *error = NULL;
        int rc = alloc_as(h, NULL, "4M", &error);

        if (rc != 0)
                fail_long("alloc through the activated socket: rc %d (%s); log:\n%s",
                          rc, error, harness_read_log(h));
        free(error);
        daemon_wait_log(h, "ready: serving the socket systemd passed");
        assert_int_equal(alloc_as(h, NULL, "8M", NULL), 0);

        status = daemon_stop(h, SIGTERM);
        if (spawn_exit_code(status) != 0)
                fail_long("exit %d after SIGTERM; log:\n%s", spawn_exit_code(status),
                          harness_read_log(h));
        /* The socket belongs to whoever created it (systemd). */
        if (lstat(h->socket_path, &st) != 0 || !S_ISSOCK(st.st_mode))
                fail_long("gpu-memd removed the socket systemd passed it (%s); "
                          "log:\n%s", h->socket_path, harness_read_log(h));
        assert_log_has(h, "stopped");
}

static int listening_socket(const char *path, int type)
{
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);

        assert_true(fd >= 0);
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
        if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
            listen(fd, 16) < 0)
                fail_long("bind/listen %s: %s", path, strerror(errno));
        return fd;
}

/* The same hand-off made by hand (LISTEN_FDS=1, LISTEN_PID, fd 3), for
 * machines without systemd-socket-activate; under JOURNAL_STREAM the log
 * lines carry journald priority prefixes. */
static void test_listen_fds_handoff(void **state)
{
        fixture *f = *state;
        harness *h = &f->h;
        const char *env[] = { "JOURNAL_STREAM=8:4242", NULL };
        char unused[160];
        struct stat st;
        int fd, status;

        harness_init_small(h, NULL);
        snprintf(unused, sizeof(unused), "%s/unused.sock", h->dir);
        const char *argv[] = {
                GMD_DAEMON_PATH, "--backend", "sim", "--config", h->config_path,
                "--socket", unused, NULL,
        };
        fd = listening_socket(h->socket_path, SOCK_SEQPACKET);
        daemon_spawn(h, argv, env, fd);
        close(fd);
        daemon_wait_log(h, "<6>ready: serving the socket systemd passed");

        const char *pattern[] = { GMD_TEST_CLIENT_PATH, "pattern", "3", "4M", NULL };
        spawn_opts o = { .socket = h->socket_path, .listen_fd = -1 };
        char *out = NULL;

        status = spawn_run(pattern, &o, &out, NULL, 10000);
        if (spawn_exit_code(status) != 0)
                fail_long("pattern through the passed socket: exit %d\n%s\nlog:\n%s",
                          spawn_exit_code(status), out, harness_read_log(h));
        free(out);
        assert_false(path_exists(unused));

        status = daemon_stop(h, SIGTERM);
        assert_int_equal(spawn_exit_code(status), 0);
        assert_int_equal(lstat(h->socket_path, &st), 0);
        assert_true(S_ISSOCK(st.st_mode));
        assert_log_has(h, "<6>stopped");
}

/* A passed socket of the wrong kind is refused with a reason, not served. */
static void test_listen_fds_wrong_type(void **state)
{
        fixture *f = *state;
        harness *h = &f->h;
        int fd, status;

        harness_init_small(h, NULL);
        const char *argv[] = {
                GMD_DAEMON_PATH, "--backend", "sim", "--config", h->config_path,
                "--socket", h->socket_path, NULL,
        };
        char stream_path[160];

        snprintf(stream_path, sizeof(stream_path), "%s/stream.sock", h->dir);
        fd = listening_socket(stream_path, SOCK_STREAM);
        daemon_spawn(h, argv, NULL, fd);
        close(fd);
        status = daemon_stop(h, 0);
        if (spawn_exit_code(status) == 0)
                fail_long("gpu-memd accepted a SOCK_STREAM socket; log:\n%s",
                          harness_read_log(h));
        assert_log_has(h, "not a listening SOCK_SEQPACKET");
        assert_false(path_exists(h->socket_path));
}

/* ---- 2. users and quotas -------------------------------------------------------- */

static void expect_quota(const harness *h, const spawn_identity *as, const char *size,
                         const char *quota_text, const char *section)
{
        char *error = NULL;
        int rc = alloc_as(h, as, size, &error);

        if (rc != GMD_EQUOTA || !strstr(error, quota_text) ||
            !strstr(error, section))
                fail_long("alloc %s as %s: rc %d '%s'; want %d naming '%s' and "
                          "'%s'", size, as ? as->name : "root", rc, error,
                          GMD_EQUOTA, quota_text, section);
        free(error);
}

static void expect_ok(const harness *h, const spawn_identity *as, const char *size)
{
        char *error = NULL;
        int rc = alloc_as(h, as, size, &error);

        if (rc != 0)
                fail_long("alloc %s as %s: rc %d '%s'; want success", size,
                          as ? as->name : "root", rc, error);
        free(error);
}

static void test_quotas_per_user(void **state)
{
        fixture *f = *state;
        harness *h = &f->h;
        spawn_identity a, b;
        char text[64];

        users_ensure();
        spawn_identity_of(USER_A, &a);
        spawn_identity_of(USER_B, &b);
        start_shared(h, "[users]\nvram_quota = 16M\n"
                        "[group " GROUP_G "]\nvram_quota = 8M\n"
                        "[user " USER_B "]\nvram_quota = 4M\n");

        /* a: the group's 8M, not [users]' 16M. */
        expect_ok(h, &a, "8M");
        expect_quota(h, &a, "10M", "vram_quota of 8 MiB", "[group " GROUP_G "]");
        /* b: the user section's 4M. */
        expect_ok(h, &b, "4M");
        expect_quota(h, &b, "6M", "vram_quota of 4 MiB", "[user " USER_B "]");
        /* root: only [users] applies. */
        expect_ok(h, NULL, "16M");
        expect_quota(h, NULL, "18M", "vram_quota of 16 MiB", "[users]");

        /* Two clients of one user share the quota; spawn_identity from the
         * socket, so the message names b's uid. */
        hold_start(f, &b, NULL, "2M", "2");
        snprintf(text, sizeof(text), "uid %u holds 4 MiB", (unsigned)b.uid);
        expect_quota(h, &b, "2M", text, "[user " USER_B "]");
        /* ... and no one else's. */
        expect_ok(h, &a, "8M");
        expect_ok(h, NULL, "16M");
        snprintf(text, sizeof(text), "uid %u", (unsigned)b.uid);
        assert_log_has(h, text);
}

/* ---- 3. SIGHUP --------------------------------------------------------------------- */

static void test_reload_quota_live(void **state)
{
        fixture *f = *state;
        harness *h = &f->h;
        gmd_buffer *b8 = NULL, *b24 = NULL, *b2 = NULL;
        char where[200];
        int line = 2, r;

        harness_start_small(h, "[users]\nvram_quota = 4M\n");
        f->client = harness_client(h, "reload");
        r = gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SWAPPABLE, 0, &b8);
        assert_int_equal(r, GMD_EQUOTA);
        assert_non_null(strstr(gmd_last_error(), "vram_quota of 4 MiB"));

        /* Raised on disk, applied to the connected client. */
        harness_write_config(h, "[users]\nvram_quota = 32M\n");
        reload_and_wait(h, "reloaded the configuration");
        r = gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SWAPPABLE, 0, &b8);
        if (r != 0)
                fail_long("8M after raising the quota to 32M: %d %s", r,
                          gmd_last_error());

        /* A bad line: named with file and line, the old settings stay. */
        harness_write_config(h, "[users]\nvram_quota = lots\n");
        for (const char *p = HARNESS_SMALL_CONFIG; *p; p++)
                line += *p == '\n';
        snprintf(where, sizeof(where), "%s:%d: bad value 'lots' for key 'vram_quota'",
                 h->config_path, line);
        reload_and_wait(h, "reload: the new settings are not valid");
        assert_log_has(h, where);
        r = gmd_alloc(f->client, 24 * MiB, 0, GMD_ALLOC_SWAPPABLE, 0, &b24);
        if (r != 0)
                fail_long("24M more within the kept 32M quota: %d %s", r,
                          gmd_last_error());
        r = gmd_alloc(f->client, 2 * MiB, 0, GMD_ALLOC_SWAPPABLE, 0, &b2);
        if (r != GMD_EQUOTA || !strstr(gmd_last_error(), "vram_quota of 32 MiB"))
                fail_long("past the kept 32M quota: %d '%s'; want %d (the bad "
                          "reload must not drop the quota)", r, gmd_last_error(),
                          GMD_EQUOTA);

        /* Lowered below what is held: new allocations refused, held ones
         * kept. */
        harness_write_config(h, "[users]\nvram_quota = 16M\n");
        reload_and_wait(h, "reloaded the configuration");
        r = gmd_alloc(f->client, 2 * MiB, 0, GMD_ALLOC_SWAPPABLE, 0, &b2);
        assert_int_equal(r, GMD_EQUOTA);
        assert_non_null(strstr(gmd_last_error(), "vram_quota of 16 MiB"));
        assert_int_equal(harness_vram_used(f->client, 0), 32 * MiB);
        assert_int_equal(gmd_free(f->client, b24), 0);
        assert_int_equal(gmd_free(f->client, b8), 0);
        harness_stop(h);
}

/* What cannot change at run time is named in the log and left alone. */
static void test_reload_fixed_keys(void **state)
{
        fixture *f = *state;
        harness *h = &f->h;
        char config[512], other[160];
        int status;

        harness_init(h, NULL);
        snprintf(other, sizeof(other), "%s/other.sock", h->dir);
        snprintf(config, sizeof(config), "%s[daemon]\nsocket = %s\n",
                 HARNESS_SMALL_CONFIG, h->socket_path);
        harness_write_file(h->config_path, config);
        /* No --socket: the file's key is the one in effect. */
        const char *argv[] = { GMD_DAEMON_PATH, "--config", h->config_path, NULL };

        daemon_spawn(h, argv, NULL, -1);
        daemon_wait_log(h, "ready: serving");

        snprintf(config, sizeof(config),
                 "[daemon]\nbackend = sim\nsocket = %s\n"
                 "[sim]\ndevices = 1\nvram = 128M\ngranularity = 2M\n", other);
        harness_write_file(h->config_path, config);
        reload_and_wait(h, "reloaded the configuration");
        assert_log_has(h, "[daemon] socket cannot change while gpu-memd runs");
        assert_log_has(h, "[sim] vram cannot change while gpu-memd runs");
        assert_false(path_exists(other));

        f->client = harness_client(h, "after-reload");
        gmd_status *st = harness_status(f->client);

        assert_int_equal(st->pools[0].capacity, 64 * MiB);
        gmd_status_free(st);
        gmd_disconnect(f->client);
        f->client = NULL;

        status = daemon_stop(h, SIGTERM);
        assert_int_equal(spawn_exit_code(status), 0);
        /* It removes the socket it made, not the one the new file names. */
        assert_false(path_exists(h->socket_path));
        assert_false(path_exists(other));
}

/* ---- 4. SIGTERM with clients ------------------------------------------------------ */

static void test_sigterm_with_clients(void **state)
{
        fixture *f = *state;
        harness *h = &f->h;
        const char *waiter_argv[] = { GMD_TEST_CLIENT_PATH, "alloc", "32M", "10000", NULL };
        spawn_opts o = { .socket = NULL, .listen_fd = -1 };
        harness_proc *holder, *waiter;
        gmd_buffer *mine = NULL, *more = NULL;
        uint64_t deadline, stopped;
        char *out = NULL, *line;
        int status, r, waiting = 0;

        harness_start_small(h, NULL);
        o.socket = h->socket_path;
        f->client = harness_client(h, "term-holder");
        assert_int_equal(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SWAPPABLE, 0,
                                   &mine), 0);
        holder = hold_start(f, NULL, NULL, "16M", "2");
        /* 64M - 8M - 32M leaves 24M: the waiter's 32M waits. */
        waiter = spawn_tracked(f, &o, waiter_argv);
        line = harness_read_line(waiter, "connected", 5000);
        assert_non_null(line);
        free(line);
        deadline = harness_now_ms() + 5000;
        while (!waiting && harness_now_ms() < deadline) {
                waiting = (int)client_row(f->client, waiter->pid).waiting;
                if (!waiting)
                        harness_sleep_ms(5);
        }
        assert_int_equal(waiting, 1);

        stopped = harness_now_ms();
        harness_stop(h);   /* exit 0 within 5 s, socket removed */

        /* The waiter is told, at once, not left to its 10 s deadline. */
        status = harness_finish(waiter, &out, 5000);
        if (!strstr(out, "rc -107") || !strstr(out, "stopping") ||
            harness_now_ms() - stopped > 3000)
                fail_long("the waiting client got (exit %d, %llu ms after "
                          "SIGTERM):\n%s\nwant rc %d with the daemon's reason "
                          "('stopping'); log:\n%s", spawn_exit_code(status),
                          (unsigned long long)(harness_now_ms() - stopped), out,
                          GMD_ECONN, harness_read_log(h));
        free(out);

        /* The connected client sees the connection gone, with the reason. */
        r = gmd_alloc(f->client, 2 * MiB, 0, GMD_ALLOC_SWAPPABLE, 0, &more);
        assert_int_equal(r, GMD_ECONN);
        if (!strstr(gmd_last_error(), "stopping"))
                fail_long("after SIGTERM the client's last error is '%s'; want "
                          "the daemon's shutdown notice", gmd_last_error());
        gmd_free(f->client, mine);

        /* Every client was disconnected with its buffers freed. */
        assert_int_equal(harness_log_count(h, "disconnected; freed"), 3);
        assert_log_has(h, "hold) disconnected; freed 2 buffers (33554432 bytes)");
        assert_log_has(h, "term-holder) disconnected; freed 1 buffers");
        assert_int_equal(kill(holder->pid, 0), 0);   /* it was not killed */
}

/* ---- 5. priorities ---------------------------------------------------------------- */

static void test_priorities(void **state)
{
        fixture *f = *state;
        harness *h = &f->h;
        const char *hi_env[] = { "GPU_MEMD_PRIORITY=50", NULL };
        const char *lo_env[] = { "GPU_MEMD_PRIORITY=-20", NULL };
        harness_proc *hi, *def, *lo;
        char *json, *obj;

        harness_start_small(h, "[users]\npriority = 5\nmax_priority = 10\n");
        hi = hold_start(f, NULL, hi_env, "2M", "1");
        def = hold_start(f, NULL, NULL, "2M", "1");
        lo = hold_start(f, NULL, lo_env, "2M", "1");
        f->client = harness_client(h, "observer");

        json = memctl_json(h, NULL, "clients");
        if (!json_has(json, "priority")) {
                print_message("gpu-memctl clients --json has no \"priority\"; "
                              "checking through gmd_query_status only\n");
        } else {
                const struct { harness_proc *p; int want; } rows[] = {
                        { hi, 10 }, { def, 5 }, { lo, -20 },
                };

                for (size_t i = 0; i < 3; i++) {
                        obj = json_find_pid(json, "clients", rows[i].p->pid);
                        if (!obj)
                                fail_long("pid %d missing from:\n%s",
                                          (int)rows[i].p->pid, json);
                        if (json_int(obj, "priority") != rows[i].want)
                                fail_long("pid %d: want priority %d in %s",
                                          (int)rows[i].p->pid, rows[i].want, obj);
                        free(obj);
                }
        }
        free(json);
        assert_int_equal(client_row(f->client, hi->pid).priority, 10);
        assert_int_equal(client_row(f->client, def->pid).priority, 5);
        assert_int_equal(client_row(f->client, lo->pid).priority, -20);

        /* A lower max_priority applies to running clients. */
        harness_write_config(h, "[users]\npriority = 5\nmax_priority = 7\n");
        reload_and_wait(h, "reloaded the configuration");
        assert_int_equal(client_row(f->client, hi->pid).priority, 7);
        assert_int_equal(client_row(f->client, def->pid).priority, 5);
        assert_int_equal(client_row(f->client, lo->pid).priority, -20);

        if (geteuid() != 0) {
                print_message("not root: gpu-memctl priority not checked\n");
                return;
        }
        const char *argv[] = { GMD_CTL_PATH, "priority", "0", "42", NULL };
        char pid_text[16], *out = NULL, *err = NULL;
        spawn_opts o = { .socket = h->socket_path, .listen_fd = -1 };
        int status;

        snprintf(pid_text, sizeof(pid_text), "%d", (int)def->pid);
        argv[2] = pid_text;
        status = spawn_run(argv, &o, &out, &err, 10000);
        if (spawn_exit_code(status) != 0)
                fail_long("gpu-memctl priority as root: exit %d\n%s%s",
                          spawn_exit_code(status), out, err);
        free(out);
        free(err);
        assert_int_equal(client_row(f->client, def->pid).priority, 42);
        /* An administrator's choice outlives a reload. */
        reload_and_wait(h, "reloaded the configuration");
        assert_int_equal(client_row(f->client, def->pid).priority, 42);
}

/* ---- 6. who sees what, who may do what -------------------------------------------- */

static void test_visibility_and_admin(void **state)
{
        fixture *f = *state;
        harness *h = &f->h;
        harness_proc *pa, *pb;
        gmd_buffer *rootbuf = NULL;
        spawn_identity a, b;
        const char *pos = NULL;
        char *json, *obj, pid_text[16], *out = NULL, *err = NULL;
        unsigned n = 0;
        int status;

        users_ensure();
        spawn_identity_of(USER_A, &a);
        spawn_identity_of(USER_B, &b);
        start_shared(h, "admin_group = " GROUP_G "\n");

        pa = hold_start(f, &a, NULL, "2M", "2");
        pb = hold_start(f, &b, NULL, "2M", "1");
        f->client = harness_client(h, "root-client");
        assert_int_equal(gmd_alloc(f->client, 2 * MiB, 0, GMD_ALLOC_SWAPPABLE, 0,
                                   &rootbuf), 0);

        /* b: its own buffer only; other users' clients without details. */
        json = memctl_json(h, &b, "buffers");
        while ((obj = json_next_object(json, "buffers", &pos))) {
                if (json_int(obj, "pid") != pb->pid)
                        fail_long("%s sees another user's buffer: %s\nfull:\n%s",
                                  USER_B, obj, json);
                n++;
                free(obj);
        }
        if (n != 1)
                fail_long("%s should see exactly its 1 buffer, saw %u:\n%s",
                          USER_B, n, json);
        obj = json_find_pid(json, "clients", pa->pid);
        if (!obj || !json_bool(obj, "details_hidden") ||
            !strstr(obj, "\"name\": \"\"") || json_int(obj, "buffers") != 0 ||
            json_int(obj, "bytes") != (long long)(4 * MiB) || json_int(obj, "uid") != a.uid)
                fail_long("%s's view of %s's client: want details hidden, "
                          "uid and bytes shown:\n%s", USER_B, USER_A,
                          obj ? obj : json);
        free(obj);
        obj = json_find_pid(json, "clients", getpid());
        assert_non_null(obj);
        assert_true(json_bool(obj, "details_hidden"));
        free(obj);
        obj = json_find_pid(json, "clients", pb->pid);
        if (!obj || json_bool(obj, "details_hidden") ||
            !strstr(obj, "\"name\": \"hold\"") || json_int(obj, "buffers") != 1)
                fail_long("%s's view of its own client:\n%s", USER_B,
                          obj ? obj : json);
        free(obj);
        free(json);

        /* a is in the admin group: everything. */
        json = memctl_json(h, &a, "buffers");
        pos = NULL;
        n = 0;
        while ((obj = json_next_object(json, "buffers", &pos))) {
                n++;
                free(obj);
        }
        assert_int_equal(n, 4);
        obj = json_find_pid(json, "clients", pb->pid);
        assert_non_null(obj);
        assert_false(json_bool(obj, "details_hidden"));
        free(obj);
        free(json);

        /* b may not change a's priority or drain it. */
        snprintf(pid_text, sizeof(pid_text), "%d", (int)pa->pid);
        const char *prio_argv[] = { GMD_CTL_PATH, "priority", pid_text, "50", NULL };
        const char *drain_argv[] = { GMD_CTL_PATH, "drain", pid_text, NULL };
        spawn_opts as_b = { .as = &b, .socket = h->socket_path, .listen_fd = -1 };
        spawn_opts as_a = { .as = &a, .socket = h->socket_path, .listen_fd = -1 };

        status = spawn_run(prio_argv, &as_b, &out, &err, 10000);
        if (spawn_exit_code(status) == 0 || !strstr(err, "admin group"))
                fail_long("gpu-memctl priority as %s: exit %d, want refused "
                          "naming the admin group:\n%s%s", USER_B,
                          spawn_exit_code(status), out, err);
        free(out);
        free(err);
        status = spawn_run(drain_argv, &as_b, &out, &err, 10000);
        if (spawn_exit_code(status) == 0 || !strstr(err, "admin group"))
                fail_long("gpu-memctl drain as %s: exit %d, want refused:\n%s%s",
                          USER_B, spawn_exit_code(status), out, err);
        free(out);
        free(err);
        assert_int_equal(client_row(f->client, pa->pid).priority, 0);
        assert_int_equal(client_row(f->client, pa->pid).bytes, 4 * MiB);

        /* a, in the admin group, may. */
        snprintf(pid_text, sizeof(pid_text), "%d", (int)pb->pid);
        status = spawn_run(prio_argv, &as_a, &out, &err, 10000);
        if (spawn_exit_code(status) != 0)
                fail_long("gpu-memctl priority as %s (admin group): exit %d\n%s%s",
                          USER_A, spawn_exit_code(status), out, err);
        free(out);
        free(err);
        assert_int_equal(client_row(f->client, pb->pid).priority, 50);
        assert_int_equal(gmd_free(f->client, rootbuf), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                HARNESS_TEST(test_socket_activate),
                HARNESS_TEST(test_listen_fds_handoff),
                HARNESS_TEST(test_listen_fds_wrong_type),
                HARNESS_TEST(test_quotas_per_user),
                HARNESS_TEST(test_reload_quota_live),
                HARNESS_TEST(test_reload_fixed_keys),
                HARNESS_TEST(test_sigterm_with_clients),
                HARNESS_TEST(test_priorities),
                HARNESS_TEST(test_visibility_and_admin),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
