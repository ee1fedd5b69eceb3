/*
 * test_reuse_kept — daemon/core/reuse.c, VRAM kept for swap-ins, on its own: no
 * socket, no daemon, no backend. Memory is plain gmd_mem records; the
 * release function records what was released and gives its bytes back
 * to the pool, as backing_release does.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "backend.h"
#include "reuse.h"

#define MIB (1ull << 20)

typedef struct fixture {
        gmd_reuse reuse;
        gmd_stats stats;
        gmd_pool pool[2];
        gmd_reuse_owner a, b;
        gmd_mem *released[16];
        unsigned n_released;
        void *asked[16];            /* tags asked to unmap */
        unsigned n_asked;
        int ask_result;
} fixture;

/* Buffers, as tags: only their addresses matter. */
static int buffer_x, buffer_y;

static void release(void *ctx, gmd_mem *mem)
{
        fixture *f = ctx;

        pool_give(&f->pool[mem->device], mem->size);
        f->released[f->n_released++] = mem;
}

static void harness_sleep_ms_unit(int ms)
{
        struct timespec t = { 0, ms * 1000000L };

        nanosleep(&t, NULL);
}

static int ask_unmap(void *ctx, void *tag)
{
        fixture *f = ctx;

        if (f->ask_result == 0)
                f->asked[f->n_asked++] = tag;
        return f->ask_result;
}

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));

        assert_non_null(f);
        pool_init(&f->pool[0], 0, GMD_TIER_VRAM, 64 * MIB, 2 * MIB);
        pool_init(&f->pool[1], 1, GMD_TIER_VRAM, 64 * MIB, 2 * MIB);
        reuse_init(&f->reuse, true, &f->stats, release, ask_unmap, f);
        f->reuse.ask_timeout_ms = 2000;     /* the daemon's default */
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;

        /* Gone: what they still map is released, not asked back. */
        f->a.gone = f->b.gone = true;
        reuse_forget(&f->reuse, &f->a);
        reuse_forget(&f->reuse, &f->b);
        for (unsigned i = 0; i < f->n_released; i++)
                free(f->released[i]);
        free(f);
        return 0;
}

/* A buffer's VRAM that just moved out: its pool bytes still taken. */
static gmd_mem *vram(fixture *f, unsigned device, uint64_t size)
{
        gmd_mem *m = calloc(1, sizeof(*m));

        assert_non_null(m);
        assert_int_equal(pool_take(&f->pool[device], size), 0);
        m->fd = 3;
        m->size = size;
        m->tier = GMD_TIER_VRAM;
        m->device = device;
        return m;
}

static void test_keep_and_take_same_owner_only(void **state)
{
        fixture *f = *state;
        gmd_mem *m = vram(f, 0, 8 * MIB), *got;

        reuse_keep(&f->reuse, &f->a, m);
        assert_int_equal(f->a.kept_bytes, 8 * MIB);
        assert_int_equal(reuse_bytes(&f->reuse, 0), 8 * MIB);
        assert_int_equal(f->pool[0].used, 8 * MIB);     /* still paid for */
        /* Never another client's, nor another size or device. */
        assert_null(reuse_take(&f->reuse, &f->b, 0, 8 * MIB, false));
        assert_null(reuse_take(&f->reuse, &f->a, 0, 4 * MIB, false));
        assert_null(reuse_take(&f->reuse, &f->a, 1, 8 * MIB, false));
        got = reuse_take(&f->reuse, &f->a, 0, 8 * MIB, false);
        assert_ptr_equal(got, m);
        assert_int_equal(f->stats.vram_reused, 1);
        assert_int_equal(f->a.kept_bytes, 0);
        assert_int_equal(reuse_bytes(&f->reuse, 0), 0);
        assert_int_equal(f->pool[0].used, 8 * MIB);     /* the payment moves on */
        f->released[f->n_released++] = got;             /* freed at teardown */
}

