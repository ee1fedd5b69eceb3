/*
 * backend_cuda_link — the links between host memory and the devices,
 * measured once each way soon after start: each link alone, then every
 * device at once.
 *
 * Lab machines differ: an x16 Gen5 slot copies 54-55 GB/s each way, a GPU
 * on an x4 or x1 riser, or several GPUs sharing one CPU's lanes, far less.
 * Clients plan how far ahead to prefetch from what the link can do
 * (gpumem.torch's lead), and the operator sees it in status and metrics,
 * so the daemon measures it rather than assume the line rate. And a host
 * may not feed every link at once: on a 4-GPU machine the four links,
 * measured at the same time, came out at 35-47 GB/s each, where one link
 * alone does 52-55. So each link is measured alone, no other device
 * copying (link_info's figure), then every device at once, one direction
 * and then the other (host_link_info's: the bytes of all of them over the
 * time of the slowest), which the copy engine schedules against
 * (core/copyq.h).
 *
 * What is timed is what a swap moves through: a copy between VRAM and a
 * piece of the device's host arena (pinned, the memory swap-outs land in),
 * between two CUDA events, after a small untimed one. Alone, out then in,
 * up to LINK_ROUNDS copies of LINK_COPY bytes each way, one at a time, a
 * direction stopping early once its copies took LINK_BUDGET_US; together,
 * on every device at once, as many copies back to back as its link took
 * alone. The devices' copies start within microseconds of each other, so
 * the longest device's time between its events is the time of all.
 *
 * None of it runs on the loop thread: it did, whole at first (8 ms on an
 * idle H200, 0.5-1 s in GPU tests, serving nobody meanwhile), then one
 * copy at a time between polls, whose allocations, events and frees still
 * took up to 24 ms of the loop on a 4-GPU machine. The loop now only
 * checks that the arenas are ready and starts a thread (maintain), and
 * joins it and publishes its figures once it woke the loop at its end
 * (copy_reap or maintain call cuda_link_poll); the log line says how long
 * that was. The thread makes its own VRAM, streams and events, takes its
 * arena pieces for each phase and gives everything back before it ends.
 *
 *   per device   PENDING -> COPYING  the thread starts with it
 *                        -> SKIPPED  it cannot be measured (below)
 *                COPYING -> DONE     measured alone: the figures published
 *                        -> SKIPPED  a CUDA call failed, or swaps never
 *                                    left it a quiet moment
 *   every link   PENDING -> COPYING  each device is measurable or skipped:
 *                                    the thread starts
 *                        -> SKIPPED  no device can be measured
 *                COPYING -> DONE     the thread is over and joined
 *
 * No swap waits for it: its copies run on streams of its own, so a
 * client's copy submitted meanwhile goes out at once, as always, sharing
 * the link with at most one 64 MiB copy per device (~1.2 ms at 55 GB/s).
 * A phase (one device alone both ways, or every device one way) starts
 * only when the copy engine has nothing in flight on any device, and
 * counts only if the engine queued nothing meanwhile (the copies queued
 * so far, cuda_watch.gen, and the in-flight lists, read under
 * copy_lock); else it is made again once the engine is idle. A client's
 * copy queued in the few microseconds between its submit and that count
 * is not seen: it shared the link for that long at most.
 *
 * It waits (stays pending) until every arena is pinned in full (pinning
 * holds the driver) and has LINK_COPY bytes free. A device is skipped,
 * with one log line and zeros in status, when it cannot be measured: no
 * host arena ([pools] host_stock = 0, no HOST tier), its arena stopped
 * short of LINK_COPY or had no room for LINK_PATIENCE_US, no VRAM for the
 * copy, or a CUDA call failed. What was not measured once the copy
 * engine was busy for LINK_PATIENCE_US since the thread began is given
 * up (the devices measured alone keep their figures; without the
 * together phase the host's figure is unknown, 0).
 */
#include "backend_cuda.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "log.h"
#include "timeutil.h"

