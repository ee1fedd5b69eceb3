/*
 * io — the I/O thread of a gmd_client, the only reader of its socket.
 *
 * It reads packets until the connection dies or gmd_disconnect wakes it,
 * and for each one: checks the framing (wire.c) and the payload, hands a
 * reply to the request waiting for it, or applies a notification (remap,
 * revoke, reclaim of cached mappings, shutdown notice). The daemon is
 * trusted with memory but not with well-formedness: an unknown request id,
 * an unexpected message type, a payload that does not decode or segments
 * that do not fit close the connection with a reason that every waiting
 * call and every later call reports. Every fd a packet brings is taken by
 * whatever it belongs to, or closed when the packet is done.
 *
 * Alloc replies are mapped here rather than in the calling thread so the
 * buffer is in the table before the next packet, which may be a remap of
 * it, is read.
 *
 * A connection that ends (end of stream, reset) without the daemon saying
 * it stops for good is ridden through where it may be (reconnect.c): the
 * thread connects again and claims the buffers back, then, writable,
 * sends what waited, and goes on reading.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer.h"
#include "client.h"
#include "errors.h"
#include "mapcache.h"
#include "gpumem.pb-c.h"
#include "wire.h"

/* Hand a finished request back to its caller, or, for a nowait call's
 * record, note the outcome for gmd_flush and free it. Nothing may touch
 * `req` after this: the caller frees it once it sees `done`. */
static void request_complete(gmd_client *client, gmd_request *req, int error,
                             const char *message)
{
        pthread_mutex_lock(&client->lock);
        gmd__request_complete_locked(client, req, error, message);
        pthread_mutex_unlock(&client->lock);
}

/* Take the request a reply answers out of the pending list, so that a
 * concurrent gmd__client_fail cannot complete it under us. */
static gmd_request *request_take(gmd_client *client, uint32_t id)
{
        gmd_request *found = NULL;
        gmd_list *pos;

        pthread_mutex_lock(&client->lock);
        list_for_each(pos, &client->pending) {
                gmd_request *req = container_of(pos, gmd_request, node);

                if (req->id == id) {
                        list_remove(pos);
                        found = req;
                        break;
                }
        }
        pthread_mutex_unlock(&client->lock);
        return found;
}

/* The daemon broke the protocol: close the connection; fail `req` (taken
 * from the list already) too if there is one. Returns -1 so the reader
 * stops. */
static int protocol_error(gmd_client *client, gmd_request *req,
                          const gmd_wire_header *header, const char *what)
{
        char reason[256];

        snprintf(reason, sizeof(reason),
                 "protocol error from gpu-memd (%s, request %" PRIu32 "): %s; "
                 "connection closed", gmd_wire_type_name(header->type),
                 header->request_id, what);
        gmd__client_fail(client, GMD_EPROTO, reason);
        if (req)
                request_complete(client, req, GMD_EPROTO, reason);
        return -1;
}

static const ProtobufCMessageDescriptor *reply_descriptor(uint16_t type)
{
        switch (type) {
        case GMD__MSG_TYPE__MSG_ALLOC_REPLY:  return &gmd__alloc_reply__descriptor;
        case GMD__MSG_TYPE__MSG_STATUS_REPLY: return &gmd__status_reply__descriptor;
        case GMD__MSG_TYPE__MSG_OK_REPLY:     return &gmd__ok_reply__descriptor;
        case GMD__MSG_TYPE__MSG_ERROR_REPLY:  return &gmd__error_reply__descriptor;
        default:                              return NULL;
        }
}

static int handle_alloc_reply(gmd_client *client, gmd_request *req,
                              const gmd_wire_header *header,
                              Gmd__AllocReply *reply, gmd_wire_packet *packet)
{
        const char *reason = NULL;
        gmd_buffer *buffer = NULL;
        char message[160];
        int r;

        if (reply->size < req->size)
                return protocol_error(client, req, header,
                                      "alloc reply smaller than the request");
        r = gmd__buffer_new(client, reply, req->device, req->flags, packet, &reason,
                       &buffer);
        if (r < 0 && reason)
                return protocol_error(client, req, header, reason);
        if (r < 0) {
                /* The daemon made the buffer; the caller frees it there. */
                req->unmapped = true;
                req->unmapped_id = reply->buffer_id;
                snprintf(message, sizeof(message),
                         "cannot map buffer %" PRIu64 " (%" PRIu64 " bytes): %s",
                         reply->buffer_id, reply->size, strerror(-r));
                request_complete(client, req, r, message);
                return 0;
        }
        req->buffer = buffer;
        request_complete(client, req, 0, NULL);
        return 0;
}

