/*
 * raw_client — see raw_client.h. Packets are decoded with the generated
 * protobuf-c code for the types the tests read (replies, errors, remaps);
 * others come back with `msg` NULL and only their header.
 */
#include "raw_client.h"

#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.pb-c.h"
#include "pattern.h"
#include "wire.h"

void raw_init(raw_client *c)
{
        memset(c, 0, sizeof(*c));
        c->fd = -1;
}

void raw_close(raw_client *c)
{
        for (size_t i = 0; i < RAW_MAX_MAPS; i++) {
                if (c->maps[i])
                        munmap(c->maps[i], c->map_sizes[i]);
                c->maps[i] = NULL;
        }
        if (c->fd >= 0)
                close(c->fd);
        c->fd = -1;
}

void raw_msg_clear(raw_msg *m)
{
        if (m->msg)
                protobuf_c_message_free_unpacked(m->msg, NULL);
        if (m->fd >= 0)
                close(m->fd);
        m->msg = NULL;
        m->fd = -1;
}

void raw_send(raw_client *c, uint16_t type, uint32_t id,
              const ProtobufCMessage *msg)
{
        uint8_t buf[256];
        size_t len = protobuf_c_message_get_packed_size(msg);
        int r;

        assert_true(len <= sizeof(buf));
        protobuf_c_message_pack(msg, buf);
        r = gmd_wire_send(c->fd, type, id, buf, (uint32_t)len, NULL, 0);
        if (r < 0)
                fail_msg("gmd_wire_send: %s", strerror(-r));
}

raw_msg raw_recv(raw_client *c, int timeout_ms)
{
        raw_msg m = { .fd = -1 };
        uint8_t *buf = malloc(GMD_WIRE_MAX_PACKET);
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        const ProtobufCMessageDescriptor *d = NULL;
        gmd_wire_packet packet;
        const char *reason = NULL;
        int r;

        assert_non_null(buf);
        if (poll(&pfd, 1, timeout_ms) != 1)
                fail_msg("raw client: nothing from the daemon within %d ms; log:\n%s",
                         timeout_ms, harness_read_log(c->h));
        r = gmd_wire_recv(c->fd, buf, &packet, &reason);
        if (r == 0)
                fail_msg("raw client: the daemon closed the connection (did it "
                         "die?); log:\n%s", harness_read_log(c->h));
        if (r != 1)
                fail_msg("gmd_wire_recv = %d (%s); log:\n%s", r,
                         reason ? reason : "", harness_read_log(c->h));
        m.type = packet.header.type;
        m.request_id = packet.header.request_id;
        m.fd = gmd_wire_packet_take_fd(&packet, 0);
        gmd_wire_packet_close_fds(&packet);
        switch (m.type) {
        case GMD__MSG_TYPE__MSG_HELLO_REPLY: d = &gmd__hello_reply__descriptor; break;
        case GMD__MSG_TYPE__MSG_ALLOC_REPLY: d = &gmd__alloc_reply__descriptor; break;
        case GMD__MSG_TYPE__MSG_ERROR_REPLY: d = &gmd__error_reply__descriptor; break;
        case GMD__MSG_TYPE__MSG_REMAP:       d = &gmd__remap_notify__descriptor; break;
        default: break;
        }
        if (d) {
                m.msg = protobuf_c_message_unpack(d, NULL, packet.header.length,
                                                  packet.payload);
                assert_non_null(m.msg);
        }
        free(buf);
        return m;
}

raw_msg raw_expect(raw_client *c, uint16_t type, uint32_t request_id)
{
        raw_msg m = raw_recv(c, 5000);

        if (m.type != type || (request_id && m.request_id != request_id)) {
                const char *text = m.type == GMD__MSG_TYPE__MSG_ERROR_REPLY ?
                        ((Gmd__ErrorReply *)m.msg)->message : "";

                fail_msg("raw client got %s (request %u) \"%s\", want %s "
                         "(request %u)", gmd_wire_type_name(m.type), m.request_id,
                         text, gmd_wire_type_name(type), request_id);
        }
        return m;
}

void raw_hello(raw_client *c, const harness *h, const char *name)
{
        Gmd__Hello hello = GMD__HELLO__INIT;
        raw_msg m;

        c->h = h;
        c->fd = harness_connect_raw(h);
        assert_true(c->fd >= 0);
        hello.min_version = 1;
        hello.max_version = 1;
        hello.client_name = (char *)name;
        raw_send(c, GMD__MSG_TYPE__MSG_HELLO, 1, &hello.base);
        m = raw_expect(c, GMD__MSG_TYPE__MSG_HELLO_REPLY, 1);
        raw_msg_clear(&m);
}