#define LINK_COPY (64ull << 20)          /* bytes of one timed copy */
#define LINK_WARMUP (2ull << 20)         /* the untimed one before them */
#define LINK_ROUNDS 3
#define LINK_BUDGET_US 100000u           /* per direction alone, then it
                                          * stops */
#define LINK_PATIENCE_US 60000000u       /* for arena room, or for an idle
                                          * copy engine */
#define LINK_IDLE_POLL_US 1000u          /* the engine looked at again */
#define LINK_EVENT_POLL_US 50u           /* a copy's end looked for again */
#define LINK_HANG_US 10000000u           /* a copy not over by then: failed */

#define TO(s) (1u << (s))

static const unsigned link_legal_next[] = {
        [CUDA_LINK_PENDING] = TO(CUDA_LINK_COPYING) | TO(CUDA_LINK_SKIPPED),
        [CUDA_LINK_COPYING] = TO(CUDA_LINK_DONE) | TO(CUDA_LINK_SKIPPED),
        [CUDA_LINK_DONE] = 0,
        [CUDA_LINK_SKIPPED] = 0,
};

static const char *link_state_name(cuda_link_state state)
{
        static const char *const names[] = { "pending", "copying", "done",
                                             "skipped" };

        return state <= CUDA_LINK_SKIPPED ? names[state] : "?";
}

/* Change `*state` (a device's when `device` >= 0, else every link's). */
static bool link_change_state(cuda_link_state *state, int device,
                              cuda_link_state next)
{
        char who[32] = "every link";

        if (device >= 0)
                snprintf(who, sizeof(who), "device %d", device);
        if (!(link_legal_next[*state] & TO(next))) {
                log_error("cuda: %s: the link measurement refused to go from "
                          "%s to %s (a bug: please report it)", who,
                          link_state_name(*state), link_state_name(next));
                return false;
        }
        log_debug("cuda: %s: link measurement %s -> %s", who,
                  link_state_name(*state), link_state_name(next));
        *state = next;
        return true;
}

/* ---- the thread --------------------------------------------------------- */

/* One device in the run. The thread's alone, until the run is over. */
typedef struct link_dev {
        bool taken;              /* in the run (its arena was ready) */
        bool measured;           /* its alone figures hold */
        const char *why;         /* not measured: why */
        uint64_t len;            /* bytes of a timed copy */
        CUdeviceptr vram;        /* cuMemAlloc'd, len bytes */
        gmd_mem *host;           /* an arena piece of len bytes, during a
                                  * phase */
        CUstream stream;         /* the measurement's own */
        CUevent ev[2];           /* before and after what is timed */
        unsigned rounds[2];      /* timed copies alone, by gmd_copy_dir */
        uint64_t alone[2];       /* bytes per second */
        uint64_t together[2];
        double secs;             /* the together phase's time */
} link_dev;

struct cuda_link_run {
        cuda_backend *b;
        pthread_t thread;
        pthread_mutex_t lock;
        bool stop;               /* under lock: the backend closes */
        bool over;               /* under lock: the figures are final */
        uint64_t start_us, end_us;
        uint64_t patience_us;
        uint64_t loop_us;        /* loop thread's time (loop thread only) */
        unsigned interrupted;    /* phases made again for the engine's copies */
        bool gave_up;            /* the engine was never idle long enough */
        uint64_t host[2];        /* every device at once, in all */
        unsigned n;
        link_dev devs[];         /* by device */
};

static bool link_stopping(cuda_link_run *run)
{
        bool stop;

        pthread_mutex_lock(&run->lock);
        stop = run->stop;
        pthread_mutex_unlock(&run->lock);
        return stop;
}

