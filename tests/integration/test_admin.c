/*
 * test_admin — gpu-memctl's live view and admin verbs against the real
 * gpu-memd: `top --once` (a frame for people and one JSON object; after
 * a pageout, the copy engine's row and the client's bytes by tier), `top`
 * live on a pseudo-terminal while a throttled pageout runs (the rate of
 * the last second, 'q' quits and gives the cursor back), `top
 * --json` streaming until SIGTERM, `priority` and `drain` by root changing
 * what status shows, the same verbs refused to an unprivileged user (a
 * child that drops to uid 65534 "nobody" before exec; skipped unless the
 * test runs as root), $GPU_MEMD_PRIORITY, and the daemon's shutdown notice
 * reaching gmd_last_error().
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pty.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "gpumem.pb-c.h"
#include "harness.h"
#include "raw_client.h"
#include "wire.h"

#define NOBODY 65534

/* Root may give any priority; a client may ask for up to 50 itself. */
#define ADMIN_CONFIG "[users]\nmax_priority = 50\n"

typedef harness_fixture fixture;



/* gpu-memctl with `args` (NULL-terminated) as the test's user. */
static int ctl(const fixture *f, const char *const *args, char **ret_out,
               char **ret_err)
{
        const char *argv[16] = { GMD_CTL_PATH };
        size_t n = 1;

        for (; args[n - 1]; n++) {
                assert_true(n < 15);
                argv[n] = args[n - 1];
        }
        argv[n] = NULL;
        return harness_exit_code(harness_run(&f->h, NULL, argv, ret_out, ret_err, 10000));
}

static const gmd_client_status *find_client(const gmd_status *s, uint32_t pid)
{
        for (size_t i = 0; i < s->n_clients; i++)
                if (s->clients[i].pid == pid)
                        return &s->clients[i];
        return NULL;
}

static int32_t priority_of(gmd_client *client, uint32_t pid)
{
        gmd_status *s = harness_status(client);
        const gmd_client_status *c = find_client(s, pid);
        int32_t priority;

        assert_non_null(c);
        priority = c->priority;
        gmd_status_free(s);
        return priority;
}

static size_t count(const char *text, const char *needle)
{
        size_t n = 0;

        for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
                n++;
        return n;
}

static void pid_text(char *buf, size_t len, pid_t pid)
{
        snprintf(buf, len, "%d", (int)pid);
}

/* ---- running as nobody ------------------------------------------------------ */

static bool skip_unless_root(void)
{
        if (geteuid() == 0)
                return false;
        print_message("skipped: dropping to an unprivileged user needs root\n");
        skip();
        return true;
}

/* Let "nobody" reach the daemon's socket: the temp dir is 0700. */
static void open_to_nobody(const fixture *f)
{
        assert_int_equal(chmod(f->h.dir, 0711), 0);
        assert_int_equal(chmod(f->h.socket_path, 0666), 0);
}

static char *read_pipe(int fd)
{
        size_t len = 0, cap = 1 << 16;
        char *text = malloc(cap);
        ssize_t n;

        assert_non_null(text);
        while ((n = read(fd, text + len, cap - len - 1)) > 0)
                len += (size_t)n;
        text[len] = '\0';
        close(fd);
        return text;
}

/* gpu-memctl as uid/gid 65534 with no supplementary groups. */
static int ctl_as_nobody(const fixture *f, const char *const *args,
                         char **ret_out, char **ret_err)
{
        const char *argv[16] = { GMD_CTL_PATH };
        char env_socket[160];
        static char path_env[] = "PATH=/usr/bin:/bin";
        char *envp[] = { env_socket, path_env, NULL };
        int out[2], err[2], program, status = 0;
        uint64_t deadline;
        pid_t pid;
        size_t n = 1;

        for (; args[n - 1]; n++) {
                assert_true(n < 15);
                argv[n] = args[n - 1];
        }
        argv[n] = NULL;
        snprintf(env_socket, sizeof(env_socket), "GPU_MEMD_SOCKET=%s",
                 f->h.socket_path);
        /* nobody may not reach the build tree (harness.h). */
        program = harness_open_program(argv[0]);
        assert_int_equal(pipe2(out, O_CLOEXEC), 0);
        assert_int_equal(pipe2(err, O_CLOEXEC), 0);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0 ||
                    setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 ||
                    setuid(NOBODY) < 0 || getuid() != NOBODY)
                        _exit(126);
                harness_exec_program(program, argv, envp);
                _exit(127);
        }
        close(program);
        close(out[1]);
        close(err[1]);
        /* Its output is small: the pipes hold it until it exits. */
        deadline = harness_now_ms() + 10000;
        while (waitpid(pid, &status, WNOHANG) == 0) {
                if (harness_now_ms() > deadline) {
                        kill(pid, SIGKILL);
                        waitpid(pid, &status, 0);
                        close(out[0]);
                        close(err[0]);
                        fail_msg("gpu-memctl as nobody did not finish in 10 s");
                }
                harness_sleep_ms(10);
        }
        *ret_out = read_pipe(out[0]);
        *ret_err = read_pipe(err[0]);
        return harness_exit_code(status);
}

