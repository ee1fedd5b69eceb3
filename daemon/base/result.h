/*
 * result — what handling a request came to, before any reply is built.
 *
 * Handlers and the modules under them do not send error replies: they
 * return an outcome and, for an error, fill a gmd_result with the protocol
 * error code and the sentence that says what to do. request.c turns an
 * outcome into the reply (request_answer); an answer that comes later (a
 * waiting acquire or MSG_WAIT, a notice) is a result too: core code queues
 * it in its session when it is known (session_answer, core/answers.h) and
 * the scheduling pass hands it to request.c (request_send_answers), which
 * builds the reply the same way. An allocation's result is its buffer
 * (OUTCOME_ALLOCATED): request.c builds the AllocReply, also for one
 * served later from the wait queue (request_answer). HelloReply is
 * request.c's too; StatusReply is built by status.c for request.c's
 * handler (OUTCOME_ANSWERED).
 */
#ifndef GMD_RESULT_H
#define GMD_RESULT_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

/*
 * The protocol's error codes (proto/gpumem.proto, ErrorCode), with its
 * values, so that a result's code goes into the reply unchanged
 * (request.c checks at compile time that they agree). Only the dispatch
 * layer speaks the protocol; the layers below it know its error codes
 * by these names and nothing else of it.
 */
typedef enum gmd_error_code {
        GMD_ERR_NONE = 0,
        GMD_ERR_INVALID = 1,            /* a field's value is out of range */
        GMD_ERR_NO_MEMORY = 2,          /* no room now; deadline passed */
        GMD_ERR_TOO_LARGE = 3,          /* more than the pool could hold */
        GMD_ERR_NOT_FOUND = 4,          /* no such buffer of this client */
        GMD_ERR_PERMISSION = 5,         /* not allowed for this client */
        GMD_ERR_QUOTA = 6,              /* beyond this client's quota */
        GMD_ERR_BUSY = 7,               /* the buffer's state forbids it */
        GMD_ERR_UNSUPPORTED = 8,        /* not offered here */
        GMD_ERR_VERSION = 9,            /* no protocol version in common */
        GMD_ERR_INTERNAL = 10,          /* the daemon failed; see its log */
        GMD_ERR_TIMED_OUT = 11,         /* the deadline passed waiting */
        GMD_ERR_SHUTTING_DOWN = 12,     /* the daemon is stopping */
        GMD_ERR_LIMIT = 13,             /* too many requests or buffers */
} gmd_error_code;

typedef enum gmd_outcome {
        OUTCOME_OK,             /* request.c answers with an OkReply */
        OUTCOME_ERROR,          /* request.c answers with the result's error */
        OUTCOME_ALLOCATED,      /* request.c answers with the AllocReply of
                                 * the result's buffer */
        OUTCOME_ANSWERED,       /* a typed reply was sent already */
        OUTCOME_LATER,          /* answered later, when it is known */
        OUTCOME_NONE,           /* a notification: nothing to answer */
} gmd_outcome;

typedef struct gmd_result {
        int code;               /* GMD_ERR_*; 0: success */
        char text[512];         /* why, and what to do about it */
        /* OUTCOME_ALLOCATED: the buffer created, its id (to find it again
         * when the answer goes out later: it may be gone by then), and
         * when the request came (now_us(), for the latency histogram). */
        struct gmd_dbuffer *buffer;
        uint64_t buffer_id;
        uint64_t since_us;
} gmd_result;

/* A success: no code, no text. */
static inline void result_ok(gmd_result *r)
{
        r->code = 0;
        r->text[0] = '\0';
        r->buffer = NULL;
        r->buffer_id = 0;
        r->since_us = 0;
}

/* Fill `r` with an error (`code` is a GMD_ERR_*) and its reason;
 * returns OUTCOME_ERROR, so a handler can `return result_error(...)`. */
__attribute__((format(printf, 3, 4)))
static inline gmd_outcome result_error(gmd_result *r, int code, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(r->text, sizeof(r->text), fmt, ap);
        va_end(ap);
        r->code = code;
        return OUTCOME_ERROR;
}

#endif
