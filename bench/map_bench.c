/*
 * map_bench — what the driver calls of one remap cost per buffer, the
 * work a client's I/O thread does when the daemon moves a SWAPPABLE buffer
 * (client/mapper_cuda.c): swap-in = import the fd, map it at the buffer's
 * address, set access; swap-out = unmap.
 *
 * Why it exists: swap-ins of 2 MiB buffers ran at 0.45-0.61 of the link
 * while 64 MiB ones ran at 0.99 (BENCHMARKS.md), with the client's I/O
 * thread busy the whole batch. Batching the remaps (one notice and one ack
 * for many buffers) saves messages, not driver calls; this measures the
 * driver calls alone, in one process, with no daemon, so the bound they set
 * is known: a buffer's remap cannot take less than import + map + access
 * (and its swap-out an unmap), whatever the protocol.
 *
 * Per size (2, 16, 64 MiB) and round (three; the first pays the driver's
 * warm-up): N buffers made like gpu-memd's VRAM (cuMemCreate, exportable to
 * a POSIX fd), exported, then timed one call kind at a time over all N:
 * export, import, map, set access per buffer, unmap; then map again and set
 * access once over the whole contiguous range, to see whether one access
 * call for many buffers is cheaper than one each. Reported in µs per buffer
 * (access_range: the one call's time over N), with the rate the swap-in
 * calls alone would allow (size / (import + map + access)).
 *
 * Usage: map_bench [--json FILE]. Exits 77 when there is no usable GPU, 1
 * when a CUDA call fails (the call and the error are printed).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cu_check.h"
#include "cuda_driver.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "bench_cli.h"

#define MiB (1ull << 20)
#define ROUNDS 3
#define MAX_N 256

enum { EXPORT, IMPORT, MAP, ACCESS, UNMAP, ACCESS_RANGE, SWAPIN_T1,
       SWAPIN_T2, SWAPIN_T4, UNMAP_T4, N_STEPS };
static const char *const step_names[N_STEPS] = {
        "export", "import", "map", "access", "unmap", "access_range",
        "swapin_1thread", "swapin_2threads", "swapin_4threads",
        "unmap_4threads",
};

typedef struct map_case {
        unsigned size_mib, n;
        double us[ROUNDS][N_STEPS];     /* per buffer */
} map_case;

static map_case cases[] = { { 2, 256, { { 0 } } }, { 16, 64, { { 0 } } },
                            { 64, 32, { { 0 } } } };
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

static const gmd_cuda_driver *cu;
static CUdevice dev;

