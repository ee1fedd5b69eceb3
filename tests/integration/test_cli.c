/*
 * test_cli — what operators touch: gpu-memd's options and config file
 * errors, its socket (mode, stale file, removal on stop), and gpu-memctl
 * against a running daemon and against none.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "harness.h"

typedef struct fixture {
        harness h;
        int own_fds;
        gmd_client *client;
} fixture;

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
        int fds, own_fds = f->own_fds;

        gmd_disconnect(f->client);
        harness_cleanup(&f->h);
        fds = harness_count_own_fds();
        free(f);
        if (fds != own_fds) {
                print_error("fd leak in the test process: %d fds, %d before\n",
                            fds, own_fds);
                return -1;
        }
        return 0;
}

static int exit_code(int status)
{
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- a small JSON checker: is the text one well-formed JSON value? ---------- */

static const char *json_value(const char *p, int depth);

static const char *json_ws(const char *p)
{
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
                p++;
        return p;
}

static const char *json_string(const char *p)
{
        if (*p++ != '"')
                return NULL;
        while (*p && *p != '"') {
                if ((unsigned char)*p < 0x20)
                        return NULL;
                if (*p == '\\') {
                        p++;
                        if (*p == 'u') {
                                for (int i = 1; i <= 4; i++)
                                        if (!strchr("0123456789abcdefABCDEF",
                                                    p[i]) || !p[i])
                                                return NULL;
                                p += 4;
                        } else if (!*p || !strchr("\"\\/bfnrt", *p)) {
                                return NULL;
                        }
                }
                p++;
        }
        return *p == '"' ? p + 1 : NULL;
}

static const char *json_number(const char *p)
{
        const char *start;

        if (*p == '-')
                p++;
        start = p;
        if (*p == '0')
                p++;
        else
                while (*p >= '0' && *p <= '9')
                        p++;
        if (p == start)
                return NULL;
        if (*p == '.') {
                start = ++p;
                while (*p >= '0' && *p <= '9')
                        p++;
                if (p == start)
                        return NULL;
        }
        if (*p == 'e' || *p == 'E') {
                p++;
                if (*p == '+' || *p == '-')
                        p++;
                start = p;
                while (*p >= '0' && *p <= '9')
                        p++;
                if (p == start)
                        return NULL;
        }
        return p;
}

static const char *json_container(const char *p, int depth, char close,
                                  int object)
{
        p = json_ws(p + 1);
        if (*p == close)
                return p + 1;
        for (;;) {
                if (object) {
                        p = json_string(p);
                        if (!p)
                                return NULL;
                        p = json_ws(p);
                        if (*p++ != ':')
                                return NULL;
                }
                p = json_value(p, depth + 1);
                if (!p)
                        return NULL;
                p = json_ws(p);
                if (*p == close)
                        return p + 1;
                if (*p++ != ',')
                        return NULL;
                p = json_ws(p);
        }
}

static const char *json_value(const char *p, int depth)
{
        if (depth > 32)
                return NULL;
        p = json_ws(p);
        switch (*p) {
        case '{':
                return json_container(p, depth, '}', 1);
        case '[':
                return json_container(p, depth, ']', 0);
        case '"':
                return json_string(p);
        case 't':
                return strncmp(p, "true", 4) ? NULL : p + 4;
        case 'f':
                return strncmp(p, "false", 5) ? NULL : p + 5;
        case 'n':
                return strncmp(p, "null", 4) ? NULL : p + 4;
        default:
                return json_number(p);
        }
}

static int json_valid(const char *text)
{
        const char *end = json_value(text, 0);

        return end && *json_ws(end) == '\0';
}

static void test_json_checker(void **state)
{
        assert_true(json_valid("{\"a\": [1, -2.5e3, \"x\\n\", true, null], \"b\": {}}\n"));
        assert_false(json_valid("{\"a\": [1, 2,]}"));
        assert_false(json_valid("{\"a\" 1}"));
        assert_false(json_valid("{\"a\": 1} x"));
        assert_false(json_valid("{\"a\": 01}"));
        assert_false(json_valid("{\"a\": \"unterminated}"));
}

