/*
 * mapper_cuda — puts a buffer's VRAM (or host-located VMM) backing at its
 * stable address in the client: cuMemAddressReserve once per buffer, then
 * per segment cuMemImportFromShareableHandle(fd) + cuMemMap + cuMemRelease
 * (the mapping keeps the memory alive), and ONE cuMemSetAccess over the
 * whole buffer: per-chunk access calls cost ~62 µs each, one call over 200
 * chunks ~72 µs (ARCHITECTURE.md figures).
 *
 * Contexts: every call runs inside the device's *primary* context, pushed
 * and popped around the call (cuCtxPushCurrent/cuCtxPopCurrent), so the
 * application's current context is exactly what it was before, and the
 * memory lands in the same context the CUDA runtime (and PyTorch) uses.
 * A primary context is retained the first time a device is used and
 * released when the mapper is destroyed.
 *
 * Devices: the mapper is told the daemon's device numbers, which are not
 * this process's CUDA ordinals when its CUDA_VISIBLE_DEVICES hides or
 * reorders GPUs. At creation each ordinal's UUID is matched to the
 * daemon's devices (the hello's list); a daemon device this process
 * cannot see has no ordinal, and mapping its memory fails with -ENODEV.
 * From a daemon that sends no UUIDs, device N is ordinal N, as before.
 *
 * Thread-safe: the driver calls are; the lazily retained contexts and the
 * event cache are guarded by one mutex.
 *
 * Another device's memory: a SPILLABLE buffer may rest in a peer GPU's
 * VRAM (the daemon's peer tier, daemon/core/peer.h), its remap carrying
 * an fd of an allocation located on that device. It maps like any
 * other: the import and the map do not depend on where the memory is,
 * and the one access call grants the buffer's own device (the owner's,
 * whose kernels use it), which then reads and writes the peer's VRAM over
 * NVLink or PCIe peer-to-peer; VMM memory needs no cuCtxEnablePeerAccess.
 * The driver refuses the access where the two devices have no peer
 * access, and the import where this process cannot see the holding
 * device ($CUDA_VISIBLE_DEVICES). So the daemon is told first which
 * devices' memory this process can map from each of its devices
 * (cuda_reach: seen here, and cuDeviceCanAccessPeer; sent as MSG_REACH)
 * and puts a SPILLABLE buffer on no other peer. Should the remap fail
 * all the same (-errno), its notice said falls_back: the buffer is kept,
 * unmapped, and the daemon maps it back where it was (buffer.c).
 *
 * Peer access: cudaDeviceEnablePeerAccess gives one GPU access to another's
 * cudaMalloc memory, never to VMM memory, whose access is per mapping
 * (cuMemSetAccess). A copy between two GPUs' gpu-memd buffers queued on
 * a GPU without access to the other's buffer is not refused: the driver
 * carries it some other way than a direct peer copy. So when the
 * application enables peer access (gmd_peer_access; the PyTorch shim
 * calls it from its cudaDeviceEnablePeerAccess), the peers it names are
 * put in the same access call as the buffer's own device for every
 * buffer mapped for use on that device from then on (set_peers), and the
 * buffers already mapped get theirs (grant). Should the driver refuse the
 * longer list, the buffer's own device gets its access alone, as before.
 *
 * unmap does not synchronize the device (cudaFree would): the library's
 * caller must not have work in flight on a buffer it frees, and the daemon
 * only moves buffers that are released.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cuda_driver.h"
#include "gpu_uuid.h"
#include "mapper.h"

typedef struct cuda_cached_event {
        unsigned device;
        uint8_t handle[64];
        CUevent event;
        struct cuda_cached_event *next;
} cuda_cached_event;

typedef struct cuda_mapper {
        gmd_mapper base;
        const gmd_cuda_driver *cu;
        pthread_mutex_t lock;
        uint64_t alignment;          /* largest device granularity */
        unsigned n_devices;          /* the daemon's */
        CUcontext *ctx;              /* per device, retained on first use */
        int *ordinal;                /* per device: this process's CUDA
                                      * ordinal of it, -1 where unseen */
        _Atomic uint64_t *peers;     /* per device: the devices also given
                                      * access to its mappings */
        cuda_cached_event *events;
} cuda_mapper;

