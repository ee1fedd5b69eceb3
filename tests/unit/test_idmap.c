/*
 * test_idmap — common/idmap.c: the id -> pointer map every buffer lookup
 * goes through. Checked against a plain array as the model, across growth
 * and removals that exercise backward-shift deletion.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "idmap.h"

static void test_put_get_remove(void **state)
{
        gmd_idmap map;
        int a, b;

        idmap_init(&map);
        assert_null(idmap_get(&map, 1));
        assert_int_equal(idmap_put(&map, 1, &a), 0);
        assert_int_equal(idmap_put(&map, 2, &b), 0);
        assert_int_equal(idmap_put(&map, 1, &b), -EEXIST);
        assert_int_equal(idmap_put(&map, 0, &b), -EINVAL);
        assert_ptr_equal(idmap_get(&map, 1), &a);
        assert_ptr_equal(idmap_get(&map, 2), &b);
        assert_ptr_equal(idmap_remove(&map, 1), &a);
        assert_null(idmap_get(&map, 1));
        assert_null(idmap_remove(&map, 1));
        assert_ptr_equal(idmap_get(&map, 2), &b);
        assert_int_equal(map.count, 1);
        idmap_clear(&map);
}

/* Many ids, every other one removed, then the rest re-checked: a wrong
 * backward shift loses entries that probed past a removed slot. */
static void test_against_model(void **state)
{
        enum { N = 20000 };
        static char values[N + 1];
        gmd_idmap map;

        idmap_init(&map);
        for (uint64_t id = 1; id <= N; id++)
                assert_int_equal(idmap_put(&map, id * 7919, &values[id]), 0);
        assert_int_equal(map.count, N);
        for (uint64_t id = 1; id <= N; id += 2)
                assert_ptr_equal(idmap_remove(&map, id * 7919), &values[id]);
        for (uint64_t id = 1; id <= N; id++) {
                void *want = (id % 2) ? NULL : &values[id];

                assert_ptr_equal(idmap_get(&map, id * 7919), want);
        }
        /* Re-insert into a table full of shifted runs. */
        for (uint64_t id = 1; id <= N; id += 2)
                assert_int_equal(idmap_put(&map, id * 7919, &values[id]), 0);
        for (uint64_t id = 1; id <= N; id++)
                assert_ptr_equal(idmap_get(&map, id * 7919), &values[id]);
        assert_int_equal(map.count, N);
        idmap_clear(&map);
        assert_null(idmap_get(&map, 7919));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_put_get_remove),
                cmocka_unit_test(test_against_model),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
