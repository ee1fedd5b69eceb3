/*
 * request — what the daemon does with each message a client sends: decode
 * (after the header checks of wire.c), validate every field, act, answer.
 * A malformed message closes only its own session. It is also the one
 * place outcomes become reply messages: those of requests answered at
 * once, and those decided later, which core code queues in the session
 * (answers.h) and the scheduling pass hands here.
 */
#ifndef GMD_REQUEST_H
#define GMD_REQUEST_H

#include "result.h"
#include "wire.h"

typedef struct gmd_session gmd_session;
typedef struct gmd_dbuffer gmd_dbuffer;

/* What the core tells a client outside any request, as protocol
 * messages (session.h): lifecycle.c registers it on the server. */
extern const struct gmd_session_ops request_session_ops;

/* Handle one received packet. Takes ownership of its fds. */
void request_handle(gmd_session *session, gmd_wire_packet *packet);

/* Turn `outcome` of request `request_id` into its reply: an OkReply, an
 * ErrorReply, or the AllocReply of `result`'s buffer; nothing for an
 * outcome answered already, later or never. Also for an allocation served
 * or expired later from the wait queue. */
void request_answer(gmd_session *session, uint32_t request_id,
                    gmd_outcome outcome, gmd_result *result);

/*
 * Send what the session is owed (answers.h), in the order it was queued:
 * each answer core code queued (an acquire granted or failed, a MSG_WAIT
 * answered, a notice) built here into its OkReply or ErrorReply, each
 * packet held behind them sent as it was built; then close the session if
 * it was to close after them. The scheduling pass's last step, and
 * whoever closes a session on the spot and wants it told first (a drain,
 * the daemon's stop).
 */
void request_send_answers(gmd_session *session);

/* Tell the peer on a refused connection `fd` why (an ErrorReply of `code`
 * with request id 0), then close `fd` so that the peer still reads it. Never blocks. */
void request_refuse(int fd, int code, const char *why);

#endif
