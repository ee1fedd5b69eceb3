/*
 * acquirer — an acquire waiting for its buffer to be usable: a client's
 * request (answered in its session) or the daemon's own (move_acquire_for,
 * told through on_done). move.c makes one when an acquire must wait for a
 * swap-in or a move to end, and grants or fails it when that move ends or
 * the acquire's deadline passes; this file is only the acquirer's own
 * life: made, answered once, freed once its timer has closed.
 *
 * An acquire that waited is answered when its move ends or its deadline
 * passes: the outcome is queued in its session (session_answer), and the
 * scheduling pass's last step has request.c send the reply — after the
 * remap and ack that finished the move, in that same loop iteration.
 */
#ifndef GMD_ACQUIRER_H
#define GMD_ACQUIRER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct gmd_dbuffer gmd_dbuffer;
typedef struct gmd_session gmd_session;

/* Told of an acquire the daemon made for itself (move_acquire_for):
 * `code` 0 when the buffer is back and acquired, else a
 * GMD_ERR_* and why. */
typedef void (*move_acquired_fn)(void *ctx, gmd_dbuffer *buffer, int code,
                                 const char *why);

typedef struct gmd_acquirer {
        gmd_dbuffer *buffer;
        gmd_session *session;
        move_acquired_fn on_done;   /* NULL: a client's request */
        void *ctx;
        uint32_t request_id;
        int64_t timeout_ms;
        uint64_t since_us;
        bool done;                  /* answered; freed on the timer's close */
        uv_timer_t timer;           /* its deadline; data is the acquirer */
} gmd_acquirer;

/* An acquirer of `buffer` for `session`, its timer initialized on `loop`
 * (not started), or NULL. */
gmd_acquirer *acquirer_new(uv_loop_t *loop, gmd_session *session,
                           gmd_dbuffer *buffer);

/* The buffer is usable: the lease is the client's (buffer_set_acquired),
 * and the acquire is answered OK. Nothing once answered. */
void acquirer_grant(gmd_acquirer *acquirer);

/* The acquire fails with `code` (GMD_ERR_*) and `why`. Nothing
 * once answered. */
void acquirer_fail(gmd_acquirer *acquirer, int code, const char *why);

#endif
