/*
 * alloc_bench — what an allocation through gpu-memd costs a client, against
 * cudaMalloc + cudaFree of the same size in the same process and run.
 *
 * One sample is a round trip, gmd_alloc then gmd_free, timed in the client;
 * alloc and free are also reported apart. Cases:
 *   cache hit  2 MiB and 64 MiB in steady state with libgpumem's cache of
 *              idle mappings on (its default, ARCHITECTURE.md decision 6): a free
 *              parks the mapping in the client and the next alloc of the
 *              same device, size and flags takes it back, no round trip
 *   hit        2 MiB while the daemon's reserve has chunks (each daemon
 *              starts with a full reserve of HIT_PER_DAEMON; the bench
 *              restarts it to get more samples)
 *   miss       2 MiB with the reserve off ([pools] cuda_reserve_chunks = 0):
 *              the daemon creates, exports, maps and zeroes a chunk per
 *              request
 *   4 MiB and 64 MiB, always created on demand (the reserve holds 2 MiB
 *              chunks), with the reserve on as in production
 * All but the cache-hit cases run with the cache off (GPU_MEMD_CACHE=0, set
 * before gmd_connect), so each of their samples is a full round trip:
 * request, reply with the fd, VA reserve, import, map, one access call;
 * then unmap, unreserve, request, reply. The bench checks through the
 * daemon's status which mode it got (a cached buffer stays the daemon's
 * after gmd_free) and says so.
 *
 * The bench starts its own gpu-memd for each case (see tests/gpu/gpu_proc.h
 * for how it is found), with a config file of the bench's: the case's
 * reserve, and no host arena (pinning it at start would stall the driver
 * during the first cases). Prints a summary; --json FILE writes the figures. Exits 77 when
 * there is no usable GPU.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_cli.h"
#include "cuda_driver.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "gpumem.h"

#define MiB (1ull << 20)
#define MAX_SAMPLES 512
#define HIT_RESTARTS 6
#define HIT_PER_DAEMON 16   /* the reserve-hit daemons' cuda_reserve_chunks */
#define CACHE_WARM 5        /* round trips before a cache-hit case counts */

typedef struct series {
        const char *name;
        int n;
        double us[MAX_SAMPLES];
} series;

typedef struct bench {
        series rt, alloc, free;
} bench;

static double pct(series *s, double p)
{
        int i;

        if (s->n == 0)
                return 0;
        qsort(s->us, (size_t)s->n, sizeof(double), bench_cmp_double);
        i = (int)(p / 100.0 * (s->n - 1) + 0.5);
        return s->us[i];
}

static void add(series *s, double us)
{
        if (s->n < MAX_SAMPLES)
                s->us[s->n++] = us;
}

/* `n` round trips of `size` through the daemon into `b`. */
static int daemon_round_trips(gmd_client *c, uint64_t size, int n, bench *b)
{
        for (int i = 0; i < n; i++) {
                gmd_buffer *buf;
                double t0, t1, t2;
                int r;

                t0 = gpu_now_us();
                r = gmd_alloc(c, size, 0, 0, GMD_NO_WAIT, &buf);
                t1 = gpu_now_us();
                if (r < 0) {
                        fprintf(stderr, "gmd_alloc: %s\n", gmd_last_error());
                        return r;
                }
                r = gmd_free(c, buf);
                t2 = gpu_now_us();
                if (r < 0)
                        return r;
                add(&b->alloc, t1 - t0);
                add(&b->free, t2 - t1);
                add(&b->rt, t2 - t0);
        }
        return 0;
}

/* Whether the client cache was what each kind of case asked for: a cached
 * buffer is still the daemon's after gmd_free, an uncached one is gone. */
static struct {
        int cache_on_cases, cache_on_seen;     /* cache-hit cases */
        int cache_off_cases, cache_off_seen;   /* all the others */
} mode;

/* Buffers the daemon holds for all clients (the bench's is the only one),
 * or -1. Outside the timed loops: a status query is a round trip. */
static long daemon_buffers(gmd_client *c)
{
        gmd_status *st = NULL;
        long n;

        if (gmd_query_status(c, GMD_STATUS_POOLS, 0, &st) < 0)
                return -1;
        n = (long)st->total_buffers;
        gmd_status_free(st);
        return n;
}

/* Start a daemon with `args`, connect with the client cache on or off,
 * warm up, then run `n` round trips of `size`. Warming: with the cache
 * off, a size the reserve never serves (mapper and context, nothing the
 * case measures); with it on, the case's own size, so the cache holds a
 * mapping that fits and every sample is a hit. */
