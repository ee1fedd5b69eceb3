/*
 * slice — processes whose memory does not fit together take the device
 * in time slices.
 *
 * Two training jobs whose working sets are each most of the pool cannot
 * both run; each waits for the other's memory between its own steps.
 * Served as they asked, they took it from each other at every step: an
 * eviction started the moment one released, and its next step's acquire
 * cancelled it or brought it straight back. Measured on the H100
 * (bench_cotenancy --quick with the jobs started at one go, 2026-11-26):
 * 302 GiB moved out in 27 s, the second job's steps at 76 ms against 33 ms
 * alone while the first waited 13 s for one step, and a makespan 1.53x of
 * running them one after another.
 *
 * So a device's memory belongs, under contention, to one process at a time
 * for a slice of `[limits] memory_slice_ms`: while its slice runs, what it
 * holds (released or lent) is not evicted for another process of its
 * priority or lower, the room that frees up is served to it before such
 * processes while it waits, and an acquire of another process that finds
 * its buffer being evicted for the holder does not stop that eviction
 * (it comes back after). Its
 * own requests still page its own idle buffers, and a process of higher
 * priority still takes what it needs: priorities decide first. The slice
 * passes when it is over and another process waits: to the first such
 * waiter in the queue's order (rank, priority, users' turns, arrival), so
 * equal processes alternate and each runs alone for a slice, paying the
 * move of the working sets once a slice instead of once a step.
 *
 * A request the slice holds back makes no room while it runs: the
 * evictor leaves its demand out (evict.c, demand_now) and it is served
 * only from free room (server_slice_keeps), not from the VRAM kept for the
 * holder's swap-ins or the holder's parked buffers. Counted, it made the
 * holder give both up at every pass: on the H100 (bench_cotenancy --quick,
 * 2026-11-26) a job created and destroyed 17 VRAM allocations a step in
 * its slice and stepped at 53 ms against 35 alone; now at its alone speed
 * (45.3 / 43.3 ms with 1000 ms slices, 35.7 / 36.8 with 5000).
 *
 * Nor is it served from free room the holder may take again: never while
 * the holder waits (a prefetch too), and otherwise only beside the most
 * the holder held at once less what it holds now (server_slice_keeps).
 * The holder frees and re-takes memory within each step; served from
 * that room, the other process held it in use, which no slice moves, and
 * the holder waited in its own slice with neither job stepping: 3-4 s
 * spans, ~8 s of a 25 s run (H100, debug run of 2026-11-26). And a slice
 * whose holder has had none of its buffers acquired and nothing waiting
 * for SLICE_IDLE_MS ends (evict.c, slice_end_idle).
 *
 * Off by default (0): a request held back waits up to a slice, and the
 * handover moves both working sets. The same run's makespan against the
 * jobs one after another: 1.71 without slices, 1.44 with 5000 before the
 * two rules above, 1.17 after them (BENCHMARKS.md).
 *
 * This file is the bookkeeping alone (pure: no server, no clock); evict.c
 * gives the slice and asks it, move.c asks it before cancelling an
 * eviction.
 */
#ifndef GMD_SLICE_H
#define GMD_SLICE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "server_limits.h"

typedef struct gmd_slice {
        pid_t pid;              /* the holder; 0: nobody's */
        int priority;           /* the holder's, when given */
        uint64_t since_ms;      /* when it was given */
        uint64_t served_ms;     /* when a request of the holder was first
                                 * served in it, on the slice's clock
                                 * (slice_served); 0: not yet */
        uint64_t paused_since_ms; /* the holder waits behind a higher
                                 * priority since (slice_pause); 0: not */
        uint64_t paused_ms;     /* the pauses before, summed */
        bool stalled;           /* the holder waits for room only memory
                                 * held in use could make (slice_stall) */
} gmd_slice;

/* A slice runs for its length from the holder's first request served in
 * it: making its room (moving the other's working set out) is not part
 * of it. Until then it runs at most this many lengths, so a holder that
 * cannot be served does not keep the others back for long. */