static int handle_reply(gmd_client *client, gmd_wire_packet *packet)
{
        const gmd_wire_header *header = &packet->header;
        ProtobufCMessage *msg;
        gmd_request *req;
        int r = 0;

        req = request_take(client, header->request_id);
        if (!req)
                return protocol_error(client, NULL, header,
                                      "no request is waiting for this reply");
        if (header->type != req->expect &&
            header->type != GMD__MSG_TYPE__MSG_ERROR_REPLY)
                return protocol_error(client, req, header,
                                      "wrong reply type for the request");
        msg = protobuf_c_message_unpack(reply_descriptor(header->type), NULL,
                                        header->length, packet->payload);
        if (!msg)
                return protocol_error(client, req, header,
                                      "payload does not decode");

        if (header->type == GMD__MSG_TYPE__MSG_ERROR_REPLY) {
                Gmd__ErrorReply *e = (Gmd__ErrorReply *)msg;
                int error = gmd__error_from_wire(e->code);
                const char *words = e->message && *e->message ? e->message :
                                    gmd_strerror(error);
                char revoked[300];

                /* A release sent again after a restart, of a buffer the
                 * new daemon took back released already: done. */
                if (req->resent && req->type == GMD__MSG_TYPE__MSG_RELEASE &&
                    error == GMD_EBUSY) {
                        request_complete(client, req, 0, NULL);
                        goto out;
                }
                /* A release nobody waits for: the lease mark, cleared when
                 * it was sent, follows what the daemon kept (buffer.c). */
                if (req->nowait && req->releases &&
                    gmd__buffer_release_refused(client, req->buffer_id, &error,
                                                revoked, sizeof(revoked)))
                        words = revoked;
                request_complete(client, req, error, words);
        } else if (req->nowait) {
                request_complete(client, req, 0, NULL);
        } else if (header->type == GMD__MSG_TYPE__MSG_ALLOC_REPLY) {
                r = handle_alloc_reply(client, req, header,
                                       (Gmd__AllocReply *)msg, packet);
        } else {
                req->reply = msg;
                msg = NULL;
                request_complete(client, req, 0, NULL);
        }
out:
        if (msg)
                protobuf_c_message_free_unpacked(msg, NULL);
        return r;
}

static int handle_remap(gmd_client *client, gmd_wire_packet *packet)
{
        Gmd__RemapNotify *notify;
        Gmd__RemapAck ack = GMD__REMAP_ACK__INIT;
        const char *reason = NULL;
        int r;

        notify = gmd__remap_notify__unpack(NULL, packet->header.length,
                                           packet->payload);
        if (!notify)
                return protocol_error(client, NULL, &packet->header,
                                      "payload does not decode");
        r = gmd__buffer_remap(client, notify, packet, &reason);
        if (r < 0 && reason) {
                gmd__remap_notify__free_unpacked(notify, NULL);
                return protocol_error(client, NULL, &packet->header, reason);
        }
        ack.buffer_id = notify->buffer_id;
        ack.sequence = notify->sequence;
        ack.result = r;
        gmd__remap_notify__free_unpacked(notify, NULL);
        /* A failed send means the connection is going; the next read
         * finds out and fails everyone with the reason. */
        gmd__client_send(client, GMD__MSG_TYPE__MSG_REMAP_ACK, &ack.base);
        return 0;
}

static int handle_revoke(gmd_client *client, gmd_wire_packet *packet)
{
        Gmd__RevokeNotify *notify;

        notify = gmd__revoke_notify__unpack(NULL, packet->header.length,
                                            packet->payload);
        if (!notify)
                return protocol_error(client, NULL, &packet->header,
                                      "payload does not decode");
        /* Only a drain revokes for want of permission: the connection
         * that ends after it does so for good (reconnect.c). */
        if (notify->reason == GMD__ERROR_CODE__ERR_PERMISSION) {
                pthread_mutex_lock(&client->lock);
                client->drained = true;
                pthread_mutex_unlock(&client->lock);
        }
        gmd__buffer_revoke(client, notify->buffer_id,
                      notify->message ? notify->message : "");
        gmd__revoke_notify__free_unpacked(notify, NULL);
        return 0;
}

/* The daemon needs room on a device: hand back what the mapping cache has
 * parked there. Only buffers still parked now go back; one that gmd_alloc
 * took meanwhile stays taken, and its UNPARK is already on the socket ahead
 * of our RETURN. Returning nothing sends nothing. A failed send means the
 * connection is going; the next read says why. */
static int handle_reclaim(gmd_client *client, gmd_wire_packet *packet)
{
        Gmd__ReclaimNotify *notify;

        notify = gmd__reclaim_notify__unpack(NULL, packet->header.length,
                                             packet->payload);
        if (!notify)
                return protocol_error(client, NULL, &packet->header,
                                      "payload does not decode");
        gmd__mapcache_return(client, false, notify->device, notify->bytes);
        gmd__reclaim_notify__free_unpacked(notify, NULL);
        return 0;
}

/* The daemon is stopping and will close the connection: keep reading
 * until it does (replies may still come), then explain the loss with its
 * words. */
static int handle_shutdown(gmd_client *client, gmd_wire_packet *packet)
{
        Gmd__ShutdownNotify *notify;

        notify = gmd__shutdown_notify__unpack(NULL, packet->header.length,
                                              packet->payload);
        if (!notify)
                return protocol_error(client, NULL, &packet->header,
                                      "payload does not decode");
        gmd__client_note_shutdown(client, notify->message);
        gmd__shutdown_notify__free_unpacked(notify, NULL);
        return 0;
}

