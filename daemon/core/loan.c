/*
 * loan — see loan.h. A loan keeps no list of its buffers: they are the
 * buffers of its process's sessions whose b->loan points at it, found by
 * walking those sessions when it needs them (when it starts, when its
 * waiter is served, when it ends), which a waiting allocation does a
 * handful of times, not every pass.
 */
#include "loan.h"

#include <errno.h>
#include <stdlib.h>

#include "buffer.h"
#include "log.h"
#include "move.h"
#include "pending.h"
#include "placement.h"
#include "reuse.h"
#include "server.h"
#include "session.h"
#include "timeutil.h"
#include "waitq.h"

static bool lendable(const gmd_dbuffer *b)
{
        return b->acquired && !b->loan && !b->parked && !b->acquirer &&
               !b->move && b->tier == GMD_TIER_VRAM &&
               b->state == GMD_STATE_RESIDENT && !placement_pinned(b) &&
               b->mem && b->mem->fd >= 0;
}

/* Is `s` the first connection of its process, in the server's list, that
 * made a wait that lends? Then its process's lendable buffers are counted
 * once, for it. */
static bool first_lender(const gmd_server *server, const gmd_session *s)
{
        const gmd_list *pos;

        if (!s->lends)
                return false;
        list_for_each(pos, &server->sessions.all) {
                const gmd_session *o = container_of(pos, gmd_session, link);

                if (o->lends && session_same_process(s, o))
                        return o == s;
        }
        return false;
}

/* Walks the sessions once per process that lends, not once per session:
 * a waiter asks this on every scheduling pass. */
uint64_t loan_would_lend(gmd_server *server, unsigned device,
                         const gmd_session *waiter, int priority)
{
        uint64_t bytes = 0;
        gmd_list *lpos, *pos, *bpos;

        list_for_each(lpos, &server->sessions.all) {
                gmd_session *lender = container_of(lpos, gmd_session, link);

                if (!first_lender(server, lender) ||
                    session_same_process(lender, waiter))
                        continue;
                list_for_each(pos, &server->sessions.all) {
                        gmd_session *o = container_of(pos, gmd_session, link);

                        if (!session_same_process(o, lender) ||
                            o->priority > priority || o->closing)
                                continue;
                        list_for_each(bpos, &o->buffers) {
                                gmd_dbuffer *b = container_of(bpos, gmd_dbuffer,
                                                              owner_link);

                                if (b->device == device && lendable(b))
                                        bytes += b->size;
                        }
                }
        }
        return bytes;
}

gmd_loan *loan_start(gmd_session *s, uint32_t request_id)
{
        gmd_server *server = s->server;
        uint64_t bytes = 0;
        gmd_list *pos, *bpos;
        gmd_loan *loan;
        char who[128];

        s->lends = true;
        if (s->loan)
                return NULL;
        loan = calloc(1, sizeof(*loan));
        if (!loan)
                return NULL;
        loan->server = server;
        loan->session = s;
        loan->request_id = request_id;
        list_for_each(pos, &server->sessions.all) {
                gmd_session *o = container_of(pos, gmd_session, link);

                if (!session_same_process(s, o) || o->closing)
                        continue;
                list_for_each(bpos, &o->buffers) {
                        gmd_dbuffer *b = container_of(bpos, gmd_dbuffer, owner_link);

                        if (!lendable(b))
                                continue;
                        b->loan = loan;
                        b->released_ms = now_ms();
                        buffer_index(b);
                        loan->lent++;
                        bytes += b->size;
                }
        }
        if (!loan->lent) {
                free(loan);
                return NULL;
        }
        s->loan = loan;
        server->stats.loans++;
        log_info("%s waits for room and lends its %u buffers in use (%llu "
                 "bytes) meanwhile (it waits with a YIELD flag)",
                 session_describe(s, who, sizeof(who)), loan->lent,
                 (unsigned long long)bytes);
        /* Lent buffers are room for whoever waits. */
        pending_mark(&server->pending, PENDING_ROOM | PENDING_EVICT);
        return loan;
}

/* Call `fn` on every buffer lent to `loan`. `fn` may take the buffer out
 * of the loan, not free it. */
static void loan_each(gmd_loan *loan, void (*fn)(gmd_loan *, gmd_dbuffer *,
                                                 void *), void *arg)
{
        gmd_list *pos, *bpos, *btmp;

        list_for_each(pos, &loan->server->sessions.all) {
                gmd_session *o = container_of(pos, gmd_session, link);

                list_for_each_safe(bpos, btmp, &o->buffers) {
                        gmd_dbuffer *b = container_of(bpos, gmd_dbuffer, owner_link);

                        if (b->loan == loan)
                                fn(loan, b, arg);
                }
        }
}

struct out_sum {
        unsigned device;
        uint64_t bytes;
};

