/*
 * test_config — daemon/base/config.c: embedded defaults, the INI file, and single
 * keys set the way command-line options set them.
 *
 * An operator meets this code when a line is wrong, so most cases here are
 * bad lines, and each checks that the one message names the file, the line
 * number and the key — enough to fix the line without reading the source.
 * That holds for checks made after the file is read too (across keys,
 * groups): they name where the value came from (config_origin).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "gpumem.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

typedef struct fixture {
        char dir[64];
        char path[128];
        FILE *err;          /* messages go here */
        char *err_text;
        size_t err_size;
} fixture;

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));

        if (!f)
                return -1;
        snprintf(f->dir, sizeof(f->dir), "/tmp/gmd-test-config-XXXXXX");
        if (!mkdtemp(f->dir))
                return -1;
        snprintf(f->path, sizeof(f->path), "%s/gpu-memd.conf", f->dir);
        f->err = open_memstream(&f->err_text, &f->err_size);
        if (!f->err)
                return -1;
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;

        fclose(f->err);
        free(f->err_text);
        unlink(f->path);
        rmdir(f->dir);
        free(f);
        return 0;
}

static void write_file(fixture *f, const char *text)
{
        FILE *file = fopen(f->path, "w");

        assert_non_null(file);
        assert_int_equal(fputs(text, file) >= 0, 1);
        assert_int_equal(fclose(file), 0);
}

/* What was written to the error stream so far. */
static const char *messages(fixture *f)
{
        fflush(f->err);
        return f->err_text ? f->err_text : "";
}

/* Forget the messages so far: each expectation counts its own. */
static void messages_reset(fixture *f)
{
        fclose(f->err);
        free(f->err_text);
        f->err_text = NULL;
        f->err_size = 0;
        f->err = open_memstream(&f->err_text, &f->err_size);
        assert_non_null(f->err);
}

static void assert_mentions(fixture *f, const char *part)
{
        if (!strstr(messages(f), part))
                fail_msg("message \"%s\" does not mention \"%s\"",
                         messages(f), part);
}

static int count_lines(const char *text)
{
        int n = 0;

        for (; *text; text++)
                if (*text == '\n')
                        n++;
        return n;
}

/* Field by field: padding bytes of two structs need not match. */
static void assert_config_equal(const gmd_config *a, const gmd_config *b)
{
        assert_string_equal(a->socket_path, b->socket_path);
        assert_int_equal(a->socket_mode, b->socket_mode);
        assert_string_equal(a->backend, b->backend);
        assert_int_equal(a->log_level, b->log_level);
        assert_true(a->vram_limit.percent == b->vram_limit.percent);
        assert_int_equal(a->vram_limit.bytes, b->vram_limit.bytes);
        assert_int_equal(a->vram_reserve, b->vram_reserve);
        assert_int_equal(a->host_limit.bytes, b->host_limit.bytes);
        assert_true(a->host_limit.percent == b->host_limit.percent);
        assert_int_equal(a->max_clients, b->max_clients);
        assert_int_equal(a->max_buffers_per_client, b->max_buffers_per_client);
        assert_int_equal(a->max_waiting_per_client, b->max_waiting_per_client);
        assert_int_equal(a->max_send_queue, b->max_send_queue);
        assert_int_equal(a->max_send_queue_bytes, b->max_send_queue_bytes);
        assert_int_equal(a->max_user_send_queue_bytes, b->max_user_send_queue_bytes);
        assert_int_equal(a->max_clients_per_user, b->max_clients_per_user);
        assert_int_equal(a->admin_clients, b->admin_clients);
        assert_int_equal(a->hello_timeout_ms, b->hello_timeout_ms);
        assert_int_equal(a->max_buffers_per_user, b->max_buffers_per_user);
        assert_string_equal(a->metrics_clients, b->metrics_clients);
        assert_int_equal(a->sim_devices, b->sim_devices);
        assert_int_equal(a->sim_vram, b->sim_vram);
        assert_int_equal(a->sim_granularity, b->sim_granularity);
        assert_int_equal(a->swap_keep_vram, b->swap_keep_vram);
}

/* ---- defaults ------------------------------------------------------------- */

