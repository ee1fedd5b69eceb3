/*
 * backend_cuda_gate — lets an urgent copy overtake the bulk copies the GPU
 * already has queued.
 *
 * copyq keeps two chunks of bulk copies (pageouts, prefetches, evictions)
 * with the backend so that the link never idles while the loop hands over
 * the next; an acquire's swap-in queued behind them on the same stream
 * waited for all of them: 2 x 64 MiB, ~2.4 ms at 55 GB/s (on the H100 an
 * acquire of a paged-out 64 MiB buffer took 2.9 ms during a bulk prefetch,
 * 1.5 ms idle). Smaller chunks shorten the wait but cost line rate (4 MiB
 * chunks: 0.86-0.95 of it against 0.99, BENCHMARKS.md): the loop must hand
 * each one over in time.
 *
 * So an urgent copy runs on a stream of its own (the urgent lane), and the
 * bulk lane's copies are queued in steps ([swap] preempt_step), each
 * behind a cuStreamWaitValue32 on one 32-bit word in pinned host memory:
 * step k runs once the word is at least k (a cyclic comparison, so the
 * count may wrap). The word normally says the last step queued (it is
 * set just before they are), and the steps run back to back as one copy
 * would. While an urgent copy is in
 * flight the word is set back by 2^30, so the steps not begun wait (the
 * GPU has begun one or two), and the end of the last urgent copy, heard by
 * the watcher thread or the host function, sets it forward again: the
 * bulk copies go on without a round trip through the loop.
 *
 * A step costs the copy engine ~4 us (measured on the H100 against one
 * copy per chunk: 4 MiB steps 0.92-0.94 of the line rate against
 * 0.98-0.99, 8 MiB 0.96-0.97; an acquire of a paged-out 64 MiB buffer
 * during a 4 GiB prefetch 1.38-1.49 ms with 4 MiB, 1.45-1.65 with 8 MiB,
 * 2.93-2.97 ms without, its copy alone ~1.25 ms), so only copies in are
 * gated: only an acquire's swap-in is urgent.
 *
 * A wait on memory can deadlock: a gate left shut stalls its lane for
 * good. So:
 * - it is shut only while an urgent copy is counted in flight, and each
 *   counted copy is heard once (its record's fired flag);
 * - closing the backend or a failed stream opens every gate
 *   (cuda_gate_release);
 * - the watcher gives up on an urgent copy still unheard GATE_OVERDUE_US
 *   after it should have ended (cuda_gate_overdue): the gate opens, the
 *   copies counted in flight start a new epoch (their ends, heard later,
 *   count no more), and no urgent copy shuts it while one given up on is
 *   still ahead of it on the urgent lane. A copy that waits long for a
 *   client's last-use event so holds the prefetches 20 ms at most;
 * - if urgent copies were given up on GATE_OVERDUE_MAX times and none
 *   ever ended while the gate was shut, the gate holds the urgent lane on
 *   this device and retires: open for good, no more steps;
 * - there is no gate with CUDA_DEVICE_MAX_CONNECTIONS below 8 (with 1, on
 *   the H100, every urgent copy waited behind it until the watcher opened
 *   it), none without the watcher thread, and none unless a trial at open
 *   showed that a wait on an open word passes (gate_try).
 */
#include "backend_cuda.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "timeutil.h"

/* How far back a closed gate is set: beyond every step in flight. */
#define GATE_BACK (1u << 30)
/* The gate's word, alone on its cache line. */
#define GATE_BYTES 64
/* How long each trial at open may take. */
#define GATE_TRY_US 1000000
/* Fewer hardware queues than this and no gate (cuda_gate_open). */
#define GATE_MIN_CONNECTIONS 8
/* Urgent copies overdue this many times and the gate retires. */
#define GATE_OVERDUE_MAX 3

static void gate_store(cuda_gate *g, uint32_t value)
{
        __atomic_store_n(g->word, value, __ATOMIC_RELEASE);
}

/* Poll until `stream` is done: 0, -ETIMEDOUT after `us`, or the driver's
 * error. */
static int gate_poll(cuda_backend *b, CUstream stream, uint64_t us)
{
        const gmd_cuda_driver *cu = b->cu;
        uint64_t until = now_us() + us;

        for (;;) {
                CUresult res = cu->cuStreamQuery(stream);

                if (res == CUDA_SUCCESS)
                        return 0;
                if (res != CUDA_ERROR_NOT_READY)
                        return cuda_check(b, res, "gate trial");
                if (now_us() > until)
                        return -ETIMEDOUT;
                sched_yield();
        }
}

