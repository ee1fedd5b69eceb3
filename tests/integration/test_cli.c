/*
 * test_cli — what operators touch: gpu-memd's options and config file
 * errors, its socket (mode, stale file, removal on stop), and gpu-memctl
 * against a running daemon and against none: after a real pageout and
 * prefetch on the sim backend its tables and JSON must show where the
 * bytes are (pools, copies, clients by tier, buffers' tier and state),
 * and while a throttled move runs, that it is queued and moving; a
 * client's reported memory plan in status and its JSON; the host's limit
 * across links beside the links alone.
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

typedef harness_fixture fixture;



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
        if (harness_exit_code(status) != 0)
                fail_msg("gpu-memctl status --json exited %d; stderr:\n%s",
                         harness_exit_code(status), err);
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
        /* Unthrottled sim copies: the link is not known. */
        assert_non_null(strstr(out, "\"link_bytes_per_s_in\": 0"));
        free(out);
        free(err);
        assert_int_equal(gmd_free(f->client, b), 0);
        harness_stop(&f->h);
}

/* ---- reading gpu-memctl's JSON ---------------------------------------------- */

/*
 * The flat object (no nested containers: pools, clients and buffers rows
 * are) of the array `array` that contains `marker` ("\"tier\": \"host\""),
 * as a malloc'd copy; fails the test if there is none.
 */
static char *json_row(const char *text, const char *array, const char *marker)
{
        char key[64];
        const char *p, *end;
        char *row;

        snprintf(key, sizeof(key), "\"%s\": [", array);
        p = strstr(text, key);
        if (!p)
                fail_msg("no array \"%s\" in:\n%s", array, text);
        p += strlen(key);
        for (;;) {
                p += strspn(p, " \n");
                if (*p != '{')
                        break;
                end = strchr(p, '}');
                if (!end)
                        break;
                if (memmem(p, (size_t)(end - p), marker, strlen(marker))) {
                        row = strndup(p, (size_t)(end - p + 1));
                        if (!row)
                                abort();        /* out of memory */
                        return row;
                }
                p = end + 1;
                p += strspn(p, " \n");
                if (*p++ != ',')
                        break;
        }
        fail_msg("no row of \"%s\" with %s in:\n%s", array, marker, text);
        abort();        /* not reached: fail_msg jumps out of the test */
}

/* The unsigned integer member `key` of a row; fails if it is missing. */
static uint64_t json_row_uint(const char *row, const char *key)
{
        char needle[64];
        const char *p;

        snprintf(needle, sizeof(needle), "\"%s\": ", key);
        p = strstr(row, needle);
        if (!p || p[strlen(needle)] < '0' || p[strlen(needle)] > '9')
                fail_msg("no number \"%s\" in row:\n%s", key, row);
        return strtoull(p + strlen(needle), NULL, 10);
}

static void assert_row_uint(const char *row, const char *key, uint64_t want)
{
        uint64_t got = json_row_uint(row, key);

        if (got != want)
                fail_msg("\"%s\" is %llu, expected %llu, in row:\n%s", key,
                         (unsigned long long)got, (unsigned long long)want, row);
}

static void assert_row_has(const char *row, const char *text)
{
        /* "row ?": GCC with the sanitizers sees a NULL path here. */
        if (!strstr(row, text))
                fail_msg("no %s in row:\n%s", text, row ? row : "");
}

/* gpu-memctl ARGS... (NULL-terminated) must exit 0; its stdout, free() it.
 * Every line of it must fit 80 columns. */
static char *ctl_output(fixture *f, const char *const *args)
{
        const char *argv[8] = { GMD_CTL_PATH };
        char *out = NULL, *err = NULL;
        size_t n = 1;
        int status;

        for (; *args; args++) {
                assert_true(n < 7);
                argv[n++] = *args;
        }
        argv[n] = NULL;
        status = harness_run(&f->h, NULL, argv, &out, &err, 5000);
        if (harness_exit_code(status) != 0)
                fail_msg("gpu-memctl %s exited %d; stderr:\n%s", argv[1],
                         harness_exit_code(status), err);
        free(err);
        for (const char *line = out; *line;) {
                const char *end = strchr(line, '\n');

                assert_non_null(end);
                if (end - line > 80)
                        fail_msg("gpu-memctl %s: line wider than 80 columns: "
                                 "'%.*s'", argv[1], (int)(end - line), line);
                line = end + 1;
        }
        return out;
}