static void add_out(gmd_loan *loan, gmd_dbuffer *b, void *arg)
{
        struct out_sum *sum = arg;

        (void)loan;
        if (b->device == sum->device &&
            (b->tier != GMD_TIER_VRAM ||
             (b->move && b->move->copy.dir == GMD_COPY_OUT)))
                sum->bytes += b->size;
}

uint64_t loan_out_bytes(const gmd_loan *loan, unsigned device)
{
        struct out_sum sum = { device, 0 };

        if (!loan || loan->ended)
                return 0;
        loan_each((gmd_loan *)loan, add_out, &sum);
        return sum.bytes;
}

bool loan_fits(const gmd_loan *loan, uint64_t size, unsigned device)
{
        gmd_server *server = loan->server;

        return pool_free(server_vram_pool(server, device)) +
               reuse_reachable_bytes(&server->reuse, device) >=
               size + loan_out_bytes(loan, device);
}

/* Everything is back (or could not come): queue the answer; the loan is
 * over. */
static void loan_answer(gmd_loan *loan)
{
        gmd_session *s = loan->session;

        /* With no session (it closed) there is nobody to answer, and a
         * new buffer went with the session's others. */
        if (s) {
                s->loan = NULL;
                session_answer(s, loan->kind, loan->request_id, &loan->result);
        }
        free(loan);
}

static void loan_back(void *ctx, gmd_dbuffer *b, int code, const char *why)
{
        gmd_loan *loan = ctx;

        loan->returning--;
        if (code && loan->session && loan->kind != ANSWER_ERROR) {
                /* The call fails: the new buffer, unknown to the client,
                 * goes with it (unless it was revoked meanwhile). */
                gmd_dbuffer *made = loan->kind != ANSWER_ALLOCATED ? NULL :
                                    buffer_find(loan->server, loan->session,
                                                loan->result.buffer_id);

                if (made)
                        move_free_buffer(loan->server, made);
                result_error(&loan->result, code, "buffer %llu, lent while "
                             "this allocation waited, could not come back to "
                             "VRAM: %s", (unsigned long long)b->id, why);
                loan->kind = ANSWER_ERROR;
        }
        if (!loan->returning)
                loan_answer(loan);
}

static void return_one(gmd_loan *loan, gmd_dbuffer *b, void *arg)
{
        int r;

        (void)arg;
        b->loan = NULL;
        loan->returning++;
        r = move_acquire_for(loan->server, b, loan_back, loan);
        if (r == 1) {
                loan->returning--;      /* still in VRAM: acquired again */
                loan->server->stats.lent_stayed++;
                return;
        }
        loan->server->stats.lent_moved++;
        if (r < 0)
                loan_back(loan, b, GMD_ERR_INTERNAL,
                          "cannot queue its swap-in");
}

void loan_end(gmd_loan *loan, answer_kind kind, const gmd_result *result)
{
        if (loan->ended)
                return;
        loan->kind = kind;
        loan->result = *result;
        loan->result.buffer = NULL;     /* found again by its id */
        /* Held so that a buffer granted at once does not answer before
         * the others are on their way. */
        loan->returning++;
        loan_each(loan, return_one, NULL);
        loan->ended = true;
        loan_back(loan, NULL, 0, NULL);
}

/* The acquire the loan was made for is granted (code 0) or failed. */
static void loan_acquired(void *ctx, gmd_dbuffer *b, int code, const char *why)
{
        gmd_loan *loan = ctx;
        gmd_result res;

        /* Its swap-in may go on as a prefetch: no longer this loan's. */
        if (b->move_waiter)
                b->move_waiter->loan = NULL;
        result_ok(&res);
        if (code)
                result_error(&res, code, "buffer %llu: %s",
                             (unsigned long long)b->id, why);
        loan_end(loan, code ? ANSWER_ERROR : ANSWER_OK, &res);
}

void loan_take_acquire(gmd_loan *loan, gmd_dbuffer *b)
{
        move_acquire_divert(b, loan_acquired, loan);
        if (b->move_waiter)
                b->move_waiter->loan = loan;
}

void loan_forget(gmd_dbuffer *b)
{
        b->loan = NULL;
        buffer_index(b);
}

void loan_session_closed(gmd_session *s)
{
        gmd_loan *loan = s->loan;
        gmd_result none;
        gmd_list *pos;

        if (!loan)
                return;
        s->loan = NULL;
        loan->session = NULL;
        /* Its own buffers are freed next: not brought back first, and an
         * acquire of one that the loan was to answer is the session's
         * again (nobody is answered: it closes). */
        list_for_each(pos, &s->buffers) {
                gmd_dbuffer *b = container_of(pos, gmd_dbuffer, owner_link);

                if (b->loan == loan)
                        loan_forget(b);
                if (b->acquirer && b->acquirer->ctx == loan)
                        move_acquire_divert(b, NULL, NULL);
                if (b->move_waiter && b->move_waiter->loan == loan)
                        b->move_waiter->loan = NULL;
        }
        result_ok(&none);
        loan_end(loan, ANSWER_OK, &none);
}