static void test_defaults(void **state)
{
        gmd_config c;

        memset(&c, 0xa5, sizeof(c));
        config_init_defaults(&c);
        assert_string_equal(c.socket_path, GMD_DEFAULT_SOCKET);
        assert_int_equal(c.socket_mode, 0660);
        assert_string_equal(c.backend, "auto");
        /* vram_limit automatic: neither bytes nor a percentage. */
        assert_int_equal(c.vram_limit.bytes, 0);
        assert_true(c.vram_limit.percent == 0);
        assert_int_equal(c.sim_devices, 1);
        assert_int_equal(c.sim_vram, GiB);
        assert_int_equal(c.sim_granularity, 2 * MiB);
        assert_true(c.max_clients > 0);
        assert_true(c.max_buffers_per_client > 0);
        assert_true(c.max_waiting_per_client > 0);
        assert_true(c.max_send_queue > 0);
        /* The per-user bounds are on by default. */
        assert_int_equal(c.max_send_queue_bytes, 4 * MiB);
        assert_int_equal(c.max_user_send_queue_bytes, 16 * MiB);
        assert_int_equal(c.max_clients_per_user, 64);
        assert_int_equal(c.admin_clients, 4);
        assert_int_equal(c.hello_timeout_ms, 5000);
        assert_int_equal(c.max_buffers_per_user, 0);   /* half the fd limit */
        assert_true(c.admin_clients < c.max_clients);
        assert_true(c.swap_keep_vram);
        assert_true(c.log_level >= GMD_LOG_ERR && c.log_level <= GMD_LOG_DEBUG);
        assert_non_null(config_log_level_name(c.log_level));
}

static void test_log_level_names(void **state)
{
        assert_string_equal(config_log_level_name(GMD_LOG_ERR), "error");
        assert_string_equal(config_log_level_name(GMD_LOG_WARNING), "warning");
        assert_string_equal(config_log_level_name(GMD_LOG_NOTICE), "notice");
        assert_string_equal(config_log_level_name(GMD_LOG_INFO), "info");
        assert_string_equal(config_log_level_name(GMD_LOG_DEBUG), "debug");
}

/* ---- a good file ---------------------------------------------------------- */

static void test_load_good_file(void **state)
{
        fixture *f = *state;
        gmd_config c;

        write_file(f,
                   "; gpu-memd test configuration\n"
                   "# both comment styles\n"
                   "[daemon]\n"
                   "socket = /tmp/gmd-test.sock\n"
                   "socket_mode = 0600\n"
                   "backend = sim\n"
                   "log_level = debug\n"
                   "\n"
                   "[pools]\n"
                   "vram_limit = 80%\n"
                   "vram_reserve = 512M\n"
                   "host_limit = 2G\n"
                   "\n"
                   "[limits]\n"
                   "max_clients = 17\n"
                   "max_buffers_per_client = 1000\n"
                   "max_waiting_per_client = 3\n"
                   "max_send_queue = 9\n"
                   "max_send_queue_bytes = 1M\n"
                   "max_user_send_queue_bytes = 3M\n"
                   "max_clients_per_user = 5\n"
                   "admin_clients = 2\n"
                   "hello_timeout_ms = 750\n"
                   "max_buffers_per_user = 77\n"
                   "\n"
                   "[swap]\n"
                   "keep_vram = no\n"
                   "\n"
                   "[sim]\n"
                   "devices = 2\n"
                   "vram = 64M\n"
                   "granularity = 4M\n");
        config_init_defaults(&c);
        assert_int_equal(config_load_file(&c, f->path, f->err), 0);
        assert_string_equal(messages(f), "");

        assert_string_equal(c.socket_path, "/tmp/gmd-test.sock");
        assert_int_equal(c.socket_mode, 0600);
        assert_string_equal(c.backend, "sim");
        assert_int_equal(c.log_level, GMD_LOG_DEBUG);
        assert_true(c.vram_limit.percent == 80.0);
        assert_int_equal(c.vram_reserve, 512 * MiB);
        assert_int_equal(c.host_limit.bytes, 2 * GiB);
        assert_true(c.host_limit.percent == 0);
        assert_int_equal(c.max_clients, 17);
        assert_int_equal(c.max_buffers_per_client, 1000);
        assert_int_equal(c.max_waiting_per_client, 3);
        assert_int_equal(c.max_send_queue, 9);
        assert_int_equal(c.max_send_queue_bytes, MiB);
        assert_int_equal(c.max_user_send_queue_bytes, 3 * MiB);
        assert_int_equal(c.max_clients_per_user, 5);
        assert_int_equal(c.admin_clients, 2);
        assert_int_equal(c.hello_timeout_ms, 750);
        assert_int_equal(c.max_buffers_per_user, 77);
        assert_false(c.swap_keep_vram);
        assert_int_equal(c.sim_devices, 2);
        assert_int_equal(c.sim_vram, 64 * MiB);
        assert_int_equal(c.sim_granularity, 4 * MiB);
}

