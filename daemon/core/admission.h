/*
 * admission — what one user may take of the daemon's shared front: its
 * connection slots, its file descriptors (one or more per buffer) and the
 * memory its unread replies hold. Every bound here is in [limits] and
 * exists so that one local user, careless or hostile, cannot lock the
 * others out:
 *
 *   - connections: max_clients in all, admin_clients of them kept for
 *     root and [daemon] admin_group (so `gpu-memctl status` still works
 *     when the rest are taken), max_clients_per_user for everyone else;
 *   - a connection must say hello within hello_timeout_ms;
 *   - buffers: max_buffers_per_user across a user's clients (by default
 *     half the daemon's open-file limit: each buffer keeps an fd open;
 *     kepttally_bound, which bounds the fds kept for its freed buffers
 *     too);
 *   - replies queued to a client that does not read them:
 *     max_send_queue_bytes per connection, max_user_send_queue_bytes per
 *     user (session.c counts them and disconnects the connection that
 *     passes either).
 *
 * A refused connection is told why: one ErrorReply with request id 0, then
 * the socket is closed (proto/gpumem.proto, version history). The reply
 * is request.c's to build and send, and closing the socket so that the
 * peer reads it too (request_refuse).
 */
#ifndef GMD_ADMISSION_H
#define GMD_ADMISSION_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "result.h"

typedef struct gmd_server gmd_server;
typedef struct gmd_session gmd_session;

/*
 * May the peer on the freshly accepted `fd` have a session? 0, or
 * -EUSERS with the reason (for the log and the client) in `why`. The
 * peer's uid in `ret_uid` ((uid_t)-1 when it cannot be read).
 */
int admission_check_connect(gmd_server *server, int fd, uid_t *ret_uid,
                            char *why, size_t len);

/* May session `s` create one more buffer? If not, false, with `ret`
 * saying why (ERR_LIMIT). Over only by what the user's mapping caches
 * hold, it asks for those back and allows it. */
bool admission_allow_buffer(gmd_session *s, gmd_result *ret);

/* Close (later) every session that has not said hello within
 * hello_timeout_ms, after a notice that says why (an ErrorReply with
 * request id 0, owed to it: session_answer). Returns the ms until the next
 * one would be due, or 0 when none is waiting for its hello. */
uint64_t admission_sweep_hellos(gmd_server *server);

#endif