static void link_sleep(uint64_t us)
{
        struct timespec ts = { (time_t)(us / 1000000),
                               (long)(us % 1000000) * 1000 };

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* Does the copy engine have nothing in flight on any device? And how
 * many copies has it queued so far (into *ret_gen). */
static bool link_engine_idle(cuda_backend *b, uint64_t *ret_gen)
{
        bool idle = true;

        pthread_mutex_lock(&b->copy_lock);
        for (unsigned i = 0; i < b->n_devices && idle; i++)
                for (int k = 0; k < CUDA_QUEUES && idle; k++)
                        idle = !b->devices[i].queues[k].head;
        *ret_gen = b->watch.gen;
        pthread_mutex_unlock(&b->copy_lock);
        return idle;
}

/* Wait until the copy engine is idle: 0 with the count of copies it
 * queued, -ETIMEDOUT past the run's patience, -ECANCELED on stop. */
static int link_wait_idle(cuda_link_run *run, uint64_t *ret_gen)
{
        for (;;) {
                if (link_stopping(run))
                        return -ECANCELED;
                if (link_engine_idle(run->b, ret_gen))
                        return 0;
                if (now_us() - run->start_us > run->patience_us)
                        return -ETIMEDOUT;
                link_sleep(LINK_IDLE_POLL_US);
        }
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

/* Wait for `ev` (of device `device`), polling: 0, or -errno (a failed
 * copy, one that hangs, or a stop). */
static int link_wait_event(cuda_link_run *run, unsigned device, CUevent ev)
{
        cuda_backend *b = run->b;
        uint64_t t0 = now_us();
        int r = cuda_device_enter(b, &b->devices[device]);

        while (r == 0) {
                CUresult res = b->cu->cuEventQuery(ev);

                if (res != CUDA_ERROR_NOT_READY)
                        return cuda_check(b, res, "cuEventQuery (link)");
                if (link_stopping(run))
                        return -ECANCELED;
                if (now_us() - t0 > LINK_HANG_US) {
                        log_error("cuda: device %u: a copy of the link "
                                  "measurement was not over after %u s",
                                  device, LINK_HANG_US / 1000000);
                        return -EIO;
                }
                link_sleep(LINK_EVENT_POLL_US);
        }
        return r;
}

/* The seconds between the two events of `dev`, once the second is over. */
static int link_elapsed(cuda_link_run *run, unsigned device, link_dev *dev,
                        double *ret_secs)
{
        cuda_backend *b = run->b;
        float ms = 0;
        int r;

        r = link_wait_event(run, device, dev->ev[1]);
        if (r == 0)
                r = cuda_check(b, b->cu->cuEventElapsedTime(&ms, dev->ev[0],
                                                           dev->ev[1]),
                               "cuEventElapsedTime (link)");
        if (r == 0)
                *ret_secs = ms / 1e3;
        return r;
}

/* Device `device` alone, out then in. Its arena piece is taken. */
static int link_alone(cuda_link_run *run, unsigned device)
{
        cuda_backend *b = run->b;
        link_dev *dev = &run->devs[device];
        cuda_mem *host = cuda_mem_of(dev->host);
        const gmd_cuda_driver *cu = b->cu;
        int r = cuda_device_enter(b, &b->devices[device]);

        for (int dir = GMD_COPY_OUT; r == 0 && dir <= GMD_COPY_IN; dir++) {
                double secs = 0;
                unsigned rounds = 0;

                r = link_copy(b, dev->stream, dir, dev->vram, host, LINK_WARMUP);
                while (r == 0 && rounds < LINK_ROUNDS &&
                       secs * 1e6 < LINK_BUDGET_US) {
                        double one = 0;

                        r = cuda_check(b, cu->cuEventRecord(dev->ev[0],
                                                            dev->stream),
                                       "cuEventRecord (link)");
                        if (r == 0)
                                r = link_copy(b, dev->stream, dir, dev->vram,
                                              host, dev->len);
                        if (r == 0)
                                r = cuda_check(b, cu->cuEventRecord(dev->ev[1],
                                                                    dev->stream),
                                               "cuEventRecord (link)");
                        if (r == 0)
                                r = link_elapsed(run, device, dev, &one);
                        secs += one;
                        rounds++;
                }
                if (r == 0 && secs <= 0)
                        r = -EIO;
                if (r == 0) {
                        dev->rounds[dir] = rounds;
                        dev->alone[dir] = (uint64_t)((double)dev->len * rounds /
                                                     secs);
                }
        }
        return r;
}

/* Every device measured alone, at once, direction `dir`. The arena
 * pieces are taken. */
static int link_together(cuda_link_run *run, gmd_copy_dir dir)
{
        cuda_backend *b = run->b;
        const gmd_cuda_driver *cu = b->cu;
        double longest = 0;
        uint64_t bytes = 0;
        int r = 0;

        /* Everything queued first, so they run at once. */
        for (unsigned i = 0; i < run->n && r == 0; i++) {
                link_dev *dev = &run->devs[i];
                cuda_mem *host = cuda_mem_of(dev->host);

                if (!dev->measured)
                        continue;
                r = cuda_device_enter(b, &b->devices[i]);
                if (r == 0)
                        r = link_copy(b, dev->stream, dir, dev->vram, host,
                                      LINK_WARMUP);
                if (r == 0)
                        r = cuda_check(b, cu->cuEventRecord(dev->ev[0],
                                                            dev->stream),
                                       "cuEventRecord (link)");
                for (unsigned k = 0; r == 0 && k < dev->rounds[dir]; k++)
                        r = link_copy(b, dev->stream, dir, dev->vram, host,
                                      dev->len);
                if (r == 0)
                        r = cuda_check(b, cu->cuEventRecord(dev->ev[1],
                                                            dev->stream),
                                       "cuEventRecord (link)");
        }
        for (unsigned i = 0; i < run->n && r == 0; i++) {
                link_dev *dev = &run->devs[i];

                if (!dev->measured)
                        continue;
                r = link_elapsed(run, i, dev, &dev->secs);
                if (r == 0 && dev->secs <= 0)
                        r = -EIO;
                if (r < 0)
                        break;
                bytes += dev->len * dev->rounds[dir];
                if (dev->secs > longest)
                        longest = dev->secs;
        }
        if (r < 0)
                return r;
        run->host[dir] = (uint64_t)((double)bytes / longest);
        for (unsigned i = 0; i < run->n; i++) {
                link_dev *dev = &run->devs[i];

                if (dev->measured)
                        dev->together[dir] = (uint64_t)((double)dev->len *
                                                        dev->rounds[dir] /
                                                        dev->secs);
        }
        return 0;
}

/* Give back the arena pieces of the devices in a phase, once their
 * streams are idle (a failed phase may leave copies queued). */
static void link_give_hosts(cuda_link_run *run)
{
        cuda_backend *b = run->b;

        for (unsigned i = 0; i < run->n; i++) {
                link_dev *dev = &run->devs[i];

                if (!dev->host)
                        continue;
                if (cuda_device_enter(b, &b->devices[i]) == 0)
                        b->cu->cuStreamSynchronize(dev->stream);
                cuda_ops_mem_destroy(&b->base, dev->host);
                dev->host = NULL;
        }
}

/* Take an arena piece for device `only` (>= 0), or for every device
 * measured alone: 0, or -ENOSPC (none taken) when an arena has no room
 * now. */
static int link_take_hosts(cuda_link_run *run, int only)
{
        for (unsigned i = 0; i < run->n; i++) {
                link_dev *dev = &run->devs[i];
                int r;

                if (only >= 0 ? (int)i != only : !dev->measured)
                        continue;
                r = cuda_ops_mem_create_private(&run->b->base, i, dev->len,
                                                &dev->host);
                if (r < 0) {
                        dev->host = NULL;
                        link_give_hosts(run);
                        return r;
                }
        }
        return 0;
}

/* One phase: device `only` alone both ways (only >= 0), or every device
 * measured alone at once, direction `dir`. Made again until it ran with
 * the copy engine idle throughout: 0, -ETIMEDOUT once the patience is
 * spent, -ECANCELED on stop, or the -errno of a failed CUDA call. */
static int link_phase(cuda_link_run *run, int only, gmd_copy_dir dir)
{
        bool again = false;

        for (;;) {
                uint64_t gen, after;
                int r;

                if (again && now_us() - run->start_us > run->patience_us)
                        return -ETIMEDOUT;
                again = true;
                r = link_wait_idle(run, &gen);
                if (r < 0)
                        return r;
                r = link_take_hosts(run, only);
                if (r == -ENOSPC) {
                        /* Swap-outs hold the room: look again soon. */
                        link_sleep(LINK_IDLE_POLL_US);
                        continue;
                }
                if (r == 0)
                        r = only >= 0 ? link_alone(run, (unsigned)only) :
                            link_together(run, dir);
                link_give_hosts(run);
                if (r < 0)
                        return r;
                if (link_engine_idle(run->b, &after) && after == gen)
                        return 0;
                run->interrupted++;
                log_debug("cuda: a copy came while the link%s was measured: "
                          "measured again once the copy engine is idle",
                          only >= 0 ? "" : "s together");
        }
}

/* The VRAM, stream and events device `i` copies with. The device is
 * left out (why) when they cannot be made. */
static void link_prepare(cuda_link_run *run, unsigned i)
{
        cuda_backend *b = run->b;
        const gmd_cuda_driver *cu = b->cu;
        link_dev *dev = &run->devs[i];
        int r = cuda_device_enter(b, &b->devices[i]);

        if (r == 0 && cu->cuMemAlloc(&dev->vram, dev->len) != CUDA_SUCCESS) {
                dev->vram = 0;
                dev->why = "no 64 MiB of VRAM free to copy from";
                return;
        }
        if (r == 0)
                r = cuda_check(b, cu->cuStreamCreate(&dev->stream,
                                                     CU_STREAM_NON_BLOCKING),
                               "cuStreamCreate (link)");
        for (int k = 0; r == 0 && k < 2; k++)
                r = cuda_check(b, cu->cuEventCreate(&dev->ev[k],
                                                    CU_EVENT_DEFAULT),
                               "cuEventCreate (link)");
        if (r < 0)
                dev->why = "a CUDA call failed (above)";
}

/* Free what device `i` copied with; its stream is idle by then. */
static void link_unprepare(cuda_link_run *run, unsigned i)
{
        cuda_backend *b = run->b;
        const gmd_cuda_driver *cu = b->cu;
        link_dev *dev = &run->devs[i];

        if (cuda_device_enter(b, &b->devices[i]) < 0)
                return;
        if (dev->stream)
                cu->cuStreamSynchronize(dev->stream);
        for (int k = 0; k < 2; k++)
                if (dev->ev[k])
                        cu->cuEventDestroy(dev->ev[k]);
        if (dev->vram)
                cu->cuMemFree(dev->vram);
        if (dev->stream)
                cu->cuStreamDestroy(dev->stream);
        dev->ev[0] = dev->ev[1] = NULL;
        dev->stream = NULL;
        dev->vram = 0;
}

/* The run ends early (the patience spent, a stop): why for each device
 * not measured. */
static void link_failed(cuda_link_run *run, int r)
{
        if (r == -ETIMEDOUT)
                run->gave_up = true;
        for (unsigned i = 0; i < run->n; i++) {
                link_dev *dev = &run->devs[i];

                if (dev->taken && !dev->why && !dev->measured)
                        dev->why = r == -ETIMEDOUT ?
                                "the copy engine was busy for a minute" :
                                r == -ECANCELED ? "gpu-memd stopped" :
                                "a CUDA call failed (above)";
        }
}

static void *link_main(void *arg)
{
        cuda_link_run *run = arg;
        cuda_backend *b = run->b;
        void (*wake)(void *ctx);
        unsigned measured = 0;
        void *ctx;
        uint64_t gen;
        int r;

        prctl(PR_SET_NAME, "gmd-link", 0, 0, 0);
        /* Nothing is taken before the engine is idle the first time. */
        r = link_wait_idle(run, &gen);
        for (unsigned i = 0; r == 0 && i < run->n; i++)
                if (run->devs[i].taken)
                        link_prepare(run, i);
        for (unsigned i = 0; r == 0 && i < run->n; i++) {
                link_dev *dev = &run->devs[i];

                if (!dev->taken || dev->why)
                        continue;
                r = link_phase(run, (int)i, GMD_COPY_OUT);
                if (r == 0) {
                        dev->measured = true;
                        measured++;
                        log_info("cuda: device %u: link to host memory %.1f "
                                 "GB/s in (host to VRAM), %.1f GB/s out (VRAM "
                                 "to host), alone: %u and %u copies of %llu MiB",
                                 i, (double)dev->alone[GMD_COPY_IN] / 1e9,
                                 (double)dev->alone[GMD_COPY_OUT] / 1e9,
                                 dev->rounds[GMD_COPY_IN],
                                 dev->rounds[GMD_COPY_OUT],
                                 (unsigned long long)(dev->len >> 20));
                } else if (r != -ETIMEDOUT && r != -ECANCELED) {
                        dev->why = "a CUDA call failed (above)";
                        r = 0;   /* the others may still be measured */
                }
        }
        for (int dir = GMD_COPY_OUT; r == 0 && measured > 1 &&
             dir <= GMD_COPY_IN; dir++) {
                r = link_phase(run, -1, dir);
                if (r == 0)
                        continue;
                memset(run->host, 0, sizeof(run->host));
                if (r != -ETIMEDOUT && r != -ECANCELED)
                        r = 0;   /* the alone figures hold */
                break;
        }
        if (r < 0)
                link_failed(run, r);
        for (unsigned i = 0; i < run->n; i++)
                if (run->devs[i].taken)
                        link_unprepare(run, i);
        run->end_us = now_us();
        pthread_mutex_lock(&run->lock);
        run->over = true;
        pthread_mutex_unlock(&run->lock);
        /* The loop joins and publishes (cuda_link_poll, from copy_reap). */
        pthread_mutex_lock(&b->copy_lock);
        wake = b->wake;
        ctx = b->wake_ctx;
        pthread_mutex_unlock(&b->copy_lock);
        if (wake)
                wake(ctx);
        return NULL;
}

/* ---- the loop thread ---------------------------------------------------- */

/* LINK_COPY in whole host granules, as the arena hands them out. */
static uint64_t link_len(const cuda_device *d)
{
        uint64_t g = d->host_granularity ? d->host_granularity : 1;

        return (LINK_COPY + g - 1) / g * g;
}

static void link_skip(cuda_device *d, unsigned device, const char *why)
{
        link_change_state(&d->link.state, (int)device, CUDA_LINK_SKIPPED);
        log_notice("cuda: device %u: the link to host memory is not measured: "
                   "%s; status and metrics show it as unknown (0), and "
                   "clients plan their prefetches without it", device, why);
}

/* Whether the arena can give `len` contiguous bytes now (1), may later
 * (0; *ret_building while some arena is still being pinned), or never
 * will (-1, with the reason in *ret_why). */
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
                 * thread's pinning holds the driver (a measurement's first
                 * calls waited for it: 1.37 s of a 1.38 s measurement on
                 * the H200 while 8 GiB were pinned), and a link measured
                 * while another device's arena is pinned is not alone. */
                *ret_building = a->ranges.built < len || cuda_host_pinning(b);
                ready = extents_largest(&a->ranges.free) >= len ? 1 : 0;
        }
        pthread_mutex_unlock(&b->host.lock);
        return ready;
}

