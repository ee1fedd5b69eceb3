/*
 * outside — VRAM a client's process holds beyond what gpu-memd accounts
 * to it, charged to its user (ARCHITECTURE.md decision 8).
 *
 * A VMM handle keeps its memory alive while any process holds it, so a
 * client that keeps a buffer's fd (a dup) and frees the buffer keeps the
 * VRAM while the pool counts it free; a client may also allocate beside
 * gpu-memd (cudaMalloc). Either way the other users paid for it: the pool
 * offered that room to them and the driver refused it (vram.h). Per
 * process and device:
 *
 *     outside = driver's bytes of the process
 *               - what its sessions hold there in the pool (buffers on
 *                 VRAM, parked ones included, and VRAM kept for them),
 *                 where the backend's figure includes them
 *               - [limits] outside_vram_allowance (its CUDA context)
 *
 * never below 0. The driver's figure is the backend's device_processes
 * (NVML on cuda; on sim a test hook). Measured on an H100 and an H200
 * (driver 580), NVML counts a VMM allocation to the process that created
 * it (gpu-memd) and memory held only through a kept fd to no process at
 * all, so from NVML the charge catches what a client's process allocated
 * itself. Kept fds of freed buffers are found by the daemon itself
 * (keptfd.h: kcmp of its own dup of the freed buffer's export against the
 * fds of the owner's uid's processes, on a worker thread) and charged
 * here the same way (outside_kept_refresh: the user's usage by uid,
 * pool.kept_fds, the session's kept_outside for status). NVML counts
 * those bytes to no process, so adding them counts nothing twice. What
 * kcmp may not look into (the daemon not root, a client of another uid)
 * stays uncharged, "unaccounted" per device (vram.h).
 *
 * [limits] outside_vram: "charge" counts it against the user's
 * vram_quota (its next allocation is refused with GMD_ERR_QUOTA and a
 * sentence saying so, quota.h) and in the device's pool (pool.outside:
 * the room is not offered to others); "disconnect" also ends the sessions
 * of a process whose user it puts over vram_quota, with a notice; "ignore"
 * only shows it (the default). Refreshed with the per-process figures
 * (vram.h: every 5 s and for status), never per allocation: NVML asks
 * the kernel driver; kept fds when their looks end (keptfd.h).
 */
#ifndef GMD_OUTSIDE_H
#define GMD_OUTSIDE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

typedef struct gmd_server gmd_server;
typedef struct gmd_config gmd_config;

/* What one process holds outside: `driver` (the driver's bytes of it)
 * less `held` (what gpu-memd accounts to it there, where the driver's
 * figure includes that) and `allowance`, never below 0. Pure. */
uint64_t outside_process_bytes(uint64_t driver, uint64_t held,
                               uint64_t allowance);

/* Is memory held outside charged ([limits] outside_vram is not
 * "ignore")? */
bool outside_charges(const gmd_config *config);

/*
 * The driver's per-process figures of `device` were read (`procs`, `n`
 * of them, this daemon left out; n = 0 when it cannot tell): set each
 * session's outside_on[device] (the oldest session of a process carries
 * it) and the pool's charge; room given back marks the wait queue. With
 * outside_vram = disconnect, a process whose user is now over vram_quota
 * by it has its sessions closed, after a notice saying why.
 */
void outside_refresh(gmd_server *server, unsigned device,
                     const gmd_gpu_process *procs, unsigned n);

/*
 * The charges for kept fds of freed buffers changed (keptfd.h, which set
 * each session's kept_outside first): set each pool's `kept` from their
 * tallies (kepttally.h; 0 with outside_vram = ignore), mark the wait
 * queue when room came back, and with outside_vram = disconnect close
 * the sessions of a process holding such memory whose user it puts over
 * vram_quota.
 */
void outside_kept_refresh(gmd_server *server);

#endif
