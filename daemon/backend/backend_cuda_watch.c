/*
 * backend_cuda_watch — hears a copy end soon after the GPU finishes it.
 *
 * Each copy's host function on the notify stream (backend_cuda_copy.c)
 * tells the loop that the copy ended, but the driver runs it late:
 * measured on the H100 (bench/notify_bench, a 64 MiB host-to-VRAM copy),
 * 76-106 us after the GPU's end, where a thread polling the copy's event
 * hears it 7-11 us after. That lateness is paid by every acquire of a
 * paged-out buffer and is most of the time of a small move (a 2 MiB copy
 * takes 38 us at 55 GB/s).
 *
 * So one thread polls, but only when a copy is due: at submit each copy
 * gets the time it should end — after the copies queued before it on its
 * stream, at the rate measured for the device's link that way (or 50 GB/s
 * before the measurement), and a few microseconds per gated step — and
 * the thread sleeps until the first copy
 * of some queue is due, then queries its event (cuEventQuery) every few
 * microseconds, less and less often as the copy runs later than reckoned
 * (one waiting for a client's last-use event can take any time). A copy
 * it hears of is marked fired and the loop woken, as the host function
 * would; the host functions stay, so a copy is heard by whichever comes
 * first, and nothing is lost if the thread is late or absent. With no
 * copy in flight it sleeps on a condition variable.
 *
 * Records are reused (a queue's spare list) and so are their events: a
 * query made while the record was reaped and queued again could answer
 * for the next copy. Each queued record gets a new generation number,
 * and a query's answer counts only if the record still has the
 * generation it had before the query. A record heard here is reaped
 * before its host function runs; it is reused only after that host
 * function ran (the queue's retired list), or the late host function
 * would mark the next copy made with it. A record the thread is
 * querying is never freed under it: records are freed only at close,
 * after cuda_watch_stop.
 */
#include "backend_cuda.h"

#include <errno.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "log.h"
#include "timeutil.h"

/* Before the link is measured: a PCIe 5 x16 link's rate, about. */
#define WATCH_DEFAULT_RATE (50ull * 1000 * 1000 * 1000)
/* Queried this long before it is due: the rate is a median. */
#define WATCH_EARLY_US 10
/* Launch and start of a copy on an idle stream. */
#define WATCH_START_US 8
/* The shortest pause between two rounds. */
#define WATCH_MIN_WAIT_US 2
/* What each gated step of a bulk copy adds to its time (the copy engine
 * starts each anew: 4 MiB steps ran 5-6% slower than whole chunks on the
 * H100, backend_cuda_gate.c). */
#define WATCH_STEP_US 4

void cuda_watch_queued(cuda_backend *b, cuda_device *d, cuda_queue *q,
                       gmd_copy_dir dir, cuda_copy *c, uint64_t len,
                       uint64_t now)
{
        uint64_t rate = d->link.bytes_per_s[dir];
        uint64_t start = q->last_due_us > now ? q->last_due_us :
                         now + WATCH_START_US;
        const cuda_gate *g = q->gate;
        uint64_t steps = 0;

        if (!rate)
                rate = WATCH_DEFAULT_RATE;
        if (cuda_gate_on(g) && !q->urgent)
                steps = (len + g->step - 1) / g->step;
        c->gen = ++b->watch.gen;
        c->due_us = start + len * 1000000 / rate + steps * WATCH_STEP_US;
        c->poll_us = c->due_us > WATCH_EARLY_US ? c->due_us - WATCH_EARLY_US : 0;
        q->last_due_us = c->due_us;
        if (q->tail)
                q->tail->next = c;
        else
                q->head = c;
        q->tail = c;
        q->n_inflight++;
        if (b->watch.started)
                pthread_cond_signal(&b->watch.cond);
}

/* The next query of a copy still running at `now`: every few
 * microseconds around its due time, less often the later it runs. */
static uint64_t watch_next_poll(const cuda_copy *c, uint64_t now)
{
        uint64_t late = now > c->due_us ? now - c->due_us : 0;

        if (late < 100)
                return now + 3;
        if (late < 1000)
                return now + 25;
        return now + 250;
}

/* Move the times of the copies queued behind `c` on `q` by `late`. */
static void watch_shift(cuda_queue *q, cuda_copy *c, uint64_t late)
{
        for (cuda_copy *n = c->next; n; n = n->next) {
                n->due_us += late;
                n->poll_us += late;
        }
        q->last_due_us += late;
}

/* The first copy of `q` not heard of yet, or NULL. */
static cuda_copy *watch_first(cuda_queue *q)
{
        cuda_copy *c = q->head;

        while (c && c->fired)
                c = c->next;
        return c;
}