/* Keys not in the file keep the values they had before. */
static void test_load_partial_file(void **state)
{
        fixture *f = *state;
        gmd_config c, defaults;

        write_file(f, "[sim]\nvram = 128M\n");
        config_init_defaults(&defaults);
        config_init_defaults(&c);
        c.max_clients = 5;
        assert_int_equal(config_load_file(&c, f->path, f->err), 0);
        assert_int_equal(c.sim_vram, 128 * MiB);
        assert_int_equal(c.max_clients, 5);
        assert_int_equal(c.sim_granularity, defaults.sim_granularity);
        assert_string_equal(c.socket_path, defaults.socket_path);
}

static void test_load_empty_file(void **state)
{
        fixture *f = *state;
        gmd_config c, defaults;

        write_file(f, "");
        config_init_defaults(&c);
        config_init_defaults(&defaults);
        assert_int_equal(config_load_file(&c, f->path, f->err), 0);
        assert_config_equal(&c, &defaults);
}

static void test_log_levels_in_file(void **state)
{
        fixture *f = *state;
        static const struct {
                const char *name;
                gmd_log_level level;
        } levels[] = {
                { "error", GMD_LOG_ERR },    { "warning", GMD_LOG_WARNING },
                { "notice", GMD_LOG_NOTICE }, { "info", GMD_LOG_INFO },
                { "debug", GMD_LOG_DEBUG },
        };

        for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
                gmd_config c;
                char text[64];

                snprintf(text, sizeof(text), "[daemon]\nlog_level = %s\n",
                         levels[i].name);
                write_file(f, text);
                config_init_defaults(&c);
                assert_int_equal(config_load_file(&c, f->path, f->err), 0);
                assert_int_equal(c.log_level, levels[i].level);
        }
}

/* ---- bad files: -EINVAL and one message naming file:line and key ---------- */

static void expect_bad_line(fixture *f, const char *text, int line,
                            const char *key)
{
        gmd_config c;
        char where[192];
        int r;

        messages_reset(f);
        write_file(f, text);
        config_init_defaults(&c);
        r = config_load_file(&c, f->path, f->err);
        if (r != -EINVAL)
                fail_msg("config_load_file = %d for:\n%s", r, text);
        snprintf(where, sizeof(where), "%s:%d", f->path, line);
        assert_mentions(f, where);
        assert_mentions(f, key);
        if (count_lines(messages(f)) != 1)
                fail_msg("expected one message line, got:\n%s", messages(f));
}

static void test_unknown_key(void **state)
{
        expect_bad_line(*state,
                        "[daemon]\nsocket = /tmp/x.sock\nsokcet_mode = 0660\n",
                        3, "sokcet_mode");
}

static void test_key_in_wrong_section(void **state)
{
        expect_bad_line(*state, "[pools]\n\nmax_clients = 4\n", 3,
                        "max_clients");
}

static void test_unknown_section(void **state)
{
        expect_bad_line(*state, "[daemon]\nbackend = sim\n[pool]\nvram_limit = 1G\n",
                        4, "pool");
}

static void test_key_before_any_section(void **state)
{
        expect_bad_line(*state, "backend = sim\n", 1, "backend");
}

static void test_bad_size(void **state)
{
        expect_bad_line(*state, "[sim]\nvram = lots\n", 2, "vram");
}

static void test_bad_size_overflow(void **state)
{
        expect_bad_line(*state, "[pools]\nvram_reserve = 16E\n", 2,
                        "vram_reserve");
}

/* A pool size of 0, or below 1M without a unit, was taken silently: the
 * whole device (0 meant auto) or a pool nothing fits in (512 bytes). */
static void test_pool_size_needs_unit(void **state)
{
        expect_bad_line(*state, "[pools]\nvram_limit = 512\n", 2, "512M");
}

static void test_pool_size_zero(void **state)
{
        expect_bad_line(*state, "[pools]\nvram_limit = 0\n", 2, "auto");
}

static void test_host_pool_size_zero(void **state)
{
        expect_bad_line(*state, "[pools]\nhost_limit = 0\n", 2, "host_limit");
}

static void test_bad_percent(void **state)
{
        expect_bad_line(*state, "[pools]\n; comment\nvram_limit = 150%\n", 3,
                        "vram_limit");
}

static void test_percent_where_bytes_needed(void **state)
{
        /* vram_reserve is bytes only. */
        expect_bad_line(*state, "[pools]\nvram_reserve = 10%\n", 2,
                        "vram_reserve");
}

