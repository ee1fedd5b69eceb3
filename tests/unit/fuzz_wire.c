/*
 * fuzz_wire — libFuzzer target for the decoder a client's bytes meet first:
 * gmd_wire_recv()'s header checks, then gmd__*__unpack() of every message a
 * client may send (the daemon decodes by the header's type; a hostile client
 * picks any type, so every request decoder sees every payload).
 *
 * The input is one packet, sent over a SOCK_SEQPACKET socketpair so the real
 * recvmsg path runs. Beyond "does not crash", it checks what the wire layer
 * promises: an accepted packet has our magic, a spoken version and a length
 * equal to what arrived; a refused one has a reason; no fds appear.
 *
 * Built with -fsanitize=fuzzer under clang (GMD_FUZZ); under any compiler
 * fuzz_wire_driver.c runs it over a fixed corpus of malformed packets in
 * ctest.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gpumem.pb-c.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond) do { \
        if (!(cond)) { \
                fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, \
                        __LINE__, #cond); \
                abort(); \
        } \
} while (0)

static int sv[2] = { -1, -1 };
static uint8_t *buf;

static void open_pair(void)
{
        int sndbuf = 2 * (int)GMD_WIRE_MAX_PACKET;

        CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
        CHECK(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf,
                         sizeof(sndbuf)) == 0);
        buf = malloc(GMD_WIRE_MAX_PACKET);
        CHECK(buf);
}

/* Unpack with a decoder; if it accepts, packing again must give as many
 * bytes as get_packed_size says, and freeing must work. */
#define TRY_UNPACK(prefix, len, payload) do { \
        void *m_ = prefix##__unpack(NULL, (len), (payload)); \
        if (m_) { \
                size_t need_ = prefix##__get_packed_size(m_); \
                uint8_t *out_ = malloc(need_ ? need_ : 1); \
                CHECK(out_); \
                CHECK(prefix##__pack(m_, out_) == need_); \
                free(out_); \
                prefix##__free_unpacked(m_, NULL); \
        } \
} while (0)

static void decode_payload(const uint8_t *payload, size_t len)
{
        /* Everything a client may send. */
        TRY_UNPACK(gmd__hello, len, payload);
        TRY_UNPACK(gmd__alloc_request, len, payload);
        TRY_UNPACK(gmd__buffer_request, len, payload);
        TRY_UNPACK(gmd__acquire_request, len, payload);
        TRY_UNPACK(gmd__status_request, len, payload);
        TRY_UNPACK(gmd__remap_ack, len, payload);
        TRY_UNPACK(gmd__admin_request, len, payload);
        /* And what libgpumem decodes from the daemon. */
        TRY_UNPACK(gmd__hello_reply, len, payload);
        TRY_UNPACK(gmd__error_reply, len, payload);
        TRY_UNPACK(gmd__alloc_reply, len, payload);
        TRY_UNPACK(gmd__status_reply, len, payload);
        TRY_UNPACK(gmd__remap_notify, len, payload);
        TRY_UNPACK(gmd__revoke_notify, len, payload);
        TRY_UNPACK(gmd__shutdown_notify, len, payload);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        gmd_wire_packet packet;
        const char *reason = NULL;
        ssize_t sent;
        int r;

        if (sv[0] < 0)
                open_pair();
        /* One byte over the limit still exercises the "too large" path. */
        if (size > GMD_WIRE_MAX_PACKET + 1)
                size = GMD_WIRE_MAX_PACKET + 1;
        sent = send(sv[0], data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
        CHECK(sent == (ssize_t)size);

        r = gmd_wire_recv(sv[1], buf, &packet, &reason);
        if (size == 0) {
                /* A zero-length datagram reads as end of stream. */
                CHECK(r == 0);
                return 0;
        }
        CHECK(r != -EAGAIN && r != 0);
        if (r < 0) {
                CHECK(reason != NULL);
                return 0;
        }
        CHECK(r == 1);
        CHECK(packet.n_fds == 0);
        CHECK(size >= GMD_WIRE_HEADER_SIZE && size <= GMD_WIRE_MAX_PACKET);
        CHECK(packet.header.magic == GMD_WIRE_MAGIC);
        CHECK(packet.header.version >= GMD_WIRE_MIN_VERSION &&
              packet.header.version <= GMD_WIRE_VERSION);
        CHECK(packet.header.length == size - GMD_WIRE_HEADER_SIZE);
        CHECK(packet.payload == buf + GMD_WIRE_HEADER_SIZE);
        CHECK(gmd_wire_type_name(packet.header.type) != NULL);

        decode_payload(packet.payload, packet.header.length);
        return 0;
}