/* Does a wait on an open word pass, on a stream of its own? A driver
 * without stream memory operations refuses the wait, or never lets it
 * pass; it is polled for a while, never waited for (a wait that never
 * passes would hang the daemon). 0 when it passes; the word is left at
 * 0. (A second trial, the word shut behind a wait on the bulk lane while
 * an event is recorded on the urgent lane, was tried and dropped: with
 * CUDA_DEVICE_MAX_CONNECTIONS=1 it passed on the H100, and the urgent
 * copies then waited behind the gate all the same.) */
static int gate_try(cuda_backend *b, CUdeviceptr word_dev,
                    volatile uint32_t *word)
{
        const gmd_cuda_driver *cu = b->cu;
        CUstream s;
        int r;

        r = cuda_check(b, cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING),
                       "cuStreamCreate (gate trial)");
        if (r < 0)
                return r;
        *word = 1;
        r = cuda_check(b, cu->cuStreamWaitValue32(s, word_dev, 1,
                                                  CU_STREAM_WAIT_VALUE_GEQ),
                       "cuStreamWaitValue32");
        if (r == 0)
                r = gate_poll(b, s, GATE_TRY_US);
        /* A wait left pending is released with the stream once done. */
        cu->cuStreamDestroy(s);
        *word = 0;
        return r;
}

int cuda_gate_open(cuda_backend *b, cuda_device *d, uint64_t step)
{
        const gmd_cuda_driver *cu = b->cu;
        const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
        CUdeviceptr dev = 0;
        void *page = NULL;
        cuda_gate *g;
        int r;

        if (!step)
                return 0;
        /* Streams share the GPU's hardware queues, CUDA_DEVICE_MAX_
         * CONNECTIONS of them (8 by default), in turns: with fewer the
         * urgent lane in may share the bulk lane's, where a shut gate
         * holds the very copy that would open it. Seen on the H100 with 1:
         * each urgent copy waited until the watcher opened the gate, 20 ms
         * late (and a trial at open, an event recorded on the urgent lane
         * with the gate shut, passed all the same: hence this check). */
        if (conn && *conn && strtol(conn, NULL, 10) < GATE_MIN_CONNECTIONS) {
                log_warning("cuda: device %s: CUDA_DEVICE_MAX_CONNECTIONS=%s "
                            "puts the copy streams in fewer hardware queues "
                            "than %d, so a bulk copy cannot pause for an urgent "
                            "one ([swap] preempt_step has no effect); unset it "
                            "for gpu-memd", d->name, conn, GATE_MIN_CONNECTIONS);
                return 0;
        }
        r = cuda_check(b, cu->cuMemHostAlloc(&page, GATE_BYTES,
                                             CU_MEMHOSTALLOC_DEVICEMAP),
                       "cuMemHostAlloc (copy gates)");
        if (r == -ENOMEM)
                return r;
        if (r == 0)
                r = cuda_check(b, cu->cuMemHostGetDevicePointer(&dev, page, 0),
                               "cuMemHostGetDevicePointer (copy gates)");
        if (r == 0)
                r = gate_try(b, dev, page);
        if (r < 0) {
                /* After a trial that never passed, the GPU may still read
                 * the page: it is left to the process. */
                if (page && r != -ETIMEDOUT)
                        cu->cuMemFreeHost(page);
                log_warning("cuda: device %s: bulk copies cannot pause for an "
                            "urgent one (%s): an acquire's swap-in shares the "
                            "link with the chunks in flight ([swap] "
                            "preempt_step has no effect)", d->name,
                            r == -ETIMEDOUT ? "a wait on host memory did not "
                            "pass in a second" : strerror(-r));
                return 0;
        }
        /* Only copies in are gated: only an acquire's swap-in is urgent,
         * and the link carries the two directions at once, so steps out
         * would cost their rate (see above) for nothing. */
        d->gate_page = page;
        g = &d->gates[GMD_COPY_IN];
        g->word = page;
        g->word_dev = dev;
        g->step = step;
        g->queued = g->open_to = 0;
        *g->word = 0;
        return 0;
}

/* Open `g` and forget the urgent copies counted in flight: a new epoch,
 * whose copies alone count from now on (copy_lock held). */
static void gate_forget(cuda_gate *g)
{
        g->stale += g->urgent;
        g->urgent = 0;
        g->epoch++;
        g->shut = false;
        if (g->word)
                gate_store(g, g->open_to);
}

