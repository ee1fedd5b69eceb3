/*
 * gpu_kernels — see gpu_kernels.h. Plain CUDA runtime code; the runtime is
 * linked statically and loads the driver itself, so test programs start
 * (and print their SKIP line) on machines without one.
 */
#include "gpu_kernels.h"

#include <cstdio>
#include <cuda_runtime.h>

static thread_local char last_error[256];

static int fail(cudaError_t err, const char *what)
{
        snprintf(last_error, sizeof(last_error), "%s: %s (%s)", what,
                 cudaGetErrorName(err), cudaGetErrorString(err));
        return -1;
}

__device__ static uint32_t pattern(uint64_t index, uint32_t seed)
{
        uint64_t x = index * 0x9E3779B97F4A7C15ull + seed;

        if (seed == 0)
                return 0;
        x ^= x >> 31;
        x *= 0xBF58476D1CE4E5B9ull;
        x ^= x >> 29;
        return (uint32_t)x | 1u;   /* never 0: zeros are told apart */
}

__global__ static void fill_kernel(uint32_t *p, size_t n, uint64_t first,
                                   uint32_t seed)
{
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
             i += (size_t)gridDim.x * blockDim.x)
                p[i] = pattern(first + i, seed);
}

__device__ static unsigned long long mismatches;

__global__ static void check_kernel(const uint32_t *p, size_t n,
                                    uint64_t first, uint32_t seed)
{
        unsigned long long bad = 0;

        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
             i += (size_t)gridDim.x * blockDim.x)
                bad += p[i] != pattern(first + i, seed);
        if (bad)
                atomicAdd(&mismatches, bad);
}

extern "C" int gpu_probe(char *reason, size_t len)
{
        cudaError_t err;
        int n = 0;

        err = cudaGetDeviceCount(&n);
        if (err != cudaSuccess) {
                snprintf(reason, len, "%s", cudaGetErrorString(err));
                return -1;
        }
        if (n == 0) {
                snprintf(reason, len, "no CUDA device visible");
                return -1;
        }
        return 0;
}

extern "C" int gpu_fill(void *ptr, size_t bytes, uint64_t first, uint32_t seed)
{
        cudaError_t err;

        fill_kernel<<<528, 256>>>((uint32_t *)ptr, bytes / 4, first, seed);
        err = cudaDeviceSynchronize();
        return err == cudaSuccess ? 0 : fail(err, "fill");
}

extern "C" long long gpu_check(const void *ptr, size_t bytes, uint64_t first,
                               uint32_t seed)
{
        unsigned long long zero = 0, bad = 0;
        cudaError_t err;

        err = cudaMemcpyToSymbol(mismatches, &zero, sizeof(zero));
        if (err != cudaSuccess)
                return fail(err, "check: reset");
        check_kernel<<<528, 256>>>((const uint32_t *)ptr, bytes / 4, first,
                                   seed);
        err = cudaMemcpyFromSymbol(&bad, mismatches, sizeof(bad));
        if (err != cudaSuccess)
                return fail(err, "check");
        return (long long)bad;
}

extern "C" int gpu_malloc_free(size_t bytes)
{
        cudaError_t err;
        void *p;

        err = cudaMalloc(&p, bytes);
        if (err != cudaSuccess)
                return fail(err, "cudaMalloc");
        err = cudaFree(p);
        return err == cudaSuccess ? 0 : fail(err, "cudaFree");
}

/* Spin on the GPU for about `cycles` clock ticks: work that is still
 * running when the host has long moved on. */
__global__ static void spin_kernel(long long cycles)
{
        long long start = clock64();

        while (clock64() - start < cycles)
                ;
}

extern "C" int gpu_fill_late(void *ptr, size_t bytes, uint32_t seed,
                             void **ret_stream)
{
        cudaStream_t s;
        cudaError_t err;

        err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        if (err != cudaSuccess)
                return fail(err, "stream");
        /* ~100 ms at the H200's ~2 GHz, then the fill. */
        spin_kernel<<<1, 1, 0, s>>>(200000000LL);
        fill_kernel<<<1024, 256, 0, s>>>((uint32_t *)ptr, bytes / 4, 0, seed);
        err = cudaGetLastError();
        if (err != cudaSuccess)
                return fail(err, "fill late");
        *ret_stream = s;
        return 0;
}

extern "C" int gpu_fill_slow(void *ptr, size_t bytes, uint32_t seed,
                             unsigned slices, unsigned spin_us,
                             void **ret_stream)
{
        size_t words = bytes / 4, per = (words + slices - 1) / slices;
        cudaStream_t s;
        cudaError_t err;

        err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        if (err != cudaSuccess)
                return fail(err, "stream");
        for (size_t first = 0; first < words; first += per) {
                size_t n = words - first < per ? words - first : per;

                /* About 2,000 clock ticks a microsecond at the H200's clock. */
                spin_kernel<<<1, 1, 0, s>>>(2000LL * spin_us);
                fill_kernel<<<528, 256, 0, s>>>((uint32_t *)ptr + first, n, first,
                                                seed);
        }
        err = cudaGetLastError();
        if (err != cudaSuccess) {
                cudaStreamDestroy(s);
                return fail(err, "fill slowly");
        }
        *ret_stream = s;
        return 0;
}

extern "C" int gpu_stream_busy(void *stream)
{
        cudaError_t err = cudaStreamQuery((cudaStream_t)stream);

        if (err == cudaErrorNotReady)
                return 1;
        return err == cudaSuccess ? 0 : fail(err, "stream query");
}

extern "C" int gpu_stream_done(void *stream)
{
        cudaError_t err = cudaStreamSynchronize((cudaStream_t)stream);

        cudaStreamDestroy((cudaStream_t)stream);
        return err == cudaSuccess ? 0 : fail(err, "stream");
}

extern "C" int gpu_wait_event(void *event)
{
        cudaError_t err;

        err = cudaStreamWaitEvent(0, (cudaEvent_t)event, 0);
        if (err == cudaSuccess)
                err = cudaDeviceSynchronize();
        return err == cudaSuccess ? 0 : fail(err, "wait event");
}

extern "C" int gpu_mem_info(uint64_t *ret_free, uint64_t *ret_total)
{
        size_t free_b, total_b;
        cudaError_t err;

        err = cudaMemGetInfo(&free_b, &total_b);
        if (err != cudaSuccess)
                return fail(err, "cudaMemGetInfo");
        *ret_free = free_b;
        *ret_total = total_b;
        return 0;
}

extern "C" int gpu_set_device(int device)
{
        cudaError_t err = cudaSetDevice(device);

        return err == cudaSuccess ? 0 : fail(err, "cudaSetDevice");
}

extern "C" int gpu_pointer_device(const void *ptr)
{
        cudaPointerAttributes attr;

        if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess)
                return -1;
        return attr.device;
}

extern "C" const char *gpu_last_error(void)
{
        return last_error;
}
