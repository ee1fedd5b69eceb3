/*
 * backend_cuda_link — the link between host memory and each device,
 * measured once each way soon after start.
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
 * direction, out then in, LINK_ROUNDS copies of LINK_COPY bytes each way
 * after a small untimed one, each between two CUDA events; the rate is the
 * bytes over the time of the timed copies together. A direction stops
 * early once its copies took LINK_BUDGET_US.
 *
 * It never waits on the loop thread (it used to, 8 ms on an idle H200 but
 * 0.5-1 s in GPU tests, serving nobody meanwhile). It queues one timed copy
 * at a time (the first of a direction behind the warm-up) with its events,
 * and the copy engine's notify stream wakes the loop after it as after a
 * swap's copy (cuda_copy_wake_after); copy_reap and maintain then poll it
 * (cuda_link_poll: cuEventQuery, CUDA_ERROR_NOT_READY is "not yet"), take
 * its time (cuEventElapsedTime) and queue the next. The log line says how
 * long it took in all and how much of that was the loop thread's.
 *
 *   PENDING -> COPYING  arena room and idle copy streams: first copy queued
 *           -> SKIPPED  it cannot be done (below)
 *   COPYING -> COPYING  a copy is over: the next one is queued
 *           -> PENDING  interrupted: a copy of the device was submitted
 *           -> DONE     both ways timed: the figures are published
 *           -> SKIPPED  a CUDA call failed
 *
 * The link is measured alone, and no swap waits for it: a try starts only
 * when the device has no copy in flight, and a client's copy submitted for
 * the device while the try runs (copy_submit counts them) is queued at
 * once, as always, behind at most the one measurement copy on its stream
 * (64 MiB, ~1.2 ms at 55 GB/s, plus the 2 MiB warm-up before the first of
 * a direction). When that copy is over the try is given up, whatever it
 * measured, and made again from the start the next time maintain finds the
 * streams idle. The copy engine holds nothing back and knows nothing of
 * the measurement; a lost try costs ~10 ms of copies.
 *
 * It waits (stays pending) until the arena is pinned in full (pinning
 * holds the driver: the first calls of a measurement started earlier
 * waited on the loop thread for it) and has LINK_COPY bytes free, and
 * until no copy of the device is in flight. It is
 * skipped, with one log line and zeros in status, when it cannot be done:
 * no host arena ([pools] host_stock = 0, no HOST tier), the arena stopped
 * short of LINK_COPY, no VRAM for the copy, a CUDA call failed, or for
 * LINK_PATIENCE_US after the first try the arena had no room, the copy
 * streams were never idle, or swaps interrupted every try. Its VRAM and
 * events are kept from try to try; what it holds is freed once both copy
 * streams are idle (its own copies may still run after a failure, and
 * cuMemFree waits for the device's work).
 */
#include "backend_cuda.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "timeutil.h"

#define LINK_COPY (64ull << 20)          /* bytes of one timed copy */
#define LINK_WARMUP (2ull << 20)         /* the untimed one before them */
#define LINK_ROUNDS 3
#define LINK_BUDGET_US 100000u           /* per direction, then it stops */
#define LINK_PATIENCE_US 60000000u       /* for room, idle streams, or a
                                          * try no swap interrupted */

#define TO(s) (1u << (s))

static const unsigned link_legal_next[] = {
        [CUDA_LINK_PENDING] = TO(CUDA_LINK_COPYING) | TO(CUDA_LINK_SKIPPED),
        [CUDA_LINK_COPYING] = TO(CUDA_LINK_COPYING) | TO(CUDA_LINK_PENDING) |
                              TO(CUDA_LINK_DONE) | TO(CUDA_LINK_SKIPPED),
        [CUDA_LINK_DONE] = 0,
        [CUDA_LINK_SKIPPED] = 0,
};

static const char *link_state_name(cuda_link_state state)
{
        static const char *const names[] = { "pending", "copying", "done",
                                             "skipped" };

        return state <= CUDA_LINK_SKIPPED ? names[state] : "?";
}

