/*
 * test_gpu_vram_outside — VRAM held outside gpu-memd on a real GPU
 * (daemon/core/vram.c).
 *
 * A second process that does not use gpu-memd (a worker, gpu_proc.h)
 * cuMemAlloc's most of what the GPU has free, leaving a few GiB. gpu-memd's
 * pool, sized at its start, still says it has room. Then:
 *   - status shows at least the worker's bytes as unaccounted, and the
 *     driver's free memory; where NVML is there, it names the worker's
 *     pid with at least its bytes;
 *   - an allocation the pool has room for but the GPU has not (1 GiB more
 *     than the GPU has free) is refused at once with GMD_ENOMEM and the
 *     sentence naming what is held outside gpu-memd, not ERR_INTERNAL
 *     from cuMemCreate; with a deadline too (waiting would not help);
 *   - an allocation that fits beside the worker's block is served;
 *   - once the worker frees its block, the refused size is served.
 * The worker takes what the GPU has free less 4 GiB, measured in its own
 * context just before, so nothing here asks the driver for more than it
 * has free; the refused allocation is asked of gpu-memd, which must not
 * pass it on. The figures are printed, so the log says what was tried.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cuda_driver.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "gpumem.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)
/* What the worker leaves free on the GPU. */
#define LEAVE_FREE (4 * GiB)

enum { H_TAKE = 1, H_FREE };

typedef struct hcmd {
        int op;
        uint64_t leave;
} hcmd;

typedef struct hreply {
        int r;
        uint64_t taken;          /* bytes cuMemAlloc'd */
        uint64_t free_before;    /* the driver's free before it */
        char msg[160];
} hreply;

/* The outside user: a plain CUDA process, no gpu-memd. */
static int hog(int sock)
{
        const gmd_cuda_driver *cu = NULL;
        const char *why = NULL;
        CUdeviceptr block = 0;
        int fds[GPU_PROC_MAX_FDS];
        CUcontext ctx;
        CUdevice dev;
        hcmd c;

        if (cuda_driver_load(&cu, &why) < 0 || cu->cuDeviceGet(&dev, 0) ||
            cu->cuDevicePrimaryCtxRetain(&ctx, dev) || cu->cuCtxSetCurrent(ctx))
                return 2;
        while (gpu_proc_recv(sock, &c, sizeof(c), fds) == 0) {
                hreply rep = { 0 };
                size_t f = 0, t = 0;
                char err[128];
                CUresult res;

                switch (c.op) {
                case H_TAKE:
                        res = cu->cuMemGetInfo(&f, &t);
                        rep.free_before = f;
                        if (res != CUDA_SUCCESS || f <= c.leave + GiB) {
                                rep.r = -ENOSPC;
                                snprintf(rep.msg, sizeof(rep.msg),
                                         "only %llu MiB free on the GPU",
                                         (unsigned long long)(f / MiB));
                                break;
                        }
                        rep.taken = (f - c.leave) / (2 * MiB) * (2 * MiB);
                        res = cu->cuMemAlloc(&block, rep.taken);
                        if (res != CUDA_SUCCESS) {
                                rep.r = -ENOMEM;
                                rep.taken = 0;
                                snprintf(rep.msg, sizeof(rep.msg), "cuMemAlloc: %s",
                                         cuda_driver_error(cu, res, err,
                                                           sizeof(err)));
                        }
                        break;
                case H_FREE:
                        if (block)
                                rep.r = cu->cuMemFree(block) ? -EIO : 0;
                        block = 0;
                        break;
                }
                if (gpu_proc_send(sock, &rep, sizeof(rep), NULL, 0) < 0)
                        break;
        }
        if (block)
                cu->cuMemFree(block);
        return 0;
}

static hreply ask(gpu_proc *p, int op, uint64_t leave)
{
        hcmd c = { .op = op, .leave = leave };
        hreply rep = { .r = -EPIPE };
        int fds[GPU_PROC_MAX_FDS];

        if (gpu_proc_send(p->sock, &c, sizeof(c), NULL, 0) < 0 ||
            gpu_proc_recv(p->sock, &rep, sizeof(rep), fds) < 0)
                rep.r = -EPIPE;
        return rep;
}

