/*
 * test_gpu_inuse — no write a kernel makes to a buffer its process holds is
 * lost to a move. Kernels keep writing a pattern into
 * an acquired 256 MiB SPILLABLE buffer, slice by slice behind short spins,
 * for about 64 ms, while the host asks for a pageout of it (and of all the
 * client's buffers) and waits. The daemon must not copy a buffer in use:
 * the pageout is GMD_EBUSY, the buffer stays in VRAM, and once the kernels
 * are done every word holds the pattern. A daemon that copied it anyway
 * would remap the process onto a host copy taken while the kernels still
 * wrote (and unmap the VRAM under them): words lost, or a faulting kernel.
 * Then the same buffer, released after the kernels end, pages out and
 * comes back intact, to show moves still work between leases.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "gpumem.h"

#define MiB (1ull << 20)

static void run(gmd_client *c)
{
        const size_t size = 256 * MiB;
        gmd_buffer *b = NULL;
        void *stream = NULL;
        int r, r_all, busy;
        char why[256];
        long long bad;
        double t0, ms;

        r = gmd_alloc(c, size, 0, GMD_ALLOC_SPILLABLE, 5000, &b);
        CHECK(r == 0, "alloc: %s", gmd_last_error());
        if (r < 0)
                return;
        CHECK(gmd_buffer_tier(b) == GMD_TIER_VRAM, "allocated in VRAM");
        CHECK(gpu_fill(gmd_buffer_ptr(b), size, 0, 1) == 0, "first fill: %s",
              gpu_last_error());
        /* 64 slices, each behind ~1 ms of GPU work: writes for ~64 ms. */
        r = gpu_fill_slow(gmd_buffer_ptr(b), size, 2, 64, 1000, &stream);
        CHECK(r == 0, "slow fill: %s", gpu_last_error());
        if (r < 0) {
                gmd_free(c, b);
                return;
        }
        t0 = gpu_now_us();
        r = gmd_pageout(c, b);
        snprintf(why, sizeof(why), "%s", r ? gmd_last_error() : "it moved");
        CHECK(r == GMD_EBUSY && strstr(why, "release"),
              "pageout of a SPILLABLE buffer kernels write: %d (%s), want "
              "GMD_EBUSY saying to release it", r, why);
        CHECK(gmd_wait(c, b, 20000) == 0, "wait: %s", gmd_last_error());
        r_all = gmd_pageout(c, NULL);
        CHECK(r_all == 0, "pageout of all: %s", gmd_last_error());
        CHECK(gmd_wait(c, NULL, 20000) == 0, "wait for all: %s", gmd_last_error());
        ms = (gpu_now_us() - t0) / 1e3;
        busy = gpu_stream_busy(stream);
        /* Otherwise the kernels were over before the requests: nothing was
         * tried against them. */
        CHECK(busy == 1, "the kernels were still writing when pageout and "
              "wait returned (%d): the test raced nothing", busy);
        printf("pageout + wait of a held %zu MiB SPILLABLE buffer while kernels "
               "write it: %d (%s), %.1f ms, kernels still running: %s\n",
               (size_t)(size / MiB), r, why, ms, busy == 1 ? "yes" : "no");
        CHECK(gpu_stream_done(stream) == 0, "the slow fill ran to its end: %s",
              gpu_last_error());
        CHECK(gmd_buffer_tier(b) == GMD_TIER_VRAM, "still in VRAM");
        bad = gpu_check(gmd_buffer_ptr(b), size, 0, 2);
        CHECK(bad == 0, "%lld of %zu words written while pageout ran are not "
              "there: writes were lost", bad, size / 4);
        if (bad == 0)
                printf("every word the kernels wrote is there\n");

        /* Released, it moves; the next acquire brings it back. */
        CHECK(gmd_release(c, b) == 0, "release: %s", gmd_last_error());
        CHECK(gmd_pageout(c, b) == 0, "pageout when released: %s", gmd_last_error());
        CHECK(gmd_wait(c, b, 20000) == 0, "wait: %s", gmd_last_error());
        CHECK(gmd_buffer_tier(b) == GMD_TIER_HOST, "paged out when released");
        CHECK(gmd_acquire(c, b, 20000) == 0, "acquire: %s", gmd_last_error());
        CHECK(gmd_buffer_tier(b) == GMD_TIER_VRAM, "back in VRAM");
        bad = gpu_check(gmd_buffer_ptr(b), size, 0, 2);
        CHECK(bad == 0, "%lld words wrong after a pageout between leases", bad);
        gmd_free(c, b);
}

int main(void)
{
        return gpu_client_test("inuse", run);
}
