/*
 * test_wire — proto/wire.c: framing of messages on a SOCK_SEQPACKET socket.
 *
 * Every packet a client sends passes gmd_wire_recv() before anything decodes
 * it, so each header check gets a case here, sent with raw sendmsg() so the
 * packet is exactly as bad as a hostile peer could make it. Most bad packets
 * carry fds too: whatever the verdict, every received fd must be closed, which
 * the teardown checks by counting /proc/self/fd.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.pb-c.h"
#include "wire.h"

typedef struct fixture {
        int sv[2];          /* sv[0] sends, sv[1] receives */
        int fds_at_start;
        uint8_t *buf;       /* GMD_WIRE_MAX_PACKET bytes */
} fixture;

static int count_open_fds(void)
{
        DIR *dir = opendir("/proc/self/fd");
        struct dirent *entry;
        int n = 0;

        assert_non_null(dir);
        while ((entry = readdir(dir)))
                if (entry->d_name[0] != '.')
                        n++;
        closedir(dir);
        return n;
}

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));

        if (!f)
                return -1;
        f->fds_at_start = count_open_fds();
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, f->sv) < 0)
                return -1;
        f->buf = malloc(GMD_WIRE_MAX_PACKET);
        if (!f->buf)
                return -1;
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;
        int leaked;

        close(f->sv[0]);
        close(f->sv[1]);
        free(f->buf);
        leaked = count_open_fds() - f->fds_at_start;
        free(f);
        if (leaked != 0) {
                print_error("fd leak: %d more fds open than before the test\n",
                            leaked);
                return -1;
        }
        return 0;
}

static int make_memfd(const char *contents)
{
        int fd = memfd_create("test_wire", MFD_CLOEXEC);

        assert_true(fd >= 0);
        if (contents)
                assert_int_equal(write(fd, contents, strlen(contents)),
                                 (ssize_t)strlen(contents));
        return fd;
}

static void make_header(uint8_t *out, uint32_t magic, uint16_t version,
                        uint16_t type, uint32_t length, uint32_t request_id)
{
        gmd_wire_header h = {
                .magic = magic, .version = version, .type = type,
                .length = length, .request_id = request_id,
        };

        memcpy(out, &h, sizeof(h));
}

/* Send raw bytes as one packet with `n_fds` fds attached. */
static void send_raw(int sock, const void *data, size_t len, const int *fds,
                     unsigned n_fds)
{
        struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
        size_t control_len = CMSG_SPACE(sizeof(int) * (n_fds ? n_fds : 1));
        char *control = calloc(1, control_len);

        assert_non_null(control);
        if (n_fds > 0) {
                struct cmsghdr *cmsg;

                msg.msg_control = control;
                msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
                cmsg = CMSG_FIRSTHDR(&msg);
                cmsg->cmsg_level = SOL_SOCKET;
                cmsg->cmsg_type = SCM_RIGHTS;
                cmsg->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
                memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * n_fds);
        }
        if (sendmsg(sock, &msg, MSG_NOSIGNAL) != (ssize_t)len)
                fail_msg("sendmsg of %zu bytes: %s", len, strerror(errno));
        free(control);
}

static void assert_same_file(int a, int b)
{
        struct stat sa, sb;

        assert_int_equal(fstat(a, &sa), 0);
        assert_int_equal(fstat(b, &sb), 0);
        assert_int_equal(sa.st_dev, sb.st_dev);
        assert_int_equal(sa.st_ino, sb.st_ino);
}

/* ---- good packets --------------------------------------------------------- */