static int vram_pool(gmd_client *c, gmd_pool_status *ret)
{
        gmd_status *s = NULL;
        int r = gmd_query_status(c, GMD_STATUS_POOLS, 0, &s);

        if (r < 0)
                return r;
        r = -ENOENT;
        for (size_t i = 0; i < s->n_pools; i++)
                if (s->pools[i].tier == GMD_TIER_VRAM && s->pools[i].device == 0) {
                        *ret = s->pools[i];
                        r = 0;
                }
        gmd_status_free(s);
        return r;
}

/* What status says about the processes on device 0: the bytes listed
 * for `pid` (-1: not listed), the largest figure listed, and how many. */
typedef struct listed {
        long long mine, largest;
        size_t n;
} listed;

static listed processes_listed(gmd_client *c, pid_t pid)
{
        listed l = { .mine = -1 };
        gmd_status *s = NULL;

        if (gmd_query_status(c, GMD_STATUS_POOLS, 0, &s) < 0)
                return l;
        for (size_t i = 0; i < s->n_gpu_processes; i++) {
                const gmd_gpu_process_status *g = &s->gpu_processes[i];

                if (g->device != 0)
                        continue;
                l.n++;
                if ((long long)g->bytes > l.largest)
                        l.largest = (long long)g->bytes;
                if (g->pid == (uint32_t)pid)
                        l.mine = (long long)g->bytes;
        }
        gmd_status_free(s);
        return l;
}

/* Attribution where the daemon has NVML: the outside block is listed,
 * under the outside process's pid — or, where NVML reports pids of
 * another pid namespace (containers), under some pid with at least its
 * bytes. No process listed: no NVML there, nothing to check. */
static void check_attribution(gmd_client *c, pid_t pid, uint64_t taken)
{
        listed l = processes_listed(c, pid);

        if (l.n == 0) {
                printf("NOTE: status lists no processes (no libnvidia-ml.so.1 "
                       "for the daemon, or NVML lists none): attribution not "
                       "checked\n");
                return;
        }
        printf("status lists %zu process(es) on gpu0; the outside process "
               "(pid %d): %lld MiB; the largest figure: %lld MiB\n", l.n,
               (int)pid, l.mine < 0 ? -1 : l.mine / (long long)MiB,
               l.largest / (long long)MiB);
        if (l.mine >= 0 && (uint64_t)l.mine >= taken)
                return;
        if (l.mine < 0 && (uint64_t)l.largest >= taken) {
                printf("NOTE: the outside block is listed under another pid: "
                       "NVML reports pids of another pid namespace here\n");
                return;
        }
        if (l.largest == 0) {
                printf("NOTE: NVML lists processes without their memory "
                       "(not available here): attribution not checked\n");
                return;
        }
        CHECK(0, "status does not attribute the outside block (%llu MiB) to "
              "any process", (unsigned long long)(taken / MiB));
}

/* gmd_alloc that must be refused for memory outside gpu-memd. */
static void expect_refused(gmd_client *c, uint64_t size, int64_t timeout_ms)
{
        gmd_buffer *b = NULL;
        double t0 = gpu_now_us(), ms;
        int r = gmd_alloc(c, size, 0, 0, timeout_ms, &b);
        char why[512];

        ms = (gpu_now_us() - t0) / 1e3;
        snprintf(why, sizeof(why), "%s", r ? gmd_last_error() : "served");
        printf("alloc %llu MiB (timeout %lld ms) beside the outside block: %d "
               "in %.1f ms: %s\n", (unsigned long long)(size / MiB),
               (long long)timeout_ms, r, ms, why);
        CHECK(r == GMD_ENOMEM, "want GMD_ENOMEM, got %d (%s)", r, why);
        CHECK(strstr(why, "held outside gpu-memd") != NULL,
              "the refusal names what is held outside gpu-memd: %s", why);
        CHECK(strstr(why, "cuMemCreate") == NULL && strstr(why, "backend") == NULL,
              "not the driver's failure passed on: %s", why);
        CHECK(ms < 1000, "refused at once, not after waiting (%.1f ms)", ms);
        if (r == 0)
                gmd_free(c, b);
}

