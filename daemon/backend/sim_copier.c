/*
 * sim_copier — see sim_copier.h. A job moves from its lane's pending list
 * to the shared finished list under one mutex; memcpy runs outside it.
 * The wake function is called once per batch that made the finished list
 * non-empty, so a burst of small copies costs one wake-up of the loop.
 * A bulk job is copied a step at a time, and before each step the thread
 * looks at the urgent lane first: an urgent job waits for one step of the
 * others at most, as the cuda backend's gated steps make it on the GPU.
 *
 * Throttling: a step of n bytes takes at least n / rate (the queue's
 * link) and, with a host rate, ends no sooner than its turn on the host:
 * as it starts it books the next n / host_rate of its direction's host
 * time (after what other queues of that direction booked), so k busy
 * queues of one direction share the host rate, each at about 1/k of it.
 */
#include "sim_copier.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct copy_job {
        struct copy_job *next;
        void *dst;
        const void *src;
        size_t len;
        size_t off;                 /* bytes copied so far */
        void *cookie;
        bool report;                /* false: a part, not handed to reap */
} copy_job;

typedef struct copy_lane {
        copy_job *head, *tail;      /* pending, oldest first */
} copy_lane;

typedef struct copy_queue {
        sim_copier *copier;
        pthread_t thread;
        bool started;
        copy_lane lanes[2];         /* bulk, urgent */
        pthread_cond_t cond;
} copy_queue;

struct sim_copier {
        pthread_mutex_t lock;
        bool stopping;
        unsigned n_queues;
        copy_queue *queues;
        copy_job *done_head, *done_tail;
        void (*wake)(void *ctx);
        void *wake_ctx;
        uint64_t rate;              /* bytes per second, 0 = unlimited */
        uint64_t step;              /* a bulk job's bytes per turn, 0: all */
        uint64_t host_rate;         /* per direction, all queues; 0: none */
        uint64_t host_free_ns[2];   /* by direction: when the host's time
                                     * booked so far ends (mono_ns) */
};

static void jobs_free(copy_job *job)
{
        while (job) {
                copy_job *next = job->next;

                free(job);
                job = next;
        }
}

static uint64_t mono_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* How long `len` bytes take at `rate` (0: no time). */
static uint64_t copy_ns(uint64_t rate, size_t len)
{
        return rate ? (uint64_t)((double)len * 1e9 / (double)rate) : 0;
}

/* Sleep until `end_ns` (mono_ns clock). */
static void copy_throttle(uint64_t end_ns)
{
        struct timespec ts;

        ts.tv_sec = (time_t)(end_ns / 1000000000u);
        ts.tv_nsec = (long)(end_ns % 1000000000u);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
               EINTR)
                ;
}

static void *queue_run(void *arg)
{
        copy_queue *q = arg;
        sim_copier *c = q->copier;
        copy_lane *urgent = &q->lanes[1], *bulk = &q->lanes[0];

        pthread_mutex_lock(&c->lock);
        for (;;) {
                copy_lane *lane;
                copy_job *job;
                size_t n;
                bool was_empty;

                while (!urgent->head && !bulk->head && !c->stopping)
                        pthread_cond_wait(&q->cond, &c->lock);
                lane = urgent->head ? urgent : bulk;
                if (!lane->head)
                        break;   /* stopping, nothing left */
                job = lane->head;
                n = job->len - job->off;
                if (lane == bulk && c->step && n > c->step)
                        n = c->step;

                uint64_t t0 = mono_ns(), end = t0 + copy_ns(c->rate, n);
                bool throttled = c->rate || c->host_rate;

                if (c->host_rate) {
                        uint64_t *host = &c->host_free_ns[(q - c->queues) % 2];

                        *host = (*host > t0 ? *host : t0) +
                                copy_ns(c->host_rate, n);
                        if (*host > end)
                                end = *host;
                }
                pthread_mutex_unlock(&c->lock);

                memcpy((char *)job->dst + job->off,
                       (const char *)job->src + job->off, n);
                if (throttled)
                        copy_throttle(end);

                pthread_mutex_lock(&c->lock);
                job->off += n;
                if (job->off < job->len)
                        continue;       /* a step: the urgent lane first */
                lane->head = job->next;
                if (!lane->head)
                        lane->tail = NULL;
                job->next = NULL;
                if (!job->report) {
                        free(job);      /* a part: the last part reports */
                        continue;
                }
                was_empty = !c->done_head;
                if (c->done_tail)
                        c->done_tail->next = job;
                else
                        c->done_head = job;
                c->done_tail = job;
                if (was_empty && c->wake)
                        c->wake(c->wake_ctx);
        }
        pthread_mutex_unlock(&c->lock);
        return NULL;
}

