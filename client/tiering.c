/*
 * tiering — gmd_pageout, gmd_prefetch and gmd_wait: one request each,
 * answered once the moves are queued (or, for wait, once they ended);
 * gmd_pageout_nowait and gmd_prefetch_nowait send the same request and
 * leave its answer to the I/O thread and gmd_flush (client.h). The
 * moves themselves reach this process as remap notifications, which the
 * I/O thread applies at the buffer's unchanged address (buffer.c).
 */
#include <errno.h>
#include <stdatomic.h>

#include "buffer.h"
#include "client.h"
#include "errors.h"
#include "gpumem.pb-c.h"

/* What every tiering call checks before it asks the daemon; then the ids
 * its request names: `buffer`'s in *id, or none (all of the client's). */
static int tiering_check(gmd_client *client, const char *fn, gmd_buffer *buffer,
                         uint64_t *id, size_t *ret_n_ids, uint64_t **ret_ids)
{
        if (!client) {
                gmd__error_set("%s: client is NULL", fn);
                return -EINVAL;
        }
        if (buffer && atomic_load(&buffer->revoked)) {
                gmd__error_set("%s: buffer %llu was revoked: %s", fn,
                          (unsigned long long)buffer->id, buffer->revoke_reason);
                return GMD_EREVOKED;
        }
        *ret_n_ids = 0;
        *ret_ids = NULL;
        if (buffer) {
                *id = buffer->id;
                *ret_n_ids = 1;
                *ret_ids = id;
        }
        return 0;
}

static int tiering_call(gmd_client *client, const char *fn, uint16_t type,
                        gmd_buffer *buffer, int64_t timeout_ms)
{
        Gmd__MoveRequest move = GMD__MOVE_REQUEST__INIT;
        Gmd__WaitRequest wait = GMD__WAIT_REQUEST__INIT;
        gmd_request req = { .device = buffer ? buffer->device : 0,
                            .buffer_id = buffer ? buffer->id : 0,
                            .names = buffer };
        uint64_t id;
        int r;

        r = tiering_check(client, fn, buffer, &id, &move.n_buffer_ids,
                          &move.buffer_ids);
        if (r < 0)
                return r;
        wait.n_buffer_ids = move.n_buffer_ids;
        wait.buffer_ids = move.buffer_ids;
        wait.timeout_ms = timeout_ms < 0 ? -1 : timeout_ms;
        if (type == GMD__MSG_TYPE__MSG_WAIT) {
                req.timeout_ms = timeout_ms;
                req.deadline_ms = gmd__deadline_of(timeout_ms);
        }
        r = gmd__client_call(client, &req, type,
                        type == GMD__MSG_TYPE__MSG_WAIT ? &wait.base : &move.base);
        gmd__request_clear(&req);
        return r;
}

/** Move released buffers to host memory; see gpumem.h. */
int gmd_pageout(gmd_client *client, gmd_buffer *buffer)
{
        return tiering_call(client, "gmd_pageout", GMD__MSG_TYPE__MSG_PAGEOUT,
                            buffer, 0);
}

/** Bring buffers back to VRAM, behind every other move; see gpumem.h. */
int gmd_prefetch(gmd_client *client, gmd_buffer *buffer)
{
        return tiering_call(client, "gmd_prefetch", GMD__MSG_TYPE__MSG_PREFETCH,
                            buffer, 0);
}

/* A pageout or prefetch sent without waiting for its answer
 * (gmd__client_send_nowait): gmd_flush reports a refusal. */
static int tiering_nowait(gmd_client *client, const char *fn, uint16_t type,
                          gmd_buffer *buffer)
{
        Gmd__MoveRequest move = GMD__MOVE_REQUEST__INIT;
        uint64_t id;
        int r;

        r = tiering_check(client, fn, buffer, &id, &move.n_buffer_ids,
                          &move.buffer_ids);
        if (r < 0)
                return r;
        return gmd__client_send_nowait(client, type, &move.base, fn, buffer,
                                       false);
}

/** gmd_pageout without waiting for the answer; see gpumem.h. */
int gmd_pageout_nowait(gmd_client *client, gmd_buffer *buffer)
{
        return tiering_nowait(client, "gmd_pageout_nowait",
                              GMD__MSG_TYPE__MSG_PAGEOUT, buffer);
}

/** gmd_prefetch without waiting for the answer; see gpumem.h. */
int gmd_prefetch_nowait(gmd_client *client, gmd_buffer *buffer)
{
        return tiering_nowait(client, "gmd_prefetch_nowait",
                              GMD__MSG_TYPE__MSG_PREFETCH, buffer);
}

/** Wait for moves to end; see gpumem.h. */
int gmd_wait(gmd_client *client, gmd_buffer *buffer, int64_t timeout_ms)
{
        return tiering_call(client, "gmd_wait", GMD__MSG_TYPE__MSG_WAIT, buffer,
                            timeout_ms);
}
