/*
 * vram — the daemon's VRAM against what the driver says.
 *
 * The pools count what gpu-memd handed out; the driver counts what the GPU
 * holds. The two differ by memory held outside gpu-memd: other processes
 * (the normal case on a shared machine), every process's CUDA context, and
 * buffers the daemon freed whose exported fds a client still holds (a VMM
 * handle keeps its physical memory alive as long as any process holds it,
 * whatever the daemon does). That difference is the *unaccounted* VRAM:
 *
 *     unaccounted = (total - free) - own
 *
 * where total and free are the driver's (cuMemGetInfo) and own is every
 * byte the backend created on the device (gmd_device_info.own). It is read
 * at each VRAM allocation, periodically, and for status and metrics; an
 * allocation the pool has room for but the driver has not is refused here
 * with a sentence naming the unaccounted bytes, instead of failing inside
 * the driver (cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY).
 *
 * What it cannot do: free that memory. The daemon can notice it, refuse
 * what does not fit beside it, show it, and let an administrator
 * disconnect a client (gpu-memctl drain); a process that keeps an exported
 * fd keeps the memory until it closes the fd or exits.
 */
#ifndef GMD_VRAM_H
#define GMD_VRAM_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "result.h"

/* Processes kept per device, the largest holders first. */
#define VRAM_MAX_PROCESSES 16

typedef struct gmd_server gmd_server;

/* One device as last read from the driver. */
typedef struct gmd_vram_view {
        bool known;             /* read at least once */
        uint64_t total;         /* bytes, the driver's */
        uint64_t free;          /* free when read, the driver's */
        uint64_t own;           /* what the backend holds there */
        uint64_t spare;         /* of own, what it can give back at once
                                 * (the cuda reserve of ready chunks) */
        uint64_t unaccounted;   /* used on the device, not by gpu-memd */
        uint64_t slack;         /* of free, what status does not offer */
        uint64_t read_us;       /* when (now_us) */
        uint64_t warned;        /* unaccounted at the last warning */
        /* Who holds the device's memory, other than this daemon, as the
         * backend can tell (NVML): largest first. processes_known is
         * false where it cannot (no NVML, sim without its hook). */
        bool processes_known;
        unsigned n_processes;
        gmd_gpu_process processes[VRAM_MAX_PROCESSES];
} gmd_vram_view;

/* (total - free) - own, never below 0 (the driver's figures and the
 * backend's are read a moment apart). Pure. */
uint64_t vram_unaccounted(uint64_t total, uint64_t free, uint64_t own);

/*
 * The bytes a new allocation on the device could get, as last read: the
 * driver's free memory and what the backend gives back on demand
 * (`spare`), less the backend's `slack` when `offer`, rounded down to
 * whole `granularity` (0: bytes); UINT64_MAX while the device was never
 * read. Admission (vram_fits) and status's free (snapshot.c) are both
 * this, so the two cannot drift apart. They differ in the slack on
 * purpose: an allocation is tried whenever the driver's free memory holds
 * it (had the driver taken the slack meanwhile, the backend's refusal
 * speaks: vram_explain), while status offers only what an allocation of
 * all of it would get (one of all the free memory read a moment before
 * was refused: backend.h), in the pool's granules. Pure.
 */
uint64_t vram_room(const gmd_vram_view *view, bool offer,
                   uint64_t granularity);

/* Can the driver hold `size` new bytes beside what it holds now
 * (vram_room in bytes, the slack not taken off: see there)? Pure. */
bool vram_fits(const gmd_vram_view *view, uint64_t size);

/* Read `device` from the driver into server->devices.vram[device].
 * Returns 0 or a negative errno (the view is then left as it was). */
int vram_refresh(gmd_server *server, unsigned device);

/* Read which processes hold `device`'s memory into
 * server->devices.vram[device] (the backend's device_processes; this
 * daemon left out). Slower than vram_refresh: periodic and for status
 * only. */
void vram_refresh_processes(gmd_server *server, unsigned device);

/* Every device, processes included; logs a warning when a device's unaccounted VRAM grew by
 * a GiB or more since the last warning. For the periodic timer. */
void vram_refresh_all(gmd_server *server);

/*
 * Before a new VRAM backing of `size` bytes on `device` that the pool has
 * room for: read the driver, and if it cannot hold `size`, fill `ret` with
 * ERR_NO_MEMORY and the sentence saying how much is held outside gpu-memd,
 * and return -ENOMEM. 0 when it fits, or when the driver cannot be read
 * (then the backend's own failure, if any, speaks).
 */
int vram_check(gmd_server *server, unsigned device, uint64_t size,
               gmd_result *ret);

/* After the backend failed to create `size` bytes of VRAM with -ENOMEM:
 * the same sentence as vram_check, from a fresh reading. */
void vram_explain(gmd_server *server, unsigned device, uint64_t size,
                  gmd_result *ret);

#endif
