/*
 * test_protocol — a misbehaving client costs only its own connection.
 *
 * Each case starts a daemon, connects a well-behaved client (libgpumem, in
 * this process) that allocates a buffer and writes a pattern, and notes the
 * daemon's fd count. Then a raw socket sends one kind of bad input, built
 * with wire.h or plain sendmsg() so it is exactly as bad as intended. The
 * daemon must close that socket, log one line with "protocol error" (or
 * "not reading" for a flood) and the reason, and be unchanged afterwards:
 * same fd count, one client fewer, and the good client's bytes intact and
 * its next allocation working. Among the bad inputs: a PlanReport whose
 * planner name is too long or not printable; a ReachReport naming a
 * device the daemon does not have, listing one twice, or more devices
 * than it has (after the hello's reply asked for one).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "gpumem.pb-c.h"
#include "harness.h"
#include "wire.h"

/* f->client is the good client. */
typedef harness_fixture fixture;

/* The running test's state beside the fixture, set by setup. */
static gmd_buffer *good_buf;     /* the good client's buffer */
static int daemon_fds;           /* before the bad client connected */
static int raw = -1;             /* the bad client's socket */

#define GOOD_SIZE (4 * MiB)

static void fill(gmd_buffer *b, uint8_t seed)
{
        uint8_t *p = gmd_buffer_ptr(b);

        for (size_t i = 0; i < gmd_buffer_size(b); i++)
                p[i] = (uint8_t)(i * 7 + seed + (i >> 12));
}

static void check(const gmd_buffer *b, uint8_t seed)
{
        const uint8_t *p = gmd_buffer_ptr(b);

        for (size_t i = 0; i < gmd_buffer_size(b); i++)
                if (p[i] != (uint8_t)(i * 7 + seed + (i >> 12)))
                        fail_msg("good client's byte %zu changed", i);
}

static int setup(void **state)
{
        fixture *f;

        if (harness_setup(state) < 0)
                return -1;
        f = *state;
        raw = -1;
        /* cmocka runs no teardown after a failed setup, so a failure here
         * cleans up before it returns. */
        harness_start_small(&f->h, "[limits]\nmax_send_queue = 16\n");
        f->client = harness_client(&f->h, "good");
        if (gmd_alloc(f->client, GOOD_SIZE, 0, 0, GMD_NO_WAIT, &good_buf) < 0) {
                print_error("good client cannot allocate: %s\n",
                            gmd_last_error());
                harness_teardown(state);
                return -1;
        }
        fill(good_buf, 3);
        daemon_fds = harness_count_fds(f->h.pid);
        return 0;
}

static int teardown(void **state)
{
        if (raw >= 0)
                close(raw);
        raw = -1;
        return harness_teardown(state);
}

/* ---- the raw client ---------------------------------------------------------- */

static int raw_connect(fixture *f)
{
        raw = harness_connect_raw(&f->h);
        if (raw < 0)
                fail_msg("cannot connect to %s", f->h.socket_path);
        return raw;
}

static void raw_send(int fd, uint16_t type, const void *payload, size_t len)
{
        int r = gmd_wire_send(fd, type, 1, payload, (uint32_t)len, NULL, 0);

        if (r < 0)
                fail_msg("gmd_wire_send: %s", strerror(-r));
}

/* Receive one packet (waiting up to 2 s); returns its type. */
static uint16_t raw_recv(int fd, uint8_t *buf, gmd_wire_packet *packet)
{
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        const char *reason = NULL;
        int r;

        if (poll(&pfd, 1, 2000) != 1)
                fail_msg("no reply from the daemon within 2 s");
        r = gmd_wire_recv(fd, buf, packet, &reason);
        if (r != 1)
                fail_msg("gmd_wire_recv = %d (%s)", r, reason ? reason : "");
        gmd_wire_packet_close_fds(packet);
        return packet->header.type;
}