static void run(gmd_client *c)
{
        /* Zero where a status query fails (its CHECK counts it). */
        gmd_pool_status before = { 0 }, during = { 0 }, after = { 0 };
        gmd_buffer *fits = NULL, *again = NULL;
        uint64_t refused_size;
        hreply rep;
        gpu_proc h;
        int r;

        CHECK(vram_pool(c, &before) == 0, "status: %s", gmd_last_error());
        printf("before: pool %llu MiB free of %llu; GPU %llu MiB free; "
               "unaccounted %llu MiB (CUDA contexts, other processes)\n",
               (unsigned long long)(before.free / MiB),
               (unsigned long long)(before.capacity / MiB),
               (unsigned long long)(before.device_free / MiB),
               (unsigned long long)(before.unaccounted / MiB));
        CHECK(before.device_free > 0, "status has the driver's free memory");

        CHECK(gpu_proc_spawn("hog", &h) == 0, "spawn the outside process");
        rep = ask(&h, H_TAKE, LEAVE_FREE);
        printf("outside process: %llu MiB free before, took %llu MiB with "
               "cuMemAlloc: %d %s\n", (unsigned long long)(rep.free_before / MiB),
               (unsigned long long)(rep.taken / MiB), rep.r, rep.msg);
        CHECK(rep.r == 0, "the outside process took its block: %s", rep.msg);
        if (rep.r < 0) {
                gpu_proc_wait(&h);
                return;
        }

        CHECK(vram_pool(c, &during) == 0, "status: %s", gmd_last_error());
        printf("during: pool %llu MiB free; GPU %llu MiB free; unaccounted "
               "%llu MiB\n", (unsigned long long)(during.free / MiB),
               (unsigned long long)(during.device_free / MiB),
               (unsigned long long)(during.unaccounted / MiB));
        CHECK(during.unaccounted >= before.unaccounted + rep.taken - 64 * MiB,
              "status shows the outside block as unaccounted (%llu MiB, want "
              "at least %llu)", (unsigned long long)(during.unaccounted / MiB),
              (unsigned long long)((before.unaccounted + rep.taken) / MiB));

        check_attribution(c, h.pid, rep.taken);

        refused_size = (during.device_free + GiB) / (2 * MiB) * (2 * MiB);
        CHECK(refused_size <= during.free, "the pool says %llu MiB fits (it has "
              "%llu MiB free): otherwise this test shows nothing",
              (unsigned long long)(refused_size / MiB),
              (unsigned long long)(during.free / MiB));
        if (refused_size <= during.free) {
                expect_refused(c, refused_size, 0);
                expect_refused(c, refused_size, 2000);
        }

        /* What fits beside it is served. */
        r = gmd_alloc(c, GiB, 0, 0, 0, &fits);
        CHECK(r == 0, "1 GiB beside the outside block: %s", gmd_last_error());
        if (r == 0)
                CHECK(gpu_fill(gmd_buffer_ptr(fits), GiB, 0, 7) == 0 &&
                      gpu_check(gmd_buffer_ptr(fits), GiB, 0, 7) == 0,
                      "the 1 GiB buffer holds its bytes");
        if (fits)
                gmd_free(c, fits);

        rep = ask(&h, H_FREE, 0);
        CHECK(rep.r == 0, "the outside process freed its block");
        CHECK(gpu_proc_wait(&h) == 0, "the outside process ended");

        CHECK(vram_pool(c, &after) == 0, "status: %s", gmd_last_error());
        printf("after: GPU %llu MiB free; unaccounted %llu MiB\n",
               (unsigned long long)(after.device_free / MiB),
               (unsigned long long)(after.unaccounted / MiB));
        CHECK(after.unaccounted + rep.taken / 2 < during.unaccounted,
              "unaccounted went down once the block was freed");
        r = gmd_alloc(c, refused_size, 0, 0, 5000, &again);
        CHECK(r == 0, "the refused %llu MiB is served once the outside block "
              "is gone: %s", (unsigned long long)(refused_size / MiB),
              gmd_last_error());
        if (again)
                gmd_free(c, again);
}

int main(int argc, char **argv)
{
        int sock = gpu_proc_worker_sock(argc, argv);

        if (sock >= 0)
                return hog(sock);
        return gpu_client_test("vram-outside", run);
}
