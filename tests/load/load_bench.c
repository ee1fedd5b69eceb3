/*
 * load_bench — the daemon's load test: many ordinary
 * clients allocating and freeing for a while, plus (--hostile) one hostile
 * user (connection flood, fd flood, reply flood, a huge waiting request),
 * and what one more client, the probe, waits for: idle first, then under
 * that load, then idle again. Every 10 ms the probe times its own
 * allocation and free (round trips: its cache of idle mappings is off),
 * the summary `gpu-memctl status` and `top` ask for, a STATUS_BUFFERS
 * listing, an admin verb (priority) and a whole `gpu-memctl status` (a new
 * connection, hello, summary, disconnect); each is reported at p50, p99,
 * p99.9 and max, as text and with --json FILE as JSON. The load clients'
 * cache of idle mappings is as $GPU_MEMD_CACHE says (on unless "0"). It
 * prints the figures and how the CPUs were shared, and says whether the
 * targets were met (status p99 within 50 ms, the probe's allocation and
 * free p99.9 within 5 ms); it does not pass or fail
 * (scripts/load-test.sh runs it against a sim daemon; too long for
 * `make test`).
 *
 *   load_bench [--clients N] [--seconds S] [--idle S]
 *              [--hostile[=conn,fd,reply,huge]] [--nice N[,N...]]
 *              [--load-uid UID] [--daemon-pid PID] [--json FILE]
 *
 * Three kinds of process: the probe (this one, nice 0, like the daemon),
 * the load clients (one process, a thread and a connection each) and the
 * hostile user (one process). Each value of --nice is one loaded phase,
 * with the load clients and the hostile user at that nice value: 0 (the
 * default) shares the CPUs as they come; 19 leaves the daemon and the
 * probe first call on them, so what is left is what the daemon itself
 * does with its time. Every process is forked before the probe connects
 * (no fork of a process with libgpumem's threads) and waits for its
 * phase.
 *
 * The socket is $GPU_MEMD_SOCKET. As root there are three users, as on a
 * shared machine: the probe (root), the load clients (uid 65533, or
 * --load-uid; -1 or 0 keeps them root, the probe's user) and the hostile
 * user (uid 65534); their processes drop to those uids, so the daemon's
 * per-user bounds and turns (users.h) apply to each. The default
 * [limits] max_clients_per_user (64) then bounds --clients. Not as root,
 * every process is the caller's user.
 * --daemon-pid adds the daemon's CPU time to each phase's figures.
 */
#include <dirent.h>
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
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_cli.h"
#include "gpumem.h"
#include "gpumem.pb-c.h"
#include "wire.h"

#define MiB (1ull << 20)
#define PROBE_SIZE (2 * MiB)
#define MAX_SAMPLES 65536
#define MAX_PHASES 4

enum { HOSTILE_CONN = 1, HOSTILE_FD = 2, HOSTILE_REPLY = 4, HOSTILE_HUGE = 8,
       HOSTILE_ALL = 15 };

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

/* ---- the probe: what an administrator and a client see, timed -------------- */

/* What the probe times, once each every 10 ms: its own allocation and
 * free (the cache of idle mappings off, so each is a round trip to the
 * daemon), the summary `gpu-memctl status` and `top` ask for
 * (GMD_STATUS_CLIENTS), the STATUS_BUFFERS listing `gpu-memctl buffers`
 * asks for, and an admin verb (`gpu-memctl priority`: its own process's
 * priority set to 0, the default it has), all on the probe's connection; and what
 * one `gpu-memctl status` costs in all: a new connection, its hello, the
 * summary and the disconnect. */
enum { OP_ALLOC, OP_FREE, OP_STATUS, OP_BUFFERS, OP_ADMIN, OP_CTL, N_OPS };

static const char *const op_name[N_OPS] = {
        "alloc", "free", "status", "status_buffers", "admin_priority",
        "memctl_status",
};
static const char *const op_label[N_OPS] = {
        "alloc 2 MiB", "free", "status (clients)", "status buffers",
        "admin priority", "connect+status",
};

