/*
 * shim — the state of libgpumem_torch.so behind its CUDA runtime entry
 * points (cudart.c): one gpu-memd connection per process, the table of
 * buffers handed out as device pointers, the counters, the last error, and
 * the allocation policy (when to wait, and how long).
 */
#ifndef GMD_TORCH_SHIM_H
#define GMD_TORCH_SHIM_H

#include <stddef.h>
#include <stdint.h>

/*
 * A buffer of `size` bytes on CUDA device `cuda_device` of this process
 * (the daemon's device that is that GPU: devmap.h). The first request for a size does
 * not wait: a caller with a cache (PyTorch's allocator) frees it and asks
 * again, and the repeat on the same thread, same size and device, waits
 * until the deadline set when the first one failed — lending what the
 * process holds meanwhile (GMD_ALLOC_YIELD) once `quiesce` returned 0:
 * it must leave no kernel queued on the process's memory (the caller
 * synchronizes its devices). 0 with *ret_ptr set; -ENOMEM and friends
 * with the sentence in shim_last_error().
 */
int shim_alloc(size_t size, unsigned cuda_device, int (*quiesce)(void),
               void **ret_ptr);

/* The CUDA device (this process's ordinal) of a pointer shim_alloc
 * handed out, or -ENOENT. */
int shim_device_of(void *ptr);

/* Give the buffer at `ptr` back to the daemon (the caller synchronized
 * its device). 0 or -ENOENT when it is not ours. */
int shim_free(void *ptr);

/* The daemon's VRAM pool of CUDA device `cuda_device` of this process:
 * free and capacity bytes. 0 or a negative error. */
int shim_pool_info(unsigned cuda_device, size_t *ret_free, size_t *ret_total);

/* Let CUDA device `cuda_device` reach the buffers on `cuda_peer` (both
 * this process's ordinals): gmd_peer_access. 0, or a negative error with
 * the sentence in shim_last_error(). */
int shim_peer_access(unsigned cuda_device, unsigned cuda_peer);
/* Count a cudaFree passed on to libcudart. */
void shim_count_foreign_free(void);

/* Record a failure's sentence (printf-like). */
void shim_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
