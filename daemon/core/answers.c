/*
 * answers — see answers.h. One allocation per answer or held packet: a
 * session owes a handful at a time (its acquires and waits that ended in
 * this loop iteration, and what was sent to it meanwhile), and the pass
 * sends them before the loop waits again, so nothing here grows.
 */
#include "answers.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void answers_init(gmd_answers *q, gmd_list *due, gmd_pending *pending)
{
        memset(q, 0, sizeof(*q));
        list_init(&q->queue);
        list_init(&q->due_link);
        q->due = due;
        q->pending = pending;
}

/* Something is owed: on the due list, and the pass marked. */
static void answers_owed(gmd_answers *q)
{
        if (list_empty(&q->due_link))
                list_add_tail(q->due, &q->due_link);
        pending_mark(q->pending, PENDING_ANSWERS);
}

static void answers_add(gmd_answers *q, gmd_answer *a)
{
        list_add_tail(&q->queue, &a->link);
        q->n++;
        answers_owed(q);
}

int answers_push(gmd_answers *q, answer_kind kind, uint32_t request_id,
                 const gmd_result *r)
{
        gmd_answer *a;

        if (q->closed || q->close_after)
                return -ECONNRESET;
        a = calloc(1, sizeof(*a));
        if (!a)
                return -ENOMEM;
        a->kind = kind;
        a->request_id = kind == ANSWER_NOTICE ? 0 : request_id;
        a->result = *r;
        /* An answer names no buffer by pointer: it may be gone by the time
         * the answer goes out. An allocation's names its buffer's id. */
        a->result.buffer = NULL;
        answers_add(q, a);
        return 0;
}

int answers_hold(gmd_answers *q, uint16_t type, uint32_t request_id,
                 const uint8_t *payload, uint32_t length, const int *fds,
                 unsigned n_fds)
{
        gmd_answer *a;

        if (q->closed || q->close_after)
                return -ECONNRESET;
        if (n_fds > GMD_ANSWER_MAX_FDS)
                return -EINVAL;
        a = calloc(1, sizeof(*a) + length);
        if (!a)
                return -ENOMEM;
        a->kind = ANSWER_PACKET;
        a->type = type;
        a->request_id = request_id;
        a->length = length;
        if (length)
                memcpy(a->payload, payload, length);
        for (unsigned i = 0; i < n_fds; i++) {
                a->fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
                if (a->fds[i] < 0) {
                        int r = -errno;

                        answer_free(a);
                        return r;
                }
                a->n_fds++;
        }
        q->held_bytes += length;
        answers_add(q, a);
        return 0;
}

void answers_close_after(gmd_answers *q, const char *reason)
{
        if (q->closed || q->close_after)
                return;
        q->close_after = true;
        snprintf(q->close_reason, sizeof(q->close_reason), "%s", reason);
        answers_owed(q);
}

gmd_answer *answers_take(gmd_answers *q)
{
        gmd_answer *a;

        if (list_empty(&q->queue)) {
                q->draining = false;
                list_remove(&q->due_link);
                return NULL;
        }
        a = container_of(q->queue.next, gmd_answer, link);
        list_remove(&a->link);
        q->n--;
        if (a->kind == ANSWER_PACKET)
                q->held_bytes -= a->length;
        q->draining = true;
        return a;
}

gmd_answer *answer_free(gmd_answer *a)
{
        if (!a)
                return NULL;
        for (unsigned i = 0; i < a->n_fds; i++)
                close(a->fds[i]);
        free(a);
        return NULL;
}

void answers_drop(gmd_answers *q)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &q->queue) {
                list_remove(pos);
                answer_free(container_of(pos, gmd_answer, link));
        }
        q->n = 0;
        q->held_bytes = 0;
        q->draining = false;
        q->closed = true;
        list_remove(&q->due_link);
}
