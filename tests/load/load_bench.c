/*
 * load_bench — the load test of issue 10's "Done when": many ordinary
 * clients allocating and freeing for a while, plus one hostile user
 * (connection flood, fd flood, reply flood, a huge waiting request), and
 * the allocation latency of one more ordinary client (the probe) measured
 * idle first, then under that load. It prints the figures; it does not
 * pass or fail (scripts/load-test.sh runs it against a sim daemon; too
 * long for `make test`).
 *
 *   load_bench [--clients N] [--seconds S] [--idle S] [--hostile]
 *
 * The socket is $GPU_MEMD_SOCKET. As root the hostile user is uid 65534
 * (a child process drops to it), so the daemon's per-user bounds apply to
 * it and not to the others; otherwise it runs as the caller's user.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpumem.h"
#include "gpumem.pb-c.h"
#include "wire.h"

#define MiB (1ull << 20)
#define PROBE_SIZE (2 * MiB)
#define MAX_SAMPLES 200000

static atomic_bool stop_load;
static atomic_ulong load_allocs, load_errors;
static const char *socket_path;

static uint64_t now_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return x < y ? -1 : x > y;
}

/* ---- the probe: one alloc + free every 10 ms, timed ------------------------ */

typedef struct samples {
        uint64_t us[MAX_SAMPLES];
        size_t n;
        unsigned errors;
} samples;

static void probe_run(gmd_client *c, double seconds, samples *s)
{
        uint64_t end = now_us() + (uint64_t)(seconds * 1e6);

        s->n = 0;
        s->errors = 0;
        while (now_us() < end && s->n < MAX_SAMPLES) {
                gmd_buffer *b = NULL;
                uint64_t t0 = now_us();
                int r = gmd_alloc(c, PROBE_SIZE, 0, GMD_ALLOC_SWAPPABLE, 2000, &b);

                if (r < 0) {
                        s->errors++;
                } else {
                        s->us[s->n++] = now_us() - t0;
                        gmd_free(c, b);
                }
                usleep(10000);
        }
        qsort(s->us, s->n, sizeof(s->us[0]), cmp_u64);
}

static uint64_t pct(const samples *s, double p)
{
        return s->n ? s->us[(size_t)((double)(s->n - 1) * p)] : 0;
}

/* ---- ordinary clients ---------------------------------------------------------- */

static void *client_main(void *arg)
{
        unsigned seed = (unsigned)(uintptr_t)arg;
        gmd_buffer *held[2] = { NULL, NULL };
        gmd_client *c = NULL;
        char name[32];

        snprintf(name, sizeof(name), "load%u", seed);
        if (gmd_connect(socket_path, name, &c) < 0) {
                fprintf(stderr, "client %u: %s\n", seed, gmd_last_error());
                atomic_fetch_add(&load_errors, 1);
                return NULL;
        }
        while (!atomic_load(&stop_load)) {
                unsigned slot = (unsigned)rand_r(&seed) % 2;
                size_t size = (1 + (unsigned)rand_r(&seed) % 4) * MiB;

                if (held[slot]) {
                        gmd_free(c, held[slot]);
                        held[slot] = NULL;
                }
                if (gmd_alloc(c, size, 0, GMD_ALLOC_SWAPPABLE, 2000, &held[slot]) < 0) {
                        atomic_fetch_add(&load_errors, 1);
                        held[slot] = NULL;
                } else {
                        atomic_fetch_add(&load_allocs, 1);
                }
                usleep(2000 + (unsigned)rand_r(&seed) % 8000);
        }
        gmd_disconnect(c);
        return NULL;
}

/* ---- the hostile user ------------------------------------------------------------ */

static int raw_connect(void)
{
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

        if (fd < 0)
                return -1;
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", socket_path);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 && errno != EAGAIN) {
                close(fd);
                return -1;
        }
        return fd;
}

/* Was `fd` closed by the daemon (refused, timed out, disconnected)? */
static bool raw_dead(int fd)
{
        char buf[256];
        ssize_t n;

        for (;;) {
                n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
                if (n == 0)
                        return true;
                if (n < 0)
                        return errno != EAGAIN;
        }
}