static void test_round_trip_payload_and_fds(void **state)
{
        fixture *f = *state;
        static const char payload[] = "not really protobuf, but bytes";
        int fds[2] = { make_memfd("first"), make_memfd("second") };
        gmd_wire_packet packet;
        const char *reason = "unset";
        char text[16] = { 0 };
        int r, fd0, fd1;

        r = gmd_wire_send(f->sv[0], GMD__MSG_TYPE__MSG_ALLOC_REPLY, 4711,
                          payload, sizeof(payload), fds, 2);
        assert_int_equal(r, 0);
        /* The caller keeps its fds. */
        assert_true(fcntl(fds[0], F_GETFD) >= 0);
        assert_true(fcntl(fds[1], F_GETFD) >= 0);

        memset(&packet, 0xa5, sizeof(packet));
        r = gmd_wire_recv(f->sv[1], f->buf, &packet, &reason);
        assert_int_equal(r, 1);
        assert_null(reason);
        assert_int_equal(packet.header.magic, GMD_WIRE_MAGIC);
        assert_int_equal(packet.header.version, GMD_WIRE_VERSION);
        assert_int_equal(packet.header.type, GMD__MSG_TYPE__MSG_ALLOC_REPLY);
        assert_int_equal(packet.header.length, sizeof(payload));
        assert_int_equal(packet.header.request_id, 4711);
        assert_memory_equal(packet.payload, payload, sizeof(payload));
        assert_ptr_equal(packet.payload, f->buf + GMD_WIRE_HEADER_SIZE);
        assert_int_equal(packet.n_fds, 2);

        /* Received fds are new descriptors for the same files, in order,
         * and close-on-exec. */
        for (unsigned i = 0; i < 2; i++) {
                int flags = fcntl(packet.fds[i], F_GETFD);

                assert_true(flags >= 0);
                assert_true(flags & FD_CLOEXEC);
                assert_int_not_equal(packet.fds[i], fds[i]);
                assert_same_file(packet.fds[i], fds[i]);
        }
        assert_int_equal(pread(packet.fds[1], text, sizeof(text) - 1, 0), 6);
        assert_string_equal(text, "second");

        /* take_fd hands over ownership once. */
        fd1 = gmd_wire_packet_take_fd(&packet, 1);
        assert_true(fd1 >= 0);
        assert_int_equal(gmd_wire_packet_take_fd(&packet, 1), -1);
        assert_int_equal(gmd_wire_packet_take_fd(&packet, 2), -1);
        assert_int_equal(gmd_wire_packet_take_fd(&packet, 99), -1);
        fd0 = packet.fds[0];

        /* close_fds closes what is left and leaves taken fds alone. */
        gmd_wire_packet_close_fds(&packet);
        assert_int_equal(packet.n_fds, 0);
        assert_int_equal(fcntl(fd0, F_GETFD), -1);
        assert_int_equal(errno, EBADF);
        assert_true(fcntl(fd1, F_GETFD) >= 0);
        assert_int_equal(gmd_wire_packet_take_fd(&packet, 0), -1);

        close(fd1);
        close(fds[0]);
        close(fds[1]);
}

static void test_round_trip_empty_payload(void **state)
{
        fixture *f = *state;
        gmd_wire_packet packet;
        const char *reason;

        assert_int_equal(gmd_wire_send(f->sv[0], GMD__MSG_TYPE__MSG_OK_REPLY,
                                       7, NULL, 0, NULL, 0), 0);
        assert_int_equal(gmd_wire_recv(f->sv[1], f->buf, &packet, &reason), 1);
        assert_int_equal(packet.header.type, GMD__MSG_TYPE__MSG_OK_REPLY);
        assert_int_equal(packet.header.length, 0);
        assert_int_equal(packet.header.request_id, 7);
        assert_int_equal(packet.n_fds, 0);
}

/* A real protobuf message survives the trip and decodes. */
static void test_round_trip_protobuf(void **state)
{
        fixture *f = *state;
        Gmd__AllocRequest req = GMD__ALLOC_REQUEST__INIT;
        Gmd__AllocRequest *back;
        gmd_wire_packet packet;
        const char *reason;
        uint8_t out[64];
        size_t len;

        req.size = UINT64_C(3) << 20;
        req.device = 1;
        req.flags = 2;
        req.timeout_ms = -1;
        len = gmd__alloc_request__pack(&req, out);
        assert_int_equal(gmd_wire_send(f->sv[0], GMD__MSG_TYPE__MSG_ALLOC, 9,
                                       out, (uint32_t)len, NULL, 0), 0);
        assert_int_equal(gmd_wire_recv(f->sv[1], f->buf, &packet, &reason), 1);
        back = gmd__alloc_request__unpack(NULL, packet.header.length,
                                          packet.payload);
        assert_non_null(back);
        assert_int_equal(back->size, req.size);
        assert_int_equal(back->device, 1);
        assert_int_equal(back->flags, 2);
        assert_int_equal(back->timeout_ms, -1);
        gmd__alloc_request__free_unpacked(back, NULL);
}

