/*
 * backend_cuda_copy — the copy engine of the cuda backend (ARCHITECTURE.md
 * decision 5): per device and direction two non-blocking streams, made at
 * open in the device's primary context: the bulk lane (copy_submit) and
 * the urgent lane (copy_submit_urgent), whose copies the bulk lane's
 * pause for (backend_cuda_gate.c). A swap-out and a swap-in run on the
 * GPU's two copy engines at once.
 *
 * Both ends of every copy are mapped into the daemon (backend_cuda_mem.c:
 * VRAM and host-located VMM alike, with access for the device), so a copy
 * is a cuMemcpyAsync between two device addresses — one per part when an
 * end is a host arena piece in parts (cuda_mem_at); the driver sees that
 * one side lives in host memory and runs it on a copy engine over PCIe.
 *
 * Completion: after each copy an event is recorded on the copy stream; a
 * second stream per queue (notify) waits on that event and then runs a
 * host function (cuLaunchHostFunc) whose only job is to mark that copy's
 * record fired under copy_lock and call the daemon's wake function — it
 * runs on a driver thread and must not call CUDA. The watcher thread
 * (backend_cuda_watch.c) polls the same event near the copy's expected
 * end and usually marks it first, ~0.1 ms sooner; whichever comes second
 * does nothing. The host function sits
 * on its own stream because a stream stalls while one runs: on the copy
 * stream every chunk would wait for the driver's callback thread (the
 * first GPU run measured 0.82..0.89 of the line rate that way, 64 MiB
 * chunks; ARCHITECTURE.md / BENCHMARKS.md). copy_reap, on the loop thread, pops
 * fired records from the head of each queue's in-flight list (the notify
 * stream runs in order, so they fire in order) and hands them to the
 * daemon. The list itself is touched by the loop thread only; records and
 * their events are reused.
 *
 * Failures: a copy the driver refuses at submit time is a negative errno
 * from copy_submit. A copy that fails on the GPU breaks the context
 * (errors on a stream are sticky), so its host function, and every later
 * one, never runs; maintain polls the streams that have copies in flight
 * (cuStreamQuery, on the loop thread) and, when one reports an error,
 * marks the queue failed and wakes the loop, and reap fails every copy of
 * that queue with the error. Such records cannot be freed (a host function
 * might still name them if the error was not sticky after all), so they go
 * to a list freed when the backend closes.
 *
 * The link measurement (backend_cuda_link.c) queues its own copies on these
 * streams, outside the in-flight lists: it counts the copies submitted here
 * (n_submitted) to know whether it ran alone, and has the notify stream
 * wake the loop after each of its copies (cuda_copy_wake_after), so reap,
 * which then polls it, moves it on without waiting for maintain's timer.
 */
#include "backend_cuda.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "timeutil.h"

/* Driver thread: mark `c` fired (when given) and wake the loop. */
static void cuda_copy_wake(cuda_backend *b, cuda_copy *c)
{
        void (*wake)(void *ctx);
        void *ctx;

        pthread_mutex_lock(&b->copy_lock);
        if (c) {
                c->called = true;
                /* Heard already (backend_cuda_watch.c): the loop knows. */
                if (c->fired) {
                        pthread_mutex_unlock(&b->copy_lock);
                        return;
                }
                c->fired = true;
                cuda_gate_heard(c);
        }
        wake = b->wake;
        ctx = b->wake_ctx;
        pthread_mutex_unlock(&b->copy_lock);
        if (wake)
                wake(ctx);
}

/* Driver thread: the copy before it is over. */
static void CUDA_CB cuda_copy_fired(void *data)
{
        cuda_copy *c = data;

        cuda_copy_wake(c->backend, c);
}

/* Driver thread: a copy of the link measurement is over
 * (cuda_copy_wake_after); reap polls it. */
static void CUDA_CB cuda_copy_woken(void *data)
{
        cuda_copy_wake(data, NULL);
}

int cuda_copy_wake_after(cuda_backend *b, cuda_queue *q, CUevent after)
{
        int r;

        r = cuda_check(b, b->cu->cuStreamWaitEvent(q->notify, after, 0),
                       "cuStreamWaitEvent (wake)");
        if (r == 0)
                r = cuda_check(b, b->cu->cuLaunchHostFunc(q->notify,
                                                          cuda_copy_woken, b),
                               "cuLaunchHostFunc (wake)");
        return r;
}