/* The line of `text` that starts with `prefix`, as a malloc'd copy. */
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

#define PAGED (8 * MiB)

/*
 * 8 MiB paged out and waited for: the host pool holds it, device 0's
 * copy engine moved it out, the client's bytes are on host and the
 * buffer's tier is host; brought back, the same figures the other way.
 */
static void test_ctl_after_pageout(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;
        char *out, *row, *line, pid[32], marker[64];

        /* Freed buffers go back at once (ctest sets this for every
         * integration test; a run by hand needs it too). */
        setenv(GMD_CACHE_ENV, "0", 1);
        harness_start_small(&f->h, "[pools]\nhost_limit = 64M\n");
        f->client = harness_client(&f->h, "pager");
        assert_int_equal(gmd_alloc(f->client, PAGED, 0, GMD_ALLOC_SWAPPABLE,
                                   GMD_NO_WAIT, &b), 0);
        memset(gmd_buffer_ptr(b), 0x5a, PAGED);
        assert_int_equal(gmd_release(f->client, b), 0);
        assert_int_equal(gmd_pageout(f->client, b), 0);
        assert_int_equal(gmd_wait(f->client, b, 5000), 0);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        snprintf(pid, sizeof(pid), "\"pid\": %d,", (int)getpid());

        out = ctl_output(f, (const char *[]){ "status", "--json", NULL });
        if (!json_valid(out))
                fail_msg("not valid JSON:\n%s", out);
        row = json_row(out, "pools", "\"tier\": \"host\"");
        assert_row_uint(row, "used", PAGED);
        assert_row_uint(row, "bytes_out", 0);   /* copies belong to devices */
        free(row);
        row = json_row(out, "pools", "\"tier\": \"vram\"");
        assert_row_uint(row, "device", 0);
        /* The VRAM it left is kept for its swap-in, and counted. */
        assert_row_uint(row, "used", PAGED);
        assert_row_uint(row, "kept", PAGED);
        assert_row_uint(row, "queued_out", 0);
        assert_row_uint(row, "queued_in", 0);
        assert_row_uint(row, "bytes_out", PAGED);
        assert_row_uint(row, "bytes_in", 0);
        assert_true(json_row_uint(row, "copy_us_out") > 0);
        assert_row_uint(row, "copy_us_in", 0);
        free(row);
        row = json_row(out, "clients", pid);
        assert_row_has(row, "\"name\": \"pager\"");
        assert_row_uint(row, "bytes", PAGED);
        assert_row_uint(row, "vram_bytes", 0);
        assert_row_uint(row, "host_bytes", PAGED);
        free(row);
        free(out);

        out = ctl_output(f, (const char *[]){ "buffers", "--json", NULL });
        snprintf(marker, sizeof(marker), "\"buffer_id\": %llu,",
                 (unsigned long long)gmd_buffer_id(b));
        row = json_row(out, "buffers", marker);
        assert_row_has(row, "\"tier\": \"host\"");
        assert_row_has(row, "\"state\": \"resident\"");
        assert_row_uint(row, "size", PAGED);
        free(row);
        free(out);

        /* The same for people. */
        out = ctl_output(f, (const char *[]){ "status", NULL });
        line = line_starting(out, "COPIES");
        assert_non_null(strstr(line, "QUEUED OUT"));
        assert_non_null(strstr(line, "MOVED OUT"));
        assert_non_null(strstr(line, "AVG OUT"));
        free(line);
        line = line_starting(out, "gpu0 ");
        /* queued 0 and 0, 8 MiB out, 0 B in, a rate out, none in: the
         * columns of top's copies table, in its order. */
        {
                char name[16], out_unit[16], in_unit[16], rate_unit[16];
                unsigned q_out = 9, q_in = 9;
                double moved_out = 0, moved_in = 1, rate = 0;

                if (sscanf(line, "%15s %u %u %lf %15s %lf %15s %lf %15s", name,
                           &q_out, &q_in, &moved_out, out_unit, &moved_in, in_unit,
                           &rate, rate_unit) != 9 || q_out || q_in ||
                    moved_out != 8 || strcmp(out_unit, "MiB") != 0 ||
                    moved_in != 0 || strcmp(in_unit, "B") != 0 || rate <= 0 ||
                    !strstr(rate_unit, "/s") || line[strlen(line) - 1] != '-')
                        fail_msg("copies row: '%s'", line);
        }
        free(line);
        line = line_starting(out, "gpu0 VRAM kept");
        assert_non_null(strstr(line, "kept for swap-ins: 8 MiB"));
        free(line);
        line = line_starting(out, "CLIENT");
        assert_non_null(strstr(line, "VRAM"));
        assert_non_null(strstr(line, "HOST"));
        free(line);
        free(out);

        out = ctl_output(f, (const char *[]){ "clients", NULL });
        snprintf(marker, sizeof(marker), " %d ", (int)getpid());
        line = strstr(out, marker);
        if (!line || !strstr(line, "pager") ||
            !strstr(line, "0 B      8 MiB"))
                fail_msg("clients: no row for pager with 0 B on VRAM and 8 MiB "
                         "on host:\n%s", out);
        free(out);

        out = ctl_output(f, (const char *[]){ "buffers", NULL });
        if (!strstr(out, " host  resident "))
                fail_msg("buffers: no host, resident row:\n%s", out);
        free(out);

        /* Back in: the other direction's counters. */
        assert_int_equal(gmd_prefetch(f->client, b), 0);
        assert_int_equal(gmd_wait(f->client, b, 5000), 0);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        for (size_t i = 0; i < PAGED; i += 4096)
                assert_int_equal(((unsigned char *)gmd_buffer_ptr(b))[i], 0x5a);
        out = ctl_output(f, (const char *[]){ "status", "--json", NULL });
        row = json_row(out, "pools", "\"tier\": \"host\"");
        assert_row_uint(row, "used", 0);
        free(row);
        row = json_row(out, "pools", "\"tier\": \"vram\"");
        assert_row_uint(row, "used", PAGED);
        assert_row_uint(row, "kept", 0);   /* it came back into it */
        assert_row_uint(row, "bytes_out", PAGED);
        assert_row_uint(row, "bytes_in", PAGED);
        assert_true(json_row_uint(row, "copy_us_in") > 0);
        free(row);
        row = json_row(out, "clients", pid);
        assert_row_uint(row, "vram_bytes", PAGED);
        assert_row_uint(row, "host_bytes", 0);
        free(row);
        free(out);

        assert_int_equal(gmd_free(f->client, b), 0);
        harness_stop(&f->h);
}

