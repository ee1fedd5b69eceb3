/*
 * diag_preload — profile_llama.py's stand-in for libgpumem_torch.so, to tell
 * the costs of being preloaded, of VMM memory and of the daemon apart.
 *
 *   DIAG_MODE=pass  cudaMalloc/cudaFree forwarded to libcudart: the cost of
 *                   a preloaded library interposing them, nothing else;
 *   DIAG_MODE=vmm   cudaMalloc served with in-process VMM memory
 *                   (cuMemCreate, cuMemAddressReserve, cuMemMap, one
 *                   cuMemSetAccess: how gpu-memd's buffers are mapped, with
 *                   no daemon and no fd import); cudaFree synchronizes, as
 *                   the shim's does.
 * A diagnostic, not a product: a fixed table, no error text.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEGMENTS 65536
#define GRANULE (2u << 20)

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);
typedef int (*void_fn)(void);
typedef int (*getdev_fn)(int *);

typedef struct segment {
        CUdeviceptr va;
        size_t size;
        CUmemGenericAllocationHandle handle;
} segment;

static segment segments[MAX_SEGMENTS];
static int n_segments;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static malloc_fn real_malloc;
static free_fn real_free;
static void_fn real_sync;
static getdev_fn real_get_device;
static int vmm;

static void resolve(void)
{
        const char *mode = getenv("DIAG_MODE");

        real_malloc = (malloc_fn)dlsym(RTLD_NEXT, "cudaMalloc");
        real_free = (free_fn)dlsym(RTLD_NEXT, "cudaFree");
        real_sync = (void_fn)dlsym(RTLD_NEXT, "cudaDeviceSynchronize");
        real_get_device = (getdev_fn)dlsym(RTLD_NEXT, "cudaGetDevice");
        vmm = mode && strcmp(mode, "vmm") == 0;
}

static int vmm_alloc(void **ret_ptr, size_t size)
{
        CUmemAllocationProp prop = { 0 };
        CUmemAccessDesc access = { 0 };
        CUmemGenericAllocationHandle h;
        size_t bytes = (size + GRANULE - 1) / GRANULE * GRANULE;
        CUdeviceptr va;
        int dev = 0;

        real_get_device(&dev);
        real_free(NULL);        /* the primary context, as cudaMalloc makes it */
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        access.location = prop.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        if (cuMemCreate(&h, bytes, &prop, 0) != CUDA_SUCCESS)
                return 2;       /* cudaErrorMemoryAllocation */
        if (cuMemAddressReserve(&va, bytes, GRANULE, 0, 0) != CUDA_SUCCESS ||
            cuMemMap(va, bytes, 0, h, 0) != CUDA_SUCCESS ||
            cuMemSetAccess(va, bytes, &access, 1) != CUDA_SUCCESS)
                return 2;       /* a diagnostic: the leak does not matter */
        pthread_mutex_lock(&lock);
        if (n_segments == MAX_SEGMENTS) {
                pthread_mutex_unlock(&lock);
                return 2;
        }
        segments[n_segments++] = (segment){ va, bytes, h };
        pthread_mutex_unlock(&lock);
        *ret_ptr = (void *)va;
        return 0;
}

int cudaMalloc(void **ret_ptr, size_t size)
{
        pthread_once(&once, resolve);
        if (!vmm || size == 0)
                return real_malloc(ret_ptr, size);
        return vmm_alloc(ret_ptr, size);
}

int cudaFree(void *ptr)
{
        pthread_once(&once, resolve);
        pthread_mutex_lock(&lock);
        for (int i = 0; ptr && i < n_segments; i++) {
                segment s = segments[i];

                if (s.va != (CUdeviceptr)ptr)
                        continue;
                segments[i] = segments[--n_segments];
                pthread_mutex_unlock(&lock);
                real_sync();
                cuMemUnmap(s.va, s.size);
                cuMemAddressFree(s.va, s.size);
                cuMemRelease(s.handle);
                return 0;
        }
        pthread_mutex_unlock(&lock);
        return real_free(ptr);
}
