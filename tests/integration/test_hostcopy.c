/*
 * test_hostcopy — clean pageouts (GMD_ACQUIRE_READ_ONLY, daemon/core/
 * hostcopy.c) on the sim backend, with the real daemon: a buffer whose
 * leases since its swap-in were all read only keeps the host copy it came
 * from, and its next pageout copies nothing; a read-write lease gives the
 * copy up, so what it writes is copied out; kept copies give their host
 * room to swap-outs that need it; unknown acquire flags are refused.
 *
 * What was copied is read from the metrics (bytes moved out, clean
 * pageouts and their bytes); what a buffer holds, from patterns written
 * before a move and checked word by word after it.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpumem.h"
#include "gpumem.pb-c.h"
#include "harness.h"
#include "pattern.h"
#include "raw_client.h"
#include "wire.h"

#define HC_CONFIG "[swap]\nchunk_size = 2M\n"

typedef harness_fixture fixture;

static void start(fixture *f, const char *extra)
{
        char config[256];

        snprintf(config, sizeof(config), "%s%s", HC_CONFIG, extra ? extra : "");
        harness_start_small_metrics(&f->h, config);
        f->client = harness_client(&f->h, "owner");
}

static double metric(fixture *f, const char *name)
{
        return harness_metric(&f->h, name);
}

static double bytes_out(fixture *f)
{
        return metric(f, "gpumemd_bytes_moved_total{direction=\"out\"}");
}

/* The bytes moved out and the clean pageouts so far must be these. */
static void expect_out(fixture *f, double out, double clean, const char *when)
{
        double o = bytes_out(f);
        double c = metric(f, "gpumemd_clean_pageouts_total");
        double cb = metric(f, "gpumemd_clean_pageout_bytes_total");

        if (o != out || c != clean)
                fail_msg("%s: %.0f MiB moved out and %.0f clean pageouts; want "
                         "%.0f MiB and %.0f; log:\n%s", when, o / MiB, c,
                         out / MiB, clean, harness_read_log(&f->h));
        if (cb != clean * 8 * MiB)
                fail_msg("%s: %.0f bytes not copied by clean pageouts, want %.0f",
                         when, cb, clean * 8 * MiB);
}

/* Acquire `b` (read only or not), check its pattern, release it. */
static void use(gmd_client *c, gmd_buffer *b, unsigned flags, uint64_t seed,
                const char *when)
{
        OK(gmd_acquire_flags(c, b, 5000, flags));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        pattern_check(b, seed, when);
        OK(gmd_release(c, b));
}

/* An 8 MiB buffer of pattern `seed`, paged out (copied) and back under a
 * read-only lease, released: it keeps its host copy. */
static gmd_buffer *kept_copy_buffer(fixture *f, uint64_t seed)
{
        gmd_buffer *a = harness_released_buffer(f->client, 8 * MiB, seed);

        harness_page_out(f->client, a);
        use(f->client, a, GMD_ACQUIRE_READ_ONLY, seed, "back, read only");
        return a;
}

/* ---- 1. read only: the second pageout copies nothing ----------------------- */

static void test_read_only_pageout_is_clean(void **state)
{
        fixture *f = *state;
        gmd_buffer *a;

        start(f, NULL);
        /* The first pageout copies; the swap-in of a read-only lease keeps
         * its host copy ... */
        a = kept_copy_buffer(f, 1);
        expect_out(f, 8 * MiB, 0, "first pageout");
        /* ... so this pageout copies nothing, and the bytes come back. */
        for (int i = 0; i < 3; i++) {
                harness_page_out(f->client, a);
                expect_out(f, 8 * MiB, i + 1, "clean pageout");
                use(f->client, a, GMD_ACQUIRE_READ_ONLY, 1, "back after clean");
        }
        /* The kept copy is host memory in use while the buffer is in VRAM. */
        assert_int_equal(harness_host_pool(f->client).used, 8 * MiB);
        OK(gmd_free(f->client, a));
        assert_int_equal(harness_host_pool(f->client).used, 0);
        harness_stop(&f->h);
}

/* ---- 2. a read-write lease: what it writes is copied out ------------------- */

static void test_write_lease_copies(void **state)
{
        fixture *f = *state;
        gmd_buffer *a;

        start(f, NULL);
        a = kept_copy_buffer(f, 1);
        /* Written under a read-write lease: the kept copy is stale and
         * must not stand in for the VRAM. */
        OK(gmd_acquire(f->client, a, 5000));
        assert_int_equal(harness_host_pool(f->client).used, 0);
        pattern_fill(a, 2);
        OK(gmd_release(f->client, a));
        harness_page_out(f->client, a);
        expect_out(f, 16 * MiB, 0, "pageout after a write");
        use(f->client, a, 0, 2, "back after the write");
        /* read-write then: copied out again, no copy kept */
        harness_page_out(f->client, a);
        expect_out(f, 24 * MiB, 0, "pageout after a read-write lease");
        use(f->client, a, GMD_ACQUIRE_READ_ONLY, 2, "back");
        OK(gmd_free(f->client, a));
        harness_stop(&f->h);
}

