/*
 * wire — see wire.h. sendmsg/recvmsg with SCM_RIGHTS, and the header checks
 * every received packet must pass before anything decodes its payload.
 */
#include "wire.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gpumem.pb-c.h"

/* Control buffer sized for the most fds a packet may carry. */
#define GMD_WIRE_CMSG_SPACE CMSG_SPACE(sizeof(int) * GMD_WIRE_MAX_FDS)

int gmd_wire_send(int sock, uint16_t type, uint32_t request_id,
                  const void *payload, uint32_t length,
                  const int *fds, unsigned n_fds)
{
        gmd_wire_header header = {
                .magic = GMD_WIRE_MAGIC,
                .version = GMD_WIRE_VERSION,
                .type = type,
                .length = length,
                .request_id = request_id,
        };
        struct iovec iov[2] = {
                { .iov_base = &header, .iov_len = sizeof(header) },
                { .iov_base = (void *)payload, .iov_len = length },
        };
        union {
                char buf[GMD_WIRE_CMSG_SPACE];
                struct cmsghdr align;
        } control;
        struct msghdr msg = {
                .msg_iov = iov,
                .msg_iovlen = length > 0 ? 2 : 1,
        };
        ssize_t n;

        if (length > GMD_WIRE_MAX_PAYLOAD || n_fds > GMD_WIRE_MAX_FDS)
                return -EMSGSIZE;

        if (n_fds > 0) {
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

        do {
                n = sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        } while (n < 0 && errno == EINTR);
        if (n < 0)
                return errno == EWOULDBLOCK ? -EAGAIN : -errno;
        /* SEQPACKET sends whole packets or nothing. */
        if ((size_t)n != sizeof(header) + length)
                return -EIO;
        return 0;
}

static void close_cmsg_fds(struct msghdr *msg)
{
        struct cmsghdr *cmsg;

        for (cmsg = CMSG_FIRSTHDR(msg); cmsg; cmsg = CMSG_NXTHDR(msg, cmsg)) {
                if (cmsg->cmsg_level == SOL_SOCKET &&
                    cmsg->cmsg_type == SCM_RIGHTS) {
                        size_t n = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        int fd;

                        for (size_t i = 0; i < n; i++) {
                                memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int),
                                       sizeof(int));
                                close(fd);
                        }
                }
        }
}

int gmd_wire_recv(int sock, uint8_t *buf, gmd_wire_packet *ret_packet,
                  const char **ret_reason)
{
        union {
                char buf[GMD_WIRE_CMSG_SPACE];
                struct cmsghdr align;
        } control;
        struct iovec iov = { .iov_base = buf, .iov_len = GMD_WIRE_MAX_PACKET };
        struct msghdr msg = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = control.buf,
                .msg_controllen = sizeof(control.buf),
        };
        gmd_wire_header header;
        struct cmsghdr *cmsg;
        unsigned n_fds = 0;
        ssize_t n;

        *ret_reason = NULL;
        do {
                n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        } while (n < 0 && errno == EINTR);
        if (n < 0) {
                if (errno == EWOULDBLOCK)
                        return -EAGAIN;
                *ret_reason = "recvmsg failed";
                return -errno;
        }
        if (n == 0 && msg.msg_controllen == 0)
                return 0;

        if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
                close_cmsg_fds(&msg);
                *ret_reason = (msg.msg_flags & MSG_CTRUNC) ?
                        "too many file descriptors in one packet" :
                        "packet larger than the protocol allows";
                return -EMSGSIZE;
        }

        for (cmsg = CMSG_FIRSTHDR(&msg); cmsg; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
                size_t count;

                if (cmsg->cmsg_level != SOL_SOCKET ||
                    cmsg->cmsg_type != SCM_RIGHTS) {
                        close_cmsg_fds(&msg);
                        *ret_reason = "unexpected control message";
                        return -EPROTO;
                }
                count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                if (n_fds + count > GMD_WIRE_MAX_FDS) {
                        close_cmsg_fds(&msg);
                        *ret_reason = "too many file descriptors in one packet";
                        return -EMSGSIZE;
                }
                memcpy(&ret_packet->fds[n_fds], CMSG_DATA(cmsg),
                       count * sizeof(int));
                n_fds += count;
        }
        ret_packet->n_fds = n_fds;

        if ((size_t)n < sizeof(header)) {
                *ret_reason = "packet shorter than the header";
                goto bad;
        }
        memcpy(&header, buf, sizeof(header));
        if (header.magic != GMD_WIRE_MAGIC) {
                *ret_reason = "bad magic";
                goto bad;
        }
        if (header.version < GMD_WIRE_MIN_VERSION ||
            header.version > GMD_WIRE_VERSION) {
                *ret_reason = "unsupported protocol version in header";
                goto bad;
        }
        if (header.length != (size_t)n - sizeof(header)) {
                *ret_reason = "header length does not match packet size";
                goto bad;
        }

        ret_packet->header = header;
        ret_packet->payload = buf + sizeof(header);
        return 1;

bad:
        gmd_wire_packet_close_fds(ret_packet);
        return -EPROTO;
}

void gmd_wire_drain(int sock, unsigned max)
{
        uint8_t drain[64];

        /* MSG_TRUNC: a packet is dropped whole whatever its size. After
         * the shutdown nothing more can arrive and an empty queue reads as
         * the end of the stream (0). */
        shutdown(sock, SHUT_RDWR);
        for (unsigned i = 0; i < max; i++)
                if (recv(sock, drain, sizeof(drain), MSG_DONTWAIT | MSG_TRUNC) <= 0)
                        break;
}

void gmd_wire_packet_close_fds(gmd_wire_packet *packet)
{
        for (unsigned i = 0; i < packet->n_fds; i++) {
                if (packet->fds[i] >= 0)
                        close(packet->fds[i]);
                packet->fds[i] = -1;
        }
        packet->n_fds = 0;
}

int gmd_wire_packet_take_fd(gmd_wire_packet *packet, unsigned index)
{
        int fd;

        if (index >= packet->n_fds)
                return -1;
        fd = packet->fds[index];
        packet->fds[index] = -1;
        return fd;
}

const char *gmd_wire_type_name(uint16_t type)
{
        const ProtobufCEnumValue *v =
                protobuf_c_enum_descriptor_get_value(&gmd__msg_type__descriptor,
                                                      type);
        return v ? v->name : "unknown";
}