/* A ReachReport (MSG_REACH) and the fields that go with it: what a
 * client maps crosses whole; a RemapNotify's falls_back and a
 * HelloReply's asks_reach are read as sent, and as false where an older
 * peer leaves them out. */
static void test_round_trip_reach(void **state)
{
        fixture *f = *state;
        Gmd__ReachReport report = GMD__REACH_REPORT__INIT;
        Gmd__DeviceReach entries[2], *ptrs[2] = { &entries[0], &entries[1] };
        uint32_t maps0[] = { 1, 2 };
        Gmd__RemapNotify note = GMD__REMAP_NOTIFY__INIT, *nb;
        Gmd__HelloReply hello = GMD__HELLO_REPLY__INIT, *hb;
        Gmd__ReachReport *back;
        gmd_wire_packet packet;
        const char *reason;
        uint8_t out[128];
        size_t len;

        gmd__device_reach__init(&entries[0]);
        gmd__device_reach__init(&entries[1]);
        entries[0].device = 0;
        entries[0].maps = maps0;
        entries[0].n_maps = 2;
        entries[1].device = 3;          /* sees device 3, maps no other */
        report.devices = ptrs;
        report.n_devices = 2;
        len = gmd__reach_report__pack(&report, out);
        assert_int_equal(gmd_wire_send(f->sv[0], GMD__MSG_TYPE__MSG_REACH, 5,
                                       out, (uint32_t)len, NULL, 0), 0);
        assert_int_equal(gmd_wire_recv(f->sv[1], f->buf, &packet, &reason), 1);
        assert_int_equal(packet.header.type, GMD__MSG_TYPE__MSG_REACH);
        back = gmd__reach_report__unpack(NULL, packet.header.length,
                                         packet.payload);
        assert_non_null(back);
        assert_int_equal(back->n_devices, 2);
        assert_int_equal(back->devices[0]->device, 0);
        assert_int_equal(back->devices[0]->n_maps, 2);
        assert_int_equal(back->devices[0]->maps[1], 2);
        assert_int_equal(back->devices[1]->device, 3);
        assert_int_equal(back->devices[1]->n_maps, 0);
        gmd__reach_report__free_unpacked(back, NULL);

        note.buffer_id = 7;
        note.falls_back = true;
        len = gmd__remap_notify__pack(&note, out);
        nb = gmd__remap_notify__unpack(NULL, len, out);
        assert_non_null(nb);
        assert_true(nb->falls_back);
        gmd__remap_notify__free_unpacked(nb, NULL);
        note.falls_back = false;
        len = gmd__remap_notify__pack(&note, out);
        nb = gmd__remap_notify__unpack(NULL, len, out);
        assert_non_null(nb);
        assert_false(nb->falls_back);
        gmd__remap_notify__free_unpacked(nb, NULL);

        hello.version = 1;
        len = gmd__hello_reply__pack(&hello, out);
        hb = gmd__hello_reply__unpack(NULL, len, out);
        assert_non_null(hb);
        assert_false(hb->asks_reach);
        gmd__hello_reply__free_unpacked(hb, NULL);
        hello.asks_reach = true;
        len = gmd__hello_reply__pack(&hello, out);
        hb = gmd__hello_reply__unpack(NULL, len, out);
        assert_non_null(hb);
        assert_true(hb->asks_reach);
        gmd__hello_reply__free_unpacked(hb, NULL);
}

/* The largest payload the protocol allows arrives whole, also on a socket
 * whose SO_SNDBUF was raised. */