static void test_not_kept_when_off_gone_or_unmappable(void **state)
{
        fixture *f = *state;
        gmd_mem *ipc = vram(f, 0, 2 * MIB);

        f->reuse.enabled = false;
        reuse_keep(&f->reuse, &f->a, vram(f, 0, 2 * MIB));
        f->reuse.enabled = true;
        f->a.gone = true;
        reuse_keep(&f->reuse, &f->a, vram(f, 0, 2 * MIB));
        f->a.gone = false;
        ipc->fd = -1;           /* legacy IPC: no fd to hand back */
        reuse_keep(&f->reuse, &f->a, ipc);
        assert_int_equal(f->n_released, 3);
        assert_int_equal(f->a.kept_bytes, 0);
        assert_int_equal(f->pool[0].used, 0);
}

static void test_make_room_oldest_first_on_its_device(void **state)
{
        fixture *f = *state;
        gmd_mem *old = vram(f, 0, 16 * MIB), *other = vram(f, 1, 16 * MIB);
        gmd_mem *mid = vram(f, 0, 16 * MIB), *young = vram(f, 0, 16 * MIB);

        reuse_keep(&f->reuse, &f->a, old);
        reuse_keep(&f->reuse, &f->b, other);
        reuse_keep(&f->reuse, &f->b, mid);
        reuse_keep(&f->reuse, &f->a, young);
        assert_int_equal(pool_free(&f->pool[0]), 16 * MIB);
        assert_true(reuse_make_room(&f->reuse, &f->pool[0], 40 * MIB, false));
        assert_int_equal(f->n_released, 2);
        assert_ptr_equal(f->released[0], old);
        assert_ptr_equal(f->released[1], mid);
        assert_int_equal(pool_free(&f->pool[0]), 48 * MIB);
        assert_int_equal(f->stats.vram_kept_released, 2);
        assert_int_equal(reuse_bytes(&f->reuse, 1), 16 * MIB);
        /* Enough room already: nothing more goes. */
        assert_false(reuse_make_room(&f->reuse, &f->pool[0], 48 * MIB, false));
}

static void test_pool_take_releases_kept_when_short(void **state)
{
        fixture *f = *state;
        gmd_mem *m = vram(f, 0, 60 * MIB);

        reuse_keep(&f->reuse, &f->a, m);
        assert_int_equal(reuse_pool_take(&f->reuse, &f->pool[0], 8 * MIB), 0);
        assert_int_equal(f->n_released, 1);
        assert_int_equal(f->pool[0].used, 8 * MIB);
        /* More than the whole pool: -ENOSPC, nothing taken. */
        assert_int_equal(reuse_pool_take(&f->reuse, &f->pool[0], 64 * MIB), -ENOSPC);
        assert_int_equal(f->pool[0].used, 8 * MIB);
}

static void test_trim_keeps_newest_out(void **state)
{
        fixture *f = *state;
        gmd_mem *m1 = vram(f, 0, 4 * MIB), *m2 = vram(f, 0, 4 * MIB);
        gmd_mem *m3 = vram(f, 0, 4 * MIB), *other = vram(f, 0, 2 * MIB);

        reuse_keep(&f->reuse, &f->a, m1);
        reuse_keep(&f->reuse, &f->a, m2);
        reuse_keep(&f->reuse, &f->a, other);
        reuse_keep(&f->reuse, &f->a, m3);
        /* One buffer of that size still out: the newest one stays. */
        reuse_trim(&f->reuse, &f->a, 0, 4 * MIB, 1);
        assert_int_equal(f->n_released, 2);
        assert_ptr_equal(f->released[0], m2);
        assert_ptr_equal(f->released[1], m1);
        assert_int_equal(f->a.kept_bytes, 6 * MIB);
        assert_ptr_equal(reuse_take(&f->reuse, &f->a, 0, 4 * MIB, false), m3);
        f->released[f->n_released++] = m3;
}

static void test_forget(void **state)
{
        fixture *f = *state;

        reuse_keep(&f->reuse, &f->a, vram(f, 0, 2 * MIB));
        reuse_keep(&f->reuse, &f->b, vram(f, 1, 2 * MIB));
        reuse_keep(&f->reuse, &f->a, vram(f, 1, 2 * MIB));
        reuse_forget(&f->reuse, &f->a);
        assert_int_equal(f->n_released, 2);
        assert_int_equal(f->a.kept_bytes, 0);
        assert_int_equal(f->b.kept_bytes, 2 * MIB);
        assert_int_equal(reuse_bytes(&f->reuse, 0), 0);
        assert_int_equal(reuse_bytes(&f->reuse, 1), 2 * MIB);
}