/*
 * A move caught in flight: the sim copies at 8 MiB/s here, so a 16 MiB
 * pageout takes about two seconds, during which gpu-memctl shows it
 * queued on device 0 and the buffer moving out; status shows that rate
 * as the device's link.
 */
static void test_ctl_while_moving(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;
        char *out, *row, marker[64];

        setenv(GMD_CACHE_ENV, "0", 1);
        harness_start_small(&f->h, "[pools]\nhost_limit = 64M\n"
                            "[sim]\ncopy_rate = 8M\n");
        f->client = harness_client(&f->h, "slowpager");
        assert_int_equal(gmd_alloc(f->client, 16 * MiB, 0, GMD_ALLOC_SWAPPABLE,
                                   GMD_NO_WAIT, &b), 0);
        assert_int_equal(gmd_release(f->client, b), 0);
        assert_int_equal(gmd_pageout(f->client, b), 0);

        out = ctl_output(f, (const char *[]){ "buffers", "--json", NULL });
        snprintf(marker, sizeof(marker), "\"buffer_id\": %llu,",
                 (unsigned long long)gmd_buffer_id(b));
        row = json_row(out, "buffers", marker);
        assert_row_has(row, "\"tier\": \"vram\"");
        assert_row_has(row, "\"state\": \"moving-out\"");
        free(row);
        row = json_row(out, "pools", "\"tier\": \"vram\"");
        assert_row_uint(row, "queued_out", 1);
        assert_row_uint(row, "queued_in", 0);
        assert_true(json_row_uint(row, "bytes_out") < 16 * MiB);
        free(row);
        free(out);

        out = ctl_output(f, (const char *[]){ "buffers", NULL });
        if (!strstr(out, " vram  moving-out "))
                fail_msg("buffers: no vram, moving-out row:\n%s", out);
        free(out);

        assert_int_equal(gmd_wait(f->client, b, 10000), 0);
        out = ctl_output(f, (const char *[]){ "status", "--json", NULL });
        row = json_row(out, "pools", "\"tier\": \"vram\"");
        assert_row_uint(row, "queued_out", 0);
        assert_row_uint(row, "bytes_out", 16 * MiB);
        /* 16 MiB at 8 MiB/s: about two seconds of copying. */
        assert_true(json_row_uint(row, "copy_us_out") > 1500000);
        /* The link: the sim's copy rate, each way. */
        assert_row_uint(row, "link_bytes_per_s_in", 8 * MiB);
        assert_row_uint(row, "link_bytes_per_s_out", 8 * MiB);
        /* [swap] preempt_step's default. */
        assert_row_uint(row, "preempt_step", 4 * MiB);
        free(row);
        free(out);
        out = ctl_output(f, (const char *[]){ "status", NULL });
        if (!strstr(out, "\ngpu0 link: 8 MiB/s in, 8 MiB/s out "
                    "(sim: [sim] copy_rate)\n"))
                fail_msg("status: no link line:\n%s", out);
        if (!strstr(out, "\ngpu0 acquires overtake prefetches: copies in "
                    "pause every 4 MiB\n"))
                fail_msg("status: no preempt_step line:\n%s", out);
        free(out);
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
        if (harness_exit_code(status) != 0)
                fail_msg("gpu-memctl status exited %d; stderr:\n%s",
                         harness_exit_code(status), err);
        /* People read sizes, not byte counts. */
        assert_non_null(strstr(out, "64 MiB"));
        /* VRAM and host apart, never one sum that reads as a device that
         * large; gpu-memctl is not a client anyone asked about. */
        if (!strstr(out, "used: VRAM 0 B of 64 MiB, host 0 B of ") ||
            strstr(out, "gpu-memctl") || !strstr(out, "(no clients)") ||
            !strstr(out, "\n0 clients, 0 buffers") ||
            strstr(out, " link: "))     /* unknown: not shown */
                fail_msg("status:\n%s", out);
        free(out);
        free(err);
        harness_stop(&f->h);
}

