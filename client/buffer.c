/*
 * buffer — gmd_buffer handles: creating one from an alloc reply, remapping
 * and revoking it on the daemon's word, and the public calls on buffers
 * (alloc, free, accessors); the lease calls are in lease.c.
 *
 * A buffer's address range is reserved when it is created and given back
 * only when its handle is freed, so the pointer the application holds
 * stays valid through remaps and never points at someone else's mapping
 * after a revoke: a revoked range stays reserved and inaccessible. Legacy
 * IPC buffers are the exception the daemon's CUDA IPC handle forces: the
 * driver places them, and a revoke closes them outright.
 *
 * gmd_free parks the buffer in the mapping cache when it can, and gmd_alloc
 * looks there first (mapcache.c).
 */
#include "buffer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "errors.h"
#include "mapcache.h"
#include "peer_access.h"
#include "timeutil.h"

gmd_buffer *gmd__buffer_find_locked(gmd_client *client, uint64_t id)
{
        gmd_list *pos;

        list_for_each(pos, &client->buffers) {
                gmd_buffer *buffer = container_of(pos, gmd_buffer, node);

                if (buffer->id == id && !buffer->lost)
                        return buffer;
        }
        return NULL;
}

static void segments_close(gmd_map_segment *segments, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (segments[i].fd >= 0)
                        close(segments[i].fd);
}

/* Check the wire segments against a buffer of `size` bytes and take their
 * fds from the packet. -EPROTO with *ret_reason when they are malformed. */
static int segments_from_wire(uint64_t size, Gmd__Segment *const *wire,
                              size_t n, gmd_wire_packet *packet,
                              gmd_map_segment **ret_segments,
                              const char **ret_reason)
{
        gmd_map_segment *segments;

        if (n == 0 || n > GMD_WIRE_MAX_FDS) {
                *ret_reason = n ? "too many segments" : "no segments";
                return -EPROTO;
        }
        segments = calloc(n, sizeof(*segments));
        if (!segments)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                segments[i].fd = -1;

        for (size_t i = 0; i < n; i++) {
                const Gmd__Segment *s = wire[i];

                if (s->size == 0 || s->offset > size ||
                    s->size > size - s->offset) {
                        *ret_reason = "segment outside the buffer";
                        goto bad;
                }
                segments[i].fd = gmd_wire_packet_take_fd(packet, s->fd_index);
                if (segments[i].fd < 0) {
                        *ret_reason = "segment names a file descriptor the "
                                      "packet does not carry";
                        goto bad;
                }
                segments[i].offset = s->offset;
                segments[i].size = s->size;
        }
        /* Together they must cover [0, size) exactly: a hole would fault
         * later, an overlap would map one backing over another. */
        for (uint64_t at = 0; at < size;) {
                size_t i;

                for (i = 0; i < n && segments[i].offset != at; i++)
                        ;
                if (i == n) {
                        *ret_reason = "segments leave a hole or overlap";
                        goto bad;
                }
                at += segments[i].size;
        }
        {
                uint64_t total = 0;

                for (size_t i = 0; i < n; i++)
                        total += segments[i].size;
                if (total != size) {
                        *ret_reason = "segments leave a hole or overlap";
                        goto bad;
                }
        }
        *ret_segments = segments;
        return 0;

bad:
        segments_close(segments, n);
        free(segments);
        return -EPROTO;
}

/* Keep `fd` for a restart (client.h, keep_fd_base): moved at or above
 * the base, so the numbers below it, where select() works, stay the
 * application's. Returns the fd kept, or -1 when it is not kept (restart
 * recovery is off, or no fd is free above the base: EMFILE); `fd` is
 * closed either way unless it is the one kept. */
static int fd_keep(const gmd_client *client, int fd)
{
        int kept;

        if (client->keep_fd_base < 0) {
                close(fd);
                return -1;
        }
        if (fd >= client->keep_fd_base)
                return fd;
        kept = fcntl(fd, F_DUPFD_CLOEXEC, client->keep_fd_base);
        close(fd);
        return kept;
}

/* Under buffers_lock: close the fds kept for the buffer's mapping. */
static void buffer_kept_close(gmd_buffer *buffer)
{
        segments_close(buffer->kept, buffer->n_kept);
        free(buffer->kept);
        buffer->kept = NULL;
        buffer->n_kept = 0;
        buffer->kept_vram = false;
}