uint64_t cuda_watch_step(cuda_backend *b, uint64_t now)
{
        uint64_t next = UINT64_MAX;
        bool woke = false;

        for (unsigned i = 0; i < CUDA_QUEUES * b->n_devices; i++) {
                cuda_device *d = &b->devices[i / CUDA_QUEUES];
                cuda_queue *q = &d->queues[i % CUDA_QUEUES];
                cuda_copy *c = watch_first(q);
                uint64_t gen;
                CUresult res;

                if (!c || q->error)
                        continue;
                if (c->poll_us > now) {
                        if (c->poll_us < next)
                                next = c->poll_us;
                        continue;
                }
                gen = c->gen;
                pthread_mutex_unlock(&b->copy_lock);
                res = b->cu->cuCtxSetCurrent(d->ctx);
                if (res == CUDA_SUCCESS)
                        res = b->cu->cuEventQuery(c->done);
                pthread_mutex_lock(&b->copy_lock);
                b->watch.queries++;
                /* Reaped and queued again meanwhile: not this answer's. */
                if (c->gen != gen || c->fired) {
                        next = now;
                        continue;
                }
                if (res == CUDA_SUCCESS) {
                        c->fired = true;
                        /* The bulk lane goes on now, not after the loop
                         * heard it (backend_cuda_gate.c). */
                        cuda_gate_heard(c);
                        /* The copies behind a late one start as late. */
                        if (now > c->due_us)
                                watch_shift(q, c, now - c->due_us);
                        b->watch.heard++;
                        woke = true;
                        next = now;     /* the next copy of the queue */
                        continue;
                }
                /* Not over, or an error: that is maintain's to find (a
                 * failed stream fails all its copies); asked again later.
                 * An urgent copy far past its time no longer holds the
                 * bulk copies in (backend_cuda_gate.c). */
                if (now > c->due_us + GATE_OVERDUE_US) {
                        int o = cuda_gate_overdue(c);

                        if (o)
                                log_warning("cuda: device %s: an urgent copy "
                                            "ran %llu ms past its time; the "
                                            "copies in it paused go on beside "
                                            "it%s", d->name, (unsigned long long)
                                            (now - c->due_us) / 1000, o == 2 ?
                                            ", and from now on they no longer "
                                            "pause ([swap] preempt_step off for "
                                            "this device)" : " (logged once, and "
                                            "when it stops pausing them)");
                }
                c->poll_us = watch_next_poll(c, now);
                if (c->poll_us < next)
                        next = c->poll_us;
        }
        if (woke && b->wake) {
                void (*wake)(void *ctx) = b->wake;
                void *ctx = b->wake_ctx;

                pthread_mutex_unlock(&b->copy_lock);
                wake(ctx);
                pthread_mutex_lock(&b->copy_lock);
        }
        return next;
}

static void *watch_main(void *arg)
{
        cuda_backend *b = arg;
        struct timespec ts;

        /* Sleeps of a few microseconds mean what they say (the default
         * slack is 50 us). */
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
        /* Named, so its CPU time can be read (swap_bench, top -H). */
        prctl(PR_SET_NAME, "gmd-copywatch", 0, 0, 0);
        pthread_mutex_lock(&b->copy_lock);
        while (!b->watch.stopping) {
                uint64_t now = now_us();
                uint64_t next = cuda_watch_step(b, now);

                if (b->watch.stopping)
                        break;
                if (next == UINT64_MAX) {
                        pthread_cond_wait(&b->watch.cond, &b->copy_lock);
                        continue;
                }
                /* Always a real wait, however short, so that the lock
                 * goes to the loop and the host functions in between. */
                now = now_us();
                if (next < now + WATCH_MIN_WAIT_US)
                        next = now + WATCH_MIN_WAIT_US;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_nsec += (long)((next - now) * 1000);
                while (ts.tv_nsec >= 1000000000L) {
                        ts.tv_nsec -= 1000000000L;
                        ts.tv_sec++;
                }
                pthread_cond_timedwait(&b->watch.cond, &b->copy_lock, &ts);
        }
        pthread_mutex_unlock(&b->copy_lock);
        return NULL;
}

int cuda_watch_start(cuda_backend *b)
{
        pthread_condattr_t attr;
        int r;

        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        r = pthread_cond_init(&b->watch.cond, &attr);
        pthread_condattr_destroy(&attr);
        if (r)
                return -r;
        pthread_mutex_lock(&b->copy_lock);
        b->watch.stopping = false;
        r = pthread_create(&b->watch.thread, NULL, watch_main, b);
        b->watch.started = r == 0;
        pthread_mutex_unlock(&b->copy_lock);
        if (r) {
                pthread_cond_destroy(&b->watch.cond);
                log_warning("cuda: no thread to watch copies (%s): their ends "
                            "are heard through host functions, ~0.1 ms later",
                            strerror(r));
                return -r;
        }
        return 0;
}

void cuda_watch_stop(cuda_backend *b)
{
        bool started;

        pthread_mutex_lock(&b->copy_lock);
        started = b->watch.started;
        b->watch.stopping = true;
        if (started)
                pthread_cond_signal(&b->watch.cond);
        pthread_mutex_unlock(&b->copy_lock);
        if (!started)
                return;
        pthread_join(b->watch.thread, NULL);
        pthread_mutex_lock(&b->copy_lock);
        b->watch.started = false;
        pthread_mutex_unlock(&b->copy_lock);
        pthread_cond_destroy(&b->watch.cond);
        log_debug("cuda: the copy watcher queried %llu events and heard %llu "
                  "copies first", (unsigned long long)b->watch.queries,
                  (unsigned long long)b->watch.heard);
}
