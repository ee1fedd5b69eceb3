/*
 * test_install — `make install`'s tree: cmake --install into a DESTDIR
 * puts binaries, library, header, pkg-config file, the Python package,
 * systemd units, the sysusers and tmpfiles entries and the config where an
 * operator expects them, for the prefix asked for; the installed units pass systemd-analyze
 * verify, and the sysusers and tmpfiles entries, applied to a scratch root,
 * create the user and the runtime directory.
 *
 * It installs the build tree the suite runs from (GMD_BUILD_DIR, compiled
 * in), so it needs that tree fully built, as `make test` does.
 *
 * The Makefile's front door too: `make run` on that
 * built tree prints one line of its own before the daemon's (the build's
 * lines go to a log), and `make install` runs ldconfig, without which
 * programs did not find libgpumem.so.0 under /usr/local.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "spawn.h"

#define SYSTEMD_ANALYZE "/usr/bin/systemd-analyze"
#define SYSTEMD_SYSUSERS "/usr/bin/systemd-sysusers"
#define SYSTEMD_TMPFILES "/usr/bin/systemd-tmpfiles"

typedef struct fixture {
        char tmp[64];            /* the DESTDIR, mkdtemp'd */
        int own_fds;
} fixture;

/* fail_msg without cmocka's 1 KiB cut, so whole outputs show; a macro so
 * the failure names the caller's line. */
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

static void skip_because(const char *why)
{
        print_message("[  SKIPPED ] %s\n", why);
        skip();
}

static bool path_exists(const char *path)
{
        struct stat st;

        return lstat(path, &st) == 0;
}

static int remove_one(const char *path, const struct stat *st, int type,
                      struct FTW *ftw)
{
        (void)st;
        (void)type;
        (void)ftw;
        return remove(path) < 0 ? -1 : 0;
}

/* rm -rf of one of our own mkdtemp'd directories. */
static void remove_tree(const char *path)
{
        if (!path[0] || getenv("GMD_TEST_KEEP"))
                return;
        if (nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS) < 0)
                print_error("could not remove all of %s: %s\n", path,
                            strerror(errno));
}

static FILE *tree_out;
static size_t tree_skip;

static int list_one(const char *path, const struct stat *st, int type,
                    struct FTW *ftw)
{
        (void)st;
        (void)ftw;
        if (type == FTW_F || type == FTW_SL)
                fprintf(tree_out, "  %s\n", path + tree_skip);
        return 0;
}

/* The files under `root`, one per line (for failure messages); free(). */
static char *list_tree(const char *root)
{
        char *text = NULL;
        size_t size = 0;

        tree_out = open_memstream(&text, &size);
        assert_non_null(tree_out);
        tree_skip = strlen(root);
        nftw(root, list_one, 16, FTW_PHYS);
        fclose(tree_out);
        tree_out = NULL;
        return text;
}

static void install_into(fixture *f, const char *prefix)
{
        const char *argv[] = { GMD_CMAKE_COMMAND, "--install", GMD_BUILD_DIR,
                               prefix ? "--prefix" : NULL, prefix, NULL };
        char destdir[100], *out = NULL, *err = NULL;
        const char *env[] = { destdir, NULL };
        spawn_opts o = { .env = env, .listen_fd = -1 };
        int status;

        snprintf(f->tmp, sizeof(f->tmp), "/tmp/gmd-install-XXXXXX");
        if (!mkdtemp(f->tmp))
                fail_long("mkdtemp: %s", strerror(errno));
        snprintf(destdir, sizeof(destdir), "DESTDIR=%s", f->tmp);
        status = spawn_run(argv, &o, &out, &err, 15000);
        if (spawn_exit_code(status) != 0)
                fail_long("cmake --install: exit %d\n%s%s", spawn_exit_code(status), out, err);
        free(out);
        free(err);
}