/* Connect and say hello properly, so what follows is judged on its own. */
static int raw_connect_hello(fixture *f)
{
        Gmd__Hello hello = GMD__HELLO__INIT;
        uint8_t out[128], *buf = malloc(GMD_WIRE_MAX_PACKET);
        gmd_wire_packet packet;
        Gmd__HelloReply *reply;
        int fd = raw_connect(f);
        size_t len;

        assert_non_null(buf);
        hello.min_version = 1;
        hello.max_version = 1;
        hello.client_name = "raw";
        len = gmd__hello__pack(&hello, out);
        raw_send(fd, GMD__MSG_TYPE__MSG_HELLO, out, len);
        assert_int_equal(raw_recv(fd, buf, &packet),
                         GMD__MSG_TYPE__MSG_HELLO_REPLY);
        assert_int_equal(packet.header.request_id, 1);
        reply = gmd__hello_reply__unpack(NULL, packet.header.length,
                                         packet.payload);
        assert_non_null(reply);
        assert_int_equal(reply->version, 1);
        assert_string_equal(reply->backend, "sim");
        assert_true(reply->asks_reach);
        gmd__hello_reply__free_unpacked(reply, NULL);
        free(buf);
        return fd;
}

/* Raw bytes as one packet, optionally with fds. */
static void raw_send_bytes(int fd, const void *data, size_t len,
                           const int *fds, unsigned n_fds)
{
        struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
        union {
                char buf[CMSG_SPACE(sizeof(int) * 4)];
                struct cmsghdr align;
        } control;
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

        assert_true(n_fds <= 4);
        if (n_fds) {
                struct cmsghdr *cmsg;

                memset(&control, 0, sizeof(control));
                msg.msg_control = control.buf;
                msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
                cmsg = CMSG_FIRSTHDR(&msg);
                cmsg->cmsg_level = SOL_SOCKET;
                cmsg->cmsg_type = SCM_RIGHTS;
                cmsg->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
                memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * n_fds);
        }
        if (sendmsg(fd, &msg, MSG_NOSIGNAL) != (ssize_t)len)
                fail_msg("sendmsg: %s", strerror(errno));
}

static void send_header(int fd, uint32_t magic, uint16_t version,
                        uint16_t type, uint32_t length, const void *payload,
                        size_t payload_len)
{
        uint8_t pkt[GMD_WIRE_HEADER_SIZE + 64];
        gmd_wire_header h = {
                .magic = magic, .version = version, .type = type,
                .length = length, .request_id = 2,
        };

        assert_true(payload_len <= 64);
        memcpy(pkt, &h, sizeof(h));
        if (payload_len)
                memcpy(pkt + sizeof(h), payload, payload_len);
        raw_send_bytes(fd, pkt, sizeof(h) + payload_len, NULL, 0);
}

/* The daemon closes the raw socket within 3 s (replies before the close are
 * read and dropped). */
static void expect_disconnected(fixture *f)
{
        uint64_t deadline = harness_now_ms() + 3000;
        uint8_t *buf = malloc(GMD_WIRE_MAX_PACKET);

        assert_non_null(buf);
        for (;;) {
                struct pollfd pfd = { .fd = raw, .events = POLLIN };
                uint64_t now = harness_now_ms();
                ssize_t n;

                if (now >= deadline)
                        fail_msg("the daemon did not disconnect the bad client; "
                                 "log:\n%s", harness_read_log(&f->h));
                if (poll(&pfd, 1, (int)(deadline - now)) <= 0)
                        continue;
                n = recv(raw, buf, GMD_WIRE_MAX_PACKET, MSG_DONTWAIT);
                if (n == 0 || (n < 0 && errno == ECONNRESET))
                        break;
                if (n < 0 && errno != EAGAIN && errno != EINTR)
                        fail_msg("recv: %s", strerror(errno));
        }
        free(buf);
        close(raw);
        raw = -1;
}

/* After the bad client: one log line with `marker` and one of the reason
 * words; nothing else disturbed. */
