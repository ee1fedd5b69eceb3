/*
 * release_bench — how much releasing VRAM slows the copies that follow it.
 *
 * Releasing a CUDA VMM allocation (cuMemRelease) makes the driver scrub it
 * on the GPU after the call has returned, and the scrub slows host-to-device
 * copies that start within the next few milliseconds. Seen on an H200
 * (BENCHMARKS.md): a 256 MiB H2D copy right after releasing 1 GiB ran at
 * 36.5 GB/s instead of 54.5, both directions at once at 61 instead of 97;
 * D2H was unaffected,
 * unmapping alone did nothing, and after ~10 ms the effect was gone. This is
 * why gpu-memd's swap-ins reuse VRAM rather than release and create it
 * ([swap] keep_vram); the bench keeps the reason measurable per card and
 * driver.
 *
 * One copy of COPY_MIB between pinned host memory (cuMemHostAlloc) and a
 * long-lived VMM allocation, timed on the host from submission to completion
 * (what a client sees, and the way swap_bench times its baseline):
 *   baseline       H2D, D2H, and both at once on two streams
 *   after_release  per released size (256 MiB, 1 GiB, 4 GiB; sizes that do
 *                  not fit in free VRAM less MARGIN_MIB are skipped),
 *                  untouched or memset first, and per delay between the
 *                  release and the copy (0, 2, 10, 50 ms): each direction's
 *                  GB/s (median of --reps), its ratio to the baseline, and
 *                  how long the release path took (cuMemUnmap +
 *                  cuMemAddressFree + cuMemRelease, as gpu-memd calls them)
 *   split          1 GiB: an H2D copy right after unmapping alone, then one
 *                  right after cuMemRelease alone, to show which call does it
 * Released allocations are made like gpu-memd's (exportable to a POSIX fd,
 * exported once) and left idle SETTLE_MS before their release, so neither
 * their creation nor the scrub of the one before weighs on the copy.
 *
 * Usage: release_bench [--json FILE] [--reps N]. Exits 77 when there is no
 * usable GPU, 1 when a CUDA call fails (the call and the error are printed).
 */
#include <errno.h>
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
#define COPY_MIB 256
#define COPY (COPY_MIB * MiB)
#define MARGIN_MIB 1024    /* VRAM left free whatever the size released */
#define SETTLE_MS 20       /* idle between creating and releasing */
#define BASE_REPS 9
#define MAX_REPS 15
#define MAX_SAMPLES (MAX_REPS * N_DIRS)
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const uint64_t released_mib[] = { 256, 1024, 4096 };
static const int delays_ms[] = { 0, 2, 10, 50 };
#define SPLIT_MIB 1024

enum dir { H2D, D2H, BOTH, N_DIRS };
static const char *const dir_name[N_DIRS] = { "h2d", "d2h", "both" };

typedef struct samples {
        int n;
        double v[MAX_SAMPLES];
} samples;

typedef struct vram {
        CUmemGenericAllocationHandle handle;
        CUdeviceptr va;
        uint64_t size;
} vram;

typedef struct release_case {
        uint64_t released_mib;
        bool touched;
        int delay_ms;
        double gbs[N_DIRS];
        double release_path_ms;
} release_case;

typedef struct split_result {
        bool done;
        double unmap_ms, cumemrelease_ms;
        double h2d_after_unmap_gbs, h2d_after_release_gbs;
} split_result;

static const gmd_cuda_driver *cu;
static CUdevice dev;
static CUstream streams[2];      /* H2D on the first, D2H on the second */
static char *host;               /* 2 x COPY: H2D source, D2H destination */
static vram target;              /* 2 x COPY: H2D destination, D2H source */
static double baseline[N_DIRS];
static release_case cases[COUNT(released_mib) * 2 * COUNT(delays_ms)];
static int n_cases;
static bool skipped[COUNT(released_mib)];
static split_result split;


static void add(samples *s, double v)
{
        if (s->n < MAX_SAMPLES)
                s->v[s->n++] = v;
}

/* Sorts the samples in place. */
static double median(samples *s)
{
        return bench_median(s->v, s->n);
}

