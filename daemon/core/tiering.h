/*
 * tiering — the client's requests about where its buffers live: acquire
 * (a passive swap-in when the buffer is out), pageout and prefetch (queued
 * moves, answered at once) and wait (for moves to end). The moves
 * themselves are move.c's.
 */
#ifndef GMD_TIERING_H
#define GMD_TIERING_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "copyq.h"
#include "gpumem.pb-c.h"
#include "list.h"
#include "result.h"
#include "waits.h"

typedef struct gmd_session gmd_session;

/* MSG_ACQUIRE, MSG_PAGEOUT, MSG_PREFETCH, MSG_WAIT: their outcomes
 * (result.h). */
gmd_outcome tiering_handle_acquire(gmd_session *session, uint32_t request_id,
                                   const Gmd__AcquireRequest *request,
                                   gmd_result *ret);
gmd_outcome tiering_handle_pageout(gmd_session *session, uint32_t request_id,
                                   const Gmd__MoveRequest *request,
                                   gmd_result *ret);
gmd_outcome tiering_handle_prefetch(gmd_session *session, uint32_t request_id,
                                    const Gmd__MoveRequest *request,
                                    gmd_result *ret);
gmd_outcome tiering_handle_wait(gmd_session *session, uint32_t request_id,
                                const Gmd__WaitRequest *request, gmd_result *ret);

/* Move every released buffer of the session to host memory (admin evict,
 * whole-client pageout). Returns how many moves started, or the error of
 * the first that could not start (move_out_start), which stops it. */
int tiering_pageout_all(gmd_session *session, move_class cls);

/* Answer the session's waits now met (the scheduling pass, after
 * PENDING_WAITS: a move ended or was cancelled). */
void tiering_waits_answer(gmd_session *session);

/* The session is closing: drop its waits without answering. */
void tiering_session_closed(gmd_session *session);

#endif
