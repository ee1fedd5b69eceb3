/*
 * gpumem_torch.h — the control functions of libgpumem_torch.so, the shim
 * that puts PyTorch (or any program using the CUDA runtime's cudaMalloc)
 * on gpu-memd. gpumem.torch (client/python/gpumem/torch.py) calls them with
 * ctypes; a C program preloading the shim may too.
 *
 * The shim defines cudaMalloc, cudaFree and cudaMemGetInfo. Loaded ahead of
 * libcudart (LD_PRELOAD, or dlopen RTLD_GLOBAL before libcudart is loaded)
 * it answers those calls for every thread of the process: cudaMalloc takes
 * a buffer of the current device from gpu-memd, cudaFree synchronizes the
 * buffer's device (as the real cudaFree does, so kernels still queued on
 * the memory finish first) and gives the buffer back, cudaMemGetInfo
 * reports the daemon's pool. Pointers it did not hand out go to the real
 * libcudart. PyTorch's caching allocator stays on top: the daemon sees its
 * segments.
 */
#ifndef GPUMEM_TORCH_H
#define GPUMEM_TORCH_H

#include <stddef.h>
#include <stdint.h>

#define GMD_TORCH_EXPORT __attribute__((visibility("default")))

/* The counters of gmd_torch_stats, in order. */
enum {
        GMD_TORCH_ALLOCS = 0,     /* cudaMalloc calls that got a buffer */
        GMD_TORCH_ALLOC_FAILS,    /* cudaMalloc calls refused (out of memory) */
        GMD_TORCH_FREES,          /* cudaFree calls that gave a buffer back */
        GMD_TORCH_BYTES_HELD,     /* bytes of buffers held now */
        GMD_TORCH_SEGMENTS_HELD,  /* buffers held now */
        GMD_TORCH_WAITS,          /* allocations that waited for room and got it */
        GMD_TORCH_WAIT_US,        /* time spent in those waits */
        GMD_TORCH_THREADS,        /* distinct threads that called cudaMalloc */
        GMD_TORCH_FOREIGN_FREES,  /* cudaFree of pointers not ours (to libcudart) */
        GMD_TORCH_MEMINFO,        /* cudaMemGetInfo answered from the daemon */
        GMD_TORCH_N_STATS
};

/*
 * Connect to gpu-memd now ($GPU_MEMD_SOCKET, the name from
 * $GPU_MEMD_TORCH_NAME or the command line) instead of at the first
 * allocation, so a missing daemon is reported at once. 0 or a negative
 * error; gmd_torch_last_error() says why.
 */
GMD_TORCH_EXPORT int gmd_torch_connect(void);

/* The last failure's sentence in this process ("" if none): for an
 * allocation refused, the daemon's own words after "gpu-memd: ". */
GMD_TORCH_EXPORT const char *gmd_torch_last_error(void);

/* Copy up to `n` counters (GMD_TORCH_*) to `ret`; returns how many. */
GMD_TORCH_EXPORT size_t gmd_torch_stats(uint64_t *ret, size_t n);

/* Wait for room at most `timeout_ms` from now on (-1: no deadline),
 * overriding $GPU_MEMD_TORCH_TIMEOUT_MS. 0 or -EINVAL (below -1). */
GMD_TORCH_EXPORT int gmd_torch_set_timeout(int64_t timeout_ms);

/* 1: write nothing to stderr (gpumem.torch puts the sentence into the
 * exception instead). */
GMD_TORCH_EXPORT void gmd_torch_set_quiet(int quiet);

#endif
