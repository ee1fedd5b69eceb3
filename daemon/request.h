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

/* Create the buffer of an allocation and send its AllocReply. Used both for
 * allocations that fit at once and for waiters served later. Returns 0,
 * -ENOSPC (no room; nothing sent) or another error (an error reply sent).
 * `since_us` (now_us() when the request came) feeds the latency histogram. */
int request_alloc_now(gmd_session *session, uint32_t request_id,
                      uint64_t size, unsigned device, unsigned flags,
                      uint64_t since_us);

#endif
