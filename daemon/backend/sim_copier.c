/*
 * sim_copier — see sim_copier.h. A job moves from its queue's pending list
 * to the shared finished list under one mutex; memcpy runs outside it.
 * The wake function is called once per batch that made the finished list
 * non-empty, so a burst of small copies costs one wake-up of the loop.
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
        void *cookie;
        bool report;                /* false: a part, not handed to reap */
} copy_job;

typedef struct copy_queue {
        sim_copier *copier;
        pthread_t thread;
        bool started;
        copy_job *head, *tail;      /* pending, oldest first */
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
};

static void jobs_free(copy_job *job)
{
        while (job) {
                copy_job *next = job->next;

                free(job);
                job = next;
        }
}

/* Stretch a copy that took `spent_ns` to what `rate` allows. */
static void copy_throttle(uint64_t rate, size_t len, uint64_t spent_ns)
{
        uint64_t want_ns;
        struct timespec ts;

        if (!rate)
                return;
        want_ns = (uint64_t)((double)len * 1e9 / (double)rate);
        if (want_ns <= spent_ns)
                return;
        want_ns -= spent_ns;
        ts.tv_sec = (time_t)(want_ns / 1000000000u);
        ts.tv_nsec = (long)(want_ns % 1000000000u);
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static uint64_t mono_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *queue_run(void *arg)
{
        copy_queue *q = arg;
        sim_copier *c = q->copier;

        pthread_mutex_lock(&c->lock);
        for (;;) {
                copy_job *job;
                bool was_empty;

                while (!q->head && !c->stopping)
                        pthread_cond_wait(&q->cond, &c->lock);
                if (!q->head)
                        break;   /* stopping, nothing left */
                job = q->head;
                pthread_mutex_unlock(&c->lock);

                uint64_t t0 = mono_ns();

                memcpy(job->dst, job->src, job->len);
                copy_throttle(c->rate, job->len, mono_ns() - t0);

                pthread_mutex_lock(&c->lock);
                q->head = job->next;
                if (!q->head)
                        q->tail = NULL;
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

int sim_copier_new(unsigned n_queues, uint64_t rate, sim_copier **ret_copier)
{
        sim_copier *c = calloc(1, sizeof(*c));
        int r = 0;

        if (!c)
                return -ENOMEM;
        c->rate = rate;
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
                jobs_free(q->head);
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

int sim_copier_submit_parts(sim_copier *c, unsigned queue,
                            const sim_copy_part *parts, unsigned n, void *cookie)
{
        copy_job *first = NULL, **tail = &first, *last = NULL;
        copy_queue *q;

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
        q = &c->queues[queue];
        pthread_mutex_lock(&c->lock);
        if (q->tail)
                q->tail->next = first;
        else
                q->head = first;
        q->tail = last;
        pthread_cond_signal(&q->cond);
        pthread_mutex_unlock(&c->lock);
        return 0;
}

int sim_copier_submit(sim_copier *c, unsigned queue, void *dst, const void *src,
                      size_t len, void *cookie)
{
        sim_copy_part part = { dst, src, len };

        return sim_copier_submit_parts(c, queue, &part, 1, cookie);
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