static void expect_only_bad_client_gone(fixture *f, const char *marker,
                                        const char *const *reasons)
{
        gmd_buffer *b = NULL;
        char *line;
        int ok = 0, fds;

        expect_disconnected(f);
        line = harness_wait_log(&f->h, marker, 2000);
        if (!line)
                fail_msg("no log line with \"%s\"; log:\n%s", marker,
                         harness_read_log(&f->h));
        for (const char *const *r = reasons; *r; r++)
                if (strcasestr(line, *r))
                        ok = 1;
        if (!ok)
                fail_msg("log line \"%s\" gives no reason (expected one of "
                         "\"%s\"...)", line, reasons[0]);
        free(line);
        assert_int_equal(harness_log_count(&f->h, marker), 1);

        /* The daemon is as it was. */
        fds = harness_wait_fds(f->h.pid, daemon_fds, 2000);
        if (fds != daemon_fds)
                fail_msg("daemon has %d fds, %d before the bad client", fds,
                         daemon_fds);
        assert_int_equal(harness_wait_clients(f->client, 1, 2000), 1);

        /* The good client's bytes are intact, and it keeps working. */
        check(good_buf, 3);
        assert_int_equal(gmd_alloc(f->client, GOOD_SIZE, 0, 0, GMD_NO_WAIT, &b),
                         0);
        fill(b, 9);
        check(b, 9);
        check(good_buf, 3);
        assert_int_equal(gmd_free(f->client, b), 0);
        assert_int_equal(harness_vram_used(f->client, 0), GOOD_SIZE);
        harness_stop(&f->h);
}

#define REASONS(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* ---- the cases --------------------------------------------------------------- */

static void test_short_packet(void **state)
{
        fixture *f = *state;
        int fd = raw_connect_hello(f);

        raw_send_bytes(fd, "GMD1\x01\x00", 6, NULL, 0);
        expect_only_bad_client_gone(f, "protocol error", REASONS("shorter"));
}

static void test_bad_magic(void **state)
{
        fixture *f = *state;
        int fd = raw_connect_hello(f);

        send_header(fd, 0x0badf00d, 1, GMD__MSG_TYPE__MSG_STATUS, 0, NULL, 0);
        expect_only_bad_client_gone(f, "protocol error", REASONS("magic"));
}

static void test_bad_version(void **state)
{
        fixture *f = *state;
        int fd = raw_connect_hello(f);

        send_header(fd, GMD_WIRE_MAGIC, 77, GMD__MSG_TYPE__MSG_STATUS, 0,
                    NULL, 0);
        expect_only_bad_client_gone(f, "protocol error", REASONS("version"));
}

static void test_length_mismatch(void **state)
{
        fixture *f = *state;
        int fd = raw_connect_hello(f);

        send_header(fd, GMD_WIRE_MAGIC, 1, GMD__MSG_TYPE__MSG_STATUS, 40,
                    "\x08\x01", 2);
        expect_only_bad_client_gone(f, "protocol error", REASONS("length"));
}

static void test_packet_too_large(void **state)
{
        fixture *f = *state;
        int fd = raw_connect_hello(f);
        int sndbuf = 2 * (int)GMD_WIRE_MAX_PACKET;
        size_t len = GMD_WIRE_MAX_PACKET + 100;
        uint8_t *pkt = calloc(1, len);
        gmd_wire_header h = {
                .magic = GMD_WIRE_MAGIC, .version = 1,
                .type = GMD__MSG_TYPE__MSG_STATUS,
                .length = (uint32_t)(len - GMD_WIRE_HEADER_SIZE),
        };

        assert_non_null(pkt);
        assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf,
                                    sizeof(sndbuf)), 0);
        memcpy(pkt, &h, sizeof(h));
        raw_send_bytes(fd, pkt, len, NULL, 0);
        free(pkt);
        expect_only_bad_client_gone(f, "protocol error",
                                    REASONS("large", "size", "truncat"));
}

static void test_undecodable_payload(void **state)
{
        fixture *f = *state;
        int fd = raw_connect_hello(f);

        /* Field 1 with wire type 7: no protobuf decoder accepts it. */
        send_header(fd, GMD_WIRE_MAGIC, 1, GMD__MSG_TYPE__MSG_ALLOC, 4,
                    "\x0f\x0f\x0f\x0f", 4);
        expect_only_bad_client_gone(f, "protocol error",
                                    REASONS("decode", "unpack", "payload",
                                            "parse", "malformed"));
}

static void test_unknown_type(void **state)
{
        fixture *f = *state;
        int fd = raw_connect_hello(f);

        send_header(fd, GMD_WIRE_MAGIC, 1, 999, 0, NULL, 0);
        expect_only_bad_client_gone(f, "protocol error",
                                    REASONS("unknown", "unexpected", "999", "type"));
}

/* A type only the daemon sends is no request: a client sending it is as
 * wrong as one sending an unknown type. */