typedef struct samples {
        uint64_t us[MAX_SAMPLES];
        size_t n;
        unsigned errors;
} samples;

typedef struct probe_samples {
        samples op[N_OPS];
} probe_samples;

static void sample_add(samples *s, uint64_t t0, int r)
{
        if (r < 0)
                s->errors++;
        else if (s->n < MAX_SAMPLES)
                s->us[s->n++] = now_us() - t0;
}

static void probe_run(gmd_client *c, double seconds, probe_samples *ps)
{
        uint64_t end = now_us() + (uint64_t)(seconds * 1e6);
        uint32_t pid = (uint32_t)getpid();

        for (int o = 0; o < N_OPS; o++) {
                ps->op[o].n = 0;
                ps->op[o].errors = 0;
        }
        while (now_us() < end && ps->op[OP_ALLOC].n < MAX_SAMPLES) {
                gmd_buffer *b = NULL;
                gmd_status *st = NULL;
                gmd_client *ctl = NULL;
                uint64_t t0 = now_us();
                int r = gmd_alloc(c, PROBE_SIZE, 0, GMD_ALLOC_SWAPPABLE, 2000, &b);

                sample_add(&ps->op[OP_ALLOC], t0, r);
                if (r == 0) {
                        t0 = now_us();
                        r = gmd_free(c, b);
                        sample_add(&ps->op[OP_FREE], t0, r);
                }
                t0 = now_us();
                r = gmd_query_status(c, GMD_STATUS_CLIENTS, 0, &st);
                sample_add(&ps->op[OP_STATUS], t0, r);
                st = gmd_status_free(st);
                t0 = now_us();
                r = gmd_query_status(c, GMD_STATUS_BUFFERS, 0, &st);
                sample_add(&ps->op[OP_BUFFERS], t0, r);
                st = gmd_status_free(st);
                t0 = now_us();
                r = gmd_admin_set_priority(c, pid, 0);
                sample_add(&ps->op[OP_ADMIN], t0, r);
                t0 = now_us();
                r = gmd_connect(socket_path, "gpu-memctl", &ctl);
                if (r == 0) {
                        r = gmd_query_status(ctl, GMD_STATUS_CLIENTS, 0, &st);
                        st = gmd_status_free(st);
                        gmd_disconnect(ctl);
                        ctl = NULL;
                }
                sample_add(&ps->op[OP_CTL], t0, r);
                usleep(10000);
        }
        for (int o = 0; o < N_OPS; o++)
                qsort(ps->op[o].us, ps->op[o].n, sizeof(ps->op[o].us[0]), cmp_u64);
}

static uint64_t pct(const samples *s, double p)
{
        return s->n ? s->us[(size_t)((double)(s->n - 1) * p)] : 0;
}

static double ratio(uint64_t loaded, uint64_t idle)
{
        return idle ? (double)loaded / (double)idle : 0.0;
}

/* Each operation's percentiles, as a table under `indent`. */
static void probe_print(const char *indent, const probe_samples *ps)
{
        printf("%s%-17s %6s %9s %9s %9s %9s %6s\n", indent, "probe, us", "n",
               "p50", "p99", "p99.9", "max", "errors");
        for (int o = 0; o < N_OPS; o++) {
                const samples *s = &ps->op[o];

                printf("%s%-17s %6zu %9llu %9llu %9llu %9llu %6u\n", indent,
                       op_label[o], s->n, (unsigned long long)pct(s, 0.5),
                       (unsigned long long)pct(s, 0.99),
                       (unsigned long long)pct(s, 0.999),
                       (unsigned long long)pct(s, 1.0), s->errors);
        }
}

/* One phase's figures as a JSON object's members. */
static void probe_json(FILE *f, const probe_samples *ps)
{
        for (int o = 0; o < N_OPS; o++) {
                const samples *s = &ps->op[o];

                fprintf(f, "%s\n      \"%s\": {\"n\": %zu, \"errors\": %u, "
                        "\"p50_us\": %llu, \"p99_us\": %llu, \"p999_us\": %llu, "
                        "\"max_us\": %llu}", o ? "," : "", op_name[o], s->n,
                        s->errors, (unsigned long long)pct(s, 0.5),
                        (unsigned long long)pct(s, 0.99),
                        (unsigned long long)pct(s, 0.999),
                        (unsigned long long)pct(s, 1.0));
        }
}