/* ---- VRAM its owner still maps (a tag) ---------------------------------- */

static void test_mapped_kept_for_its_buffer_only(void **state)
{
        fixture *f = *state;
        gmd_mem *m = vram(f, 0, 8 * MIB);

        reuse_keep_mapped(&f->reuse, &f->a, m, &buffer_x, false);
        assert_int_equal(reuse_bytes(&f->reuse, 0), 8 * MIB);
        assert_int_equal(f->a.kept_bytes, 8 * MIB);
        /* Not another owner's; not as a buffer's own for another buffer. */
        assert_null(reuse_take(&f->reuse, &f->b, 0, 8 * MIB, false));
        assert_null(reuse_take_mapped(&f->reuse, &buffer_y));
        assert_ptr_equal(reuse_take_mapped(&f->reuse, &buffer_x), m);
        assert_null(reuse_take_mapped(&f->reuse, &buffer_x));
        assert_int_equal(f->stats.vram_reused, 1);
        assert_int_equal(f->stats.vram_reused_mapped, 1);
        assert_int_equal(reuse_bytes(&f->reuse, 0), 0);
        assert_int_equal(f->n_asked, 0);
        f->released[f->n_released++] = m;
}

static void test_take_prefers_plain_then_unmaps_mapped(void **state)
{
        fixture *f = *state;
        gmd_mem *m = vram(f, 0, 8 * MIB), *plain = vram(f, 0, 8 * MIB);

        reuse_keep_mapped(&f->reuse, &f->a, m, &buffer_x, false);
        reuse_keep(&f->reuse, &f->a, plain);
        /* An allocation or another buffer's swap-in of the same owner:
         * plain kept memory first, at once. */
        assert_ptr_equal(reuse_take(&f->reuse, &f->a, 0, 8 * MIB, false), plain);
        assert_int_equal(f->n_asked, 0);
        /* Then x's: x's owner is told to unmap it there, and nobody
         * waits. */
        assert_ptr_equal(reuse_take(&f->reuse, &f->a, 0, 8 * MIB, false), m);
        assert_int_equal(f->n_asked, 1);
        assert_ptr_equal(f->asked[0], &buffer_x);
        assert_int_equal(reuse_unmapping_bytes(&f->reuse, 0, NULL), 0);
        assert_null(reuse_take_mapped(&f->reuse, &buffer_x));
        /* Its late ack finds nothing to release. */
        reuse_unmapped(&f->reuse, &buffer_x);
        assert_int_equal(f->n_released, 0);
        f->released[f->n_released++] = m;
        f->released[f->n_released++] = plain;
}

/* Buffer x on its way back (a swap-in queued, an acquire waiting) keeps
 * the VRAM it maps: another take of the owner finds none, asks nothing. */
static bool x_coming_back(void *ctx, const void *tag)
{
        (void)ctx;
        return tag == &buffer_x;
}

static void test_take_leaves_mapped_of_buffer_coming_back(void **state)
{
        fixture *f = *state;
        gmd_mem *x = vram(f, 0, 8 * MIB), *y = vram(f, 0, 8 * MIB);

        f->reuse.coming_back = x_coming_back;
        reuse_keep_mapped(&f->reuse, &f->a, x, &buffer_x, false);
        reuse_keep_mapped(&f->reuse, &f->a, y, &buffer_y, false);
        /* x is older, so it would go first; y's is taken instead. */
        assert_ptr_equal(reuse_take(&f->reuse, &f->a, 0, 8 * MIB, false), y);
        assert_int_equal(f->n_asked, 1);
        assert_ptr_equal(f->asked[0], &buffer_y);
        assert_null(reuse_take(&f->reuse, &f->a, 0, 8 * MIB, false));
        assert_int_equal(f->n_asked, 1);
        /* Where the pool is short, x's is taken after all: making room
         * would ask it back anyway. */
        assert_ptr_equal(reuse_take(&f->reuse, &f->a, 0, 8 * MIB, true), x);
        assert_int_equal(f->n_asked, 2);
        assert_ptr_equal(f->asked[1], &buffer_x);
        f->released[f->n_released++] = x;
        f->released[f->n_released++] = y;
}