/*
 * Two sim devices whose links (8 MiB/s each) the host feeds 12 MiB/s
 * together (GMD_SIM_HOST_RATE): gpu-memctl status says both on one line
 * within 80 columns and --json has the host's figures; the daemon's log
 * says what the copy engine holds in flight across devices for it. One
 * device: no line, zeros.
 */
static void test_ctl_host_links(void **state)
{
        fixture *f = *state;
        char *out, *row, *line;

        setenv("GMD_SIM_HOST_RATE", "12M", 1);
        harness_start_small(&f->h, "[sim]\ndevices = 2\ncopy_rate = 8M\n");
        unsetenv("GMD_SIM_HOST_RATE");
        out = ctl_output(f, (const char *[]){ "status", NULL });
        if (!strstr(out, "\nhost links: 12.6 MB/s out, 12.6 in together "
                    "(alone: 16.8 out, 16.8 in)\n"))
                fail_msg("status: no host links line:\n%s", out);
        free(out);
        out = ctl_output(f, (const char *[]){ "status", "--json", NULL });
        assert_non_null(strstr(out, "\"host_bytes_per_s_out\": 12582912,"));
        assert_non_null(strstr(out, "\"host_bytes_per_s_in\": 12582912,"));
        row = json_row(out, "pools", "\"device\": 1,");
        assert_row_uint(row, "link_bytes_per_s_in", 8 * MiB);
        free(row);
        free(out);
        /* [swap] defaults: L is two 64 MiB chunks; 128 x 12 / (16 / 2). */
        line = harness_wait_log(&f->h, "copies: the host carries", 1000);
        if (!line || !strstr(line, "at most 192 MiB out and 192 MiB in"))
                fail_msg("no host budget in the log: %s", line ? line : "");
        free(line);
        harness_stop(&f->h);
        harness_cleanup(&f->h);

        setenv("GMD_SIM_HOST_RATE", "12M", 1);
        harness_start_small(&f->h, "[sim]\ncopy_rate = 8M\n");
        unsetenv("GMD_SIM_HOST_RATE");
        out = ctl_output(f, (const char *[]){ "status", NULL });
        if (strstr(out, "host links"))
                fail_msg("status: a host links line for one link:\n%s", out);
        free(out);
        out = ctl_output(f, (const char *[]){ "status", "--json", NULL });
        assert_non_null(strstr(out, "\"host_bytes_per_s_out\": 0,"));
        free(out);
        harness_stop(&f->h);
}