static cuda_mapper *cuda_mapper_of(gmd_mapper *mapper)
{
        return (cuda_mapper *)mapper;
}

/* Push `device`'s primary context on this thread. 0 or -errno. */
static int cuda_enter(cuda_mapper *m, unsigned device)
{
        CUcontext ctx;
        CUresult res = CUDA_SUCCESS;

        if (device >= m->n_devices)
                return -EINVAL;
        if (m->ordinal[device] < 0)
                return -ENODEV;
        pthread_mutex_lock(&m->lock);
        if (!m->ctx[device]) {
                CUdevice dev;

                res = m->cu->cuDeviceGet(&dev, m->ordinal[device]);
                if (res == CUDA_SUCCESS)
                        res = m->cu->cuDevicePrimaryCtxRetain(&m->ctx[device],
                                                              dev);
        }
        ctx = m->ctx[device];
        pthread_mutex_unlock(&m->lock);
        if (res != CUDA_SUCCESS)
                return cuda_driver_errno(res);
        return cuda_driver_errno(m->cu->cuCtxPushCurrent(ctx));
}

static void cuda_leave(cuda_mapper *m)
{
        CUcontext ctx;

        m->cu->cuCtxPopCurrent(&ctx);
}

static int cuda_reserve(gmd_mapper *mapper, uint64_t size, void **ret_addr)
{
        cuda_mapper *m = cuda_mapper_of(mapper);
        CUdeviceptr va = 0;
        unsigned first = 0;
        CUresult res;

        /* VA reservation needs no context (verified on driver 580): the
         * range is in the process's unified address space. Should a driver
         * want one, the primary context of the first device this process
         * sees is used. */
        while (first + 1 < m->n_devices && m->ordinal[first] < 0)
                first++;
        res = m->cu->cuMemAddressReserve(&va, size, m->alignment, 0, 0);
        if (res == CUDA_ERROR_INVALID_CONTEXT && cuda_enter(m, first) == 0) {
                res = m->cu->cuMemAddressReserve(&va, size, m->alignment, 0, 0);
                cuda_leave(m);
        }
        if (res != CUDA_SUCCESS)
                return cuda_driver_errno(res);
        *ret_addr = (void *)(uintptr_t)va;
        return 0;
}

static int cuda_unmap(gmd_mapper *mapper, void *addr, uint64_t size)
{
        cuda_mapper *m = cuda_mapper_of(mapper);

        return cuda_driver_errno(m->cu->cuMemUnmap((CUdeviceptr)(uintptr_t)addr,
                                                   size));
}

static void cuda_unreserve(gmd_mapper *mapper, void *addr, uint64_t size)
{
        cuda_mapper *m = cuda_mapper_of(mapper);

        /* Fails harmlessly when nothing is mapped. */
        (void)m->cu->cuMemUnmap((CUdeviceptr)(uintptr_t)addr, size);
        (void)m->cu->cuMemAddressFree((CUdeviceptr)(uintptr_t)addr, size);
}

/* At most this many devices in one access call: the owner and its
 * peers. */
#define CUDA_MAX_ACCESS 64

/* The access list of a mapping for use on `device`: `device` first
 * (this process's ordinal of it, not the daemon's number; cuda_enter
 * checked there is one), then each device of `peers` this process sees.
 * Returns the entries filled. */