/* ---- top -------------------------------------------------------------------- */

static void test_top_once(void **state)
{
        fixture *f = *state;
        const char *args[] = { "top", "--once", NULL };
        const char *plain[] = { "top", NULL };
        gmd_buffer *b = NULL;
        char *out = NULL, *err = NULL, pid[16];

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "toptest");
        assert_int_equal(gmd_alloc(f->client, 4 * MiB, 0, 0, GMD_NO_WAIT, &b), 0);
        pid_text(pid, sizeof(pid), getpid());

        assert_int_equal(ctl(f, args, &out, &err), 0);
        assert_string_equal(err, "");
        assert_non_null(strstr(out, "POOL"));
        assert_non_null(strstr(out, "gpu0 vram"));
        assert_non_null(strstr(out, "PRIO"));
        assert_non_null(strstr(out, "toptest"));
        assert_non_null(strstr(out, pid));
        assert_non_null(strstr(out, "4 MiB"));
        /* Not a terminal: no escape sequences. */
        assert_null(strchr(out, '\033'));
        for (char *line = out; *line;) {
                char *end = strchr(line, '\n');

                assert_non_null(end);
                if (end - line > 80) {
                        print_error("line wider than 80 columns: '%.*s'\n",
                                    (int)(end - line), line);
                        fail();
                }
                line = end + 1;
        }
        free(out);
        free(err);

        /* Without --once, a pipe on stdout still gets one frame. */
        assert_int_equal(ctl(f, plain, &out, &err), 0);
        assert_int_equal(count(out, "POOL"), 1);
        free(out);
        free(err);
        harness_stop(&f->h);
}

/* Every line of `out` fits 80 columns. */
static void assert_narrow(const char *out)
{
        for (const char *line = out; *line;) {
                const char *end = strchr(line, '\n');

                assert_non_null(end);
                if (end - line > 80)
                        fail_msg("line wider than 80 columns: '%.*s'",
                                 (int)(end - line), line);
                line = end + 1;
        }
}

/* The line of `text` that starts with `prefix` (a copy; free() it). */
static char *line_starting(const char *text, const char *prefix)
{
        for (const char *line = text; *line;) {
                const char *end = strchr(line, '\n');

                if (strncmp(line, prefix, strlen(prefix)) == 0)
                        return strndup(line, end ? (size_t)(end - line) :
                                       strlen(line));
                if (!end)
                        break;
                line = end + 1;
        }
        fail_msg("no line starting with '%s' in:\n%s", prefix, text);
        abort();        /* not reached: fail_msg jumps out of the test */
}

/* After 8 MiB went out: the copies row of gpu0 says so (nothing queued,
 * an average rate out, none in: --once has no earlier frame), and the
 * client's 8 MiB are on host. */
