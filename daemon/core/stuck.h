/*
 * stuck — at debug level, one line telling what holds a device's VRAM
 * when requests wait there and the evictor finds nothing more to move
 * out: per process, what is in use, lent, released (kept by a slice, a
 * priority's grace or a prefetch), moving or parked, and what it waits
 * for; and whose slice runs.
 *
 * Written for the waits nobody could explain from the per-move lines (two
 * training jobs on the H100 each waited 4 s in one step with a 1 s slice,
 * bench_cotenancy 2026-11-26): the evictor's choice leaves no trace when
 * it chooses nothing. At most a line a device each STUCK_LOG_MS, and one
 * whenever the picture changes.
 */
#ifndef GMD_STUCK_H
#define GMD_STUCK_H

#include <stdint.h>

#include "server_limits.h"

typedef struct gmd_server gmd_server;

#define STUCK_LOG_MS 250

/* The last line logged per device, and what it showed (a sum of its
 * figures): the same picture is not logged again within STUCK_LOG_MS.
 * The server holds one (server->stuck), zeroed. */
typedef struct gmd_stuck {
        uint64_t ms[GMD_MAX_DEVICES];
        uint64_t sum[GMD_MAX_DEVICES];
} gmd_stuck;

/* Requests on `device` want `wanted` bytes more than it has free or
 * leaving; the evictor chose `chosen` bytes to move out. Logs (debug
 * level) when that falls short. */
void stuck_log(gmd_server *server, unsigned device, uint64_t wanted,
               uint64_t chosen);

#endif