static void test_round_trip_max_payload(void **state)
{
        fixture *f = *state;
        int sndbuf = (int)GMD_WIRE_MAX_PACKET + 4096;
        uint8_t *payload = malloc(GMD_WIRE_MAX_PAYLOAD);
        gmd_wire_packet packet;
        const char *reason;

        assert_non_null(payload);
        for (size_t i = 0; i < GMD_WIRE_MAX_PAYLOAD; i++)
                payload[i] = (uint8_t)(i * 131 + 7);
        assert_int_equal(setsockopt(f->sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf,
                                    sizeof(sndbuf)), 0);
        assert_int_equal(gmd_wire_send(f->sv[0], GMD__MSG_TYPE__MSG_STATUS_REPLY,
                                       1, payload, GMD_WIRE_MAX_PAYLOAD,
                                       NULL, 0), 0);
        assert_int_equal(gmd_wire_recv(f->sv[1], f->buf, &packet, &reason), 1);
        assert_int_equal(packet.header.length, GMD_WIRE_MAX_PAYLOAD);
        assert_memory_equal(packet.payload, payload, GMD_WIRE_MAX_PAYLOAD);
        free(payload);
}

/* The same on sockets as socket()/accept() make them. The kernel refuses a
 * SEQPACKET datagram larger than the sender's SO_SNDBUF less 32 bytes
 * (default 208 KiB), and neither the daemon nor libgpumem raises it, so
 * GMD_WIRE_MAX_PAYLOAD must stay below that. */
static void test_max_payload_default_sndbuf(void **state)
{
        fixture *f = *state;
        uint8_t *payload = calloc(1, GMD_WIRE_MAX_PAYLOAD);
        gmd_wire_packet packet;
        const char *reason;
        int r;

        assert_non_null(payload);
        payload[GMD_WIRE_MAX_PAYLOAD - 1] = 0x5a;
        r = gmd_wire_send(f->sv[0], GMD__MSG_TYPE__MSG_STATUS_REPLY, 1,
                          payload, GMD_WIRE_MAX_PAYLOAD, NULL, 0);
        if (r != 0)
                fail_msg("gmd_wire_send of %u payload bytes on a default "
                         "socket: %s", GMD_WIRE_MAX_PAYLOAD, strerror(-r));
        assert_int_equal(gmd_wire_recv(f->sv[1], f->buf, &packet, &reason), 1);
        assert_int_equal(packet.header.length, GMD_WIRE_MAX_PAYLOAD);
        assert_int_equal(packet.payload[GMD_WIRE_MAX_PAYLOAD - 1], 0x5a);
        free(payload);
}

static void test_max_fds_accepted(void **state)
{
        fixture *f = *state;
        int fds[GMD_WIRE_MAX_FDS];
        gmd_wire_packet packet;
        const char *reason;
        int fd = make_memfd(NULL);

        for (unsigned i = 0; i < GMD_WIRE_MAX_FDS; i++)
                fds[i] = fd;
        assert_int_equal(gmd_wire_send(f->sv[0], GMD__MSG_TYPE__MSG_ALLOC_REPLY,
                                       1, NULL, 0, fds, GMD_WIRE_MAX_FDS), 0);
        assert_int_equal(gmd_wire_recv(f->sv[1], f->buf, &packet, &reason), 1);
        assert_int_equal(packet.n_fds, GMD_WIRE_MAX_FDS);
        for (unsigned i = 0; i < GMD_WIRE_MAX_FDS; i++)
                assert_same_file(packet.fds[i], fd);
        gmd_wire_packet_close_fds(&packet);
        close(fd);
}

static void test_recv_nothing_waiting(void **state)
{
        fixture *f = *state;
        gmd_wire_packet packet;
        const char *reason;

        assert_int_equal(gmd_wire_recv(f->sv[1], f->buf, &packet, &reason),
                         -EAGAIN);
}

static void test_recv_end_of_stream(void **state)
{
        fixture *f = *state;
        gmd_wire_packet packet;
        const char *reason;

        shutdown(f->sv[0], SHUT_WR);
        assert_int_equal(gmd_wire_recv(f->sv[1], f->buf, &packet, &reason), 0);
}

static void test_recv_not_a_socket(void **state)
{
        fixture *f = *state;
        gmd_wire_packet packet;
        const char *reason = NULL;
        int fd = make_memfd(NULL);
        int r = gmd_wire_recv(fd, f->buf, &packet, &reason);

        assert_true(r < 0 && r != -EAGAIN);
        assert_non_null(reason);
        close(fd);
}

/* ---- send refuses what the peer would refuse ------------------------------ */

