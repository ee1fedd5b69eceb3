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
#include "list.h"
#include "result.h"
#include "waits.h"

typedef struct gmd_session gmd_session;

/* The requests below, as request.c decoded them: only their fields. */
typedef struct gmd_acquire_ask {            /* MSG_ACQUIRE */
        uint64_t buffer_id;
        int64_t timeout_ms;
        uint32_t flags;                     /* GMD_ACQUIRE_* */
} gmd_acquire_ask;

typedef struct gmd_buffers_ask {            /* MSG_PAGEOUT, _PREFETCH, _WAIT */
        size_t n_buffer_ids;
        const uint64_t *buffer_ids;
        int64_t timeout_ms;                 /* MSG_WAIT's */
} gmd_buffers_ask;

/* MSG_ACQUIRE, MSG_PAGEOUT, MSG_PREFETCH, MSG_WAIT: their outcomes
 * (result.h). */
gmd_outcome tiering_handle_acquire(gmd_session *session, uint32_t request_id,
                                   const gmd_acquire_ask *request,
                                   gmd_result *ret);
gmd_outcome tiering_handle_pageout(gmd_session *session, uint32_t request_id,
                                   const gmd_buffers_ask *request,
                                   gmd_result *ret);
gmd_outcome tiering_handle_prefetch(gmd_session *session, uint32_t request_id,
                                    const gmd_buffers_ask *request,
                                    gmd_result *ret);
gmd_outcome tiering_handle_wait(gmd_session *session, uint32_t request_id,
                                const gmd_buffers_ask *request, gmd_result *ret);

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
