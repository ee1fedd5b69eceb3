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
 *     carried it, or its refusal reported. In a worker process of its
 *     own, a client of the same daemon: should the driver fault on it,
 *     only the worker's context dies, and the test says so;
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
 * 1 (*ret_bad: the words that differ, -1 when it could not check); 0 when
 * a copy failed, its error in `err`. */
static double copy_rate(gmd_buffer *a, gmd_buffer *b, long long *ret_bad,
                        char *err, size_t len)
{
        CUcontext ctx, was;
        CUstream s = NULL;
        CUdevice dev;
        CUresult res;
        double best = 0;

        *ret_bad = -1;
        if (cu->cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
            cu->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
            cu->cuCtxPushCurrent(ctx) != CUDA_SUCCESS) {
                snprintf(err, len, "device 0's context");
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
                snprintf(err, len, "refused by the driver (%s)", name);
                return 0;
        }
        gpu_set_device(1);
        *ret_bad = gpu_check(gmd_buffer_ptr(b), SIZE, 0, SEED);
        return best;
}

/* What the worker measured without access. */
typedef struct report {
        int r;                  /* 0, or the failing call's error */
        double gbs;             /* 0: no copy ran */
        long long bad;
        char error[256];
} report;

/* The worker: A and B of its own, no peer access asked, the copy timed. */
static int worker(int sock)
{
        report rep = { .bad = -1 };
        gmd_buffer *a = NULL, *b = NULL;
        gmd_client *c = NULL;
        unsigned d0, d1;

        cu = gpu_usable();
        rep.r = cu ? gmd_connect(NULL, "no-access", &c) : -ENODEV;
        if (rep.r == 0)
                rep.r = gmd_device_from_cuda(c, 0, &d0);
        if (rep.r == 0)
                rep.r = gmd_device_from_cuda(c, 1, &d1);
        if (rep.r == 0)
                rep.r = gmd_alloc(c, SIZE, d0, 0, 30000, &a);
        if (rep.r == 0)
                rep.r = gmd_alloc(c, SIZE, d1, 0, 30000, &b);
        if (rep.r < 0) {
                snprintf(rep.error, sizeof(rep.error), "%s", gmd_last_error());
        } else if (gpu_set_device(0) < 0 ||
                   gpu_fill(gmd_buffer_ptr(a), SIZE, 0, SEED) < 0) {
                rep.r = -EIO;
                snprintf(rep.error, sizeof(rep.error), "fill A: %s",
                         gpu_last_error());
        } else if (access_of_0(gmd_buffer_ptr(b)) != 0) {
                rep.r = -EEXIST;
                snprintf(rep.error, sizeof(rep.error), "device 0 has access "
                         "%llx to B before any was asked",
                         access_of_0(gmd_buffer_ptr(b)));
        } else {
                rep.gbs = copy_rate(a, b, &rep.bad, rep.error,
                                    sizeof(rep.error));
        }
        gpu_proc_send(sock, &rep, sizeof(rep), NULL, 0);
        gmd_free(c, a);
        gmd_free(c, b);
        gmd_disconnect(c);
        return 0;
}

/* Step 1, in the worker: its GB/s, 0 when none. */
static double rate_without_access(void)
{
        gpu_proc w = { .pid = -1, .sock = -1 };
        report rep;
        int r;

        r = gpu_proc_spawn("no-access", &w);
        CHECK(r == 0, "spawn the worker: %s", strerror(-r));
        if (r < 0)
                return 0;
        r = gpu_proc_recv(w.sock, &rep, sizeof(rep), NULL);
        if (r < 0) {
                int status = gpu_proc_wait(&w);

                printf("copy 0 -> 1 without access: the worker died before "
                       "it reported (exit status %d): the driver faulted on "
                       "the copy, most likely\n", status);
                CHECK(0, "the copy without access killed its process");
                return 0;
        }
        CHECK(gpu_proc_wait(&w) == 0, "the worker's exit");
        CHECK(rep.r == 0, "worker: %s", rep.error);
        if (rep.r < 0)
                return 0;
        if (rep.gbs == 0) {
                printf("copy 0 -> 1 without access: %s\n", rep.error);
                return 0;
        }
        CHECK(rep.bad == 0, "B after the copy without access: %lld words "
              "differ", rep.bad);
        printf("copy 0 -> 1 without access: %.1f GB/s (best of %d), %s\n",
               rep.gbs, REPS, rep.bad == 0 ? "bytes right" : "BYTES WRONG");
        return rep.gbs;
}

static void run(gmd_client *c)
{
        gmd_buffer *a = NULL, *b = NULL, *fresh = NULL;
        double before, after;
        unsigned d0, d1;
        long long bad;
        char err[256] = "";

        /* 1. Mapped for device 1 alone, in the worker. */
        before = rate_without_access();

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

        CHECK(access_of_0(gmd_buffer_ptr(b)) == 0,
              "device 0's access to B before: %llx, want none",
              access_of_0(gmd_buffer_ptr(b)));

        /* 2. Given. */
        CHECK(gmd_peer_access(c, d0, d1) == 0, "gmd_peer_access: %s",
              gmd_last_error());
        CHECK(access_of_0(gmd_buffer_ptr(b)) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
              "device 0's access to B after: %llx, want read-write",
              access_of_0(gmd_buffer_ptr(b)));
        after = copy_rate(a, b, &bad, err, sizeof(err));
        CHECK(after > 0, "the copy with access: %s", err);
        CHECK(bad == 0, "B after the copy with access: %lld words differ",
              bad);
        if (after > 0)
                printf("copy 0 -> 1 with access: %.1f GB/s (best of %d), %s\n",
                       after, REPS, bad == 0 ? "bytes right" : "BYTES WRONG");
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
        cu = gpu_test_begin(argc, argv, worker);
        if (!cu)
                return GPU_TEST_SKIP;
        if (!gpu_need_peers(cu))
                return GPU_TEST_SKIP;
        gpu_say_device(cu, 1, "the peer whose buffers device 0 is given");
        setenv(GMD_KEEP_MAPPINGS_ENV, "0", 1);    /* step 4 maps anew */
        return gpu_client_test("peer-access-test", run);
}
