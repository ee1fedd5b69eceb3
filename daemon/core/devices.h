/*
 * devices — the GPUs the daemon serves, as one record: how many, the VRAM
 * pool of each, what the backend reported of each (name, memory,
 * granularity) and the driver's view of its memory (vram.h) with the
 * timer that reads it again. The server holds one (server->devices);
 * lifecycle.c fills it at start-up from the backend and the config.
 */
#ifndef GMD_DEVICES_H
#define GMD_DEVICES_H

#include <stdbool.h>
#include <uv.h>

#include "backend.h"
#include "pool.h"
#include "server_limits.h"
#include "vram.h"

typedef struct gmd_devices {
        unsigned n;                   /* devices served */
        gmd_pool *pools;              /* the VRAM pool of each */
        gmd_device_info *info;        /* what the backend reported */
        gmd_vram_view vram[GMD_MAX_DEVICES];  /* the driver's view */
        /* Per device, the bytes of its buffers the host arena would hold
         * were they all out: neither pinned in VRAM nor SPILLABLE (those
         * pin their own host memory), on whatever tier they are now
         * (buffer.c keeps it; backing.c sizes the arena from it). */
        uint64_t arena_bound[GMD_MAX_DEVICES];
        uv_timer_t vram_timer;        /* reads it periodically */
        bool vram_timer_open;
} gmd_devices;

/* Room for `n` devices' pools and reports (n at most GMD_MAX_DEVICES;
 * none set yet). 0, or -ENOMEM: devices_free frees what was taken. */
int devices_alloc(gmd_devices *devices, unsigned n);

/* Free what devices_alloc took; the timer is closed by then. */
void devices_free(gmd_devices *devices);

#endif