/* Appends "missing PATTERN" to `problems` unless something matches. */
static char *expect_file(FILE *problems, const char *root, const char *rel,
                         bool executable)
{
        char pattern[512];
        glob_t g;
        char *found = NULL;

        memset(&g, 0, sizeof(g));
        snprintf(pattern, sizeof(pattern), "%s%s", root, rel);
        if (glob(pattern, 0, NULL, &g) != 0 || g.gl_pathc == 0) {
                fprintf(problems, "  missing %s\n", rel);
        } else {
                found = strdup(g.gl_pathv[0]);
                if (executable && access(found, X_OK) != 0)
                        fprintf(problems, "  not executable: %s\n", rel);
        }
        globfree(&g);
        return found;
}

/* cmake --install --prefix /opt/x with DESTDIR: everything under the
 * prefix, and the units and pkg-config file name the prefix's paths. */
static void test_install_prefix(void **state)
{
        fixture *f = *state;
        char root[128], *text, *path, *list = NULL;
        size_t list_size = 0;
        FILE *problems = open_memstream(&list, &list_size);

        assert_non_null(problems);
        install_into(f, "/opt/x");
        snprintf(root, sizeof(root), "%s/opt/x/", f->tmp);
        free(expect_file(problems, root, "bin/gpu-memd", true));
        free(expect_file(problems, root, "bin/gpu-memctl", true));
        free(expect_file(problems, root, "lib*/libgpumem.so*", false));
        free(expect_file(problems, root, "include/gpumem.h", false));
        free(expect_file(problems, root,
                         "lib/python3*/dist-packages/gpumem/__init__.py", false));
        free(expect_file(problems, root,
                         "lib/python3*/dist-packages/gpumem/_install.py", false));
        free(expect_file(problems, root, "lib/systemd/system/gpu-memd.socket", false));
        free(expect_file(problems, root, "lib/sysusers.d/gpu-memd.conf", false));
        free(expect_file(problems, root, "lib/tmpfiles.d/gpu-memd.conf", false));

        path = expect_file(problems, root, "lib*/pkgconfig/gpumem.pc", false);
        text = path ? harness_read_file(path) : NULL;
        if (text && !strstr(text, "prefix=/opt/x\n"))
                fprintf(problems, "  gpumem.pc does not say prefix=/opt/x:\n%s", text);
        free(text);
        free(path);

        path = expect_file(problems, root, "lib/systemd/system/gpu-memd.service",
                           false);
        text = path ? harness_read_file(path) : NULL;
        if (text) {
                const char *exec = strstr(text, "\nExecStart=");
                const char *config = exec ? strstr(exec, "--config ") : NULL;
                char config_path[256];

                if (!exec || strncmp(exec + 11, "/opt/x/bin/gpu-memd ", 20) != 0)
                        fprintf(problems, "  ExecStart does not run "
                                "/opt/x/bin/gpu-memd: %.*s\n",
                                exec ? (int)strcspn(exec + 1, "\n") : 0,
                                exec ? exec + 1 : "");
                /* Where the config goes is GNUInstallDirs' choice (/etc/opt/x
                 * or /opt/x/etc); that the unit names it is ours. */
                if (config) {
                        snprintf(config_path, sizeof(config_path), "%s%.*s", f->tmp,
                                 (int)strcspn(config + 9, " \n"), config + 9);
                        if (!path_exists(config_path))
                                fprintf(problems, "  ExecStart's --config %.*s "
                                        "is not installed\n",
                                        (int)strcspn(config + 9, " \n"), config + 9);
                } else {
                        fprintf(problems, "  ExecStart has no --config\n");
                }
        } else {
                free(expect_file(problems, root, "etc/gpu-memd/gpu-memd.conf", false));
        }
        free(text);
        free(path);
        fclose(problems);
        if (list_size)
                fail_long("cmake --install --prefix /opt/x (DESTDIR):\n%s"
                          "what was installed:\n%s", list, list_tree(f->tmp));
        free(list);
}

/*
 * The service's hardening: systemd-analyze security
 * rates it at most 2.5 (it was 5.4 MEDIUM); the address families allow the
 * loopback metrics listen the README documents (AF_INET, else the daemon
 * cannot serve it); the open-file limit is raised for one fd per buffer.
 */