/* yes/no in their usual spellings; anything else names the key. */
static void test_bool_values(void **state)
{
        static const char *const yes[] = { "yes", "YES", "true", "on", "1" };
        static const char *const no[] = { "no", "False", "off", "0" };
        fixture *f = *state;
        char line[64];
        gmd_config c;

        for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
                snprintf(line, sizeof(line), "[swap]\nkeep_vram = %s\n", yes[i]);
                write_file(f, line);
                config_init_defaults(&c);
                c.swap_keep_vram = false;
                assert_int_equal(config_load_file(&c, f->path, f->err), 0);
                assert_true(c.swap_keep_vram);
        }
        for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
                snprintf(line, sizeof(line), "[swap]\nkeep_vram = %s\n", no[i]);
                write_file(f, line);
                config_init_defaults(&c);
                assert_int_equal(config_load_file(&c, f->path, f->err), 0);
                assert_false(c.swap_keep_vram);
        }
}

static void test_bad_bool(void **state)
{
        expect_bad_line(*state, "[swap]\nkeep_vram = maybe\n", 2, "keep_vram");
}

static void test_bad_number(void **state)
{
        expect_bad_line(*state, "[limits]\nmax_clients = ten\n", 2,
                        "max_clients");
}

static void test_bad_number_trailing(void **state)
{
        expect_bad_line(*state, "[limits]\nmax_send_queue = 12abc\n", 2,
                        "max_send_queue");
}

static void test_bad_number_negative(void **state)
{
        expect_bad_line(*state, "[sim]\ndevices = -1\n", 2, "devices");
}

static void test_bad_number_overflow(void **state)
{
        expect_bad_line(*state, "[limits]\nmax_clients = 99999999999999999999\n",
                        2, "max_clients");
}

static void test_bad_number_empty(void **state)
{
        expect_bad_line(*state, "[limits]\nmax_clients =\n", 2, "max_clients");
}

static void test_bad_socket_mode(void **state)
{
        expect_bad_line(*state, "[daemon]\nsocket_mode = 0999\n", 2,
                        "socket_mode");
}

static void test_bad_log_level(void **state)
{
        expect_bad_line(*state, "[daemon]\nlog_level = loud\n", 2, "log_level");
}

static void test_bad_backend(void **state)
{
        expect_bad_line(*state, "[daemon]\nbackend = opencl\n", 2, "backend");
}

static void test_socket_path_too_long(void **state)
{
        char text[512];
        char path[200];

        memset(path, 'a', sizeof(path) - 1);
        path[0] = '/';
        path[sizeof(path) - 1] = '\0';
        snprintf(text, sizeof(text), "[daemon]\nsocket = %s\n", path);
        expect_bad_line(*state, text, 2, "socket");
}

static void test_line_without_equals(void **state)
{
        expect_bad_line(*state, "[sim]\ndevices = 1\nvram 64M\n", 3, ":3");
}

/* inih goes on after a header without its ']': the key on the next line
 * failed in the section before and was reported, one line late. */
static void test_unterminated_section(void **state)
{
        fixture *f = *state;

        expect_bad_line(f, "[daemon]\nbackend = sim\n[pools\nvram_limit = 1G\n",
                        3, "[pools");
        assert_mentions(f, "']'");
}

static void test_unterminated_first_section(void **state)
{
        expect_bad_line(*state, "[pools\nvram_limit = 1G\n", 1, "pools");
}

/* The next key would be good in the section before: still refused. */
static void test_unterminated_section_key_fits_before(void **state)
{
        expect_bad_line(*state, "[daemon]\n[limits\nsocket = /tmp/x.sock\n", 2,
                        "limits");
}

/* A line longer than inih's buffer reached it in pieces, each counted as a
 * line: later lines were reported against the wrong number. Comments may
 * be long; any other long line is refused on its own line. */
static void test_long_comment_keeps_numbering(void **state)
{
        fixture *f = *state;
        char text[1024];
        char comment[400];
        gmd_config c;

        memset(comment, 'x', sizeof(comment) - 1);
        comment[sizeof(comment) - 1] = '\0';
        snprintf(text, sizeof(text), "; %s\n[pools]\nvram_limit = 1G\n", comment);
        write_file(f, text);
        config_init_defaults(&c);
        assert_int_equal(config_load_file(&c, f->path, f->err), 0);
        assert_int_equal(c.vram_limit.bytes, GiB);

        snprintf(text, sizeof(text), "; %s\n[pools]\nvram_limit = 1G\n"
                 "vram_reserve = lots\n", comment);
        expect_bad_line(f, text, 4, "vram_reserve");
}

static void test_long_line(void **state)
{
        char text[1024];
        char value[300];

        memset(value, 'a', sizeof(value) - 1);
        value[sizeof(value) - 1] = '\0';
        snprintf(text, sizeof(text), "[daemon]\nbackend = sim\nsocket_group = %s\n"
                 "log_level = loud\n", value);
        expect_bad_line(*state, text, 3, "socket_group");
}