static int daemon_case(uint64_t size, int n, bench *b,
                       const char *const *args, bool cache)
{
        gmd_client *c;
        gpu_daemon d;
        bench warm = { 0 };
        long held;
        int r;

        r = gpu_daemon_start(args, &d);
        if (r < 0) {
                fprintf(stderr, "cannot start gpu-memd: %s\n", strerror(-r));
                return r;
        }
        /* libgpumem reads it when connecting. */
        if (cache)
                unsetenv("GPU_MEMD_CACHE");
        else
                setenv("GPU_MEMD_CACHE", "0", 1);
        r = gmd_connect(NULL, "alloc_bench", &c);
        if (r == 0) {
                r = daemon_round_trips(c, cache ? size : 4 * MiB,
                                       cache ? CACHE_WARM : 3, &warm);
                if (r == 0)
                        r = daemon_round_trips(c, size, n, b);
                held = daemon_buffers(c);
                if (cache) {
                        mode.cache_on_cases++;
                        mode.cache_on_seen += held > 0;
                } else {
                        mode.cache_off_cases++;
                        mode.cache_off_seen += held == 0;
                }
                gmd_disconnect(c);
        }
        gpu_daemon_stop(&d, stderr);   /* the suite's log keeps it */
        return r;
}

/* A config file for the bench's daemons: [pools] cuda_reserve_chunks, and
 * no host arena (nothing here swaps, and pinning it at start stalls the
 * driver for every process, this one's baseline included). The name goes
 * into `path`; the caller unlinks it. 0 or -errno. */
static int config_write(char *path, size_t len, unsigned chunks)
{
        FILE *f;
        int fd;

        snprintf(path, len, "/tmp/alloc_bench-XXXXXX.conf");
        fd = mkstemps(path, 5);
        if (fd < 0)
                return -errno;
        f = fdopen(fd, "w");
        if (!f) {
                close(fd);
                unlink(path);
                return -ENOMEM;
        }
        fprintf(f, "[pools]\ncuda_reserve_chunks = %u\nhost_stock = 0\n", chunks);
        if (fclose(f) != 0) {
                unlink(path);
                return -EIO;
        }
        return 0;
}

static int cuda_case(uint64_t size, int n, series *s)
{
        for (int i = 0; i < 3; i++)
                gpu_malloc_free(size);   /* warm */
        for (int i = 0; i < n; i++) {
                double t0 = gpu_now_us();

                if (gpu_malloc_free(size) < 0) {
                        fprintf(stderr, "%s\n", gpu_last_error());
                        return -EIO;
                }
                add(s, gpu_now_us() - t0);
        }
        return 0;
}

static void line(FILE *f, const char *name, series *s, int last)
{
        double p50 = pct(s, 50), p99 = pct(s, 99);

        printf("  %-34s n=%3d  p50 %8.1f us  p99 %8.1f us\n", name, s->n, p50,
               p99);
        if (f)
                fprintf(f, "    {\"case\": \"%s\", \"n\": %d, \"p50_us\": %.1f, "
                        "\"p99_us\": %.1f}%s\n", name, s->n, p50, p99,
                        last ? "" : ",");
}

/* One "target" line: gpu-memd's p50 round trip against the baseline's. */
static void target(const char *what, series *gmd, series *cuda)
{
        double a = pct(gmd, 50), c = pct(cuda, 50);

        printf("target (%s < cudaMalloc+cudaFree, p50): %s (%.1f vs %.1f us)\n",
               what, a < c ? "met" : "NOT met", a, c);
}