int cuda_copy_open(cuda_backend *b, cuda_device *d)
{
        for (int i = 0; i < CUDA_QUEUES; i++) {
                cuda_queue *q = &d->queues[i];
                int r;

                q->urgent = i >= CUDA_QUEUE_URGENT;
                q->gate = &d->gates[i % 2];
                r = cuda_check(b, b->cu->cuStreamCreate(&q->stream,
                                                        CU_STREAM_NON_BLOCKING),
                               "cuStreamCreate (copies)");
                if (r == 0)
                        r = cuda_check(b, b->cu->cuStreamCreate(&q->notify,
                                                CU_STREAM_NON_BLOCKING),
                                       "cuStreamCreate (notify)");
                if (r < 0)
                        return r;
        }
        return cuda_gate_open(b, d, b->preempt_step);
}

void cuda_copy_list_free(cuda_backend *b, cuda_copy *c)
{
        while (c) {
                cuda_copy *next = c->next;

                if (c->done)
                        b->cu->cuEventDestroy(c->done);
                free(c);
                c = next;
        }
}

/* Move the retired records whose host function ran to the spare list
 * (copy_lock held). Host functions run in order: from the head. */
static void cuda_copy_recycle(cuda_queue *q)
{
        while (q->retired && q->retired->called) {
                cuda_copy *c = q->retired;

                q->retired = c->next;
                if (!q->retired)
                        q->retired_tail = NULL;
                c->next = q->spare;
                q->spare = c;
        }
}

/* A record with its event: a spare one, else a new one. */
static cuda_copy *cuda_copy_get(cuda_backend *b, cuda_queue *q)
{
        cuda_copy *c;

        pthread_mutex_lock(&b->copy_lock);
        cuda_copy_recycle(q);
        pthread_mutex_unlock(&b->copy_lock);
        c = q->spare;
        if (c) {
                q->spare = c->next;
                c->next = NULL;
                c->fired = false;
                c->called = false;
                return c;
        }
        c = calloc(1, sizeof(*c));
        if (!c)
                return NULL;
        c->backend = b;
        if (cuda_check(b, b->cu->cuEventCreate(&c->done, CU_EVENT_DISABLE_TIMING),
                       "cuEventCreate (copy)") < 0) {
                free(c);
                return NULL;
        }
        /* For good: a record stays with its queue (q->spare). */
        c->gate = q->urgent ? q->gate : NULL;
        return c;
}

/* A record back for reuse: spare, or retired until its host function
 * has run (copy_lock held). */
static void cuda_copy_put(cuda_queue *q, cuda_copy *c)
{
        if (c->called) {
                c->next = q->spare;
                q->spare = c;
                return;
        }
        c->next = NULL;
        if (q->retired_tail)
                q->retired_tail->next = c;
        else
                q->retired = c;
        q->retired_tail = c;
}

void cuda_copy_close(cuda_backend *b, cuda_device *d)
{
        /* Nothing may wait on a gate now. */
        pthread_mutex_lock(&b->copy_lock);
        cuda_gate_release(d);
        pthread_mutex_unlock(&b->copy_lock);
        for (int i = 0; i < CUDA_QUEUES; i++) {
                cuda_queue *q = &d->queues[i];

                if (!q->stream)
                        continue;
                /* Host functions name the records: let them run first. */
                b->cu->cuStreamSynchronize(q->stream);
                b->cu->cuStreamDestroy(q->stream);
                q->stream = NULL;
                if (q->notify) {
                        b->cu->cuStreamSynchronize(q->notify);
                        b->cu->cuStreamDestroy(q->notify);
                        q->notify = NULL;
                }
                cuda_copy_list_free(b, q->head);
                cuda_copy_list_free(b, q->spare);
                cuda_copy_list_free(b, q->retired);
                q->spare = NULL;
                q->retired = q->retired_tail = NULL;
                q->head = q->tail = NULL;
                q->n_inflight = 0;
        }
        cuda_gate_close(b, d);
}

void cuda_ops_set_wake(gmd_backend *backend, void (*wake)(void *ctx),
                       void *ctx)
{
        cuda_backend *b = (cuda_backend *)backend;

        pthread_mutex_lock(&b->copy_lock);
        b->wake = wake;
        b->wake_ctx = ctx;
        pthread_mutex_unlock(&b->copy_lock);
}

