/*
 * request — what the daemon does with each message a client sends: decode
 * (after the header checks of wire.c), validate every field, act, answer.
 * A malformed message closes only its own session.
 */
#ifndef GMD_REQUEST_H
#define GMD_REQUEST_H

#include "result.h"
#include "wire.h"

typedef struct gmd_session gmd_session;
typedef struct gmd_dbuffer gmd_dbuffer;

/* Handle one received packet. Takes ownership of its fds. */
void request_handle(gmd_session *session, gmd_wire_packet *packet);

/* Turn `outcome` of request `request_id` into its reply: an OkReply, an
 * ErrorReply (session_answer), or the AllocReply of `result`'s buffer;
 * nothing for an outcome answered already, later or never. Also for an
 * allocation served or expired later from the wait queue. */
void request_answer(gmd_session *session, uint32_t request_id,
                    gmd_outcome outcome, gmd_result *result);

#endif
