/*
 * gmd_restart_client — the client process of test_restart: it keeps
 * working on checksummed buffers while the test kills and restarts
 * gpu-memd under it, and fails loudly at the first byte that is not what
 * it wrote or the first call that does not succeed.
 *
 *   gmd_restart_client SEED N_BUFFERS [MIB]
 *
 * Allocates N SWAPPABLE buffers of MIB, 2 x MIB or 3 x MIB MiB (MIB 2 by
 * default: 2, 4 or 6 MiB; more than the test's pool holds: buffers move),
 * fills each with its own pattern, then loops: acquire a buffer, check
 * every word, write a new pattern, release; now and then page one out,
 * prefetch one, or free one and allocate a new one. Every call has a
 * deadline long enough to ride through restarts. On SIGTERM it stops,
 * checks every buffer once more and prints
 *   DONE <operations> <buffers> <bytes> <bytes checked> <access>
 * then waits for SIGUSR1 (the test compares the daemon's view with its
 * own meanwhile), frees everything and exits 0. Any failure prints
 *   FAIL <what>: <gmd_last_error() or the CUDA error>
 * and exits 1.
 *
 * How the bytes are reached depends on the backend the daemon runs, and
 * is the only thing that does (one table, byte_access): on sim a buffer's
 * address is host memory this process reads and writes ("cpu"); on cuda
 * it is a device address, which this process fills and checks with
 * cuMemcpyHtoD / cuMemcpyDtoH through a host staging buffer ("cuda"), in
 * the primary context of the GPU its buffers are on: its CUDA device 0,
 * the daemon's device that is (gmd_device_from_cuda), the same context
 * libgpumem maps the buffers in. The pattern, the loop and the checks are
 * the same either way.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpumem.h"
#ifdef GMD_HAVE_CUDA
#include "cuda_driver.h"
#endif

#define MiB (UINT64_C(1) << 20)
#define MAX_BUFFERS 64
#define DEADLINE_MS 60000

static volatile sig_atomic_t stop, go;

static void on_term(int sig)
{
        (void)sig;
        stop = 1;
}

static void on_usr1(int sig)
{
        (void)sig;
        go = 1;
}

static uint64_t word_of(uint64_t seed, uint64_t i)
{
        uint64_t x = seed * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;

        x ^= x >> 31;
        return x * 0x94d049bb133111ebull;
}

static void pattern_write(uint64_t *w, size_t n, uint64_t seed)
{
        for (size_t i = 0; i < n; i++)
                w[i] = word_of(seed, i);
}

/* The first word that is not pattern `seed`, or -1. */
static long pattern_find_bad(const uint64_t *w, size_t n, uint64_t seed)
{
        for (size_t i = 0; i < n; i++)
                if (w[i] != word_of(seed, i))
                        return (long)i;
        return -1;
}

static void fail(const char *what, uint64_t id)
{
        printf("FAIL %s (buffer %llu): %s\n", what, (unsigned long long)id,
               gmd_last_error());
        fflush(stdout);
        exit(1);
}

/* How this process reaches a buffer's bytes (acquired, or just allocated). */
typedef struct byte_access {
        const char *name;
        /* Write pattern `seed` over the whole buffer, done when it returns
         * (the buffer is released next, and may move at once). */
        void (*fill)(gmd_buffer *b, uint64_t seed);
        /* The first word that is not pattern `seed`, or -1. */
        long (*check)(const gmd_buffer *b, uint64_t seed);
} byte_access;

static void cpu_fill(gmd_buffer *b, uint64_t seed)
{
        pattern_write(gmd_buffer_ptr(b), gmd_buffer_size(b) / 8, seed);
}

static long cpu_check(const gmd_buffer *b, uint64_t seed)
{
        return pattern_find_bad(gmd_buffer_ptr(b), gmd_buffer_size(b) / 8, seed);
}

static const byte_access cpu_access = { "cpu", cpu_fill, cpu_check };

#ifdef GMD_HAVE_CUDA
static const gmd_cuda_driver *cu;
static uint64_t *stage;          /* the host side of every copy */
static size_t stage_size;

static void cuda_fail(const char *what, uint64_t id, CUresult res)
{
        char why[192];

        printf("FAIL %s (buffer %llu): %s\n", what, (unsigned long long)id,
               cuda_driver_error(cu, res, why, sizeof(why)));
        fflush(stdout);
        exit(1);
}