/* inih took an indented line after a key for more of that key's value:
 * "  host_limit = 2G" was a bad value for the vram_limit above it. */
static void test_indented_keys(void **state)
{
        fixture *f = *state;
        gmd_config c;

        write_file(f, "[pools]\n  vram_limit = 1G\n\thost_limit = 2G\n");
        config_init_defaults(&c);
        assert_int_equal(config_load_file(&c, f->path, f->err), 0);
        assert_int_equal(c.vram_limit.bytes, GiB);
        assert_int_equal(c.host_limit.bytes, 2 * GiB);
        expect_bad_line(f, "[pools]\n  vram_limit = 1G\n  host_limit = lots\n", 3,
                        "'host_limit'");
}

/* [metrics] listen is checked when it is read: it used to be checked only
 * when the endpoint bound it, and the daemon stopped with "cannot listen:
 * Operation not permitted", exit 1, no line. */
static void test_metrics_listen_bad(void **state)
{
        static const char *const bad[] = {
                "0.0.0.0:9477", "192.0.2.1:9100", "[::]:9100", "127.0.0.1",
                "127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:x", ":9100",
                "unix:", "somewhere", "",
        };
        fixture *f = *state;
        char text[160];

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                snprintf(text, sizeof(text), "[daemon]\nbackend = sim\n"
                         "[metrics]\nlisten = %s\n", bad[i]);
                expect_bad_line(f, text, 4, "'listen' in [metrics]");
        }
        expect_bad_line(f, "[metrics]\nlisten = 0.0.0.0:9477\n", 2, "loopback");
}

static void test_metrics_listen_good(void **state)
{
        static const char *const good[] = {
                "off", "127.0.0.1:0", "127.0.0.1:9477", "127.1.2.3:80",
                "localhost:9477", "[::1]:9477", "unix:/run/gpu-memd/metrics.sock",
        };
        fixture *f = *state;
        char text[160];
        gmd_config c;

        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
                snprintf(text, sizeof(text), "[metrics]\nlisten = %s\n", good[i]);
                write_file(f, text);
                config_init_defaults(&c);
                assert_int_equal(config_load_file(&c, f->path, f->err), 0);
                assert_int_equal(config_validate(&c, f->err), 0);
                assert_string_equal(c.metrics_listen, good[i]);
        }
        assert_string_equal(messages(f), "");
}

/* What the endpoint binds is what the config accepted. */
static void test_listen_parse(void **state)
{
        const char *hint = NULL;
        gmd_listen l;

        (void)state;
        assert_int_equal(config_listen_parse("off", &l, &hint), 0);
        assert_int_equal(l.kind, GMD_LISTEN_OFF);
        assert_int_equal(config_listen_parse("localhost:9477", &l, &hint), 0);
        assert_int_equal(l.kind, GMD_LISTEN_TCP);
        assert_int_equal(l.addr.ss_family, AF_INET);
        assert_int_equal(config_listen_parse("[::1]:9477", &l, &hint), 0);
        assert_int_equal(l.addr.ss_family, AF_INET6);
        assert_int_equal(config_listen_parse("unix:/tmp/m.sock", &l, &hint), 0);
        assert_int_equal(l.kind, GMD_LISTEN_UNIX);
        assert_string_equal(l.path, "/tmp/m.sock");
        assert_int_equal(config_listen_parse("0.0.0.0:9477", &l, &hint), -EPERM);
        assert_non_null(strstr(hint, "loopback"));
        assert_int_equal(config_listen_parse("127.0.0.1:", &l, &hint), -EINVAL);
        assert_non_null(strstr(hint, "127.0.0.1:PORT"));
}

/* Bounds of single keys are checked when the key is read, on its line;
 * they used to wait for config_validate, which named no line. */
static void test_bounds_checked_when_read(void **state)
{
        fixture *f = *state;

        expect_bad_line(f, "[swap]\nchunk_size = 64K\n", 2, "chunk_size");
        expect_bad_line(f, "[swap]\npreempt_step = 100K\n", 2, "preempt_step");
        expect_bad_line(f, "[sim]\ngranularity = 6M\n", 2, "power of two");
        expect_bad_line(f, "[sim]\ngranularity = 2K\n", 2, "granularity");
        expect_bad_line(f, "[daemon]\nsocket =\n", 2, "socket");
}

