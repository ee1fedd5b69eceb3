/*
 * backend_cuda_peer — devices that reach each other's VRAM (NVLink, PCIe
 * peer-to-peer), for the core's peer tier (core/peer.h): which pairs can
 * (cuDeviceCanAccessPeer), how fast one copies into the other (timed
 * copies between two VMM allocations, once, at open), and access for
 * another device's copies to an allocation (cuMemSetAccess on the
 * daemon's mapping: VMM memory needs no cuCtxEnablePeerAccess).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "log.h"

#define PEER_PROBE_BYTES (64ull << 20)
#define PEER_PROBE_REPS 3

/* Let `owner`'s and `other`'s copies read and write `m` (on `owner`). */
static int peer_grant(cuda_backend *b, cuda_mem *m, const cuda_device *owner,
                      const cuda_device *other)
{
        CUmemAccessDesc access[2];

        memset(access, 0, sizeof(access));
        access[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access[0].location.id = owner->dev;
        access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        access[1] = access[0];
        access[1].location.id = other->dev;
        return cuda_check(b, b->cu->cuMemSetAccess(m->va, m->mem.size, access, 2),
                          "cuMemSetAccess (peer)");
}

/* Bytes per second of a copy from `from`'s VRAM into `to`'s on a stream
 * of `from`, the best of a few after one to warm up; 0 when it failed. */
static uint64_t peer_probe(cuda_backend *b, unsigned from, unsigned to)
{
        const gmd_cuda_driver *cu = b->cu;
        cuda_device *fd = &b->devices[from], *td = &b->devices[to];
        cuda_mem *src = NULL, *dst = NULL;
        CUstream stream = NULL;
        CUevent e0 = NULL, e1 = NULL;
        float best = 0, ms;
        uint64_t rate = 0;

        if (cuda_device_enter(b, td) < 0 ||
            cuda_mem_make_as(b, td, to, GMD_TIER_VRAM, PEER_PROBE_BYTES,
                             td->stream, false, &dst) < 0)
                goto out;
        if (cuda_device_enter(b, fd) < 0 ||
            cuda_mem_make_as(b, fd, from, GMD_TIER_VRAM, PEER_PROBE_BYTES,
                             fd->stream, false, &src) < 0 ||
            peer_grant(b, dst, td, fd) < 0)
                goto out;
        if (cuda_check(b, cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING),
                       "cuStreamCreate (peer)") < 0 ||
            cuda_check(b, cu->cuEventCreate(&e0, CU_EVENT_DEFAULT),
                       "cuEventCreate (peer)") < 0 ||
            cuda_check(b, cu->cuEventCreate(&e1, CU_EVENT_DEFAULT),
                       "cuEventCreate (peer)") < 0)
                goto out;
        for (int rep = 0; rep <= PEER_PROBE_REPS; rep++) {
                if (cuda_check(b, cu->cuEventRecord(e0, stream), "cuEventRecord") < 0 ||
                    cuda_check(b, cu->cuMemcpyAsync(dst->va, src->va,
                                                    PEER_PROBE_BYTES, stream),
                               "cuMemcpyAsync (peer)") < 0 ||
                    cuda_check(b, cu->cuEventRecord(e1, stream), "cuEventRecord") < 0 ||
                    cuda_check(b, cu->cuEventSynchronize(e1),
                               "cuEventSynchronize") < 0 ||
                    cuda_check(b, cu->cuEventElapsedTime(&ms, e0, e1),
                               "cuEventElapsedTime") < 0)
                        goto out;
                if (rep > 0 && ms > 0 && (best == 0 || ms < best))
                        best = ms;
        }
        if (best > 0)
                rate = (uint64_t)((double)PEER_PROBE_BYTES * 1000.0 / best);
out:
        (void)cuda_device_enter(b, fd);
        if (e0)
                cu->cuEventDestroy(e0);
        if (e1)
                cu->cuEventDestroy(e1);
        if (stream)
                cu->cuStreamDestroy(stream);
        if (src)
                cuda_ops_mem_destroy(&b->base, &src->mem);
        if (dst)
                cuda_ops_mem_destroy(&b->base, &dst->mem);
        return rate;
}

int cuda_peer_open(cuda_backend *b, bool probe)
{
        unsigned n = b->n_devices;

        b->peer_rates = calloc((size_t)n * n, sizeof(*b->peer_rates));
        if (!b->peer_rates)
                return -ENOMEM;
        if (!probe || n < 2)
                return 0;
        for (unsigned from = 0; from < n; from++) {
                for (unsigned to = 0; to < n; to++) {
                        int can = 0;

                        if (from == to ||
                            b->cu->cuDeviceCanAccessPeer(&can, b->devices[from].dev,
                                                         b->devices[to].dev) !=
                            CUDA_SUCCESS || !can)
                                continue;
                        b->peer_rates[from * n + to] = peer_probe(b, from, to);
                        log_info("cuda: device %u copies into device %u's VRAM "
                                 "at %.1f GB/s", from, to,
                                 (double)b->peer_rates[from * n + to] / 1e9);
                }
        }
        return 0;
}

void cuda_peer_close(cuda_backend *b)
{
        free(b->peer_rates);
        b->peer_rates = NULL;
}

uint64_t cuda_ops_peer_rate(gmd_backend *backend, unsigned from, unsigned to)
{
        cuda_backend *b = (cuda_backend *)backend;

        if (!b->peer_rates || from >= b->n_devices || to >= b->n_devices)
                return 0;
        return b->peer_rates[from * b->n_devices + to];
}

int cuda_ops_mem_grant(gmd_backend *backend, gmd_mem *mem, unsigned device)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *owner = cuda_device_get(b, mem->device);
        cuda_device *other = cuda_device_get(b, device);
        cuda_mem *m = cuda_mem_of(mem);

        if (!owner || !other || mem->tier != GMD_TIER_VRAM || !m->va || m->ipc)
                return -EINVAL;
        if (owner == other)
                return 0;
        if (!cuda_ops_peer_rate(backend, device, mem->device) &&
            !cuda_ops_peer_rate(backend, mem->device, device))
                return -EOPNOTSUPP;
        return peer_grant(b, m, owner, other);
}