/* Every device still pending is ready: start the thread with them. */
static void link_start(cuda_backend *b)
{
        cuda_link_run *run;
        uint64_t t0 = now_us();
        int r;

        run = calloc(1, sizeof(*run) + b->n_devices * sizeof(run->devs[0]));
        if (!run) {
                log_error("cuda: the links are not measured: out of memory");
                return;   /* maintain tries again */
        }
        run->b = b;
        run->n = b->n_devices;
        run->start_us = t0;
        run->patience_us = b->links.patience_us ? b->links.patience_us :
                           LINK_PATIENCE_US;
        pthread_mutex_init(&run->lock, NULL);
        for (unsigned i = 0; i < b->n_devices; i++) {
                cuda_device *d = &b->devices[i];

                if (d->link.state != CUDA_LINK_PENDING)
                        continue;
                run->devs[i].taken = true;
                run->devs[i].len = link_len(d);
                /* Counted as the backend's own from now until published:
                 * the thread allocates it in a moment. */
                d->vram_own += run->devs[i].len;
        }
        r = -pthread_create(&run->thread, NULL, link_main, run);
        if (r < 0) {
                log_error("cuda: the links are not measured: no thread: %s",
                          strerror(-r));
                for (unsigned i = 0; i < b->n_devices; i++)
                        if (run->devs[i].taken) {
                                b->devices[i].vram_own -= run->devs[i].len;
                                link_skip(&b->devices[i], i, "no thread for it");
                        }
                link_change_state(&b->links.state, -1, CUDA_LINK_SKIPPED);
                pthread_mutex_destroy(&run->lock);
                free(run);
                return;
        }
        for (unsigned i = 0; i < b->n_devices; i++)
                if (run->devs[i].taken)
                        link_change_state(&b->devices[i].link.state, (int)i,
                                          CUDA_LINK_COPYING);
        link_change_state(&b->links.state, -1, CUDA_LINK_COPYING);
        b->links.run = run;
        run->loop_us = now_us() - t0;
}

