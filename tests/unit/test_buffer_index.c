/*
 * test_buffer_index — daemon/core/buffer.c's short lists, which the
 * scheduling pass reads instead of every buffer: the buffers released on
 * the VRAM tier (eviction victims come from them, evict.c) and those with
 * a move (the bytes leaving a device, move.c). Hand-made records, no
 * backend: the answers of evict_evictable and move_leaving_bytes follow
 * every change of lease, parking, move and tier, and buffers held in use
 * are in neither list — however many there are, a pass with a waiter
 * nothing can make room for does not walk them (the load test, tests/load: an
 * fd flood of 10,000 buffers and a request for the whole pool made every
 * pass walk them three times).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "buffer.h"
#include "evict.h"
#include "move.h"
#include "server.h"
#include "session.h"

#include "fake_mover.h"

#define MiB (UINT64_C(1) << 20)
#define N 64

typedef struct fixture {
        gmd_server *server;
        gmd_session owner;
        gmd_dbuffer b[N];
} fixture;

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));

        assert_non_null(f);
        f->server = calloc(1, sizeof(*f->server));
        assert_non_null(f->server);
        f->server->backend = &fake_mover;
        f->server->devices.n = 1;
        pool_init(&f->server->host.pool, 0, GMD_TIER_HOST, 1024 * MiB, 2 * MiB);
        list_init(&f->server->buffers.all);
        list_init(&f->server->buffers.moving);
        list_init(&f->server->buffers.vram_idle);
        f->owner.server = f->server;
        list_init(&f->owner.buffers);
        for (int i = 0; i < N; i++) {
                gmd_dbuffer *b = &f->b[i];

                b->id = (uint64_t)i + 1;
                b->owner = &f->owner;
                b->size = MiB;
                b->tier = GMD_TIER_VRAM;
                b->state = GMD_STATE_RESIDENT;
                b->mem = &fake_vram_mem;
                b->acquired = true;         /* as buffer_new hands it out */
                list_add_tail(&f->server->buffers.all, &b->server_link);
                list_init(&b->moving_link);
                list_init(&b->idle_link);
        }
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;

        free(f->server);
        free(f);
        return 0;
}

static size_t length(const gmd_list *list)
{
        const gmd_list *pos;
        size_t n = 0;

        list_for_each(pos, list)
                n++;
        return n;
}

static void test_held_buffers_are_in_no_list(void **state)
{
        fixture *f = *state;

        assert_int_equal(length(&f->server->buffers.vram_idle), 0);
        assert_int_equal(length(&f->server->buffers.moving), 0);
        assert_int_equal(evict_evictable(f->server, 0), 0);
        assert_int_equal(move_leaving_bytes(f->server, 0), 0);
}

static void test_lease_changes(void **state)
{
        fixture *f = *state;

        buffer_set_acquired(&f->b[3], false);
        buffer_set_acquired(&f->b[7], false);
        assert_int_equal(length(&f->server->buffers.vram_idle), 2);
        assert_int_equal(evict_evictable(f->server, 0), 2 * MiB);
        buffer_set_acquired(&f->b[3], true);
        assert_int_equal(evict_evictable(f->server, 0), MiB);
        buffer_set_acquired(&f->b[7], false);      /* twice: listed once */
        assert_int_equal(length(&f->server->buffers.vram_idle), 1);
        /* Another device's idle buffer is not this one's room. */
        f->b[9].device = 1;
        buffer_set_acquired(&f->b[9], false);
        assert_int_equal(evict_evictable(f->server, 0), MiB);
        assert_int_equal(evict_evictable(f->server, 1), MiB);
}

static void test_parked_is_listed_not_evictable(void **state)
{
        fixture *f = *state;

        buffer_park(&f->b[2], true);
        assert_int_equal(length(&f->server->buffers.vram_idle), 1);
        assert_int_equal(evict_evictable(f->server, 0), 0);
        buffer_park(&f->b[2], false);              /* back: acquired */
        assert_int_equal(length(&f->server->buffers.vram_idle), 0);
}

static void test_moves_and_tiers(void **state)
{
        fixture *f = *state;
        gmd_move m;
        gmd_dbuffer *b = &f->b[5];

        memset(&m, 0, sizeof(m));
        m.state = MOVE_COPYING;
        m.copy.dir = GMD_COPY_OUT;
        buffer_set_acquired(b, false);
        assert_int_equal(evict_evictable(f->server, 0), MiB);
        b->move = &m;
        b->state = GMD_STATE_MOVING_OUT;
        buffer_index(b);
        assert_int_equal(length(&f->server->buffers.moving), 1);
        assert_int_equal(move_leaving_bytes(f->server, 0), MiB);
        assert_int_equal(evict_evictable(f->server, 0), 0);
        /* Out: on host, no move, in neither list. */
        b->move = NULL;
        b->tier = GMD_TIER_HOST;
        b->state = GMD_STATE_RESIDENT;
        buffer_index(b);
        assert_int_equal(length(&f->server->buffers.moving), 0);
        assert_int_equal(length(&f->server->buffers.vram_idle), 0);
        assert_int_equal(move_leaving_bytes(f->server, 0), 0);
        /* And back in: released in VRAM again. */
        b->tier = GMD_TIER_VRAM;
        buffer_index(b);
        assert_int_equal(evict_evictable(f->server, 0), MiB);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_held_buffers_are_in_no_list,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_lease_changes, setup, teardown),
                cmocka_unit_test_setup_teardown(test_parked_is_listed_not_evictable,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_moves_and_tiers, setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
