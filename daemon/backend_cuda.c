/*
 * backend_cuda — GPU memory for gpu-memd: CUDA VMM physical allocations
 * (cuMemCreate, handle type POSIX fd), each exported to an fd once and kept
 * for its life, and mapped into the daemon's own address space so the
 * daemon can zero it (and, with the swap engine, copy it).
 *
 * One primary context per visible device (the driver applies
 * CUDA_VISIBLE_DEVICES), retained for the backend's life, and one
 * non-blocking stream per device for zeroing.
 *
 * Creating and exporting a chunk costs ~10 + 75..590 µs (DESIGN.md), so a
 * reserve of zeroed, exported, granularity-sized chunks is kept per device
 * and refilled by maintain(), off the request path. Freed allocations are
 * never put back into the reserve: an fd once sent to a client is a
 * capability the client may keep (a dup, an import), so recycling the
 * memory to another client would let the first one read it. Every chunk is
 * zeroed once, when created, before anyone receives it.
 *
 * The reserve holds CUDA_RESERVE_CHUNKS chunks per device, or
 * $GPU_MEMD_CUDA_RESERVE (0 turns it off; the benchmark's miss case).
 */
#include "backend_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static double cuda_now_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int cuda_check(cuda_backend *b, CUresult res, const char *what)
{
        char buf[160];

        if (res == CUDA_SUCCESS)
                return 0;
        log_error("cuda: %s: %s", what,
                  cuda_driver_error(b->cu, res, buf, sizeof(buf)));
        return cuda_driver_errno(res);
}

int cuda_device_enter(cuda_backend *b, cuda_device *d)
{
        return cuda_check(b, b->cu->cuCtxSetCurrent(d->ctx), "cuCtxSetCurrent");
}

static cuda_device *cuda_device_get(cuda_backend *b, unsigned device)
{
        return device < b->n_devices ? &b->devices[device] : NULL;
}

static int cuda_fill_zero(cuda_backend *b, cuda_device *d, CUdeviceptr va,
                          uint64_t size)
{
        int r;

        r = cuda_check(b, b->cu->cuMemsetD8Async(va, 0, size, d->stream),
                       "cuMemsetD8Async");
        if (r < 0)
                return r;
        return cuda_check(b, b->cu->cuStreamSynchronize(d->stream),
                          "cuStreamSynchronize");
}

/* Undo what cuda_mem_new did, in reverse; every step tolerates "not done". */
static void cuda_mem_free(cuda_backend *b, cuda_mem *m)
{
        const gmd_cuda_driver *cu = b->cu;

        if (!m)
                return;
        if (m->ipc) {
                if (m->va)
                        cu->cuMemFree(m->va);
        } else {
                if (m->va) {
                        cu->cuMemUnmap(m->va, m->mem.size);
                        cu->cuMemAddressFree(m->va, m->mem.size);
                }
                if (m->mem.handle)
                        cu->cuMemRelease(m->mem.handle);
        }
        if (m->mem.fd >= 0)
                close(m->mem.fd);
        free(m);
}