#define SLICE_WAIT_LENGTHS 4

/* A slice whose holder has had none of its buffers of the device acquired
 * and nothing waiting there for this long ends: a job between its last
 * step and its exit, or waiting for data, keeps nobody back. Between two
 * steps a training job that releases everything (gpumem.torch.idle) uses
 * nothing for well under a millisecond to a few. */
#define SLICE_IDLE_MS 250

/* A slice's clock stops while its holder waits and a process above the
 * slice's priority uses the device (slice_pause): the holder cannot run
 * then, and it is not its turn that is spent. Measured on the H200
 * (bench_cotenancy --quick, 2026-11-28, a77fe9f): a training job's 5 s
 * slice ran out while the priority-10 inference job had the memory, the
 * slice passed to the other training job, and the first job's step
 * waited 16.5 s. A process above that never stops would hold the slice
 * still for ever: a slice pauses for at most this many lengths in all. */
#define SLICE_PAUSE_LENGTHS 4

typedef struct gmd_slices {
        gmd_slice on[GMD_MAX_DEVICES];
        uint64_t length_ms;     /* [limits] memory_slice_ms; 0: no slices */
        uint64_t passed;        /* slices given (gpumemd_memory_slices_total) */
} gmd_slices;

void slices_init(gmd_slices *t, uint64_t length_ms);

/* The process whose slice of `device` runs at `now`, or 0; with the time
 * it has left in *ret_left_ms (may be NULL). */
pid_t slice_holder(const gmd_slices *t, unsigned device, uint64_t now,
                   uint64_t *ret_left_ms);

/* The holder of a slice of `device` that runs at `now` for a process other
 * than `pid`, of `priority` or higher: the process `pid`'s requests and
 * memory give way to. 0 when none (*ret_left_ms as slice_holder's). */
pid_t slice_over(const gmd_slices *t, unsigned device, pid_t pid, int priority,
                 uint64_t now, uint64_t *ret_left_ms);

/*
 * A device under contention at `now`: `first` is the process of the first
 * waiter for its VRAM in the queue's order (not a prefetch), `other` that
 * of the first waiter of a process other than the holder (0: none), with
 * its priority. Nobody's slice goes to `first`; a slice that is over goes
 * to `other`. True when the slice changed hands.
 */
bool slice_update(gmd_slices *t, unsigned device, pid_t first, int first_priority,
                  pid_t other, int other_priority, uint64_t now);

/* A request of `pid` was served at `now`: the first in its slice of
 * `device` starts the slice's clock. */
void slice_served(gmd_slices *t, unsigned device, pid_t pid, uint64_t now);

/* The holder of the slice of `device` is `blocked` at `now` (it waits,
 * and a process of a priority above the slice's uses the device: evict.c
 * decides): the slice's clock stops until it is not, SLICE_PAUSE_LENGTHS
 * lengths at most in all. True when the pause began or ended. */
bool slice_pause(gmd_slices *t, unsigned device, bool blocked, uint64_t now);

/* Is the slice of `device` paused (slice_pause)? */
bool slice_paused(const gmd_slices *t, unsigned device);

/* The holder of the slice of `device` waits for room that only memory
 * held in use could make (`stalled`: evict.c decides). Meanwhile the
 * slice does not hold back a process that holds VRAM there in use
 * (server.c, server_slice_over): that memory may be what the holder
 * waits for, and its owner cannot let go of it while its own request
 * waits. Held back, it waited with the holder until the slice passed
 * (four lengths when the holder was never served) and its request, with
 * the room it asked for free, timed out (test_sched_review). True when
 * the state changed. */
bool slice_stall(gmd_slices *t, unsigned device, bool stalled);

/* Is the holder of the slice of `device` stalled (slice_stall)? */
bool slice_stalled(const gmd_slices *t, unsigned device);

/* The slice of `device` ends now (its holder left it idle, evict.c). */
void slice_end(gmd_slices *t, unsigned device);

/* A process that closed its last connection holds no slice. */
void slice_forget(gmd_slices *t, pid_t pid);

#endif