/* Making room asks back the VRAM of buffers on their way back last. */
static void test_make_room_asks_coming_back_last(void **state)
{
        fixture *f = *state;
        gmd_mem *x = vram(f, 0, 32 * MIB), *y = vram(f, 0, 32 * MIB);

        f->reuse.coming_back = x_coming_back;
        reuse_keep_mapped(&f->reuse, &f->a, x, &buffer_x, false);
        reuse_keep_mapped(&f->reuse, &f->a, y, &buffer_y, false);
        /* The pool is full: 32 MiB wanted. x is older, y is asked. */
        assert_true(reuse_make_room(&f->reuse, &f->pool[0], 32 * MIB, false));
        assert_int_equal(f->n_asked, 1);
        assert_ptr_equal(f->asked[0], &buffer_y);
        /* Wanting it all asks x's too. */
        assert_true(reuse_make_room(&f->reuse, &f->pool[0], 64 * MIB, false));
        assert_int_equal(f->n_asked, 2);
        assert_ptr_equal(f->asked[1], &buffer_x);
}

static void test_make_room_asks_mapped_back(void **state)
{
        fixture *f = *state;
        gmd_mem *plain = vram(f, 0, 16 * MIB), *m = vram(f, 0, 16 * MIB);

        assert_int_equal(pool_take(&f->pool[0], 32 * MIB), 0);
        reuse_keep(&f->reuse, &f->a, plain);
        reuse_keep_mapped(&f->reuse, &f->a, m, &buffer_x, false);
        /* 32 MiB wanted: the plain one goes at once, the mapped one is
         * asked back and counts as on its way. */
        assert_true(reuse_make_room(&f->reuse, &f->pool[0], 32 * MIB, false));
        assert_int_equal(f->n_released, 1);
        assert_ptr_equal(f->released[0], plain);
        assert_int_equal(f->n_asked, 1);
        assert_ptr_equal(f->asked[0], &buffer_x);
        assert_int_equal(f->stats.vram_unmaps_asked, 1);
        assert_int_equal(pool_free(&f->pool[0]), 16 * MIB);
        assert_int_equal(reuse_unmapping_bytes(&f->reuse, 0, NULL), 16 * MIB);
        /* Asked once; not taken while the owner unmaps it. */
        assert_false(reuse_make_room(&f->reuse, &f->pool[0], 32 * MIB, false));
        assert_int_equal(f->n_asked, 1);
        assert_null(reuse_take_mapped(&f->reuse, &buffer_x));
        /* An ask older than the daemon's patience is not counted on, and
         * then no longer stops make_room from looking further. */
        f->reuse.ask_timeout_ms = 0;
        harness_sleep_ms_unit(2);
        assert_int_equal(reuse_unmapping_bytes(&f->reuse, 0, NULL), 0);
        f->reuse.ask_timeout_ms = 2000;
        /* The ack. */
        reuse_unmapped(&f->reuse, &buffer_x);
        assert_int_equal(f->n_released, 2);
        assert_ptr_equal(f->released[1], m);
        assert_int_equal(pool_free(&f->pool[0]), 32 * MIB);
        assert_int_equal(reuse_unmapping_bytes(&f->reuse, 0, NULL), 0);
        assert_int_equal(reuse_bytes(&f->reuse, 0), 0);
}

/* Plain kept memory goes before memory a buffer still maps; memory asked
 * back already counts as on its way for the evictor (`now` false), not
 * for a request that takes the room at once. */
static void test_make_room_plain_first_and_now(void **state)
{
        fixture *f = *state;
        gmd_mem *m = vram(f, 0, 16 * MIB), *p1 = vram(f, 0, 16 * MIB);
        gmd_mem *p2 = vram(f, 0, 16 * MIB);

        assert_int_equal(pool_take(&f->pool[0], 16 * MIB), 0);
        reuse_keep_mapped(&f->reuse, &f->a, m, &buffer_x, false);    /* oldest */
        reuse_keep(&f->reuse, &f->b, p1);
        reuse_keep(&f->reuse, &f->b, p2);
        assert_true(reuse_make_room(&f->reuse, &f->pool[0], 16 * MIB, false));
        assert_int_equal(f->n_released, 1);
        assert_ptr_equal(f->released[0], p1);
        assert_int_equal(f->n_asked, 0);
        /* 32 MiB: p2 goes, and x's is asked for the rest. */
        assert_true(reuse_make_room(&f->reuse, &f->pool[0], 48 * MIB, false));
        assert_int_equal(f->n_released, 2);
        assert_int_equal(f->n_asked, 1);
        assert_int_equal(pool_free(&f->pool[0]), 32 * MIB);
        /* With x's on its way the evictor needs nothing more; a request
         * taking 48 MiB now has nothing more to release either. */
        assert_false(reuse_make_room(&f->reuse, &f->pool[0], 48 * MIB, false));
        assert_false(reuse_make_room(&f->reuse, &f->pool[0], 48 * MIB, true));
        reuse_unmapped(&f->reuse, &buffer_x);
        assert_int_equal(pool_free(&f->pool[0]), 48 * MIB);
}