static void test_send_too_many_fds(void **state)
{
        fixture *f = *state;
        int fds[GMD_WIRE_MAX_FDS + 1];
        gmd_wire_packet packet;
        const char *reason;
        int fd = make_memfd(NULL);

        for (unsigned i = 0; i <= GMD_WIRE_MAX_FDS; i++)
                fds[i] = fd;
        assert_int_equal(gmd_wire_send(f->sv[0], GMD__MSG_TYPE__MSG_ALLOC_REPLY,
                                       1, NULL, 0, fds, GMD_WIRE_MAX_FDS + 1),
                         -EMSGSIZE);
        /* Nothing was sent. */
        assert_int_equal(gmd_wire_recv(f->sv[1], f->buf, &packet, &reason),
                         -EAGAIN);
        close(fd);
}

static void test_send_payload_too_large(void **state)
{
        fixture *f = *state;
        static uint8_t big[GMD_WIRE_MAX_PAYLOAD + 1];

        assert_int_equal(gmd_wire_send(f->sv[0], GMD__MSG_TYPE__MSG_STATUS_REPLY,
                                       1, big, sizeof(big), NULL, 0),
                         -EMSGSIZE);
}

static void test_send_would_block(void **state)
{
        fixture *f = *state;
        int r;
        unsigned sent = 0;

        /* Fill the peer's queue: send never blocks, it says -EAGAIN. */
        while ((r = gmd_wire_send(f->sv[0], GMD__MSG_TYPE__MSG_OK_REPLY, 1,
                                  NULL, 0, NULL, 0)) == 0 && sent < 100000)
                sent++;
        assert_int_equal(r, -EAGAIN);
        assert_true(sent > 0);
}

static void test_send_peer_gone(void **state)
{
        fixture *f = *state;

        close(f->sv[1]);
        f->sv[1] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        /* MSG_NOSIGNAL: an error, not SIGPIPE. */
        assert_int_equal(gmd_wire_send(f->sv[0], GMD__MSG_TYPE__MSG_OK_REPLY, 1,
                                       NULL, 0, NULL, 0), -EPIPE);
}

/* ---- bad packets: refused, with a reason, and their fds closed ------------ */

/* Sends `data` with two memfds, expects `expected_error` and a reason that
 * contains `reason_part`, and checks the received fds were closed. */
static void expect_refused(fixture *f, const void *data, size_t len,
                           int expected_error, const char *reason_part)
{
        int fds[2] = { make_memfd(NULL), make_memfd(NULL) };
        int before;
        gmd_wire_packet packet;
        const char *reason = NULL;
        int r;

        before = count_open_fds();
        send_raw(f->sv[0], data, len, fds, 2);
        close(fds[0]);
        close(fds[1]);
        r = gmd_wire_recv(f->sv[1], f->buf, &packet, &reason);
        if (r != expected_error)
                fail_msg("gmd_wire_recv = %d (reason \"%s\"); expected %d",
                         r, reason ? reason : "(null)", expected_error);
        assert_non_null(reason);
        if (!strstr(reason, reason_part))
                fail_msg("reason \"%s\" does not mention \"%s\"", reason,
                         reason_part);
        /* The two received fds are gone again, and so are ours. */
        assert_int_equal(count_open_fds(), before - 2);
        /* The socket is still usable after a refused packet. */
        assert_int_equal(gmd_wire_send(f->sv[0], GMD__MSG_TYPE__MSG_OK_REPLY,
                                       2, NULL, 0, NULL, 0), 0);
        assert_int_equal(gmd_wire_recv(f->sv[1], f->buf, &packet, &reason), 1);
        assert_int_equal(packet.header.request_id, 2);
}

static void test_short_packet(void **state)
{
        uint8_t pkt[GMD_WIRE_HEADER_SIZE];

        make_header(pkt, GMD_WIRE_MAGIC, GMD_WIRE_VERSION,
                    GMD__MSG_TYPE__MSG_STATUS, 0, 1);
        expect_refused(*state, pkt, GMD_WIRE_HEADER_SIZE - 1, -EPROTO,
                       "shorter than the header");
        expect_refused(*state, pkt, 1, -EPROTO, "shorter than the header");
}

/* A zero-length packet with fds is not end-of-stream: the fds must not
 * be left behind. */