static double ratio(double gbs, enum dir d)
{
        return baseline[d] > 0 ? gbs / baseline[d] : 0;
}

static void sleep_ms(int ms)
{
        struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static int vram_create(uint64_t size, vram *ret)
{
        CUmemAllocationProp prop = {
                .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev },
        };
        CUmemAccessDesc access = {
                .location = prop.location,
                .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        vram m = { .size = size };
        int fd;

        CU(cu->cuMemCreate(&m.handle, size, &prop, 0));
        CU(cu->cuMemExportToShareableHandle(&fd, m.handle,
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        close(fd);
        CU(cu->cuMemAddressReserve(&m.va, size, 0, 0, 0));
        CU(cu->cuMemMap(m.va, size, 0, m.handle, 0));
        CU(cu->cuMemSetAccess(m.va, size, &access, 1));
        *ret = m;
        return 0;
}

/* Unmap and give back the address range; the memory stays allocated. */
static int vram_unmap(vram *m)
{
        CU(cu->cuMemUnmap(m->va, m->size));
        CU(cu->cuMemAddressFree(m->va, m->size));
        return 0;
}

/* One copy of COPY each way `d` asks for; GB/s over both when BOTH. */
static int copy_gbs(enum dir d, double *ret_gbs)
{
        double t0 = gpu_now_us();

        if (d != D2H)
                CU(cu->cuMemcpyHtoDAsync(target.va, host, COPY, streams[0]));
        if (d != H2D)
                CU(cu->cuMemcpyDtoHAsync(host + COPY, target.va + COPY, COPY,
                                         streams[1]));
        CU(cu->cuStreamSynchronize(streams[0]));
        CU(cu->cuStreamSynchronize(streams[1]));
        *ret_gbs = (d == BOTH ? 2.0 : 1.0) * COPY / (gpu_now_us() - t0) / 1e3;
        return 0;
}

static int run_baseline(void)
{
        samples s[N_DIRS] = { 0 };
        double gbs;

        for (int d = 0; d < N_DIRS; d++)   /* warm-up */
                if (copy_gbs(d, &gbs) < 0)
                        return -EIO;
        for (int i = 0; i < BASE_REPS; i++)
                for (int d = 0; d < N_DIRS; d++) {
                        if (copy_gbs(d, &gbs) < 0)
                                return -EIO;
                        add(&s[d], gbs);
                }
        for (int d = 0; d < N_DIRS; d++)
                baseline[d] = median(&s[d]);
        return 0;
}

/* Create, maybe touch, settle, release; wait the case's delay; copy. */
static int release_then_copy(const release_case *c, enum dir d,
                             double *ret_gbs, double *ret_release_ms)
{
        vram y;
        double t0;

        if (vram_create(c->released_mib * MiB, &y) < 0)
                return -EIO;
        if (c->touched) {
                CU(cu->cuMemsetD8Async(y.va, 0x5a, y.size, streams[0]));
                CU(cu->cuStreamSynchronize(streams[0]));
        }
        sleep_ms(SETTLE_MS);
        t0 = gpu_now_us();
        if (vram_unmap(&y) < 0)
                return -EIO;
        CU(cu->cuMemRelease(y.handle));
        *ret_release_ms = (gpu_now_us() - t0) / 1e3;
        sleep_ms(c->delay_ms);
        return copy_gbs(d, ret_gbs);
}

static int run_case(release_case *c, int reps)
{
        samples s[N_DIRS] = { 0 }, release_ms = { 0 };
        double gbs, ms;

        for (int i = 0; i < reps; i++)
                for (int d = 0; d < N_DIRS; d++) {
                        if (release_then_copy(c, d, &gbs, &ms) < 0)
                                return -EIO;
                        add(&s[d], gbs);
                        add(&release_ms, ms);
                }
        for (int d = 0; d < N_DIRS; d++)
                c->gbs[d] = median(&s[d]);
        c->release_path_ms = median(&release_ms);
        return 0;
}

/* Which call slows the copy: unmap (with the address range) or release. */
static int run_split(int reps)
{
        samples unmap_ms = { 0 }, rel_ms = { 0 }, after_unmap = { 0 },
                after_release = { 0 };
        double t0, gbs;
        vram y;

        for (int i = 0; i < reps; i++) {
                if (vram_create(SPLIT_MIB * MiB, &y) < 0)
                        return -EIO;
                sleep_ms(SETTLE_MS);
                t0 = gpu_now_us();
                if (vram_unmap(&y) < 0)
                        return -EIO;
                add(&unmap_ms, (gpu_now_us() - t0) / 1e3);
                if (copy_gbs(H2D, &gbs) < 0)
                        return -EIO;
                add(&after_unmap, gbs);
                sleep_ms(SETTLE_MS);
                t0 = gpu_now_us();
                CU(cu->cuMemRelease(y.handle));
                add(&rel_ms, (gpu_now_us() - t0) / 1e3);
                if (copy_gbs(H2D, &gbs) < 0)
                        return -EIO;
                add(&after_release, gbs);
                sleep_ms(SETTLE_MS);   /* the scrub ends before the next */
        }
        split.unmap_ms = median(&unmap_ms);
        split.cumemrelease_ms = median(&rel_ms);
        split.h2d_after_unmap_gbs = median(&after_unmap);
        split.h2d_after_release_gbs = median(&after_release);
        split.done = true;
        return 0;
}

/* Whether `mib` can be created now, leaving MARGIN_MIB free. */
static int fits(uint64_t mib, bool *ret_fits)
{
        size_t free_b, total_b;

        CU(cu->cuMemGetInfo(&free_b, &total_b));
        *ret_fits = (mib + MARGIN_MIB) * MiB <= free_b;
        return 0;
}

static int run_all(int reps)
{
        bool ok;

        printf("baseline ...\n");
        if (run_baseline() < 0)
                return -EIO;
        for (size_t k = 0; k < COUNT(released_mib); k++) {
                if (fits(released_mib[k], &ok) < 0)
                        return -EIO;
                if (!ok) {
                        printf("released %llu MiB: skipped, does not fit\n",
                               (unsigned long long)released_mib[k]);
                        skipped[k] = true;
                        continue;
                }
                printf("released %llu MiB ...\n",
                       (unsigned long long)released_mib[k]);
                for (int touched = 0; touched < 2; touched++)
                        for (size_t j = 0; j < COUNT(delays_ms); j++) {
                                release_case *c = &cases[n_cases++];

                                c->released_mib = released_mib[k];
                                c->touched = touched;
                                c->delay_ms = delays_ms[j];
                                if (run_case(c, reps) < 0)
                                        return -EIO;
                        }
        }
        if (fits(SPLIT_MIB, &ok) < 0)
                return -EIO;
        if (ok)
                return run_split(reps);
        printf("split (%d MiB): skipped, does not fit\n", SPLIT_MIB);
        return 0;
}

/* The long-lived side of every copy, and the context and streams. */
static int setup(char *name, size_t len)
{
        CUcontext ctx;
        void *p;

        CU(cu->cuDeviceGet(&dev, 0));
        CU(cu->cuDeviceGetName(name, (int)len, dev));
        CU(cu->cuDevicePrimaryCtxRetain(&ctx, dev));
        CU(cu->cuCtxSetCurrent(ctx));
        for (int i = 0; i < 2; i++)
                CU(cu->cuStreamCreate(&streams[i], CU_STREAM_NON_BLOCKING));
        CU(cu->cuMemHostAlloc(&p, 2 * COPY, 0));
        host = p;
        memset(host, 0x5a, 2 * COPY);   /* touched, like real data */
        return vram_create(2 * COPY, &target);
}

static void print_human(FILE *f, const char *name, int reps)
{
        fprintf(f, "release_bench on %s: %d MiB copies, pinned host <-> VMM VRAM, "
               "median of %d\n", name, COPY_MIB, reps);
        fprintf(f, "baseline: h2d %.1f  d2h %.1f  both %.1f GB/s\n",
                baseline[H2D], baseline[D2H], baseline[BOTH]);
        fprintf(f, "released  touched  delay  release_path  h2d (ratio)   "
                "d2h (ratio)   both (ratio)\n");
        for (int i = 0; i < n_cases; i++) {
                const release_case *c = &cases[i];

                fprintf(f, "%5llu MiB  %-7s  %2d ms  %9.2f ms",
                        (unsigned long long)c->released_mib,
                        c->touched ? "yes" : "no", c->delay_ms,
                        c->release_path_ms);
                for (int d = 0; d < N_DIRS; d++)
                        fprintf(f, "  %5.1f (%.2f)", c->gbs[d],
                                ratio(c->gbs[d], d));
                fprintf(f, "\n");
        }
        if (split.done)
                fprintf(f, "split, %d MiB: h2d %.1f GB/s (%.2f) after unmap "
                        "(%.2f ms), %.1f GB/s (%.2f) after cuMemRelease "
                        "(%.2f ms)\n", SPLIT_MIB,
                        split.h2d_after_unmap_gbs,
                        ratio(split.h2d_after_unmap_gbs, H2D), split.unmap_ms,
                        split.h2d_after_release_gbs,
                        ratio(split.h2d_after_release_gbs, H2D),
                        split.cumemrelease_ms);
}

static void print_json(FILE *f, const char *name, int reps)
{
        const char *sep = "";

        fprintf(f, "{\n  \"device\": \"%s\",\n  \"copy_mib\": %d,\n"
                "  \"reps\": %d,\n  \"margin_mib\": %d,\n  \"baseline\": {",
                name, COPY_MIB, reps, MARGIN_MIB);
        for (int d = 0; d < N_DIRS; d++)
                fprintf(f, "%s\"%s_gbs\": %.2f", d ? ", " : "", dir_name[d],
                        baseline[d]);
        fprintf(f, "},\n  \"skipped_released_mib\": [");
        for (size_t k = 0; k < COUNT(released_mib); k++)
                if (skipped[k]) {
                        fprintf(f, "%s%llu", sep,
                                (unsigned long long)released_mib[k]);
                        sep = ", ";
                }
        fprintf(f, "],\n  \"after_release\": [");
        for (int i = 0; i < n_cases; i++) {
                const release_case *c = &cases[i];

                fprintf(f, "%s\n    {\"released_mib\": %llu, \"touched\": %s, "
                        "\"delay_ms\": %d, \"release_path_ms\": %.3f",
                        i ? "," : "", (unsigned long long)c->released_mib,
                        c->touched ? "true" : "false", c->delay_ms,
                        c->release_path_ms);
                for (int d = 0; d < N_DIRS; d++)
                        fprintf(f, ", \"%s_gbs\": %.2f, \"%s_ratio\": %.3f",
                                dir_name[d], c->gbs[d], dir_name[d],
                                ratio(c->gbs[d], d));
                fprintf(f, "}");
        }
        fprintf(f, "\n  ],\n  \"split\": ");
        if (split.done)
                fprintf(f, "{\"released_mib\": %d, \"unmap_ms\": %.3f, "
                        "\"cumemrelease_ms\": %.3f, "
                        "\"h2d_after_unmap_gbs\": %.2f, "
                        "\"h2d_after_unmap_ratio\": %.3f, "
                        "\"h2d_after_release_gbs\": %.2f, "
                        "\"h2d_after_release_ratio\": %.3f}\n}\n", SPLIT_MIB,
                        split.unmap_ms, split.cumemrelease_ms,
                        split.h2d_after_unmap_gbs,
                        ratio(split.h2d_after_unmap_gbs, H2D),
                        split.h2d_after_release_gbs,
                        ratio(split.h2d_after_release_gbs, H2D));
        else
                fprintf(f, "null\n}\n");
}

int main(int argc, char **argv)
{
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
        if (setup(name, sizeof(name)) < 0 || run_all(reps) < 0) {
                fprintf(stderr, "release_bench: a CUDA call failed (above); "
                        "no results\n");
                return 1;
        }
        print_human(stdout, name, reps);
        if (json) {
                f = bench_json_open(json);
                if (!f)
                        return 1;
                print_json(f, name, reps);
                if (bench_json_close(f, json) < 0)
                        return 1;
        }
        return 0;
}