static void check_unit_security(const char *svc)
{
        const char *argv[] = { SYSTEMD_ANALYZE, "security", "--offline=yes", svc,
                               NULL };
        spawn_opts o = { .listen_fd = -1 };
        char *out = NULL, *err = NULL, *text;
        const char *level;
        double exposure;
        int status;

        text = harness_read_file(svc);
        assert_non_null(text);
        if (!strstr(text, "\nRestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n") ||
            !strstr(text, "\nLimitNOFILE=") || !strstr(text, "\nCapabilityBoundingSet=\n") ||
            !strstr(text, "\nSystemCallFilter=@system-service\n"))
                fail_long("the unit lacks the address families of the metrics "
                          "listen, LimitNOFILE, an empty CapabilityBoundingSet or "
                          "the @system-service filter:\n%s", text);
        free(text);
        status = spawn_run(argv, &o, &out, &err, 30000);
        level = out ? strstr(out, "Overall exposure level for gpu-memd.service: ") : NULL;
        if (spawn_exit_code(status) != 0 || !level) {
                /* Older systemd without --offline: nothing to rate. */
                print_message("systemd-analyze security --offline=yes did not rate "
                              "the unit (exit %d): not checked\n",
                              spawn_exit_code(status));
                free(out);
                free(err);
                return;
        }
        exposure = strtod(level + strlen("Overall exposure level for gpu-memd.service: "),
                          NULL);
        if (exposure > 2.5)
                fail_long("systemd-analyze security rates gpu-memd.service %.1f, "
                          "more than 2.5:\n%s", exposure, out);
        print_message("systemd-analyze security: %.1f\n", exposure);
        free(out);
        free(err);
}

/* The units as installed (with the configured prefix) verify, and the
 * sysusers and tmpfiles entries create the user and the runtime dir. */