void cuda_gate_release(cuda_device *d)
{
        for (int dir = 0; dir < 2; dir++) {
                cuda_gate *g = &d->gates[dir];

                g->open_to = g->queued;
                gate_forget(g);
                /* Nothing waits for the copies forgotten here. */
                g->stale = 0;
        }
}

void cuda_gate_retire(cuda_device *d)
{
        for (int dir = 0; dir < 2; dir++) {
                cuda_gate *g = &d->gates[dir];

                gate_forget(g);
                g->retired = true;
        }
}

uint64_t cuda_ops_copy_preempt_step(gmd_backend *backend, unsigned device)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);
        uint64_t step = 0;

        if (!d)
                return 0;
        pthread_mutex_lock(&b->copy_lock);
        if (cuda_gate_on(&d->gates[GMD_COPY_IN]))
                step = d->gates[GMD_COPY_IN].step;
        pthread_mutex_unlock(&b->copy_lock);
        return step;
}

void cuda_gate_close(cuda_backend *b, cuda_device *d)
{
        for (int dir = 0; dir < 2; dir++)
                d->gates[dir].word = NULL;
        if (d->gate_page)
                b->cu->cuMemFreeHost(d->gate_page);
        d->gate_page = NULL;
}

int cuda_gate_copy(cuda_backend *b, cuda_queue *q, CUdeviceptr to,
                   CUdeviceptr from, uint64_t n)
{
        const gmd_cuda_driver *cu = b->cu;
        cuda_gate *g = q->gate;
        bool stepped = false;

        /* Opened for the steps before they are queued: a wait that finds
         * its word short is polled again only some microseconds later,
         * which every copy reaching an idle stream would pay. */
        if (g && g->word) {
                pthread_mutex_lock(&b->copy_lock);
                stepped = cuda_gate_on(g);
                if (stepped) {
                        g->open_to = g->queued +
                                     (uint32_t)((n + g->step - 1) / g->step);
                        if (!g->urgent)
                                gate_store(g, g->open_to);
                }
                pthread_mutex_unlock(&b->copy_lock);
        }
        if (!stepped)
                return cuda_check(b, cu->cuMemcpyAsync(to, from, n, q->stream),
                                  "cuMemcpyAsync");
        for (uint64_t off = 0; off < n; ) {
                uint64_t len = n - off < g->step ? n - off : g->step;
                uint32_t seq = g->queued + 1;
                int r;

                r = cuda_check(b, cu->cuStreamWaitValue32(q->stream, g->word_dev,
                                        seq, CU_STREAM_WAIT_VALUE_GEQ),
                               "cuStreamWaitValue32");
                if (r < 0)
                        return r;
                g->queued = seq;
                r = cuda_check(b, cu->cuMemcpyAsync(to + off, from + off, len,
                                                    q->stream),
                               "cuMemcpyAsync");
                if (r < 0)
                        return r;
                off += len;
        }
        return 0;
}

void cuda_gate_urgent(cuda_copy *c)
{
        cuda_gate *g = c->gate;

        if (!g)
                return;
        c->gate_epoch = g->epoch;
        /* Not while a copy given up on is still ahead on the urgent lane:
         * this one waits behind it, and so would the bulk lane. */
        if (g->urgent++ == 0 && cuda_gate_on(g) && !g->stale) {
                gate_store(g, g->open_to - GATE_BACK);
                g->shut = true;
                g->closed++;
        }
}

int cuda_gate_overdue(cuda_copy *c)
{
        cuda_gate *g = c->gate;

        if (!cuda_gate_on(g) || c->gate_epoch != g->epoch || !g->urgent)
                return 0;
        gate_forget(g);
        g->overdue++;
        /* No urgent copy has ever ended with the gate shut, and three were
         * given up on: the gate holds the urgent lane on this device (its
         * streams share a hardware queue). Open for good, no more steps. */
        if (g->overdue >= GATE_OVERDUE_MAX && !g->shut_heard) {
                g->retired = true;
                return 2;
        }
        return g->overdue == 1 ? 1 : 0;
}

void cuda_gate_heard(cuda_copy *c)
{
        cuda_gate *g = c->gate;

        if (!g)
                return;
        if (c->gate_epoch != g->epoch) {
                /* Given up on (overdue) or released: counted no more. */
                if (g->stale)
                        g->stale--;
                return;
        }
        if (!g->urgent)
                return;
        if (g->shut)
                g->shut_heard++;
        if (--g->urgent == 0 && g->word) {
                gate_store(g, g->open_to);
                g->shut = false;
        }
}
