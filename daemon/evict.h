/*
 * evict — making room in VRAM for what waits for it (ARCHITECTURE.md decision 5).
 * First VRAM kept for swap-ins is released (reuse.h), then the clients'
 * caches of idle mappings are asked for their parked buffers (they cost
 * nothing to give back); then released SWAPPABLE and
 * SPILLABLE buffers of any client are moved to host memory, lowest client
 * priority first, then least recently released. Bytes already on their way
 * out count as room, so repeated calls do not evict twice for one need.
 */
#ifndef GMD_EVICT_H
#define GMD_EVICT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct gmd_server gmd_server;
typedef struct gmd_dbuffer gmd_dbuffer;

/* For each device with waiters: start what it takes to make their room. */
void evict_balance(gmd_server *server);

/* Bytes of VRAM on `device` that eviction could free now. */
uint64_t evict_evictable(gmd_server *server, unsigned device);

/* May the daemon move this buffer out without its owner's say? */
bool evict_candidate(const gmd_dbuffer *buffer);

#endif