static uint64_t *staging(size_t size)
{
        if (size > stage_size) {
                free(stage);
                stage = malloc(size);
                if (!stage) {
                        printf("FAIL out of memory for a %zu-byte staging "
                               "buffer\n", size);
                        fflush(stdout);
                        exit(1);
                }
                stage_size = size;
        }
        return stage;
}

static void cuda_fill(gmd_buffer *b, uint64_t seed)
{
        CUdeviceptr ptr = (CUdeviceptr)(uintptr_t)gmd_buffer_ptr(b);
        size_t size = gmd_buffer_size(b);
        uint64_t *w = staging(size);
        CUresult res;

        pattern_write(w, size / 8, seed);
        res = cu->cuMemcpyHtoD(ptr, w, size);
        if (res != CUDA_SUCCESS)
                cuda_fail("cuMemcpyHtoD", gmd_buffer_id(b), res);
        /* From pageable memory the copy may still be under way when
         * cuMemcpyHtoD returns; the release that follows lets the daemon
         * move the buffer, so nothing of this process may be left on it. */
        res = cu->cuCtxSynchronize();
        if (res != CUDA_SUCCESS)
                cuda_fail("cuCtxSynchronize after a fill", gmd_buffer_id(b),
                          res);
}

static long cuda_check(const gmd_buffer *b, uint64_t seed)
{
        CUdeviceptr ptr = (CUdeviceptr)(uintptr_t)gmd_buffer_ptr(b);
        size_t size = gmd_buffer_size(b);
        uint64_t *w = staging(size);
        CUresult res;

        /* Into pageable memory: done when it returns. */
        res = cu->cuMemcpyDtoH(w, ptr, size);
        if (res != CUDA_SUCCESS)
                cuda_fail("cuMemcpyDtoH", gmd_buffer_id(b), res);
        return pattern_find_bad(w, size / 8, seed);
}

static const byte_access cuda_access = { "cuda", cuda_fill, cuda_check };

/* Make this thread's current context the primary context of this
 * process's CUDA device 0 and return the daemon's number of that device,
 * where the buffers go. libgpumem maps them in that primary context too
 * (client/mapper_cuda.c), so their addresses are valid in it. */
static unsigned cuda_open(gmd_client *c)
{
        const char *why = NULL;
        unsigned device = 0;
        CUcontext ctx;
        CUdevice dev;
        CUresult res;
        int r;

        if (cuda_driver_load(&cu, &why) < 0) {
                printf("FAIL cuda: %s\n", why ? why : "no driver");
                fflush(stdout);
                exit(1);
        }
        r = gmd_device_from_cuda(c, 0, &device);
        if (r == GMD_ENOTSUP)
                device = 0;   /* a daemon that names no UUIDs: same order */
        else if (r < 0)
                fail("the daemon's device of CUDA device 0", 0);
        res = cu->cuDeviceGet(&dev, 0);
        if (res == CUDA_SUCCESS)
                res = cu->cuDevicePrimaryCtxRetain(&ctx, dev);
        if (res != CUDA_SUCCESS)
                cuda_fail("the primary context of CUDA device 0", 0, res);
        res = cu->cuCtxSetCurrent(ctx);
        if (res != CUDA_SUCCESS)
                cuda_fail("cuCtxSetCurrent", 0, res);
        return device;
}

static void cuda_close(void)
{
        CUdevice dev;

        if (cu->cuDeviceGet(&dev, 0) == CUDA_SUCCESS)
                cu->cuDevicePrimaryCtxRelease(dev);
        free(stage);
}
#endif

static gmd_buffer *make(gmd_client *c, const byte_access *a, unsigned device,
                        unsigned *rng, uint64_t unit, uint64_t seed)
{
        gmd_buffer *b = NULL;
        size_t size = (1 + rand_r(rng) % 3) * unit;

        if (gmd_alloc(c, size, device, GMD_ALLOC_SWAPPABLE, DEADLINE_MS, &b) < 0)
                fail("alloc", 0);
        a->fill(b, seed);
        if (gmd_release(c, b) < 0)
                fail("release after alloc", gmd_buffer_id(b));
        return b;
}