/* Publish what the run measured; the thread is joined. */
static void link_publish(cuda_backend *b, cuda_link_run *run)
{
        uint64_t sum[2] = { 0, 0 };
        unsigned measured = 0;
        char tries[64] = "";

        for (unsigned i = 0; i < run->n; i++) {
                cuda_device *d = &b->devices[i];
                link_dev *dev = &run->devs[i];

                if (!dev->taken)
                        continue;
                d->vram_own -= dev->len;
                if (!dev->measured) {
                        link_skip(d, i, dev->why ? dev->why : "?");
                        continue;
                }
                measured++;
                for (int dir = 0; dir < 2; dir++) {
                        d->link.bytes_per_s[dir] = dev->alone[dir];
                        d->link.together[dir] = dev->together[dir];
                        sum[dir] += dev->alone[dir];
                }
                link_change_state(&d->link.state, (int)i, CUDA_LINK_DONE);
                if (dev->together[GMD_COPY_IN] || dev->together[GMD_COPY_OUT])
                        log_debug("cuda: device %u: %.1f GB/s in and %.1f out "
                                  "with every device copying", i,
                                  (double)dev->together[GMD_COPY_IN] / 1e9,
                                  (double)dev->together[GMD_COPY_OUT] / 1e9);
        }
        b->links.host_bytes_per_s[GMD_COPY_OUT] = run->host[GMD_COPY_OUT];
        b->links.host_bytes_per_s[GMD_COPY_IN] = run->host[GMD_COPY_IN];
        link_change_state(&b->links.state, -1, CUDA_LINK_DONE);
        if (run->interrupted)
                snprintf(tries, sizeof(tries), ", %u %s made again for swaps",
                         run->interrupted,
                         run->interrupted == 1 ? "phase" : "phases");
        if (run->host[GMD_COPY_IN] && run->host[GMD_COPY_OUT])
                log_info("cuda: host links: %.1f GB/s in and %.1f out with "
                         "%u devices copying at once, against %.1f and %.1f "
                         "alone summed (%.0f%% and %.0f%%); %.1f ms in all, "
                         "%.2f ms of it on the loop thread%s",
                         (double)run->host[GMD_COPY_IN] / 1e9,
                         (double)run->host[GMD_COPY_OUT] / 1e9, measured,
                         (double)sum[GMD_COPY_IN] / 1e9,
                         (double)sum[GMD_COPY_OUT] / 1e9,
                         100.0 * (double)run->host[GMD_COPY_IN] /
                         (double)sum[GMD_COPY_IN],
                         100.0 * (double)run->host[GMD_COPY_OUT] /
                         (double)sum[GMD_COPY_OUT],
                         (double)(run->end_us - run->start_us) / 1e3,
                         (double)run->loop_us / 1e3, tries);
        else
                log_info("cuda: host links not measured together (%s), %u "
                         "alone; %.1f ms in all, %.2f ms of it on the loop "
                         "thread%s", run->gave_up ? "the copy engine was "
                         "busy for a minute" : measured < 2 ? "fewer than "
                         "two links measured" : "a CUDA call failed",
                         measured, (double)(run->end_us - run->start_us) / 1e3,
                         (double)run->loop_us / 1e3, tries);
}