static void test_bounds_allow_off(void **state)
{
        fixture *f = *state;
        gmd_config c;

        write_file(f, "[swap]\npreempt_step = 0\nchunk_size = 1M\n"
                   "[sim]\ngranularity = 64K\n");
        config_init_defaults(&c);
        assert_int_equal(config_load_file(&c, f->path, f->err), 0);
        assert_int_equal(config_validate(&c, f->err), 0);
        assert_int_equal(c.swap_preempt_step, 0);
        assert_int_equal(c.sim_granularity, 64 << 10);
}

static void test_missing_file(void **state)
{
        fixture *f = *state;
        gmd_config c;
        char path[160];

        snprintf(path, sizeof(path), "%s/no-such.conf", f->dir);
        config_init_defaults(&c);
        assert_int_equal(config_load_file(&c, path, f->err), -ENOENT);
        assert_mentions(f, path);
}

/* ---- config_set, as the command line uses it ------------------------------ */

static void test_set_good(void **state)
{
        fixture *f = *state;
        gmd_config c;

        config_init_defaults(&c);
        assert_int_equal(config_set(&c, "pools", "vram_limit", "80%",
                                    "--vram-limit", f->err), 0);
        assert_true(c.vram_limit.percent == 80.0);
        assert_int_equal(config_set(&c, "pools", "vram_limit", "64M",
                                    "--vram-limit", f->err), 0);
        assert_int_equal(c.vram_limit.bytes, 64 * MiB);
        assert_true(c.vram_limit.percent == 0);
        assert_int_equal(config_set(&c, "pools", "host_limit", "25%",
                                    "--host-limit", f->err), 0);
        assert_true(c.host_limit.percent == 25.0);
        assert_int_equal(config_set(&c, "daemon", "socket", "/tmp/s.sock",
                                    "--socket", f->err), 0);
        assert_string_equal(c.socket_path, "/tmp/s.sock");
        assert_int_equal(config_set(&c, "daemon", "backend", "sim",
                                    "--backend", f->err), 0);
        assert_string_equal(c.backend, "sim");
        assert_int_equal(config_set(&c, "daemon", "log_level", "error",
                                    "--log-level", f->err), 0);
        assert_int_equal(c.log_level, GMD_LOG_ERR);
        assert_string_equal(messages(f), "");
}

/* A refused value names its source and the key, and leaves the old value. */
static void test_set_bad(void **state)
{
        fixture *f = *state;
        gmd_config c, before;

        config_init_defaults(&c);
        memcpy(&before, &c, sizeof(c));
        assert_int_equal(config_set(&c, "pools", "vram_limit", "lots",
                                    "--vram-limit", f->err), -EINVAL);
        assert_mentions(f, "--vram-limit");
        assert_mentions(f, "lots");
        assert_memory_equal(&c, &before, sizeof(c));

        assert_int_equal(config_set(&c, "daemon", "log_level", "loud",
                                    "--log-level", f->err), -EINVAL);
        assert_memory_equal(&c, &before, sizeof(c));

        assert_int_equal(config_set(&c, "pools", "no_such_key", "1",
                                    "test", f->err), -EINVAL);
        assert_mentions(f, "no_such_key");
        assert_int_equal(config_set(&c, "nowhere", "socket", "/x",
                                    "test", f->err), -EINVAL);
        assert_memory_equal(&c, &before, sizeof(c));
}

/* The file is read over the current values, and options come after it. */
static void test_set_after_file_wins(void **state)
{
        fixture *f = *state;
        gmd_config c;

        write_file(f, "[pools]\nvram_limit = 1G\n");
        config_init_defaults(&c);
        assert_int_equal(config_load_file(&c, f->path, f->err), 0);
        assert_int_equal(c.vram_limit.bytes, GiB);
        assert_int_equal(config_set(&c, "pools", "vram_limit", "64M",
                                    "--vram-limit", f->err), 0);
        assert_int_equal(c.vram_limit.bytes, 64 * MiB);
}

/* ---- limits checked across keys ------------------------------------------- */

/* config_validate refuses the file (which loads): one message, starting
 * with the file and line of the key to fix, naming it. */
static void expect_invalid(fixture *f, const char *text, int line,
                           const char *part)
{
        gmd_config c;
        char where[192];

        messages_reset(f);
        write_file(f, text);
        config_init_defaults(&c);
        assert_int_equal(config_load_file(&c, f->path, f->err), 0);
        assert_int_equal(config_validate(&c, f->err), -EINVAL);
        snprintf(where, sizeof(where), "%s:%d: ", f->path, line);
        if (strncmp(messages(f), where, strlen(where)) != 0)
                fail_msg("message \"%s\" does not start with \"%s\"",
                         messages(f), where);
        assert_mentions(f, part);
        if (count_lines(messages(f)) != 1)
                fail_msg("expected one message line, got:\n%s", messages(f));
}