static void test_make_room_now_releases_plain_despite_asks(void **state)
{
        fixture *f = *state;
        gmd_mem *m = vram(f, 0, 16 * MIB), *p = vram(f, 0, 16 * MIB);

        assert_int_equal(pool_take(&f->pool[0], 32 * MIB), 0);
        reuse_keep_mapped(&f->reuse, &f->a, m, &buffer_x, false);
        /* Only x's is kept: asked back for the evictor. */
        assert_true(reuse_make_room(&f->reuse, &f->pool[0], 16 * MIB, false));
        assert_int_equal(f->n_asked, 1);
        reuse_keep(&f->reuse, &f->b, p);
        /* The evictor counts x's as coming; an allocation that wants the
         * room now gets p's at once rather than wait for x's owner. */
        assert_false(reuse_make_room(&f->reuse, &f->pool[0], 16 * MIB, false));
        assert_int_equal(reuse_pool_take(&f->reuse, &f->pool[0], 16 * MIB), 0);
        assert_int_equal(f->n_released, 1);
        assert_ptr_equal(f->released[0], p);
        assert_int_equal(f->n_asked, 1);
        reuse_unmapped(&f->reuse, &buffer_x);
        pool_give(&f->pool[0], 16 * MIB);
}

static void test_mapped_released_when_it_cannot_be_asked(void **state)
{
        fixture *f = *state;
        gmd_mem *m = vram(f, 0, 8 * MIB), *n = vram(f, 0, 8 * MIB);

        /* The ask cannot be sent: released at once. */
        f->ask_result = -EPIPE;
        reuse_keep_mapped(&f->reuse, &f->a, m, &buffer_x, false);
        assert_true(reuse_make_room(&f->reuse, &f->pool[0], 64 * MIB, false));
        assert_int_equal(f->n_released, 1);
        assert_int_equal(reuse_unmapping_bytes(&f->reuse, 0, NULL), 0);
        /* An owner gone: nothing to ask, nothing kept. */
        f->ask_result = 0;
        f->b.gone = true;
        reuse_keep_mapped(&f->reuse, &f->b, n, &buffer_y, false);
        assert_int_equal(f->n_released, 2);
        assert_int_equal(f->n_asked, 0);
        assert_int_equal(reuse_bytes(&f->reuse, 0), 0);
}

/* One entry released (its owner is gone, so nothing to ask): that room is
 * in the pool at once and must not also count as on its way, or the rest
 * would not be asked for. */
static void test_make_room_counts_a_release_once(void **state)
{
        fixture *f = *state;
        gmd_mem *m = vram(f, 0, 16 * MIB), *n = vram(f, 0, 16 * MIB);

        assert_int_equal(pool_take(&f->pool[0], 32 * MIB), 0);
        reuse_keep_mapped(&f->reuse, &f->a, m, &buffer_x, false);
        reuse_keep_mapped(&f->reuse, &f->b, n, &buffer_y, false);
        f->a.gone = true;
        assert_true(reuse_make_room(&f->reuse, &f->pool[0], 32 * MIB, false));
        assert_int_equal(f->n_released, 1);
        assert_ptr_equal(f->released[0], m);
        assert_int_equal(f->n_asked, 1);
        assert_ptr_equal(f->asked[0], &buffer_y);
        reuse_unmapped(&f->reuse, &buffer_y);
        assert_int_equal(pool_free(&f->pool[0]), 32 * MIB);
}

