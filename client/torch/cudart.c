/*
 * cudart — the CUDA runtime functions libgpumem_torch.so answers in place
 * of libcudart: cudaMalloc, cudaFree, cudaMemGetInfo.
 *
 * PyTorch's caching allocator (libtorch_cuda.so, and the libc10_cuda.so it
 * uses) calls these through libcudart.so's dynamic symbols, so a library
 * that is ahead of libcudart in the process's global symbol scope (preloaded,
 * or dlopened RTLD_GLOBAL before libcudart) receives every call, from every
 * thread. Whatever the shim does not serve goes to the real libcudart,
 * found among the loaded objects (PyTorch loads it before its first
 * allocation), or named by $GPU_MEMD_TORCH_CUDART.
 *
 * The functions keep the runtime's contract where PyTorch relies on it:
 *   - cudaMalloc allocates on the current device and initializes its
 *     context like the real one (cudaFree(NULL) once per device); the
 *     current device is this process's CUDA ordinal, which the shim
 *     turns into the daemon's device that is the same GPU (by UUID,
 *     devmap.h), so a job under CUDA_VISIBLE_DEVICES=1 gets its memory
 *     on the GPU its kernels run on;
 *     cudaMalloc(0) gives NULL and success; out of memory is
 *     cudaErrorMemoryAllocation, which PyTorch turns into
 *     torch.OutOfMemoryError after freeing its cache and asking again.
 *   - cudaFree synchronizes the buffer's device before the memory goes
 *     back, as the real cudaFree does: PyTorch frees cached segments whose
 *     last kernels may still be queued (stream-ordered frees).
 *   - cudaMemGetInfo reports the daemon's pool of the current device
 *     (torch.cuda.mem_get_info, the figures of PyTorch's out-of-memory
 *     message).
 *   - cudaDeviceEnablePeerAccess, which PyTorch calls before its first
 *     copy between two GPUs, enables it for cudaMalloc memory (the real
 *     one) and for the daemon's buffers (gmd_peer_access: VMM memory's
 *     access is per mapping, which the real one does not give), so such
 *     copies go directly over NVLink or PCIe peer-to-peer.
 * Error codes are the runtime's numbers, declared here so the shim builds
 * without the CUDA toolkit (the CI tests run it against a fake libcudart).
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_torch.h"
#include "settings.h"
#include "shim.h"

typedef int cuda_error;
#define CUDA_SUCCESS              0
#define CUDA_ERROR_INVALID_VALUE  1
#define CUDA_ERROR_MEMORY_ALLOC   2
#define CUDA_ERROR_NOT_FOUND      500   /* cudaErrorSymbolNotFound-like */
#define CUDA_ERROR_NOT_SUPPORTED  801
#define CUDA_ERROR_PEER_ENABLED   704   /* cudaErrorPeerAccessAlreadyEnabled */
#define MAX_DEVICES               64

typedef struct cudart {
        cuda_error (*get_device)(int *);
        cuda_error (*set_device)(int);
        cuda_error (*device_synchronize)(void);
        cuda_error (*free)(void *);
        cuda_error (*mem_get_info)(size_t *, size_t *);
        cuda_error (*enable_peer_access)(int, unsigned int);   /* or NULL */
} cudart;

static cudart real;
static int real_ok;
static pthread_mutex_t real_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int context_ready[MAX_DEVICES];

static int find_cudart(struct dl_phdr_info *info, size_t size, void *data)
{
        const char *name = info->dlpi_name;
        const char *base = name ? strrchr(name, '/') : NULL;

        base = base ? base + 1 : name;
        if (base && strncmp(base, "libcudart.so", 12) == 0) {
                *(void **)data = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
                return *(void **)data != NULL;
        }
        return 0;
}

static void *cudart_open(void)
{
        const char *path = getenv(GMD_TORCH_CUDART_ENV);
        static const char *const names[] = {
                "libcudart.so.13", "libcudart.so.12", "libcudart.so",
        };
        void *h = NULL;

        if (path && *path)
                return dlopen(path, RTLD_LAZY);
        dl_iterate_phdr(find_cudart, &h);
        for (size_t i = 0; !h && i < sizeof(names) / sizeof(names[0]); i++)
                h = dlopen(names[i], RTLD_LAZY);
        return h;
}