/*
 * The peer tier in gpu-memctl status: two sim devices that reach each
 * other ([sim] peer_rate), a buffer of device 0 paged out to device 1's
 * VRAM: one line per pair with its rate and what it holds, and --json has
 * the pairs and the pool's peer_held. Without peers: no such line.
 */
static void test_ctl_peers(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;
        char *out, *row;

        harness_start_small(&f->h, "[sim]\ndevices = 2\npeer_rate = 100G\n"
                                   "[pools]\nhost_limit = 64M\n"
                                   "peer_headroom = 0\n");
        f->client = harness_client(&f->h, "peer");
        OK(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SWAPPABLE, GMD_NO_WAIT, &b));
        OK(gmd_release(f->client, b));
        OK(gmd_pageout(f->client, b));
        OK(gmd_wait(f->client, b, 5000));
        out = ctl_output(f, (const char *[]){ "status", NULL });
        if (!strstr(out, "\npeer tier: gpu0 -> gpu1 at 107.4 GB/s: 8 MiB held "
                    "there\n") ||
            !strstr(out, "\npeer tier: gpu1 -> gpu0 at 107.4 GB/s: 0 B held "
                    "there\n"))
                fail_msg("status: no peer tier lines:\n%s", out);
        free(out);
        out = ctl_output(f, (const char *[]){ "status", "--json", NULL });
        row = json_row(out, "pools", "\"device\": 1,");
        assert_non_null(strstr(row, "\"peer_held\": 8388608,"));
        free(row);
        row = json_row(out, "peers", "\"home\": 0,");
        assert_non_null(strstr(row, "\"holder\": 1,"));
        assert_non_null(strstr(row, "\"bytes_per_s\": 107374182400,"));
        assert_non_null(strstr(row, "\"held\": 8388608"));
        free(row);
        free(out);
        OK(gmd_free(f->client, b));
        f->client = gmd_disconnect(f->client);
        harness_stop(&f->h);

        harness_start_small(&f->h, "[sim]\ndevices = 2\n");
        out = ctl_output(f, (const char *[]){ "status", NULL });
        if (strstr(out, "peer tier"))
                fail_msg("status: a peer tier line without peers:\n%s", out);
        free(out);
        harness_stop(&f->h);
}

#define GiB (1024 * MiB)

/* gmd_status round trip on `c`: the daemon has read what it sent before. */
static void sync_client(gmd_client *c)
{
        gmd_status *st = NULL;

        assert_int_equal(gmd_query_status(c, GMD_STATUS_POOLS, 0, &st), 0);
        gmd_status_free(st);
}

/*
 * A client's memory plan (gmd_report_plan): gpu-memctl status says it
 * under the clients table, within 80 columns even at the longest sizes,
 * and --json has its fields; a client without one gets no line; a
 * planner name the daemon would refuse is refused before it is sent.
 */