int gmd__io_handle_packet(gmd_client *client, gmd_wire_packet *packet)
{
        if (packet->header.request_id != 0)
                return handle_reply(client, packet);
        switch (packet->header.type) {
        case GMD__MSG_TYPE__MSG_REMAP:
                return handle_remap(client, packet);
        case GMD__MSG_TYPE__MSG_REVOKE:
                return handle_revoke(client, packet);
        case GMD__MSG_TYPE__MSG_RECLAIM:
                return handle_reclaim(client, packet);
        case GMD__MSG_TYPE__MSG_SHUTDOWN:
                return handle_shutdown(client, packet);
        default:
                return protocol_error(client, NULL, &packet->header,
                                      "not a notification");
        }
}

/* What ended a connection, or that it goes on. */
enum {
        IO_GOES_ON = 0,
        IO_STOP = -1,           /* dead for good, or gmd_disconnect */
        IO_LOST = -2,           /* ended; maybe ridden through */
};

/* Read every packet waiting. A daemon that closed the connection with
 * packets of ours unread resets it, and a SOCK_SEQPACKET socket reports
 * the reset once, before the packets the daemon sent last (a datagram
 * receive checks the socket's error first): read on to the end, where a
 * shutdown notice says whether to ride through. */
static int read_packets(gmd_client *client, uint8_t *buf)
{
        bool reset = false;

        for (;;) {
                gmd_wire_packet packet = { .n_fds = 0 };
                const char *reason = NULL;
                char message[256];
                int r;

                r = gmd_wire_recv(client->sock, buf, &packet, &reason);
                if (r == -ECONNRESET && !reset) {
                        reset = true;
                        continue;
                }
                if (r == -EAGAIN)
                        return reset ? IO_LOST : IO_GOES_ON;
                if (r == 0 || r == -ECONNRESET || r == -EPIPE ||
                    r == -ENOTCONN)
                        return IO_LOST;
                if (r < 0) {
                        if (r == -EPROTO || r == -EMSGSIZE) {
                                snprintf(message, sizeof(message),
                                         "bad packet from gpu-memd: %s; "
                                         "connection closed",
                                         reason ? reason : strerror(-r));
                                gmd__client_fail(client, GMD_EPROTO, message);
                        } else {
                                snprintf(message, sizeof(message),
                                         "connection to gpu-memd lost: %s",
                                         strerror(-r));
                                gmd__client_fail(client, GMD_ECONN, message);
                        }
                        return IO_STOP;
                }
                r = gmd__io_handle_packet(client, &packet);
                gmd_wire_packet_close_fds(&packet);     /* unclaimed ones */
                if (r < 0)
                        return IO_STOP;
        }
}

static gmd_conn_state client_state(gmd_client *client)
{
        gmd_conn_state state;

        pthread_mutex_lock(&client->lock);
        state = client->state;
        pthread_mutex_unlock(&client->lock);
        return state;
}

/* Serve one connection until it ends: read, and while what waited for a
 * restart goes out, write. */
static int io_serve(gmd_client *client, uint8_t *buf)
{
        gmd_conn_state state;

        while ((state = client_state(client)) != GMD_CONN_DEAD) {
                struct pollfd p[2] = {
                        { .fd = client->sock, .events = POLLIN },
                        { .fd = client->wake_fd, .events = POLLIN },
                };
                int r;

                if (state == GMD_CONN_RESENDING &&
                    !gmd__client_leases_unmapped(client))
                        p[0].events |= POLLOUT;
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        gmd__client_fail(client, GMD_ECONN,
                                    "libgpumem I/O thread: poll failed");
                        return IO_STOP;
                }
                if (p[1].revents)
                        return IO_STOP;
                if ((p[0].revents & POLLOUT) && state == GMD_CONN_RESENDING)
                        gmd__client_resend_some(client);
                if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
                        r = read_packets(client, buf);
                        if (r != IO_GOES_ON)
                                return r;
                }
        }
        return IO_STOP;
}

void *gmd__client_io_main(void *arg)
{
        gmd_client *client = arg;
        uint8_t *buf = malloc(GMD_WIRE_MAX_PACKET);

        if (!buf) {
                gmd__client_fail(client, GMD_ECONN,
                            "libgpumem I/O thread: out of memory");
                return NULL;
        }
        while (io_serve(client, buf) == IO_LOST) {
                if (!gmd__client_may_ride_through(client)) {
                        gmd__client_fail(client, GMD_ECONN,
                                         "gpu-memd closed the connection");
                        break;
                }
                if (gmd__client_reconnect(client) < 0)
                        break;
        }
        /* Whatever ended the connection (the daemon stopped, an
         * administrator drained this client, gmd_disconnect), the daemon
         * freed every buffer of it: parked mappings hold VRAM nobody can
         * use any more, outside gpu-memd's pools. Give it back now. */
        gmd__mapcache_drop_all(client);
        free(buf);
        return NULL;
}