static void test_empty_packet_with_fds(void **state)
{
        fixture *f = *state;
        int fds[1] = { make_memfd(NULL) };
        int before = count_open_fds();
        gmd_wire_packet packet;
        const char *reason = NULL;
        int r;

        send_raw(f->sv[0], "", 0, fds, 1);
        close(fds[0]);
        r = gmd_wire_recv(f->sv[1], f->buf, &packet, &reason);
        assert_true(r < 0);
        assert_non_null(reason);
        assert_int_equal(count_open_fds(), before - 1);
}

static void test_bad_magic(void **state)
{
        uint8_t pkt[GMD_WIRE_HEADER_SIZE + 4] = { 0 };

        make_header(pkt, 0x31444d48u, GMD_WIRE_VERSION,
                    GMD__MSG_TYPE__MSG_STATUS, 4, 1);
        expect_refused(*state, pkt, sizeof(pkt), -EPROTO, "magic");
        /* The magic in the other byte order is just as wrong. */
        make_header(pkt, __builtin_bswap32(GMD_WIRE_MAGIC), GMD_WIRE_VERSION,
                    GMD__MSG_TYPE__MSG_STATUS, 4, 1);
        expect_refused(*state, pkt, sizeof(pkt), -EPROTO, "magic");
}

static void test_bad_version(void **state)
{
        uint8_t pkt[GMD_WIRE_HEADER_SIZE];
        static const uint16_t versions[] = {
                0, GMD_WIRE_VERSION + 1, 0xffff,
        };

        for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
                make_header(pkt, GMD_WIRE_MAGIC, versions[i],
                            GMD__MSG_TYPE__MSG_STATUS, 0, 1);
                expect_refused(*state, pkt, sizeof(pkt), -EPROTO, "version");
        }
}

static void test_length_mismatch(void **state)
{
        uint8_t pkt[GMD_WIRE_HEADER_SIZE + 10] = { 0 };

        /* Says more than came. */
        make_header(pkt, GMD_WIRE_MAGIC, GMD_WIRE_VERSION,
                    GMD__MSG_TYPE__MSG_ALLOC, 11, 1);
        expect_refused(*state, pkt, sizeof(pkt), -EPROTO, "length");
        /* Says less than came. */
        make_header(pkt, GMD_WIRE_MAGIC, GMD_WIRE_VERSION,
                    GMD__MSG_TYPE__MSG_ALLOC, 9, 1);
        expect_refused(*state, pkt, sizeof(pkt), -EPROTO, "length");
        /* A length that would overflow a 32-bit sum. */
        make_header(pkt, GMD_WIRE_MAGIC, GMD_WIRE_VERSION,
                    GMD__MSG_TYPE__MSG_ALLOC, UINT32_MAX - 5, 1);
        expect_refused(*state, pkt, sizeof(pkt), -EPROTO, "length");
}

static void test_packet_too_large(void **state)
{
        fixture *f = *state;
        int sndbuf = 2 * (int)GMD_WIRE_MAX_PACKET;
        size_t len = GMD_WIRE_MAX_PACKET + 1;
        uint8_t *pkt = calloc(1, len);

        assert_non_null(pkt);
        assert_int_equal(setsockopt(f->sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf,
                                    sizeof(sndbuf)), 0);
        make_header(pkt, GMD_WIRE_MAGIC, GMD_WIRE_VERSION,
                    GMD__MSG_TYPE__MSG_STATUS, (uint32_t)(len - 16), 1);
        expect_refused(f, pkt, len, -EMSGSIZE, "larger");
        free(pkt);
}

/* More fds than a packet may carry: the control data is truncated; the fds
 * that did arrive are closed and the rest never become ours. */
static void test_too_many_fds(void **state)
{
        fixture *f = *state;
        enum { N = GMD_WIRE_MAX_FDS + 8 };
        int fds[N];
        uint8_t pkt[GMD_WIRE_HEADER_SIZE];
        int fd = make_memfd(NULL);
        int before = count_open_fds();
        gmd_wire_packet packet;
        const char *reason = NULL;

        for (unsigned i = 0; i < N; i++)
                fds[i] = fd;
        make_header(pkt, GMD_WIRE_MAGIC, GMD_WIRE_VERSION,
                    GMD__MSG_TYPE__MSG_STATUS, 0, 1);
        send_raw(f->sv[0], pkt, sizeof(pkt), fds, N);
        assert_int_equal(gmd_wire_recv(f->sv[1], f->buf, &packet, &reason),
                         -EMSGSIZE);
        assert_non_null(reason);
        assert_non_null(strstr(reason, "file descriptors"));
        assert_int_equal(count_open_fds(), before);
        close(fd);
}

