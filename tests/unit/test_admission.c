/*
 * test_admission — a refusal on its own (dispatch/request.c's
 * request_refuse and the hang-up after it): a
 * connection that is refused (past max_clients_per_user, say) gets one
 * ErrorReply saying why and then the end of the stream, and the refusal
 * costs the daemon a few system calls, whatever the peer sent. A
 * connection flood is refused tens of thousands of times a minute on the
 * loop thread, so the drain after shutdown must stop at the end of the
 * stream, not read on to its bound (it made 256 recv calls per refusal,
 * about 120 µs, before, in the load test of tests/load). recv is counted through
 * the linker's --wrap.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "admission.h"
#include "request.h"
#include "gpumem.pb-c.h"
#include "wire.h"

static unsigned recv_calls;

ssize_t __real_recv(int fd, void *buf, size_t len, int flags);
ssize_t __wrap_recv(int fd, void *buf, size_t len, int flags);

ssize_t __wrap_recv(int fd, void *buf, size_t len, int flags)
{
        recv_calls++;
        return __real_recv(fd, buf, len, flags);
}

/* The peer's side: the ErrorReply, then the end of the stream. */
static void expect_refusal(int peer, const char *why)
{
        static uint8_t rx[GMD_WIRE_MAX_PACKET];
        gmd_wire_packet packet;
        Gmd__ErrorReply *reply;
        const char *reason = NULL;
        char byte;

        assert_int_equal(gmd_wire_recv(peer, rx, &packet, &reason), 1);
        assert_int_equal(packet.header.type, GMD__MSG_TYPE__MSG_ERROR_REPLY);
        assert_int_equal(packet.header.request_id, 0);
        reply = gmd__error_reply__unpack(NULL, packet.header.length, packet.payload);
        assert_non_null(reply);
        assert_int_equal(reply->code, GMD__ERROR_CODE__ERR_LIMIT);
        assert_string_equal(reply->message, why);
        gmd__error_reply__free_unpacked(reply, NULL);
        assert_int_equal(read(peer, &byte, 1), 0);
}

static void pair(int sv[2])
{
        assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
}

/* A silent connection: nothing to drain, one recv sees the end. */
static void test_refuse_silent(void **state)
{
        int sv[2];

        (void)state;
        pair(sv);
        recv_calls = 0;
        request_refuse(sv[0], GMD__ERROR_CODE__ERR_LIMIT, "too many");
        assert_in_range(recv_calls, 1, 2);
        expect_refusal(sv[1], "too many");
        close(sv[1]);
}

/* A connection that sent its hello (and more): each packet is drained,
 * then the end of the stream stops the drain. */
static void test_refuse_drains_what_was_sent(void **state)
{
        uint8_t payload[16] = { 0 };
        int sv[2];

        (void)state;
        pair(sv);
        for (int i = 0; i < 3; i++)
                assert_int_equal(gmd_wire_send(sv[1], GMD__MSG_TYPE__MSG_HELLO, 1,
                                               payload, sizeof(payload), NULL, 0), 0);
        recv_calls = 0;
        request_refuse(sv[0], GMD__ERROR_CODE__ERR_LIMIT, "uid 1 has 64");
        assert_in_range(recv_calls, 3, 5);
        expect_refusal(sv[1], "uid 1 has 64");
        close(sv[1]);
}

/* Many refusals in a row: a bounded number of calls each (the flood). */
static void test_refuse_flood_is_cheap(void **state)
{
        (void)state;
        recv_calls = 0;
        for (int i = 0; i < 1000; i++) {
                int sv[2];

                pair(sv);
                request_refuse(sv[0], GMD__ERROR_CODE__ERR_LIMIT, "no");
                close(sv[1]);
        }
        assert_in_range(recv_calls, 1000, 2000);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_refuse_silent),
                cmocka_unit_test(test_refuse_drains_what_was_sent),
                cmocka_unit_test(test_refuse_flood_is_cheap),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