/* An ask past ask_timeout_ms is not counted on: make_room asks the next. */
static void test_make_room_looks_past_an_unanswered_ask(void **state)
{
        fixture *f = *state;
        gmd_mem *m = vram(f, 0, 16 * MIB), *n = vram(f, 0, 16 * MIB);

        assert_int_equal(pool_take(&f->pool[0], 32 * MIB), 0);
        reuse_keep_mapped(&f->reuse, &f->a, m, &buffer_x, false);
        reuse_keep_mapped(&f->reuse, &f->b, n, &buffer_y, false);
        assert_true(reuse_make_room(&f->reuse, &f->pool[0], 16 * MIB, false));
        assert_int_equal(f->n_asked, 1);
        assert_false(reuse_make_room(&f->reuse, &f->pool[0], 16 * MIB, false));
        f->reuse.ask_timeout_ms = 0;
        harness_sleep_ms_unit(2);
        assert_true(reuse_make_room(&f->reuse, &f->pool[0], 16 * MIB, false));
        assert_int_equal(f->n_asked, 2);
        assert_ptr_equal(f->asked[1], &buffer_y);
        /* Unanswered past the timeout, both count as kept but not as
         * reachable room. */
        harness_sleep_ms_unit(2);
        assert_int_equal(reuse_bytes(&f->reuse, 0), 32 * MIB);
        assert_int_equal(reuse_reachable_bytes(&f->reuse, 0), 0);
        reuse_unmapped(&f->reuse, &buffer_x);
        reuse_unmapped(&f->reuse, &buffer_y);
        assert_int_equal(f->n_released, 2);
}

/* Kept with its room wanted (requests came to wait while it moved out):
 * asked back at once. */
static void test_keep_mapped_wanted_is_asked_at_once(void **state)
{
        fixture *f = *state;
        gmd_mem *m = vram(f, 0, 8 * MIB);

        reuse_keep_mapped(&f->reuse, &f->a, m, &buffer_x, true);
        assert_int_equal(f->n_asked, 1);
        assert_int_equal(reuse_unmapping_bytes(&f->reuse, 0, NULL), 8 * MIB);
        assert_null(reuse_take_mapped(&f->reuse, &buffer_x));
        reuse_unmapped(&f->reuse, &buffer_x);
        assert_int_equal(f->n_released, 1);
}

static void test_mapped_asked_back_when_keeping_is_off(void **state)
{
        fixture *f = *state;
        gmd_mem *m = vram(f, 0, 8 * MIB), *n = vram(f, 0, 8 * MIB);

        reuse_keep_mapped(&f->reuse, &f->a, m, &buffer_x, false);
        /* A reload turns keeping off: forget asks, not releases. */
        f->reuse.enabled = false;
        assert_false(reuse_keeps(&f->reuse, &f->a));
        reuse_forget(&f->reuse, &f->a);
        assert_int_equal(f->n_released, 0);
        assert_int_equal(f->n_asked, 1);
        /* A move out that ends after the reload: asked at once. */
        reuse_keep_mapped(&f->reuse, &f->a, n, &buffer_y, false);
        assert_int_equal(f->n_asked, 2);
        assert_ptr_equal(f->asked[1], &buffer_y);
        assert_int_equal(reuse_unmapping_bytes(&f->reuse, 0, NULL), 16 * MIB);
        reuse_unmapped(&f->reuse, &buffer_x);
        reuse_unmapped(&f->reuse, &buffer_y);
        assert_int_equal(f->n_released, 2);
        assert_int_equal(reuse_bytes(&f->reuse, 0), 0);
}

static void test_ack_releases_only_what_was_asked(void **state)
{
        fixture *f = *state;
        gmd_mem *old = vram(f, 0, 8 * MIB), *now = vram(f, 0, 8 * MIB);

        /* Asked back, then the buffer came in (other VRAM) and went out
         * again, leaving `now` mapped: the late ack is about `old`. */
        reuse_keep_mapped(&f->reuse, &f->a, old, &buffer_x, false);
        assert_true(reuse_make_room(&f->reuse, &f->pool[0], 64 * MIB, false));
        reuse_keep_mapped(&f->reuse, &f->a, now, &buffer_x, false);
        reuse_unmapped(&f->reuse, &buffer_x);
        assert_int_equal(f->n_released, 1);
        assert_ptr_equal(f->released[0], old);
        assert_ptr_equal(reuse_take_mapped(&f->reuse, &buffer_x), now);
        f->released[f->n_released++] = now;
}