static void send_hello(int fd)
{
        Gmd__Hello hello = GMD__HELLO__INIT;
        uint8_t payload[128];
        size_t len;

        hello.min_version = GMD_WIRE_MIN_VERSION;
        hello.max_version = GMD_WIRE_VERSION;
        hello.client_name = "replyflood";
        len = gmd__hello__pack(&hello, payload);
        gmd_wire_send(fd, GMD__MSG_TYPE__MSG_HELLO, 1, payload, (uint32_t)len, NULL, 0);
}

/* Status requests never read: the daemon must bound what it queues. */
static void send_status(int fd)
{
        Gmd__StatusRequest req = GMD__STATUS_REQUEST__INIT;
        uint8_t payload[32];
        size_t len;

        req.what = GMD__STATUS_WHAT__STATUS_BUFFERS;
        len = gmd__status_request__pack(&req, payload);
        for (int i = 0; i < 64; i++)
                if (gmd_wire_send(fd, GMD__MSG_TYPE__MSG_STATUS, (uint32_t)i + 2,
                                  payload, (uint32_t)len, NULL, 0) < 0)
                        break;
}

static void *huge_wait_main(void *arg)
{
        gmd_client *c = arg;
        gmd_status *st = NULL;
        gmd_buffer *b = NULL;
        uint64_t size = 512 * MiB;

        /* The whole VRAM pool: while anything else is held it waits, for
         * the whole run. */
        if (gmd_query_status(c, GMD_STATUS_POOLS, 0, &st) == 0 && st->n_pools)
                size = st->pools[0].capacity;
        gmd_status_free(st);
        if (gmd_alloc(c, (size_t)size, 0, GMD_ALLOC_SWAPPABLE, GMD_WAIT_FOREVER,
                      &b) < 0)
                printf("hostile: the huge request failed: %s\n", gmd_last_error());
        else
                printf("hostile: the huge request was served\n");
        fflush(stdout);
        return NULL;
}

static void hostile_run(double seconds)
{
        enum { SILENT = 256, FLOOD = 8, FDS = 100000 };
        int silent[SILENT], flood[FLOOD];
        unsigned long reconnects = 0, refusals = 0, flood_drops = 0, fds = 0;
        uint64_t end = now_us() + (uint64_t)(seconds * 1e6);
        gmd_client *fdc = NULL, *waiter = NULL;
        gmd_buffer **bufs = calloc(FDS, sizeof(*bufs));
        pthread_t wait_thread;
        int r;

        /* fd flood first: tiny buffers until the daemon says no. */
        if (gmd_connect(socket_path, "fdflood", &fdc) == 0 && bufs) {
                while (fds < FDS && (r = gmd_alloc(fdc, 4096, 0, GMD_ALLOC_SWAPPABLE,
                                                    GMD_NO_WAIT, &bufs[fds])) == 0)
                        fds++;
                printf("hostile: fd flood held %lu buffers, then: %s\n", fds,
                       gmd_last_error());
                /* One back, for the huge request's buffer. */
                if (fds)
                        gmd_free(fdc, bufs[--fds]);
        }
        if (gmd_connect(socket_path, "hugewait", &waiter) == 0)
                pthread_create(&wait_thread, NULL, huge_wait_main, waiter);
        /* The reply flood first: the silent ones then take the rest of
         * this user's connections and are refused past them. */
        for (int i = 0; i < FLOOD; i++) {
                flood[i] = raw_connect();
                if (flood[i] >= 0)
                        send_hello(flood[i]);
        }
        usleep(100000);
        for (int i = 0; i < SILENT; i++)
                silent[i] = raw_connect();
        while (now_us() < end) {
                for (int i = 0; i < SILENT; i++) {
                        if (silent[i] >= 0 && !raw_dead(silent[i]))
                                continue;
                        if (silent[i] >= 0) {
                                close(silent[i]);
                                refusals++;
                        }
                        silent[i] = raw_connect();
                        reconnects++;
                }
                for (int i = 0; i < FLOOD; i++) {
                        if (flood[i] < 0 || raw_dead(flood[i])) {
                                if (flood[i] >= 0) {
                                        close(flood[i]);
                                        flood_drops++;
                                }
                                flood[i] = raw_connect();
                                if (flood[i] >= 0)
                                        send_hello(flood[i]);
                        }
                        if (flood[i] >= 0)
                                send_status(flood[i]);
                }
                usleep(20000);
        }
        printf("hostile: %lu silent connections closed by the daemon (refused or "
               "timed out), %lu reconnects; %lu reply-flood connections "
               "dropped\n", refusals, reconnects, flood_drops);
        fflush(stdout);
        _exit(0);       /* the daemon cleans up after the connections */
}

