/*
 * backend_cuda_event — CUDA IPC events for cross-process ordering without
 * host-side syncs (ARCHITECTURE.md decision 1): a client records "last use" into
 * an interprocess event and the daemon's copy stream waits on it; the daemon
 * records "copy done" into an event of its own that the client's stream
 * waits on.
 *
 * Opening a peer's event handle costs ~0.5 ms, so opened events are cached
 * by their 64 handle bytes: opening the same handle again returns the same
 * event with one more reference. Events the daemon creates are not cached
 * (their handle is new by construction).
 */
#include "backend_cuda.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static cuda_event *cuda_event_of(gmd_event *event)
{
        return (cuda_event *)((char *)event - offsetof(cuda_event, event));
}

static void cuda_event_free(cuda_backend *b, cuda_event *e)
{
        if (e->handle)
                b->cu->cuEventDestroy(e->handle);
        free(e);
}

/* A new record of an event of `device`, one reference, with that device's
 * context current: what create and open both begin with, before they give
 * it a driver event. -EINVAL for a device the backend does not have. */
static int cuda_event_new(cuda_backend *b, unsigned device,
                          cuda_event **ret_event)
{
        cuda_event *e;
        int r;

        if (device >= b->n_devices)
                return -EINVAL;
        r = cuda_device_enter(b, &b->devices[device]);
        if (r < 0)
                return r;
        e = calloc(1, sizeof(*e));
        if (!e)
                return -ENOMEM;
        e->event.device = device;
        e->refs = 1;
        *ret_event = e;
        return 0;
}

int cuda_event_create(gmd_backend *backend, unsigned device,
                      gmd_event **ret_event)
{
        cuda_backend *b = (cuda_backend *)backend;
        CUipcEventHandle handle;
        cuda_event *e;
        int r;

        r = cuda_event_new(b, device, &e);
        if (r < 0)
                return r;
        r = cuda_check(b, b->cu->cuEventCreate(&e->handle,
                                CU_EVENT_INTERPROCESS |
                                CU_EVENT_DISABLE_TIMING), "cuEventCreate");
        if (r < 0)
                goto fail;
        r = cuda_check(b, b->cu->cuIpcGetEventHandle(&handle, e->handle),
                       "cuIpcGetEventHandle");
        if (r < 0)
                goto fail;
        memcpy(e->event.ipc_handle, handle.reserved, GMD_IPC_HANDLE_SIZE);
        *ret_event = &e->event;
        return 0;
fail:
        cuda_event_free(b, e);
        return r;
}

int cuda_event_open(gmd_backend *backend, unsigned device,
                    const uint8_t handle[GMD_IPC_HANDLE_SIZE],
                    gmd_event **ret_event)
{
        cuda_backend *b = (cuda_backend *)backend;
        CUipcEventHandle ipc;
        cuda_event *e;
        int r;

        if (device >= b->n_devices)
                return -EINVAL;
        for (e = b->events; e; e = e->next) {
                if (e->event.device == device &&
                    memcmp(e->event.ipc_handle, handle,
                           GMD_IPC_HANDLE_SIZE) == 0) {
                        e->refs++;
                        *ret_event = &e->event;
                        return 0;
                }
        }
        r = cuda_event_new(b, device, &e);
        if (r < 0)
                return r;
        e->imported = true;
        memcpy(e->event.ipc_handle, handle, GMD_IPC_HANDLE_SIZE);
        memcpy(ipc.reserved, handle, GMD_IPC_HANDLE_SIZE);
        r = cuda_check(b, b->cu->cuIpcOpenEventHandle(&e->handle, ipc),
                       "cuIpcOpenEventHandle");
        if (r < 0) {
                cuda_event_free(b, e);
                return r;
        }
        e->next = b->events;
        b->events = e;
        *ret_event = &e->event;
        return 0;
}

int cuda_event_record(gmd_backend *backend, gmd_event *event)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_event *e = cuda_event_of(event);
        cuda_device *d = &b->devices[event->device];
        int r;

        r = cuda_device_enter(b, d);
        if (r < 0)
                return r;
        return cuda_check(b, b->cu->cuEventRecord(e->handle, d->stream),
                          "cuEventRecord");
}

int cuda_event_wait(gmd_backend *backend, gmd_event *event)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_event *e = cuda_event_of(event);
        cuda_device *d = &b->devices[event->device];
        int r;

        r = cuda_device_enter(b, d);
        if (r < 0)
                return r;
        /* The interface names no direction yet: every stream that may
         * touch the owner's memory waits (copies in both directions, both
         * lanes, and zeroing). */
        for (int i = 0; i < CUDA_QUEUES && r == 0; i++)
                r = cuda_check(b, b->cu->cuStreamWaitEvent(d->queues[i].stream,
                                                           e->handle, 0),
                               "cuStreamWaitEvent");
        if (r < 0)
                return r;
        return cuda_check(b, b->cu->cuStreamWaitEvent(d->stream, e->handle, 0),
                          "cuStreamWaitEvent");
}

void cuda_event_unref(gmd_backend *backend, gmd_event *event)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_event *e, **link;

        if (!event)
                return;
        e = cuda_event_of(event);
        if (--e->refs > 0)
                return;
        for (link = &b->events; *link; link = &(*link)->next) {
                if (*link == e) {
                        *link = e->next;
                        break;
                }
        }
        (void)cuda_device_enter(b, &b->devices[event->device]);
        cuda_event_free(b, e);
}

void cuda_events_clear(cuda_backend *b)
{
        while (b->events) {
                cuda_event *e = b->events;

                b->events = e->next;
                if (e->event.device < b->n_devices)
                        (void)cuda_device_enter(b, &b->devices[e->event.device]);
                cuda_event_free(b, e);
        }
}