static void test_top_once_after_pageout(void **state)
{
        fixture *f = *state;
        const char *args[] = { "top", "--once", NULL };
        gmd_buffer *b = NULL;
        char *out = NULL, *err = NULL, *line, name[16], rate_unit[16];
        unsigned q_out = 9, q_in = 9;
        double rate = 0;

        /* Freed buffers go back at once (ctest sets this for every
         * integration test; a run by hand needs it too). */
        setenv(GMD_CACHE_ENV, "0", 1);
        harness_start_small(&f->h, "[pools]\nhost_limit = 64M\n");
        f->client = harness_client(&f->h, "toppager");
        assert_int_equal(gmd_alloc(f->client, 8 * MiB, 0, 0, GMD_NO_WAIT, &b), 0);
        assert_int_equal(gmd_release(f->client, b), 0);
        assert_int_equal(gmd_pageout(f->client, b), 0);
        assert_int_equal(gmd_wait(f->client, b, 5000), 0);

        assert_int_equal(ctl(f, args, &out, &err), 0);
        assert_string_equal(err, "");
        assert_narrow(out);
        line = line_starting(out, "COPIES");
        assert_non_null(strstr(line, "QUEUED OUT"));
        assert_non_null(strstr(line, "AVG OUT"));
        assert_null(strstr(line, "RATE OUT"));
        free(line);
        line = line_starting(out, "gpu0 ");     /* the pool line has "vram" */
        if (strstr(line, "vram")) {
                free(line);
                line = line_starting(strstr(out, "COPIES"), "gpu0 ");
        }
        /* The columns of status's copies table, in its order: queued,
         * moved, then the rates. */
        if (sscanf(line, "%15s %u %u %*f %*s %*f %*s %lf %15s", name, &q_out,
                   &q_in, &rate, rate_unit) != 5 || q_out != 0 || q_in != 0 ||
            rate <= 0 || !strstr(rate_unit, "/s") ||
            line[strlen(line) - 1] != '-' || !strstr(line, "8 MiB         0 B"))
                fail_msg("copies row: '%s'", line);
        free(line);
        line = line_starting(out, "    PID");
        assert_non_null(strstr(line, "VRAM"));
        assert_non_null(strstr(line, "HOST"));
        free(line);
        {
                const char *row = strstr(out, "toppager ");
                char vram_unit[8] = "", host_unit[8] = "";
                double vram = -1, host = -1;
                int prio = -1;

                if (!row || sscanf(row, "toppager %d %lf %7s %lf %7s", &prio,
                                   &vram, vram_unit, &host, host_unit) != 5 ||
                    vram != 0 || strcmp(vram_unit, "B") != 0 || host != 8 ||
                    strcmp(host_unit, "MiB") != 0)
                        fail_msg("no client row with 0 B on VRAM and 8 MiB on "
                                 "host:\n%s", out);
        }
        free(out);
        free(err);
        assert_int_equal(gmd_free(f->client, b), 0);
        harness_stop(&f->h);
}

/* Read what the pseudo-terminal's master gives for `ms` milliseconds
 * (or until the other side is gone) onto *text. */
static void pty_read(int master, char **text, size_t *len, size_t *cap, int ms)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)ms;

        for (;;) {
                struct pollfd p = { .fd = master, .events = POLLIN };
                uint64_t now = harness_now_ms();
                ssize_t n;

                if (now >= deadline)
                        return;
                if (poll(&p, 1, (int)(deadline - now)) <= 0)
                        continue;
                if (*len + 4096 > *cap) {
                        *cap *= 2;
                        *text = realloc(*text, *cap);
                        assert_non_null(*text);
                }
                n = read(master, *text + *len, *cap - *len - 1);
                if (n <= 0)
                        return;         /* EIO: the slave side is closed */
                *len += (size_t)n;
                (*text)[*len] = '\0';
        }
}

/*
 * `top` on a terminal while 32 MiB go out at 8 MiB/s (in 1 MiB chunks,
 * so the counters move smoothly): frames after the first show the rate
 * of the last interval, near 8 MiB/s, with the move queued; 'q' quits,
 * exit 0, the cursor shown again.
 */
