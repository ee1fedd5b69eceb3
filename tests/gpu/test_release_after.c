/*
 * test_release_after — gmd_release_after on the GPU: a kernel is still
 * filling a buffer when the application releases it and asks for it to be
 * paged out, without synchronizing anything. The daemon's copy must wait
 * for the fill on the GPU (the last-use event it was sent), so the bytes
 * that come back are the new pattern. Without the event the copy would
 * race the fill: this test is where that would show.
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
        long long bad;
        double t0, waited;
        int r;

        r = gmd_alloc(c, size, 0, GMD_ALLOC_SWAPPABLE, 5000, &b);
        CHECK(r == 0, "alloc: %s", gmd_last_error());
        if (r < 0)
                return;
        CHECK(gpu_fill(gmd_buffer_ptr(b), size, 0, 1) == 0, "first fill");
        /* ~100 ms of GPU work, then pattern 2; nothing waits for it here. */
        CHECK(gpu_fill_late(gmd_buffer_ptr(b), size, 2, &stream) == 0, "late fill: %s",
              gpu_last_error());
        t0 = gpu_now_us();
        r = gmd_release_after(c, b, stream);
        CHECK(r == 0, "release_after: %s", gmd_last_error());
        r = gmd_pageout(c, b);
        CHECK(r == 0, "pageout: %s", gmd_last_error());
        r = gmd_wait(c, b, 20000);
        CHECK(r == 0, "wait: %s", gmd_last_error());
        waited = (gpu_now_us() - t0) / 1e3;
        CHECK(gmd_buffer_tier(b) == GMD_TIER_HOST, "paged out");
        printf("release_after + pageout of %zu MiB behind ~100 ms of GPU work: "
               "%.1f ms\n", (size_t)(size / MiB), waited);
        CHECK(gpu_stream_done(stream) == 0, "stream");
        r = gmd_acquire(c, b, 20000);
        CHECK(r == 0, "acquire: %s", gmd_last_error());
        bad = gpu_check(gmd_buffer_ptr(b), size, 0, 2);
        CHECK(bad == 0, "%lld words are not the late fill's: the copy did not "
              "wait for the last use", bad);
        if (bad == 0)
                printf("the copy waited for the last use: pattern intact\n");
        gmd_free(c, b);
}

int main(void)
{
        return gpu_client_test("release-after", run);
}
