/*
 * buffer — the daemon's record of one client buffer: who owns it, where its
 * backing lives (tier, device, the backend's gmd_mem), its state and lease.
 * The record is the single owner of the backing and of the bytes it took
 * from its pool: buffer_free() gives both back.
 */
#ifndef GMD_BUFFER_H
#define GMD_BUFFER_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "gpumem.h"
#include "idmap.h"
#include "list.h"
#include "pool.h"

typedef struct gmd_server gmd_server;
typedef struct gmd_session gmd_session;

/* Every live buffer of the server, found by id, and the short lists the
 * scheduling pass walks instead of all of them (buffer_index). The
 * server holds one (server->buffers); the buffers link themselves in. */
typedef struct gmd_buffers {
        gmd_list all;               /* every live buffer, oldest first */
        gmd_list moving;            /* those with a move under way, and */
        gmd_list vram_idle;         /* those released in VRAM */
        gmd_idmap by_id;
        uint64_t next_id;           /* the last id given */
} gmd_buffers;

/* Empty lists, no ids given yet. */
void buffers_init(gmd_buffers *buffers);

/* Free the index's own memory; the buffers are gone by then. */
void buffers_clear(gmd_buffers *buffers);

typedef struct gmd_dbuffer {
        uint64_t id;
        gmd_session *owner;
        gmd_list owner_link;        /* in owner->buffers */
        gmd_list server_link;       /* in gmd_buffers.all */
        gmd_list moving_link;       /* in gmd_buffers.moving while move
                                     * is set */
        gmd_list idle_link;         /* in gmd_buffers.vram_idle while
                                     * released on the VRAM tier
                                     * (buffer_index) */

        uint64_t size;
        unsigned device;
        unsigned flags;             /* GMD_ALLOC_* */
        gmd_tier tier;
        gmd_buffer_state state;
        bool acquired;
        struct gmd_loan *loan;      /* acquired, and lent to the daemon
                                     * while its owner waits (loan.h):
                                     * it may move like a released one */
        bool parked;                /* idle in the client's mapping cache */
        unsigned peer_busy;         /* the device + 1 whose peers.busy_on
                                     * counts it (peer_index), else 0 */
        uint64_t released_ms;       /* when the lease was last released */
        uint64_t unmap_seq;         /* remap asking its owner to unmap kept
                                     * VRAM, awaiting its ack (reuse.h) */
        uint64_t prefetched_us;     /* when a prefetch brought it into VRAM,
                                     * if nobody acquired it since: it is
                                     * about to be used (evict.h); else 0 */

        gmd_mem *mem;               /* backing */
        struct gmd_move *move;      /* the move under way, or NULL */
        struct gmd_waiter *move_waiter;  /* a swap-in waiting for VRAM */
        struct gmd_acquirer *acquirer;   /* an acquire waiting for it */
        int move_error;             /* a pageout or prefetch of it failed
                                     * (negative errno): the next wait
                                     * tells it */
        gmd_mem *host_copy;         /* the host copy kept after a swap-in
                                     * while leases are read only, or NULL
                                     * (hostcopy.h) */
        gmd_list host_copy_link;    /* in server->host.copies meanwhile */
        bool lease_ro;              /* the current or last lease is read
                                     * only (GMD_ACQUIRE_READ_ONLY) */
        gmd_event *last_use;        /* the owner's last-use event (cuda) */
        uint32_t last_use_gen;      /* releases with an event so far: a
                                     * client records the same event anew */
        /* Restart recovery (persist.h): its slot in the state record (0:
         * none yet), and the memory kept by name for it now: its host
         * allocation ("h<id>"), the VRAM its owner unmapped early ("m<id>"). */
        uint32_t ledger_slot;
        gmd_mem *kept_h;
        gmd_mem *kept_m;
        uint64_t restore_seq;       /* a restore's remap to VRAM only the
                                     * daemon holds, awaiting its ack: kept
                                     * as "m<id>" till then (restore.h) */
} gmd_dbuffer;

/*
 * Create a buffer of `size` bytes (already rounded) for `owner` on `device`,
 * on `tier`: the bytes come from that tier's pool (the device's VRAM, or
 * the host pool) and the backing from the backend (backing.h). -ENOSPC
 * when the pool lacks room even after releasing VRAM kept for swap-ins, or
 * [pools] host_limit has none to pin on the host tier (nothing taken);
 * another negative errno when the backend failed. The buffer starts
 * acquired.
 */
int buffer_new(gmd_server *server, gmd_session *owner, unsigned device,
               gmd_tier tier, uint64_t size, unsigned flags,
               gmd_dbuffer **ret_buffer);

/*
 * A buffer of an earlier run that `owner` claimed back (restore.h): id
 * `id`, backed by `mem` (taken over) on `tier`, acquired as its owner
 * says. Its pool bytes are counted already (the restore counted them);
 * nothing is created or zeroed. 0, or -errno with nothing taken.
 */
int buffer_adopt(gmd_server *server, gmd_session *owner, uint64_t id,
                 unsigned device, gmd_tier tier, uint64_t size, unsigned flags,
                 gmd_mem *mem, bool acquired, gmd_dbuffer **ret_buffer);

/* Release the backing, give its bytes back to the pool, forget the buffer.
 * Its move, if any, was settled first (move_free_buffer): an orphaned move
 * took the backing (b->mem is NULL then).
 * Marks the room for the scheduling pass; serves nobody itself. */
void buffer_free(gmd_server *server, gmd_dbuffer *buffer);

/*
 * Keep `buffer` in the server's short lists as its fields say: in
 * gmd_buffers.moving while it has a move, in gmd_buffers.vram_idle while
 * it is not acquired and on the VRAM tier. The scheduling pass reads those
 * lists (bytes leaving, eviction victims) instead of every buffer, so
 * what it costs does not grow with the buffers clients hold in use. To
 * be called after any change of `move`, `acquired` or `tier`.
 */
void buffer_index(gmd_dbuffer *buffer);

/* Move the buffer to `tier` in its owner's byte counts (tier_bytes,
 * vram_on) and in its record; buffer_index follows. */
void buffer_set_tier(gmd_dbuffer *buffer, gmd_tier tier);

/* Acquire or release the buffer's lease (buffer_index follows). An
 * acquire uses what a prefetch brought in: prefetched_us goes back to 0. */
void buffer_set_acquired(gmd_dbuffer *buffer, bool acquired);

/* Mark a buffer parked in (or taken back out of) its client's cache of
 * idle mappings, keeping the owner's parked counts right (parking.h). */
void buffer_park(gmd_dbuffer *buffer, bool parked);

/* Keep `event` (a reference the caller hands over; NULL: none) as the
 * owner's last use of the buffer, dropping the one kept before. */
void buffer_set_last_use(gmd_server *server, gmd_dbuffer *buffer,
                         gmd_event *event);

/* How many of `owner`'s buffers of `size` bytes on `device` are out on
 * host memory (what VRAM kept for it could serve, reuse.h). */
unsigned buffer_count_out(const gmd_session *owner, unsigned device,
                          uint64_t size);

/* The buffer `id` if `session` owns it, else NULL. */
gmd_dbuffer *buffer_find(gmd_server *server, gmd_session *session, uint64_t id);

#endif