/* Under buffers_lock (or before the buffer is in the table): `segments`
 * (an array of `n`, taken over with its fds) are mapped now; keep their
 * fds in place of the old ones. A mapping never fails for want of an fd
 * to keep: such a buffer just cannot be offered to a restarted daemon. */
static void buffer_kept_set(const gmd_client *client, gmd_buffer *buffer,
                            gmd_map_segment *segments, unsigned n)
{
        buffer_kept_close(buffer);
        for (unsigned i = 0; i < n; i++)
                segments[i].fd = fd_keep(client, segments[i].fd);
        buffer->kept = segments;
        buffer->n_kept = n;
}

bool gmd__buffer_offerable_locked(const gmd_buffer *buffer)
{
        if (buffer->unmapped || buffer->n_kept == 0)
                return false;
        for (unsigned i = 0; i < buffer->n_kept; i++)
                if (buffer->kept[i].fd < 0)
                        return false;
        return true;
}

void gmd__buffer_unmap_locked(gmd_client *client, gmd_buffer *buffer)
{
        if (!buffer->unmapped && !buffer->ipc)
                (void)client->mapper->ops->unmap(client->mapper, buffer->addr,
                                                 buffer->size);
        buffer->unmapped = true;
        buffer_kept_close(buffer);
}

static bool tier_valid(int tier)
{
        return tier == GMD__TIER__TIER_VRAM || tier == GMD__TIER__TIER_HOST;
}

/* A legacy IPC reply: the daemon's 64-byte CUDA IPC handle instead of
 * segments and fds. -EPROTO with *ret_reason when malformed, GMD_ENOTSUP
 * when this mapper cannot open one (the daemon's buffer must be freed). */
static int buffer_open_ipc(gmd_client *client, const Gmd__AllocReply *reply,
                           gmd_buffer *buffer, unsigned device,
                           const char **ret_reason)
{
        const gmd_mapper_ops *ops = client->mapper->ops;

        if (reply->ipc_handle.len != 64) {
                *ret_reason = "alloc reply's ipc_handle is not 64 bytes";
                return -EPROTO;
        }
        if (reply->n_segments > 0) {
                *ret_reason = "alloc reply has both an ipc_handle and segments";
                return -EPROTO;
        }
        if (!ops->ipc_open)
                return GMD_ENOTSUP;
        buffer->ipc = true;
        return ops->ipc_open(client->mapper, device, reply->ipc_handle.data,
                             &buffer->addr);
}

/* Reserve the buffer's range and map the reply's segments into it. */
static int buffer_map_segments(gmd_client *client, const Gmd__AllocReply *reply,
                               gmd_buffer *buffer, unsigned device,
                               gmd_wire_packet *packet, const char **ret_reason)
{
        const gmd_mapper_ops *ops = client->mapper->ops;
        gmd_map_segment *segments = NULL;
        int r;

        r = segments_from_wire(reply->size, reply->segments,
                               reply->n_segments, packet, &segments,
                               ret_reason);
        if (r < 0)
                return r;
        r = ops->reserve(client->mapper, reply->size, &buffer->addr);
        if (r < 0) {
                segments_close(segments, reply->n_segments);
                goto out;
        }
        r = ops->map(client->mapper, buffer->addr, device, segments,
                     (unsigned)reply->n_segments);
        if (r < 0) {
                ops->unreserve(client->mapper, buffer->addr, reply->size);
                segments_close(segments, reply->n_segments);
                goto out;
        }
        buffer_kept_set(client, buffer, segments, (unsigned)reply->n_segments);
        segments = NULL;
out:
        free(segments);
        return r;
}

