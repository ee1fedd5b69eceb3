/*
 * test_session — daemon/core/session.c's reading on its own: real sockets
 * (socketpairs) and a libuv loop, a server record with no backend, and a
 * packet handler that counts, takes as long as it is told, or marks its
 * session to be closed. Nothing more is read from a session marked to be
 * closed (a reply flood's requests were handled, status replies built,
 * after its connection was condemned); a user whose requests take longer
 * than its quantum of a loop turn is read no further that turn, while
 * another user's request is read in the same turn, and its requests are
 * all read over the following turns (users.h; the load test, tests/load).
 * The users' turns charge time by a clock of the test's (fake_clock), which
 * only the handler moves: a request costs exactly what the test says, on
 * an idle machine or a loaded one. A packet that cannot be queued
 * closes its connection rather than going missing.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "config.h"
#include "gpumem.pb-c.h"
#include "listener.h"
#include "server.h"
#include "session.h"
#include "session_io.h"
#include "users.h"
#include "wire.h"

#define QUANTUM_NS (100 * 1000)      /* [limits] user_turn_us's default */

typedef struct fixture {
        uv_loop_t loop;
        gmd_server *server;
        int peer[2];
        gmd_session *s[2];
        unsigned handled[2];
        uint64_t cost_ns[2];        /* each packet of that session takes */
        bool close_on_first;
} fixture;

static fixture *current;
static uint64_t fake_now_ns;

static uint64_t fake_clock(void)
{
        return fake_now_ns;
}

static void on_packet(gmd_session *s, gmd_wire_packet *packet)
{
        fixture *f = current;
        unsigned i = s == f->s[0] ? 0 : 1;

        (void)packet;
        f->handled[i]++;
        fake_now_ns += f->cost_ns[i];
        if (f->close_on_first)
                session_close_later(s, "told to");
}

static void on_closed(gmd_session *s)
{
        (void)s;
}

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));

        assert_non_null(f);
        assert_int_equal(uv_loop_init(&f->loop), 0);
        f->server = calloc(1, sizeof(*f->server));
        assert_non_null(f->server);
        f->server->loop = &f->loop;
        config_init_defaults(&f->server->config);
        list_init(&f->server->sessions.all);
        list_init(&f->server->sessions.close_pending);
        users_init(&f->server->users, QUANTUM_NS);
        f->server->users.clock_ns = fake_clock;
        assert_int_equal(listener_new(f->server, on_packet,
                                      &f->server->listener), 0);
        f->server->sessions.on_closed = on_closed;
        for (int i = 0; i < 2; i++) {
                int sv[2];

                assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK |
                                            SOCK_CLOEXEC, 0, sv), 0);
                assert_int_equal(session_new(f->server, sv[0], &f->s[i]), 0);
                f->peer[i] = sv[1];
        }
        current = f;
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;

        for (int i = 0; i < 2; i++) {
                session_close(f->s[i], NULL);
                close(f->peer[i]);
        }
        uv_run(&f->loop, UV_RUN_NOWAIT);
        assert_int_equal(f->server->users.n, 0);
        assert_int_equal(uv_loop_close(&f->loop), 0);
        f->server->listener = listener_free(f->server->listener);
        free(f->server);
        free(f);
        return 0;
}

/* Give session `i` to user `uid` (both socketpairs are the test's). */
static void as_user(fixture *f, int i, uid_t uid)
{
        gmd_session *s = f->s[i];

        s->user->n_sessions--;
        users_release(&f->server->users, s->user);
        s->user = users_hold(&f->server->users, uid);
        s->user->n_sessions++;
        s->uid = uid;
}

static void send_packets(fixture *f, int i, unsigned n)
{
        uint8_t payload[8] = { 0 };

        for (unsigned k = 0; k < n; k++)
                assert_int_equal(gmd_wire_send(f->peer[i], GMD__MSG_TYPE__MSG_STATUS,
                                               k + 1, payload, sizeof(payload),
                                               NULL, 0), 0);
}

