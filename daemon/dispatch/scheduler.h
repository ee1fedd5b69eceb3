/*
 * scheduler — the scheduling pass: the one place that restarts the daemon's
 * work after something changed, and that sends the answers decided outside
 * the requests that asked. Lower modules only mark what changed
 * (pending.h); the pass runs from a libuv check handle once per loop
 * iteration in which something was marked, after that iteration's I/O
 * callbacks (an idle handle keeps the poll from blocking when the mark
 * came from a timer). It never runs inside the callback that marked, so
 * nothing a caller still holds is freed under it, and it is never
 * re-entered.
 *
 * Its order, fixed (each step runs when its mark is set, clearing the mark
 * first; a step may mark work for itself or another, and the pass goes
 * round again, from the top, until nothing is marked):
 *
 *   1. copies   end the moves whose copies are over — every byte copied,
 *               or stopped, failed or refused at submit (copyq's ended
 *               lists, move_copy_ended): remaps, rollbacks, finished and
 *               abandoned moves, orphans' memory released.
 *   2. closes   close the sessions marked with session_close_later (their
 *               waiters and waits dropped, their buffers freed), and free
 *               a batch of those closing in steps (session.h: at most
 *               SESSION_CLOSE_BATCH buffers a loop iteration), closing
 *               each whose last buffer went. While one is left the step
 *               marks itself for the next iteration's pass
 *               (pending_mark_next), not this one's: the loop reads every
 *               socket between two batches.
 *   3. room     serve the wait queue in rank order (waitq_serve): swap-ins
 *               an acquire waits for, allocations, prefetches. A waiter
 *               that does not fit marks eviction.
 *   4. evict    make room for what still waits (evict_balance): release
 *               kept VRAM (which marks room again), ask for parked
 *               buffers, move idle buffers out.
 *   5. waits    answer the MSG_WAITs whose buffers stopped moving
 *               (tiering_waits_answer): the answers are queued, as below.
 *   6. answers  send what sessions are owed (answers.h): per session, in
 *               the order queued, each outcome core code queued with
 *               session_answer is built into its OkReply or ErrorReply by
 *               request.c (request_send_answers), and each packet held
 *               behind one goes out in its turn.
 *
 * Copies come first because their moves free or take memory that the
 * wait queue counts; closes before the queue so a closing client's memory
 * serves the others and its waiters are gone; the queue before eviction
 * so eviction only makes room for what really does not fit; waits after
 * them, so they see every move the steps before ended or started; answers
 * last, so every answer the steps before decided (an acquire granted as
 * its move finished, a wait met) goes out in this same pass. The order a
 * client sees is the order the daemon decided: while a session is owed an
 * answer, whatever else is sent to it (a remap from the queue or the
 * evictor, a reply built at once) is held behind that answer, so a grant
 * still follows the remap and ack that finished its move, and a remap
 * decided after the grant still follows it. The pass runs in the loop
 * iteration that marked, so an answer waits microseconds.
 *
 * Who marks what:
 *   copies  copyq: a copy's last chunk came back, or a submit was refused.
 *   closes  session_close_later (a client not reading its replies);
 *           a session closing in steps, for the next iteration
 *           (session_end, and the step itself while one is left).
 *   room    buffer_free; a move finished, abandoned or orphaned and over;
 *           a session closed that held buffers or kept VRAM; a swap-in
 *           queued or moved up (waitq); a reload; a resting copy queue
 *           usable again (a timer); the evictor releasing kept VRAM.
 *   evict   an allocation starts waiting; a buffer released or parked
 *           while something waits; the queue left a waiter unserved.
 *   waits   a move finished or abandoned; a swap-in refused or cancelled.
 *   answers session_answer (answers_push): an acquire granted or failed
 *           (move.c: its move finished, abandoned or refused, its buffer
 *           freed, its deadline passed); a MSG_WAIT met (step 5) or timed
 *           out (its timer); the notice before a hello-timeout close
 *           (admission.c, session_close_after_answers).
 */
#ifndef GMD_SCHEDULER_H
#define GMD_SCHEDULER_H

typedef struct gmd_server gmd_server;

#include "waitq.h"

/* What serving, expiring and cancelling a waiter means: an allocation
 * (alloc.h) or a swap-in (move.h). */
extern const gmd_waitq_ops scheduler_waitq_ops;

/* Set up the pass's handles (server->pending). 0 or a negative errno. */
int scheduler_start(gmd_server *server);

#endif
