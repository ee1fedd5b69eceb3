/*
 * answers — the replies a session is owed that were decided outside the
 * request that asked for them: an acquire granted or failed when its move
 * ends or its deadline passes, a MSG_WAIT met or timed out, the notice a
 * client gets before the daemon closes its connection. Core code knows
 * the outcome but builds no reply (request.c alone turns outcomes into
 * reply messages): it queues the outcome here, in the session it is owed
 * to (gmd_answers, embedded in the session record), and marks
 * PENDING_ANSWERS; the scheduling pass's last step hands each one to
 * request.c's builder (request_send_answers), in the order queued.
 *
 * Order. A client gets its packets in the order the daemon decided them,
 * as when these answers were sent on the spot: an acquire's grant after
 * the remap and ack that finished its move, a revoke or a remap decided
 * after the grant still after it. So while a session has answers queued,
 * any other packet sent to it (a remap, a reply built at once) is held
 * here behind them, as it was built, its fds duplicated, and goes out in
 * its turn. The pass runs in the same loop iteration as the mark (a check
 * handle, pending.h), so what waits here waits microseconds, and only
 * while an answer is queued.
 *
 * A session that closes drops what it was still owed (answers_drop), and
 * nothing is queued for it after that. A queue knows nothing of sessions
 * or replies: tests/unit/test_answers.c drives it on its own.
 */
#ifndef GMD_ANSWERS_H
#define GMD_ANSWERS_H

#include <stdbool.h>
#include <stdint.h>

#include "list.h"
#include "pending.h"
#include "result.h"

/* The most fds a held packet carries: one packet's most (wire.h's
 * GMD_WIRE_MAX_FDS; dispatch/session_io.c checks they agree). */
#define GMD_ANSWER_MAX_FDS 64u

typedef enum answer_kind {
        ANSWER_OK,          /* an OkReply to request_id */
        ANSWER_ERROR,       /* an ErrorReply to request_id: the result's
                             * code and text */
        ANSWER_ALLOCATED,   /* an AllocReply to request_id: the result's
                             * buffer (an allocation answered once what
                             * it lent is back, loan.h) */
        ANSWER_NOTICE,      /* an ErrorReply with request id 0: the daemon
                             * speaking on its own (why it closes the
                             * connection) */
        ANSWER_PACKET,      /* a packet sent while answers were queued,
                             * held behind them as it was built */
} answer_kind;

typedef struct gmd_answer {
        gmd_list link;              /* in gmd_answers.queue */
        answer_kind kind;
        uint32_t request_id;        /* 0 for a notice */
        gmd_result result;          /* OK, ERROR, ALLOCATED, NOTICE */
        /* PACKET: the message as session_send built it; fds are our
         * duplicates, closed by answer_free. */
        uint16_t type;
        uint32_t length;
        unsigned n_fds;
        int fds[GMD_ANSWER_MAX_FDS];
        uint8_t payload[];
} gmd_answer;

typedef struct gmd_answers {
        gmd_list queue;             /* gmd_answer, oldest first */
        unsigned n;
        uint64_t held_bytes;        /* payloads of held packets */
        bool draining;              /* answers_take is handing them out:
                                     * sends go straight to the socket */
        bool closed;                /* dropped: the session is going */
        bool close_after;           /* close the session once sent */
        char close_reason[96];
        gmd_list due_link;          /* in *due while something is owed */
        gmd_list *due;              /* the server's queues to send */
        gmd_pending *pending;
} gmd_answers;

/* An empty queue; `due` lists the queues with something to send (the
 * server's), `pending` is marked when one gets something. */
void answers_init(gmd_answers *answers, gmd_list *due, gmd_pending *pending);

/*
 * Queue an answer of `kind` (OK, ERROR or NOTICE) to request `request_id`
 * (ignored for a notice: 0) with `result`'s code and text, after what is
 * queued already, and mark PENDING_ANSWERS. 0, -ENOMEM, or -ECONNRESET
 * once the queue was dropped or closes after what it holds.
 */
int answers_push(gmd_answers *answers, answer_kind kind, uint32_t request_id,
                 const gmd_result *result);

/* Must a packet sent now wait behind queued answers (answers_hold)? Not
 * while they are handed out: those packets are theirs, in their turn. */
static inline bool answers_holding(const gmd_answers *answers)
{
        return !answers->draining &&
               (!list_empty(&answers->queue) || answers->close_after);
}

/*
 * Hold a packet built for the socket behind the queued answers: its
 * payload copied, its fds duplicated (the caller keeps its own). 0,
 * -ENOMEM, a negative errno from duplicating an fd, or -ECONNRESET once
 * the queue was dropped or closes after what it holds.
 */
int answers_hold(gmd_answers *answers, uint16_t type, uint32_t request_id,
                 const uint8_t *payload, uint32_t length, const int *fds,
                 unsigned n_fds);

/* After what is queued, close the session, logging `reason`: nothing more
 * is queued or held. Marks PENDING_ANSWERS, so the queue is sent even if
 * empty. */
void answers_close_after(gmd_answers *answers, const char *reason);

/*
 * The oldest answer or held packet, out of the queue: the caller sends it
 * and frees it with answer_free. Until it returns NULL the queue counts
 * as draining (sends go straight out, behind this one); NULL also takes
 * the queue off the due list. Take until NULL.
 */
gmd_answer *answers_take(gmd_answers *answers);

/* Free an answer taken out; closes a held packet's fds. NULL is fine. */
gmd_answer *answer_free(gmd_answer *answer);

/* The session is going: free everything unsent, leave the due list, and
 * refuse what comes after. */
void answers_drop(gmd_answers *answers);

/* The first queue of `due` with something to send, or NULL. */
static inline gmd_answers *answers_first_due(gmd_list *due)
{
        return list_empty(due) ? NULL :
               container_of(due->next, gmd_answers, due_link);
}

#endif
