/*
 * backend_cuda_link — the link between host memory and each device,
 * measured once each way soon after start (issue 13, item 5).
 *
 * Lab machines differ: an x16 Gen5 slot copies 54-55 GB/s each way, a GPU
 * on an x4 or x1 riser, or several GPUs sharing one CPU's lanes, far less.
 * Clients plan how far ahead to prefetch from what the link can do
 * (gpumem.torch's lead), and the operator sees it in status and metrics,
 * so the daemon measures it rather than assume the line rate.
 *
 * What is timed is what a swap moves through: a copy between VRAM and a
 * piece of the device's host arena (pinned, mapped into the daemon, the
 * memory swap-outs land in) on the device's own copy stream of that
 * direction, LINK_ROUNDS copies of LINK_COPY bytes each way after a small
 * untimed one, timed by CUDA events; the rate is the bytes over the time
 * of the timed copies together. A direction stops early once its copies
 * took LINK_BUDGET_US, so a slow link costs at most about twice that.
 *
 * It runs from maintain, on the loop thread, synchronously: about 7 ms of
 * copies at 55 GB/s, during which the loop waits. It waits (stays pending)
 * until the arena is built far enough to give LINK_COPY bytes and until no
 * copy of the device is in flight, so it measures the link alone and
 * holds no swap back. It is skipped, with one log line and zeros in
 * status, when it cannot be done: no host arena ([pools] host_stock = 0,
 * no HOST tier), the arena stopped short of LINK_COPY, no VRAM for the
 * copy, a CUDA call failed, or the arena had no room or the copy streams
 * were never idle for LINK_PATIENCE_US after the first try.
 */
#include "backend_cuda.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "log.h"
#include "timeutil.h"

#define LINK_COPY (64ull << 20)          /* bytes of one timed copy */
#define LINK_WARMUP (2ull << 20)         /* the untimed one before them */
#define LINK_ROUNDS 3
#define LINK_BUDGET_US 100000u           /* per direction, then it stops */
#define LINK_PATIENCE_US 60000000u       /* for room or idle streams */

/* Queue one copy of `len` bytes between the VRAM and the host piece on
 * `stream`, part by part where the piece has parts, as copy_submit does. */
static int link_copy(cuda_backend *b, CUstream stream, gmd_copy_dir dir,
                     CUdeviceptr vram, cuda_mem *host, uint64_t len)
{
        for (uint64_t done = 0; done < len; ) {
                uint64_t run = 0;
                CUdeviceptr at = cuda_mem_at(b, host, done, &run);
                uint64_t n = len - done < run ? len - done : run;
                int r;

                if (!at || !n)
                        return -EINVAL;
                r = cuda_check(b, dir == GMD_COPY_OUT ?
                               b->cu->cuMemcpyAsync(at, vram + done, n, stream) :
                               b->cu->cuMemcpyAsync(vram + done, at, n, stream),
                               "cuMemcpyAsync (link)");
                if (r < 0)
                        return r;
                done += n;
        }
        return 0;
}

/* Time one direction: a warm-up copy, then up to LINK_ROUNDS timed ones
 * of `len` bytes. Bytes per second in *ret_rate. */
static int link_time(cuda_backend *b, cuda_queue *q, gmd_copy_dir dir,
                     CUdeviceptr vram, cuda_mem *host, uint64_t len,
                     CUevent ev[2], unsigned *ret_rounds, uint64_t *ret_rate)
{
        const gmd_cuda_driver *cu = b->cu;
        double secs = 0;
        unsigned rounds = 0;
        int r;

        r = link_copy(b, q->stream, dir, vram, host, LINK_WARMUP);
        if (r == 0)
                r = cuda_check(b, cu->cuStreamSynchronize(q->stream),
                               "cuStreamSynchronize (link)");
        while (r == 0 && rounds < LINK_ROUNDS && secs * 1e6 < LINK_BUDGET_US) {
                float ms = 0;

                r = cuda_check(b, cu->cuEventRecord(ev[0], q->stream),
                               "cuEventRecord (link)");
                if (r == 0)
                        r = link_copy(b, q->stream, dir, vram, host, len);
                if (r == 0)
                        r = cuda_check(b, cu->cuEventRecord(ev[1], q->stream),
                                       "cuEventRecord (link)");
                if (r == 0)
                        r = cuda_check(b, cu->cuEventSynchronize(ev[1]),
                                       "cuEventSynchronize (link)");
                if (r == 0)
                        r = cuda_check(b, cu->cuEventElapsedTime(&ms, ev[0], ev[1]),
                                       "cuEventElapsedTime (link)");
                if (r == 0) {
                        secs += ms / 1e3;
                        rounds++;
                }
        }
        if (r < 0) {
                /* What was queued may still run: let it end before the
                 * memory goes. */
                cu->cuStreamSynchronize(q->stream);
                return r;
        }
        *ret_rounds = rounds;
        *ret_rate = secs > 0 ? (uint64_t)((double)len * rounds / secs) : 0;
        return 0;
}

/* LINK_COPY in whole host granules, as the arena hands them out. */
static uint64_t link_len(const cuda_device *d)
{
        uint64_t g = d->host_granularity ? d->host_granularity : 1;

        return (LINK_COPY + g - 1) / g * g;
}

static void link_skip(cuda_device *d, unsigned device, const char *why)
{
        d->link.state = CUDA_LINK_SKIPPED;
        log_notice("cuda: device %u: the link to host memory is not measured: "
                   "%s; status and metrics show it as unknown (0), and "
                   "clients plan their prefetches without it", device, why);
}

