/*
 * fake_cudart — a stand-in for libcudart.so in the shim's CI tests, where
 * there is no GPU: the few runtime functions libgpumem_torch.so calls
 * through (cudaGetDevice, cudaSetDevice, cudaDeviceSynchronize, cudaFree,
 * cudaMemGetInfo, cudaDeviceEnablePeerAccess: once per pair, then 704,
 * cudaErrorPeerAccessAlreadyEnabled, as the real one) and a cudaMalloc
 * that must never be reached while the shim is loaded. The test reads
 * and steers it through fake_cudart_*.
 */
#include <stddef.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

static int device;
static int syncs, frees, set_devices, mallocs, peer_enables;
static unsigned long long peer_pairs;
static void *last_free = (void *)1;

EXPORT int cudaGetDevice(int *ret) { *ret = device; return 0; }
EXPORT int cudaSetDevice(int d) { device = d; set_devices++; return 0; }
EXPORT int cudaDeviceSynchronize(void) { syncs++; return 0; }
EXPORT int cudaFree(void *p) { frees++; last_free = p; return 0; }
EXPORT int cudaMemGetInfo(size_t *f, size_t *t) { *f = 1; *t = 2; return 0; }
EXPORT int cudaMalloc(void **p, size_t size) { mallocs++; *p = NULL; return 2; }

EXPORT int cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
        unsigned long long bit = 1ull << ((device * 8 + peer) & 63);

        (void)flags;
        peer_enables++;
        if (peer_pairs & bit)
                return 704;
        peer_pairs |= bit;
        return 0;
}

/* Counters: which = 0 syncs, 1 frees (passed on), 2 set_device calls,
 * 3 cudaMalloc calls that reached the fake, 4 cudaDeviceEnablePeerAccess
 * calls that reached it. */
EXPORT int fake_cudart_count(int which)
{
        return which == 0 ? syncs : which == 1 ? frees :
               which == 2 ? set_devices : which == 3 ? mallocs : peer_enables;
}
EXPORT void *fake_cudart_last_free(void) { return last_free; }
EXPORT void fake_cudart_set_device(int d) { device = d; }
