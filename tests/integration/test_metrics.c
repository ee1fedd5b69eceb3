/*
 * test_metrics — the Prometheus endpoint of the real gpu-memd, scraped over
 * real sockets: a loopback TCP port and a Unix socket. After a client
 * allocates a known size the scrape must say so (pool use, the client's
 * bytes, the allocation counter and the latency histogram); after a
 * pageout and a prefetch, the copy engine's families per device and the
 * client's bytes per tier must say where the bytes went; the link series
 * carry the sim's copy rate, and none is written while it is unknown;
 * every line
 * must be well-formed exposition text; bad requests get 4xx answers and
 * leave the endpoint working; an idle connection is closed; addresses that
 * are not loopback are refused at start. By default the
 * series are per user, with no client names and no pids; connections
 * that hang cannot keep a scraper out; an endpoint that cannot be served
 * (a port in use, a missing directory) leaves the daemon running.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
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

/* The TCP port of the running test's endpoint (start_tcp). */
static int tcp_port;



/* A loopback port nobody listens on now: bind port 0 and let it go. Another
 * process could take it before the daemon does; on a test machine that
 * is rare enough. */
static int free_port(void)
{
        struct sockaddr_in a = { .sin_family = AF_INET,
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(a);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
        close(fd);
        return ntohs(a.sin_port);
}

static int connect_tcp(int port)
{
        struct sockaddr_in a = { .sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        assert_true(fd >= 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
                print_error("connect 127.0.0.1:%d: %s\n", port, strerror(errno));
                close(fd);
                fail();
        }
        return fd;
}

static int connect_unix(const char *path)
{
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        assert_true(fd >= 0);
        assert_true(strlen(path) < sizeof(a.sun_path));
        strcpy(a.sun_path, path);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
                print_error("connect %s: %s\n", path, strerror(errno));
                close(fd);
                fail();
        }
        return fd;
}

/* Everything the peer sends until it closes (timeout_ms at most); -1 in
 * *ret_ms if it did not close in time, else how long it took. */
static char *read_all(int fd, int timeout_ms, int *ret_ms)
{
        uint64_t start = harness_now_ms(), deadline = start + (uint64_t)timeout_ms;
        size_t len = 0, cap = 1 << 16;
        char *text = malloc(cap);

        assert_non_null(text);
        for (;;) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                uint64_t now = harness_now_ms();
                ssize_t n;

                if (now >= deadline) {
                        *ret_ms = -1;
                        break;
                }
                if (poll(&p, 1, (int)(deadline - now)) <= 0)
                        continue;
                if (len + 4096 > cap) {
                        cap *= 2;
                        text = realloc(text, cap);
                        assert_non_null(text);
                }
                n = read(fd, text + len, cap - len - 1);
                if (n <= 0) {
                        *ret_ms = (int)(harness_now_ms() - start);
                        break;
                }
                len += (size_t)n;
        }
        text[len] = '\0';
        return text;
}

/* Send `request` on a fresh connection (fd from connect_*), return the
 * whole answer. */
static char *exchange(int fd, const char *request)
{
        size_t len = strlen(request);
        char *answer;
        int ms;

        assert_int_equal(write(fd, request, len), (ssize_t)len);
        answer = read_all(fd, 5000, &ms);
        close(fd);
        if (ms < 0) {
                print_error("the endpoint did not close within 5 s; got: %.200s\n",
                            answer);
                free(answer);
                fail();
        }
        return answer;
}

static int status_code(const char *answer)
{
        int code = 0;

        if (sscanf(answer, "HTTP/1.%*1[01] %d ", &code) != 1)
                return -1;
        return code;
}

/* The body after the head, checked against Content-Length. */
static const char *body_of(const char *answer)
{
        const char *body = strstr(answer, "\r\n\r\n");
        const char *cl = strstr(answer, "\r\nContent-Length: ");

        assert_non_null(body);
        assert_non_null(cl);
        assert_true(cl < body);
        body += 4;
        assert_int_equal(strtoul(cl + 18, NULL, 10), strlen(body));
        return body;
}

/* The value of the sample line that starts with `series` (name and labels
 * exactly as written), or fail. */