/* Create, export, map into the daemon and zero one VMM allocation. */
static int cuda_mem_new(cuda_backend *b, cuda_device *d, unsigned device,
                        gmd_tier tier, uint64_t size, cuda_mem **ret_mem)
{
        const gmd_cuda_driver *cu = b->cu;
        CUmemAllocationProp prop = { 0 };
        CUmemAccessDesc access = { 0 };
        CUmemGenericAllocationHandle h = 0;
        double t0 = cuda_now_us(), t1, t2, t3;
        cuda_mem *m;
        int fd = -1, r;

        m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        m->mem.fd = -1;
        m->mem.size = size;
        m->mem.tier = tier;
        m->mem.device = device;

        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        if (tier == GMD_TIER_HOST) {
                prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
                prop.location.id = d->host_numa_id;
        } else {
                prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
                prop.location.id = d->dev;
        }
        r = cuda_check(b, cu->cuMemCreate(&h, size, &prop, 0), "cuMemCreate");
        if (r < 0)
                goto fail;
        m->mem.handle = h;
        t1 = cuda_now_us();

        r = cuda_check(b, cu->cuMemExportToShareableHandle(&fd, h,
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                       "cuMemExportToShareableHandle");
        if (r < 0)
                goto fail;
        m->mem.fd = fd;
        /* The driver's fd has no CLOEXEC; the daemon's fds all do. */
        (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
        t2 = cuda_now_us();

        r = cuda_check(b, cu->cuMemAddressReserve(&m->va, size, d->granularity,
                                                  0, 0),
                       "cuMemAddressReserve");
        if (r < 0)
                goto fail;
        r = cuda_check(b, cu->cuMemMap(m->va, size, 0, h, 0), "cuMemMap");
        if (r < 0) {
                cu->cuMemAddressFree(m->va, size);
                m->va = 0;
                goto fail;
        }
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = d->dev;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        r = cuda_check(b, cu->cuMemSetAccess(m->va, size, &access, 1),
                       "cuMemSetAccess");
        if (r < 0)
                goto fail;
        t3 = cuda_now_us();
        r = cuda_fill_zero(b, d, m->va, size);
        if (r < 0)
                goto fail;
        log_debug("cuda: created %llu KiB on device %u: cuMemCreate %.0f, "
                  "export %.0f, map+access %.0f, zero %.0f us",
                  (unsigned long long)(size >> 10), device, t1 - t0, t2 - t1,
                  t3 - t2, cuda_now_us() - t3);
        *ret_mem = m;
        return 0;
fail:
        cuda_mem_free(b, m);
        return r;
}

/* Give the reserve's chunks back to the driver (on OOM, at teardown). */
static unsigned cuda_reserve_drain(cuda_backend *b, cuda_device *d)
{
        unsigned n = d->n_reserve;

        while (d->reserve) {
                cuda_mem *m = d->reserve;

                d->reserve = m->next;
                cuda_mem_free(b, m);
        }
        d->n_reserve = 0;
        return n;
}

static int cuda_reserve_fill(cuda_backend *b, cuda_device *d, unsigned device,
                             unsigned max)
{
        unsigned made = 0;
        cuda_mem *m;

        while (d->n_reserve < b->reserve_target && made < max) {
                if (cuda_mem_new(b, d, device, GMD_TIER_VRAM, d->granularity,
                                 &m) < 0)
                        break;   /* logged; try again on the next call */
                m->next = d->reserve;
                d->reserve = m;
                d->n_reserve++;
                made++;
        }
        return (int)(b->reserve_target - d->n_reserve);
}

static unsigned cuda_ops_device_count(gmd_backend *backend)
{
        return ((cuda_backend *)backend)->n_devices;
}

static int cuda_ops_device_info(gmd_backend *backend, unsigned device,
                                gmd_device_info *ret_info)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);
        size_t free_b = 0, total_b = 0;
        int r;

        if (!d)
                return -EINVAL;
        r = cuda_device_enter(b, d);
        if (r < 0)
                return r;
        r = cuda_check(b, b->cu->cuMemGetInfo(&free_b, &total_b),
                       "cuMemGetInfo");
        if (r < 0)
                return r;
        memset(ret_info, 0, sizeof(*ret_info));
        snprintf(ret_info->name, sizeof(ret_info->name), "%s", d->name);
        ret_info->total = d->total;
        ret_info->free = free_b;
        ret_info->granularity = d->granularity;
        ret_info->reserved = (uint64_t)(d->n_reserve + (d->anchor != NULL)) *
                             d->granularity;
        return 0;
}

static int cuda_ops_mem_create(gmd_backend *backend, gmd_tier tier,
                               unsigned device, uint64_t size,
                               gmd_mem **ret_mem)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);
        uint64_t gran;
        cuda_mem *m;
        int r;

        if (!d || size == 0)
                return -EINVAL;
        gran = tier == GMD_TIER_HOST ? d->host_granularity : d->granularity;
        if (gran == 0)
                return -EOPNOTSUPP;   /* no HOST_NUMA VMM on this machine */
        if (size % gran)
                return -EINVAL;

        if (tier == GMD_TIER_VRAM && size == d->granularity && d->reserve) {
                m = d->reserve;        /* the fast path: a reserve hit */
                d->reserve = m->next;
                d->n_reserve--;
                m->next = NULL;
                *ret_mem = &m->mem;
                return 0;
        }
        r = cuda_device_enter(b, d);
        if (r < 0)
                return r;
        r = cuda_mem_new(b, d, device, tier, size, &m);
        if (r == -ENOMEM && tier == GMD_TIER_VRAM &&
            cuda_reserve_drain(b, d) > 0) {
                log_info("cuda: device %u: reserve released to make room",
                         device);
                r = cuda_mem_new(b, d, device, tier, size, &m);
        }
        if (r < 0)
                return r;
        *ret_mem = &m->mem;
        return 0;
}