int main(int argc, char **argv)
{
        static bench chit2, chit64, hit, miss, miss4, big;
        static series cm2, cm4, cm64;
        char hit_conf[64] = "", miss_conf[64] = "", default_conf[64] = "";
        /* Every other case: the default reserve. */
        const char *default_args[] = { "--config", default_conf, NULL };
        /* Reserve hits: a known reserve size, whatever the default. */
        const char *hit_args[] = { "--config", hit_conf, NULL };
        /* Misses: the reserve off; the daemon logs each create's steps. */
        const char *miss_args[] = { "--config", miss_conf, "--log-level",
                                    "debug", NULL };
        const gmd_cuda_driver *cu;
        const char *json = NULL;
        char name[64] = "?";
        uint64_t f, t;
        FILE *out = NULL;
        int r;

        setvbuf(stdout, NULL, _IOLBF, 0);
        for (int i = 1; i < argc; i++)
                if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
                        json = argv[++i];
        cu = gpu_usable();
        if (!cu)
                return GPU_TEST_SKIP;
        if (gpu_mem_info(&f, &t) < 0)   /* this process's context first */
                return 1;
        cu->cuDeviceGetName(name, sizeof(name), 0);
        r = config_write(hit_conf, sizeof(hit_conf), HIT_PER_DAEMON);
        if (r == 0)
                r = config_write(miss_conf, sizeof(miss_conf), 0);
        if (r == 0)
                r = config_write(default_conf, sizeof(default_conf), 16);
        if (r < 0)
                fprintf(stderr, "cannot write a config file: %s\n",
                        strerror(-r));

        /* Cache on (the library's default), steady state. */
        if (r == 0)
                r = daemon_case(2 * MiB, 500, &chit2, default_args, true);
        if (r == 0)
                r = daemon_case(64 * MiB, 200, &chit64, default_args, true);
        /* Cache off: what a cache miss costs, reserve hit or not. */
        for (int i = 0; i < HIT_RESTARTS && r == 0; i++)
                r = daemon_case(2 * MiB, HIT_PER_DAEMON, &hit, hit_args, false);
        if (r == 0)
                r = daemon_case(2 * MiB, 200, &miss, miss_args, false);
        if (r == 0)   /* the reserve holds 2 MiB chunks only: always a miss */
                r = daemon_case(4 * MiB, 200, &miss4, default_args, false);
        if (r == 0)
                r = daemon_case(64 * MiB, 100, &big, default_args, false);
        if (r == 0)
                r = cuda_case(2 * MiB, 500, &cm2);
        if (r == 0)
                r = cuda_case(4 * MiB, 200, &cm4);
        if (r == 0)
                r = cuda_case(64 * MiB, 200, &cm64);
        if (hit_conf[0])
                unlink(hit_conf);
        if (miss_conf[0])
                unlink(miss_conf);
        if (default_conf[0])
                unlink(default_conf);
        if (r < 0)
                return 1;

        if (json)
                out = fopen(json, "w");
        if (out)
                fprintf(out, "{\n  \"device\": \"%s\",\n"
                        "  \"client_cache_seen\": %s,\n"
                        "  \"cache_off_honoured\": %s,\n  \"results\": [\n",
                        name,
                        mode.cache_on_seen == mode.cache_on_cases ?
                        "true" : "false",
                        mode.cache_off_seen == mode.cache_off_cases ?
                        "true" : "false");
        printf("alloc_bench on %s (round trip = alloc + free, timed in the "
               "client)\n", name);
        line(out, "gpumem_2MiB_cache_hit_roundtrip", &chit2.rt, 0);
        line(out, "gpumem_2MiB_cache_hit_alloc", &chit2.alloc, 0);
        line(out, "gpumem_2MiB_cache_hit_free", &chit2.free, 0);
        line(out, "gpumem_64MiB_cache_hit_roundtrip", &chit64.rt, 0);
        line(out, "gpumem_64MiB_cache_hit_alloc", &chit64.alloc, 0);
        line(out, "gpumem_64MiB_cache_hit_free", &chit64.free, 0);
        line(out, "gpumem_2MiB_reserve_hit_roundtrip", &hit.rt, 0);
        line(out, "gpumem_2MiB_reserve_hit_alloc", &hit.alloc, 0);
        line(out, "gpumem_2MiB_reserve_hit_free", &hit.free, 0);
        line(out, "gpumem_2MiB_reserve_miss_roundtrip", &miss.rt, 0);
        line(out, "gpumem_2MiB_reserve_miss_alloc", &miss.alloc, 0);
        line(out, "gpumem_2MiB_reserve_miss_free", &miss.free, 0);
        line(out, "cudaMalloc_cudaFree_2MiB", &cm2, 0);
        line(out, "gpumem_4MiB_roundtrip", &miss4.rt, 0);
        line(out, "gpumem_4MiB_alloc", &miss4.alloc, 0);
        line(out, "cudaMalloc_cudaFree_4MiB", &cm4, 0);
        line(out, "gpumem_64MiB_roundtrip", &big.rt, 0);
        line(out, "gpumem_64MiB_alloc", &big.alloc, 0);
        line(out, "cudaMalloc_cudaFree_64MiB", &cm64, 1);
        if (out) {
                fprintf(out, "  ]\n}\n");
                fclose(out);
        }
        /* A cache-hit figure means nothing if the library kept no mapping
         * (a build without the cache), nor the others if it kept some. */
        printf("client cache: %s in %d of %d cache-hit cases; off as asked "
               "in %d of %d others\n",
               mode.cache_on_seen == mode.cache_on_cases ? "used" :
               "NOT used", mode.cache_on_seen, mode.cache_on_cases,
               mode.cache_off_seen, mode.cache_off_cases);
        target("2 MiB cache hit", &chit2.rt, &cm2);
        target("64 MiB cache hit", &chit64.rt, &cm64);
        target("2 MiB reserve hit, cache off", &hit.rt, &cm2);
        return 0;
}