static void test_daemon_only_type_from_client(void **state)
{
        fixture *f = *state;
        int fd = raw_connect_hello(f);

        send_header(fd, GMD_WIRE_MAGIC, 1, GMD__MSG_TYPE__MSG_ALLOC_REPLY, 0,
                    NULL, 0);
        expect_only_bad_client_gone(f, "protocol error",
                                    REASONS("unknown", "unexpected",
                                            "ALLOC_REPLY", "type"));
}

static void test_fds_attached(void **state)
{
        fixture *f = *state;
        int fd = raw_connect_hello(f);
        int memfd = memfd_create("gmd-test", MFD_CLOEXEC);
        uint8_t pkt[GMD_WIRE_HEADER_SIZE];
        gmd_wire_header h = {
                .magic = GMD_WIRE_MAGIC, .version = 1,
                .type = GMD__MSG_TYPE__MSG_STATUS, .length = 0,
                .request_id = 3,
        };
        int fds[2];

        assert_true(memfd >= 0);
        fds[0] = memfd;
        fds[1] = memfd;
        memcpy(pkt, &h, sizeof(h));
        raw_send_bytes(fd, pkt, sizeof(pkt), fds, 2);
        close(memfd);
        expect_only_bad_client_gone(f, "protocol error",
                                    REASONS("fd", "descriptor"));
}

static void test_not_hello_first(void **state)
{
        fixture *f = *state;
        Gmd__StatusRequest req = GMD__STATUS_REQUEST__INIT;
        uint8_t out[32];
        int fd = raw_connect(f);

        raw_send(fd, GMD__MSG_TYPE__MSG_STATUS, out,
                 gmd__status_request__pack(&req, out));
        expect_only_bad_client_gone(f, "protocol error", REASONS("hello"));
}

/* A PlanReport whose planner name the daemon would show an administrator
 * garbled (too long, or not printable) is a protocol error: it closes that
 * connection only. */
static void send_plan(int fd, const char *planner)
{
        Gmd__PlanReport plan = GMD__PLAN_REPORT__INIT;
        uint8_t out[256];

        plan.planner = (char *)planner;
        plan.kept_bytes = 1;
        assert_true(gmd__plan_report__get_packed_size(&plan) <= sizeof(out));
        raw_send(fd, GMD__MSG_TYPE__MSG_PLAN, out,
                 gmd__plan_report__pack(&plan, out));
}

static void test_plan_name_too_long(void **state)
{
        fixture *f = *state;
        int fd = raw_connect_hello(f);

        send_plan(fd, "a-planner-named-32-bytes-long-xx");   /* fine */
        send_plan(fd, "a-planner-named-33-bytes-long-xxx");
        expect_only_bad_client_gone(f, "protocol error",
                                    REASONS("planner name too long"));
}

static void test_plan_name_not_printable(void **state)
{
        fixture *f = *state;
        int fd = raw_connect_hello(f);

        send_plan(fd, "fit\x1b[2J");
        expect_only_bad_client_gone(f, "protocol error",
                                    REASONS("planner name not printable"));
}

/* Requests without ever reading a reply: once more replies wait than
 * max_send_queue (16 here), the daemon drops the client. */
/* A ReachReport of `n` entries: entry i for device devices[i], mapping
 * device maps[i] (none where maps[i] < 0). */
static void send_reach(int fd, unsigned n, const uint32_t *devices,
                       const int *maps)
{
        Gmd__ReachReport report = GMD__REACH_REPORT__INIT;
        Gmd__DeviceReach entries[4], *ptrs[4];
        uint32_t mapped[4];
        uint8_t out[128];

        assert_true(n <= 4);
        for (unsigned i = 0; i < n; i++) {
                gmd__device_reach__init(&entries[i]);
                entries[i].device = devices[i];
                if (maps[i] >= 0) {
                        mapped[i] = (uint32_t)maps[i];
                        entries[i].maps = &mapped[i];
                        entries[i].n_maps = 1;
                }
                ptrs[i] = &entries[i];
        }
        report.devices = ptrs;
        report.n_devices = n;
        assert_true(gmd__reach_report__get_packed_size(&report) <= sizeof(out));
        raw_send(fd, GMD__MSG_TYPE__MSG_REACH, out,
                 gmd__reach_report__pack(&report, out));
}

