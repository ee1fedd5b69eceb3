/*
 * test_sandbox — gpu-memd (sim backend) under unit_sandbox, the launcher
 * that applies gpu-memd.service's process-level confinement without
 * systemd (unit_sandbox.c says what it applies and what it does not).
 *
 * The harness here is tests/integration/harness.c built with the daemon
 * path pointing at the build's gpu-memd-sandboxed wrapper, so every daemon
 * this file starts runs confined, as the GPU suite's do with GMD_SANDBOX=1.
 *
 *   probe        the filter answers as the unit's would: a call outside
 *                @system-service (ptrace, swapon) gets EPERM, socket() of
 *                AF_NETLINK EAFNOSUPPORT, namespaces and realtime refused,
 *                threads still made
 *   daemon       the daemon runs confined (Seccomp 2, NoNewPrivs, no
 *                capability, umask 0077, the launcher's line in its log) and
 *                serves: allocate, write, pageout, acquire, check, status,
 *                free, another client process's buffers, a clean SIGTERM
 *   denied call  with memfd_create (the sim backend's memory) refused too,
 *                as a driver needing a call outside the set would meet it:
 *                the allocation fails with an error, the daemon logs EPERM
 *                ("Operation not permitted") and keeps serving
 *
 * Exits 77 (ctest: skipped) with one SKIP line when this kernel or
 * container cannot install a seccomp filter.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "harness.h"
#include "pattern.h"

typedef harness_fixture fixture;

static char *probe_out;
static int probe_status;

/* unit_sandbox --probe, its stdout in probe_out. */
static void run_probe(void)
{
        char cmd[512];
        size_t len = 0, cap = 0;
        char buf[4096];
        FILE *p;
        size_t n;

        snprintf(cmd, sizeof(cmd), "'%s' --probe 2>&1", GMD_UNIT_SANDBOX);
        p = popen(cmd, "r");
        if (!p) {
                perror("popen");
                exit(1);
        }
        while ((n = fread(buf, 1, sizeof(buf), p)) > 0) {
                if (len + n + 1 > cap) {
                        cap = (len + n + 1) * 2;
                        probe_out = realloc(probe_out, cap);
                        if (!probe_out)
                                exit(1);
                }
                memcpy(probe_out + len, buf, n);
                len += n;
        }
        if (probe_out)
                probe_out[len] = 0;
        probe_status = pclose(p);
}

/* The value after "key " on a line of `text`, as a number; -1 if none. */
static long long line_value(const char *text, const char *key)
{
        size_t klen = strlen(key);

        for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
                if (strncmp(l, key, klen) == 0 && l[klen] == ' ')
                        return strtoll(l + klen + 1, NULL, 0);
        return -1;
}

/* A field of /proc/PID/status ("" when there is none); free() it. */
static char *proc_status(pid_t pid, const char *key)
{
        char path[64], line[256];
        size_t klen = strlen(key);
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        f = fopen(path, "re");
        assert_non_null(f);
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
                        char *v = line + klen + 1;

                        fclose(f);
                        v += strspn(v, " \t");
                        v[strcspn(v, "\n")] = 0;
                        return strdup(v);
                }
        fclose(f);
        return strdup("");
}

static void expect_status(pid_t pid, const char *key, const char *want)
{
        char *v = proc_status(pid, key);

        if (strcmp(v, want) != 0)
                fail_msg("daemon's /proc status %s: \"%s\", want \"%s\"", key, v,
                         want);
        free(v);
}

/* ---- probe ------------------------------------------------------------------ */

static void test_probe(void **state)
{
        (void)state;
        if (!WIFEXITED(probe_status) || WEXITSTATUS(probe_status) != 0 ||
            !strstr(probe_out, "\nprobe ok\n"))
                fail_msg("unit_sandbox --probe: status %#x, output:\n%s",
                         probe_status, probe_out);
        /* The call outside @system-service is refused, not only unprivileged. */
        assert_non_null(strstr(probe_out, "\nptrace ok (Operation not permitted;"));
        assert_non_null(strstr(probe_out, "\nswapon ok (Operation not permitted;"));
        assert_non_null(strstr(probe_out, "\nfilter_active ok"));
        assert_non_null(strstr(probe_out, "\nsocket_netlink ok (Address family"));
        assert_non_null(strstr(probe_out, "\numask ok (0077)"));
}

