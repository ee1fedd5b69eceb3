/*
 * memctl — what gpu-memctl's files share: the settings of one run, the
 * helpers that print for people and for scripts, and the live view. Only
 * gpu-memctl includes it; it uses the public libgpumem API and nothing
 * else.
 */
#ifndef GMD_MEMCTL_H
#define GMD_MEMCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpumem.h"

#define EXIT_USAGE 2

/* One run's settings, from the command line. */
typedef struct ctl {
        const char *socket;
        bool json;
        bool once;                      /* top: one frame, then exit */
        bool pid_given;
        uint32_t pid;                   /* --pid, or the admin verbs' PID */
        int32_t priority;               /* priority PID N */
} ctl;

/* "1.5 GiB" into buf. */
const char *ctl_size_text(uint64_t bytes, char *buf, size_t len);

/* Client names come from other processes: control characters become '?'
 * so they cannot move the terminal's cursor; cut to `width` bytes. */
const char *ctl_name_text(const char *name, char *buf, size_t width);

/* A copy rate, bytes over microseconds, as "1.5 GiB/s" into buf; "-"
 * when `us` is 0 (nothing was copied). */
const char *ctl_rate_text(uint64_t bytes, uint64_t us, char *buf, size_t len);

/* "3m 02s" into buf. */
const char *ctl_uptime_text(uint64_t ms, char *buf, size_t len);

/* gpu-memctl's own connection is not a client anyone asked about: drop
 * it (every client of this process) from the list and the total. */
void ctl_drop_self(gmd_status *status);

/* "peer tier: gpu0 -> gpu1 at 384.1 GB/s: 1.5 GiB held there" (the peer
 * tier's pair `p`) into `buf`; returns buf. */
const char *ctl_peer_text(const gmd_peer_status *p, char *buf, size_t len);

/* "gpu0 memory slice: pid 1234 (train_a), 3120 ms left at most" for a
 * VRAM pool whose memory slice runs ([limits] memory_slice_ms), the
 * holder named after its first client that status shows; NULL when no
 * slice runs there. */
const char *ctl_slice_text(const gmd_status *status, const gmd_pool_status *p,
                           char *buf, size_t len);

/* "used: VRAM 1.0 GiB of 4.0 GiB, host 0 B of 2.0 GiB": the tiers apart
 * (one sum of both would read as a device that large). */
const char *ctl_tiers_text(const gmd_status *status, char *buf, size_t len);

/* The copies table of status and top, the same columns in the same order:
 * device, moves queued each way, bytes moved each way, then the rate each
 * way (the average while copying; top's later frames: the last second). */
#define CTL_COPIES_FORMAT "%-8s %10s %9s %11s %11s %12s %12s"

/* The status as one JSON object on stdout; the buffer list only with
 * GMD_STATUS_BUFFERS. */
void ctl_print_json(const gmd_status *status, gmd_status_what what);

/*
 * The live view: a frame each second until 'q', SIGINT or SIGTERM; one
 * frame with c->once or when stdout is not a terminal (--json streams one
 * object a second instead, unless c->once). Returns the exit status.
 */
int ctl_top(const ctl *c, gmd_client *client);

#endif
