/*
 * fuzz_wire — libFuzzer target for the decoder a client's bytes meet first:
 * gmd_wire_recv()'s header checks, then protobuf-c's decoder for every
 * message of gpumem.proto (the daemon decodes by the header's type; a
 * hostile client picks any type, so every decoder sees every payload).
 *
 * The input is one packet, sent over a SOCK_SEQPACKET socketpair so the real
 * recvmsg path runs. Beyond "does not crash", it checks what the wire layer
 * promises: an accepted packet has our magic, a spoken version and a length
 * equal to what arrived; a refused one has a reason; no fds appear. And what
 * the decoders promise: a decoded message is well formed, encodes to as
 * many bytes as it says, and decodes again to the same encoding.
 *
 * Built with -fsanitize=fuzzer,address,undefined under clang, the protobuf-c
 * runtime compiled in (scripts/fuzz.sh, `make fuzz`); under any compiler
 * fuzz_wire_driver.c runs it over a fixed corpus of malformed packets and
 * over the seed corpus in tests/fuzz/corpus, in ctest.
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
extern const ProtobufCMessageDescriptor *const fuzz_wire_messages[];
extern const size_t fuzz_wire_n_messages;

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

/* Every message of gpumem.proto: the daemon decodes by the header's type and
 * a hostile client picks any type, libgpumem decodes what the daemon sends,
 * and nested messages are decoders of their own. fuzz_wire_driver checks
 * that this list has as many entries as gpumem.proto has messages. */
const ProtobufCMessageDescriptor *const fuzz_wire_messages[] = {
        &gmd__hello__descriptor,
        &gmd__device_info__descriptor,
        &gmd__hello_reply__descriptor,
        &gmd__error_reply__descriptor,
        &gmd__ok_reply__descriptor,
        &gmd__segment__descriptor,
        &gmd__alloc_request__descriptor,
        &gmd__alloc_reply__descriptor,
        &gmd__buffer_request__descriptor,
        &gmd__acquire_request__descriptor,
        &gmd__move_request__descriptor,
        &gmd__wait_request__descriptor,
        &gmd__remap_notify__descriptor,
        &gmd__remap_ack__descriptor,
        &gmd__revoke_notify__descriptor,
        &gmd__buffer_list__descriptor,
        &gmd__reclaim_notify__descriptor,
        &gmd__admin_request__descriptor,
        &gmd__shutdown_notify__descriptor,
        &gmd__status_request__descriptor,
        &gmd__pool_info__descriptor,
        &gmd__client_info__descriptor,
        &gmd__buffer_info__descriptor,
        &gmd__gpu_process__descriptor,
        &gmd__peer_link__descriptor,
        &gmd__status_reply__descriptor,
        &gmd__buffer_claim__descriptor,
        &gmd__resume_request__descriptor,
        &gmd__buffer_verdict__descriptor,
        &gmd__resume_reply__descriptor,
        &gmd__plan_report__descriptor,
        &gmd__device_reach__descriptor,
        &gmd__reach_report__descriptor,
};
const size_t fuzz_wire_n_messages =
        sizeof(fuzz_wire_messages) / sizeof(fuzz_wire_messages[0]);

/* Pack a decoded message twice, by pack() into a buffer of
 * get_packed_size() bytes and by pack_to_buffer(): the same bytes. Returns
 * them (malloc'd), their count in *ret_len. */
static uint8_t *pack_twice(const ProtobufCMessage *m, size_t *ret_len)
{
        uint8_t pad[64];
        ProtobufCBufferSimple simple = PROTOBUF_C_BUFFER_SIMPLE_INIT(pad);
        size_t need = protobuf_c_message_get_packed_size(m);
        uint8_t *out = malloc(need ? need : 1);

        CHECK(out);
        CHECK(protobuf_c_message_pack(m, out) == need);
        CHECK(protobuf_c_message_pack_to_buffer(m, &simple.base) == need);
        CHECK(simple.len == need);
        CHECK(memcmp(simple.data, out, need) == 0);
        PROTOBUF_C_BUFFER_SIMPLE_CLEAR(&simple);
        *ret_len = need;
        return out;
}

/* Whether a decoded message or any message inside it kept unknown fields. */
static int has_unknown_fields(const ProtobufCMessage *m)
{
        const ProtobufCMessageDescriptor *desc = m->descriptor;

        if (m->n_unknown_fields)
                return 1;
        for (unsigned i = 0; i < desc->n_fields; i++) {
                const ProtobufCFieldDescriptor *f = &desc->fields[i];
                const char *base = (const char *)m;

                if (f->type != PROTOBUF_C_TYPE_MESSAGE)
                        continue;
                if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                        size_t n = *(const size_t *)(base + f->quantifier_offset);
                        ProtobufCMessage *const *sub =
                                *(ProtobufCMessage *const *const *)(base + f->offset);

                        for (size_t k = 0; k < n; k++)
                                if (has_unknown_fields(sub[k]))
                                        return 1;
                } else {
                        const ProtobufCMessage *sub =
                                *(const ProtobufCMessage *const *)(base + f->offset);

                        if (sub && has_unknown_fields(sub))
                                return 1;
                }
        }
        return 0;
}

/* Unpack with one decoder. If it accepts, the message must be well formed
 * (protobuf_c_message_check) and pack back consistently; freeing must work.
 * Without unknown fields the packed form must decode again to the same
 * bytes (a decode-encode round trip is stable). Unknown fields are kept
 * as they came, and protobuf-c 1.4.1 accepts ones it cannot write back: a
 * field number 0 spelled as a two-byte varint (80 00) is kept, and written
 * as 00, which no decoder accepts. The daemon ignores unknown fields and
 * never re-encodes what a client sent, so only the round trip is skipped
 * for them. */
static void decode_as(const ProtobufCMessageDescriptor *desc,
                      const uint8_t *payload, size_t len)
{
        ProtobufCMessage *m, *again;
        uint8_t *packed, *repacked;
        size_t n, n2;
        int unknown;

        m = protobuf_c_message_unpack(desc, NULL, len, payload);
        if (!m)
                return;
        CHECK(m->descriptor == desc);
        CHECK(protobuf_c_message_check(m));
        packed = pack_twice(m, &n);
        unknown = has_unknown_fields(m);
        protobuf_c_message_free_unpacked(m, NULL);

        again = protobuf_c_message_unpack(desc, NULL, n, packed);
        CHECK(again || unknown);
        if (again) {
                repacked = pack_twice(again, &n2);
                CHECK(unknown || (n2 == n && memcmp(repacked, packed, n) == 0));
                protobuf_c_message_free_unpacked(again, NULL);
                free(repacked);
        }
        free(packed);
}

static void decode_payload(const uint8_t *payload, size_t len)
{
        for (size_t i = 0; i < fuzz_wire_n_messages; i++)
                decode_as(fuzz_wire_messages[i], payload, len);
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