/* ---- CPU time: processes and the machine ------------------------------------ */

/* user + system ticks of process `pid`, or 0. */
static uint64_t proc_ticks(pid_t pid)
{
        char path[64], buf[1024], *p;
        unsigned long long ut = 0, st = 0;
        FILE *f;
        size_t n;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        f = fopen(path, "r");
        if (!f)
                return 0;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        p = strrchr(buf, ')');      /* the name may hold spaces */
        if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                         &ut, &st) != 2)
                return 0;
        return ut + st;
}

/* ns the task `path` (/proc/PID or /proc/self/task/TID) spent runnable
 * but waiting for a CPU (schedstat's run_delay), or 0 where the kernel
 * does not say. For the daemon, /proc/PID is its loop thread. */
static uint64_t sched_wait_ns(const char *path)
{
        char file[300];
        unsigned long long run = 0, wait = 0;
        FILE *f;

        if ((size_t)snprintf(file, sizeof(file), "%s/schedstat", path) >= sizeof(file))
                return 0;
        f = fopen(file, "r");
        if (!f)
                return 0;
        if (fscanf(f, "%llu %llu", &run, &wait) != 2)
                wait = 0;
        fclose(f);
        return wait;
}

/* The same, summed over this process's threads (the probe and its I/O
 * thread). */
static uint64_t self_wait_ns(void)
{
        DIR *d = opendir("/proc/self/task");
        struct dirent *e;
        uint64_t ns = 0;
        char path[300];

        if (!d)
                return 0;
        while ((e = readdir(d)))
                if (e->d_name[0] != '.') {
                        snprintf(path, sizeof(path), "/proc/self/task/%s", e->d_name);
                        ns += sched_wait_ns(path);
                }
        closedir(d);
        return ns;
}

/* Busy and idle ticks of the whole machine (/proc/stat), summed over CPUs. */
static void machine_ticks(uint64_t *busy, uint64_t *idle)
{
        unsigned long long v[8] = { 0 };
        FILE *f = fopen("/proc/stat", "r");

        *busy = *idle = 0;
        if (!f)
                return;
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
                *busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
                *idle = v[3] + v[4];
        }
        fclose(f);
}

static uint64_t rusage_us(const struct rusage *ru)
{
        return (uint64_t)ru->ru_utime.tv_sec * 1000000 + (uint64_t)ru->ru_utime.tv_usec +
               (uint64_t)ru->ru_stime.tv_sec * 1000000 + (uint64_t)ru->ru_stime.tv_usec;
}

/* ---- phases: the processes that make the load wait for their turn ---------- */

typedef struct phase {
        int nice;
        pid_t load_pid, hostile_pid;
        int go[2];          /* written once: start */
        int stop[2];        /* closed by the probe: stop */
        int result[2];      /* the load process's counts */
} phase;

/* Block until the probe says go; false if it went away instead. */
static bool phase_wait_go(phase *ph)
{
        char c;

        close(ph->go[1]);
        close(ph->stop[1]);
        return read(ph->go[0], &c, 1) == 1;
}

static bool phase_stopped(const phase *ph)
{
        struct pollfd p = { .fd = ph->stop[0], .events = POLLIN };

        return poll(&p, 1, 0) > 0;
}

/* A child of phase `p` keeps no end of the earlier phases' pipes: the
 * probe's close of a stop pipe must reach that phase's processes alone. */