static void cuda_ops_mem_destroy(gmd_backend *backend, gmd_mem *mem)
{
        cuda_backend *b = (cuda_backend *)backend;
        double t0 = cuda_now_us();
        cuda_mem *m;

        if (!mem)
                return;
        m = (cuda_mem *)((char *)mem - offsetof(cuda_mem, mem));
        if (mem->device < b->n_devices)
                (void)cuda_device_enter(b, &b->devices[mem->device]);
        cuda_mem_free(b, m);
        log_debug("cuda: destroyed an allocation in %.0f us",
                  cuda_now_us() - t0);
}

static int cuda_ops_mem_zero(gmd_backend *backend, gmd_mem *mem)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_mem *m = (cuda_mem *)((char *)mem - offsetof(cuda_mem, mem));
        cuda_device *d = cuda_device_get(b, mem->device);
        int r;

        if (!d)
                return -EINVAL;
        r = cuda_device_enter(b, d);
        if (r < 0)
                return r;
        return cuda_fill_zero(b, d, m->va, mem->size);
}

static int cuda_ops_mem_create_ipc(gmd_backend *backend, unsigned device,
                                   uint64_t size, gmd_mem **ret_mem)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);
        CUipcMemHandle handle;
        cuda_mem *m;
        int r;

        if (!d || size == 0 || size % (2u << 20))
                return -EINVAL;
        r = cuda_device_enter(b, d);
        if (r < 0)
                return r;
        m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        m->ipc = true;
        m->mem.fd = -1;
        m->mem.size = size;
        m->mem.tier = GMD_TIER_VRAM;
        m->mem.device = device;
        r = cuda_check(b, b->cu->cuMemAlloc(&m->va, size), "cuMemAlloc");
        if (r == -ENOMEM && cuda_reserve_drain(b, d) > 0)
                r = cuda_check(b, b->cu->cuMemAlloc(&m->va, size),
                               "cuMemAlloc");
        if (r < 0)
                goto fail;
        m->mem.handle = m->va;
        r = cuda_fill_zero(b, d, m->va, size);
        if (r < 0)
                goto fail;
        r = cuda_check(b, b->cu->cuIpcGetMemHandle(&handle, m->va),
                       "cuIpcGetMemHandle");
        if (r < 0)
                goto fail;
        memcpy(m->mem.ipc_handle, handle.reserved, GMD_IPC_HANDLE_SIZE);
        *ret_mem = &m->mem;
        return 0;
fail:
        cuda_mem_free(b, m);
        return r;
}

static int cuda_ops_maintain(gmd_backend *backend)
{
        cuda_backend *b = (cuda_backend *)backend;
        int want = 0;
        unsigned i;

        for (i = 0; i < b->n_devices; i++) {
                cuda_device *d = &b->devices[i];

                if (d->n_reserve >= b->reserve_target ||
                    cuda_device_enter(b, d) < 0)
                        continue;
                want += cuda_reserve_fill(b, d, i, CUDA_MAINTAIN_BATCH);
        }
        return want;
}

static void cuda_ops_destroy(gmd_backend *backend)
{
        cuda_backend *b = (cuda_backend *)backend;
        unsigned i;

        if (!b)
                return;
        cuda_events_clear(b);
        for (i = 0; i < b->n_devices; i++) {
                cuda_device *d = &b->devices[i];

                if (!d->ctx)
                        continue;
                (void)cuda_device_enter(b, d);
                cuda_reserve_drain(b, d);
                cuda_mem_free(b, d->anchor);
                if (d->stream)
                        b->cu->cuStreamDestroy(d->stream);
                b->cu->cuDevicePrimaryCtxRelease(d->dev);
        }
        b->cu->cuCtxSetCurrent(NULL);
        free(b);
}

static const gmd_backend_ops cuda_ops = {
        .name = "cuda",
        .shares_device = true,
        .device_count = cuda_ops_device_count,
        .device_info = cuda_ops_device_info,
        .mem_create = cuda_ops_mem_create,
        .mem_destroy = cuda_ops_mem_destroy,
        .mem_zero = cuda_ops_mem_zero,
        .destroy = cuda_ops_destroy,
        .maintain = cuda_ops_maintain,
        .mem_create_ipc = cuda_ops_mem_create_ipc,
        .event_create = cuda_event_create,
        .event_open = cuda_event_open,
        .event_record = cuda_event_record,
        .event_wait = cuda_event_wait,
        .event_unref = cuda_event_unref,
};