void cuda_link_poll(cuda_backend *b)
{
        cuda_link_run *run = b->links.run;
        uint64_t t0;
        bool over;

        if (!run)
                return;
        pthread_mutex_lock(&run->lock);
        over = run->over;
        pthread_mutex_unlock(&run->lock);
        if (!over)
                return;
        t0 = now_us();
        pthread_join(run->thread, NULL);
        b->links.run = NULL;
        run->loop_us += now_us() - t0;
        link_publish(b, run);
        pthread_mutex_destroy(&run->lock);
        free(run);
}

void cuda_link_maintain(cuda_backend *b)
{
        uint64_t now = now_us();
        bool waiting = false, any = false;

        cuda_link_poll(b);
        if (b->links.state != CUDA_LINK_PENDING)
                return;
        for (unsigned i = 0; i < b->n_devices; i++) {
                cuda_device *d = &b->devices[i];
                const char *why = NULL;
                bool building;
                int r;

                if (d->link.state != CUDA_LINK_PENDING)
                        continue;
                r = link_arena_ready(b, d, link_len(d), &building, &why);
                if (r < 0) {
                        link_skip(d, i, why);
                        continue;
                }
                /* The arenas are built one device after the other: the
                 * patience starts once this one has its first bytes. */
                if (building) {
                        waiting = true;
                        continue;
                }
                if (!d->link.first_try_us)
                        d->link.first_try_us = now;
                if (r > 0) {
                        any = true;
                        continue;
                }
                if (now - d->link.first_try_us > LINK_PATIENCE_US)
                        link_skip(d, i, "its host arena had no 64 MiB free "
                                  "for a minute");
                else
                        waiting = true;
        }
        /* All at once, so that each is measured alone and then all
         * together: every device still pending is ready now. */
        if (waiting)
                return;
        if (any)
                link_start(b);
        else
                link_change_state(&b->links.state, -1, CUDA_LINK_SKIPPED);
}

void cuda_link_stop(cuda_backend *b)
{
        cuda_link_run *run = b->links.run;

        if (!run)
                return;
        pthread_mutex_lock(&run->lock);
        run->stop = true;
        pthread_mutex_unlock(&run->lock);
        pthread_join(run->thread, NULL);
        b->links.run = NULL;
        for (unsigned i = 0; i < run->n; i++)
                if (run->devs[i].taken)
                        b->devices[i].vram_own -= run->devs[i].len;
        pthread_mutex_destroy(&run->lock);
        free(run);
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

void cuda_ops_host_link_info(gmd_backend *backend, gmd_link_info *ret_info)
{
        cuda_backend *b = (cuda_backend *)backend;

        ret_info->bytes_per_s[GMD_COPY_OUT] = b->links.host_bytes_per_s[GMD_COPY_OUT];
        ret_info->bytes_per_s[GMD_COPY_IN] = b->links.host_bytes_per_s[GMD_COPY_IN];
}