/* Whether the arena can give `len` contiguous bytes now (1), may later
 * (0; *ret_building when it is not built that far yet), or never will
 * (-1, with the reason in *ret_why). */
static int link_arena_ready(cuda_backend *b, cuda_device *d, uint64_t len,
                            bool *ret_building, const char **ret_why)
{
        cuda_arena *a = &d->arena;
        int ready;

        *ret_building = false;
        if (!b->host.started || !a->base) {
                *ret_why = "the device has no host arena ([pools] host_stock "
                           "is 0, or the machine has no HOST tier)";
                return -1;
        }
        pthread_mutex_lock(&b->host.lock);
        if (a->ranges.target < len || (a->failed && a->ranges.built < len)) {
                *ret_why = "its host arena is smaller than the 64 MiB the "
                           "measurement copies";
                ready = -1;
        } else {
                *ret_building = a->ranges.built < len;
                ready = extents_largest(&a->ranges.free) >= len ? 1 : 0;
        }
        pthread_mutex_unlock(&b->host.lock);
        return ready;
}

static void link_measure(cuda_backend *b, cuda_device *d, unsigned device)
{
        const gmd_cuda_driver *cu = b->cu;
        uint64_t len = link_len(d), rate[2] = { 0, 0 };
        unsigned rounds[2] = { 0, 0 };
        CUevent ev[2] = { NULL, NULL };
        CUdeviceptr vram = 0;
        gmd_mem *host = NULL;
        uint64_t t0 = now_us();
        int r;

        r = cuda_device_enter(b, d);
        if (r == 0 && cu->cuMemAlloc(&vram, len) != CUDA_SUCCESS) {
                vram = 0;
                link_skip(d, device, "no 64 MiB of VRAM free to copy from");
                goto out;
        }
        if (r == 0)
                r = cuda_ops_mem_create_private(&b->base, device, len, &host);
        if (r == -ENOSPC) {
                r = 0;          /* taken meanwhile: the next maintain tries */
                goto out;
        }
        if (r == 0)
                r = cuda_check(b, cu->cuEventCreate(&ev[0], CU_EVENT_DEFAULT),
                               "cuEventCreate (link)");
        if (r == 0)
                r = cuda_check(b, cu->cuEventCreate(&ev[1], CU_EVENT_DEFAULT),
                               "cuEventCreate (link)");
        for (int dir = GMD_COPY_OUT; r == 0 && dir <= GMD_COPY_IN; dir++)
                r = link_time(b, &d->queues[dir], (gmd_copy_dir)dir, vram,
                              cuda_mem_of(host), len, ev, &rounds[dir],
                              &rate[dir]);
        if (r < 0) {
                link_skip(d, device, "a CUDA call failed (above)");
                goto out;
        }
        d->link.bytes_per_s[GMD_COPY_OUT] = rate[GMD_COPY_OUT];
        d->link.bytes_per_s[GMD_COPY_IN] = rate[GMD_COPY_IN];
        d->link.state = CUDA_LINK_DONE;
        log_info("cuda: device %u: link to host memory %.1f GB/s in (host to "
                 "VRAM), %.1f GB/s out (VRAM to host): %u and %u copies of "
                 "%llu MiB, %.1f ms in all", device,
                 (double)rate[GMD_COPY_IN] / 1e9,
                 (double)rate[GMD_COPY_OUT] / 1e9, rounds[GMD_COPY_IN],
                 rounds[GMD_COPY_OUT], (unsigned long long)(len >> 20),
                 (double)(now_us() - t0) / 1e3);
out:
        for (int i = 0; i < 2; i++)
                if (ev[i])
                        cu->cuEventDestroy(ev[i]);
        if (host)
                cuda_ops_mem_destroy(&b->base, host);
        if (vram)
                cu->cuMemFree(vram);
}

void cuda_link_maintain(cuda_backend *b)
{
        uint64_t now = now_us();

        for (unsigned i = 0; i < b->n_devices; i++) {
                cuda_device *d = &b->devices[i];
                const char *why = NULL;
                bool building;
                int ready;

                if (d->link.state != CUDA_LINK_PENDING)
                        continue;
                ready = link_arena_ready(b, d, link_len(d), &building, &why);
                if (ready < 0) {
                        link_skip(d, i, why);
                        continue;
                }
                /* The arenas are built one device after the other: the
                 * patience starts once this one has its first bytes. */
                if (building)
                        continue;
                if (!d->link.first_try_us)
                        d->link.first_try_us = now;
                if (ready && !d->queues[GMD_COPY_OUT].head &&
                    !d->queues[GMD_COPY_IN].head &&
                    !d->queues[GMD_COPY_OUT].error &&
                    !d->queues[GMD_COPY_IN].error) {
                        link_measure(b, d, i);
                        continue;
                }
                if (now - d->link.first_try_us > LINK_PATIENCE_US)
                        link_skip(d, i, ready ? "its copy streams were not "
                                  "idle for a minute" : "its host arena had "
                                  "no 64 MiB free for a minute");
        }
}

void cuda_ops_link_info(gmd_backend *backend, unsigned device,
                        gmd_link_info *ret_info)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);

        memset(ret_info, 0, sizeof(*ret_info));
        if (!d || d->link.state != CUDA_LINK_DONE)
                return;
        ret_info->bytes_per_s[GMD_COPY_OUT] = d->link.bytes_per_s[GMD_COPY_OUT];
        ret_info->bytes_per_s[GMD_COPY_IN] = d->link.bytes_per_s[GMD_COPY_IN];
}