static double sample(const char *body, const char *series)
{
        size_t n = strlen(series);

        for (const char *line = body; line && *line;
             line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
                if (strncmp(line, series, n) == 0 && line[n] == ' ')
                        return strtod(line + n + 1, NULL);
        }
        print_error("no sample '%s' in:\n%s\n", series, body);
        fail();
        return 0;
}

/* Every line is a HELP or TYPE comment or "name{labels} value", names are
 * Prometheus names, and each sample's family was typed before it. */
static void check_exposition(const char *body)
{
        const char *line = body;
        char typed[64][64];
        unsigned n_typed = 0;

        assert_true(strlen(body) > 0 && body[strlen(body) - 1] == '\n');
        while (*line) {
                const char *end = strchr(line, '\n');
                char text[512], name[64];
                size_t len = (size_t)(end - line), nlen;
                bool known = false;

                assert_true(len < sizeof(text));
                memcpy(text, line, len);
                text[len] = '\0';
                line = end + 1;
                if (strncmp(text, "# HELP ", 7) == 0)
                        continue;
                if (strncmp(text, "# TYPE ", 7) == 0) {
                        char type[32];

                        assert_int_equal(sscanf(text + 7, "%63s %31s", name, type), 2);
                        assert_true(strcmp(type, "gauge") == 0 ||
                                    strcmp(type, "counter") == 0 ||
                                    strcmp(type, "histogram") == 0);
                        assert_true(n_typed < 64);
                        strcpy(typed[n_typed++], name);
                        continue;
                }
                nlen = strspn(text, "abcdefghijklmnopqrstuvwxyz"
                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:");
                if (nlen == 0 || nlen >= sizeof(name)) {
                        print_error("bad line: '%s'\n", text);
                        fail();
                }
                memcpy(name, text, nlen);
                name[nlen] = '\0';
                for (unsigned i = 0; i < n_typed; i++) {
                        size_t tl = strlen(typed[i]);

                        if (strncmp(name, typed[i], tl) == 0 &&
                            (name[tl] == '\0' || strcmp(name + tl, "_bucket") == 0 ||
                             strcmp(name + tl, "_sum") == 0 ||
                             strcmp(name + tl, "_count") == 0))
                                known = true;
                }
                if (!known) {
                        print_error("sample of an untyped family: '%s'\n", text);
                        fail();
                }
                /* The value after the last space must be a number. */
                {
                        const char *v = strrchr(text, ' ');
                        char *vend;

                        assert_non_null(v);
                        strtod(v + 1, &vend);
                        assert_true(vend != v + 1 && *vend == '\0');
                }
        }
}

static char *scrape_tcp(int port)
{
        return exchange(connect_tcp(tcp_port),
                        "GET /metrics HTTP/1.1\r\nHost: localhost\r\n"
                        "User-Agent: test_metrics\r\nAccept: text/plain\r\n\r\n");
}

/* The daemon's socket accepts a moment before the endpoint listens. */
static void wait_serving(fixture *f)
{
        char *line = harness_wait_log(&f->h, "metrics: serving", 5000);

        if (!line) {
                char *log = harness_read_log(&f->h);

                print_error("the endpoint did not start; log:\n%s\n", log);
                free(log);
                fail();
        }
        free(line);
}

static void start_tcp(fixture *f, const char *extra)
{
        char config[256];

        tcp_port = free_port();
        snprintf(config, sizeof(config), "[metrics]\nlisten = 127.0.0.1:%d\n%s",
                 tcp_port, extra ? extra : "");
        harness_start_small(&f->h, config);
        wait_serving(f);
}

/* ---- tests ---------------------------------------------------------------- */

static void test_scrape_after_alloc(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;
        const char *body;
        char *answer;

        start_tcp(f, "clients = names\n");
        f->client = harness_client(&f->h, "scraped");
        assert_int_equal(gmd_alloc(f->client, 6 * MiB, 0, GMD_ALLOC_SWAPPABLE,
                                   GMD_NO_WAIT, &b), 0);
        /* A second client whose name needs escaping, holding nothing. */
        f->other = harness_client(&f->h, "we\"ird\\name");

        answer = scrape_tcp(tcp_port);
        assert_int_equal(status_code(answer), 200);
        assert_non_null(strstr(answer, "\r\nContent-Type: text/plain; version=0.0.4"));
        body = body_of(answer);
        check_exposition(body);

        assert_true(sample(body, "gpumemd_pool_used_bytes{device=\"0\",tier=\"vram\"}")
                    == 6.0 * MiB);
        assert_true(sample(body, "gpumemd_pool_capacity_bytes{device=\"0\",tier=\"vram\"}")
                    == 64.0 * MiB);
        /* The client id is the daemon's: find the line by pid and name. */
        {
                char needle[128];
                const char *line;

                snprintf(needle, sizeof(needle), "\",pid=\"%d\",uid=\"%u\",name=\"scraped\"} ",
                         (int)getpid(), (unsigned)getuid());
                line = strstr(body, needle);
                if (!line) {
                        print_error("no client line with '%s' in:\n%s\n", needle, body);
                        fail();
                }
                assert_true(strtod(line + strlen(needle), NULL) == 6.0 * MiB);
        }
        assert_non_null(strstr(body, ",name=\"we\\\"ird\\\\name\"} 0\n"));
        assert_true(sample(body, "gpumemd_clients") == 2);
        assert_true(sample(body, "gpumemd_buffers") == 1);
        assert_true(sample(body, "gpumemd_waiting_allocations") == 0);
        assert_true(sample(body, "gpumemd_allocations_total") == 1);
        assert_true(sample(body, "gpumemd_frees_total") == 0);
        assert_true(sample(body, "gpumemd_allocation_latency_seconds_count") == 1);
        assert_true(sample(body,
                "gpumemd_allocation_latency_seconds_bucket{le=\"+Inf\"}") == 1);
        assert_true(sample(body, "gpumemd_allocation_latency_seconds_sum") > 0);
        assert_true(sample(body, "gpumemd_connections_total") >= 2);
        assert_true(sample(body, "gpumemd_bytes_moved_total{direction=\"out\"}") >= 0);
        assert_true(sample(body, "gpumemd_errors_total{kind=\"no_memory\"}") == 0);
        assert_true(sample(body, "gpumemd_uptime_seconds") >= 0);
        assert_true(sample(body, "gpumemd_info{version=\"" GMD_VERSION_STRING
                           "\",backend=\"sim\"}") == 1);
        /* Unthrottled sim copies: the link is not known, so no sample. */
        assert_non_null(strstr(body, "# TYPE gpumemd_link_bytes_per_second gauge\n"));
        assert_null(strstr(body, "gpumemd_link_bytes_per_second{"));
        free(answer);

        /* A request that fails is counted by kind; a free is counted. */
        {
                gmd_buffer *big = NULL;

                assert_int_equal(gmd_alloc(f->client, 128 * MiB, 0, 0,
                                           GMD_NO_WAIT, &big), GMD_ETOOLARGE);
        }
        assert_int_equal(gmd_free(f->client, b), 0);
        answer = scrape_tcp(tcp_port);
        body = body_of(answer);
        check_exposition(body);
        assert_true(sample(body, "gpumemd_pool_used_bytes{device=\"0\",tier=\"vram\"}") == 0);
        assert_true(sample(body, "gpumemd_frees_total") == 1);
        assert_true(sample(body, "gpumemd_buffers") == 0);
        assert_true(sample(body, "gpumemd_errors_total{kind=\"too_large\"}") == 1);
        free(answer);
        harness_stop(&f->h);
}

/* The line of client `name`'s sample of `family` with `extra` labels
 * after the name ("" or ",tier=\"host\""): its value. */
static double client_sample(const char *body, const char *family,
                            const char *name, const char *extra)
{
        char needle[192];
        const char *line;

        snprintf(needle, sizeof(needle), "\",pid=\"%d\",uid=\"%u\",name=\"%s\"%s} ",
                 (int)getpid(), (unsigned)getuid(), name, extra);
        for (line = strstr(body, needle); line; line = strstr(line + 1, needle)) {
                const char *start = line;

                while (start > body && start[-1] != '\n')
                        start--;
                if (strncmp(start, family, strlen(family)) == 0 &&
                    start[strlen(family)] == '{')
                        return strtod(line + strlen(needle), NULL);
        }
        print_error("no %s line with '%s' in:\n%s\n", family, needle, body);
        fail();
        return 0;
}

/*
 * 8 MiB paged out, then fetched back: device 0's queues are empty again,
 * its counters moved 8 MiB each way and took time doing it, the global
 * counters agree, and the client's bytes moved from tier to tier.
 */
static void test_scrape_after_pageout(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;
        const char *body;
        char *answer;

        /* Freed buffers go back at once (ctest sets this for every
         * integration test; a run by hand needs it too). */
        setenv(GMD_CACHE_ENV, "0", 1);
        start_tcp(f, "clients = names\n[pools]\nhost_limit = 64M\n");
        f->client = harness_client(&f->h, "mover");
        assert_int_equal(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SWAPPABLE,
                                   GMD_NO_WAIT, &b), 0);
        assert_int_equal(gmd_release(f->client, b), 0);

        answer = scrape_tcp(tcp_port);
        body = body_of(answer);
        check_exposition(body);
        assert_true(sample(body, "gpumemd_copy_queue_depth{device=\"0\",direction=\"out\"}") == 0);
        assert_true(sample(body, "gpumemd_device_bytes_moved_total{device=\"0\",direction=\"out\"}") == 0);
        assert_true(client_sample(body, "gpumemd_client_tier_bytes", "mover",
                                  ",tier=\"vram\"") == 8.0 * MiB);
        assert_true(client_sample(body, "gpumemd_client_tier_bytes", "mover",
                                  ",tier=\"host\"") == 0);
        /* The host arena: host_stock's default, 25% of host_limit. */
        assert_true(sample(body, "gpumemd_host_arena_bytes{device=\"0\",state=\"pinned\"}")
                    == 16.0 * MiB);
        assert_true(sample(body, "gpumemd_host_arena_bytes{device=\"0\",state=\"free\"}")
                    == 16.0 * MiB);
        /* Pinned: the arena in full, nothing else yet; against host_limit. */
        assert_true(sample(body, "gpumemd_host_pinned_bytes{state=\"pinned\"}") == 16.0 * MiB);
        assert_true(sample(body, "gpumemd_host_pinned_bytes{state=\"limit\"}") == 64.0 * MiB);
        free(answer);

        assert_int_equal(gmd_pageout(f->client, b), 0);
        assert_int_equal(gmd_wait(f->client, b, 5000), 0);
        answer = scrape_tcp(tcp_port);
        body = body_of(answer);
        check_exposition(body);
        assert_true(sample(body, "gpumemd_pool_used_bytes{device=\"0\",tier=\"host\"}")
                    == 8.0 * MiB);
        /* The VRAM it left is kept for its swap-in, and counted. */
        assert_true(sample(body, "gpumemd_pool_used_bytes{device=\"0\",tier=\"vram\"}")
                    == 8.0 * MiB);
        assert_true(sample(body, "gpumemd_vram_kept_bytes{device=\"0\"}") == 8.0 * MiB);
        assert_true(sample(body, "gpumemd_vram_kept_total{outcome=\"reused\"}") == 0);
        assert_true(sample(body, "gpumemd_copy_queue_depth{device=\"0\",direction=\"out\"}") == 0);
        assert_true(sample(body, "gpumemd_copy_queue_depth{device=\"0\",direction=\"in\"}") == 0);
        assert_true(sample(body, "gpumemd_device_bytes_moved_total{device=\"0\",direction=\"out\"}")
                    == 8.0 * MiB);
        assert_true(sample(body, "gpumemd_device_bytes_moved_total{device=\"0\",direction=\"in\"}") == 0);
        assert_true(sample(body, "gpumemd_device_copy_seconds_total{device=\"0\",direction=\"out\"}") > 0);
        assert_true(sample(body, "gpumemd_device_copy_seconds_total{device=\"0\",direction=\"in\"}") == 0);
        assert_true(sample(body, "gpumemd_bytes_moved_total{direction=\"out\"}") == 8.0 * MiB);
        assert_true(client_sample(body, "gpumemd_client_bytes", "mover", "") == 8.0 * MiB);
        assert_true(client_sample(body, "gpumemd_client_tier_bytes", "mover",
                                  ",tier=\"vram\"") == 0);
        assert_true(client_sample(body, "gpumemd_client_tier_bytes", "mover",
                                  ",tier=\"host\"") == 8.0 * MiB);
        /* Its host copy is in the arena. */
        assert_true(sample(body, "gpumemd_host_arena_bytes{device=\"0\",state=\"pinned\"}")
                    == 16.0 * MiB);
        assert_true(sample(body, "gpumemd_host_arena_bytes{device=\"0\",state=\"free\"}")
                    == 8.0 * MiB);
        free(answer);

        assert_int_equal(gmd_prefetch(f->client, b), 0);
        assert_int_equal(gmd_wait(f->client, b, 5000), 0);
        answer = scrape_tcp(tcp_port);
        body = body_of(answer);
        check_exposition(body);
        assert_true(sample(body, "gpumemd_device_bytes_moved_total{device=\"0\",direction=\"out\"}")
                    == 8.0 * MiB);
        assert_true(sample(body, "gpumemd_device_bytes_moved_total{device=\"0\",direction=\"in\"}")
                    == 8.0 * MiB);
        assert_true(sample(body, "gpumemd_device_copy_seconds_total{device=\"0\",direction=\"in\"}") > 0);
        assert_true(sample(body, "gpumemd_bytes_moved_total{direction=\"in\"}") == 8.0 * MiB);
        /* A prefetch nobody waited for. */
        assert_true(sample(body, "gpumemd_bytes_moved_waited_total") == 0);
        /* It came back into the VRAM it left. */
        assert_true(sample(body, "gpumemd_vram_kept_bytes{device=\"0\"}") == 0);
        assert_true(sample(body, "gpumemd_vram_kept_total{outcome=\"reused\"}") == 1);
        assert_true(sample(body, "gpumemd_vram_kept_total{outcome=\"released\"}") == 0);
        assert_true(sample(body, "gpumemd_pool_used_bytes{device=\"0\",tier=\"vram\"}")
                    == 8.0 * MiB);
        assert_true(client_sample(body, "gpumemd_client_tier_bytes", "mover",
                                  ",tier=\"vram\"") == 8.0 * MiB);
        assert_true(client_sample(body, "gpumemd_client_tier_bytes", "mover",
                                  ",tier=\"host\"") == 0);
        free(answer);

        /* Out again (prefetched, it is still released), and back
         * through an acquire: waited for. */
        assert_int_equal(gmd_pageout(f->client, b), 0);
        assert_int_equal(gmd_wait(f->client, b, 5000), 0);
        assert_int_equal(gmd_acquire(f->client, b, 5000), 0);
        answer = scrape_tcp(tcp_port);
        body = body_of(answer);
        check_exposition(body);
        assert_true(sample(body, "gpumemd_bytes_moved_total{direction=\"in\"}") == 16.0 * MiB);
        assert_true(sample(body, "gpumemd_bytes_moved_waited_total") == 8.0 * MiB);
        free(answer);

        assert_int_equal(gmd_free(f->client, b), 0);
        harness_stop(&f->h);
}

