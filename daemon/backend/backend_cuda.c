/*
 * backend_cuda — GPU memory for gpu-memd: the driver, the devices and the
 * ops table. What the buffers are made of lives in the files beside this one
 * (backend_cuda.h lists them); this one opens and closes the backend.
 *
 * The driver is loaded at run time (common/cuda_driver.c), so the daemon
 * starts on machines without one and "auto" falls back to sim. Every
 * visible device (the driver applies CUDA_VISIBLE_DEVICES) must offer VMM
 * with POSIX fd handles, or the backend does not open: a daemon that serves
 * some devices and silently not others would be harder to reason about than
 * one that says which device is lacking. Each device gets its primary
 * context, retained for the backend's life (it is the one the daemon's
 * allocations live in), one non-blocking stream for zeroing and events, and
 * two for copies, one per direction (backend_cuda_copy.c).
 */
#include "backend_cuda.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "gpu_uuid.h"
#include "log.h"

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

cuda_device *cuda_device_get(cuda_backend *b, unsigned device)
{
        return device < b->n_devices ? &b->devices[device] : NULL;
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
        memcpy(ret_info->uuid, d->uuid, sizeof(ret_info->uuid));
        memcpy(ret_info->pci_bus_id, d->pci_bus_id,
               sizeof(ret_info->pci_bus_id));
        ret_info->total = d->total;
        ret_info->free = free_b;
        ret_info->granularity = d->granularity;
        ret_info->reserved = cuda_reserve_bytes(d);
        ret_info->own = d->vram_own;
        ret_info->slack = 64ull << 20;
        return 0;
}

static void cuda_ops_destroy(gmd_backend *backend)
{
        cuda_backend *b = (cuda_backend *)backend;
        unsigned i;

        if (!b)
                return;
        if (b->copy_lock_ready) {
                cuda_ops_set_wake(backend, NULL, NULL);
                cuda_watch_stop(b);
                cuda_link_stop(b);
        }
        cuda_events_clear(b);
        for (i = 0; i < b->n_devices; i++) {
                cuda_device *d = &b->devices[i];

                if (!d->ctx)
                        continue;
                (void)cuda_device_enter(b, d);
                cuda_copy_close(b, d);
        }
        /* After the copies: they may still read host allocations. */
        cuda_host_close(b);
        cuda_copy_list_free(b, b->zombies);
        b->zombies = NULL;
        for (i = 0; i < b->n_devices; i++) {
                cuda_device *d = &b->devices[i];

                if (!d->ctx)
                        continue;
                (void)cuda_device_enter(b, d);
                cuda_reserve_close(b, d);
                if (d->stream)
                        b->cu->cuStreamDestroy(d->stream);
                b->cu->cuDevicePrimaryCtxRelease(d->dev);
        }
        b->cu->cuCtxSetCurrent(NULL);
        cuda_peer_close(b);
        if (b->copy_lock_ready)
                pthread_mutex_destroy(&b->copy_lock);
        free(b);
}

static const gmd_backend_ops cuda_ops = {
        .name = "cuda",
        .shares_device = true,
        .processes_count_imports = false,   /* backend.h: measured */
        .device_count = cuda_ops_device_count,
        .device_info = cuda_ops_device_info,
        .device_processes = cuda_ops_device_processes,
        .mem_create = cuda_ops_mem_create,
        .mem_create_filled = cuda_ops_mem_create_filled,
        .mem_destroy = cuda_ops_mem_destroy,
        .mem_zero = cuda_ops_mem_zero,
        .destroy = cuda_ops_destroy,
        .set_wake = cuda_ops_set_wake,
        .copy_submit = cuda_ops_copy_submit,
        .copy_submit_urgent = cuda_ops_copy_submit_urgent,
        .copy_preempt_step = cuda_ops_copy_preempt_step,
        .copy_reap = cuda_ops_copy_reap,
        .maintain = cuda_ops_maintain,
        .mem_create_ipc = cuda_ops_mem_create_ipc,
        .mem_create_private = cuda_ops_mem_create_private,
        .arena_info = cuda_ops_arena_info,
        .arena_grow = cuda_ops_arena_grow,
        .arena_pieces = cuda_ops_arena_pieces,
        .arena_adopt = cuda_ops_arena_adopt,
        .mem_span = cuda_ops_mem_span,
        .mem_adopt_private = cuda_ops_mem_adopt_private,
        .mem_adopt_fd = cuda_ops_mem_adopt_fd,
        .link_shared_with = cuda_ops_link_shared_with,
        .link_info = cuda_ops_link_info,
        .host_link_info = cuda_ops_host_link_info,
        .peer_rate = cuda_ops_peer_rate,
        .mem_grant = cuda_ops_mem_grant,
        .event_create = cuda_event_create,
        .event_open = cuda_event_open,
        .event_record = cuda_event_record,
        .event_wait = cuda_event_wait,
        .event_unref = cuda_event_unref,
};