int gmd__buffer_new(gmd_client *client, const Gmd__AllocReply *reply,
               unsigned device, unsigned flags, gmd_wire_packet *packet,
               const char **ret_reason, gmd_buffer **ret_buffer)
{
        gmd_buffer *buffer;
        unsigned peer_gen;
        bool known;
        int r;

        if (reply->size == 0) {
                *ret_reason = "alloc reply of size 0";
                return -EPROTO;
        }
        if (!tier_valid(reply->tier)) {
                *ret_reason = "unknown tier";
                return -EPROTO;
        }
        /* Only this thread inserts, so the answer stays true below. */
        pthread_mutex_lock(&client->buffers_lock);
        known = gmd__buffer_find_locked(client, reply->buffer_id) != NULL;
        pthread_mutex_unlock(&client->buffers_lock);
        if (known) {
                *ret_reason = "alloc reply names a buffer id already in use";
                return -EPROTO;
        }

        buffer = calloc(1, sizeof(*buffer));
        if (!buffer)
                return -ENOMEM;
        peer_gen = atomic_load(&client->peer_gen);
        if (reply->ipc_handle.len > 0)
                r = buffer_open_ipc(client, reply, buffer, device, ret_reason);
        else
                r = buffer_map_segments(client, reply, buffer, device, packet,
                                        ret_reason);
        if (r < 0) {
                free(buffer);
                return r;
        }
        buffer->id = reply->buffer_id;
        buffer->size = reply->size;
        buffer->device = device;
        buffer->flags = flags;
        list_init(&buffer->cache_node);
        atomic_init(&buffer->tier, reply->tier);
        atomic_init(&buffer->revoked, false);

        pthread_mutex_lock(&client->buffers_lock);
        list_add_tail(&client->buffers, &buffer->node);
        /* Mapped before gmd_peer_access could see it in the table. */
        gmd__peer_access_catch_up_locked(client, buffer, peer_gen);
        pthread_mutex_unlock(&client->buffers_lock);
        atomic_store(&buffer->leased, true);   /* an alloc hands it out acquired */
        *ret_buffer = buffer;
        return 0;
}

void gmd__buffer_unlink(gmd_client *client, gmd_buffer *buffer)
{
        pthread_mutex_lock(&client->buffers_lock);
        list_remove(&buffer->node);
        pthread_mutex_unlock(&client->buffers_lock);
}

gmd_buffer *gmd__buffer_destroy(gmd_client *client, gmd_buffer *buffer)
{
        const gmd_mapper_ops *ops;

        if (!buffer)
                return NULL;
        ops = client->mapper->ops;
        buffer_kept_close(buffer);
        if (!buffer->ipc)
                ops->unreserve(client->mapper, buffer->addr, buffer->size);
        else if (!buffer->ipc_closed)
                ops->ipc_close(client->mapper, buffer->device, buffer->addr);
        if (buffer->last_use)
                ops->event_destroy(client->mapper, buffer->device, buffer->last_use);
        if (buffer->acquiring) {
                /* Never finished: only gmd_disconnect gets here with one,
                 * after gmd__client_fail answered every pending request. */
                pthread_cond_destroy(&buffer->acquiring->cond);
                gmd__request_clear(buffer->acquiring);
                free(buffer->acquiring);
        }
        free(buffer);
        return NULL;
}

/* Under buffers_lock: close a legacy IPC buffer's mapping, once. */
static void buffer_ipc_close_locked(gmd_client *client, gmd_buffer *buffer)
{
        if (buffer->ipc && !buffer->ipc_closed) {
                client->mapper->ops->ipc_close(client->mapper, buffer->device,
                                               buffer->addr);
                buffer->ipc_closed = true;
        }
}

/* Under buffers_lock: the range is unmapped; no call may use it again. */
static void buffer_mark_revoked(gmd_buffer *buffer, const char *why)
{
        snprintf(buffer->revoke_reason, sizeof(buffer->revoke_reason), "%s",
                 why);
        atomic_store(&buffer->revoked, true);
}

/*
 * A remap with keep_mapping (proto/gpumem.proto): the daemon kept the
 * buffer's VRAM across a swap-out, and our mapping of it stays. Out: keep
 * it (the buffer is released; nobody touches it until an acquire). In: it
 * is current again, with no import and no map — the point of keeping it,
 * as those two driver calls cost ~80 us a buffer, more than a 2 MiB copy
 * (bench/map_bench.c). -ESTALE when we have no mapping to take up again.
 */
static int remap_kept(gmd_buffer *buffer, const Gmd__RemapNotify *notify,
                      const gmd_wire_packet *packet, const char **ret_reason)
{
        if (notify->n_segments || packet->n_fds) {
                *ret_reason = "segments or fds with a remap that keeps the "
                              "mapping";
                return -EPROTO;
        }
        if (buffer->unmapped)
                return -ESTALE;
        buffer->kept_vram = notify->tier == GMD__TIER__TIER_HOST;
        return 0;
}

