/*
 * backend_cuda — internals shared by the cuda backend's files
 * (backend_cuda.c: devices, allocations, the reserve; backend_cuda_event.c:
 * IPC events). Nothing outside daemon/backend_cuda*.c includes this; the
 * daemon sees only daemon/backend.h.
 */
#ifndef GMD_BACKEND_CUDA_H
#define GMD_BACKEND_CUDA_H

#include <stdbool.h>

#include "backend.h"
#include "cuda_driver.h"

/* Pre-created chunks kept ready per device (each one granularity). */
#define CUDA_RESERVE_CHUNKS 16u
/* Chunks maintain() makes per call, so one call stays around a millisecond. */
#define CUDA_MAINTAIN_BATCH 4u

typedef struct cuda_mem {
        gmd_mem mem;
        CUdeviceptr va;          /* the daemon's own mapping (or cuMemAlloc) */
        bool ipc;                /* legacy: cuMemAlloc'd, freed by cuMemFree */
        struct cuda_mem *next;   /* reserve stack link */
} cuda_mem;

typedef struct cuda_event {
        gmd_event event;
        CUevent handle;
        unsigned refs;
        bool imported;           /* opened from a peer's handle: cached */
        struct cuda_event *next; /* cache list of imported events */
} cuda_event;

typedef struct cuda_device {
        CUdevice dev;
        CUcontext ctx;           /* primary context, retained */
        CUstream stream;         /* non-blocking: zeroing, later copies */
        char name[64];
        uint64_t total;
        uint64_t granularity;
        uint64_t host_granularity;   /* 0: HOST tier not supported */
        int host_numa_id;
        /* One chunk never handed out: with no allocation left alive in
         * the process, the driver makes the next export and the last
         * release cost ~0.6 ms each instead of ~0.1 (measured on H200). */
        cuda_mem *anchor;
        cuda_mem *reserve;       /* clean chunks, zeroed and exported */
        unsigned n_reserve;
} cuda_device;

typedef struct cuda_backend {
        gmd_backend base;
        const gmd_cuda_driver *cu;
        unsigned reserve_target;
        cuda_event *events;      /* imported events, by handle */
        unsigned n_devices;
        cuda_device devices[];
} cuda_backend;

/* Make `d`'s context current on the calling thread; 0 or -errno. */
int cuda_device_enter(cuda_backend *b, cuda_device *d);

/* Log a failed driver call ("what: CUDA_ERROR_... (text)") and return it
 * as a negative errno. */
int cuda_check(cuda_backend *b, CUresult res, const char *what);

/* IPC event ops, backend_cuda_event.c. */
int cuda_event_create(gmd_backend *backend, unsigned device,
                      gmd_event **ret_event);
int cuda_event_open(gmd_backend *backend, unsigned device,
                    const uint8_t handle[GMD_IPC_HANDLE_SIZE],
                    gmd_event **ret_event);
int cuda_event_record(gmd_backend *backend, gmd_event *event);
int cuda_event_wait(gmd_backend *backend, gmd_event *event);
void cuda_event_unref(gmd_backend *backend, gmd_event *event);
/* Destroy every cached event (backend teardown). */
void cuda_events_clear(cuda_backend *b);

#endif