/* While a throttled move runs, its queue holds it; the link shows the
 * throttle. */
static void test_scrape_queue_depth(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;
        const char *body;
        char *answer;

        setenv(GMD_CACHE_ENV, "0", 1);
        start_tcp(f, "[pools]\nhost_limit = 64M\n[sim]\ncopy_rate = 8M\n");
        f->client = harness_client(&f->h, "slow");
        assert_int_equal(gmd_alloc(f->client, 16 * MiB, 0, GMD_ALLOC_SWAPPABLE,
                                   GMD_NO_WAIT, &b), 0);
        assert_int_equal(gmd_release(f->client, b), 0);
        assert_int_equal(gmd_pageout(f->client, b), 0);
        answer = scrape_tcp(tcp_port);
        body = body_of(answer);
        check_exposition(body);
        assert_true(sample(body, "gpumemd_copy_queue_depth{device=\"0\",direction=\"out\"}") == 1);
        assert_true(sample(body, "gpumemd_copy_queue_depth{device=\"0\",direction=\"in\"}") == 0);
        /* The sim's link is its copy rate, each way. */
        assert_true(sample(body, "gpumemd_link_bytes_per_second{device=\"0\","
                           "direction=\"in\"}") == 8.0 * MiB);
        assert_true(sample(body, "gpumemd_link_bytes_per_second{device=\"0\","
                           "direction=\"out\"}") == 8.0 * MiB);
        free(answer);
        /* The status reply carries the same figures, on the VRAM pool. */
        {
                gmd_status *st = NULL;

                assert_int_equal(gmd_query_status(f->client, GMD_STATUS_POOLS,
                                                  0, &st), 0);
                assert_int_equal(st->n_pools, 2);
                assert_int_equal(st->pools[0].tier, GMD_TIER_VRAM);
                assert_int_equal(st->pools[0].link_bytes_per_s_in, 8 * MiB);
                assert_int_equal(st->pools[0].link_bytes_per_s_out, 8 * MiB);
                assert_int_equal(st->pools[1].link_bytes_per_s_in, 0);
                gmd_status_free(st);
        }
        assert_int_equal(gmd_wait(f->client, b, 10000), 0);
        assert_int_equal(gmd_free(f->client, b), 0);
        harness_stop(&f->h);
}

