/*
 * backend_cuda_mem — the cuda backend's buffers: CUDA VMM physical
 * allocations (cuMemCreate, handle type POSIX fd), each exported to an fd
 * once and kept for its life, and mapped into the daemon's own address
 * space so the daemon can zero it (and, with the swap engine, copy it).
 *
 * Exporting is the costly step (75..590 µs, ARCHITECTURE.md), which is why a
 * granule-sized request is served from the reserve (backend_cuda_reserve.c)
 * and only other sizes, or an empty reserve, reach cuda_mem_new on the
 * request path. Freed allocations are destroyed, never recycled: an fd once
 * sent to a client is a capability the client may keep (a dup, an import),
 * so handing the memory to another client would let the first one read it.
 * Every allocation is zeroed once, when created, before anyone receives it.
 *
 * Restart recovery adopts a previous run's allocation from an fd that
 * was kept (mem_adopt_fd): imported instead of created, then mapped and
 * counted as a created one, so everything after treats it alike.
 *
 * mem_destroy serves legacy IPC buffers too (backend_cuda_ipc.c frees
 * those): the daemon holds only a gmd_mem and does not know which kind.
 *
 * HOST-tier allocations (location HOST_NUMA, the GPU's NUMA node) are made
 * the same way and mapped into the daemon with access for the device, so
 * the copy engine (backend_cuda_copy.c) copies between two device
 * addresses and the GPU's copy engines move the bytes. Creating one pins
 * its pages (235 ms per GiB, ARCHITECTURE.md), so a swap-out's host copy comes
 * from the host arena pinned ahead of time (backend_cuda_host.c), and only
 * host memory a client maps (SPILLABLE buffers) is created here; the host
 * worker releases it, off the loop thread.
 */
#include "backend_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "log.h"
#include "timeutil.h"

int cuda_fill_zero(cuda_backend *b, CUstream stream, CUdeviceptr va,
                   uint64_t size)
{
        int r;

        r = cuda_check(b, b->cu->cuMemsetD8Async(va, 0, size, stream),
                       "cuMemsetD8Async");
        if (r < 0)
                return r;
        return cuda_check(b, b->cu->cuStreamSynchronize(stream),
                          "cuStreamSynchronize");
}

void cuda_mem_free(cuda_backend *b, cuda_mem *m)
{
        const gmd_cuda_driver *cu = b->cu;

        if (!m)
                return;
        if (m->va) {
                cu->cuMemUnmap(m->va, m->mem.size);
                cu->cuMemAddressFree(m->va, m->mem.size);
        }
        if (m->mem.handle) {
                cuda_device *d = cuda_device_get(b, m->mem.device);

                cu->cuMemRelease(m->mem.handle);
                if (d && m->mem.tier == GMD_TIER_VRAM)
                        d->vram_own -= m->mem.size;
        }
        if (m->mem.fd >= 0)
                close(m->mem.fd);
        free(m);
}

/* Reserve a VA range in the daemon, map the allocation there and let the
 * device read and write it. On failure nothing is left mapped. */
static int cuda_mem_map(cuda_backend *b, cuda_device *d, cuda_mem *m)
{
        const gmd_cuda_driver *cu = b->cu;
        CUmemAccessDesc access = { 0 };
        uint64_t size = m->mem.size, align = d->granularity;
        int r;

        if (d->host_granularity > align)
                align = d->host_granularity;
        r = cuda_check(b, cu->cuMemAddressReserve(&m->va, size, align, 0, 0),
                       "cuMemAddressReserve");
        if (r < 0)
                return r;
        r = cuda_check(b, cu->cuMemMap(m->va, size, 0, m->mem.handle, 0),
                       "cuMemMap");
        if (r < 0)
                goto fail_va;
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = d->dev;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        r = cuda_check(b, cu->cuMemSetAccess(m->va, size, &access, 1),
                       "cuMemSetAccess");
        if (r < 0)
                goto fail_map;
        return 0;
fail_map:
        cu->cuMemUnmap(m->va, size);
fail_va:
        cu->cuMemAddressFree(m->va, size);
        m->va = 0;
        return r;
}

int cuda_mem_new(cuda_backend *b, cuda_device *d, unsigned device,
                 gmd_tier tier, uint64_t size, cuda_mem **ret_mem)
{
        return cuda_mem_make(b, d, device, tier, size, d->stream, ret_mem);
}

int cuda_mem_make(cuda_backend *b, cuda_device *d, unsigned device,
                  gmd_tier tier, uint64_t size, CUstream stream,
                  cuda_mem **ret_mem)
{
        return cuda_mem_make_as(b, d, device, tier, size, stream, true, ret_mem);
}

