/*
 * lease — a buffer's lease, the public calls that take and give it back:
 * gmd_acquire(_flags), the acquire in two halves (gmd_acquire_start, whose
 * request the buffer holds until gmd_acquire_finish), and gmd_release,
 * gmd_release_after(_nowait) with the buffer's last-use event (an
 * interprocess CUDA event, made on first use, that the daemon waits on
 * before it moves the buffer).
 */
#include "buffer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"

/* Is an acquire of `buffer` started and not finished? Says so for `call`. */
static bool buffer_acquiring(const gmd_buffer *buffer, const char *call)
{
        if (!buffer->acquiring)
                return false;
        gmd__error_set("%s: an acquire of buffer %llu was started and not "
                       "finished: call gmd_acquire_finish first", call,
                       (unsigned long long)buffer->id);
        return true;
}

/* An acquire request for `buffer` in `msg`, or why there can be none (for
 * `fn`): bad arguments, an acquire of it started and not finished, a
 * revoked buffer. */
static int acquire_request(gmd_client *client, gmd_buffer *buffer,
                           int64_t timeout_ms, unsigned flags, const char *fn,
                           Gmd__AcquireRequest *msg)
{
        if (!client || !buffer) {
                gmd__error_set("%s: client and buffer must be given", fn);
                return -EINVAL;
        }
        if (flags & ~(GMD_ACQUIRE_READ_ONLY | GMD_ACQUIRE_YIELD)) {
                gmd__error_set("%s: unknown flags 0x%x", fn,
                               flags & ~(GMD_ACQUIRE_READ_ONLY | GMD_ACQUIRE_YIELD));
                return -EINVAL;
        }
        if (buffer_acquiring(buffer, fn))
                return GMD_EBUSY;
        if (atomic_load(&buffer->revoked))
                return gmd__buffer_revoked_error(buffer);
        msg->buffer_id = buffer->id;
        msg->timeout_ms = timeout_ms < 0 ? -1 : timeout_ms;
        msg->flags = flags;
        return 0;
}

/** Take a buffer's lease; see gpumem.h. */
int gmd_acquire_flags(gmd_client *client, gmd_buffer *buffer,
                      int64_t timeout_ms, unsigned flags)
{
        Gmd__AcquireRequest msg = GMD__ACQUIRE_REQUEST__INIT;
        int r;

        r = acquire_request(client, buffer, timeout_ms, flags,
                            flags ? "gmd_acquire_flags" : "gmd_acquire", &msg);
        if (r < 0)
                return r;
        r = gmd__buffer_call(client, buffer, GMD__MSG_TYPE__MSG_ACQUIRE, &msg.base,
                             timeout_ms);
        if (r == 0)
                atomic_store(&buffer->leased, true);
        return r;
}

int gmd_acquire(gmd_client *client, gmd_buffer *buffer, int64_t timeout_ms)
{
        return gmd_acquire_flags(client, buffer, timeout_ms, 0);
}

/** Ask for a buffer's lease without waiting; see gpumem.h. */
int gmd_acquire_start(gmd_client *client, gmd_buffer *buffer,
                      int64_t timeout_ms, unsigned flags)
{
        Gmd__AcquireRequest msg = GMD__ACQUIRE_REQUEST__INIT;
        gmd_request *req;
        int r;

        r = acquire_request(client, buffer, timeout_ms, flags,
                            "gmd_acquire_start", &msg);
        if (r < 0)
                return r;
        req = calloc(1, sizeof(*req));
        if (!req) {
                gmd__error_set("gmd_acquire_start: out of memory");
                return -ENOMEM;
        }
        req->device = buffer->device;
        req->buffer_id = buffer->id;
        req->names = buffer;
        req->timeout_ms = timeout_ms;
        req->deadline_ms = gmd__deadline_of(timeout_ms);
        /* Answered now when it could not be sent: finish says why. */
        gmd__client_call_start(client, req, GMD__MSG_TYPE__MSG_ACQUIRE,
                               &msg.base);
        buffer->acquiring = req;
        return 0;
}

/** Wait for the lease gmd_acquire_start asked for; see gpumem.h. */
int gmd_acquire_finish(gmd_client *client, gmd_buffer *buffer)
{
        gmd_request *req;
        int r;

        if (!client || !buffer) {
                gmd__error_set("gmd_acquire_finish: client and buffer must be given");
                return -EINVAL;
        }
        req = buffer->acquiring;
        if (!req) {
                gmd__error_set("gmd_acquire_finish: no acquire of buffer %llu "
                               "was started (gmd_acquire_start)",
                               (unsigned long long)buffer->id);
                return -EINVAL;
        }
        r = gmd__client_call_finish(client, req);
        buffer->acquiring = NULL;
        gmd__request_clear(req);
        free(req);
        /* A revoke that crossed the request on the wire. */
        if (r == GMD_ENOENT && atomic_load(&buffer->revoked))
                return gmd__buffer_revoked_error(buffer);
        if (r == 0)
                atomic_store(&buffer->leased, true);
        return r;
}