/* Queue a copy on lane `urgent` of `device`'s queues for `dir`. */
static int cuda_copy_queue(cuda_backend *b, unsigned device, gmd_copy_dir dir,
                           bool urgent, gmd_mem *dst, uint64_t dst_off,
                           gmd_mem *src, uint64_t src_off, uint64_t len,
                           void *cookie)
{
        cuda_device *d = cuda_device_get(b, device);
        uint64_t run;
        cuda_queue *q;
        uint64_t done = 0;
        cuda_copy *c;
        CUresult res;
        bool fired, whole;
        int r = 0;

        if (!d || (dir != GMD_COPY_OUT && dir != GMD_COPY_IN) ||
            dst_off > dst->size || len > dst->size - dst_off ||
            src_off > src->size || len > src->size - src_off)
                return -EINVAL;
        if (!cuda_mem_at(b, cuda_mem_of(dst), dst_off, &run) ||
            !cuda_mem_at(b, cuda_mem_of(src), src_off, &run))
                return -EINVAL;
        q = &d->queues[dir + (urgent ? CUDA_QUEUE_URGENT : 0)];
        if (q->error)
                return q->error;
        r = cuda_device_enter(b, d);
        if (r < 0)
                return r;
        c = cuda_copy_get(b, q);
        if (!c)
                return -ENOMEM;
        c->cookie = cookie;
        q->n_submitted++;
        /* Before its bytes are queued: the bulk lane's steps not begun
         * wait from now until it is heard. */
        if (urgent) {
                pthread_mutex_lock(&b->copy_lock);
                cuda_gate_urgent(c);
                pthread_mutex_unlock(&b->copy_lock);
        }

        /* One copy per stretch that is contiguous at both ends: a host
         * arena copy comes in parts (backend_cuda_host.c); on the bulk
         * lane each in gated steps, but for a copy between two devices'
         * VRAM (the peer tier): over NVLink a 64 MiB chunk is over in
         * ~0.2 ms, less than an urgent copy would gain, and each step
         * cost ~4 us of a 10 us step. None for an empty copy: its
         * completion below still comes after the stream's earlier work
         * and the events it waits for. */
        whole = urgent || (src->tier == GMD_TIER_VRAM &&
                           dst->tier == GMD_TIER_VRAM);
        while (done < len) {
                uint64_t to_run, from_run;
                CUdeviceptr to = cuda_mem_at(b, cuda_mem_of(dst), dst_off + done,
                                             &to_run);
                CUdeviceptr from = cuda_mem_at(b, cuda_mem_of(src), src_off + done,
                                               &from_run);
                uint64_t n = len - done;

                if (n > to_run)
                        n = to_run;
                if (n > from_run)
                        n = from_run;
                if (!n)
                        r = -EINVAL;
                else if (whole)
                        r = cuda_check(b, b->cu->cuMemcpyAsync(to, from, n,
                                                               q->stream),
                                       "cuMemcpyAsync");
                else
                        r = cuda_gate_copy(b, q, to, from, n);
                if (r < 0)
                        break;
                done += n;
        }
        if (r < 0) {
                /* Parts queued before this one may still run (on the bulk
                 * lane, steps of this one too): the memory must outlive
                 * them. */
                if (done || !urgent)
                        b->cu->cuStreamSynchronize(q->stream);
                pthread_mutex_lock(&b->copy_lock);
                c->called = true;       /* none was queued */
                cuda_gate_heard(c);
                cuda_copy_put(q, c);
                pthread_mutex_unlock(&b->copy_lock);
                return r;
        }
        res = b->cu->cuEventRecord(c->done, q->stream);
        if (res == CUDA_SUCCESS)
                res = b->cu->cuStreamWaitEvent(q->notify, c->done, 0);
        if (res == CUDA_SUCCESS)
                res = b->cu->cuLaunchHostFunc(q->notify, cuda_copy_fired, c);
        if (res != CUDA_SUCCESS) {
                /* The copy is queued but nothing will say when it ends:
                 * wait for it here, once, rather than lose it. The notify
                 * stream too: a host function may be queued there. */
                cuda_check(b, res, "completion of a copy");
                r = cuda_check(b, b->cu->cuStreamSynchronize(q->stream),
                               "cuStreamSynchronize");
                if (r == 0)
                        r = cuda_check(b, b->cu->cuStreamSynchronize(q->notify),
                                       "cuStreamSynchronize");
                if (r < 0) {
                        /* A host function may still name the record; the
                         * device is broken: no gate of it stays shut. */
                        pthread_mutex_lock(&b->copy_lock);
                        cuda_gate_release(d);
                        pthread_mutex_unlock(&b->copy_lock);
                        c->next = b->zombies;
                        b->zombies = c;
                        return r;
                }
                pthread_mutex_lock(&b->copy_lock);
                fired = c->fired;
                pthread_mutex_unlock(&b->copy_lock);
                if (!fired)
                        cuda_copy_fired(c);
        }
        pthread_mutex_lock(&b->copy_lock);
        cuda_watch_queued(b, d, q, dir, c, len, now_us());
        pthread_mutex_unlock(&b->copy_lock);
        return 0;
}