int cuda_mem_make_as(cuda_backend *b, cuda_device *d, unsigned device,
                     gmd_tier tier, uint64_t size, CUstream stream, bool zero,
                     cuda_mem **ret_mem)
{
        const gmd_cuda_driver *cu = b->cu;
        CUmemAllocationProp prop = { 0 };
        CUmemGenericAllocationHandle h = 0;
        uint64_t t0 = now_us(), t1, t2, t3;
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
        if (tier == GMD_TIER_VRAM)
                d->vram_own += size;
        t1 = now_us();

        r = cuda_check(b, cu->cuMemExportToShareableHandle(&fd, h,
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                       "cuMemExportToShareableHandle");
        if (r < 0)
                goto fail;
        m->mem.fd = fd;
        /* The driver's fd has no CLOEXEC; the daemon's fds all do. */
        (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
        t2 = now_us();

        r = cuda_mem_map(b, d, m);
        if (r < 0)
                goto fail;
        t3 = now_us();
        r = zero ? cuda_fill_zero(b, stream, m->va, size) : 0;
        if (r < 0)
                goto fail;
        log_debug("cuda: created %llu KiB %s on device %u: cuMemCreate %llu, "
                  "export %llu, map+access %llu, zero %llu us",
                  (unsigned long long)(size >> 10),
                  tier == GMD_TIER_HOST ? "host" : "VRAM", device,
                  (unsigned long long)(t1 - t0), (unsigned long long)(t2 - t1),
                  (unsigned long long)(t3 - t2),
                  (unsigned long long)(now_us() - t3));
        *ret_mem = m;
        return 0;
fail:
        cuda_mem_free(b, m);
        return r;
}

static int mem_create(gmd_backend *backend, gmd_tier tier, unsigned device,
                      uint64_t size, bool filled, gmd_mem **ret_mem)
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

        if (tier == GMD_TIER_HOST) {
                r = cuda_host_create(b, d, device, size, filled, &m);
                if (r < 0)
                        return r;
                *ret_mem = &m->mem;
                return 0;
        }
        if (size == d->granularity) {
                m = cuda_reserve_take(d);     /* the fast path */
                if (m) {
                        *ret_mem = &m->mem;
                        return 0;
                }
        }
        r = cuda_device_enter(b, d);
        if (r < 0)
                return r;
        /* A copy's destination is overwritten whole: no zeroing. */
        r = cuda_mem_make_as(b, d, device, tier, size, d->stream, !filled, &m);
        if (r == -ENOMEM && cuda_reserve_drain(b, d) > 0) {
                log_info("cuda: device %u: reserve released to make room",
                         device);
                r = cuda_mem_make_as(b, d, device, tier, size, d->stream, !filled, &m);
        }
        if (r < 0)
                return r;
        *ret_mem = &m->mem;
        return 0;
}

int cuda_ops_mem_create(gmd_backend *backend, gmd_tier tier, unsigned device,
                        uint64_t size, gmd_mem **ret_mem)
{
        return mem_create(backend, tier, device, size, false, ret_mem);
}

int cuda_ops_mem_create_filled(gmd_backend *backend, gmd_tier tier,
                               unsigned device, uint64_t size, gmd_mem **ret_mem)
{
        return mem_create(backend, tier, device, size, true, ret_mem);
}

void cuda_ops_mem_destroy(gmd_backend *backend, gmd_mem *mem)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d;
        uint64_t t0 = now_us();
        cuda_mem *m;

        if (!mem)
                return;
        m = cuda_mem_of(mem);
        if (mem->tier == GMD_TIER_HOST && !m->ipc) {
                cuda_host_destroy(b, m);   /* unpinning: on the worker */
                return;
        }
        d = cuda_device_get(b, mem->device);
        if (d)
                (void)cuda_device_enter(b, d);
        if (m->ipc)
                cuda_ipc_free(b, m);
        else
                cuda_mem_free(b, m);
        log_debug("cuda: destroyed an allocation in %llu us",
                  (unsigned long long)(now_us() - t0));
}

int cuda_ops_mem_zero(gmd_backend *backend, gmd_mem *mem)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, mem->device);
        int r;

        if (!d || !cuda_mem_of(mem)->va)
                return -EINVAL;   /* an arena piece: the daemon's alone */
        r = cuda_device_enter(b, d);
        if (r < 0)
                return r;
        return cuda_fill_zero(b, d->stream, cuda_mem_of(mem)->va, mem->size);
}

int cuda_ops_mem_adopt_fd(gmd_backend *backend, gmd_tier tier,
                          unsigned device, uint64_t size, int fd,
                          gmd_mem **ret_mem)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);
        CUmemGenericAllocationHandle h = 0;
        uint64_t gran;
        cuda_mem *m;
        int r;

        if (!d || size == 0 || fd < 0)
                return -EINVAL;
        gran = tier == GMD_TIER_HOST ? d->host_granularity : d->granularity;
        if (gran == 0)
                return -EOPNOTSUPP;   /* no HOST_NUMA VMM on this machine */
        if (size % gran)
                return -EINVAL;
        r = cuda_device_enter(b, d);
        if (r < 0)
                return r;
        m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        m->mem.fd = -1;       /* the caller's until this succeeds */
        m->mem.size = size;
        m->mem.tier = tier;
        m->mem.device = device;
        r = cuda_check(b, b->cu->cuMemImportFromShareableHandle(&h,
                                (void *)(uintptr_t)fd,
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                       "cuMemImportFromShareableHandle");
        if (r < 0) {
                free(m);
                return r;
        }
        /* Counted as a created one: released by cuda_mem_free alike. */
        m->mem.handle = h;
        if (tier == GMD_TIER_VRAM)
                d->vram_own += size;
        r = cuda_mem_map(b, d, m);
        if (r < 0) {
                /* cuMemMap refuses a size past the allocation's end. */
                log_warning("cuda: device %u: cannot map an adopted %s "
                            "allocation of %llu KiB: is its memory smaller?",
                            device, tier == GMD_TIER_HOST ? "host" : "VRAM",
                            (unsigned long long)(size >> 10));
                cuda_mem_free(b, m);
                return r == -ENOMEM ? r : -EINVAL;
        }
        m->mem.fd = fd;
        m->mem.shared = true;  /* a client had it, may still map it */
        *ret_mem = &m->mem;
        return 0;
}
