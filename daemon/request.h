/*
 * request — what the daemon does with each message a client sends: decode
 * (after the header checks of wire.c), validate every field, act, answer.
 * A malformed message closes only its own session.
 */
#ifndef GMD_REQUEST_H
#define GMD_REQUEST_H

#include "wire.h"

typedef struct gmd_session gmd_session;
typedef struct gmd_dbuffer gmd_dbuffer;

/* Handle one received packet. Takes ownership of its fds. */
void request_handle(gmd_session *session, gmd_wire_packet *packet);

#endif