/* ---- main ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
        unsigned n_clients = 64;
        double seconds = 60, idle = 10;
        bool hostile = false;
        static samples idle_s, load_s;
        pthread_t *threads;
        gmd_client *probe = NULL;
        pid_t hostile_pid = -1;

        for (int i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "--clients") && i + 1 < argc)
                        n_clients = (unsigned)atoi(argv[++i]);
                else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
                        seconds = atof(argv[++i]);
                else if (!strcmp(argv[i], "--idle") && i + 1 < argc)
                        idle = atof(argv[++i]);
                else if (!strcmp(argv[i], "--hostile"))
                        hostile = true;
                else {
                        fprintf(stderr, "usage: load_bench [--clients N] [--seconds S] "
                                "[--idle S] [--hostile]\n");
                        return 2;
                }
        }
        socket_path = getenv(GMD_SOCKET_ENV);
        if (!socket_path) {
                fprintf(stderr, "load_bench: set %s\n", GMD_SOCKET_ENV);
                return 2;
        }
        if (gmd_connect(socket_path, "probe", &probe) < 0) {
                fprintf(stderr, "load_bench: %s\n", gmd_last_error());
                return 1;
        }
        probe_run(probe, idle, &idle_s);
        printf("idle:   %zu allocations, p50 %llu us, p99 %llu us, %u errors\n",
               idle_s.n, (unsigned long long)pct(&idle_s, 0.5),
               (unsigned long long)pct(&idle_s, 0.99), idle_s.errors);
        fflush(stdout);

        if (hostile) {
                hostile_pid = fork();
                if (hostile_pid == 0) {
                        if (geteuid() == 0 &&
                            (setgid(65534) < 0 || setuid(65534) < 0)) {
                                perror("load_bench: setuid");
                                _exit(1);
                        }
                        hostile_run(seconds);
                }
        }
        threads = calloc(n_clients, sizeof(*threads));
        for (unsigned i = 0; i < n_clients; i++)
                pthread_create(&threads[i], NULL, client_main, (void *)(uintptr_t)(i + 1));
        probe_run(probe, seconds, &load_s);
        {
                gmd_status *st = NULL;
                unsigned waiting = 0;

                if (gmd_query_status(probe, GMD_STATUS_CLIENTS, 0, &st) == 0) {
                        for (size_t i = 0; i < st->n_clients; i++)
                                waiting += st->clients[i].waiting;
                        printf("allocations waiting at the end (the huge one "
                               "among them): %u\n", waiting);
                }
                gmd_status_free(st);
        }
        atomic_store(&stop_load, true);
        for (unsigned i = 0; i < n_clients; i++)
                pthread_join(threads[i], NULL);
        if (hostile_pid > 0)
                waitpid(hostile_pid, NULL, 0);
        printf("loaded: %zu allocations, p50 %llu us, p99 %llu us, %u errors "
               "(%u clients%s: %lu allocations, %lu errors)\n",
               load_s.n, (unsigned long long)pct(&load_s, 0.5),
               (unsigned long long)pct(&load_s, 0.99), load_s.errors, n_clients,
               hostile ? " and a hostile user" : "",
               atomic_load(&load_allocs), atomic_load(&load_errors));
        printf("p50 loaded/idle: %.2f\n", pct(&idle_s, 0.5) ?
               (double)pct(&load_s, 0.5) / (double)pct(&idle_s, 0.5) : 0.0);
        free(threads);
        gmd_disconnect(probe);
        return 0;
}
