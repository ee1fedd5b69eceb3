/*
 * notify_bench — how soon the host hears that a copy is over, by the ways
 * the cuda backend could listen (backend_cuda_copy.c uses the first).
 *
 * Why it exists: the daemon's log of an acquire of a paged-out 64 MiB
 * buffer showed its copy taking 1521 us from issue to the loop's reap,
 * where the GPU copies 64 MiB in ~1220 us (BENCHMARKS.md, swap_bench's
 * run at 4ce2062): the acquire's fixed cost is over its 0.3 ms target,
 * and part of it may be how the end of the copy is heard.
 *
 * Per rep, one 64 MiB host-to-device copy (pinned cuMemHostAlloc to
 * cuMemAlloc) on a copy stream, between two timing events; the host time
 * from submit until the end is heard, by:
 *   hostfunc  a second stream waits on the end event and runs a host
 *             function (cuLaunchHostFunc) that stamps the time and posts a
 *             semaphore the main thread waits on: what the daemon does
 *             (its host function wakes the loop);
 *   spin      the main thread polls cuEventQuery on the end event;
 *   blocking  the main thread waits in cuEventSynchronize on an end event
 *             made with CU_EVENT_BLOCKING_SYNC (the thread sleeps).
 * The GPU's own time for the copy (cuEventElapsedTime) is the floor; each
 * way's "late" is its median heard time less the median GPU time.
 *
 * Usage: notify_bench [--json FILE] [--reps N]. Exits 77 when there is no
 * usable GPU, 1 when a CUDA call fails (the call and the error are printed).
 */
#include <errno.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cu_check.h"
#include "cuda_driver.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "bench_cli.h"

#define MiB (1ull << 20)
#define COPY (64 * MiB)
#define MAX_REPS 101

enum { HOSTFUNC, SPIN, BLOCKING, N_WAYS };
static const char *const way_names[N_WAYS] = { "hostfunc", "spin", "blocking" };

static const gmd_cuda_driver *cu;
static CUstream copy_stream, notify_stream;
static CUdeviceptr vram;
static void *host;
static double heard_us[N_WAYS][MAX_REPS], gpu_us[N_WAYS][MAX_REPS];

typedef struct stamp {
        double us;
        sem_t done;
} stamp;

static double now_us(void)
{
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void CUDA_CB on_copied(void *data)
{
        stamp *s = data;

        s->us = now_us();
        sem_post(&s->done);
}

static double median(double *v, int n)
{
        qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
        return n ? v[n / 2] : 0;
}

/* One copy heard `way`: the host time from submit to heard, and the GPU's. */
static int one(int way, CUevent start, CUevent end, double *ret_heard,
               double *ret_gpu)
{
        stamp s;
        float ms = 0;
        double t0;
        CUresult res;

        sem_init(&s.done, 0, 0);
        t0 = now_us();
        CU(cu->cuEventRecord(start, copy_stream));
        CU(cu->cuMemcpyHtoDAsync(vram, host, COPY, copy_stream));
        CU(cu->cuEventRecord(end, copy_stream));
        if (way == HOSTFUNC) {
                CU(cu->cuStreamWaitEvent(notify_stream, end, 0));
                CU(cu->cuLaunchHostFunc(notify_stream, on_copied, &s));
                while (sem_wait(&s.done) < 0 && errno == EINTR)
                        ;
                *ret_heard = s.us - t0;
        } else if (way == SPIN) {
                while ((res = cu->cuEventQuery(end)) == CUDA_ERROR_NOT_READY)
                        ;
                CU(res);
                *ret_heard = now_us() - t0;
        } else {
                CU(cu->cuEventSynchronize(end));
                *ret_heard = now_us() - t0;
        }
        CU(cu->cuStreamSynchronize(notify_stream));
        CU(cu->cuEventElapsedTime(&ms, start, end));
        *ret_gpu = ms * 1e3;
        sem_destroy(&s.done);
        return 0;
}

static int run_all(int reps, char *name, size_t len)
{
        CUevent start, end[2];
        CUcontext ctx;
        CUdevice dev;

        CU(cu->cuDeviceGet(&dev, 0));
        CU(cu->cuDeviceGetName(name, (int)len, dev));
        CU(cu->cuDevicePrimaryCtxRetain(&ctx, dev));
        CU(cu->cuCtxSetCurrent(ctx));
        CU(cu->cuStreamCreate(&copy_stream, CU_STREAM_NON_BLOCKING));
        CU(cu->cuStreamCreate(&notify_stream, CU_STREAM_NON_BLOCKING));
        CU(cu->cuMemAlloc(&vram, COPY));
        CU(cu->cuMemHostAlloc(&host, COPY, 0));
        memset(host, 0x5a, COPY);
        CU(cu->cuEventCreate(&start, CU_EVENT_DEFAULT));
        CU(cu->cuEventCreate(&end[0], CU_EVENT_DEFAULT));
        CU(cu->cuEventCreate(&end[1], CU_EVENT_BLOCKING_SYNC));
        for (int r = -3; r < reps; r++) {          /* three to warm up */
                for (int w = 0; w < N_WAYS; w++) {
                        double heard, gpu;

                        if (one(w, start, end[w == BLOCKING], &heard, &gpu) < 0)
                                return -EIO;
                        if (r >= 0) {
                                heard_us[w][r] = heard;
                                gpu_us[w][r] = gpu;
                        }
                }
        }
        return 0;
}

int main(int argc, char **argv)
{
        const char *json = NULL;
        char name[64] = "?";
        double heard[N_WAYS], gpu[N_WAYS];
        int reps = 31;
        FILE *f = NULL;

        setvbuf(stdout, NULL, _IOLBF, 0);
        if (bench_parse_args(argc, argv, &json, &reps, MAX_REPS))
                return 2;
        cu = gpu_usable();
        if (!cu)
                return GPU_TEST_SKIP;
        if (run_all(reps, name, sizeof(name)) < 0) {
                fprintf(stderr, "notify_bench: a CUDA call failed (above); no "
                        "results\n");
                return 1;
        }
        printf("notify_bench on %s: a 64 MiB host-to-VRAM copy, submit to "
               "heard, medians of %d (us)\n", name, reps);
        for (int w = 0; w < N_WAYS; w++) {
                heard[w] = median(heard_us[w], reps);
                gpu[w] = median(gpu_us[w], reps);
                printf("  %-9s heard %7.1f  gpu %7.1f  late %6.1f\n",
                       way_names[w], heard[w], gpu[w], heard[w] - gpu[w]);
        }
        if (json) {
                f = bench_json_open(json);
                if (!f)
                        return 1;
                fprintf(f, "{\n \"bench\": \"notify_bench\",\n \"device\": "
                        "\"%s\",\n \"copy_bytes\": %llu,\n \"reps\": %d,\n "
                        "\"ways\": {", name, (unsigned long long)COPY, reps);
                for (int w = 0; w < N_WAYS; w++)
                        fprintf(f, "%s\n  \"%s\": {\"heard_us\": %.1f, "
                                "\"gpu_us\": %.1f, \"late_us\": %.1f}",
                                w ? "," : "", way_names[w], heard[w], gpu[w],
                                heard[w] - gpu[w]);
                fprintf(f, "\n }\n}\n");
                if (bench_json_close(f, json) < 0)
                        return 1;
        }
        return 0;
}