/* ---- gpu-memctl ------------------------------------------------------------ */

static void test_ctl_status_json(void **state)
{
        fixture *f = *state;
        const char *argv[] = { GMD_CTL_PATH, "status", "--json", NULL };
        gmd_buffer *b = NULL;
        char *out = NULL, *err = NULL;
        int status;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "jsonholder");
        assert_int_equal(gmd_alloc(f->client, 6 * MiB, 0, 0, GMD_NO_WAIT, &b),
                         0);

        status = harness_run(&f->h, NULL, argv, &out, &err, 5000);
        if (exit_code(status) != 0)
                fail_msg("gpu-memctl status --json exited %d; stderr:\n%s",
                         exit_code(status), err);
        if (!json_valid(out))
                fail_msg("not valid JSON:\n%s", out);
        /* Text output ends its last line, so line-based tools see it. */
        assert_int_equal(out[strlen(out) - 1], '\n');
        assert_non_null(strstr(out, "\"pools\""));
        assert_non_null(strstr(out, "\"capacity\""));
        assert_non_null(strstr(out, "\"used\""));
        assert_non_null(strstr(out, "\"free\""));
        assert_non_null(strstr(out, "67108864"));     /* capacity */
        assert_non_null(strstr(out, "6291456"));      /* used */
        assert_non_null(strstr(out, "60817408"));     /* free */
        assert_non_null(strstr(out, "vram"));
        assert_non_null(strstr(out, "host"));
        assert_non_null(strstr(out, "sim"));
        free(out);
        free(err);
        assert_int_equal(gmd_free(f->client, b), 0);
        harness_stop(&f->h);
}

static void test_ctl_status_plain(void **state)
{
        fixture *f = *state;
        const char *argv[] = { GMD_CTL_PATH, "status", NULL };
        char *out = NULL, *err = NULL;
        int status;

        harness_start_small(&f->h, NULL);
        status = harness_run(&f->h, NULL, argv, &out, &err, 5000);
        if (exit_code(status) != 0)
                fail_msg("gpu-memctl status exited %d; stderr:\n%s",
                         exit_code(status), err);
        /* People read sizes, not byte counts. */
        assert_non_null(strstr(out, "64 MiB"));
        free(out);
        free(err);
        harness_stop(&f->h);
}

static void test_ctl_no_daemon(void **state)
{
        fixture *f = *state;
        const char *argv[] = { GMD_CTL_PATH, "status", NULL };
        char missing[160];
        char *out = NULL, *err = NULL;
        int status;

        harness_init(&f->h, "");
        snprintf(missing, sizeof(missing), "%s/nobody-here.sock", f->h.dir);
        status = harness_run(&f->h, missing, argv, &out, &err, 5000);
        assert_int_equal(exit_code(status), 1);
        if (!strstr(err, "is gpu-memd running?"))
                fail_msg("stderr does not ask \"is gpu-memd running?\":\n%s",
                         err);
        assert_non_null(strstr(err, missing));
        free(out);
        free(err);
}

/* ---- gpu-memd's options and config ------------------------------------------- */

/* Run gpu-memd to completion (it must not start). */
static int run_daemon(fixture *f, const char *const *args, char **ret_out,
                      char **ret_err)
{
        const char *argv[16] = { GMD_DAEMON_PATH };
        size_t n = 1;

        for (; *args; args++)
                argv[n++] = *args;
        argv[n] = NULL;
        return harness_run(&f->h, NULL, argv, ret_out, ret_err, 5000);
}

static void assert_one_line(const char *text)
{
        const char *nl = strchr(text, '\n');

        if (!nl || nl[1] != '\0')
                fail_msg("expected one line on stderr, got:\n%s", text);
}

