/*
 * pin_bench — how fast host memory can be pinned for a host arena, by one
 * thread and by several at once.
 *
 * Why it exists: the cuda backend pins its host arena one 1 GiB piece at a
 * time on one thread (backend_cuda_host.c), at 0.7-4.7 GB/s going by the
 * daemon's log, and a co-tenancy round that starts with the daemon finds
 * the arena still growing: swap-ins ran at 28-30 GB/s in such rounds
 * against 43-47 once it was built (BENCHMARKS.md). Whether pinning on
 * several threads at once would build it faster, or the driver and the
 * kernel serialize it, decides how the arena should grow.
 *
 * Per rep and per thread count T (1, 2, 4, 8): TOTAL bytes in 1 GiB
 * pieces, each thread making TOTAL / T of them the way the arena does
 * (cuMemCreate of a HOST_NUMA allocation on device 0's host NUMA node,
 * cuMemMap into a reserved range, cuMemSetAccess for device 0), timed
 * from the start to the last thread done; then all of it unmapped and
 * released, untimed. The same with cuMemHostAlloc (plain pinned memory)
 * on one thread, the baseline. Prints GB/s, the median of the reps.
 *
 * Usage: pin_bench [--json FILE] [--reps N]. Pins TOTAL (8 GiB) at a time:
 * run it where that much host memory is free. Exits 77 when there is no
 * usable GPU, 1 when a CUDA call fails (the call and the error printed).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cli.h"
#include "cu_check.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"

#define GiB (1ull << 30)
#define PIECE GiB
#define TOTAL (8 * GiB)
#define N_PIECES ((int)(TOTAL / PIECE))
#define MAX_REPS 9

static const int thread_counts[] = { 1, 2, 4, 8 };
#define N_COUNTS ((int)(sizeof(thread_counts) / sizeof(thread_counts[0])))

static const gmd_cuda_driver *cu;
static CUcontext ctx;
static CUdevice dev;
static int numa_id;

typedef struct piece {
        CUdeviceptr va;
        CUmemGenericAllocationHandle h;
        void *host;                     /* the baseline's */
} piece;

static piece pieces[N_PIECES];

typedef struct worker {
        pthread_t thread;
        int first, n;                   /* pieces[first .. first + n) */
        int r;
} worker;

/* Pin pieces [first, first + n) as the arena does. */
static int pin_range(int first, int n)
{
        CUmemAllocationProp prop = { 0 };
        CUmemAccessDesc access = { 0 };

        CU(cu->cuCtxSetCurrent(ctx));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        prop.location.id = numa_id;
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = 0;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        for (int i = first; i < first + n; i++) {
                piece *p = &pieces[i];

                CU(cu->cuMemCreate(&p->h, PIECE, &prop, 0));
                CU(cu->cuMemMap(p->va, PIECE, 0, p->h, 0));
                CU(cu->cuMemSetAccess(p->va, PIECE, &access, 1));
        }
        return 0;
}

static void *pin_worker(void *arg)
{
        worker *w = arg;

        w->r = pin_range(w->first, w->n);
        return NULL;
}

static int unpin_all(void)
{
        for (int i = 0; i < N_PIECES; i++) {
                if (!pieces[i].h)
                        continue;
                CU(cu->cuMemUnmap(pieces[i].va, PIECE));
                CU(cu->cuMemRelease(pieces[i].h));
                pieces[i].h = 0;
        }
        return 0;
}

/* GB/s of pinning TOTAL with `threads` threads at once. */
static int pin_once(int threads, double *ret_gbs)
{
        worker w[8];
        double t0;
        int r = 0;

        t0 = gpu_now_us();
        for (int t = 0; t < threads; t++) {
                w[t].first = t * (N_PIECES / threads);
                w[t].n = N_PIECES / threads;
                w[t].r = 0;
                if (pthread_create(&w[t].thread, NULL, pin_worker, &w[t]) != 0)
                        return -EAGAIN;
        }
        for (int t = 0; t < threads; t++) {
                pthread_join(w[t].thread, NULL);
                if (w[t].r < 0)
                        r = w[t].r;
        }
        *ret_gbs = TOTAL / ((gpu_now_us() - t0) * 1e3);
        if (unpin_all() < 0 || r < 0)
                return -EIO;
        return 0;
}