/* The slots kept for admins are part of max_clients. The key set last is
 * the one named, with where the other came from. */
static void test_admin_clients_below_max(void **state)
{
        expect_invalid(*state, "[limits]\nmax_clients = 4\nadmin_clients = 4\n",
                       3, "admin_clients");
}

static void test_max_clients_below_default_admin_clients(void **state)
{
        fixture *f = *state;

        expect_invalid(f, "[daemon]\nbackend = sim\n[limits]\nmax_clients = 4\n",
                       4, "'max_clients' in [limits]");
        assert_mentions(f, "built-in default");
}

/* A value from an option is named by the option. */
static void test_invalid_from_option(void **state)
{
        fixture *f = *state;
        gmd_config c;

        write_file(f, "[limits]\nmax_clients = 8\n");
        config_init_defaults(&c);
        assert_int_equal(config_load_file(&c, f->path, f->err), 0);
        assert_int_equal(config_set(&c, "limits", "admin_clients", "8",
                                    "gpu-memd: option --admin-clients", f->err), 0);
        assert_int_equal(config_validate(&c, f->err), -EINVAL);
        assert_mentions(f, "gpu-memd: option --admin-clients: key 'admin_clients'");
        assert_mentions(f, ":2)");
}

/* A group is looked up after every layer is read: the message names the
 * line that named it. */
static void test_unknown_group(void **state)
{
        fixture *f = *state;

        expect_invalid(f, "[daemon]\nbackend = sim\nsocket_group = gmd-no-such-group\n",
                       3, "socket_group");
        assert_mentions(f, "groupadd");
}

static void test_sim_vram_below_granule(void **state)
{
        expect_invalid(*state, "[sim]\ngranularity = 4M\nvram = 2M\n", 3,
                       "'vram' in [sim]");
}

/* Where each key came from: the file's line, an option, the default. */
static void test_origins(void **state)
{
        fixture *f = *state;
        char where[192], buf[256];
        gmd_config c;

        write_file(f, "[daemon]\nbackend = sim\n\n[limits]\nmax_clients = 8\n");
        config_init_defaults(&c);
        assert_int_equal(config_load_file(&c, f->path, f->err), 0);
        assert_int_equal(config_set(&c, "daemon", "socket", "/tmp/o.sock",
                                    "gpu-memd: option --socket", f->err), 0);
        snprintf(where, sizeof(where), "%s:5", f->path);
        assert_string_equal(config_origin(&c, "limits", "max_clients", buf,
                                          sizeof(buf)), where);
        assert_string_equal(config_origin(&c, "daemon", "socket", buf, sizeof(buf)),
                            "gpu-memd: option --socket");
        assert_string_equal(config_origin(&c, "limits", "admin_clients", buf,
                                          sizeof(buf)), "built-in default");
        /* An option over a file line: the option it is now. */
        assert_int_equal(config_set(&c, "daemon", "backend", "auto",
                                    "gpu-memd: option --backend", f->err), 0);
        assert_string_equal(config_origin(&c, "daemon", "backend", buf, sizeof(buf)),
                            "gpu-memd: option --backend");
}

/* A queue bound below two of the largest replies would drop every
 * client that ever gets one: refused on its line. */
static void test_send_queue_bytes_floor(void **state)
{
        fixture *f = *state;

        expect_bad_line(f, "[limits]\nmax_send_queue_bytes = 100K\n", 2,
                        "max_send_queue_bytes");
        assert_mentions(f, "256K");
        expect_bad_line(f, "[limits]\nmax_user_send_queue_bytes = 200K\n", 2,
                        "max_user_send_queue_bytes");
}

/* [metrics] clients: users (the default), ids or names, nothing else. */
static void test_metrics_clients(void **state)
{
        fixture *f = *state;
        gmd_config c;

        config_init_defaults(&c);
        assert_string_equal(c.metrics_clients, "users");
        write_file(f, "[metrics]\nclients = names\n");
        assert_int_equal(config_load_file(&c, f->path, f->err), 0);
        assert_int_equal(config_validate(&c, f->err), 0);
        assert_string_equal(c.metrics_clients, "names");
        expect_bad_line(f, "[metrics]\nclients = all\n", 2, "users, ids or names");
}

