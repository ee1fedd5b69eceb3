/*
 * session_io — a session's socket: taking over an accepted connection,
 * reading and handling its packets by turns, sending, queueing what the
 * socket cannot take yet, and closing. The core's record of the client
 * (core/session.h) is embedded here and found again with session_io();
 * both are freed together from uv_close's callback.
 *
 * A session is closed with session_close(), which may be called from
 * inside its own poll callback: it releases the client's buffers and
 * waiters at once (session_end), and the memory is freed later. The core
 * only marks a session to be closed; from that mark on its socket is
 * neither read nor written here, and the scheduling pass closes it.
 */
#ifndef GMD_SESSION_IO_H
#define GMD_SESSION_IO_H

#include <protobuf-c/protobuf-c.h>
#include <stdint.h>
#include <uv.h>

#include "list.h"
#include "session.h"
#include "wire.h"

typedef struct gmd_session_io {
        gmd_session session;        /* the core's record of the client */
        int fd;
        uv_poll_t poll;
        int poll_events;
        gmd_list sendq;             /* packets the socket could not take */
        unsigned sendq_len;
        uint64_t sendq_bytes;       /* their payloads (admission.h) */
} gmd_session_io;

/* The socket side of `session`, which session_new made. */
static inline gmd_session_io *session_io(gmd_session *session)
{
        return container_of(session, gmd_session_io, session);
}

/* Take over an accepted socket. */
int session_new(gmd_server *server, int fd, gmd_session **ret_session);

/* Close the connection, logging `reason` (NULL for an orderly close). Only
 * for code that owns the moment: the session's own callbacks, the
 * scheduling pass, the server's stop. Anywhere a caller may still use the
 * session's buffers, waits or acquirers afterwards, use
 * session_close_later (session.h). */
void session_close(gmd_session *session, const char *reason);

/*
 * Send one message: encode `msg` (may be NULL for an empty payload) and
 * attach `fds` (duplicated by the kernel; the caller keeps its own). While
 * answers are owed to the session the packet is held behind them
 * (answers.h) and goes out with them, in the same loop iteration. If the
 * socket is full the packet is queued; a client whose queue passes
 * [limits] max_send_queue packets or max_send_queue_bytes, or whose user's
 * connections together pass max_user_send_queue_bytes, is disconnected.
 * So is one whose packet cannot be sent, held or queued for any other
 * reason (no memory, an fd that cannot be kept, a send error, the peer
 * gone): the protocol has no way to tell it a packet went missing. The
 * close comes later (session_close_later), so the caller may go on using
 * the session. Returns 0, -EMSGSIZE for a packet over the protocol's limit
 * (nothing sent, the session stays: the caller answers with an error),
 * or another negative errno (the session is then closing).
 */
int session_send(gmd_session *session, uint16_t type, uint32_t request_id,
                 const ProtobufCMessage *msg, const int *fds, unsigned n_fds);

/* Send a packet held behind the session's answers (answers_take), as it
 * was built. As session_send. */
int session_send_held(gmd_session *session, const gmd_answer *held);

/* Before a close that ends the connection on purpose (a stop, a drain):
 * drop what the client sent that nobody will read now (gmd_wire_drain),
 * so that the close does not reset the connection and the client reads
 * what was sent to it last, which says why (a shutdown notice, the
 * drain's revokes). */
void session_hang_up(gmd_session *session);

/* Close the session for a protocol error in a message of `type`. */
void session_protocol_error(gmd_session *session, const char *what,
                            uint16_t type);

#endif