static void test_buffer_gone_releases_all_of_it(void **state)
{
        fixture *f = *state;
        gmd_mem *old = vram(f, 0, 8 * MIB), *now = vram(f, 0, 8 * MIB);
        gmd_mem *other = vram(f, 0, 8 * MIB);

        reuse_keep_mapped(&f->reuse, &f->a, old, &buffer_x, false);
        assert_true(reuse_make_room(&f->reuse, &f->pool[0], 48 * MIB, false));
        reuse_keep_mapped(&f->reuse, &f->a, now, &buffer_x, false);
        reuse_keep_mapped(&f->reuse, &f->a, other, &buffer_y, false);
        reuse_buffer_gone(&f->reuse, &buffer_x);
        assert_int_equal(f->n_released, 2);
        assert_int_equal(reuse_unmapping_bytes(&f->reuse, 0, NULL), 0);
        assert_int_equal(reuse_bytes(&f->reuse, 0), 8 * MIB);
        assert_ptr_equal(reuse_take_mapped(&f->reuse, &buffer_y), other);
        f->released[f->n_released++] = other;
}

static void test_trim_counts_mapped_as_out(void **state)
{
        fixture *f = *state;
        gmd_mem *m = vram(f, 0, 4 * MIB), *p1 = vram(f, 0, 4 * MIB);
        gmd_mem *p2 = vram(f, 0, 4 * MIB);

        reuse_keep(&f->reuse, &f->a, p1);
        reuse_keep_mapped(&f->reuse, &f->a, m, &buffer_x, false);
        reuse_keep(&f->reuse, &f->a, p2);
        /* Two buffers out: one is x, whose mapped VRAM stays; of the
         * others only the newest stays. */
        reuse_trim(&f->reuse, &f->a, 0, 4 * MIB, 2);
        assert_int_equal(f->n_released, 1);
        assert_ptr_equal(f->released[0], p1);
        /* None out: the mapped one still stays (its buffer owns it until
         * freed or moved in); the plain one goes. */
        reuse_trim(&f->reuse, &f->a, 0, 4 * MIB, 0);
        assert_int_equal(f->n_released, 2);
        assert_ptr_equal(f->released[1], p2);
        assert_int_equal(f->a.kept_bytes, 4 * MIB);
}

/* VRAM asked back is no longer its buffer's: with one buffer out, the
 * plain allocation stays for it. */
static void test_trim_does_not_count_asked_back(void **state)
{
        fixture *f = *state;
        gmd_mem *m = vram(f, 0, 4 * MIB), *p = vram(f, 0, 4 * MIB);

        reuse_keep_mapped(&f->reuse, &f->a, m, &buffer_x, true);
        reuse_keep(&f->reuse, &f->a, p);
        reuse_trim(&f->reuse, &f->a, 0, 4 * MIB, 1);
        assert_int_equal(f->n_released, 0);
        reuse_unmapped(&f->reuse, &buffer_x);
        assert_ptr_equal(reuse_take(&f->reuse, &f->a, 0, 4 * MIB, false), p);
        f->released[f->n_released++] = p;
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_take_leaves_mapped_of_buffer_coming_back,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_make_room_asks_coming_back_last,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_keep_and_take_same_owner_only,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_not_kept_when_off_gone_or_unmappable,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_make_room_oldest_first_on_its_device,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_pool_take_releases_kept_when_short,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_trim_keeps_newest_out,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_forget, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mapped_kept_for_its_buffer_only,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_take_prefers_plain_then_unmaps_mapped,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_make_room_asks_mapped_back,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_make_room_plain_first_and_now,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_make_room_now_releases_plain_despite_asks,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_mapped_released_when_it_cannot_be_asked,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_make_room_counts_a_release_once,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_make_room_looks_past_an_unanswered_ask,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_keep_mapped_wanted_is_asked_at_once,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_mapped_asked_back_when_keeping_is_off,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_ack_releases_only_what_was_asked,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_buffer_gone_releases_all_of_it,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_trim_counts_mapped_as_out,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_trim_does_not_count_asked_back,
                                                setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