static unsigned access_list(const cuda_mapper *m, unsigned device,
                            uint64_t peers, CUmemAccessDesc *list)
{
        unsigned n = 0;

        list[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        list[n].location.id = m->ordinal[device];
        list[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        for (unsigned e = 0; e < m->n_devices && e < 64 &&
                             n < CUDA_MAX_ACCESS; e++) {
                if (e == device || !((peers >> e) & 1) || m->ordinal[e] < 0)
                        continue;
                list[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
                list[n].location.id = m->ordinal[e];
                list[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        }
        return n;
}

static void cuda_set_peers(gmd_mapper *mapper, unsigned device, uint64_t peers)
{
        cuda_mapper *m = cuda_mapper_of(mapper);

        if (device < m->n_devices)
                atomic_store(&m->peers[device], peers);
}

static int cuda_grant(gmd_mapper *mapper, void *addr, uint64_t size,
                      unsigned device, uint64_t peers)
{
        cuda_mapper *m = cuda_mapper_of(mapper);
        CUmemAccessDesc list[CUDA_MAX_ACCESS];
        unsigned n;
        int r;

        r = cuda_enter(m, device);
        if (r < 0)
                return r;
        /* The owner's own access again with them: setting it is
         * idempotent, and one list says the whole of it. */
        n = access_list(m, device, peers, list);
        r = n > 1 ? cuda_driver_errno(m->cu->cuMemSetAccess(
                                (CUdeviceptr)(uintptr_t)addr, size, list, n)) : 0;
        cuda_leave(m);
        return r;
}

static int cuda_map(gmd_mapper *mapper, void *addr, unsigned device,
                    const gmd_map_segment *segments, unsigned n_segments)
{
        cuda_mapper *m = cuda_mapper_of(mapper);
        const gmd_cuda_driver *cu = m->cu;
        CUdeviceptr base = (CUdeviceptr)(uintptr_t)addr;
        uint64_t lo = UINT64_MAX, hi = 0;
        unsigned i, mapped = 0;
        int r;

        r = cuda_enter(m, device);
        if (r < 0)
                return r;
        for (i = 0; i < n_segments; i++) {
                const gmd_map_segment *s = &segments[i];
                CUmemGenericAllocationHandle h;

                r = cuda_driver_errno(cu->cuMemImportFromShareableHandle(&h,
                                (void *)(uintptr_t)s->fd,
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
                /* The fd stays the caller's: the imported handle holds the
                 * memory for the mapping, and the fd is what a restarted
                 * daemon is offered it back by (buffer.h). */
                if (r < 0)
                        goto fail;
                r = cuda_driver_errno(cu->cuMemMap(base + s->offset, s->size,
                                                   0, h, 0));
                cu->cuMemRelease(h);   /* the mapping keeps it alive */
                if (r < 0)
                        goto fail;
                mapped++;
                if (s->offset < lo)
                        lo = s->offset;
                if (s->offset + s->size > hi)
                        hi = s->offset + s->size;
        }
        if (n_segments > 0) {
                /* The owner's device, wherever the memory is: its own
                 * VRAM, host memory, or a peer's VRAM (top of file);
                 * with the peers the application enabled, in one call. */
                CUmemAccessDesc list[CUDA_MAX_ACCESS];
                unsigned n = access_list(m, device,
                                         atomic_load(&m->peers[device]), list);

                r = cuda_driver_errno(cu->cuMemSetAccess(base + lo, hi - lo,
                                                         list, n));
                if (r < 0 && n > 1)
                        r = cuda_driver_errno(cu->cuMemSetAccess(base + lo,
                                                                 hi - lo,
                                                                 list, 1));
                if (r < 0)
                        goto fail;
        }
        cuda_leave(m);
        return 0;
fail:
        for (unsigned j = 0; j < mapped; j++)
                cu->cuMemUnmap(base + segments[j].offset, segments[j].size);
        cuda_leave(m);
        return r;
}

static int cuda_ipc_open(gmd_mapper *mapper, unsigned device,
                         const uint8_t handle[64], void **ret_addr)
{
        cuda_mapper *m = cuda_mapper_of(mapper);
        CUipcMemHandle ipc;
        CUdeviceptr va = 0;
        int r;

        r = cuda_enter(m, device);
        if (r < 0)
                return r;
        memcpy(ipc.reserved, handle, sizeof(ipc.reserved));
        r = cuda_driver_errno(m->cu->cuIpcOpenMemHandle(&va, ipc,
                                CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
        cuda_leave(m);
        if (r < 0)
                return r;
        *ret_addr = (void *)(uintptr_t)va;
        return 0;
}

static int cuda_ipc_close(gmd_mapper *mapper, unsigned device, void *addr)
{
        cuda_mapper *m = cuda_mapper_of(mapper);
        int r;

        r = cuda_enter(m, device);
        if (r < 0)
                return r;
        r = cuda_driver_errno(m->cu->cuIpcCloseMemHandle(
                                (CUdeviceptr)(uintptr_t)addr));
        cuda_leave(m);
        return r;
}

static int cuda_event_open(gmd_mapper *mapper, unsigned device,
                           const uint8_t handle[64], void **ret_event)
{
        cuda_mapper *m = cuda_mapper_of(mapper);
        cuda_cached_event *e;
        CUipcEventHandle ipc;
        int r = 0;

        r = cuda_enter(m, device);
        if (r < 0)
                return r;
        /* Held across the open so two threads never open one handle twice. */
        pthread_mutex_lock(&m->lock);
        for (e = m->events; e; e = e->next)
                if (e->device == device && !memcmp(e->handle, handle, 64))
                        break;
        if (!e) {
                e = calloc(1, sizeof(*e));
                if (!e) {
                        r = -ENOMEM;
                        goto out;
                }
                memcpy(ipc.reserved, handle, sizeof(ipc.reserved));
                r = cuda_driver_errno(m->cu->cuIpcOpenEventHandle(&e->event,
                                                                  ipc));
                if (r < 0) {
                        free(e);
                        goto out;
                }
                e->device = device;
                memcpy(e->handle, handle, 64);
                e->next = m->events;
                m->events = e;
        }
        *ret_event = e->event;
out:
        pthread_mutex_unlock(&m->lock);
        cuda_leave(m);
        return r;
}

static int cuda_event_create(gmd_mapper *mapper, unsigned device,
                             void **ret_event, uint8_t ret_handle[64])
{
        cuda_mapper *m = cuda_mapper_of(mapper);
        CUipcEventHandle ipc;
        CUevent ev;
        int r;

        r = cuda_enter(m, device);
        if (r < 0)
                return r;
        r = cuda_driver_errno(m->cu->cuEventCreate(&ev,
                        CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
        if (r == 0) {
                r = cuda_driver_errno(m->cu->cuIpcGetEventHandle(&ipc, ev));
                if (r < 0)
                        m->cu->cuEventDestroy(ev);
        }
        cuda_leave(m);
        if (r < 0)
                return r;
        memcpy(ret_handle, ipc.reserved, 64);
        *ret_event = ev;
        return 0;
}

static int cuda_event_record(gmd_mapper *mapper, unsigned device, void *event,
                             void *stream)
{
        cuda_mapper *m = cuda_mapper_of(mapper);
        int r;

        r = cuda_enter(m, device);
        if (r < 0)
                return r;
        r = cuda_driver_errno(m->cu->cuEventRecord((CUevent)event, (CUstream)stream));
        cuda_leave(m);
        return r;
}

static void cuda_event_destroy(gmd_mapper *mapper, unsigned device, void *event)
{
        cuda_mapper *m = cuda_mapper_of(mapper);

        if (cuda_enter(m, device) < 0)
                return;
        m->cu->cuEventDestroy((CUevent)event);
        cuda_leave(m);
}

static uint64_t cuda_reach(gmd_mapper *mapper, unsigned device)
{
        cuda_mapper *m = cuda_mapper_of(mapper);
        const gmd_cuda_driver *cu = m->cu;
        CUdevice dev, peer;
        uint64_t maps;

        if (device >= m->n_devices || device >= 64 || m->ordinal[device] < 0 ||
            cu->cuDeviceGet(&dev, m->ordinal[device]) != CUDA_SUCCESS)
                return 0;
        maps = 1ull << device;
        for (unsigned e = 0; e < m->n_devices && e < 64; e++) {
                int can = 0;

                /* Another GPU this process sees, whose memory `device`'s
                 * kernels can use: what cuMemSetAccess will be asked. */
                if (e == device || m->ordinal[e] < 0 ||
                    cu->cuDeviceGet(&peer, m->ordinal[e]) != CUDA_SUCCESS)
                        continue;
                if (cu->cuDeviceCanAccessPeer(&can, dev, peer) ==
                            CUDA_SUCCESS && can)
                        maps |= 1ull << e;
        }
        return maps;
}

static void cuda_destroy(gmd_mapper *mapper)
{
        cuda_mapper *m = cuda_mapper_of(mapper);
        unsigned i;

        if (!m)
                return;
        while (m->events) {
                cuda_cached_event *e = m->events;

                m->events = e->next;
                m->cu->cuEventDestroy(e->event);
                free(e);
        }
        for (i = 0; i < m->n_devices; i++) {
                CUdevice dev;

                if (m->ctx[i] && m->cu->cuDeviceGet(&dev, m->ordinal[i]) ==
                                 CUDA_SUCCESS)
                        m->cu->cuDevicePrimaryCtxRelease(dev);
        }
        pthread_mutex_destroy(&m->lock);
        free(m->ctx);
        free(m->ordinal);
        free((void *)m->peers);
        free(m);
}

static const gmd_mapper_ops cuda_mapper_ops = {
        .name = "cuda",
        .reserve = cuda_reserve,
        .unreserve = cuda_unreserve,
        .map = cuda_map,
        .unmap = cuda_unmap,
        .remap = NULL,   /* VMM cannot map over a live mapping */
        .destroy = cuda_destroy,
        .reach = cuda_reach,
        .set_peers = cuda_set_peers,
        .grant = cuda_grant,
        .ipc_open = cuda_ipc_open,
        .ipc_close = cuda_ipc_close,
        .event_open = cuda_event_open,
        .event_create = cuda_event_create,
        .event_record = cuda_event_record,
        .event_destroy = cuda_event_destroy,
};

/* Which of this process's `n` CUDA ordinals each daemon device is. */
static void cuda_match_devices(cuda_mapper *m, const gmd__device_id *ids,
                               int n)
{
        bool named = m->n_devices > 0;

        for (unsigned d = 0; d < m->n_devices; d++) {
                m->ordinal[d] = -1;
                if (!ids[d].uuid[0])
                        named = false;
        }
        if (!named) {
                for (unsigned d = 0; d < m->n_devices; d++)
                        m->ordinal[d] = (int)d < n ? (int)d : -1;
                return;
        }
        for (int i = 0; i < n; i++) {
                char uuid[GMD_UUID_SIZE];
                CUdevice dev;
                CUuuid id;

                if (m->cu->cuDeviceGet(&dev, i) != CUDA_SUCCESS ||
                    m->cu->cuDeviceGetUuid(&id, dev) != CUDA_SUCCESS)
                        continue;
                gpu_uuid_format((const unsigned char *)id.bytes, uuid,
                                sizeof(uuid));
                for (unsigned d = 0; d < m->n_devices; d++)
                        if (strcasecmp(ids[d].uuid, uuid) == 0)
                                m->ordinal[d] = i;
        }
}

int gmd__mapper_cuda_new(const gmd__device_id *ids, unsigned n_ids,
                         gmd_mapper **ret_mapper)
{
        CUmemAllocationProp prop = { 0 };
        const gmd_cuda_driver *cu;
        cuda_mapper *m;
        int n, i;

        if (cuda_driver_load(&cu, NULL) < 0)
                return -ENOTSUP;
        n = cuda_driver_device_count(cu);
        if (n <= 0)
                return -ENOTSUP;
        m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        m->ctx = calloc(n_ids ? n_ids : 1, sizeof(*m->ctx));
        m->ordinal = calloc(n_ids ? n_ids : 1, sizeof(*m->ordinal));
        m->peers = calloc(n_ids ? n_ids : 1, sizeof(*m->peers));
        if (!m->ctx || !m->ordinal || !m->peers) {
                free(m->ctx);
                free(m->ordinal);
                free((void *)m->peers);
                free(m);
                return -ENOMEM;
        }
        m->base.ops = &cuda_mapper_ops;
        m->cu = cu;
        m->n_devices = n_ids;
        cuda_match_devices(m, ids, n);
        pthread_mutex_init(&m->lock, NULL);

        /* One alignment for every reservation: the buffer's device is not
         * known at reserve time, so take the largest granularity. */
        m->alignment = 2u << 20;
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        for (i = 0; i < n; i++) {
                size_t gran = 0;

                prop.location.id = i;
                if (cu->cuMemGetAllocationGranularity(&gran, &prop,
                                CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
                            CUDA_SUCCESS && gran > m->alignment)
                        m->alignment = gran;
        }
        *ret_mapper = &m->base;
        return 0;
}