int gmd__buffer_remap(gmd_client *client, const Gmd__RemapNotify *notify,
                 gmd_wire_packet *packet, const char **ret_reason)
{
        const gmd_mapper_ops *ops = client->mapper->ops;
        gmd_map_segment *segments = NULL;
        gmd_buffer *buffer;
        char why[128];
        int r;

        if (!tier_valid(notify->tier)) {
                *ret_reason = "unknown tier";
                return -EPROTO;
        }
        /* Held across the mapping so gmd_free cannot give the range back
         * while the new backing goes in. */
        pthread_mutex_lock(&client->buffers_lock);
        buffer = gmd__buffer_find_locked(client, notify->buffer_id);
        if (!buffer || atomic_load(&buffer->revoked)) {
                r = -ENOENT;            /* the packet closes the fds */
                goto out;
        }
        if (buffer->ipc) {
                /* The daemon cannot move a cudaMalloc'd buffer; say so
                 * rather than tear down a mapping that still works. */
                r = -EOPNOTSUPP;
                goto out;
        }
        if (notify->keep_mapping) {
                r = remap_kept(buffer, notify, packet, ret_reason);
                if (r == -EPROTO)
                        goto out;
                goto mapped;
        }
        if (notify->tier == GMD__TIER__TIER_HOST && notify->n_segments == 0) {
                /* A SWAPPABLE buffer moved to host memory: nobody touches
                 * it before an acquire brings it back to VRAM, so the
                 * daemon keeps the host backing to itself and the VRAM
                 * mapping just goes. The range stays reserved for the way
                 * back. */
                if (packet->n_fds) {
                        *ret_reason = "fds with a remap that names no segment";
                        r = -EPROTO;
                        goto out;
                }
                r = buffer->unmapped ? 0 :
                    ops->unmap(client->mapper, buffer->addr, buffer->size);
                if (r == 0) {
                        buffer->unmapped = true;
                        buffer_kept_close(buffer);
                }
                goto mapped;
        }
        r = segments_from_wire(buffer->size, notify->segments,
                               notify->n_segments, packet, &segments,
                               ret_reason);
        if (r == -EPROTO)
                goto out;       /* the connection closes */
        if (r < 0)
                goto mapped;
        if (buffer->unmapped) {
                r = ops->map(client->mapper, buffer->addr, buffer->device,
                             segments, (unsigned)notify->n_segments);
                if (r == 0)
                        buffer->unmapped = false;
        } else if (ops->remap) {
                r = ops->remap(client->mapper, buffer->addr, buffer->size,
                               buffer->device, segments,
                               (unsigned)notify->n_segments);
        } else {
                r = ops->unmap(client->mapper, buffer->addr, buffer->size);
                if (r == 0)
                        r = ops->map(client->mapper, buffer->addr,
                                     buffer->device, segments,
                                     (unsigned)notify->n_segments);
        }
        if (r == 0) {
                buffer_kept_set(client, buffer, segments,
                                (unsigned)notify->n_segments);
        } else {
                segments_close(segments, notify->n_segments);
                free(segments);
        }
        segments = NULL;
mapped:
        if (r < 0 && notify->falls_back) {
                /* Another GPU's VRAM this process cannot map after all:
                 * the daemon keeps the buffer and maps it back where it
                 * was, whose bytes are whole (proto/gpumem.proto). Nothing
                 * stays mapped meanwhile; it is released, so nobody
                 * touches it. */
                gmd__buffer_unmap_locked(client, buffer);
        } else if (r < 0) {
                /* The daemon frees the buffer when it reads our failed ack,
                 * so nothing of the old backing may stay mapped here (it
                 * could go to another client); and later calls say why
                 * instead of letting the application fault. */
                gmd__buffer_unmap_locked(client, buffer);
                snprintf(why, sizeof(why), "moving it to %s memory failed: %s",
                         gmd_tier_name((gmd_tier)notify->tier), strerror(-r));
                buffer_mark_revoked(buffer, why);
        } else {
                atomic_store(&buffer->tier, notify->tier);
        }
out:
        pthread_mutex_unlock(&client->buffers_lock);
        free(segments);
        return r;
}

void gmd__buffer_revoke_locked(gmd_client *client, gmd_buffer *buffer,
                               const char *why, bool lost)
{
        if (atomic_load(&buffer->revoked))
                return;
        if (buffer->ipc)
                buffer_ipc_close_locked(client, buffer);
        else
                gmd__buffer_unmap_locked(client, buffer);
        buffer->lost = lost;
        buffer_mark_revoked(buffer, why);
}

