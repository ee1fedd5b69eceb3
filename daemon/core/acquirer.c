/*
 * acquirer — see acquirer.h. Answered once: grant and fail after the
 * first answer do nothing, so a move's end and the deadline may race. The
 * record is freed by the timer's close callback, never inside the timer's
 * own callback.
 */
#include "acquirer.h"

#include <stdlib.h>

#include "buffer.h"
#include "result.h"
#include "session.h"
#include "timeutil.h"

gmd_acquirer *acquirer_new(uv_loop_t *loop, gmd_session *s, gmd_dbuffer *b)
{
        gmd_acquirer *a = calloc(1, sizeof(*a));

        if (!a || uv_timer_init(loop, &a->timer) < 0) {
                free(a);
                return NULL;
        }
        a->buffer = b;
        a->session = s;
        a->since_us = now_us();
        a->timer.data = a;
        return a;
}

static void acquirer_on_closed(uv_handle_t *handle)
{
        free(handle->data);
}

static void acquirer_done(gmd_acquirer *a)
{
        if (a->done)
                return;
        a->done = true;
        a->buffer->acquirer = NULL;
        uv_timer_stop(&a->timer);
        uv_close((uv_handle_t *)&a->timer, acquirer_on_closed);
}

void acquirer_grant(gmd_acquirer *a)
{
        gmd_result ok;

        if (a->done)
                return;
        result_ok(&ok);
        buffer_set_acquired(a->buffer, true);
        if (a->on_done)
                a->on_done(a->ctx, a->buffer, 0, NULL);
        else
                session_answer(a->session, ANSWER_OK, a->request_id, &ok);
        acquirer_done(a);
}

void acquirer_fail(gmd_acquirer *a, int code, const char *why)
{
        gmd_result res;

        if (a->done)
                return;
        if (a->on_done) {
                a->on_done(a->ctx, a->buffer, code, why);
                acquirer_done(a);
                return;
        }
        result_error(&res, code, "buffer %llu: %s",
                     (unsigned long long)a->buffer->id, why);
        session_answer(a->session, ANSWER_ERROR, a->request_id, &res);
        acquirer_done(a);
}