uint64_t sim_copier_rate(const sim_copier *copier)
{
        return copier ? copier->rate : 0;
}

void sim_copier_set_host_rate(sim_copier *c, uint64_t rate)
{
        pthread_mutex_lock(&c->lock);
        c->host_rate = rate;
        pthread_mutex_unlock(&c->lock);
}

uint64_t sim_copier_step(const sim_copier *copier)
{
        return copier ? copier->step : 0;
}

int sim_copier_new(unsigned n_queues, uint64_t rate, uint64_t step,
                   sim_copier **ret_copier)
{
        sim_copier *c = calloc(1, sizeof(*c));
        int r = 0;

        if (!c)
                return -ENOMEM;
        c->rate = rate;
        c->step = step;
        c->queues = calloc(n_queues ? n_queues : 1, sizeof(*c->queues));
        if (!c->queues) {
                free(c);
                return -ENOMEM;
        }
        c->n_queues = n_queues;
        pthread_mutex_init(&c->lock, NULL);
        for (unsigned i = 0; i < n_queues; i++) {
                copy_queue *q = &c->queues[i];

                q->copier = c;
                pthread_cond_init(&q->cond, NULL);
                r = -pthread_create(&q->thread, NULL, queue_run, q);
                if (r < 0)
                        break;
                q->started = true;
        }
        if (r < 0) {
                sim_copier_free(c);
                return r;
        }
        *ret_copier = c;
        return 0;
}

sim_copier *sim_copier_free(sim_copier *c)
{
        if (!c)
                return NULL;
        pthread_mutex_lock(&c->lock);
        c->stopping = true;
        for (unsigned i = 0; i < c->n_queues; i++)
                pthread_cond_signal(&c->queues[i].cond);
        pthread_mutex_unlock(&c->lock);
        for (unsigned i = 0; i < c->n_queues; i++) {
                copy_queue *q = &c->queues[i];

                if (q->started)
                        pthread_join(q->thread, NULL);
                jobs_free(q->lanes[0].head);
                jobs_free(q->lanes[1].head);
                pthread_cond_destroy(&q->cond);
        }
        jobs_free(c->done_head);
        pthread_mutex_destroy(&c->lock);
        free(c->queues);
        free(c);
        return NULL;
}

void sim_copier_set_wake(sim_copier *c, void (*wake)(void *ctx), void *ctx)
{
        pthread_mutex_lock(&c->lock);
        c->wake = wake;
        c->wake_ctx = ctx;
        pthread_mutex_unlock(&c->lock);
}

int sim_copier_submit_parts(sim_copier *c, unsigned queue, bool urgent,
                            const sim_copy_part *parts, unsigned n, void *cookie)
{
        copy_job *first = NULL, **tail = &first, *last = NULL;
        copy_lane *lane;

        if (queue >= c->n_queues || n == 0)
                return -EINVAL;
        /* Every record first: a copy half queued could not be taken back. */
        for (unsigned i = 0; i < n; i++) {
                copy_job *job = calloc(1, sizeof(*job));

                if (!job) {
                        jobs_free(first);
                        return -ENOMEM;
                }
                job->dst = parts[i].dst;
                job->src = parts[i].src;
                job->len = parts[i].len;
                job->report = i == n - 1;
                job->cookie = job->report ? cookie : NULL;
                *tail = job;
                tail = &job->next;
                last = job;
        }
        lane = &c->queues[queue].lanes[urgent];
        pthread_mutex_lock(&c->lock);
        if (lane->tail)
                lane->tail->next = first;
        else
                lane->head = first;
        lane->tail = last;
        pthread_cond_signal(&c->queues[queue].cond);
        pthread_mutex_unlock(&c->lock);
        return 0;
}

int sim_copier_submit(sim_copier *c, unsigned queue, void *dst, const void *src,
                      size_t len, void *cookie)
{
        sim_copy_part part = { dst, src, len };

        return sim_copier_submit_parts(c, queue, false, &part, 1, cookie);
}

void sim_copier_reap(sim_copier *c, gmd_copy_done_fn done, void *ctx)
{
        copy_job *job;

        pthread_mutex_lock(&c->lock);
        job = c->done_head;
        c->done_head = c->done_tail = NULL;
        pthread_mutex_unlock(&c->lock);
        while (job) {
                copy_job *next = job->next;

                done(ctx, job->cookie, 0);
                free(job);
                job = next;
        }
}
