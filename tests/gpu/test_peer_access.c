/*
 * test_peer_access — gmd_peer_access gives one GPU access to another's
 * gpu-memd buffers, as cudaDeviceEnablePeerAccess does for cudaMalloc
 * memory, on two GPUs that reach each other.
 *
 * One client of a gpu-memd serving both GPUs (default pools, the cache of
 * idle mappings off), 256 MiB buffers:
 *
 *  1. A on device 0, B on device 1: device 0 has no access to B
 *     (cuMemGetAccess); a copy A -> B queued on device 0 is timed and its
 *     bytes checked by a kernel on device 1, whatever way the driver
 *     carried it (or its refusal is reported);
 *  2. gmd_peer_access(0, 1): device 0 has read-write access to B, and the
 *     same copy, timed again, is right;
 *  3. C, allocated on device 1 after, has the access from its first map;
 *  4. C paged out to host memory and brought back (a new mapping) has it
 *     again. The client keeps no mapping across a swap-out
 *     (GPU_MEMD_KEEP_MAPPINGS=0): by default the daemon would keep C's
 *     VRAM mapped while it is out, with an idle pool, and bring it back
 *     with no new map, so step 4 would check the mapping of step 3 again.
 *
 * The two copy rates are printed ("copy 0 -> 1: ... GB/s without access,
 * ... with"): what the access is worth on this machine, the figure for
 * BENCHMARKS.md. Skips (exit 77, one "SKIP:" line) without a GPU, with
 * fewer than two, or without peer access between GPUs 0 and 1.
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
#define SIZE (256 * MiB)
#define SEED 0x5eed
#define REPS 5

static const gmd_cuda_driver *cu;

/* Device 0's (CUDA ordinal 0) access to the memory at `ptr`. */
static unsigned long long access_of_0(const void *ptr)
{
        CUmemLocation where = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 };
        unsigned long long flags = 0;

        if (cu->cuMemGetAccess(&flags, &where,
                               (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS)
                return ~0ull;
        return flags;
}

/* GB/s of the best of REPS copies of `a` (device 0) into `b`, queued on a
 * stream of device 0's primary context, then B's bytes checked on device
 * 1; 0 when a copy failed (said). */
static double copy_rate(gmd_buffer *a, gmd_buffer *b, const char *when)
{
        CUcontext ctx, was;
        CUstream s = NULL;
        CUdevice dev;
        CUresult res;
        double best = 0;
        long long bad;

        if (cu->cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
            cu->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
            cu->cuCtxPushCurrent(ctx) != CUDA_SUCCESS) {
                CHECK(0, "device 0's context");
                return 0;
        }
        res = cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
        for (int i = 0; i < REPS && res == CUDA_SUCCESS; i++) {
                double t0 = gpu_now_us(), gbs;

                res = cu->cuMemcpyAsync((CUdeviceptr)(uintptr_t)gmd_buffer_ptr(b),
                                        (CUdeviceptr)(uintptr_t)gmd_buffer_ptr(a),
                                        SIZE, s);
                if (res == CUDA_SUCCESS)
                        res = cu->cuStreamSynchronize(s);
                gbs = SIZE / ((gpu_now_us() - t0) * 1e3);
                if (res == CUDA_SUCCESS && gbs > best)
                        best = gbs;
        }
        if (s)
                cu->cuStreamDestroy(s);
        cu->cuCtxPopCurrent(&was);
        cu->cuDevicePrimaryCtxRelease(dev);
        if (res != CUDA_SUCCESS) {
                const char *name = "?";

                cu->cuGetErrorName(res, &name);
                printf("copy 0 -> 1 %s: refused by the driver (%s)\n", when,
                       name);
                return 0;
        }
        gpu_set_device(1);
        bad = gpu_check(gmd_buffer_ptr(b), SIZE, 0, SEED);
        CHECK(bad == 0, "B after the copy %s: %lld words differ", when, bad);
        printf("copy 0 -> 1 %s: %.1f GB/s (best of %d), bytes right\n", when,
               best, REPS);
        return best;
}

static void run(gmd_client *c)
{
        gmd_buffer *a = NULL, *b = NULL, *fresh = NULL;
        double before, after;
        unsigned d0, d1;

        CHECK(gmd_device_from_cuda(c, 0, &d0) == 0 &&
              gmd_device_from_cuda(c, 1, &d1) == 0, "devices: %s",
              gmd_last_error());
        CHECK(gmd_alloc(c, SIZE, d0, 0, 30000, &a) == 0, "A: %s",
              gmd_last_error());
        CHECK(gmd_alloc(c, SIZE, d1, 0, 30000, &b) == 0, "B: %s",
              gmd_last_error());
        if (!a || !b)
                return;
        gpu_set_device(0);
        CHECK(gpu_fill(gmd_buffer_ptr(a), SIZE, 0, SEED) == 0, "fill A: %s",
              gpu_last_error());

        /* 1. Mapped for device 1 alone. */
        CHECK(access_of_0(gmd_buffer_ptr(b)) == 0,
              "device 0's access to B before: %llx, want none",
              access_of_0(gmd_buffer_ptr(b)));
        before = copy_rate(a, b, "without access");

        /* 2. Given. */
        CHECK(gmd_peer_access(c, d0, d1) == 0, "gmd_peer_access: %s",
              gmd_last_error());
        CHECK(access_of_0(gmd_buffer_ptr(b)) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
              "device 0's access to B after: %llx, want read-write",
              access_of_0(gmd_buffer_ptr(b)));
        gpu_set_device(1);
        CHECK(gpu_fill(gmd_buffer_ptr(b), SIZE, 0, SEED + 1) == 0, "refill B");
        after = copy_rate(a, b, "with access");
        CHECK(after > 0, "the copy with access ran");
        if (before > 0 && after > 0)
                printf("access: x%.2f the rate without\n", after / before);

        /* 3. A buffer mapped after the call. */
        CHECK(gmd_alloc(c, SIZE, d1, GMD_ALLOC_SWAPPABLE, 30000, &fresh) == 0,
              "C: %s", gmd_last_error());
        if (fresh) {
                CHECK(access_of_0(gmd_buffer_ptr(fresh)) ==
                      CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                      "device 0's access to C (mapped after): %llx",
                      access_of_0(gmd_buffer_ptr(fresh)));
                /* 4. Out to host memory and back: mapped anew. */
                CHECK(gmd_release(c, fresh) == 0, "release C: %s",
                      gmd_last_error());
                CHECK(gmd_pageout(c, fresh) == 0 &&
                      gmd_wait(c, fresh, 30000) == 0, "page C out: %s",
                      gmd_last_error());
                CHECK(gmd_buffer_tier(fresh) == GMD_TIER_HOST,
                      "C is on host memory");
                CHECK(gmd_acquire(c, fresh, 30000) == 0, "acquire C: %s",
                      gmd_last_error());
                CHECK(gmd_buffer_tier(fresh) == GMD_TIER_VRAM,
                      "C is back in VRAM");
                CHECK(access_of_0(gmd_buffer_ptr(fresh)) ==
                      CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                      "device 0's access to C after its way back: %llx",
                      access_of_0(gmd_buffer_ptr(fresh)));
                gmd_free(c, fresh);
        }
        gmd_free(c, a);
        gmd_free(c, b);
}

int main(int argc, char **argv)
{
        (void)argc;
        (void)argv;
        setvbuf(stdout, NULL, _IOLBF, 0);
        cu = gpu_usable();
        if (!cu)
                return GPU_TEST_SKIP;
        if (!gpu_need_peers(cu))
                return GPU_TEST_SKIP;
        gpu_say_device(cu, 1, "the peer whose buffers device 0 is given");
        setenv(GMD_KEEP_MAPPINGS_ENV, "0", 1);    /* step 4 maps anew */
        return gpu_client_test("peer-access-test", run);
}