/* Set up one device: context, stream, granularities, the reserve. */
static int cuda_device_open(cuda_backend *b, cuda_device *d, unsigned index)
{
        const gmd_cuda_driver *cu = b->cu;
        CUmemAllocationProp prop = { 0 };
        size_t gran = 0;
        int vmm = 0, posix = 0, host = 0, r;

        r = cuda_check(b, cu->cuDeviceGet(&d->dev, (int)index), "cuDeviceGet");
        if (r < 0)
                return r;
        cu->cuDeviceGetName(d->name, sizeof(d->name), d->dev);
        cu->cuDeviceGetAttribute(&vmm,
                CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d->dev);
        cu->cuDeviceGetAttribute(&posix,
                CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                d->dev);
        if (!vmm || !posix) {
                log_error("cuda: device %u (%s) lacks VMM with POSIX fd "
                          "handles", index, d->name);
                return -ENODEV;
        }
        r = cuda_check(b, cu->cuDeviceTotalMem(&gran, d->dev),
                       "cuDeviceTotalMem");
        if (r < 0)
                return r;
        d->total = gran;
        r = cuda_check(b, cu->cuDevicePrimaryCtxRetain(&d->ctx, d->dev),
                       "cuDevicePrimaryCtxRetain");
        if (r < 0)
                return r;
        r = cuda_device_enter(b, d);
        if (r < 0)
                return r;
        r = cuda_check(b, cu->cuStreamCreate(&d->stream,
                                             CU_STREAM_NON_BLOCKING),
                       "cuStreamCreate");
        if (r < 0)
                return r;

        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = d->dev;
        r = cuda_check(b, cu->cuMemGetAllocationGranularity(&gran, &prop,
                                        CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                       "cuMemGetAllocationGranularity");
        if (r < 0)
                return r;
        d->granularity = gran;

        cu->cuDeviceGetAttribute(&host,
                CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                d->dev);
        d->host_numa_id = 0;
        if (host) {
                int numa = -1;

                cu->cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID,
                                         d->dev);
                d->host_numa_id = numa < 0 ? 0 : numa;
                prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
                prop.location.id = d->host_numa_id;
                if (cu->cuMemGetAllocationGranularity(&gran, &prop,
                                CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS)
                        d->host_granularity = gran;
        }
        r = cuda_mem_new(b, d, index, GMD_TIER_VRAM, d->granularity,
                         &d->anchor);
        if (r < 0)
                return r;
        cuda_reserve_fill(b, d, index, b->reserve_target);
        log_info("cuda: device %u: %s, %llu MiB, granularity %llu KiB, "
                 "host tier %s, reserve %u chunks", index, d->name,
                 (unsigned long long)(d->total >> 20),
                 (unsigned long long)(d->granularity >> 10),
                 d->host_granularity ? "yes" : "no", d->n_reserve);
        return 0;
}

int backend_cuda_open(const gmd_config *config, gmd_backend **ret_backend)
{
        const gmd_cuda_driver *cu;
        const char *reason;
        cuda_backend *b;
        unsigned i;
        int n, r;

        r = cuda_driver_load(&cu, &reason);
        if (r < 0) {
                log_notice("cuda: %s", reason);
                return -ENODEV;
        }
        n = cuda_driver_device_count(cu);
        if (n <= 0) {
                const char *vis = getenv("CUDA_VISIBLE_DEVICES");

                log_notice("cuda: no CUDA device visible%s%s%s",
                           vis ? " (CUDA_VISIBLE_DEVICES=" : "",
                           vis ? vis : "", vis ? ")" : "");
                return -ENODEV;
        }
        b = calloc(1, sizeof(*b) + (size_t)n * sizeof(cuda_device));
        if (!b)
                return -ENOMEM;
        b->base.ops = &cuda_ops;
        b->cu = cu;
        b->reserve_target = CUDA_RESERVE_CHUNKS;
        /* Until the config has a key for it: the benchmark measures misses
         * with GPU_MEMD_CUDA_RESERVE=0. */
        if (getenv("GPU_MEMD_CUDA_RESERVE"))
                b->reserve_target = (unsigned)strtoul(
                                getenv("GPU_MEMD_CUDA_RESERVE"), NULL, 10);
        b->n_devices = (unsigned)n;
        for (i = 0; i < b->n_devices; i++) {
                r = cuda_device_open(b, &b->devices[i], i);
                if (r < 0) {
                        cuda_ops_destroy(&b->base);
                        return r == -ENOMEM ? r : -ENODEV;
                }
        }
        *ret_backend = &b->base;
        return 0;
}