/* ---- the daemon confined ------------------------------------------------- */

static void test_daemon(void **state)
{
        fixture *f = *state;
        gmd_buffer *a = NULL;
        gmd_status *st;
        struct rlimit rl;
        char *line, *out = NULL;
        int status;

        harness_start_small(&f->h, "[pools]\nhost_limit = 64M\n");
        line = harness_wait_log(&f->h, "no_new_privs, seccomp ", 1000);
        if (!line || strncmp(line, "unit_sandbox: ", 14) != 0)
                fail_msg("no launcher line in the daemon's log:\n%s",
                         harness_read_log(&f->h));
        free(line);

        /* The daemon itself, after the exec: confined. */
        expect_status(f->h.pid, "Seccomp", "2");
        expect_status(f->h.pid, "NoNewPrivs", "1");
        expect_status(f->h.pid, "CapEff", "0000000000000000");
        expect_status(f->h.pid, "CapInh", "0000000000000000");
        expect_status(f->h.pid, "CapAmb", "0000000000000000");
        if (getuid() == 0)
                expect_status(f->h.pid, "CapBnd", "0000000000000000");
        expect_status(f->h.pid, "Umask", "0077");
        assert_int_equal(prlimit(f->h.pid, RLIMIT_NOFILE, NULL, &rl), 0);
        assert_int_equal((long long)rl.rlim_cur, line_value(probe_out, "nofile"));

        /* It serves: a buffer written, paged out, brought back, checked. */
        f->client = harness_client(&f->h, "sandbox");
        OK(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SWAPPABLE, GMD_NO_WAIT, &a));
        pattern_fill(a, 3);
        OK(gmd_release(f->client, a));
        harness_page_out(f->client, a);
        assert_int_equal(harness_host_pool(f->client).used, 8 * MiB);
        OK(gmd_acquire(f->client, a, 5000));
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_VRAM);
        pattern_check(a, 3, "after pageout and acquire");
        st = harness_status(f->client);
        assert_string_equal(st->backend, "sim");
        assert_int_equal(st->total_buffers, 1);
        gmd_status_free(st);
        OK(gmd_free(f->client, a));
        assert_int_equal(harness_wait_vram_used(f->client, 0, 0, 5000), 0);

        /* Another client process: zeroed memory, its pattern read back. */
        status = harness_run(&f->h, NULL, (const char *const[]){
                GMD_TEST_CLIENT_PATH, "pattern", "2", "4M", "7", NULL },
                &out, NULL, 20000);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fail_msg("gmd_test_client pattern: status %#x\n%s\nlog:\n%s",
                         status, out ? out : "", harness_read_log(&f->h));
        free(out);

        /* A clean stop under the filter: exit 0, socket removed. */
        gmd_disconnect(f->client);
        f->client = NULL;
        harness_stop(&f->h);
}

/* ---- a call the daemon needs, refused ------------------------------------ */

/* The daemon with the unit's filter and memfd_create refused too, run to
 * its exit (10 s at most) with `config`; returns the wait status, the log
 * in *ret_log (free() it). */
