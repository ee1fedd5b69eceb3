/*
 * sim_copier — the sim backend's copy engine: one worker thread per queue
 * (a device and a direction), each running memcpy on the jobs submitted to
 * it in order, the way a CUDA stream runs its copies. A queue has two
 * lanes: urgent jobs run before the bulk ones, and a bulk job under way
 * yields to them between its steps (backend.h copy_submit_urgent). Finished jobs wait in
 * one list until the loop thread reaps them; the wake function tells it
 * there is something to reap. Threads and locks stay inside this file.
 */
#ifndef GMD_SIM_COPIER_H
#define GMD_SIM_COPIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

typedef struct sim_copier sim_copier;

/* Start `n_queues` worker threads, each copying at most `rate` bytes per
 * second (0: as fast as memcpy goes), a bulk job `step` bytes at a time
 * (0: a whole part at a time). */
int sim_copier_new(unsigned n_queues, uint64_t rate, uint64_t step,
                   sim_copier **ret_copier);

/* Stop the threads (after the jobs already queued) and free everything;
 * jobs not reaped are dropped. Accepts NULL, returns NULL. */
sim_copier *sim_copier_free(sim_copier *copier);

/* The bytes per second each queue copies at most (0: unthrottled). */
uint64_t sim_copier_rate(const sim_copier *copier);

/* The host's own limit across queues: the queues of one direction (one
 * parity: the backend numbers them 2 * device + direction) copy at most
 * `rate` bytes per second together (0: no such limit), each step taking
 * its turn on the host as it starts. Set before the first copy. */
void sim_copier_set_host_rate(sim_copier *copier, uint64_t rate);

/* The bytes of a bulk job copied per turn (0: whole parts). */
uint64_t sim_copier_step(const sim_copier *copier);

void sim_copier_set_wake(sim_copier *copier, void (*wake)(void *ctx), void *ctx);

/* Queue a copy of `len` bytes on `queue`'s bulk lane. 0 or -ENOMEM /
 * -EINVAL. */
int sim_copier_submit(sim_copier *copier, unsigned queue, void *dst,
                      const void *src, size_t len, void *cookie);

/* One stretch of a copy made of several (sim_copier_submit_parts). */
typedef struct sim_copy_part {
        void *dst;
        const void *src;
        size_t len;
} sim_copy_part;

/* Queue one copy made of `n` stretches on `queue`'s urgent or bulk lane,
 * run in order; only the last is reported, with `cookie`. All or nothing:
 * on -ENOMEM none is queued. */
int sim_copier_submit_parts(sim_copier *copier, unsigned queue, bool urgent,
                            const sim_copy_part *parts, unsigned n,
                            void *cookie);

/* Hand every finished job to `done`, in the order they finished. */
void sim_copier_reap(sim_copier *copier, gmd_copy_done_fn done, void *ctx);

#endif