int cuda_ops_copy_submit(gmd_backend *backend, unsigned device,
                         gmd_copy_dir dir, gmd_mem *dst, uint64_t dst_off,
                         gmd_mem *src, uint64_t src_off, uint64_t len,
                         void *cookie)
{
        return cuda_copy_queue((cuda_backend *)backend, device, dir, false,
                               dst, dst_off, src, src_off, len, cookie);
}

int cuda_ops_copy_submit_urgent(gmd_backend *backend, unsigned device,
                                gmd_copy_dir dir, gmd_mem *dst,
                                uint64_t dst_off, gmd_mem *src,
                                uint64_t src_off, uint64_t len, void *cookie)
{
        return cuda_copy_queue((cuda_backend *)backend, device, dir, true,
                               dst, dst_off, src, src_off, len, cookie);
}

/* Take the fired records off the head of `q` (lock held); with the queue
 * failed, take all of them. */
static cuda_copy *cuda_queue_take(cuda_queue *q)
{
        cuda_copy *list = NULL, **tail = &list;

        while (q->head && (q->head->fired || q->error)) {
                cuda_copy *c = q->head;

                q->head = c->next;
                if (!q->head)
                        q->tail = NULL;
                q->n_inflight--;
                c->next = NULL;
                *tail = c;
                tail = &c->next;
        }
        return list;
}

void cuda_ops_copy_reap(gmd_backend *backend, gmd_copy_done_fn done,
                        void *ctx)
{
        cuda_backend *b = (cuda_backend *)backend;

        for (unsigned i = 0; i < CUDA_QUEUES * b->n_devices; i++) {
                cuda_queue *q = &b->devices[i / CUDA_QUEUES].queues[i % CUDA_QUEUES];
                cuda_copy *c;

                /* Detach under the lock, report without it: `done` submits
                 * the next chunks, which append to this very queue. */
                pthread_mutex_lock(&b->copy_lock);
                c = cuda_queue_take(q);
                pthread_mutex_unlock(&b->copy_lock);
                while (c) {
                        cuda_copy *next = c->next;
                        bool fired;

                        pthread_mutex_lock(&b->copy_lock);
                        fired = c->fired;
                        pthread_mutex_unlock(&b->copy_lock);
                        /* A copy whose host function ran is complete,
                         * even on a queue that failed after it. */
                        done(ctx, c->cookie, fired ? 0 :
                             q->error ? q->error : -EIO);
                        if (fired) {
                                pthread_mutex_lock(&b->copy_lock);
                                cuda_copy_put(q, c);
                                pthread_mutex_unlock(&b->copy_lock);
                        } else {
                                /* Its host function may still run. */
                                c->next = b->zombies;
                                b->zombies = c;
                        }
                        c = next;
                }
        }
        /* The same wake says a copy of the link measurement is over. */
        cuda_link_poll(b);
}

void cuda_copy_poll(cuda_backend *b)
{
        bool failed = false;

        for (unsigned i = 0; i < b->n_devices; i++) {
                cuda_device *d = &b->devices[i];

                for (int k = 0; k < CUDA_QUEUES; k++) {
                        cuda_queue *q = &d->queues[k];
                        CUresult res;

                        if (!q->head || q->error ||
                            cuda_device_enter(b, d) < 0)
                                continue;
                        res = b->cu->cuStreamQuery(q->stream);
                        if (res == CUDA_SUCCESS || res == CUDA_ERROR_NOT_READY)
                                res = b->cu->cuStreamQuery(q->notify);
                        if (res == CUDA_SUCCESS || res == CUDA_ERROR_NOT_READY)
                                continue;
                        q->error = cuda_check(b, res, k % 2 == GMD_COPY_OUT ?
                                              "copy stream (out)" :
                                              "copy stream (in)");
                        failed = true;
                        /* Its urgent copies will never be heard. */
                        pthread_mutex_lock(&b->copy_lock);
                        cuda_gate_release(d);
                        pthread_mutex_unlock(&b->copy_lock);
                }
        }
        if (failed && b->wake)
                b->wake(b->wake_ctx);
}