static void test_ctl_plan(void **state)
{
        fixture *f = *state;
        char *out, *row, *line, pid[32];

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "train.py");
        f->other = harness_client(&f->h, "noplan");
        assert_int_equal(gmd_report_plan(f->client, "fit", 3 * GiB + 256 * MiB,
                                         GiB + 128 * MiB, 819 * MiB, 0), 0);
        sync_client(f->client);
        snprintf(pid, sizeof(pid), "pid %d train.py: ", (int)getpid());

        out = ctl_output(f, (const char *[]){ "status", NULL });
        line = line_starting(out, pid);
        if (strcmp(line + strlen(pid), "plan by fit:") != 0)
                fail_msg("plan line: '%s' in:\n%s", line, out);
        free(line);
        line = line_starting(out, "  kept ");
        if (strcmp(line, "  kept 3.2 GiB, offloaded 1.1 GiB, recomputed "
                   "819 MiB, streamed 0 B") != 0)
                fail_msg("figures: '%s' in:\n%s", line, out);
        free(line);
        if (strstr(out, "noplan: plan"))
                fail_msg("a client without a plan has a plan line:\n%s", out);
        free(out);

        out = ctl_output(f, (const char *[]){ "status", "--json", NULL });
        if (!json_valid(out))
                fail_msg("not valid JSON:\n%s", out);
        row = json_row(out, "clients", "\"name\": \"train.py\"");
        assert_row_has(row, "\"planner\": \"fit\"");
        assert_row_uint(row, "plan_kept_bytes", 3 * GiB + 256 * MiB);
        assert_row_uint(row, "plan_offloaded_bytes", GiB + 128 * MiB);
        assert_row_uint(row, "plan_recomputed_bytes", 819 * MiB);
        assert_row_uint(row, "plan_streamed_bytes", 0);
        free(row);
        row = json_row(out, "clients", "\"name\": \"noplan\"");
        assert_row_has(row, "\"planner\": \"\"");
        assert_row_uint(row, "plan_kept_bytes", 0);
        free(row);
        free(out);

        /* A new report replaces the last; four long sizes wrap (and
         * ctl_output holds every line to 80 columns). */
        assert_int_equal(gmd_report_plan(f->client, "a-planner-named-32-bytes-long-xx",
                                         1023 * GiB + 900 * MiB,
                                         1023 * GiB + 900 * MiB,
                                         1023 * GiB + 900 * MiB,
                                         1023 * GiB + 900 * MiB), 0);
        sync_client(f->client);
        out = ctl_output(f, (const char *[]){ "status", NULL });
        line = line_starting(out, "  streamed ");
        assert_string_equal(line, "  streamed 1023.9 GiB");
        free(line);
        assert_non_null(strstr(out, "plan by a-planner-named-32-bytes-long-xx:"));
        free(out);

        /* Names the daemon would close the connection for. */
        assert_int_equal(gmd_report_plan(f->client,
                                         "a-planner-named-33-bytes-long-xxx",
                                         0, 0, 0, 0), -EINVAL);
        assert_int_equal(gmd_report_plan(f->client, "tab\there", 0, 0, 0, 0),
                         -EINVAL);
        assert_int_equal(gmd_report_plan(NULL, "fit", 0, 0, 0, 0), -EINVAL);
        sync_client(f->client);
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
        assert_int_equal(harness_exit_code(status), 1);
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
        assert_int_equal(harness_exit_code(run_daemon(f, (const char *[]){ "--help",
                                                                 NULL },
                                              &out, &err)), 0);
        assert_non_null(strstr(out, "--socket"));
        assert_non_null(strstr(out, "--config"));
        free(out);
        free(err);
        assert_int_equal(harness_exit_code(run_daemon(f, (const char *[]){ "--version",
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
        assert_int_equal(harness_exit_code(run_daemon(f, (const char *[]){
                "--backend", "sim", "--socket", f->h.socket_path,
                "--frobnicate", NULL }, &out, &err)), 2);
        assert_non_null(strstr(err, "--frobnicate"));
        assert_one_line(err);
        assert_int_not_equal(lstat(f->h.socket_path, &st), 0);
        free(out);
        free(err);

        assert_int_equal(harness_exit_code(run_daemon(f, (const char *[]){
                "--backend", "sim", "--socket", f->h.socket_path,
                "--vram-limit", "lots", NULL }, &out, &err)), 2);
        assert_non_null(strstr(err, "--vram-limit"));
        assert_non_null(strstr(err, "lots"));
        assert_one_line(err);
        free(out);
        free(err);

        assert_int_equal(harness_exit_code(run_daemon(f, (const char *[]){
                "--backend", "sim", "--log-level", "chatty", NULL },
                &out, &err)), 2);
        assert_non_null(strstr(err, "--log-level"));
        free(out);
        free(err);

        /* A pool size without a unit is bytes: 512 would be a pool nothing
         * fits in, and 0 used to be the whole device. Both say so. */
        assert_int_equal(harness_exit_code(run_daemon(f, (const char *[]){
                "--backend", "sim", "--socket", f->h.socket_path,
                "--vram-limit", "512", NULL }, &out, &err)), 2);
        assert_non_null(strstr(err, "512M"));
        assert_one_line(err);
        free(out);
        free(err);
        assert_int_equal(harness_exit_code(run_daemon(f, (const char *[]){
                "--backend", "sim", "--socket", f->h.socket_path,
                "--vram-limit", "0", NULL }, &out, &err)), 2);
        assert_non_null(strstr(err, "auto"));
        assert_one_line(err);
        free(out);
        free(err);
}

/* A socket in a directory that does not exist: the error says to create
 * it (plain `gpu-memd` fails so where /run/gpu-memd is missing). */
static void test_socket_dir_missing(void **state)
{
        fixture *f = *state;
        char *out = NULL, *err = NULL;
        char path[192];

        harness_init(&f->h, "");
        snprintf(path, sizeof(path), "%s/no-such-dir/gpu-memd.sock", f->h.dir);
        assert_int_equal(harness_exit_code(run_daemon(f, (const char *[]){
                "--backend", "sim", "--socket", path, NULL }, &out, &err)), 1);
        if (!strstr(err, "does not exist: create it (mkdir -p"))
                fail_msg("no hint to create the directory:\n%s", err);
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
        assert_int_equal(harness_exit_code(run_daemon(f, (const char *[]){
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

/* Values the daemon used to check only when it used them: each stops it
 * with status 2 and one line naming the file, the line and the key. */
static void test_daemon_config_checked_at_start(void **state)
{
        fixture *f = *state;

        /* Was "cannot listen: Operation not permitted", status 1, no line. */
        expect_bad_config(f, "[daemon]\nbackend = sim\n\n[metrics]\n"
                          "listen = 0.0.0.0:9477\n", 5, "'listen' in [metrics]");
        expect_bad_config(f, "[metrics]\nlisten = 127.0.0.1\n", 2, "listen");
        /* Was reported against line 4, in [daemon]. */
        expect_bad_config(f, "[daemon]\nbackend = sim\n[pools\nvram_limit = 1G\n",
                          3, "[pools");
        /* Checked after the file, against another key or the machine. */
        expect_bad_config(f, "[limits]\nmax_clients = 8\nadmin_clients = 8\n", 3,
                          "admin_clients");
        expect_bad_config(f, "[daemon]\nsocket_group = gmd-no-such-group\n", 2,
                          "socket_group");
        expect_bad_config(f, "[sim]\ngranularity = 4M\nvram = 2M\n", 3, "vram");
        expect_bad_config(f, "[swap]\nchunk_size = 4K\n", 2, "chunk_size");
        expect_bad_config(f, "[metrics]\nclients = everyone\n", 2, "clients");
}

/* A bad value given as an option is named by the option and the key. */
static void test_daemon_option_named(void **state)
{
        fixture *f = *state;
        char *out = NULL, *err = NULL;
        char path[192];

        harness_init(&f->h, "");
        snprintf(path, sizeof(path), "%s/%0150d.sock", f->h.dir, 0);
        assert_int_equal(harness_exit_code(run_daemon(f, (const char *[]){
                "--backend", "sim", "--socket", path, NULL }, &out, &err)), 2);
        if (!strstr(err, "option --socket") || !strstr(err, "'socket'"))
                fail_msg("stderr does not name --socket and the key:\n%s", err);
        assert_one_line(err);
        free(out);
        free(err);
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
        code = harness_exit_code(run_daemon(f, (const char *[]){
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
        code = harness_exit_code(run_daemon(f, (const char *[]){
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
        assert_int_equal(harness_exit_code(status), 0);
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

#define T(name) \
        HARNESS_TEST(name)

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_json_checker),
                HARNESS_TEST(test_ctl_status_json),
                HARNESS_TEST(test_ctl_status_plain),
                HARNESS_TEST(test_ctl_after_pageout),
                HARNESS_TEST(test_ctl_while_moving),
                HARNESS_TEST(test_ctl_plan),
                HARNESS_TEST(test_ctl_host_links),
                HARNESS_TEST(test_ctl_peers),
                HARNESS_TEST(test_ctl_no_daemon),
                HARNESS_TEST(test_daemon_help_and_version),
                HARNESS_TEST(test_daemon_bad_option),
                HARNESS_TEST(test_socket_dir_missing),
                HARNESS_TEST(test_daemon_bad_config),
                HARNESS_TEST(test_daemon_config_checked_at_start),
                HARNESS_TEST(test_daemon_option_named),
                HARNESS_TEST(test_daemon_missing_config),
                HARNESS_TEST(test_socket_mode),
                HARNESS_TEST(test_stale_socket),
                HARNESS_TEST(test_second_daemon_refused),
                HARNESS_TEST(test_sigint_stops_cleanly),
                HARNESS_TEST(test_stop_with_clients),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
