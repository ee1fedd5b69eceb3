/*
 * wire — framing of gpu-memd messages on a SOCK_SEQPACKET socket.
 *
 * One packet carries one message: a fixed 16-byte header, then `length`
 * bytes of protobuf-c payload (proto/gpumem.proto), and optionally file
 * descriptors as SCM_RIGHTS. Both the daemon and libgpumem use this file, so
 * the checks a peer's packet must pass live in one place. Nothing here
 * allocates per message beyond the caller's buffers, logs, or exits: errors
 * come back as negative errno values with a reason string for the log.
 *
 * Byte order is the host's: the socket is a Unix socket, so both ends run on
 * the same machine.
 */
#ifndef GMD_WIRE_H
#define GMD_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GMD_WIRE_MAGIC        0x31444d47u  /* "GMD1" read as little endian */
#define GMD_WIRE_VERSION      1u           /* newest protocol version spoken */
#define GMD_WIRE_MIN_VERSION  1u           /* oldest still accepted */
#define GMD_WIRE_HEADER_SIZE  16u
/* Unix sockets refuse packets larger than the send buffer (about 208 KiB
 * by default), so a packet stays well below it; long status lists page. */
#define GMD_WIRE_MAX_PAYLOAD  (128u * 1024u)
#define GMD_WIRE_MAX_PACKET   (GMD_WIRE_HEADER_SIZE + GMD_WIRE_MAX_PAYLOAD)
#define GMD_WIRE_MAX_FDS      64u          /* fds one packet may carry */

typedef struct gmd_wire_header {
        uint32_t magic;
        uint16_t version;
        uint16_t type;       /* Gmd__MsgType */
        uint32_t length;     /* payload bytes after the header */
        uint32_t request_id; /* echoed in the reply; 0 for notifications */
} gmd_wire_header;

/* A received packet: the header, a pointer into the caller's buffer for the
 * payload, and the fds that came with it (owned by the packet until taken). */
typedef struct gmd_wire_packet {
        gmd_wire_header header;
        const uint8_t *payload;
        int fds[GMD_WIRE_MAX_FDS];
        unsigned n_fds;
} gmd_wire_packet;

/*
 * Send one message. `payload` may be NULL when `length` is 0. `fds` (may be
 * NULL) are attached with SCM_RIGHTS; the caller keeps ownership of them.
 * Returns 0, -EAGAIN when the socket is full (nothing was sent), or another
 * negative errno.
 */
int gmd_wire_send(int sock, uint16_t type, uint32_t request_id,
                  const void *payload, uint32_t length,
                  const int *fds, unsigned n_fds);

/*
 * Receive and check one packet into `buf` (GMD_WIRE_MAX_PACKET bytes).
 * Returns 1 and fills *ret_packet, 0 on orderly end of stream, -EAGAIN when
 * nothing is waiting, or a negative errno for a bad packet, with
 * *ret_reason saying what was wrong (a static string). Received fds are
 * close-on-exec; on any failure they are already closed.
 *
 * The header checks done here: whole header present, magic, a version this
 * build speaks (GMD_WIRE_MIN_VERSION..GMD_WIRE_VERSION), length equal to
 * the bytes received, no truncation of data or control messages.
 */
int gmd_wire_recv(int sock, uint8_t *buf, gmd_wire_packet *ret_packet,
                  const char **ret_reason);

/*
 * Stop reading `sock` (shutdown both ways) and drop what the peer sent
 * that nobody will read, so that closing it does not reset the
 * connection: the peer of a SOCK_SEQPACKET socket hears of a reset before
 * the packets sent to it last, which it may then never read. Never
 * blocks; drops at most `max` packets (their fds are closed by the
 * kernel with them).
 */
void gmd_wire_drain(int sock, unsigned max);

/* Close every fd still held by the packet. */
void gmd_wire_packet_close_fds(gmd_wire_packet *packet);

/* Take fd number `index` out of the packet: the caller now owns it.
 * Returns -1 if there is no such fd or it was already taken. */
int gmd_wire_packet_take_fd(gmd_wire_packet *packet, unsigned index);

/* Name of a message type, for logs. */
const char *gmd_wire_type_name(uint16_t type);

#endif