/* GB/s of cuMemHostAlloc of TOTAL in pieces, one thread. */
static int host_alloc_once(double *ret_gbs)
{
        double t0 = gpu_now_us();

        CU(cu->cuCtxSetCurrent(ctx));
        for (int i = 0; i < N_PIECES; i++)
                CU(cu->cuMemHostAlloc(&pieces[i].host, PIECE, 0));
        *ret_gbs = TOTAL / ((gpu_now_us() - t0) * 1e3);
        for (int i = 0; i < N_PIECES; i++) {
                CU(cu->cuMemFreeHost(pieces[i].host));
                pieces[i].host = NULL;
        }
        return 0;
}

static int setup(char *name, size_t len)
{
        int host = 0;

        CU(cu->cuDeviceGet(&dev, 0));
        CU(cu->cuDeviceGetName(name, (int)len, dev));
        CU(cu->cuDevicePrimaryCtxRetain(&ctx, dev));
        CU(cu->cuCtxSetCurrent(ctx));
        CU(cu->cuDeviceGetAttribute(&host,
                CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                dev));
        if (!host) {
                fprintf(stderr, "pin_bench: device 0 has no host VMM "
                        "allocations (HOST_NUMA): nothing to measure\n");
                return -ENOTSUP;
        }
        CU(cu->cuDeviceGetAttribute(&numa_id, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID,
                                    dev));
        if (numa_id < 0)
                numa_id = 0;
        for (int i = 0; i < N_PIECES; i++)
                CU(cu->cuMemAddressReserve(&pieces[i].va, PIECE, 0, 0, 0));
        return 0;
}

int main(int argc, char **argv)
{
        double gbs[N_COUNTS][MAX_REPS], base[MAX_REPS], med[N_COUNTS], bmed;
        const char *json = NULL;
        char name[64] = "?";
        int reps = 3;
        FILE *f;

        setvbuf(stdout, NULL, _IOLBF, 0);
        if (bench_parse_args(argc, argv, &json, &reps, MAX_REPS))
                return 2;
        cu = gpu_usable();
        if (!cu)
                return GPU_TEST_SKIP;
        if (setup(name, sizeof(name)) < 0)
                return 1;
        /* Interleaved, so a machine that slows down meanwhile slows all. */
        for (int r = 0; r < reps; r++) {
                if (host_alloc_once(&base[r]) < 0)
                        return 1;
                for (int c = 0; c < N_COUNTS; c++)
                        if (pin_once(thread_counts[c], &gbs[c][r]) < 0) {
                                fprintf(stderr, "pin_bench: a CUDA call "
                                        "failed (above); no results\n");
                                return 1;
                        }
        }
        bmed = bench_median(base, reps);
        printf("pin_bench on %s: %d GiB pinned in 1 GiB pieces, host NUMA "
               "node %d, medians of %d (GB/s)\n", name, N_PIECES, numa_id,
               reps);
        printf("  cuMemHostAlloc, 1 thread    %6.2f\n", bmed);
        for (int c = 0; c < N_COUNTS; c++) {
                med[c] = bench_median(gbs[c], reps);
                printf("  arena pieces, %d thread(s)  %6.2f  x%.2f one "
                       "thread\n", thread_counts[c], med[c], med[c] / med[0]);
        }
        if (!json)
                return 0;
        f = bench_json_open(json);
        if (!f)
                return 1;
        fprintf(f, "{\n \"bench\": \"pin_bench\",\n \"device\": \"%s\",\n "
                "\"bytes\": %llu,\n \"piece_bytes\": %llu,\n \"reps\": %d,\n "
                "\"host_alloc_gbs\": %.2f,\n \"arena_gbs\": {", name,
                (unsigned long long)TOTAL, (unsigned long long)PIECE, reps,
                bmed);
        for (int c = 0; c < N_COUNTS; c++)
                fprintf(f, "%s\"%d\": %.2f", c ? ", " : "", thread_counts[c],
                        med[c]);
        fprintf(f, "}\n}\n");
        return bench_json_close(f, json) < 0 ? 1 : 0;
}