static bool link_change_state(cuda_device *d, unsigned device,
                              cuda_link_state next)
{
        cuda_link *l = &d->link;

        if (!(link_legal_next[l->state] & TO(next))) {
                log_error("cuda: device %u: the link measurement refused to go "
                          "from %s to %s (a bug: please report it)", device,
                          link_state_name(l->state), link_state_name(next));
                return false;
        }
        if (next != l->state)
                log_debug("cuda: device %u: link measurement %s -> %s", device,
                          link_state_name(l->state), link_state_name(next));
        l->state = next;
        return true;
}

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

/* Queue the next timed copy of the direction under way (behind the
 * warm-up when it is the direction's first) between the two events, and
 * the wake after it. The device's context is current. */
static int link_queue(cuda_backend *b, cuda_device *d, bool warmup)
{
        const gmd_cuda_driver *cu = b->cu;
        cuda_link *l = &d->link;
        cuda_queue *q = &d->queues[l->dir];
        cuda_mem *host = cuda_mem_of(l->host);
        int r = 0;

        if (warmup)
                r = link_copy(b, q->stream, l->dir, l->vram, host, LINK_WARMUP);
        if (r == 0)
                r = cuda_check(b, cu->cuEventRecord(l->ev[0], q->stream),
                               "cuEventRecord (link)");
        if (r == 0)
                r = link_copy(b, q->stream, l->dir, l->vram, host, l->len);
        if (r == 0)
                r = cuda_check(b, cu->cuEventRecord(l->ev[1], q->stream),
                               "cuEventRecord (link)");
        if (r == 0)
                r = cuda_copy_wake_after(b, q, l->ev[1]);
        return r;
}

/* Copies ever submitted for the device by the copy engine. */
static uint64_t link_submitted(const cuda_device *d)
{
        uint64_t n = 0;

        for (int i = 0; i < CUDA_QUEUES; i++)
                n += d->queues[i].n_submitted;
        return n;
}

/* Nothing of the copy engine's in flight on `d`, and no stream failed. */
static bool link_quiet(const cuda_device *d)
{
        for (int i = 0; i < CUDA_QUEUES; i++)
                if (d->queues[i].head || d->queues[i].error)
                        return false;
        return true;
}

/* Free what the measurement holds (the device's context current): at
 * backend close, after the streams were synchronized, or from
 * link_release. */
static void link_free(cuda_backend *b, cuda_device *d)
{
        cuda_link *l = &d->link;

        for (int i = 0; i < 2; i++) {
                if (l->ev[i])
                        b->cu->cuEventDestroy(l->ev[i]);
                l->ev[i] = NULL;
        }
        if (l->host)
                cuda_ops_mem_destroy(&b->base, l->host);
        l->host = NULL;
        if (l->vram) {
                b->cu->cuMemFree(l->vram);
                d->vram_own -= l->len;
        }
        l->vram = 0;
}

/* Free what the measurement holds once both copy streams are idle, never
 * waiting: nothing of the measurement runs then, and cuMemFree has nothing
 * to wait for; until then the next poll tries again. */
static void link_release(cuda_backend *b, cuda_device *d)
{
        cuda_link *l = &d->link;

        if (!l->vram && !l->host && !l->ev[0] && !l->ev[1])
                return;
        if (cuda_device_enter(b, d) < 0)
                return;
        for (int dir = 0; dir < 2; dir++)
                if (b->cu->cuStreamQuery(d->queues[dir].stream) ==
                    CUDA_ERROR_NOT_READY)
                        return;
        link_free(b, d);
}

/* LINK_COPY in whole host granules, as the arena hands them out. */
static uint64_t link_len(const cuda_device *d)
{
        uint64_t g = d->host_granularity ? d->host_granularity : 1;

        return (LINK_COPY + g - 1) / g * g;
}

static void link_skip(cuda_backend *b, cuda_device *d, unsigned device,
                      const char *why)
{
        link_change_state(d, device, CUDA_LINK_SKIPPED);
        log_notice("cuda: device %u: the link to host memory is not measured: "
                   "%s; status and metrics show it as unknown (0), and "
                   "clients plan their prefetches without it", device, why);
        link_release(b, d);
}