void gmd__buffer_revoke(gmd_client *client, uint64_t buffer_id, const char *message)
{
        gmd_buffer *buffer, *dropped = NULL;

        pthread_mutex_lock(&client->buffers_lock);
        buffer = gmd__buffer_find_locked(client, buffer_id);
        if (buffer && buffer->parked) {
                /* Nobody holds the handle: forget it altogether. */
                gmd__mapcache_forget_locked(&client->cache, buffer);
                list_remove(&buffer->node);
                dropped = buffer;
        } else if (buffer) {
                gmd__buffer_revoke_locked(client, buffer, *message ? message :
                                          "revoked by gpu-memd", false);
        }
        pthread_mutex_unlock(&client->buffers_lock);
        gmd__buffer_destroy(client, dropped);        /* unmaps, unreserves */
}

bool gmd__buffer_release_refused(gmd_client *client, uint64_t buffer_id,
                                 int *error, char *why, size_t len)
{
        gmd_buffer *buffer;
        bool revoked = false;

        pthread_mutex_lock(&client->buffers_lock);
        buffer = gmd__buffer_find_locked(client, buffer_id);
        if (buffer && atomic_load(&buffer->revoked) && *error == GMD_ENOENT) {
                /* A revoke that crossed the release on the wire. */
                snprintf(why, len, "buffer %" PRIu64 " is revoked: %s",
                         buffer->id, buffer->revoke_reason);
                *error = GMD_EREVOKED;
                revoked = true;
        } else if (buffer && *error != GMD_EBUSY && *error != GMD_ENOENT) {
                atomic_store(&buffer->leased, true);
        }
        pthread_mutex_unlock(&client->buffers_lock);
        return revoked;
}

int gmd__buffer_revoked_error(const gmd_buffer *buffer)
{
        gmd__error_set("buffer %" PRIu64 " is revoked: %s", buffer->id,
                  buffer->revoke_reason);
        return GMD_EREVOKED;
}

/** Allocate a buffer; see gpumem.h. */
int gmd_alloc(gmd_client *client, size_t size, unsigned device,
              unsigned flags, int64_t timeout_ms, gmd_buffer **ret_buffer)
{
        Gmd__AllocRequest msg = GMD__ALLOC_REQUEST__INIT;
        /* GMD_ALLOC_NO_SELF_WAIT and GMD_ALLOC_YIELD say how to wait,
         * not what the buffer is: the handle and the cache of idle
         * mappings go without them. */
        unsigned kind = flags & ~(GMD_ALLOC_NO_SELF_WAIT | GMD_ALLOC_YIELD);
        gmd_request req = { .device = device, .flags = kind, .size = size };
        gmd_buffer *cached = NULL;
        int r;

        if (!client || !ret_buffer) {
                gmd__error_set("gmd_alloc: client and ret_buffer must be given");
                return -EINVAL;
        }
        if (size == 0) {
                gmd__error_set("cannot allocate 0 bytes");
                return -EINVAL;
        }
        if ((flags & GMD_ALLOC_LEGACY_IPC) && !client->mapper->ops->ipc_open) {
                gmd__error_set("legacy CUDA IPC buffers need the cuda backend; "
                          "gpu-memd runs %s", client->backend);
                return GMD_ENOTSUP;
        }
        /* The fast path: a mapping this client parked. */
        r = gmd__mapcache_take(client, device, size, kind, &cached);
        if (r < 0)
                return r;
        if (r > 0) {
                *ret_buffer = cached;
                return 0;
        }

        msg.size = size;
        msg.device = device;
        msg.flags = flags;
        msg.timeout_ms = timeout_ms < 0 ? -1 : timeout_ms;
        req.deadline_ms = gmd__deadline_of(timeout_ms);
        req.timeout_ms = timeout_ms;
        r = gmd__client_call(client, &req, GMD__MSG_TYPE__MSG_ALLOC, &msg.base);
        if (r == 0)
                *ret_buffer = req.buffer;
        gmd__request_clear(&req);

        if (r < 0 && req.unmapped) {
                /* The daemon holds a buffer we could not map: give it back,
                 * keeping the mapping error as the one to report. */
                Gmd__BufferRequest free_msg = GMD__BUFFER_REQUEST__INIT;
                gmd_request free_req = { .device = 0 };
                char saved[256];

                snprintf(saved, sizeof(saved), "%s", gmd_last_error());
                free_msg.buffer_id = req.unmapped_id;
                free_req.buffer_id = req.unmapped_id;
                gmd__client_call(client, &free_req, GMD__MSG_TYPE__MSG_FREE,
                            &free_msg.base);
                gmd__request_clear(&free_req);
                gmd__error_set("%s", saved);
        }
        return r;
}