static void test_daemon_help_and_version(void **state)
{
        fixture *f = *state;
        char *out = NULL, *err = NULL;

        harness_init(&f->h, "");
        assert_int_equal(exit_code(run_daemon(f, (const char *[]){ "--help",
                                                                 NULL },
                                              &out, &err)), 0);
        assert_non_null(strstr(out, "--socket"));
        assert_non_null(strstr(out, "--config"));
        free(out);
        free(err);
        assert_int_equal(exit_code(run_daemon(f, (const char *[]){ "--version",
                                                                 NULL },
                                              &out, &err)), 0);
        assert_non_null(strstr(out, GMD_VERSION_STRING));
        free(out);
        free(err);
}

static void test_daemon_bad_option(void **state)
{
        fixture *f = *state;
        char *out = NULL, *err = NULL;
        struct stat st;

        harness_init(&f->h, "");
        assert_int_equal(exit_code(run_daemon(f, (const char *[]){
                "--backend", "sim", "--socket", f->h.socket_path,
                "--frobnicate", NULL }, &out, &err)), 2);
        assert_non_null(strstr(err, "--frobnicate"));
        assert_one_line(err);
        assert_int_not_equal(lstat(f->h.socket_path, &st), 0);
        free(out);
        free(err);

        assert_int_equal(exit_code(run_daemon(f, (const char *[]){
                "--backend", "sim", "--socket", f->h.socket_path,
                "--vram-limit", "lots", NULL }, &out, &err)), 2);
        assert_non_null(strstr(err, "--vram-limit"));
        assert_non_null(strstr(err, "lots"));
        assert_one_line(err);
        free(out);
        free(err);

        assert_int_equal(exit_code(run_daemon(f, (const char *[]){
                "--backend", "sim", "--log-level", "chatty", NULL },
                &out, &err)), 2);
        assert_non_null(strstr(err, "--log-level"));
        free(out);
        free(err);
}

static void expect_bad_config(fixture *f, const char *config, int line,
                              const char *key)
{
        char *out = NULL, *err = NULL;
        char where[192];
        struct stat st;

        harness_cleanup(&f->h);
        harness_init(&f->h, config);
        assert_int_equal(exit_code(run_daemon(f, (const char *[]){
                "--backend", "sim", "--socket", f->h.socket_path,
                "--config", f->h.config_path, NULL }, &out, &err)), 2);
        snprintf(where, sizeof(where), "%s:%d", f->h.config_path, line);
        if (!strstr(err, where) || !strstr(err, key))
                fail_msg("stderr does not name %s and '%s':\n%s", where, key,
                         err);
        assert_one_line(err);
        assert_int_not_equal(lstat(f->h.socket_path, &st), 0);
        free(out);
        free(err);
}

static void test_daemon_bad_config(void **state)
{
        fixture *f = *state;

        expect_bad_config(f, "[daemon]\nbackend = sim\n\n[limits]\n"
                          "max_clients = many\n", 5, "max_clients");
        expect_bad_config(f, "[sim]\nvram = 64M\nvram_size = 1G\n", 3,
                          "vram_size");
        expect_bad_config(f, "[simulator]\ndevices = 1\n", 2, "simulator");
        expect_bad_config(f, "[sim]\nvram = huge\n", 2, "vram");
}

/* A missing config file is an error too, not silently the defaults. */
static void test_daemon_missing_config(void **state)
{
        fixture *f = *state;
        char *out = NULL, *err = NULL;
        char missing[160];
        int code;

        harness_init(&f->h, "");
        snprintf(missing, sizeof(missing), "%s/none.conf", f->h.dir);
        code = exit_code(run_daemon(f, (const char *[]){
                "--backend", "sim", "--socket", f->h.socket_path,
                "--config", missing, NULL }, &out, &err));
        assert_true(code == 1 || code == 2);
        assert_non_null(strstr(err, missing));
        free(out);
        free(err);
}

