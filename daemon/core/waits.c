/*
 * waits — see waits.h. A wait leaves the list at once when answered or
 * dropped; its memory goes with its timer's close callback.
 */
#include "waits.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void waits_init(gmd_waits *ws)
{
        list_init(&ws->list);
        ws->n = 0;
}

static void wait_on_closed(uv_handle_t *handle)
{
        gmd_move_wait *w = handle->data;

        free(w->ids);
        free(w);
}

static void wait_on_deadline(uv_timer_t *timer)
{
        gmd_move_wait *w = timer->data;

        w->expire(w);
        waits_done(w);
}

int waits_add(gmd_waits *ws, uv_loop_t *loop, void *owner, uint32_t request_id,
              const uint64_t *ids, size_t n_ids, int64_t timeout_ms,
              waits_expire_fn expire, gmd_move_wait **ret_wait)
{
        gmd_move_wait *w = calloc(1, sizeof(*w));

        if (!w)
                return -ENOMEM;
        if (n_ids) {
                w->ids = malloc(n_ids * sizeof(*w->ids));
                if (!w->ids) {
                        free(w);
                        return -ENOMEM;
                }
                memcpy(w->ids, ids, n_ids * sizeof(*w->ids));
                w->n_ids = n_ids;
        }
        if (uv_timer_init(loop, &w->timer) < 0) {
                free(w->ids);
                free(w);
                return -ENOMEM;
        }
        w->registry = ws;
        w->owner = owner;
        w->request_id = request_id;
        w->timeout_ms = timeout_ms;
        w->expire = expire;
        w->timer.data = w;
        list_add_tail(&ws->list, &w->link);
        ws->n++;
        *ret_wait = w;
        return 0;
}

void waits_arm(gmd_move_wait *w)
{
        if (w->timeout_ms > 0 && !w->done)
                uv_timer_start(&w->timer, wait_on_deadline, (uint64_t)w->timeout_ms, 0);
}

void waits_done(gmd_move_wait *w)
{
        if (w->done)
                return;         /* a reply's side effects got here first */
        w->done = true;
        w->registry->n--;
        list_remove(&w->link);
        uv_timer_stop(&w->timer);
        uv_close((uv_handle_t *)&w->timer, wait_on_closed);
}

void waits_answer_met(gmd_waits *ws, bool (*met)(const gmd_move_wait *wait),
                      void (*answer)(gmd_move_wait *wait))
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &ws->list) {
                gmd_move_wait *w = container_of(pos, gmd_move_wait, link);

                if (met(w)) {
                        answer(w);
                        waits_done(w);
                }
        }
}

void waits_drop_all(gmd_waits *ws)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &ws->list)
                waits_done(container_of(pos, gmd_move_wait, link));
}
