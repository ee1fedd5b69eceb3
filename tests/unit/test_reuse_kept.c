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
} fixture;

static void release(void *ctx, gmd_mem *mem)
{
        fixture *f = ctx;

        pool_give(&f->pool[mem->device], mem->size);
        f->released[f->n_released++] = mem;
}

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));

        assert_non_null(f);
        pool_init(&f->pool[0], 0, GMD_TIER_VRAM, 64 * MIB, 2 * MIB);
        pool_init(&f->pool[1], 1, GMD_TIER_VRAM, 64 * MIB, 2 * MIB);
        reuse_init(&f->reuse, true, &f->stats, release, f);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;

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
        assert_null(reuse_take(&f->reuse, &f->b, 0, 8 * MIB));
        assert_null(reuse_take(&f->reuse, &f->a, 0, 4 * MIB));
        assert_null(reuse_take(&f->reuse, &f->a, 1, 8 * MIB));
        got = reuse_take(&f->reuse, &f->a, 0, 8 * MIB);
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
        assert_true(reuse_make_room(&f->reuse, &f->pool[0], 40 * MIB));
        assert_int_equal(f->n_released, 2);
        assert_ptr_equal(f->released[0], old);
        assert_ptr_equal(f->released[1], mid);
        assert_int_equal(pool_free(&f->pool[0]), 48 * MIB);
        assert_int_equal(f->stats.vram_kept_released, 2);
        assert_int_equal(reuse_bytes(&f->reuse, 1), 16 * MIB);
        /* Enough room already: nothing more goes. */
        assert_false(reuse_make_room(&f->reuse, &f->pool[0], 48 * MIB));
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
        assert_ptr_equal(reuse_take(&f->reuse, &f->a, 0, 4 * MIB), m3);
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

int main(void)
{
        const struct CMUnitTest tests[] = {
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
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