/* hello_timeout_ms is at least 1; the counts take 0 (no limit, auto). */
static void test_limits_ranges(void **state)
{
        fixture *f = *state;
        gmd_config c;

        expect_bad_line(f, "[limits]\nhello_timeout_ms = 0\n", 2, "hello_timeout_ms");
        write_file(f, "[limits]\nmax_clients_per_user = 0\nmax_buffers_per_user = 0\n"
                   "admin_clients = 0\n");
        config_init_defaults(&c);
        assert_int_equal(config_load_file(&c, f->path, f->err), 0);
        assert_int_equal(config_validate(&c, f->err), 0);
        assert_int_equal(c.max_clients_per_user, 0);
        assert_int_equal(c.admin_clients, 0);
}

/* ---- dump ------------------------------------------------------------------ */

/* What config_dump writes reads back to the same config. */
static void test_dump_round_trip(void **state)
{
        fixture *f = *state;
        gmd_config c, back;
        FILE *out;

        write_file(f,
                   "[daemon]\nsocket = /tmp/rt.sock\nsocket_mode = 0640\n"
                   "backend = sim\nlog_level = notice\n"
                   "[pools]\nvram_limit = 75%\nvram_reserve = 1234M\n"
                   "host_limit = 3G\n"
                   "[limits]\nmax_clients = 12\nmax_buffers_per_client = 34\n"
                   "max_waiting_per_client = 5\nmax_send_queue = 67\n"
                   "max_send_queue_bytes = 300K\nmax_user_send_queue_bytes = 2G\n"
                   "max_clients_per_user = 0\nadmin_clients = 3\n"
                   "hello_timeout_ms = 12\nmax_buffers_per_user = 9\n"
                   "[swap]\nkeep_vram = off\n"
                   "[sim]\ndevices = 3\nvram = 96M\ngranularity = 1M\n");
        config_init_defaults(&c);
        assert_int_equal(config_load_file(&c, f->path, f->err), 0);

        out = fopen(f->path, "w");
        assert_non_null(out);
        config_dump(&c, out);
        assert_int_equal(fclose(out), 0);

        config_init_defaults(&back);
        if (config_load_file(&back, f->path, f->err) != 0)
                fail_msg("config_dump output does not load: %s", messages(f));
        assert_config_equal(&back, &c);
}

/* The defaults dump and load too (the shipped config file is such a dump). */
static void test_dump_defaults_loads(void **state)
{
        fixture *f = *state;
        gmd_config c, back;
        FILE *out;

        config_init_defaults(&c);
        out = fopen(f->path, "w");
        assert_non_null(out);
        config_dump(&c, out);
        assert_int_equal(fclose(out), 0);
        config_init_defaults(&back);
        if (config_load_file(&back, f->path, f->err) != 0)
                fail_msg("defaults dump does not load: %s", messages(f));
        assert_config_equal(&back, &c);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
        const struct CMUnitTest tests[] = {
                T(test_defaults),
                T(test_log_level_names),
                T(test_load_good_file),
                T(test_load_partial_file),
                T(test_load_empty_file),
                T(test_log_levels_in_file),
                T(test_unknown_key),
                T(test_key_in_wrong_section),
                T(test_unknown_section),
                T(test_key_before_any_section),
                T(test_bad_size),
                T(test_bad_size_overflow),
                T(test_bad_percent),
                T(test_pool_size_needs_unit),
                T(test_pool_size_zero),
                T(test_host_pool_size_zero),
                T(test_percent_where_bytes_needed),
                T(test_bool_values),
                T(test_bad_bool),
                T(test_bad_number),
                T(test_bad_number_trailing),
                T(test_bad_number_negative),
                T(test_bad_number_overflow),
                T(test_bad_number_empty),
                T(test_bad_socket_mode),
                T(test_bad_log_level),
                T(test_bad_backend),
                T(test_socket_path_too_long),
                T(test_line_without_equals),
                T(test_unterminated_section),
                T(test_unterminated_first_section),
                T(test_unterminated_section_key_fits_before),
                T(test_long_comment_keeps_numbering),
                T(test_long_line),
                T(test_indented_keys),
                T(test_metrics_listen_bad),
                T(test_metrics_listen_good),
                T(test_listen_parse),
                T(test_bounds_checked_when_read),
                T(test_bounds_allow_off),
                T(test_missing_file),
                T(test_set_good),
                T(test_set_bad),
                T(test_set_after_file_wins),
                T(test_admin_clients_below_max),
                T(test_max_clients_below_default_admin_clients),
                T(test_invalid_from_option),
                T(test_unknown_group),
                T(test_sim_vram_below_granule),
                T(test_origins),
                T(test_send_queue_bytes_floor),
                T(test_limits_ranges),
                T(test_metrics_clients),
                T(test_dump_round_trip),
                T(test_dump_defaults_loads),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
