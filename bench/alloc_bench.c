/*
 * alloc_bench — what an allocation through gpu-memd costs a client, against
 * cudaMalloc + cudaFree of the same size in the same process and run.
 *
 * One sample is a round trip: gmd_alloc (request, reply with the fd, VA
 * reserve, import, map, one access call) plus gmd_free (unmap, unreserve,
 * request, reply); alloc and free are also reported apart. Cases:
 *   hit   2 MiB while the daemon's reserve has chunks (each daemon starts
 *         with a full reserve; the bench restarts it to get more samples)
 *   miss  2 MiB with the reserve off (GPU_MEMD_CUDA_RESERVE=0): the daemon
 *         creates, exports, maps and zeroes a chunk per request
 *   64 MiB, always created on demand
 * The bench starts its own gpu-memd (see tests/gpu/gpu_proc.h for how it is
 * found). Prints a summary; --json FILE writes the figures. Exits 77 when
 * there is no usable GPU.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "gpumem.h"

#define MiB (1ull << 20)
#define MAX_SAMPLES 512
#define HIT_RESTARTS 6
#define HIT_PER_DAEMON 16   /* CUDA_RESERVE_CHUNKS */

typedef struct series {
        const char *name;
        int n;
        double us[MAX_SAMPLES];
} series;

typedef struct bench {
        series rt, alloc, free;
} bench;

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

static double pct(series *s, double p)
{
        int i;

        if (s->n == 0)
                return 0;
        qsort(s->us, (size_t)s->n, sizeof(double), cmp_double);
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

/* Start a daemon, connect, warm the client (mapper, context) with a size
 * the reserve never serves, then run `n` round trips of `size`. */
static int daemon_case(uint64_t size, int n, bench *b)
{
        gmd_client *c;
        gpu_daemon d;
        bench warm = { 0 };
        int r;

        r = gpu_daemon_start(NULL, &d);
        if (r < 0) {
                fprintf(stderr, "cannot start gpu-memd: %s\n", strerror(-r));
                return r;
        }
        r = gmd_connect(NULL, "alloc_bench", &c);
        if (r == 0) {
                r = daemon_round_trips(c, 4 * MiB, 3, &warm);
                if (r == 0)
                        r = daemon_round_trips(c, size, n, b);
                gmd_disconnect(c);
        }
        gpu_daemon_stop(&d, stderr);   /* the suite's log keeps it */
        return r;
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

int main(int argc, char **argv)
{
        static bench hit, miss, big;
        static series cm2, cm64;
        const gmd_cuda_driver *cu;
        const char *reason, *json = NULL;
        char name[64] = "?";
        uint64_t f, t;
        FILE *out = NULL;
        int r;

        setvbuf(stdout, NULL, _IOLBF, 0);
        for (int i = 1; i < argc; i++)
                if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
                        json = argv[++i];
        r = cuda_driver_load(&cu, &reason);
        if (r == 0 && cuda_driver_device_count(cu) <= 0)
                r = -ENODEV, reason = "no CUDA device visible";
        if (r < 0) {
                printf("SKIP: no usable GPU (%s)\n", reason);
                return GPU_TEST_SKIP;
        }
        if (gpu_mem_info(&f, &t) < 0)   /* this process's context first */
                return 1;
        cu->cuDeviceGetName(name, sizeof(name), 0);

        for (int i = 0; i < HIT_RESTARTS && r == 0; i++)
                r = daemon_case(2 * MiB, HIT_PER_DAEMON, &hit);
        setenv("GPU_MEMD_CUDA_RESERVE", "0", 1);
        if (r == 0)
                r = daemon_case(2 * MiB, 200, &miss);
        if (r == 0)
                r = daemon_case(64 * MiB, 100, &big);
        unsetenv("GPU_MEMD_CUDA_RESERVE");
        if (r == 0)
                r = cuda_case(2 * MiB, 200, &cm2);
        if (r == 0)
                r = cuda_case(64 * MiB, 100, &cm64);
        if (r < 0)
                return 1;

        if (json)
                out = fopen(json, "w");
        if (out)
                fprintf(out, "{\n  \"device\": \"%s\",\n  \"results\": [\n",
                        name);
        printf("alloc_bench on %s (round trip = alloc + free, client side "
               "including import/map/access and unmap)\n", name);
        line(out, "gpumem_2MiB_reserve_hit_roundtrip", &hit.rt, 0);
        line(out, "gpumem_2MiB_reserve_hit_alloc", &hit.alloc, 0);
        line(out, "gpumem_2MiB_reserve_hit_free", &hit.free, 0);
        line(out, "gpumem_2MiB_reserve_miss_roundtrip", &miss.rt, 0);
        line(out, "gpumem_2MiB_reserve_miss_alloc", &miss.alloc, 0);
        line(out, "gpumem_2MiB_reserve_miss_free", &miss.free, 0);
        line(out, "cudaMalloc_cudaFree_2MiB", &cm2, 0);
        line(out, "gpumem_64MiB_roundtrip", &big.rt, 0);
        line(out, "gpumem_64MiB_alloc", &big.alloc, 0);
        line(out, "cudaMalloc_cudaFree_64MiB", &cm64, 1);
        if (out) {
                fprintf(out, "  ]\n}\n");
                fclose(out);
        }
        printf("target (reserve hit < cudaMalloc+cudaFree, p50): %s "
               "(%.1f vs %.1f us)\n", pct(&hit.rt, 50) < pct(&cm2, 50) ?
               "met" : "NOT met", pct(&hit.rt, 50), pct(&cm2, 50));
        return 0;
}