/* Whether the arena can give `len` contiguous bytes now (1), may later
 * (0; *ret_building while it is still being pinned), or never will
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
                /* Until every arena is pinned in full: the background
                 * thread's pinning holds the driver, so the measurement's
                 * first calls on the loop thread waited for it (1.37 s of
                 * a 1.38 s measurement on the H200 while 8 GiB were
                 * pinned; on a two-H100 host device 0's, started while
                 * device 1's arena was pinned, 601 ms of 609). */
                *ret_building = a->ranges.built < len || cuda_host_pinning(b);
                ready = extents_largest(&a->ranges.free) >= len ? 1 : 0;
        }
        pthread_mutex_unlock(&b->host.lock);
        return ready;
}

/* PENDING, the arena has room and the copy streams are idle: take what
 * the try copies between (what an earlier try left is kept) and queue its
 * first copy. */
static void link_begin(cuda_backend *b, cuda_device *d, unsigned device)
{
        const gmd_cuda_driver *cu = b->cu;
        cuda_link *l = &d->link;
        uint64_t t0 = now_us();
        int r;

        r = cuda_device_enter(b, d);
        if (r == 0 && !l->vram) {
                l->len = link_len(d);
                if (cu->cuMemAlloc(&l->vram, l->len) != CUDA_SUCCESS) {
                        l->vram = 0;
                        link_skip(b, d, device, "no 64 MiB of VRAM free to "
                                  "copy from");
                        return;
                }
                d->vram_own += l->len;
        }
        if (r == 0 && !l->host) {
                r = cuda_ops_mem_create_private(&b->base, device, l->len,
                                                &l->host);
                if (r == -ENOSPC)
                        return;   /* taken meanwhile: the next maintain tries */
        }
        for (int i = 0; r == 0 && i < 2; i++)
                if (!l->ev[i])
                        r = cuda_check(b, cu->cuEventCreate(&l->ev[i],
                                                            CU_EVENT_DEFAULT),
                                       "cuEventCreate (link)");
        if (r == 0) {
                memset(l->rounds, 0, sizeof(l->rounds));
                memset(l->secs, 0, sizeof(l->secs));
                l->dir = GMD_COPY_OUT;
                l->submitted = link_submitted(d);
                l->start_us = t0;
                link_change_state(d, device, CUDA_LINK_COPYING);
                r = link_queue(b, d, true);
        }
        l->loop_us = now_us() - t0;
        if (r < 0)
                link_skip(b, d, device, "a CUDA call failed (above)");
}

/* Both ways timed: publish the figures where status and metrics read
 * them (cuda_ops_link_info). */
static void link_finish(cuda_backend *b, cuda_device *d, unsigned device,
                        uint64_t t0)
{
        cuda_link *l = &d->link;
        char tries[64] = "";

        for (int dir = 0; dir < 2; dir++)
                l->bytes_per_s[dir] = l->secs[dir] > 0 ?
                        (uint64_t)((double)l->len * l->rounds[dir] /
                                   l->secs[dir]) : 0;
        link_change_state(d, device, CUDA_LINK_DONE);
        link_release(b, d);
        l->loop_us += now_us() - t0;
        if (l->interrupted)
                snprintf(tries, sizeof(tries), ", after %u %s interrupted "
                         "by swaps", l->interrupted,
                         l->interrupted == 1 ? "try" : "tries");
        log_info("cuda: device %u: link to host memory %.1f GB/s in (host to "
                 "VRAM), %.1f GB/s out (VRAM to host): %u and %u copies of "
                 "%llu MiB, %.1f ms in all, %.2f ms of it on the loop "
                 "thread%s", device,
                 (double)l->bytes_per_s[GMD_COPY_IN] / 1e9,
                 (double)l->bytes_per_s[GMD_COPY_OUT] / 1e9,
                 l->rounds[GMD_COPY_IN], l->rounds[GMD_COPY_OUT],
                 (unsigned long long)(l->len >> 20),
                 (double)(now_us() - l->start_us) / 1e3,
                 (double)l->loop_us / 1e3, tries);
}