/* Two SCM_RIGHTS messages in one packet are counted together. */
static void test_fds_in_two_cmsgs(void **state)
{
        fixture *f = *state;
        uint8_t pkt[GMD_WIRE_HEADER_SIZE];
        int a = make_memfd("a"), b = make_memfd("b");
        size_t space = CMSG_SPACE(sizeof(int)) * 2;
        char *control = calloc(1, space);
        struct iovec iov = { .iov_base = pkt, .iov_len = sizeof(pkt) };
        struct msghdr msg = {
                .msg_iov = &iov, .msg_iovlen = 1,
                .msg_control = control, .msg_controllen = space,
        };
        struct cmsghdr *cmsg;
        gmd_wire_packet packet;
        const char *reason;
        int r;

        make_header(pkt, GMD_WIRE_MAGIC, GMD_WIRE_VERSION,
                    GMD__MSG_TYPE__MSG_REMAP, 0, 0);
        cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cmsg), &a, sizeof(int));
        cmsg = CMSG_NXTHDR(&msg, cmsg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cmsg), &b, sizeof(int));
        assert_int_equal(sendmsg(f->sv[0], &msg, 0), (ssize_t)sizeof(pkt));
        free(control);

        r = gmd_wire_recv(f->sv[1], f->buf, &packet, &reason);
        assert_int_equal(r, 1);
        /* The kernel may merge them; either way both arrive in order. */
        assert_int_equal(packet.n_fds, 2);
        assert_same_file(packet.fds[0], a);
        assert_same_file(packet.fds[1], b);
        gmd_wire_packet_close_fds(&packet);
        close(a);
        close(b);
}

static void test_type_names(void **state)
{
        assert_string_equal(gmd_wire_type_name(GMD__MSG_TYPE__MSG_HELLO),
                            "MSG_HELLO");
        assert_string_equal(gmd_wire_type_name(GMD__MSG_TYPE__MSG_REVOKE),
                            "MSG_REVOKE");
        assert_string_equal(gmd_wire_type_name(GMD__MSG_TYPE__MSG_REACH),
                            "MSG_REACH");
        assert_string_equal(gmd_wire_type_name(999), "unknown");
        assert_string_equal(gmd_wire_type_name(0xffff), "unknown");
}

static void test_header_layout(void **state)
{
        gmd_wire_header h;

        /* The header is part of the protocol: 16 bytes, fixed offsets. */
        assert_int_equal(sizeof(h), GMD_WIRE_HEADER_SIZE);
        assert_int_equal(offsetof(gmd_wire_header, magic), 0);
        assert_int_equal(offsetof(gmd_wire_header, version), 4);
        assert_int_equal(offsetof(gmd_wire_header, type), 6);
        assert_int_equal(offsetof(gmd_wire_header, length), 8);
        assert_int_equal(offsetof(gmd_wire_header, request_id), 12);
        assert_memory_equal(&(uint32_t){ GMD_WIRE_MAGIC }, "GMD1", 4);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
        const struct CMUnitTest tests[] = {
                T(test_round_trip_payload_and_fds),
                T(test_round_trip_empty_payload),
                T(test_round_trip_protobuf),
                T(test_round_trip_reach),
                T(test_round_trip_max_payload),
                T(test_max_payload_default_sndbuf),
                T(test_max_fds_accepted),
                T(test_recv_nothing_waiting),
                T(test_recv_end_of_stream),
                T(test_recv_not_a_socket),
                T(test_send_too_many_fds),
                T(test_send_payload_too_large),
                T(test_send_would_block),
                T(test_send_peer_gone),
                T(test_short_packet),
                T(test_empty_packet_with_fds),
                T(test_bad_magic),
                T(test_bad_version),
                T(test_length_mismatch),
                T(test_packet_too_large),
                T(test_too_many_fds),
                T(test_fds_in_two_cmsgs),
                T(test_type_names),
                T(test_header_layout),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