/* ---- the socket ------------------------------------------------------------- */

static mode_t socket_mode(const harness *h)
{
        struct stat st;

        assert_int_equal(lstat(h->socket_path, &st), 0);
        assert_true(S_ISSOCK(st.st_mode));
        return st.st_mode & 07777;
}

static void test_socket_mode(void **state)
{
        fixture *f = *state;
        mode_t old = umask(022);

        /* The default, whatever the umask. */
        harness_start_small(&f->h, NULL);
        assert_int_equal(socket_mode(&f->h), 0660);
        harness_stop(&f->h);
        harness_cleanup(&f->h);

        harness_start_small(&f->h, "[daemon]\nsocket_mode = 0600\n");
        assert_int_equal(socket_mode(&f->h), 0600);
        harness_stop(&f->h);
        umask(old);
}

static void test_stale_socket(void **state)
{
        fixture *f = *state;
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        int fd;

        harness_init(&f->h, HARNESS_SMALL_CONFIG);
        /* A socket file nobody listens on, as a crashed daemon leaves. */
        fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        assert_true(fd >= 0);
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", f->h.socket_path);
        assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
        close(fd);
        assert_int_equal(harness_connect_raw(&f->h), -1);

        harness_start(&f->h, NULL);
        f->client = harness_client(&f->h, "after-stale");
        assert_int_equal(harness_vram_used(f->client, 0), 0);
        gmd_disconnect(f->client);
        f->client = NULL;
        harness_stop(&f->h);
}

/* A live daemon's socket is not stale: a second daemon on the same path
 * must refuse to start and leave the first one reachable. */
static void test_second_daemon_refused(void **state)
{
        fixture *f = *state;
        char *out = NULL, *err = NULL;
        int code;

        harness_start_small(&f->h, NULL);
        code = exit_code(run_daemon(f, (const char *[]){
                "--backend", "sim", "--socket", f->h.socket_path,
                "--config", f->h.config_path, NULL }, &out, &err));
        if (code == 0 || code >= 128)
                fail_msg("second gpu-memd on a live socket: exit %d, stderr:\n%s",
                         code, err);
        assert_non_null(strstr(err, f->h.socket_path));
        free(out);
        free(err);
        f->client = harness_client(&f->h, "first-still-there");
        assert_int_equal(harness_vram_used(f->client, 0), 0);
        harness_stop(&f->h);
}

static void test_sigint_stops_cleanly(void **state)
{
        fixture *f = *state;
        struct stat st;
        int status = 0;
        uint64_t deadline;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "sigint");
        assert_int_equal(kill(f->h.pid, SIGINT), 0);
        deadline = harness_now_ms() + 5000;
        while (waitpid(f->h.pid, &status, WNOHANG) != f->h.pid) {
                if (harness_now_ms() > deadline)
                        fail_msg("gpu-memd did not stop on SIGINT");
                harness_sleep_ms(5);
        }
        f->h.pid = 0;
        assert_int_equal(exit_code(status), 0);
        assert_int_not_equal(lstat(f->h.socket_path, &st), 0);
}

/* Stopping with clients connected and buffers held still exits 0. */
static void test_stop_with_clients(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "holder");
        assert_int_equal(gmd_alloc(f->client, 8 * MiB, 0, 0, GMD_NO_WAIT, &b),
                         0);
        memset(gmd_buffer_ptr(b), 1, 8 * MiB);
        harness_stop(&f->h);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_json_checker),
                T(test_ctl_status_json),
                T(test_ctl_status_plain),
                T(test_ctl_no_daemon),
                T(test_daemon_help_and_version),
                T(test_daemon_bad_option),
                T(test_daemon_bad_config),
                T(test_daemon_missing_config),
                T(test_socket_mode),
                T(test_stale_socket),
                T(test_second_daemon_refused),
                T(test_sigint_stops_cleanly),
                T(test_stop_with_clients),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