/* COPYING: when the copy queued is over, give the try up if another copy
 * of the device came meanwhile, else count its time and queue the next,
 * or finish. */
static void link_step(cuda_backend *b, cuda_device *d, unsigned device)
{
        const gmd_cuda_driver *cu = b->cu;
        cuda_link *l = &d->link;
        uint64_t t0 = now_us();
        CUresult res;
        float ms = 0;
        int r;

        r = cuda_device_enter(b, d);
        if (r == 0) {
                res = cu->cuEventQuery(l->ev[1]);
                if (res == CUDA_ERROR_NOT_READY)
                        goto out;
                r = cuda_check(b, res, "cuEventQuery (link)");
        }
        if (r == 0 && link_submitted(d) != l->submitted) {
                /* Its copies are over: the arena piece can go back. */
                cuda_ops_mem_destroy(&b->base, l->host);
                l->host = NULL;
                l->interrupted++;
                log_debug("cuda: device %u: a copy came while the link was "
                          "measured: measured again once the copy streams "
                          "are idle", device);
                link_change_state(d, device, CUDA_LINK_PENDING);
                goto out;
        }
        if (r == 0)
                r = cuda_check(b, cu->cuEventElapsedTime(&ms, l->ev[0], l->ev[1]),
                               "cuEventElapsedTime (link)");
        if (r == 0) {
                l->secs[l->dir] += ms / 1e3;
                l->rounds[l->dir]++;
                if (l->rounds[l->dir] < LINK_ROUNDS &&
                    l->secs[l->dir] * 1e6 < LINK_BUDGET_US) {
                        r = link_queue(b, d, false);
                } else if (l->dir == GMD_COPY_OUT) {
                        l->dir = GMD_COPY_IN;
                        r = link_queue(b, d, true);
                } else {
                        link_finish(b, d, device, t0);
                        return;
                }
        }
        if (r < 0) {
                link_skip(b, d, device, "a CUDA call failed (above)");
                return;
        }
        link_change_state(d, device, CUDA_LINK_COPYING);
out:
        l->loop_us += now_us() - t0;
}

void cuda_link_poll(cuda_backend *b)
{
        for (unsigned i = 0; i < b->n_devices; i++) {
                cuda_device *d = &b->devices[i];

                if (d->link.state == CUDA_LINK_COPYING)
                        link_step(b, d, i);
                else if (d->link.state != CUDA_LINK_PENDING)
                        link_release(b, d);
        }
}

void cuda_link_maintain(cuda_backend *b)
{
        uint64_t now = now_us();

        cuda_link_poll(b);
        for (unsigned i = 0; i < b->n_devices; i++) {
                cuda_device *d = &b->devices[i];
                const char *why = NULL;
                char interrupted[96];
                bool building, late;
                int ready;

                if (d->link.state != CUDA_LINK_PENDING)
                        continue;
                ready = link_arena_ready(b, d, link_len(d), &building, &why);
                if (ready < 0) {
                        link_skip(b, d, i, why);
                        continue;
                }
                /* The arenas are built one device after the other: the
                 * patience starts once this one has its first bytes. */
                if (building)
                        continue;
                if (!d->link.first_try_us)
                        d->link.first_try_us = now;
                late = now - d->link.first_try_us > LINK_PATIENCE_US;
                /* Once the patience is spent, a try that swaps keep
                 * interrupting is not made again: each costs them. */
                if (ready && link_quiet(d) && !(late && d->link.interrupted)) {
                        link_begin(b, d, i);
                        continue;
                }
                if (!late)
                        continue;
                if (!ready) {
                        why = "its host arena had no 64 MiB free for a minute";
                } else if (d->link.interrupted) {
                        snprintf(interrupted, sizeof(interrupted), "swaps "
                                 "interrupted each of its %u tries for a "
                                 "minute", d->link.interrupted);
                        why = interrupted;
                } else {
                        why = "its copy streams were not idle for a minute";
                }
                link_skip(b, d, i, why);
        }
}

void cuda_link_close(cuda_backend *b, cuda_device *d)
{
        link_free(b, d);
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
