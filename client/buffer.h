/*
 * buffer — a gmd_buffer: one daemon buffer as this process sees it, an
 * address range reserved for the buffer's whole life with the current
 * backing mapped into it.
 *
 * The I/O thread creates buffers (while it handles the alloc reply, so a
 * remap that follows at once finds the buffer in the table), remaps and
 * revokes them; application threads read their fields and free them (or
 * park them in the mapping cache, mapcache.h). A legacy IPC buffer
 * (GMD_ALLOC_LEGACY_IPC) has no reservation: the driver picks its address
 * when the daemon's CUDA IPC handle is opened, and it is never parked. The
 * table is a list: lookups happen only for notifications, which come at
 * most as fast as the daemon can copy memory, and a process holds few
 * buffers.
 */
#ifndef GMD_BUFFER_H
#define GMD_BUFFER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "client.h"
#include "gpumem.pb-c.h"
#include "wire.h"

struct gmd_buffer {
        gmd_list node;                  /* client->buffers, buffers_lock */
        uint64_t id;
        void *addr;
        uint64_t size;
        unsigned device;
        unsigned flags;                 /* GMD_ALLOC_* it was allocated with */
        bool ipc;                       /* opened from a CUDA IPC handle */
        bool ipc_closed;                /* ... and closed (buffers_lock) */
        /* The mapping cache's, under buffers_lock: */
        bool parked;                    /* idle in the cache, not the app's */
        _Atomic bool leased;            /* acquired (alloc, acquire) and not
                                         * released since: the daemon moves
                                         * it only if SPILLABLE */
        void *last_use;                 /* gmd_release_after's event, made on
                                         * first use; one per buffer, since a
                                         * wait covers only the latest record */
        uint8_t last_use_handle[64];
        bool unmapped;                  /* nothing mapped here: out on host
                                         * memory, unless a remap with
                                         * keep_mapping left its VRAM mapped
                                         * (buffers_lock) */
        /* The fds of what is mapped at addr, one per segment, kept so the
         * memory can be offered back to a restarted daemon (a mapping
         * gives no fd back on cuda): closed when the mapping goes. fd -1:
         * not kept (restart recovery off, or no fd left for it); the
         * buffer then cannot be offered back. (buffers_lock) */
        gmd_map_segment *kept;
        unsigned n_kept;
        bool kept_vram;                 /* out on host memory, but a remap
                                         * with keep_mapping left its VRAM
                                         * mapped here (buffers_lock) */
        bool freeing;                   /* gmd_free closed its kept fds and
                                         * is telling the daemon: a restart
                                         * meanwhile frees it, not loses it
                                         * (buffers_lock) */
        bool lost;                      /* revoked because a restarted
                                         * daemon did not keep it: its id
                                         * may name another buffer there,
                                         * so nothing names it again */
        gmd_list cache_node;            /* client->cache.lru while parked */
        _Atomic int tier;               /* gmd_tier; a remap changes it */
        _Atomic bool revoked;           /* backing gone, range reserved */
        struct gmd_request *acquiring;  /* gmd_acquire_start's request, until
                                         * gmd_acquire_finish (the caller's) */
        char revoke_reason[256];        /* written once, before `revoked` */
};

/*
 * Reserve and map the buffer an alloc reply describes, with the fds of
 * `packet` (those it names are taken), and enter it in the client's table.
 * -EPROTO with *ret_reason when the reply is malformed (the connection must
 * close); another negative errno when mapping failed (the daemon's buffer
 * must be freed).
 */
int gmd__buffer_new(gmd_client *client, const Gmd__AllocReply *reply,
               unsigned device, unsigned flags, gmd_wire_packet *packet,
               const char **ret_reason, gmd_buffer **ret_buffer);

/* Send a request about `buffer` and wait for its answer (gmd__client_call);
 * a revoke that crossed it on the wire is GMD_EREVOKED. `timeout_ms`: the
 * request's own deadline (< 0: none), which also bounds its wait while
 * gpu-memd restarts. */
int gmd__buffer_call(gmd_client *client, gmd_buffer *buffer, uint16_t type,
                     const ProtobufCMessage *msg, int64_t timeout_ms);

/* A request's own deadline from `timeout_ms` (< 0: none, 0). */
uint64_t gmd__deadline_of(int64_t timeout_ms);

/* Under buffers_lock: can `buffer`'s mapping be offered to a restarted
 * daemon, every segment's fd kept? */
bool gmd__buffer_offerable_locked(const gmd_buffer *buffer);

/* Under buffers_lock: unmap what `buffer` maps (keeping the range) and
 * close the fds kept for it. */
void gmd__buffer_unmap_locked(gmd_client *client, gmd_buffer *buffer);

/* Under buffers_lock: revoke `buffer` (unmap it, keep its range, say
 * `why`); `lost`: a restarted daemon did not keep it (no request names it
 * again). A parked buffer is not handled here. */
void gmd__buffer_revoke_locked(gmd_client *client, gmd_buffer *buffer,
                               const char *why, bool lost);

/* Under buffers_lock: the buffer the daemon knows as `id`. Lost buffers
 * are not found: a restarted daemon may give their ids to new ones. */
gmd_buffer *gmd__buffer_find_locked(gmd_client *client, uint64_t id);

/* GMD_EREVOKED, with the buffer's revoke reason as the last error. */
int gmd__buffer_revoked_error(const gmd_buffer *buffer);

/* Take the buffer out of the client's table. */
void gmd__buffer_unlink(gmd_client *client, gmd_buffer *buffer);

/* Give back the buffer's address range (close a legacy IPC mapping) and
 * free the handle (already out of the table, or the table is going away).
 * Accepts NULL; returns NULL. */
gmd_buffer *gmd__buffer_destroy(gmd_client *client, gmd_buffer *buffer);

/*
 * Apply a remap notification: map the new segments at the buffer's address.
 * Returns the result for the RemapAck (0 or negative errno), or -EPROTO
 * with *ret_reason when the notification is malformed.
 */
int gmd__buffer_remap(gmd_client *client, const Gmd__RemapNotify *notify,
                 gmd_wire_packet *packet, const char **ret_reason);

/* Apply a revoke notification: unmap, keep the range, mark revoked with
 * the daemon's `message`. An unknown id is ignored (already freed). A
 * parked buffer, which the application no longer holds, is dropped from
 * the cache and its handle freed. */
void gmd__buffer_revoke(gmd_client *client, uint64_t buffer_id,
                   const char *message);

/*
 * The daemon refused a release sent without waiting
 * (gmd_release_after_nowait) with *error; called by the I/O thread before
 * the refusal is counted. The lease mark was cleared when the release was
 * sent. GMD_EBUSY (not acquired) and GMD_ENOENT (no such buffer) leave it
 * so; any other refusal left the buffer acquired in the daemon, and the
 * mark is set again, so gmd_free parks it as it would an acquired buffer.
 * When the buffer was revoked meanwhile (the daemon forgot it: GMD_ENOENT),
 * *error becomes GMD_EREVOKED, `why` gets the revoke's words and it
 * returns true; else false.
 */
bool gmd__buffer_release_refused(gmd_client *client, uint64_t buffer_id,
                                 int *error, char *why, size_t len);

#endif