static void test_top_live_rate(void **state)
{
        fixture *f = *state;
        harness_proc *proc = harness_track(f);
        struct winsize ws = { .ws_row = 40, .ws_col = 80 };
        char sock_arg[160];
        const char *argv[] = { GMD_CTL_PATH, "--socket", sock_arg, "top", NULL };
        size_t len = 0, cap = 1 << 16;
        char *text = calloc(1, cap), *frame;
        gmd_buffer *b = NULL;
        int master = -1, slave = -1, status = 0, rates = 0;
        uint64_t deadline;

        assert_non_null(text);
        setenv(GMD_CACHE_ENV, "0", 1);
        harness_start_small(&f->h, "[pools]\nhost_limit = 64M\n"
                            "[sim]\ncopy_rate = 8M\n"
                            "[swap]\nchunk_size = 1M\n");
        f->client = harness_client(&f->h, "livepager");
        assert_int_equal(gmd_alloc(f->client, 32 * MiB, 0, 0, GMD_NO_WAIT, &b), 0);
        assert_int_equal(gmd_release(f->client, b), 0);
        assert_int_equal(gmd_pageout(f->client, b), 0);

        snprintf(sock_arg, sizeof(sock_arg), "%s", f->h.socket_path);
        assert_int_equal(openpty(&master, &slave, NULL, NULL, &ws), 0);
        proc->pid = fork();
        assert_true(proc->pid >= 0);
        if (proc->pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                setsid();
                if (ioctl(slave, TIOCSCTTY, 0) < 0 || dup2(slave, 0) < 0 ||
                    dup2(slave, 1) < 0 || dup2(slave, 2) < 0)
                        _exit(126);
                execv(argv[0], (char *const *)argv);
                _exit(127);
        }
        close(slave);
        pty_read(master, &text, &len, &cap, 2600);
        assert_int_equal(write(master, "q", 1), 1);
        pty_read(master, &text, &len, &cap, 3000);
        deadline = harness_now_ms() + 5000;
        while (waitpid(proc->pid, &status, WNOHANG) == 0) {
                if (harness_now_ms() > deadline)
                        fail_msg("top did not quit on 'q'; it wrote:\n%s", text);
                harness_sleep_ms(10);
        }
        proc->pid = -1;
        close(master);
        assert_int_equal(harness_exit_code(status), 0);
        /* Hidden while it ran, shown again at the end. */
        assert_non_null(strstr(text, "\033[?25l"));
        assert_non_null(strstr(text + len - 16, "\033[?25h"));

        /* Frames start at "home"; the first has no earlier sample. */
        frame = strstr(text, "\033[H");
        assert_non_null(frame);
        assert_non_null(strstr(frame, "AVG OUT"));
        for (frame = strstr(frame + 1, "\033[H"); frame;
             frame = strstr(frame + 1, "\033[H")) {
                char *end = strstr(frame + 1, "\033[H"), *row, unit[16];
                unsigned q_out = 0, q_in = 9;
                double rate = 0;

                if (end)
                        *end = '\0';
                if (!strstr(frame, "RATE OUT"))
                        fail_msg("a later frame without RATE OUT:\n%s", frame);
                row = strstr(strstr(frame, "COPIES"), "\ngpu0 ");
                assert_non_null(row);
                if (sscanf(row + 1, "gpu0 %u %u %*f %*s %*f %*s %lf %15s", &q_out,
                           &q_in, &rate, unit) != 4 || q_out != 1 || q_in != 0 ||
                    strcmp(unit, "MiB/s") != 0 || rate < 5 || rate > 11)
                        fail_msg("copies row of a live frame: '%.80s'", row + 1);
                rates++;
                if (end)
                        *end = '\033';
        }
        if (rates < 1)
                fail_msg("no second frame in 2.6 s:\n%s", text);
        free(text);
        assert_int_equal(gmd_wait(f->client, b, 10000), 0);
        assert_int_equal(gmd_free(f->client, b), 0);
        harness_stop(&f->h);
}

static void test_top_json(void **state)
{
        fixture *f = *state;
        harness_proc *proc = harness_track(f);
        const char *args[] = { "top", "--once", "--json", NULL };
        const char *stream[] = { GMD_CTL_PATH, "top", "--json", NULL };
        char *out = NULL, *err = NULL;
        int status;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "jsontop");

        assert_int_equal(ctl(f, args, &out, &err), 0);
        assert_int_equal(count(out, "\"daemon_version\""), 1);
        assert_int_equal(out[0], '{');
        assert_string_equal(out + strlen(out) - 2, "}\n");
        assert_non_null(strstr(out, "\"jsontop\""));
        assert_non_null(strstr(out, "\"priority\""));
        assert_non_null(strstr(out, "\"details_hidden\": false"));
        free(out);
        free(err);

        /* Streaming: one object a second until SIGTERM, then exit 0. */
        *proc = harness_spawn(&f->h, NULL, stream);
        harness_sleep_ms(2300);
        kill(proc->pid, SIGTERM);
        status = harness_finish(proc, &out, 5000);
        proc->pid = -1;
        assert_int_equal(harness_exit_code(status), 0);
        assert_true(count(out, "\"daemon_version\"") >= 2);
        free(out);
        harness_stop(&f->h);
}

/* ---- admin verbs as root ---------------------------------------------------- */

