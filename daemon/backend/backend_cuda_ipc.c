/*
 * backend_cuda_ipc — legacy CUDA IPC buffers (GMD_ALLOC_LEGACY_IPC, ARCHITECTURE.md
 * decision 1): plain cuMemAlloc memory whose cudaIpcMemHandle the daemon
 * sends in AllocReply.ipc_handle, for programs that want to open a buffer
 * with cudaIpcOpenMemHandle rather than through libgpumem's mapper.
 *
 * Such a buffer has no fd (mem->fd is -1, which is how the daemon tells the
 * two kinds apart when it replies), cannot move between tiers (an importer
 * would get a new address on the next open), and dies with the daemon: the
 * driver frees cuMemAlloc memory with the process that allocated it. Sizes
 * are whole multiples of 2 MiB (CUDA_IPC_ALIGN; the daemon rounds up), so
 * every buffer is its own driver allocation and its handle opens nothing
 * else. It is zeroed before its handle leaves the daemon, as every buffer
 * is. The client closes its mapping (cudaIpcCloseMemHandle) before it sends
 * FREE; the daemon answers the FREE, then mem_destroy lands here.
 */
#include "backend_cuda.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

void cuda_ipc_free(cuda_backend *b, cuda_mem *m)
{
        if (!m)
                return;
        if (m->va) {
                cuda_device *d = cuda_device_get(b, m->mem.device);

                b->cu->cuMemFree(m->va);
                if (d)
                        d->vram_own -= m->mem.size;
        }
        free(m);
}

/* cuMemAlloc, and once more after giving the reserve back when the device
 * is out of memory; only the final outcome is logged. */
static int cuda_ipc_alloc(cuda_backend *b, cuda_device *d, unsigned device,
                          uint64_t size, CUdeviceptr *ret_va)
{
        CUresult res;

        res = b->cu->cuMemAlloc(ret_va, size);
        if (res == CUDA_ERROR_OUT_OF_MEMORY && cuda_reserve_drain(b, d) > 0) {
                log_info("cuda: device %u: reserve released to make room",
                         device);
                res = b->cu->cuMemAlloc(ret_va, size);
        }
        return cuda_check(b, res, "cuMemAlloc");
}

int cuda_ops_mem_create_ipc(gmd_backend *backend, unsigned device,
                            uint64_t size, gmd_mem **ret_mem)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);
        CUipcMemHandle handle;
        cuda_mem *m;
        int r;

        if (!d || size == 0 || size % CUDA_IPC_ALIGN)
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
        r = cuda_ipc_alloc(b, d, device, size, &m->va);
        if (r < 0)
                goto fail;
        d->vram_own += size;
        r = cuda_fill_zero(b, d->stream, m->va, size);
        if (r < 0)
                goto fail;
        r = cuda_check(b, b->cu->cuIpcGetMemHandle(&handle, m->va),
                       "cuIpcGetMemHandle");
        if (r < 0)
                goto fail;
        _Static_assert(sizeof(handle.reserved) == GMD_IPC_HANDLE_SIZE,
                       "CUipcMemHandle is not GMD_IPC_HANDLE_SIZE bytes");
        memcpy(m->mem.ipc_handle, handle.reserved, GMD_IPC_HANDLE_SIZE);
        *ret_mem = &m->mem;
        return 0;
fail:
        cuda_ipc_free(b, m);
        return r;
}