static double now_us(void)
{
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

typedef struct swapin_job {
        CUcontext ctx;
        CUdeviceptr va;
        uint64_t size;
        const int *fds;
        CUmemGenericAllocationHandle *handles;
        unsigned lo, hi;
        bool unmap;                 /* unmap [lo, hi) instead */
        CUresult res;
} swapin_job;

static void *swapin_thread(void *arg)
{
        swapin_job *j = arg;
        CUmemAccessDesc access = { 0 };

        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = dev;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        j->res = cu->cuCtxSetCurrent(j->ctx);
        for (unsigned i = j->lo; i < j->hi && j->res == CUDA_SUCCESS; i++) {
                CUdeviceptr at = j->va + i * j->size;

                if (j->unmap) {
                        j->res = cu->cuMemUnmap(at, j->size);
                        continue;
                }
                j->res = cu->cuMemImportFromShareableHandle(&j->handles[i],
                                (void *)(intptr_t)j->fds[i],
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
                if (j->res == CUDA_SUCCESS)
                        j->res = cu->cuMemMap(at, j->size, 0, j->handles[i], 0);
                if (j->res == CUDA_SUCCESS)
                        j->res = cu->cuMemSetAccess(at, j->size, &access, 1);
        }
        return NULL;
}

/* Wall time, µs, of `threads` threads doing the swap-in calls (or the
 * unmaps) of buffers [0, n) at va, split evenly. */
static int run_threads(unsigned threads, bool unmap, CUdeviceptr va,
                       uint64_t size, unsigned n, const int *fds,
                       CUmemGenericAllocationHandle *handles, double *ret_us)
{
        swapin_job jobs[4];
        pthread_t tid[4];
        CUcontext ctx;
        double t;

        CU(cu->cuCtxGetCurrent(&ctx));
        for (unsigned k = 0; k < threads; k++)
                jobs[k] = (swapin_job){ .ctx = ctx, .va = va, .size = size,
                                        .fds = fds, .handles = handles,
                                        .lo = n * k / threads,
                                        .hi = n * (k + 1) / threads,
                                        .unmap = unmap };
        t = now_us();
        for (unsigned k = 0; k < threads; k++)
                if (pthread_create(&tid[k], NULL, swapin_thread, &jobs[k]))
                        return -EAGAIN;
        for (unsigned k = 0; k < threads; k++)
                pthread_join(tid[k], NULL);
        *ret_us = now_us() - t;
        for (unsigned k = 0; k < threads; k++)
                CU(jobs[k].res);
        return 0;
}

/* The swap-in calls over 1, 2 and 4 threads, then unmaps over 4; `made`
 * exported afresh for each. */
static int run_threaded(map_case *c, CUmemGenericAllocationHandle *made,
                        double *us)
{
        static CUmemGenericAllocationHandle imported[MAX_N];
        static int fds[MAX_N];
        static const unsigned counts[] = { 1, 2, 4 };
        uint64_t size = (uint64_t)c->size_mib * MiB;
        CUdeviceptr va = 0;

        CU(cu->cuMemAddressReserve(&va, size * c->n, 0, 0, 0));
        for (unsigned k = 0; k < 3; k++) {
                for (unsigned i = 0; i < c->n; i++)
                        CU(cu->cuMemExportToShareableHandle(&fds[i], made[i],
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
                if (run_threads(counts[k], false, va, size, c->n, fds,
                                imported, &us[SWAPIN_T1 + k]) < 0)
                        return -EIO;
                for (unsigned i = 0; i < c->n; i++) {
                        close(fds[i]);
                        CU(cu->cuMemRelease(imported[i]));
                }
                if (k < 2) {
                        CU(cu->cuMemUnmap(va, size * c->n));
                        continue;
                }
                if (run_threads(4, true, va, size, c->n, fds, imported,
                                &us[UNMAP_T4]) < 0)
                        return -EIO;
        }
        CU(cu->cuMemAddressFree(va, size * c->n));
        return 0;
}

/* One round of case `c`: every call kind timed over all its buffers. */
static int run_round(map_case *c, double *us)
{
        static CUmemGenericAllocationHandle made[MAX_N], imported[MAX_N];
        static int fds[MAX_N];
        uint64_t size = (uint64_t)c->size_mib * MiB;
        CUmemAllocationProp prop = { 0 };
        CUmemAccessDesc access = { 0 };
        CUdeviceptr va = 0;
        double t;

        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = dev;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        for (unsigned i = 0; i < c->n; i++)
                CU(cu->cuMemCreate(&made[i], size, &prop, 0));
        t = now_us();
        for (unsigned i = 0; i < c->n; i++)
                CU(cu->cuMemExportToShareableHandle(&fds[i], made[i],
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        us[EXPORT] = now_us() - t;
        t = now_us();
        for (unsigned i = 0; i < c->n; i++) {
                CU(cu->cuMemImportFromShareableHandle(&imported[i],
                                (void *)(intptr_t)fds[i],
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
                close(fds[i]);
        }
        us[IMPORT] = now_us() - t;
        CU(cu->cuMemAddressReserve(&va, size * c->n, 0, 0, 0));
        t = now_us();
        for (unsigned i = 0; i < c->n; i++)
                CU(cu->cuMemMap(va + i * size, size, 0, imported[i], 0));
        us[MAP] = now_us() - t;
        t = now_us();
        for (unsigned i = 0; i < c->n; i++)
                CU(cu->cuMemSetAccess(va + i * size, size, &access, 1));
        us[ACCESS] = now_us() - t;
        t = now_us();
        for (unsigned i = 0; i < c->n; i++)
                CU(cu->cuMemUnmap(va + i * size, size));
        us[UNMAP] = now_us() - t;
        for (unsigned i = 0; i < c->n; i++)
                CU(cu->cuMemMap(va + i * size, size, 0, imported[i], 0));
        t = now_us();
        CU(cu->cuMemSetAccess(va, size * c->n, &access, 1));
        us[ACCESS_RANGE] = now_us() - t;
        CU(cu->cuMemUnmap(va, size * c->n));
        CU(cu->cuMemAddressFree(va, size * c->n));
        for (unsigned i = 0; i < c->n; i++)
                CU(cu->cuMemRelease(imported[i]));
        if (run_threaded(c, made, us) < 0)
                return -EIO;
        for (unsigned i = 0; i < c->n; i++)
                CU(cu->cuMemRelease(made[i]));
        for (int s = 0; s < N_STEPS; s++)
                us[s] /= c->n;
        return 0;
}

/* GB/s the swap-in calls of the last round allow at the case's size. */
static double swap_in_bound(const map_case *c)
{
        const double *us = c->us[ROUNDS - 1];
        double per = us[IMPORT] + us[MAP] + us[ACCESS];

        return per > 0 ? (double)c->size_mib * MiB / per / 1e3 : 0;
}

static void print_human(FILE *f, const char *name)
{
        fprintf(f, "map_bench on %s: driver calls of a remap, us per buffer "
                "(round %d of %d)\n", name, ROUNDS, ROUNDS);
        fprintf(f, "size      n  export  import     map  access   unmap  "
                "access_range  swap-in calls allow\n");
        for (unsigned i = 0; i < N_CASES; i++) {
                const map_case *c = &cases[i];
                const double *us = c->us[ROUNDS - 1];

                fprintf(f, "%3u MiB %4u %7.1f %7.1f %7.1f %7.1f %7.1f %13.1f  "
                        "%.1f GB/s\n", c->size_mib, c->n, us[EXPORT],
                        us[IMPORT], us[MAP], us[ACCESS], us[UNMAP],
                        us[ACCESS_RANGE], swap_in_bound(c));
        }
        fprintf(f, "swap-in calls (import + map + access) on 1 / 2 / 4 "
                "threads, unmap on 4, wall us per buffer\n");
        for (unsigned i = 0; i < N_CASES; i++) {
                const double *us = cases[i].us[ROUNDS - 1];

                fprintf(f, "%3u MiB %7.1f %7.1f %7.1f   unmap %7.1f\n",
                        cases[i].size_mib, us[SWAPIN_T1], us[SWAPIN_T2],
                        us[SWAPIN_T4], us[UNMAP_T4]);
        }
}

static void print_json(FILE *f, const char *name)
{
        fprintf(f, "{\n \"bench\": \"map_bench\",\n \"device\": \"%s\",\n"
                " \"unit\": \"us per buffer\",\n \"cases\": [", name);
        for (unsigned i = 0; i < N_CASES; i++) {
                const map_case *c = &cases[i];

                fprintf(f, "%s\n  {\"size_mib\": %u, \"n\": %u, "
                        "\"swap_in_calls_gbps\": %.2f, \"rounds\": [",
                        i ? "," : "", c->size_mib, c->n, swap_in_bound(c));
                for (int r = 0; r < ROUNDS; r++) {
                        fprintf(f, "%s{", r ? ", " : "");
                        for (int s = 0; s < N_STEPS; s++)
                                fprintf(f, "%s\"%s\": %.2f", s ? ", " : "",
                                        step_names[s], c->us[r][s]);
                        fprintf(f, "}");
                }
                fprintf(f, "]}");
        }
        fprintf(f, "\n ]\n}\n");
}

static int run_all(char *name, size_t len)
{
        CUcontext ctx;

        CU(cu->cuDeviceGet(&dev, 0));
        CU(cu->cuDeviceGetName(name, (int)len, dev));
        CU(cu->cuDevicePrimaryCtxRetain(&ctx, dev));
        CU(cu->cuCtxSetCurrent(ctx));
        for (unsigned i = 0; i < N_CASES; i++)
                for (int r = 0; r < ROUNDS; r++)
                        if (run_round(&cases[i], cases[i].us[r]) < 0)
                                return -EIO;
        return 0;
}

int main(int argc, char **argv)
{
        const char *json = NULL;
        char name[64] = "?";
        FILE *f;

        setvbuf(stdout, NULL, _IOLBF, 0);
        if (bench_parse_args(argc, argv, &json, NULL, 0))
                return 2;
        cu = gpu_usable();
        if (!cu)
                return GPU_TEST_SKIP;
        if (run_all(name, sizeof(name)) < 0) {
                fprintf(stderr, "map_bench: a CUDA call failed (above); no "
                        "results\n");
                return 1;
        }
        print_human(stdout, name);
        if (json) {
                f = bench_json_open(json);
                if (!f)
                        return 1;
                print_json(f, name);
                if (bench_json_close(f, json) < 0)
                        return 1;
        }
        return 0;
}
