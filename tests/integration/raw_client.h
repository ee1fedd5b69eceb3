/*
 * raw_client — a protocol client built on wire.h, for integration tests
 * that must decide what a client sends and when, which libgpumem does on
 * its own: a remap acked late, never, with a wrong sequence, or ahead of
 * the remap it answers, right behind a request. It maps the backing fds it
 * is handed, so it can check their bytes (pattern.h) and a test can keep a
 * buffer's memory in reach as a real owner would.
 *
 * Every helper fails the running cmocka test, with the daemon's log where
 * it helps, on anything it did not expect.
 */
#ifndef GMD_TEST_RAW_CLIENT_H
#define GMD_TEST_RAW_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "gpumem.h"
#include "harness.h"

#define RAW_MAX_MAPS 16

typedef struct raw_client {
        const harness *h;        /* the daemon, for its log in failures */
        int fd;                  /* the socket; -1 when not connected */
        void *maps[RAW_MAX_MAPS];       /* backings mapped, unmapped by */
        size_t map_sizes[RAW_MAX_MAPS]; /* raw_close */
} raw_client;

/* One packet from the daemon, decoded. */
typedef struct raw_msg {
        uint16_t type;
        uint32_t request_id;
        void *msg;               /* unpacked; NULL for OK replies */
        int fd;                  /* the packet's first fd, taken; -1 if none */
} raw_msg;

/* Not connected, nothing mapped: what raw_close may be called on. */
void raw_init(raw_client *c);

/* Connect to h's daemon and say hello (request id 1) as `name`. */
void raw_hello(raw_client *c, const harness *h, const char *name);

/* Close the socket (the daemon sees the client leave) and unmap every
 * backing; again, or on a client never connected, does nothing. */
void raw_close(raw_client *c);

/* Free what a raw_msg holds; it may be cleared again. */
void raw_msg_clear(raw_msg *m);

void raw_send(raw_client *c, uint16_t type, uint32_t id,
              const ProtobufCMessage *msg);

/* The next packet within timeout_ms, decoded. */
raw_msg raw_recv(raw_client *c, int timeout_ms);

/* The next packet (within 5 s), which must be of `type` (answering
 * `request_id` unless it is 0). */
raw_msg raw_expect(raw_client *c, uint16_t type, uint32_t request_id);

/* mmap a backing fd (the caller still owns it); unmapped by raw_close. */
void *raw_map(raw_client *c, int fd, size_t size);

/* Allocate `size` (request *next_id), map it, fill it with `seed` and
 * release it (the next id); returns the buffer id. */
uint64_t raw_alloc_release(raw_client *c, uint32_t *next_id, uint64_t size,
                           uint64_t seed);

/* Check a MSG_REMAP of buffer `id` to `tier` and, when it names memory to
 * map, that memory's bytes (`seed`); returns its sequence. A SWAPPABLE
 * buffer's remap to host memory names nothing and carries no fd (its
 * owner only unmaps); one to VRAM, or a SPILLABLE one's, carries the
 * backing. Clears `m`. */
uint64_t raw_check_remap(raw_client *c, raw_msg m, uint64_t id, gmd_tier tier,
                         size_t size, uint64_t seed);

/* raw_expect a MSG_REMAP, then raw_check_remap. */
uint64_t raw_expect_remap(raw_client *c, uint64_t id, gmd_tier tier,
                          size_t size, uint64_t seed);

/* Page buffer `id` (`size` bytes of `seed`, released) out to host memory
 * (request *next_id, then the next id) and read the reply and the remap
 * in either order: a released buffer with no last-use event is unmapped
 * while its copy runs, so the remap may come first (daemon/core/move.h).
 * The remap is checked as raw_check_remap does and not acked; returns its
 * sequence. */
uint64_t raw_pageout(raw_client *c, uint32_t *next_id, uint64_t id, size_t size,
                     uint64_t seed);

/* Send MSG_REMAP_ACK (result 0) for buffer `id`, sequence `seq`. */
void raw_ack(raw_client *c, uint64_t id, uint64_t seq);

#endif