int main(int argc, char **argv)
{
        gmd_buffer *bufs[MAX_BUFFERS];
        uint64_t seeds[MAX_BUFFERS], next_seed, ops = 0, bytes = 0;
        uint64_t checked = 0, unit;
        const byte_access *a = &cpu_access;
        gmd_client *c = NULL;
        unsigned rng, n, device = 0;
        char name[32];

        if (argc != 3 && argc != 4)
                return 2;
        rng = (unsigned)strtoul(argv[1], NULL, 10);
        n = (unsigned)strtoul(argv[2], NULL, 10);
        unit = (argc == 4 ? strtoull(argv[3], NULL, 10) : 2) * MiB;
        if (n == 0 || n > MAX_BUFFERS || unit == 0)
                return 2;
        next_seed = (uint64_t)rng << 32;
        sigset_t usr1, none;

        signal(SIGTERM, on_term);
        signal(SIGUSR1, on_usr1);
        /* SIGUSR1 only inside sigsuspend: none lost between check and wait.
         * Threads started later (libgpumem's, the CUDA driver's) inherit
         * the mask, so it is this thread that takes it. */
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        sigemptyset(&none);
        sigprocmask(SIG_BLOCK, &usr1, NULL);
        snprintf(name, sizeof(name), "restart-%u", rng);
        if (gmd_connect(NULL, name, &c) < 0)
                fail("connect", 0);
        if (strcmp(gmd_client_backend(c), "cuda") == 0) {
#ifdef GMD_HAVE_CUDA
                device = cuda_open(c);
                a = &cuda_access;
#else
                printf("FAIL the daemon runs the cuda backend; this client "
                       "was built without CUDA\n");
                return 1;
#endif
        }
        for (unsigned i = 0; i < n; i++) {
                seeds[i] = ++next_seed;
                bufs[i] = make(c, a, device, &rng, unit, seeds[i]);
        }
        printf("READY\n");
        fflush(stdout);
        while (!stop) {
                unsigned i = (unsigned)rand_r(&rng) % n, roll;
                long bad;

                if (gmd_acquire(c, bufs[i], DEADLINE_MS) < 0)
                        fail("acquire", gmd_buffer_id(bufs[i]));
                bad = a->check(bufs[i], seeds[i]);
                if (bad >= 0) {
                        printf("FAIL bytes (buffer %llu): word %ld is not "
                               "what was written\n",
                               (unsigned long long)gmd_buffer_id(bufs[i]), bad);
                        fflush(stdout);
                        return 1;
                }
                checked += gmd_buffer_size(bufs[i]);
                seeds[i] = ++next_seed;
                a->fill(bufs[i], seeds[i]);
                if (gmd_release(c, bufs[i]) < 0)
                        fail("release", gmd_buffer_id(bufs[i]));
                roll = (unsigned)rand_r(&rng) % 100;
                i = (unsigned)rand_r(&rng) % n;
                if (roll < 20 && gmd_pageout(c, bufs[i]) < 0)
                        fail("pageout", gmd_buffer_id(bufs[i]));
                else if (roll >= 20 && roll < 35 && gmd_prefetch(c, bufs[i]) < 0)
                        fail("prefetch", gmd_buffer_id(bufs[i]));
                else if (roll >= 95) {
                        if (gmd_free(c, bufs[i]) < 0)
                                fail("free", gmd_buffer_id(bufs[i]));
                        seeds[i] = ++next_seed;
                        bufs[i] = make(c, a, device, &rng, unit, seeds[i]);
                }
                ops++;
        }
        for (unsigned i = 0; i < n; i++) {
                if (gmd_acquire(c, bufs[i], DEADLINE_MS) < 0)
                        fail("final acquire", gmd_buffer_id(bufs[i]));
                if (a->check(bufs[i], seeds[i]) >= 0)
                        fail("final bytes", gmd_buffer_id(bufs[i]));
                if (gmd_release(c, bufs[i]) < 0)
                        fail("final release", gmd_buffer_id(bufs[i]));
                bytes += gmd_buffer_size(bufs[i]);
        }
        checked += bytes;
        printf("DONE %llu %u %llu %llu %s\n", (unsigned long long)ops, n,
               (unsigned long long)bytes, (unsigned long long)checked, a->name);
        fflush(stdout);
        while (!go)
                sigsuspend(&none);
        for (unsigned i = 0; i < n; i++)
                gmd_free(c, bufs[i]);
        gmd_disconnect(c);
#ifdef GMD_HAVE_CUDA
        if (a == &cuda_access)
                cuda_close();
#endif
        return 0;
}