static void test_priority_by_root(void **state)
{
        fixture *f = *state;
        char pid[16], *out = NULL, *err = NULL;

        if (skip_unless_root())
                return;
        harness_start_small(&f->h, ADMIN_CONFIG);
        f->client = harness_client(&f->h, "prio");
        pid_text(pid, sizeof(pid), getpid());

        {
                const char *args[] = { "priority", pid, "7", NULL };

                assert_int_equal(ctl(f, args, &out, &err), 0);
                assert_non_null(strstr(out, "priority set to 7"));
                assert_int_equal(priority_of(f->client, (uint32_t)getpid()), 7);
                free(out);
                free(err);
        }
        {
                /* A negative number is the priority, not an option. */
                const char *args[] = { "priority", pid, "-3", NULL };

                assert_int_equal(ctl(f, args, &out, &err), 0);
                assert_int_equal(priority_of(f->client, (uint32_t)getpid()), -3);
                free(out);
                free(err);
        }
        {
                const char *args[] = { "--json", "priority", pid, "12", NULL };

                assert_int_equal(ctl(f, args, &out, &err), 0);
                assert_non_null(strstr(out, "\"ok\": true"));
                assert_non_null(strstr(out, "\"priority\": 12"));
                assert_int_equal(priority_of(f->client, (uint32_t)getpid()), 12);
                free(out);
                free(err);
        }
        {
                /* Pid 1 has no client: refused, exit 1, the pid named. */
                const char *args[] = { "priority", "1", "5", NULL };

                assert_int_equal(ctl(f, args, &out, &err), 1);
                assert_non_null(strstr(err, "priority 1:"));
                free(out);
                free(err);
        }
        {
                const char *args[] = { "priority", pid, NULL };

                assert_int_equal(ctl(f, args, &out, &err), 2);
                free(out);
                free(err);
        }
        harness_stop(&f->h);
}

static void test_drain_by_root(void **state)
{
        fixture *f = *state;
        harness_proc *proc = harness_track(f);
        const char *hold[] = { "hold", "4M", NULL };
        char pid[16], *out = NULL, *err = NULL, *line;

        if (skip_unless_root())
                return;
        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "watcher");
        *proc = harness_spawn_client(&f->h, hold);
        line = harness_read_line(proc, "ready", 5000);
        assert_non_null(line);
        free(line);
        assert_int_equal(harness_vram_used(f->client, 0), 4 * MiB);
        pid_text(pid, sizeof(pid), proc->pid);

        {
                const char *args[] = { "drain", pid, NULL };

                assert_int_equal(ctl(f, args, &out, &err), 0);
                assert_non_null(strstr(out, "drained"));
                free(out);
                free(err);
        }
        assert_int_equal(harness_wait_vram_used(f->client, 0, 0, 5000), 0);
        assert_int_equal(harness_wait_clients(f->client, 1, 5000), 1);
        harness_stop(&f->h);
}

/* ---- the same verbs as nobody ----------------------------------------------- */

static void test_unprivileged_refused(void **state)
{
        fixture *f = *state;
        const char *top[] = { "top", "--once", NULL };
        gmd_buffer *b = NULL;
        char pid[16], *out = NULL, *err = NULL;

        if (skip_unless_root())
                return;
        harness_start_small(&f->h, NULL);
        open_to_nobody(f);
        f->client = harness_client(&f->h, "victim");
        assert_int_equal(gmd_alloc(f->client, 2 * MiB, 0, 0, GMD_NO_WAIT, &b), 0);
        pid_text(pid, sizeof(pid), getpid());

        {
                const char *args[] = { "drain", pid, NULL };

                assert_int_equal(ctl_as_nobody(f, args, &out, &err), 1);
                if (!strstr(err, "not allowed")) {
                        print_error("stderr: %s\n", err);
                        fail();
                }
                free(out);
                free(err);
        }
        {
                const char *args[] = { "priority", pid, "9", NULL };

                assert_int_equal(ctl_as_nobody(f, args, &out, &err), 1);
                assert_non_null(strstr(err, "not allowed"));
                free(out);
                free(err);
        }
        {
                const char *args[] = { "evict", pid, NULL };

                assert_int_equal(ctl_as_nobody(f, args, &out, &err), 1);
                assert_non_null(strstr(err, "not allowed"));
                free(out);
                free(err);
        }
        /* Nothing happened to the client. */
        assert_int_equal(harness_vram_used(f->client, 0), 2 * MiB);
        assert_int_not_equal(priority_of(f->client, (uint32_t)getpid()), 9);

        /* nobody may look, but not at root's client's details. */
        assert_int_equal(ctl_as_nobody(f, top, &out, &err), 0);
        assert_non_null(strstr(out, pid));
        assert_null(strstr(out, "victim"));
        free(out);
        free(err);
        harness_stop(&f->h);
}