static int run_to_exit(fixture *f, const char *config, char **ret_log)
{
        char log_path[160];
        const char *argv[] = { GMD_DAEMON_PATH, "--backend", "sim", "--socket",
                               f->h.socket_path, "--config", f->h.config_path,
                               NULL };
        uint64_t deadline = harness_now_ms() + 10000;
        int status;
        pid_t pid;

        harness_write_config(&f->h, config);
        snprintf(log_path, sizeof(log_path), "%s/exit.log", f->h.dir);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

                if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
                        _exit(127);
                setenv("GMD_SANDBOX_OPTS", "--deny memfd_create", 1);
                execv(argv[0], (char *const *)argv);
                _exit(127);
        }
        while (waitpid(pid, &status, WNOHANG) != pid) {
                if (harness_now_ms() > deadline) {
                        kill(pid, SIGKILL);
                        waitpid(pid, &status, 0);
                        fail_msg("gpu-memd with memfd_create refused did not "
                                 "exit within 10 s");
                }
                harness_sleep_ms(5);
        }
        *ret_log = harness_read_file(log_path);
        return status;
}

static void expect_log(fixture *f, const char *needle, int timeout_ms)
{
        char *line = harness_wait_log(&f->h, needle, timeout_ms);

        if (!line)
                fail_msg("no \"%s\" in the daemon's log:\n%s", needle,
                         harness_read_log(&f->h));
        free(line);
}

static void test_denied_call(void **state)
{
        fixture *f = *state;
        gmd_buffer *a = NULL;
        gmd_status *st;
        char *log = NULL;
        int r, status;

        /* No host arena ([pools] host_stock = 0): the sim backend's first
         * memfd_create is an allocation's. */
        harness_init_small(&f->h, "[pools]\nhost_stock = 0\n");
        setenv("GMD_SANDBOX_OPTS", "--deny memfd_create", 1);
        harness_start(&f->h, NULL);
        unsetenv("GMD_SANDBOX_OPTS");
        expect_log(f, "memfd_create denied", 1000);

        f->client = harness_client(&f->h, "denied");
        r = gmd_alloc(f->client, 4 * MiB, 0, 0, GMD_NO_WAIT, &a);
        if (r == 0)
                fail_msg("allocation served with memfd_create refused; log:\n%s",
                         harness_read_log(&f->h));
        print_message("gmd_alloc with memfd_create refused: %d (%s)\n", r,
                      gmd_last_error());
        /* The daemon says why, and goes on. */
        expect_log(f, "Operation not permitted", 5000);
        assert_int_equal(kill(f->h.pid, 0), 0);
        st = harness_status(f->client);
        assert_int_equal(st->total_buffers, 0);
        gmd_status_free(st);
        gmd_disconnect(f->client);
        f->client = NULL;
        harness_stop(&f->h);

        /* With the arena (made at start): the daemon stops at start with
         * the reason in its log and exit status 1, no signal, as systemd
         * would see it (Restart=on-failure then retries, and the journal
         * says why). */
        status = run_to_exit(f, "[pools]\nhost_stock = 16M\n", &log);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 1 || !log ||
            !strstr(log, "Operation not permitted"))
                fail_msg("gpu-memd with memfd_create refused at start: status "
                         "%#x, log:\n%s", status, log ? log : "");
        free(log);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_probe),
                HARNESS_TEST(test_daemon),
                HARNESS_TEST(test_denied_call),
        };

        /* Freed memory back in the pools at once (no mapping cache). */
        setenv("GPU_MEMD_CACHE", "0", 1);
#ifdef GMD_SANITIZE
        /* LeakSanitizer stops the world with ptrace, which is outside
         * @system-service: under the filter it can only fail. ASan and
         * UBSan stay on in the confined daemon and launcher. */
        {
                const char *o = getenv("ASAN_OPTIONS");
                char opts[512];

                snprintf(opts, sizeof(opts), "%s%sdetect_leaks=0", o ? o : "",
                         o && *o ? ":" : "");
                setenv("ASAN_OPTIONS", opts, 1);
        }
#endif
        run_probe();
        if (WIFEXITED(probe_status) && WEXITSTATUS(probe_status) == 77) {
                const char *skip = probe_out ? strstr(probe_out, "SKIP: ") : NULL;

                printf("%.*s\n", skip ? (int)strcspn(skip, "\n") : 40,
                       skip ? skip : "SKIP: seccomp filters unavailable here");
                return 77;
        }
        return cmocka_run_group_tests(tests, NULL, NULL);
}