static void phase_close_earlier(phase *phases, unsigned p)
{
        for (unsigned i = 0; i < p; i++) {
                close(phases[i].go[1]);
                close(phases[i].stop[1]);
                close(phases[i].result[0]);
        }
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

static void load_main(phase *ph, unsigned n_clients, long uid)
{
        pthread_t *threads = calloc(n_clients, sizeof(*threads));
        char line[64], c;
        int n;

        if (uid >= 0 && geteuid() == 0 &&
            (setgid((gid_t)uid) < 0 || setuid((uid_t)uid) < 0)) {
                perror("load_bench: setuid for the load clients");
                _exit(1);
        }
        if (!phase_wait_go(ph) || !threads)
                _exit(0);
        for (unsigned i = 0; i < n_clients; i++)
                pthread_create(&threads[i], NULL, client_main, (void *)(uintptr_t)(i + 1));
        (void)read(ph->stop[0], &c, 1);     /* EOF: the probe is done */
        atomic_store(&stop_load, true);
        for (unsigned i = 0; i < n_clients; i++)
                pthread_join(threads[i], NULL);
        n = snprintf(line, sizeof(line), "%lu %lu\n", atomic_load(&load_allocs),
                     atomic_load(&load_errors));
        (void)write(ph->result[1], line, (size_t)n);
        _exit(0);
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
                printf("  hostile: the huge request failed: %s\n", gmd_last_error());
        else
                printf("  hostile: the huge request was served\n");
        fflush(stdout);
        return NULL;
}

static void hostile_main(phase *ph, unsigned parts)
{
        enum { SILENT = 256, FLOOD = 8, FDS = 100000 };
        int silent[SILENT], flood[FLOOD];
        unsigned long reconnects = 0, refusals = 0, flood_drops = 0, fds = 0;
        gmd_client *fdc = NULL, *waiter = NULL;
        gmd_buffer **bufs;
        pthread_t wait_thread;
        int r;

        if (geteuid() == 0 && (setgid(65534) < 0 || setuid(65534) < 0)) {
                perror("load_bench: setuid");
                _exit(1);
        }
        if (!phase_wait_go(ph))
                _exit(0);
        for (int i = 0; i < SILENT; i++)
                silent[i] = -1;
        for (int i = 0; i < FLOOD; i++)
                flood[i] = -1;
        /* fd flood first: tiny buffers until the daemon says no. */
        bufs = calloc(FDS, sizeof(*bufs));
        if ((parts & HOSTILE_FD) && bufs &&
            gmd_connect(socket_path, "fdflood", &fdc) == 0) {
                while (fds < FDS && (r = gmd_alloc(fdc, 4096, 0, GMD_ALLOC_SWAPPABLE,
                                                    GMD_NO_WAIT, &bufs[fds])) == 0)
                        fds++;
                printf("  hostile: fd flood held %lu buffers, then: %s\n", fds,
                       gmd_last_error());
                /* One back, for the huge request's buffer. */
                if (fds)
                        gmd_free(fdc, bufs[--fds]);
        }
        if ((parts & HOSTILE_HUGE) && gmd_connect(socket_path, "hugewait", &waiter) == 0)
                pthread_create(&wait_thread, NULL, huge_wait_main, waiter);
        /* The reply flood first: the silent ones then take the rest of
         * this user's connections and are refused past them. */
        for (int i = 0; (parts & HOSTILE_REPLY) && i < FLOOD; i++) {
                flood[i] = raw_connect();
                if (flood[i] >= 0)
                        send_hello(flood[i]);
        }
        usleep(100000);
        for (int i = 0; (parts & HOSTILE_CONN) && i < SILENT; i++)
                silent[i] = raw_connect();
        while (!phase_stopped(ph)) {
                for (int i = 0; (parts & HOSTILE_CONN) && i < SILENT; i++) {
                        if (silent[i] >= 0 && !raw_dead(silent[i]))
                                continue;
                        if (silent[i] >= 0) {
                                close(silent[i]);
                                refusals++;
                        }
                        silent[i] = raw_connect();
                        reconnects++;
                }
                for (int i = 0; (parts & HOSTILE_REPLY) && i < FLOOD; i++) {
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
        if (parts & (HOSTILE_CONN | HOSTILE_REPLY))
                printf("  hostile: %lu silent connections closed by the daemon "
                       "(refused or timed out), %lu reconnects; %lu reply-flood "
                       "connections dropped\n", refusals, reconnects, flood_drops);
        fflush(stdout);
        _exit(0);       /* the daemon cleans up after the connections */
}

static unsigned parse_parts(const char *s)
{
        unsigned parts = 0;

        if (!s)
                return HOSTILE_ALL;
        while (*s) {
                size_t n = strcspn(s, ",");

                if (n == 4 && !strncmp(s, "conn", 4))
                        parts |= HOSTILE_CONN;
                else if (n == 2 && !strncmp(s, "fd", 2))
                        parts |= HOSTILE_FD;
                else if (n == 5 && !strncmp(s, "reply", 5))
                        parts |= HOSTILE_REPLY;
                else if (n == 4 && !strncmp(s, "huge", 4))
                        parts |= HOSTILE_HUGE;
                else
                        return 0;
                s += n + (s[n] == ',');
        }
        return parts;
}

static void describe_parts(unsigned parts, char *buf, size_t len)
{
        static const char *names[] = { "connection flood", "fd flood", "reply flood",
                                       "a huge waiting request" };
        size_t n = 0;

        buf[0] = '\0';
        for (unsigned i = 0; i < 4; i++)
                if (parts & (1u << i))
                        n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%s",
                                              n ? ", " : "", names[i]);
}

/* ---- main ------------------------------------------------------------------ */

static void usage(void)
{
        fprintf(stderr, "usage: load_bench [--clients N] [--seconds S] [--idle S] "
                "[--hostile[=conn,fd,reply,huge]] [--nice N[,N...]] "
                "[--load-uid UID] [--daemon-pid PID] [--json FILE]\n");
}

static void print_idle(const char *what, const probe_samples *ps)
{
        const samples *s = &ps->op[OP_ALLOC];

        printf("%s: %zu allocations, p50 %llu us, p99 %llu us, %u errors\n", what,
               s->n, (unsigned long long)pct(s, 0.5),
               (unsigned long long)pct(s, 0.99), s->errors);
        probe_print("  ", ps);
        fflush(stdout);
}

/* The targets under load: status p99 within 50 ms, the probe's
 * allocation and free p99.9 within 5 ms. */
#define TARGET_STATUS_P99_US 50000
#define TARGET_ALLOC_P999_US 5000

static bool targets_met(const probe_samples *ps)
{
        return pct(&ps->op[OP_STATUS], 0.99) <= TARGET_STATUS_P99_US &&
               pct(&ps->op[OP_ALLOC], 0.999) <= TARGET_ALLOC_P999_US &&
               pct(&ps->op[OP_FREE], 0.999) <= TARGET_ALLOC_P999_US;
}

int main(int argc, char **argv)
{
        unsigned n_clients = 64, hostile = 0, n_phases = 0;
        double seconds = 60, idle = 10;
        static probe_samples idle_s, idle2_s, load_s[MAX_PHASES];
        static phase phases[MAX_PHASES];
        double p50_ratio[MAX_PHASES], p99_ratio[MAX_PHASES];
        unsigned long allocs[MAX_PHASES] = { 0 }, errors[MAX_PHASES] = { 0 };
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        long hz = sysconf(_SC_CLK_TCK);
        char parts[128];
        gmd_client *probe = NULL;
        pid_t daemon_pid = 0;
        const char *json = NULL, *cache_env = getenv(GMD_CACHE_ENV);
        /* The load clients' cache of idle mappings: as $GPU_MEMD_CACHE
         * says (on unless "0"); the probe's is always off. */
        bool load_cache = !cache_env || strcmp(cache_env, "0") != 0;
        /* As root: the load clients are another user than the probe. */
        long load_uid = geteuid() == 0 ? 65533 : -1;

        for (int i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "--clients") && i + 1 < argc) {
                        n_clients = (unsigned)atoi(argv[++i]);
                } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
                        seconds = atof(argv[++i]);
                } else if (!strcmp(argv[i], "--idle") && i + 1 < argc) {
                        idle = atof(argv[++i]);
                } else if (!strcmp(argv[i], "--load-uid") && i + 1 < argc) {
                        load_uid = atol(argv[++i]);
                } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
                        json = argv[++i];
                } else if (!strcmp(argv[i], "--daemon-pid") && i + 1 < argc) {
                        daemon_pid = (pid_t)atoi(argv[++i]);
                } else if (!strcmp(argv[i], "--nice") && i + 1 < argc) {
                        char *s = argv[++i], *end;

                        n_phases = 0;
                        while (*s && n_phases < MAX_PHASES) {
                                phases[n_phases++].nice = (int)strtol(s, &end, 10);
                                s = *end == ',' ? end + 1 : end;
                                if (end == s && *s) {
                                        usage();
                                        return 2;
                                }
                        }
                } else if (!strncmp(argv[i], "--hostile", 9) &&
                           (argv[i][9] == '\0' || argv[i][9] == '=')) {
                        hostile = parse_parts(argv[i][9] ? argv[i] + 10 : NULL);
                        if (!hostile) {
                                usage();
                                return 2;
                        }
                } else {
                        usage();
                        return 2;
                }
        }
        if (!n_phases)
                n_phases = 1;       /* one phase at nice 0 */
        socket_path = getenv(GMD_SOCKET_ENV);
        if (!socket_path) {
                fprintf(stderr, "load_bench: set %s\n", GMD_SOCKET_ENV);
                return 2;
        }
        describe_parts(hostile, parts, sizeof(parts));

        /* Every process first, while this one has no thread but main. */
        for (unsigned p = 0; p < n_phases; p++) {
                phase *ph = &phases[p];

                if (pipe(ph->go) < 0 || pipe(ph->stop) < 0 || pipe(ph->result) < 0) {
                        perror("load_bench: pipe");
                        return 1;
                }
                fflush(stdout);
                ph->load_pid = fork();
                if (ph->load_pid == 0) {
                        phase_close_earlier(phases, p);
                        (void)setpriority(PRIO_PROCESS, 0, ph->nice);
                        load_main(ph, n_clients, load_uid);
                }
                ph->hostile_pid = -1;
                if (hostile) {
                        ph->hostile_pid = fork();
                        if (ph->hostile_pid == 0) {
                                phase_close_earlier(phases, p);
                                close(ph->result[0]);
                                close(ph->result[1]);
                                (void)setpriority(PRIO_PROCESS, 0, ph->nice);
                                hostile_main(ph, hostile);
                        }
                }
                close(ph->go[0]);
                close(ph->stop[0]);
                close(ph->result[1]);
        }

        /* The probe times round trips: no mapping cache for it. Its
         * children are forked, so theirs is as the environment says. */
        setenv(GMD_CACHE_ENV, "0", 1);
        if (gmd_connect(socket_path, "probe", &probe) < 0) {
                fprintf(stderr, "load_bench: %s\n", gmd_last_error());
                return 1;
        }
        if (geteuid() == 0)
                printf("users: the probe uid 0, the load clients uid %ld%s%s\n",
                       load_uid > 0 ? load_uid : 0,
                       load_uid > 0 ? "" : " (the probe's)",
                       hostile ? ", the hostile user uid 65534" : "");
        else
                printf("users: every process is uid %u (not root)\n",
                       (unsigned)geteuid());
        printf("the load clients' cache of idle mappings: %s; the probe's: off\n",
               load_cache ? "on" : "off");
        probe_run(probe, idle, &idle_s);
        print_idle("idle", &idle_s);

        for (unsigned p = 0; p < n_phases; p++) {
                phase *ph = &phases[p];
                uint64_t d0 = daemon_pid ? proc_ticks(daemon_pid) : 0, d1;
                char dpath[64];
                uint64_t dw0, dw1, pw0 = self_wait_ns(), pw1;
                uint64_t busy0, idle0, busy1, idle1, t0 = now_us(), wall;
                struct rusage self0, self1, ru;
                uint64_t load_us = 0, hostile_us = 0, self_us;
                char line[64] = "";
                ssize_t n;

                snprintf(dpath, sizeof(dpath), "/proc/%d", (int)daemon_pid);
                dw0 = daemon_pid ? sched_wait_ns(dpath) : 0;
                machine_ticks(&busy0, &idle0);
                getrusage(RUSAGE_SELF, &self0);
                printf("loaded, phase %u: %u clients%s%s x %.0f s; %s\n", p + 1,
                       n_clients, hostile ? " and a hostile user: " : "", parts,
                       seconds, ph->nice ?
                       "the load clients and the hostile user at a lower "
                       "priority" : "every process at the same priority");
                if (ph->nice)
                        printf("  (nice %d; the daemon and the probe at nice 0)\n",
                               ph->nice);
                fflush(stdout);
                /* One byte for each process of the phase. */
                (void)write(ph->go[1], "gg", ph->hostile_pid > 0 ? 2 : 1);
                probe_run(probe, seconds, &load_s[p]);
                {
                        gmd_status *st = NULL;
                        unsigned waiting = 0;

                        if (gmd_query_status(probe, GMD_STATUS_CLIENTS, 0, &st) == 0) {
                                for (size_t i = 0; i < st->n_clients; i++)
                                        waiting += st->clients[i].waiting;
                                printf("  allocations waiting at the end%s: %u\n",
                                       hostile & HOSTILE_HUGE ? " (the huge one among them)" : "",
                                       waiting);
                        }
                        gmd_status_free(st);
                }
                fflush(stdout);
                close(ph->stop[1]);
                n = read(ph->result[0], line, sizeof(line) - 1);
                if (n > 0) {
                        line[n] = '\0';
                        sscanf(line, "%lu %lu", &allocs[p], &errors[p]);
                }
                if (wait4(ph->load_pid, NULL, 0, &ru) > 0)
                        load_us = rusage_us(&ru);
                if (ph->hostile_pid > 0 && wait4(ph->hostile_pid, NULL, 0, &ru) > 0)
                        hostile_us = rusage_us(&ru);
                wall = now_us() - t0;
                d1 = daemon_pid ? proc_ticks(daemon_pid) : 0;
                dw1 = daemon_pid ? sched_wait_ns(dpath) : 0;
                pw1 = self_wait_ns();
                machine_ticks(&busy1, &idle1);
                getrusage(RUSAGE_SELF, &self1);
                self_us = rusage_us(&self1) - rusage_us(&self0);
                {
                        const samples *ls = &load_s[p].op[OP_ALLOC];
                        const samples *is = &idle_s.op[OP_ALLOC];

                        p50_ratio[p] = ratio(pct(ls, 0.5), pct(is, 0.5));
                        p99_ratio[p] = ratio(pct(ls, 0.99), pct(is, 0.99));
                        printf("  probe: %zu allocations, p50 %llu us, p99 %llu us, "
                               "%u errors; p50 %.2fx idle, p99 %.2fx idle\n", ls->n,
                               (unsigned long long)pct(ls, 0.5),
                               (unsigned long long)pct(ls, 0.99), ls->errors,
                               p50_ratio[p], p99_ratio[p]);
                        probe_print("  ", &load_s[p]);
                }
                printf("  load clients: %lu allocations, %lu errors\n", allocs[p],
                       errors[p]);
                {
                        /* Shares of the whole machine over the phase, in % of
                         * one CPU; "others" is every process not ours. */
                        double total = (double)wall / 100;   /* µs of one CPU in 1% */
                        double d = daemon_pid ? (double)(d1 - d0) * 1e6 / (double)hz / (double)wall * 100 : 0;
                        double l = (double)load_us / total, h = (double)hostile_us / total;
                        double s = (double)self_us / total;
                        double mb = busy1 - busy0, mi = idle1 - idle0;
                        double busy = mb + mi > 0 ? mb / (mb + mi) * 100 * (double)ncpu : 0;
                        double others = busy - d - l - h - s;

                        printf("  CPU over %.0f s, %% of one CPU (%ld CPUs = %ld%%): ",
                               (double)wall / 1e6, ncpu, ncpu * 100);
                        if (daemon_pid)
                                printf("daemon %.0f%%, ", d);
                        printf("load clients %.0f%%, ", l);
                        if (hostile)
                                printf("hostile user %.0f%%, ", h);
                        printf("probe %.0f%%, ", s);
                        if (daemon_pid)
                                printf("other processes %.0f%%, ", others > 0 ? others : 0);
                        printf("idle %.0f%%\n", (double)ncpu * 100 - busy);
                        /* Plain CPU contention: time runnable with no CPU. */
                        if (dw1 > dw0 || pw1 > pw0) {
                                printf("  waiting for a CPU (runnable, not running): ");
                                if (daemon_pid)
                                        printf("the daemon's loop thread %.0f%% of the "
                                               "phase, ", (double)(dw1 - dw0) / 1e3 /
                                               (double)wall * 100);
                                printf("the probe's threads %.1f ms per round (its "
                                       "%d requests)\n", load_s[p].op[OP_ALLOC].n ?
                                       (double)(pw1 - pw0) / 1e6 /
                                       (double)load_s[p].op[OP_ALLOC].n : 0.0, N_OPS);
                        }
                }
                fflush(stdout);
        }

        probe_run(probe, idle, &idle2_s);
        print_idle("idle again", &idle2_s);
        for (unsigned p = 0; p < n_phases; p++)
                printf("result, phase %u (%s): p50 loaded/idle %.2f, p99 loaded/idle "
                       "%.2f; target p50 within 2x: %s\n", p + 1,
                       phases[p].nice ? "load at lower priority" : "same priority",
                       p50_ratio[p], p99_ratio[p], p50_ratio[p] <= 2.0 ? "met" : "NOT met");
        for (unsigned p = 0; p < n_phases; p++)
                printf("result, phase %u: status p99 %llu us (target %u), alloc "
                       "p99.9 %llu us, free p99.9 %llu us (target %u): %s\n", p + 1,
                       (unsigned long long)pct(&load_s[p].op[OP_STATUS], 0.99),
                       TARGET_STATUS_P99_US,
                       (unsigned long long)pct(&load_s[p].op[OP_ALLOC], 0.999),
                       (unsigned long long)pct(&load_s[p].op[OP_FREE], 0.999),
                       TARGET_ALLOC_P999_US, targets_met(&load_s[p]) ? "met" : "NOT met");
        fflush(stdout);
        gmd_disconnect(probe);
        if (json) {
                FILE *f = bench_json_open(json);

                if (!f)
                        return 1;
                fprintf(f, "{\n  \"clients\": %u,\n  \"seconds\": %.0f,\n"
                        "  \"idle_seconds\": %.0f,\n  \"cpus\": %ld,\n"
                        "  \"hostile\": \"%s\",\n  \"load_cache\": %s,\n"
                        "  \"load_uid\": %ld,\n"
                        "  \"targets\": {\"status_p99_us\": %u, "
                        "\"alloc_free_p999_us\": %u},\n  \"phases\": [",
                        n_clients, seconds, idle, ncpu, parts,
                        load_cache ? "true" : "false", load_uid,
                        TARGET_STATUS_P99_US, TARGET_ALLOC_P999_US);
                fprintf(f, "\n    {\"phase\": \"idle\",");
                probe_json(f, &idle_s);
                fprintf(f, "}");
                for (unsigned p = 0; p < n_phases; p++) {
                        fprintf(f, ",\n    {\"phase\": \"loaded\", \"nice\": %d, "
                                "\"load_allocs\": %lu, \"load_errors\": %lu, "
                                "\"targets_met\": %s,", phases[p].nice, allocs[p],
                                errors[p], targets_met(&load_s[p]) ? "true" : "false");
                        probe_json(f, &load_s[p]);
                        fprintf(f, "}");
                }
                fprintf(f, ",\n    {\"phase\": \"idle_again\",");
                probe_json(f, &idle2_s);
                fprintf(f, "}\n  ]\n}\n");
                if (bench_json_close(f, json) < 0)
                        return 1;
        }
        return 0;
}