/* ---- 3. an acquire cancels a clean pageout: the copy is kept again ---------- */

static void test_cancelled_clean_pageout_keeps_copy(void **state)
{
        fixture *f = *state;
        gmd_buffer *a;

        start(f, NULL);
        a = kept_copy_buffer(f, 1);
        /* Pageout and at once a read-only acquire: whether the move was
         * undone or finished, the bytes are right and the next pageout
         * copies nothing. */
        OK(gmd_pageout(f->client, a));
        use(f->client, a, GMD_ACQUIRE_READ_ONLY, 1, "acquired at once");
        harness_page_out(f->client, a);
        if (bytes_out(f) != 8 * MiB ||
            metric(f, "gpumemd_clean_pageouts_total") < 1)
                fail_msg("after a cancelled clean pageout: %.0f MiB moved out "
                         "(want 8), %.0f clean pageouts (want 1 or 2)",
                         bytes_out(f) / MiB,
                         metric(f, "gpumemd_clean_pageouts_total"));
        use(f->client, a, GMD_ACQUIRE_READ_ONLY, 1, "back");
        OK(gmd_free(f->client, a));
        assert_int_equal(harness_host_pool(f->client).used, 0);
        harness_stop(&f->h);
}

/* ---- 4. kept copies give their room to swap-outs --------------------------- */

static void test_kept_copies_give_room(void **state)
{
        fixture *f = *state;
        gmd_buffer *a, *b, *c;

        /* Room on host for two 8 MiB buffers. */
        start(f, "[pools]\nhost_limit = 16M\nhost_stock = 0\n");
        a = kept_copy_buffer(f, 1);
        b = harness_released_buffer(f->client, 8 * MiB, 2);
        c = harness_released_buffer(f->client, 8 * MiB, 3);
        assert_int_equal(harness_host_pool(f->client).used, 8 * MiB);
        harness_page_out(f->client, b);
        /* The host pool is full (a's kept copy, b): c's swap-out takes the
         * room of a's kept copy instead of being refused. */
        harness_page_out(f->client, c);
        assert_int_equal(harness_host_pool(f->client).used, 16 * MiB);
        expect_out(f, 24 * MiB, 0, "three swap-outs");
        use(f->client, a, GMD_ACQUIRE_READ_ONLY, 1, "a, never left VRAM");
        use(f->client, b, 0, 2, "b back");
        use(f->client, c, 0, 3, "c back");
        OK(gmd_free(f->client, a));
        OK(gmd_free(f->client, b));
        OK(gmd_free(f->client, c));
        harness_stop(&f->h);
}

/* ---- 5. unknown acquire flags --------------------------------------------- */

static void test_unknown_flags_refused(void **state)
{
        fixture *f = *state;
        Gmd__AcquireRequest acq = GMD__ACQUIRE_REQUEST__INIT;
        Gmd__ErrorReply *err;
        gmd_buffer *a;
        raw_client raw;
        uint32_t next = 2;
        uint64_t id;
        raw_msg m;

        start(f, NULL);
        a = harness_released_buffer(f->client, 2 * MiB, 1);
        assert_int_equal(gmd_acquire_flags(f->client, a, 0, 0x4), -EINVAL);
        assert_non_null(strstr(gmd_last_error(), "unknown flags"));
        /* The daemon checks too, for clients that are not libgpumem. */
        raw_init(&raw);
        raw_hello(&raw, &f->h, "raw");
        id = raw_alloc_release(&raw, &next, 2 * MiB, 5);
        acq.buffer_id = id;
        acq.flags = 0x6;        /* 0x2 is GMD_ACQUIRE_YIELD */
        raw_send(&raw, GMD__MSG_TYPE__MSG_ACQUIRE, next, &acq.base);
        m = raw_expect(&raw, GMD__MSG_TYPE__MSG_ERROR_REPLY, next);
        err = m.msg;
        assert_int_equal(err->code, GMD__ERROR_CODE__ERR_INVALID);
        assert_non_null(strstr(err->message, "unknown acquire flags 0x4"));
        raw_msg_clear(&m);
        /* and the client is still served */
        acq.flags = GMD_ACQUIRE_READ_ONLY;
        raw_send(&raw, GMD__MSG_TYPE__MSG_ACQUIRE, ++next, &acq.base);
        m = raw_expect(&raw, GMD__MSG_TYPE__MSG_OK_REPLY, next);
        raw_msg_clear(&m);
        raw_close(&raw);
        OK(gmd_free(f->client, a));
        harness_stop(&f->h);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                HARNESS_TEST(test_read_only_pageout_is_clean),
                HARNESS_TEST(test_write_lease_copies),
                HARNESS_TEST(test_cancelled_clean_pageout_keeps_copy),
                HARNESS_TEST(test_kept_copies_give_room),
                HARNESS_TEST(test_unknown_flags_refused),
        };

        /* Freed buffers must go back at once for the figures checked here,
         * also when the program is run by hand. */
        setenv(GMD_CACHE_ENV, "0", 1);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