/* The real libcudart's functions; 0, or -ENOENT with the error set. */
static int real_get(void)
{
        void *h;

        if (__atomic_load_n(&real_ok, __ATOMIC_ACQUIRE))
                return 0;
        pthread_mutex_lock(&real_lock);
        if (!real_ok) {
                h = cudart_open();
                if (h) {
                        real.get_device = dlsym(h, "cudaGetDevice");
                        real.set_device = dlsym(h, "cudaSetDevice");
                        real.device_synchronize = dlsym(h, "cudaDeviceSynchronize");
                        real.free = dlsym(h, "cudaFree");
                        real.mem_get_info = dlsym(h, "cudaMemGetInfo");
                        real.enable_peer_access =
                                dlsym(h, "cudaDeviceEnablePeerAccess");
                }
                if (h && real.get_device && real.set_device &&
                    real.device_synchronize && real.free && real.mem_get_info)
                        __atomic_store_n(&real_ok, 1, __ATOMIC_RELEASE);
                else
                        shim_set_error("libgpumem_torch: the CUDA runtime "
                                       "(libcudart.so) is not loaded: %s",
                                       dlerror() ?: "not found");
        }
        pthread_mutex_unlock(&real_lock);
        return real_ok ? 0 : -ENOENT;
}

static int current_device(void)
{
        int dev = 0;

        if (real_get() < 0 || real.get_device(&dev) != CUDA_SUCCESS)
                return -ENODEV;
        return dev;
}

/* Wait for every kernel and copy this process queued on the devices it
 * used (shim_alloc's quiesce: its memory may move while it waits). 0, or
 * -EIO when a device reports an error. */
static int quiesce_devices(void)
{
        int cur = current_device(), r = 0;

        if (cur < 0)
                return cur;
        for (int d = 0; d < MAX_DEVICES; d++) {
                if (!context_ready[d])
                        continue;
                if ((d != cur && real.set_device(d) != CUDA_SUCCESS) ||
                    real.device_synchronize() != CUDA_SUCCESS)
                        r = -EIO;
        }
        real.set_device(cur);
        return r;
}

GMD_TORCH_EXPORT cuda_error cudaMalloc(void **dev_ptr, size_t size)
{
        int dev;

        if (!dev_ptr)
                return CUDA_ERROR_INVALID_VALUE;
        if (size == 0) {
                *dev_ptr = NULL;
                return CUDA_SUCCESS;
        }
        dev = current_device();
        if (dev < 0)
                return CUDA_ERROR_MEMORY_ALLOC;
        /* The real cudaMalloc makes the device's primary context current;
         * kernels on our memory need it too. */
        if (dev < MAX_DEVICES && !context_ready[dev]) {
                if (real.free(NULL) == CUDA_SUCCESS)
                        context_ready[dev] = 1;
        }
        if (shim_alloc(size, (unsigned)dev, quiesce_devices, dev_ptr) < 0)
                return CUDA_ERROR_MEMORY_ALLOC;
        return CUDA_SUCCESS;
}

GMD_TORCH_EXPORT cuda_error cudaFree(void *dev_ptr)
{
        cuda_error e;
        int dev, cur;

        dev = shim_device_of(dev_ptr);
        if (dev < 0) {
                if (real_get() < 0)
                        return dev_ptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
                if (dev_ptr)
                        shim_count_foreign_free();
                return real.free(dev_ptr);
        }
        /* Stream-ordered: wait for the kernels queued on this memory. */
        cur = current_device();
        if (cur < 0)
                return CUDA_ERROR_INVALID_VALUE;
        if (cur != dev && real.set_device(dev) != CUDA_SUCCESS)
                return CUDA_ERROR_INVALID_VALUE;
        e = real.device_synchronize();
        if (cur != dev)
                real.set_device(cur);
        if (e != CUDA_SUCCESS)
                return e;
        return shim_free(dev_ptr) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GMD_TORCH_EXPORT cuda_error cudaMemGetInfo(size_t *ret_free, size_t *ret_total)
{
        size_t f, t;
        int dev = current_device();

        if (dev < 0)
                return CUDA_ERROR_INVALID_VALUE;
        if (shim_pool_info((unsigned)dev, &f, &t) == 0) {
                if (ret_free)
                        *ret_free = f;
                if (ret_total)
                        *ret_total = t;
                return CUDA_SUCCESS;
        }
        return real.mem_get_info(ret_free, ret_total);
}

GMD_TORCH_EXPORT cuda_error cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
        cuda_error e;
        int dev;

        if (real_get() < 0 || !real.enable_peer_access)
                return CUDA_ERROR_NOT_SUPPORTED;
        e = real.enable_peer_access(peer, flags);
        /* Enabled before (or now) for cudaMalloc memory: for ours too. A
         * failure here is the shim's error, not the call's: the buffers
         * still work, their copies between GPUs go the slower way. */
        dev = current_device();
        if ((e == CUDA_SUCCESS || e == CUDA_ERROR_PEER_ENABLED) && dev >= 0 &&
            peer >= 0)
                (void)shim_peer_access((unsigned)dev, (unsigned)peer);
        return e;
}
