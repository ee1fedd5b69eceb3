/*
 * test_move_state — the move's state machine (daemon/core/move.h): every legal
 * change is taken, every other one refused with the state left as it was,
 * and the final states lead nowhere.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "move.h"

#define N_STATES (MOVE_DROPPED + 1)

/* The table of move.h, written out again: what each state may become. */
static const move_state legal[][6] = {
        [MOVE_COPYING] = { MOVE_COPYING_ACKED, MOVE_AWAITING_ACK, MOVE_CANCELLING,
                           MOVE_ORPHANED, MOVE_DROPPED, MOVE_COPYING },
        [MOVE_COPYING_ACKED] = { MOVE_FINISHED, MOVE_CANCELLING, MOVE_ORPHANED,
                                 MOVE_DROPPED, MOVE_COPYING_ACKED },
        [MOVE_CANCELLING] = { MOVE_ROLLING_BACK, MOVE_ABANDONED, MOVE_ORPHANED,
                              MOVE_DROPPED, MOVE_CANCELLING },
        [MOVE_AWAITING_ACK] = { MOVE_FINISHED, MOVE_ROLLING_BACK, MOVE_DROPPED,
                                MOVE_AWAITING_ACK },
        [MOVE_ROLLING_BACK] = { MOVE_ABANDONED, MOVE_DROPPED, MOVE_ROLLING_BACK },
        [MOVE_ORPHANED] = { MOVE_DROPPED, MOVE_ORPHANED },
        [MOVE_FINISHED] = { MOVE_FINISHED },
        [MOVE_ABANDONED] = { MOVE_ABANDONED },
        [MOVE_DROPPED] = { MOVE_DROPPED },
};

/* Each row ends with its own state, which is not a change to itself. */
static bool is_legal(move_state from, move_state to)
{
        for (unsigned i = 0; i < 6; i++) {
                if (legal[from][i] == from)
                        return false;
                if (legal[from][i] == to)
                        return true;
        }
        return false;
}

static void test_every_change(void **state)
{
        unsigned taken = 0;

        (void)state;
        for (unsigned from = 0; from < N_STATES; from++) {
                for (unsigned to = 0; to < N_STATES; to++) {
                        gmd_move m;
                        bool ok;

                        memset(&m, 0, sizeof(m));
                        m.state = from;
                        m.buffer_id = 7;
                        ok = move_change_state(&m, to);
                        assert_int_equal(ok, is_legal(from, to));
                        assert_int_equal(m.state, ok ? to : from);
                        taken += ok;
                }
        }
        assert_int_equal(taken, 19);
}

static void test_names(void **state)
{
        (void)state;
        assert_string_equal(move_state_name(MOVE_COPYING), "copying");
        assert_string_equal(move_state_name(MOVE_ROLLING_BACK), "rolling-back");
        assert_string_equal(move_state_name(MOVE_DROPPED), "dropped");
}

static void test_helpers(void **state)
{
        gmd_move m;

        (void)state;
        memset(&m, 0, sizeof(m));
        m.state = MOVE_COPYING;
        m.copy.phase = COPY_ISSUED;
        assert_true(move_copying(&m));
        assert_false(move_stopping(&m));
        m.copy.status = -EIO;                   /* a chunk failed */
        assert_true(move_stopping(&m));
        m.copy.status = 0;
        m.state = MOVE_CANCELLING;
        assert_true(move_stopping(&m));
        m.copy.phase = COPY_ENDED;
        assert_false(move_copying(&m));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_every_change),
                cmocka_unit_test(test_names),
                cmocka_unit_test(test_helpers),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