/* One loop turn: the sockets' callbacks, then the next turn begins. */
static void turn(fixture *f)
{
        uv_run(&f->loop, UV_RUN_NOWAIT);
        users_next_turn(&f->server->users);
}

static void test_nothing_read_after_close_later(void **state)
{
        fixture *f = *state;

        f->close_on_first = true;
        send_packets(f, 0, 5);
        turn(f);
        assert_int_equal(f->handled[0], 1);
        assert_true(f->s[0]->close_pending);
}

/* A packet the daemon cannot queue is lost, and nothing in the protocol
 * would tell the client: its connection is closed instead. Here the peer
 * reads nothing, so packets queue, and the next one's fd cannot be kept. */
static void test_unqueued_packet_closes(void **state)
{
        fixture *f = *state;
        gmd_session *s = f->s[0];
        Gmd__RemapNotify note = GMD__REMAP_NOTIFY__INIT;
        struct rlimit old, low;
        unsigned sent = 0;
        int r;

        note.buffer_id = 7;
        while (list_empty(&session_io(s)->sendq)) {
                assert_int_equal(session_send(s, GMD__MSG_TYPE__MSG_REMAP, 0,
                                              &note.base, NULL, 0), 0);
                assert_true(++sent < 100000);
        }
        assert_false(s->close_pending);
        assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
        low = old;
        low.rlim_cur = 3;        /* no fd can be duplicated at 3 or above */
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
        r = session_send(s, GMD__MSG_TYPE__MSG_REMAP, 0, &note.base,
                         &f->peer[1], 1);
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
        assert_true(r < 0);
        assert_true(s->close_pending);
        assert_non_null(strstr(s->close_reason, "could not keep an fd"));
        /* Nothing more goes out on a condemned connection. */
        assert_int_equal(session_send(s, GMD__MSG_TYPE__MSG_REMAP, 0,
                                      &note.base, NULL, 0), -ECONNRESET);
}

/* A peer that only shut its reading side sends no hang-up: the packet
 * the send lost closes the connection. */
static void test_peer_not_reading_closes(void **state)
{
        fixture *f = *state;
        Gmd__RemapNotify note = GMD__REMAP_NOTIFY__INIT;

        assert_int_equal(shutdown(f->peer[0], SHUT_RD), 0);
        assert_int_equal(session_send(f->s[0], GMD__MSG_TYPE__MSG_REMAP, 0,
                                      &note.base, NULL, 0), -EPIPE);
        assert_true(f->s[0]->close_pending);
        assert_false(f->s[1]->close_pending);
}

static void test_users_take_turns(void **state)
{
        fixture *f = *state;
        unsigned turns = 0;

        as_user(f, 0, 2000);
        as_user(f, 1, 2001);
        /* Each of user 2000's requests takes half a quantum. */
        f->cost_ns[0] = QUANTUM_NS / 2;
        send_packets(f, 0, 8);
        send_packets(f, 1, 1);
        turn(f);
        /* A quantum a turn: two of its requests, not all eight. */
        assert_int_equal(f->handled[0], 2);
        assert_int_equal(f->handled[1], 1);
        assert_true(f->s[0]->user->deferred > 0);
        while (f->handled[0] < 8 && turns < 100) {
                send_packets(f, 1, 1);
                turn(f);
                turns++;
                /* The other user is read at every turn. */
                assert_int_equal(f->handled[1], 1 + turns);
        }
        assert_int_equal(f->handled[0], 8);
        /* The six left, two a turn. */
        assert_int_equal(turns, 3);
}

/* Alone, a user is read at every turn: the turns only share. */
static void test_alone_reads_everything(void **state)
{
        fixture *f = *state;

        /* (A socketpair holds about ten packets unread.) */
        send_packets(f, 0, 8);
        turn(f);
        assert_int_equal(f->handled[0], 8);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_nothing_read_after_close_later,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_unqueued_packet_closes,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_peer_not_reading_closes,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_users_take_turns, setup, teardown),
                cmocka_unit_test_setup_teardown(test_alone_reads_everything, setup,
                                                teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