uint64_t gmd__deadline_of(int64_t timeout_ms)
{
        return timeout_ms < 0 ? 0 : now_ms() + (uint64_t)timeout_ms;
}

int gmd__buffer_call(gmd_client *client, gmd_buffer *buffer, uint16_t type,
                     const ProtobufCMessage *msg, int64_t timeout_ms)
{
        gmd_request req = { .device = buffer->device, .buffer_id = buffer->id,
                            .names = buffer, .timeout_ms = timeout_ms,
                            .deadline_ms = gmd__deadline_of(timeout_ms) };
        int r;

        r = gmd__client_call(client, &req, type, msg);
        gmd__request_clear(&req);
        /* A revoke that crossed the request on the wire. */
        if (r == GMD_ENOENT && atomic_load(&buffer->revoked))
                return gmd__buffer_revoked_error(buffer);
        return r;
}

/** Free a buffer and its handle; see gpumem.h for which errors keep it. */
int gmd_free(gmd_client *client, gmd_buffer *buffer)
{
        Gmd__BufferRequest msg = GMD__BUFFER_REQUEST__INIT;
        gmd_request req = { .device = 0 };
        bool revoked;
        int r;

        if (!buffer)
                return 0;
        if (!client) {
                gmd__error_set("gmd_free: no client");
                return -EINVAL;
        }
        /* An acquire still owed an answer names the buffer: hear it first
         * (whatever it says, the buffer goes). */
        if (buffer->acquiring)
                (void)gmd_acquire_finish(client, buffer);
        if (gmd__mapcache_park(client, buffer))
                return 0;
        if (buffer->ipc) {
                /* Close our mapping before the daemon cudaFrees it. From
                 * here on the buffer is unusable, whatever FREE says. */
                pthread_mutex_lock(&client->buffers_lock);
                if (!atomic_load(&buffer->revoked)) {
                        buffer_ipc_close_locked(client, buffer);
                        buffer_mark_revoked(buffer, "gmd_free closed its "
                                            "CUDA IPC mapping");
                }
                pthread_mutex_unlock(&client->buffers_lock);
        }
        /* A buffer a restarted daemon did not keep: its id may name
         * another buffer there now. Nothing to tell it. */
        if (buffer->lost) {
                gmd__buffer_unlink(client, buffer);
                gmd__buffer_destroy(client, buffer);
                return 0;
        }
        /* The fds kept for a restart go before the daemon frees the
         * memory: it looks for processes still holding them once it has
         * (daemon/core/keptfd.h), and ours would be charged until its
         * next look. A free that fails leaves a buffer a restarted daemon
         * is not offered (buffer_kept_set). */
        pthread_mutex_lock(&client->buffers_lock);
        buffer_kept_close(buffer);
        buffer->freeing = true;
        pthread_mutex_unlock(&client->buffers_lock);
        msg.buffer_id = buffer->id;
        req.buffer_id = buffer->id;
        r = gmd__client_call(client, &req, GMD__MSG_TYPE__MSG_FREE, &msg.base);
        gmd__request_clear(&req);
        revoked = atomic_load(&buffer->revoked);
        /* The daemon forgot a revoked buffer already. */
        if (revoked && r == GMD_ENOENT)
                r = 0;
        if (r == 0 || r == GMD_ENOENT || r == GMD_ECONN || r == GMD_EPROTO) {
                gmd__buffer_unlink(client, buffer);
                gmd__buffer_destroy(client, buffer);
        } else {
                pthread_mutex_lock(&client->buffers_lock);
                buffer->freeing = false;
                pthread_mutex_unlock(&client->buffers_lock);
        }
        return r;
}

/** The buffer's stable address. */
void *gmd_buffer_ptr(const gmd_buffer *buffer)
{
        return buffer ? buffer->addr : NULL;
}

/** The buffer's size in bytes. */
size_t gmd_buffer_size(const gmd_buffer *buffer)
{
        return buffer ? (size_t)buffer->size : 0;
}

/** The daemon's id of the buffer. */
uint64_t gmd_buffer_id(const gmd_buffer *buffer)
{
        return buffer ? buffer->id : 0;
}

/** The device the buffer belongs to. */
unsigned gmd_buffer_device(const gmd_buffer *buffer)
{
        return buffer ? buffer->device : 0;
}

/** The tier the buffer's backing is on now. */
gmd_tier gmd_buffer_tier(const gmd_buffer *buffer)
{
        return buffer ? (gmd_tier)atomic_load(&buffer->tier) : GMD_TIER_VRAM;
}