/* The minimum granularity of exportable VMM memory at a location. */
static CUresult cuda_granularity(cuda_backend *b, CUmemLocationType type,
                                 int id, uint64_t *ret_gran)
{
        CUmemAllocationProp prop = { 0 };
        size_t gran = 0;
        CUresult res;

        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type = type;
        prop.location.id = id;
        res = b->cu->cuMemGetAllocationGranularity(&gran, &prop,
                                        CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (res == CUDA_SUCCESS)
                *ret_gran = gran;
        return res;
}

/* The device's UUID and PCI bus id, by which clients find it whatever
 * ordinal their CUDA_VISIBLE_DEVICES gives it. Left "" when the driver
 * does not say: clients then cannot translate (gmd_device_from_cuda). */
static void cuda_device_identify(const gmd_cuda_driver *cu, cuda_device *d)
{
        CUuuid id;

        d->uuid[0] = '\0';
        d->pci_bus_id[0] = '\0';
        if (cu->cuDeviceGetUuid(&id, d->dev) == CUDA_SUCCESS)
                gpu_uuid_format((const unsigned char *)id.bytes, d->uuid,
                                sizeof(d->uuid));
        if (cu->cuDeviceGetPCIBusId(d->pci_bus_id, (int)sizeof(d->pci_bus_id),
                                    d->dev) != CUDA_SUCCESS)
                d->pci_bus_id[0] = '\0';
}

/* Set up one device: context, stream, granularities, the reserve. */
static int cuda_device_open(cuda_backend *b, cuda_device *d, unsigned index)
{
        const gmd_cuda_driver *cu = b->cu;
        size_t total = 0;
        int vmm = 0, posix = 0, host = 0, r;
        uint64_t gran = 0;

        r = cuda_check(b, cu->cuDeviceGet(&d->dev, (int)index), "cuDeviceGet");
        if (r < 0)
                return r;
        cu->cuDeviceGetName(d->name, sizeof(d->name), d->dev);
        cuda_device_identify(cu, d);
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
        r = cuda_check(b, cu->cuDeviceTotalMem(&total, d->dev),
                       "cuDeviceTotalMem");
        if (r < 0)
                return r;
        d->total = total;
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
        r = cuda_copy_open(b, d);
        if (r < 0)
                return r;

        r = cuda_check(b, cuda_granularity(b, CU_MEM_LOCATION_TYPE_DEVICE,
                                           d->dev, &gran),
                       "cuMemGetAllocationGranularity");
        if (r < 0)
                return r;
        d->granularity = gran;

        /* The HOST tier is optional: without HOST_NUMA VMM the daemon
         * still serves VRAM, and mem_create says -EOPNOTSUPP for HOST. */
        cu->cuDeviceGetAttribute(&host,
                CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                d->dev);
        d->host_numa_id = 0;
        if (host) {
                int numa = -1;

                cu->cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID,
                                         d->dev);
                d->host_numa_id = numa < 0 ? 0 : numa;
                if (cuda_granularity(b, CU_MEM_LOCATION_TYPE_HOST_NUMA,
                                     d->host_numa_id, &gran) == CUDA_SUCCESS)
                        d->host_granularity = gran;
        }
        r = cuda_reserve_open(b, d, index);
        if (r < 0)
                return r;
        log_info("cuda: device %u: %s %s at %s, %llu MiB, granularity %llu "
                 "KiB, host tier %s (NUMA node %d), reserve %u of %u chunks",
                 index, d->name, d->uuid[0] ? d->uuid : "(no UUID)",
                 d->pci_bus_id[0] ? d->pci_bus_id : "(no PCI bus id)",
                 (unsigned long long)(d->total >> 20),
                 (unsigned long long)(d->granularity >> 10),
                 d->host_granularity ? "yes" : "no", d->host_numa_id,
                 d->n_reserve, b->reserve_target);
        return 0;
}