/* What a client maps is acted on: a report naming a device the daemon
 * does not have (as the device, or among those it maps) closes that
 * connection; one naming only its device is fine, and may come again. */
static void test_reach_unknown_device(void **state)
{
        fixture *f = *state;
        int fd = raw_connect_hello(f);

        send_reach(fd, 1, (const uint32_t[]){ 0 }, (const int[]){ -1 });
        send_reach(fd, 1, (const uint32_t[]){ 0 }, (const int[]){ 0 });
        send_reach(fd, 1, (const uint32_t[]){ 0 }, (const int[]){ 7 });
        expect_only_bad_client_gone(f, "protocol error",
                                    REASONS("device gpu-memd does not have"));
}

static void test_reach_device_unknown_as_device(void **state)
{
        fixture *f = *state;
        int fd = raw_connect_hello(f);

        send_reach(fd, 1, (const uint32_t[]){ 3 }, (const int[]){ -1 });
        expect_only_bad_client_gone(f, "protocol error",
                                    REASONS("device gpu-memd does not have"));
}

/* More entries than the daemon has devices (it has one). */
static void test_reach_too_many(void **state)
{
        fixture *f = *state;
        int fd = raw_connect_hello(f);

        send_reach(fd, 2, (const uint32_t[]){ 0, 0 }, (const int[]){ -1, -1 });
        expect_only_bad_client_gone(f, "protocol error",
                                    REASONS("more devices than gpu-memd has"));
}

static void test_flood_without_reading(void **state)
{
        fixture *f = *state;
        Gmd__StatusRequest req = GMD__STATUS_REQUEST__INIT;
        uint64_t deadline;
        uint8_t out[32];
        size_t len;
        int fd = raw_connect_hello(f);
        unsigned sent = 0;

        req.what = GMD__STATUS_WHAT__STATUS_BUFFERS;
        len = gmd__status_request__pack(&req, out);
        deadline = harness_now_ms() + 5000;
        while (harness_now_ms() < deadline) {
                int r = gmd_wire_send(fd, GMD__MSG_TYPE__MSG_STATUS, sent + 10,
                                      out, (uint32_t)len, NULL, 0);

                if (r == -EAGAIN) {
                        harness_sleep_ms(1);
                        continue;
                }
                if (r < 0)
                        break;   /* EPIPE / ECONNRESET: dropped */
                sent++;
        }
        assert_true(sent > 16);
        expect_only_bad_client_gone(f, "not reading",
                                    REASONS("not reading"));
        assert_int_equal(harness_log_count(&f->h, "protocol error"), 0);
}

/* Several bad clients in turn: each costs only itself, and the daemon's
 * fd count stays put. */
static void test_many_bad_clients(void **state)
{
        fixture *f = *state;

        for (int i = 0; i < 20; i++) {
                int fd = raw_connect_hello(f);

                send_header(fd, 0xdeadbeef, 1, 1, 0, NULL, 0);
                expect_disconnected(f);
        }
        assert_int_equal(harness_wait_fds(f->h.pid, daemon_fds, 2000),
                         daemon_fds);
        assert_int_equal(harness_wait_clients(f->client, 1, 2000), 1);
        check(good_buf, 3);
        {
                char *log;

                /* One line per bad client. */
                uint64_t deadline = harness_now_ms() + 2000;

                while (harness_log_count(&f->h, "protocol error") < 20 &&
                       harness_now_ms() < deadline)
                        harness_sleep_ms(10);
                log = harness_read_log(&f->h);
                if (harness_log_count(&f->h, "protocol error") != 20)
                        fail_msg("expected 20 protocol error lines; log:\n%s",
                                 log);
                free(log);
        }
        harness_stop(&f->h);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
        const struct CMUnitTest tests[] = {
                T(test_short_packet),
                T(test_bad_magic),
                T(test_bad_version),
                T(test_length_mismatch),
                T(test_packet_too_large),
                T(test_undecodable_payload),
                T(test_unknown_type),
                T(test_daemon_only_type_from_client),
                T(test_fds_attached),
                T(test_not_hello_first),
                T(test_plan_name_too_long),
                T(test_plan_name_not_printable),
                T(test_reach_unknown_device),
                T(test_reach_device_unknown_as_device),
                T(test_reach_too_many),
                T(test_flood_without_reading),
                T(test_many_bad_clients),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