static void test_bad_requests(void **state)
{
        fixture *f = *state;
        char *answer;
        int fd, ms;

        start_tcp(f, NULL);

        answer = exchange(connect_tcp(tcp_port), "GET /nope HTTP/1.0\r\n\r\n");
        assert_int_equal(status_code(answer), 404);
        body_of(answer);
        free(answer);

        answer = exchange(connect_tcp(tcp_port), "\x16\x03\x01 garbage\r\n\r\n");
        assert_int_equal(status_code(answer), 400);
        free(answer);

        /* Garbage without the blank line is answered at once too. */
        answer = exchange(connect_tcp(tcp_port), "HELLO THERE\n");
        assert_int_equal(status_code(answer), 400);
        free(answer);

        answer = exchange(connect_tcp(tcp_port), "POST /metrics HTTP/1.1\r\n"
                          "Content-Length: 3\r\n\r\nabc");
        assert_int_equal(status_code(answer), 405);
        free(answer);

        /* A head that arrives a few bytes at a time. */
        {
                static const char slow[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";

                fd = connect_tcp(tcp_port);
                for (size_t i = 0; i < sizeof(slow) - 1; i += 3) {
                        size_t n = sizeof(slow) - 1 - i < 3 ? sizeof(slow) - 1 - i : 3;

                        assert_int_equal(write(fd, slow + i, n), (ssize_t)n);
                        harness_sleep_ms(5);
                }
                answer = read_all(fd, 5000, &ms);
                close(fd);
                assert_int_equal(status_code(answer), 200);
                check_exposition(body_of(answer));
                free(answer);
        }

        /* HEAD: the headers alone. The query string is ignored. */
        answer = exchange(connect_tcp(tcp_port), "HEAD /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert_int_equal(status_code(answer), 200);
        assert_non_null(strstr(answer, "\r\n\r\n"));
        assert_string_equal(strstr(answer, "\r\n\r\n"), "\r\n\r\n");
        free(answer);

        /* A head longer than the endpoint reads. */
        {
                static char big[20000];
                size_t n = sizeof(big) - 5;

                memset(big, 'a', sizeof(big));
                memcpy(big, "GET /metrics HTTP/1.0\r\nX-Long: ", 31);
                memcpy(big + n, "\r\n\r\n", 5);
                fd = connect_tcp(tcp_port);
                /* The daemon may answer and close before reading it all. */
                (void)!write(fd, big, strlen(big));
                answer = read_all(fd, 5000, &ms);
                close(fd);
                assert_true(ms >= 0);
                assert_int_equal(status_code(answer), 431);
                free(answer);
        }

        /* A connection that says nothing is closed after a few seconds. */
        fd = connect_tcp(tcp_port);
        answer = read_all(fd, 10000, &ms);
        close(fd);
        assert_string_equal(answer, "");
        assert_true(ms >= 1000 && ms <= 9000);
        free(answer);

        /* The endpoint still serves, and the daemon's clients saw nothing. */
        answer = scrape_tcp(tcp_port);
        assert_int_equal(status_code(answer), 200);
        check_exposition(body_of(answer));
        free(answer);

        /* Stopping with connections open (one silent, one halfway through
         * its head) closes them and exits cleanly (sanitizer builds check
         * that nothing leaks). */
        fd = connect_tcp(tcp_port);
        {
                int half = connect_tcp(tcp_port);

                assert_int_equal(write(half, "GET /met", 8), 8);
                harness_sleep_ms(100);
                harness_stop(&f->h);
                close(half);
        }
        close(fd);
}

/* More connections than the cap at once: each new one closes the oldest,
 * so connections that hang never keep a scraper out (before, 16 silent
 * ones left it refused until their deadline). */
static void test_connection_cap(void **state)
{
        fixture *f = *state;
        int fds[40];
        char *answer;

        start_tcp(f, NULL);
        for (size_t i = 0; i < 40; i++)
                fds[i] = connect_tcp(tcp_port);
        for (int round = 0; round < 5; round++) {
                answer = scrape_tcp(tcp_port);
                assert_int_equal(status_code(answer), 200);
                free(answer);
        }
        for (size_t i = 0; i < 40; i++)
                close(fds[i]);
        assert_true(harness_log_count(&f->h, "closing the oldest") >= 1);
        harness_stop(&f->h);
}

/* The default: series per user, no client names, no pids (any local user
 * may scrape a loopback port, and per-process series churn). */
static void test_default_per_user(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;
        char series[128], *answer;
        const char *body;

        start_tcp(f, NULL);
        f->client = harness_client(&f->h, "secretname");
        f->other = harness_client(&f->h, "another");
        assert_int_equal(gmd_alloc(f->client, 4 * MiB, 0, GMD_ALLOC_SWAPPABLE,
                                   GMD_NO_WAIT, &b), 0);
        answer = scrape_tcp(tcp_port);
        body = body_of(answer);
        check_exposition(body);
        assert_null(strstr(body, "secretname"));
        assert_null(strstr(body, "pid=\""));
        assert_null(strstr(body, "gpumemd_client_bytes"));
        snprintf(series, sizeof(series), "gpumemd_user_clients{uid=\"%u\"}",
                 (unsigned)getuid());
        assert_true(sample(body, series) == 2);
        snprintf(series, sizeof(series),
                 "gpumemd_user_bytes{uid=\"%u\",tier=\"vram\"}", (unsigned)getuid());
        assert_true(sample(body, series) == 4.0 * MiB);
        free(answer);
        assert_int_equal(gmd_free(f->client, b), 0);
        harness_stop(&f->h);
}

/* clients = ids: per-client series with pids, still no names. */
static void test_ids_without_names(void **state)
{
        fixture *f = *state;
        char needle[128], *answer;
        const char *body;

        start_tcp(f, "clients = ids\n");
        f->client = harness_client(&f->h, "secretname");
        answer = scrape_tcp(tcp_port);
        body = body_of(answer);
        check_exposition(body);
        snprintf(needle, sizeof(needle), ",pid=\"%d\",uid=\"%u\"} 0\n",
                 (int)getpid(), (unsigned)getuid());
        assert_non_null(strstr(body, needle));
        assert_null(strstr(body, "secretname"));
        free(answer);
        harness_stop(&f->h);
}

/* The error names the key and the config line that set it: the value
 * was good, the machine would not serve it. */
static void assert_listen_named(const fixture *f)
{
        char needle[192];

        snprintf(needle, sizeof(needle), "(key 'listen' in [metrics], %s:",
                 f->h.config_path);
        if (harness_log_count(&f->h, needle) != 1)
                fail_msg("the log does not name %s once:\n%s", needle,
                         harness_read_log(&f->h));
}

/* An endpoint that cannot be served does not stop the daemon: a unix
 * socket in a missing directory, a port another process holds. */
static void test_unservable_endpoint(void **state)
{
        fixture *f = *state;
        struct sockaddr_in a = { .sin_family = AF_INET,
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(a);
        char config[256];
        int holder;

        holder = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(holder >= 0);
        assert_int_equal(bind(holder, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(listen(holder, 1), 0);
        assert_int_equal(getsockname(holder, (struct sockaddr *)&a, &len), 0);
        snprintf(config, sizeof(config), "[metrics]\nlisten = 127.0.0.1:%d\n",
                 ntohs(a.sin_port));
        harness_start_small(&f->h, config);
        f->client = harness_client(&f->h, "served");
        gmd_status_free(harness_status(f->client));
        assert_true(harness_log_count(&f->h, "gpu-memd runs without it") == 1);
        assert_listen_named(f);
        f->client = gmd_disconnect(f->client);
        harness_stop(&f->h);
        close(holder);
        harness_cleanup(&f->h);

        memset(&f->h, 0, sizeof(f->h));
        harness_start_small(&f->h, "[metrics]\nlisten = unix:/nonexistent-gmd/m.sock\n");
        f->client = harness_client(&f->h, "served");
        gmd_status_free(harness_status(f->client));
        assert_true(harness_log_count(&f->h, "gpu-memd runs without it") == 1);
        assert_listen_named(f);
        f->client = gmd_disconnect(f->client);
        harness_stop(&f->h);
}

static void test_unix_socket(void **state)
{
        fixture *f = *state;
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        char line[256], *answer;
        struct stat st;
        FILE *config;
        int fd;

        harness_init(&f->h, HARNESS_SMALL_CONFIG);
        /* A stale socket file, as a daemon that died leaves it. */
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        strcpy(a.sun_path, f->h.metrics_path);
        assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        close(fd);
        assert_int_equal(stat(f->h.metrics_path, &st), 0);

        config = fopen(f->h.config_path, "a");
        assert_non_null(config);
        snprintf(line, sizeof(line), "[metrics]\nlisten = unix:%s\n", f->h.metrics_path);
        fputs(line, config);
        fclose(config);
        harness_start(&f->h, NULL);
        wait_serving(f);

        f->client = harness_client(&f->h, "unixscrape");
        answer = exchange(connect_unix(f->h.metrics_path),
                          "GET /metrics HTTP/1.0\r\n\r\n");
        assert_int_equal(status_code(answer), 200);
        check_exposition(body_of(answer));
        assert_true(sample(body_of(answer), "gpumemd_clients") == 1);
        free(answer);

        answer = exchange(connect_unix(f->h.metrics_path), "GET /x HTTP/1.0\r\n\r\n");
        assert_int_equal(status_code(answer), 404);
        free(answer);

        f->client = gmd_disconnect(f->client);
        harness_stop(&f->h);
        assert_int_equal(stat(f->h.metrics_path, &st), -1);
        assert_int_equal(errno, ENOENT);
}

/* Only loopback: anything else stops the daemon at start with status 2,
 * as a bad config line, naming the file, the line and the key. */
static void test_refuses_non_loopback(void **state)
{
        fixture *f = *state;
        const char *argv[] = { GMD_DAEMON_PATH, "--socket", NULL, "--config", NULL,
                               NULL };
        char *err = NULL, where[192];
        int status;

        harness_init(&f->h, "[daemon]\nbackend = sim\n"
                     "[metrics]\nlisten = 192.0.2.1:9100\n");
        argv[2] = f->h.socket_path;
        argv[4] = f->h.config_path;
        status = harness_run(&f->h, NULL, argv, NULL, &err, 10000);
        assert_int_equal(harness_exit_code(status), 2);
        snprintf(where, sizeof(where), "%s:4:", f->h.config_path);
        if (!strstr(err, "loopback") || !strstr(err, where) ||
            !strstr(err, "'listen' in [metrics]")) {
                print_error("stderr does not name %s, the key and loopback:\n%s\n",
                            where, err);
                fail();
        }
        free(err);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                HARNESS_TEST(test_scrape_after_alloc),
                HARNESS_TEST(test_scrape_after_pageout),
                HARNESS_TEST(test_scrape_queue_depth),
                HARNESS_TEST(test_bad_requests),
                HARNESS_TEST(test_connection_cap),
                HARNESS_TEST(test_default_per_user),
                HARNESS_TEST(test_ids_without_names),
                HARNESS_TEST(test_unservable_endpoint),
                HARNESS_TEST(test_unix_socket),
                HARNESS_TEST(test_refuses_non_loopback),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
