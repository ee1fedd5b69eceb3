/*
 * tiering — gmd_pageout, gmd_prefetch and gmd_wait: one request each,
 * answered once the moves are queued (or, for wait, once they ended). The
 * moves themselves reach this process as remap notifications, which the
 * I/O thread applies at the buffer's unchanged address (buffer.c).
 */
#include <errno.h>
#include <stdatomic.h>

#include "buffer.h"
#include "client.h"
#include "errors.h"
#include "gpumem.pb-c.h"

static int tiering_call(gmd_client *client, const char *fn, uint16_t type,
                        gmd_buffer *buffer, int64_t timeout_ms)
{
        Gmd__MoveRequest move = GMD__MOVE_REQUEST__INIT;
        Gmd__WaitRequest wait = GMD__WAIT_REQUEST__INIT;
        gmd_request req = { .device = buffer ? buffer->device : 0 };
        uint64_t id;
        int r;

        if (!client) {
                gmd__error_set("%s: client is NULL", fn);
                return -EINVAL;
        }
        if (buffer && atomic_load(&buffer->revoked)) {
                gmd__error_set("%s: buffer %llu was revoked: %s", fn,
                          (unsigned long long)buffer->id, buffer->revoke_reason);
                return GMD_EREVOKED;
        }
        if (buffer) {
                id = buffer->id;
                move.n_buffer_ids = wait.n_buffer_ids = 1;
                move.buffer_ids = wait.buffer_ids = &id;
        }
        wait.timeout_ms = timeout_ms < 0 ? -1 : timeout_ms;
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

/** Wait for moves to end; see gpumem.h. */
int gmd_wait(gmd_client *client, gmd_buffer *buffer, int64_t timeout_ms)
{
        return tiering_call(client, "gmd_wait", GMD__MSG_TYPE__MSG_WAIT, buffer,
                            timeout_ms);
}