static void test_install_units_verify(void **state)
{
        fixture *f = *state;
        char unit_dir[256], verify_dir[200], path[300], bin[300], *text, *exec;
        char *out = NULL, *err = NULL, *svc_text;
        spawn_opts o = { .listen_fd = -1 };
        struct stat st;
        glob_t g;
        int status;

        if (access(SYSTEMD_ANALYZE, X_OK) != 0)
                skip_because(SYSTEMD_ANALYZE " is missing (Debian's systemd package)");
        install_into(f, NULL);
        memset(&g, 0, sizeof(g));
        snprintf(path, sizeof(path), "%s/*/lib/systemd/system/gpu-memd.service", f->tmp);
        if (glob(path, 0, NULL, &g) != 0 || g.gl_pathc == 0) {
                snprintf(path, sizeof(path), "%s/*/*/lib/systemd/system/gpu-memd.service",
                         f->tmp);
                if (glob(path, GLOB_APPEND, NULL, &g) != 0 || g.gl_pathc == 0)
                        fail_long("no gpu-memd.service installed under %s", f->tmp);
        }
        snprintf(unit_dir, sizeof(unit_dir), "%.*s",
                 (int)(strrchr(g.gl_pathv[0], '/') - g.gl_pathv[0]), g.gl_pathv[0]);
        globfree(&g);

        /* The unit names the installed binary; point it at the DESTDIR copy
         * so verify checks everything but that path. */
        snprintf(path, sizeof(path), "%s/gpu-memd.service", unit_dir);
        text = harness_read_file(path);
        assert_non_null(text);
        exec = strstr(text, "\nExecStart=");
        assert_non_null(exec);
        exec += 11;
        snprintf(bin, sizeof(bin), "%s%.*s", f->tmp, (int)strcspn(exec, " \n"), exec);
        if (access(bin, X_OK) != 0)
                fail_long("ExecStart's binary %.*s was not installed (looked for %s)",
                          (int)strcspn(exec, " \n"), exec, bin);
        if (asprintf(&svc_text, "%.*s%s%s", (int)(exec - text), text, bin,
                     exec + strcspn(exec, " \n")) < 0)
                fail_long("asprintf");
        snprintf(verify_dir, sizeof(verify_dir), "%s/verify", f->tmp);
        assert_int_equal(mkdir(verify_dir, 0755), 0);
        snprintf(path, sizeof(path), "%s/gpu-memd.service", verify_dir);
        harness_write_file(path, svc_text);
        free(svc_text);
        free(text);
        snprintf(path, sizeof(path), "%s/gpu-memd.socket", unit_dir);
        text = harness_read_file(path);
        assert_non_null(text);
        assert_non_null(strstr(text, "ListenSequentialPacket="));
        snprintf(path, sizeof(path), "%s/gpu-memd.socket", verify_dir);
        harness_write_file(path, text);
        free(text);

        char svc[300], sock[300];
        snprintf(svc, sizeof(svc), "%s/gpu-memd.service", verify_dir);
        snprintf(sock, sizeof(sock), "%s/gpu-memd.socket", verify_dir);
        const char *verify[] = { SYSTEMD_ANALYZE, "verify", svc, sock, NULL };

        status = spawn_run(verify, &o, &out, &err, 15000);
        if (spawn_exit_code(status) != 0 || strstr(err, "gpu-memd"))
                fail_long("systemd-analyze verify: exit %d\n%s%s", spawn_exit_code(status),
                          out, err);
        free(out);
        free(err);
        check_unit_security(svc);

        if (access(SYSTEMD_SYSUSERS, X_OK) != 0 || access(SYSTEMD_TMPFILES, X_OK) != 0) {
                print_message("systemd-sysusers/tmpfiles missing: entries not run\n");
                return;
        }
        /* sysusers then tmpfiles into a scratch root: user, group, and
         * /run/gpu-memd owned by them. */
        char sysroot[200], etc[220], sysusers[300], tmpfiles[300], root_arg[220];

        snprintf(sysroot, sizeof(sysroot), "%s/sysroot", f->tmp);
        snprintf(etc, sizeof(etc), "%s/etc", sysroot);
        assert_int_equal(mkdir(sysroot, 0755), 0);
        assert_int_equal(mkdir(etc, 0755), 0);
        snprintf(root_arg, sizeof(root_arg), "--root=%s", sysroot);
        snprintf(sysusers, sizeof(sysusers), "%.*s/sysusers.d/gpu-memd.conf",
                 (int)(strstr(unit_dir, "/systemd/system") - unit_dir), unit_dir);
        snprintf(tmpfiles, sizeof(tmpfiles), "%.*s/tmpfiles.d/gpu-memd.conf",
                 (int)(strstr(unit_dir, "/systemd/system") - unit_dir), unit_dir);
        const char *su[] = { SYSTEMD_SYSUSERS, root_arg, sysusers, NULL };
        const char *tf[] = { SYSTEMD_TMPFILES, root_arg, "--create", tmpfiles, NULL };

        status = spawn_run(su, &o, &out, &err, 15000);
        if (spawn_exit_code(status) != 0)
                fail_long("systemd-sysusers %s: exit %d\n%s%s", sysusers,
                          spawn_exit_code(status), out, err);
        free(out);
        free(err);
        snprintf(path, sizeof(path), "%s/passwd", etc);
        text = harness_read_file(path);
        assert_non_null(text);
        if (strncmp(text, "gpu-memd:", 9) != 0 && !strstr(text, "\ngpu-memd:"))
                fail_long("systemd-sysusers made no gpu-memd user:\n%s", text);
        free(text);
        status = spawn_run(tf, &o, &out, &err, 15000);
        if (spawn_exit_code(status) != 0)
                fail_long("systemd-tmpfiles %s: exit %d\n%s%s", tmpfiles,
                          spawn_exit_code(status), out, err);
        free(out);
        free(err);
        snprintf(path, sizeof(path), "%s/run/gpu-memd", sysroot);
        assert_int_equal(stat(path, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_not_equal(st.st_uid, 0);
}

/* ---- the Makefile ------------------------------------------------------------ */

/* The pid of whoever serves the Unix socket `path`, or -1. */
static pid_t socket_server_pid(const char *path)
{
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        struct ucred cred;
        socklen_t len = sizeof(cred);
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        pid_t pid = -1;

        if (strlen(path) >= sizeof(a.sun_path)) {
                close(fd);
                return -1;
        }
        memcpy(a.sun_path, path, strlen(path) + 1);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
            getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
                pid = cred.pid;
        if (fd >= 0)
                close(fd);
        return pid;
}

static void test_make_run_quiet(void **state)
{
        fixture *f = *state;
        char build[300], sock[200], text[8192], *ready;
        const char *argv[] = { "/usr/bin/make", "-s", "-C", GMD_SOURCE_DIR, "run",
                               build, sock, NULL };
        spawn_opts o = { .listen_fd = -1 };
        size_t len = 0;
        uint64_t end;
        int pipefd[2], status, lines = 0;
        pid_t make, daemon;

        if (access(argv[0], X_OK) != 0)
                skip_because("make is missing");
        snprintf(f->tmp, sizeof(f->tmp), "/tmp/gmd-run-XXXXXX");
        if (!mkdtemp(f->tmp))
                fail_long("mkdtemp: %s", strerror(errno));
        snprintf(build, sizeof(build), "BUILD=%s", GMD_BUILD_DIR);
        snprintf(sock, sizeof(sock), "RUN_SOCKET=%s/gpu-memd.sock", f->tmp);
        assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
        make = spawn_start(argv, &o, pipefd[1], pipefd[1]);
        close(pipefd[1]);
        end = harness_now_ms() + 60000;
        text[0] = '\0';
        while (!strstr(text, " ready: ") && harness_now_ms() < end &&
               len + 1 < sizeof(text)) {
                struct pollfd p = { .fd = pipefd[0], .events = POLLIN };
                ssize_t n;

                if (poll(&p, 1, 1000) <= 0)
                        continue;
                n = read(pipefd[0], text + len, sizeof(text) - len - 1);
                if (n <= 0)
                        break;
                len += (size_t)n;
                text[len] = '\0';
        }
        close(pipefd[0]);
        ready = strstr(text, " ready: ");
        daemon = socket_server_pid(sock + strlen("RUN_SOCKET="));
        if (daemon > 0)
                kill(daemon, SIGTERM);
        else
                kill(make, SIGTERM);
        waitpid(make, &status, 0);
        if (!ready)
                fail_long("make run: no ready line within 60 s:\n%s", text);
        /* Lines before the daemon's first (which starts with a time). */
        for (const char *l = text; l && *l && !(l[0] >= '0' && l[0] <= '9' && l[2] == ':');
             l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
                lines++;
        if (lines > 1 || !strstr(text, "make run: building in "))
                fail_long("make run printed %d lines before the daemon's:\n%s", lines,
                          text);
}

/* make install runs ldconfig (as root, installing for real). */
static void test_make_install_ldconfig(void **state)
{
        const char *argv[] = { "/usr/bin/make", "-n", "-s", "-C", GMD_SOURCE_DIR,
                               "install", "BUILD=" GMD_BUILD_DIR, NULL };
        spawn_opts o = { .listen_fd = -1 };
        char *out = NULL, *err = NULL;
        int status;

        (void)state;
        if (access(argv[0], X_OK) != 0)
                skip_because("make is missing");
        status = spawn_run(argv, &o, &out, &err, 60000);
        if (spawn_exit_code(status) != 0 || !strstr(out, "ldconfig"))
                fail_long("make -n install: exit %d, no ldconfig:\n%s%s",
                          spawn_exit_code(status), out, err);
        free(out);
        free(err);
}

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));

        if (!f)
                return -1;
        f->own_fds = harness_count_own_fds();
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;
        int own_fds = f->own_fds;

        if (f->tmp[0])
                remove_tree(f->tmp);
        free(f);
        return harness_check_own_fds(own_fds);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_install_prefix, setup, teardown),
                cmocka_unit_test_setup_teardown(test_install_units_verify, setup, teardown),
                cmocka_unit_test_setup_teardown(test_make_run_quiet, setup, teardown),
                cmocka_unit_test_setup_teardown(test_make_install_ldconfig, setup,
                                                teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