/* The buffer's last-use event, made on first use. One per buffer: the
 * daemon waits on an event long after the release, and a wait covers only
 * the event's latest record, so sharing one would let a release on another
 * stream stand in for this buffer's. (client->lock) */
static int last_use_event(gmd_client *client, gmd_buffer *buffer)
{
        const gmd_mapper_ops *ops = client->mapper->ops;
        int r = 0;

        pthread_mutex_lock(&client->lock);
        if (!buffer->last_use)
                r = ops->event_create(client->mapper, buffer->device, &buffer->last_use,
                                      buffer->last_use_handle);
        pthread_mutex_unlock(&client->lock);
        return r;
}

/* Record the buffer's last-use event on `stream` and name it in `msg`.
 * Without a GPU (no event_record: sim) there is no GPU work to wait for,
 * and the release is a plain one. */
static int last_use_record(gmd_client *client, gmd_buffer *buffer,
                           void *stream, const char *fn,
                           Gmd__BufferRequest *msg)
{
        int r;

        if (!client->mapper->ops->event_record)
                return 0;
        r = last_use_event(client, buffer);
        if (r == 0)
                r = client->mapper->ops->event_record(client->mapper, buffer->device,
                                                      buffer->last_use, stream);
        if (r < 0) {
                gmd__error_set("%s: cannot record the last-use event: %s", fn,
                          strerror(-r));
                return r;
        }
        msg->last_use_event.len = 64;
        msg->last_use_event.data = buffer->last_use_handle;
        return 0;
}

/* A release request for `buffer` in `msg`, its last-use event recorded on
 * `stream` first when `record`, or why there can be none (for `fn`): bad
 * arguments, an acquire of it started and not finished, a revoked buffer,
 * an event the driver would not record. */
static int release_request(gmd_client *client, gmd_buffer *buffer,
                           bool record, void *stream, const char *fn,
                           Gmd__BufferRequest *msg)
{
        int r;

        if (!client || !buffer) {
                gmd__error_set("%s: client and buffer must be given", fn);
                return -EINVAL;
        }
        if (buffer_acquiring(buffer, fn))
                return GMD_EBUSY;
        if (atomic_load(&buffer->revoked))
                return gmd__buffer_revoked_error(buffer);
        if (record) {
                r = last_use_record(client, buffer, stream, fn, msg);
                if (r < 0)
                        return r;
        }
        msg->buffer_id = buffer->id;
        return 0;
}

/* A release, waited for: the lease mark cleared once the daemon took it. */
static int release_call(gmd_client *client, gmd_buffer *buffer, bool record,
                        void *stream, const char *fn)
{
        Gmd__BufferRequest msg = GMD__BUFFER_REQUEST__INIT;
        int r;

        r = release_request(client, buffer, record, stream, fn, &msg);
        if (r < 0)
                return r;
        r = gmd__buffer_call(client, buffer, GMD__MSG_TYPE__MSG_RELEASE, &msg.base,
                             -1);
        if (r == 0)
                atomic_store(&buffer->leased, false);
        return r;
}

/** Give a buffer's lease back once `stream`'s work so far is done; see
 * gpumem.h. */
int gmd_release_after(gmd_client *client, gmd_buffer *buffer, void *stream)
{
        return release_call(client, buffer, true, stream, "gmd_release_after");
}

/** gmd_release_after without waiting for the daemon's answer; see
 * gpumem.h. */
int gmd_release_after_nowait(gmd_client *client, gmd_buffer *buffer,
                             void *stream)
{
        Gmd__BufferRequest msg = GMD__BUFFER_REQUEST__INIT;
        int r;

        r = release_request(client, buffer, true, stream,
                            "gmd_release_after_nowait", &msg);
        if (r < 0)
                return r;
        /* The lease mark is cleared as the request leaves (client.c). */
        return gmd__client_send_nowait(client, GMD__MSG_TYPE__MSG_RELEASE,
                                       &msg.base, "gmd_release_after_nowait",
                                       buffer, true);
}

/** Give a buffer's lease back; see gpumem.h. */
int gmd_release(gmd_client *client, gmd_buffer *buffer)
{
        return release_call(client, buffer, false, NULL, "gmd_release");
}
