/*
 * gpu_kernels — the few GPU-side helpers the GPU tests and the benchmark
 * need, compiled with nvcc (gpu_kernels.cu) behind a C interface so the
 * tests themselves stay C. Patterns are a hash of (word index, seed), so a
 * reader can check what another process wrote without the writer sending
 * the data; seed 0 means "all zero".
 */
#ifndef GMD_GPU_KERNELS_H
#define GMD_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when a CUDA device is usable by the runtime; else -1 with `reason`. */
int gpu_probe(char *reason, size_t len);

/* Write the pattern for words [first, first + bytes/4) of `seed` at `ptr`
 * (a device pointer, or host-located VMM mapped for the device), on the
 * legacy default stream, then synchronize. 0 or -1 (reason in
 * gpu_last_error()). */
int gpu_fill(void *ptr, size_t bytes, uint64_t first, uint32_t seed);

/* Count the words that differ from the pattern; -1 on a CUDA error. */
long long gpu_check(const void *ptr, size_t bytes, uint64_t first,
                    uint32_t seed);

/* cudaMalloc + cudaFree of `bytes`, for the benchmark's baseline. */
int gpu_malloc_free(size_t bytes);

/* Make the legacy default stream wait on a CUevent and synchronize. */
int gpu_wait_event(void *event);

/* Fill like gpu_fill, but on a new stream behind ~100 ms of GPU work, and
 * return without waiting: *ret_stream still has the fill to run. */
int gpu_fill_late(void *ptr, size_t bytes, uint32_t seed, void **ret_stream);

/* Fill like gpu_fill, but slowly, on a new stream: `slices` pieces, each
 * behind about `spin_us` microseconds of GPU work, so kernels are still
 * writing the buffer long after this returns (without waiting).
 * *ret_stream still has the fill to run. */
int gpu_fill_slow(void *ptr, size_t bytes, uint32_t seed, unsigned slices,
                  unsigned spin_us, void **ret_stream);

/* 1 while a stream still has work to run, 0 when it is idle, -1 on an
 * error. */
int gpu_stream_busy(void *stream);

/* Wait for a stream from gpu_fill_late or gpu_fill_slow and destroy it. */
int gpu_stream_done(void *stream);

/* cudaMemGetInfo on the current device (creates this process's context). */
int gpu_mem_info(uint64_t *ret_free, uint64_t *ret_total);

/* cudaSetDevice: kernels of this thread run on `device` from now on. */
int gpu_set_device(int device);

/* The device a pointer belongs to, or -1. */
int gpu_pointer_device(const void *ptr);

/* The last CUDA runtime error of this thread, as text. */
const char *gpu_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