void *raw_map(raw_client *c, int fd, size_t size)
{
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        size_t i;

        if (p == MAP_FAILED)
                fail_msg("mmap of a backing fd: %s", strerror(errno));
        for (i = 0; i < RAW_MAX_MAPS && c->maps[i]; i++)
                ;
        if (i == RAW_MAX_MAPS) {
                munmap(p, size);
                fail_msg("raw client: more than %d backings mapped", RAW_MAX_MAPS);
        }
        c->maps[i] = p;
        c->map_sizes[i] = size;
        return p;
}

uint64_t raw_alloc_release(raw_client *c, uint32_t *next_id, uint64_t size,
                           uint64_t seed)
{
        Gmd__AllocRequest alloc = GMD__ALLOC_REQUEST__INIT;
        Gmd__BufferRequest rel = GMD__BUFFER_REQUEST__INIT;
        Gmd__AllocReply *reply;
        raw_msg m;
        uint64_t id;
        void *p;

        alloc.size = size;
        alloc.timeout_ms = 0;
        raw_send(c, GMD__MSG_TYPE__MSG_ALLOC, *next_id, &alloc.base);
        m = raw_expect(c, GMD__MSG_TYPE__MSG_ALLOC_REPLY, (*next_id)++);
        reply = m.msg;
        id = reply->buffer_id;
        assert_int_equal(reply->size, size);
        assert_int_equal(reply->n_segments, 1);
        assert_true(m.fd >= 0);
        p = raw_map(c, m.fd, size);
        pattern_fill_mem(p, size, seed);
        raw_msg_clear(&m);

        rel.buffer_id = id;
        raw_send(c, GMD__MSG_TYPE__MSG_RELEASE, *next_id, &rel.base);
        m = raw_expect(c, GMD__MSG_TYPE__MSG_OK_REPLY, (*next_id)++);
        raw_msg_clear(&m);
        return id;
}

uint64_t raw_check_remap(raw_client *c, raw_msg m, uint64_t id, gmd_tier tier,
                         size_t size, uint64_t seed)
{
        Gmd__RemapNotify *note = m.msg;
        uint64_t seq = note->sequence;

        assert_int_equal(note->buffer_id, id);
        if ((gmd_tier)note->tier != tier)
                fail_msg("remap %llu of buffer %llu is to %s, want %s",
                         (unsigned long long)seq, (unsigned long long)id,
                         gmd_tier_name((gmd_tier)note->tier), gmd_tier_name(tier));
        if (note->n_segments == 0) {
                assert_int_equal(tier, GMD_TIER_HOST);
                assert_true(m.fd < 0);
        } else {
                assert_int_equal(note->n_segments, 1);
                assert_int_equal(note->segments[0]->size, size);
                assert_true(m.fd >= 0);
                pattern_check_mem(raw_map(c, m.fd, size), size, seed,
                                  "raw buffer's new backing");
        }
        raw_msg_clear(&m);
        return seq;
}

uint64_t raw_expect_remap(raw_client *c, uint64_t id, gmd_tier tier,
                          size_t size, uint64_t seed)
{
        return raw_check_remap(c, raw_expect(c, GMD__MSG_TYPE__MSG_REMAP, 0), id,
                               tier, size, seed);
}

uint64_t raw_pageout(raw_client *c, uint32_t *next_id, uint64_t id, size_t size,
                     uint64_t seed)
{
        Gmd__MoveRequest pageout = GMD__MOVE_REQUEST__INIT;
        uint32_t req = (*next_id)++;
        uint64_t seq;
        raw_msg m;

        pageout.n_buffer_ids = 1;
        pageout.buffer_ids = &id;
        raw_send(c, GMD__MSG_TYPE__MSG_PAGEOUT, req, &pageout.base);
        m = raw_recv(c, 5000);
        if (m.type == GMD__MSG_TYPE__MSG_REMAP) {
                seq = raw_check_remap(c, m, id, GMD_TIER_HOST, size, seed);
                m = raw_expect(c, GMD__MSG_TYPE__MSG_OK_REPLY, req);
                raw_msg_clear(&m);
                return seq;
        }
        if (m.type != GMD__MSG_TYPE__MSG_OK_REPLY || m.request_id != req)
                fail_msg("raw client got %s (request %u), want the pageout's "
                         "reply or its remap", gmd_wire_type_name(m.type),
                         m.request_id);
        raw_msg_clear(&m);
        return raw_expect_remap(c, id, GMD_TIER_HOST, size, seed);
}

void raw_ack(raw_client *c, uint64_t id, uint64_t seq)
{
        Gmd__RemapAck ack = GMD__REMAP_ACK__INIT;

        ack.buffer_id = id;
        ack.sequence = seq;
        raw_send(c, GMD__MSG_TYPE__MSG_REMAP_ACK, 0, &ack.base);
}