/* Why the last backend_cuda_open found no usable GPU (backend.h). */
static char unusable_reason[200];

const char *backend_cuda_unusable_reason(void)
{
        return unusable_reason[0] ? unusable_reason : "no usable GPU";
}

int backend_cuda_open(const gmd_config *config, gmd_backend **ret_backend)
{
        return backend_cuda_open_flags(config, 0, ret_backend);
}

int backend_cuda_open_flags(const gmd_config *config, unsigned flags,
                            gmd_backend **ret_backend)
{
        const gmd_cuda_driver *cu;
        const char *reason;
        cuda_backend *b;
        unsigned i;
        int n, r;

        /* No log line here: backend_open says it once, with this reason. */
        r = cuda_driver_load(&cu, &reason);
        if (r < 0) {
                snprintf(unusable_reason, sizeof(unusable_reason), "%s", reason);
                return -ENODEV;
        }
        n = cuda_driver_device_count(cu);
        if (n <= 0) {
                const char *vis = getenv("CUDA_VISIBLE_DEVICES");

                snprintf(unusable_reason, sizeof(unusable_reason),
                         "no CUDA device visible%s%s%s",
                         vis ? " (CUDA_VISIBLE_DEVICES=" : "",
                         vis ? vis : "", vis ? ")" : "");
                return -ENODEV;
        }
        b = calloc(1, sizeof(*b) + (size_t)n * sizeof(cuda_device));
        if (!b)
                return -ENOMEM;
        b->base.ops = &cuda_ops;
        b->cu = cu;
        /* Read once: a reload (SIGHUP) does not resize the reserve. */
        b->reserve_target = config->cuda_reserve_chunks;
        b->preempt_step = config->swap_preempt_step;
        b->free_floor = config->vram_reserve;
        b->n_devices = (unsigned)n;
        pthread_mutex_init(&b->copy_lock, NULL);
        b->copy_lock_ready = true;
        for (i = 0; i < b->n_devices; i++) {
                r = cuda_device_open(b, &b->devices[i], i);
                if (r < 0) {
                        cuda_ops_destroy(&b->base);
                        return r == -ENOMEM ? r : -ENODEV;
                }
        }
        r = cuda_peer_open(b, strcmp(config->peer_tier, "off") != 0);
        if (r < 0) {
                cuda_ops_destroy(&b->base);
                return r;
        }
        r = cuda_host_open(b, config_host_stock_bytes(config),
                           config_host_limit_bytes(config),
                           flags & GMD_BACKEND_ARENA_HELD);
        if (r < 0) {
                cuda_ops_destroy(&b->base);
                return r;
        }
        /* Without it, host functions hear the copies, and no gate may
         * shut: nothing would open one the GPU holds its opener behind. */
        if (cuda_watch_start(b) < 0) {
                pthread_mutex_lock(&b->copy_lock);
                for (i = 0; i < b->n_devices; i++)
                        cuda_gate_retire(&b->devices[i]);
                pthread_mutex_unlock(&b->copy_lock);
        }
        *ret_backend = &b->base;
        return 0;
}