/* ---- library: priority from the environment, the shutdown notice ------------- */

static void test_priority_env(void **state)
{
        fixture *f = *state;
        gmd_client *c = NULL;

        harness_start_small(&f->h, ADMIN_CONFIG);
        setenv(GMD_PRIORITY_ENV, "5", 1);
        f->client = harness_client(&f->h, "envprio");
        assert_int_equal(priority_of(f->client, (uint32_t)getpid()), 5);

        setenv(GMD_PRIORITY_ENV, "high", 1);
        assert_int_equal(gmd_connect(f->h.socket_path, "bad", &c), -EINVAL);
        assert_null(c);
        assert_non_null(strstr(gmd_last_error(), GMD_PRIORITY_ENV));
        unsetenv(GMD_PRIORITY_ENV);
        harness_stop(&f->h);
}

static void test_shutdown_notice(void **state)
{
        fixture *f = *state;
        gmd_status *s = NULL;
        int r = 0;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "bystander");
        harness_stop(&f->h);
        /* The notice and the close are in the socket; the library's
         * thread reads them soon. */
        for (int i = 0; i < 100; i++) {
                r = gmd_query_status(f->client, GMD_STATUS_POOLS, 0, &s);
                if (r < 0 && strstr(gmd_last_error(), "stopping"))
                        break;
                s = gmd_status_free(s);
                harness_sleep_ms(20);
        }
        assert_int_equal(r, GMD_ECONN);
        if (strncmp(gmd_last_error(), "gpu-memd is stopping: ", 22) != 0) {
                print_error("last error: %s\n", gmd_last_error());
                fail();
        }
}

/* A daemon told to stop with requests of a client unread (here 200
 * status requests sent while it was stopped) still gets its shutdown
 * notice to the client: it drops what it will not read before closing,
 * or the kernel would reset the connection and the client would hear of
 * the reset before the packets sent to it last. */
static void test_shutdown_notice_unread(void **state)
{
        fixture *f = *state;
        Gmd__StatusRequest req = GMD__STATUS_REQUEST__INIT;
        uint8_t *buf = malloc(GMD_WIRE_MAX_PACKET);
        bool notice = false, reset = false;
        unsigned replies = 0;
        raw_client c;
        int status;

        assert_non_null(buf);
        harness_start_small(&f->h, NULL);
        raw_init(&c);
        raw_hello(&c, &f->h, "unread");
        harness_suspend(f->h.pid);
        for (uint32_t id = 2; id < 202; id++)
                raw_send(&c, GMD__MSG_TYPE__MSG_STATUS, id, &req.base);
        /* Delivered once it runs again: the stop comes with most of them
         * still in the socket. */
        assert_int_equal(kill(f->h.pid, SIGTERM), 0);
        assert_int_equal(kill(f->h.pid, SIGCONT), 0);
        assert_int_equal(waitpid(f->h.pid, &status, 0), f->h.pid);
        f->h.pid = 0;
        for (;;) {
                gmd_wire_packet packet;
                const char *reason = NULL;
                int r = gmd_wire_recv(c.fd, buf, &packet, &reason);

                if (r == -ECONNRESET) {
                        reset = true;
                        continue;
                }
                if (r <= 0)
                        break;
                notice |= packet.header.type == GMD__MSG_TYPE__MSG_SHUTDOWN;
                replies += packet.header.type == GMD__MSG_TYPE__MSG_STATUS_REPLY;
                gmd_wire_packet_close_fds(&packet);
        }
        free(buf);
        raw_close(&c);
        if (reset || !notice)
                fail_msg("after %u status replies: %s%s", replies,
                         reset ? "the connection was reset" : "",
                         notice ? "" : ", no shutdown notice");
        assert_true(replies < 200);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                HARNESS_TEST(test_top_once),
                HARNESS_TEST(test_top_once_after_pageout),
                HARNESS_TEST(test_top_live_rate),
                HARNESS_TEST(test_top_json),
                HARNESS_TEST(test_priority_by_root),
                HARNESS_TEST(test_drain_by_root),
                HARNESS_TEST(test_unprivileged_refused),
                HARNESS_TEST(test_priority_env),
                HARNESS_TEST(test_shutdown_notice),
                HARNESS_TEST(test_shutdown_notice_unread),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
