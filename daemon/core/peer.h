/*
 * peer — other GPUs' free VRAM as the first swap tier.
 *
 * On a machine whose GPUs reach each other (NVLink, PCIe peer-to-peer:
 * the backend's peer_rate), a buffer leaving a full device may go to the
 * free VRAM of a peer instead of host memory, and comes back from there:
 * a device-to-device copy, several times the host link's rate over
 * NVLink. The buffer's tier is GMD_TIER_HOST ("out of its device"); its
 * backing is VRAM of the peer (mem->peer, mem->peer_home), paid for in
 * the peer's pool.
 *  - SWAPPABLE: its owner sees nothing of it: a SWAPPABLE buffer that is
 *    out is unmapped wherever its bytes are.
 *  - SPILLABLE: its owner is remapped to the peer's memory, as it is to
 *    its host memory when it spills there (the remap carries the fd; its
 *    mapping of the buffer's address then points at the peer's VRAM,
 *    with access for the owner's device), and uses it there directly:
 *    over NVLink its kernels read the peer's VRAM. Such memory is never
 *    kept as a spare once the buffer leaves it (its fd went out). Only a
 *    peer its owner said it can map from the buffer's device (MSG_REACH,
 *    session->maps: its process sees that GPU and reaches it); a client
 *    that said nothing maps no other device's memory. Should its remap
 *    fail all the same, the notice said it may (falls_back): the owner
 *    keeps the buffer, the move rolls back to the VRAM it left, whose
 *    bytes are whole, and that peer is struck from what the owner maps
 *    (peer_owner_cannot_map), so the next move out goes to host memory.
 *
 * The peer's own clients come first:
 *  - a swap-out goes to a peer only while nothing waits there and its
 *    pool keeps [pools] peer_headroom free beside the buffer;
 *  - when the peer needs room, what the peer tier holds there is the
 *    first thing evicted: its spares released, then its buffers moved on
 *    to host memory (evict.c's peer_make_room: a relocation,
 *    move_relocate_start; a SWAPPABLE buffer's owner never hears of it, a
 *    SPILLABLE one's is remapped to the host memory);
 *  - a SPILLABLE buffer its owner holds (acquired) does not move, on a
 *    peer as anywhere: until released its bytes are no room there
 *    (peers.busy_on), and the peer's clients wait for them as for their
 *    own buffers in use;
 *  - those bytes are nobody's on the peer: its users' quotas and
 *    per-client counts never see them (the owner's count them as out).
 *
 * [pools] peer_tier: "auto" (the default) uses a peer whose measured link
 * is at least as fast as the home device's link to host memory (or where
 * that is not measured yet), "on" any reachable peer, "off" none. A peer's
 * VRAM is not offered to clients for allocations.
 */
#ifndef GMD_PEER_H
#define GMD_PEER_H

#include <stdbool.h>
#include <stdint.h>

#include "server_limits.h"

typedef struct gmd_server gmd_server;
typedef struct gmd_dbuffer gmd_dbuffer;
typedef struct gmd_mem gmd_mem;
typedef struct gmd_session gmd_session;

/* Peer VRAM kept for the next swap-out of its size, per device at most. */
#define PEER_SPARES 16

typedef struct gmd_peers {
        bool on;                     /* some pair may be used */
        /* [from][to]: bytes/s of copies between the two devices' VRAM,
         * 0 where `from` cannot reach `to` or the tier is off. */
        uint64_t rate[GMD_MAX_DEVICES][GMD_MAX_DEVICES];
        /* [holder][home]: bytes of `home`'s buffers held in `holder`'s
         * VRAM now. */
        uint64_t held[GMD_MAX_DEVICES][GMD_MAX_DEVICES];
        uint64_t held_on[GMD_MAX_DEVICES];   /* the sums per holder */
        /* Of held_on: SPILLABLE buffers their owners hold (acquired)
         * there, which may not move (peer_index). */
        uint64_t busy_on[GMD_MAX_DEVICES];
        /* Peer VRAM a buffer came back from, kept for the next swap-out
         * of that size (peer_keep): creating, exporting, mapping it and
         * granting access costs ~1.4 ms for 64 MiB on an H100, eight
         * times the copy over NVLink. Paid for in the holder's pool, the
         * first room its clients get back (evict.c's peer_make_room). */
        gmd_mem *spare[GMD_MAX_DEVICES][PEER_SPARES];
        uint64_t spare_on[GMD_MAX_DEVICES];
        /* Per holder: peer VRAM of moves whose buffer was freed while
         * their copy ran (orphans), released when the copy is over: room
         * on its way (move_leaving_bytes), or the holder would move
         * another buffer on to host memory for room already coming. */
        uint64_t orphaned_on[GMD_MAX_DEVICES];
        uint64_t placed;             /* swap-outs that went to a peer */
        uint64_t relocated;          /* relocations to host started */
} gmd_peers;

/* Read the backend's peer links under [pools] peer_tier; logs the pairs
 * it will use. Called once the devices are known. */
void peer_init(gmd_server *server);

/* A swap-out destination for `b` on a peer's VRAM, paid for in the peer's
 * pool and counted as held there: 0, or -ENOSPC when no peer is usable
 * for it now (the caller goes to host memory). */
int peer_destination(gmd_server *server, const gmd_dbuffer *b,
                     gmd_mem **ret_mem);

/* Release `device`'s spares: the bytes given back (room at once, the
 * wait queue marked to be served). The first step of making room there
 * (evict.c); the next moves what the tier holds there on to host memory,
 * buffer by buffer, those peer_relocatable says may go. */
uint64_t peer_drop_spares_on(gmd_server *server, unsigned device);

/* May `b`, held in `device`'s VRAM by the peer tier, be moved on to host
 * memory now (move_relocate_start)? Also while its swap-in waits in the
 * queue for room at home (peer.c says why); not while that swap-in
 * copies. */
bool peer_relocatable(const gmd_dbuffer *b, unsigned device);

/* `mem`, the peer VRAM a buffer just came back from, kept for the next
 * swap-out of its size: true, or false when it is not wanted (the holder
 * has waiters, or keeps enough: a quarter of its pool, PEER_SPARES) and
 * the caller releases it. */
bool peer_keep(gmd_server *server, gmd_mem *mem);

/* The move of `src` to `dst`, one of them possibly VRAM of a peer, lost
 * its buffer while its copy runs (sign > 0), or its copy is over and
 * both are released (sign < 0): counted in peers.orphaned_on. */
void peer_orphan(gmd_server *server, const gmd_mem *src, const gmd_mem *dst,
                 int sign);

/* Release every kept spare (the daemon stops). */
void peer_drop_spares(gmd_server *server);

/* Count `b` in peers.busy_on while it rests on a peer and may not move
 * (a SPILLABLE buffer its owner holds), or no longer (`gone`: it is
 * freed). buffer_index calls it after every change of the buffer's
 * lease, move or tier. */
void peer_index(gmd_server *server, gmd_dbuffer *b, bool gone);

/* Is `b`'s backing VRAM of a peer? */
bool peer_holds(const gmd_dbuffer *b);

/* What `s`'s process said it can map (MSG_REACH, decoded by request.c):
 * `maps[d]`, a bit per other device whose VRAM it maps for use on device
 * d, for each of the daemon's devices; replaces what it said before. */
void peer_owner_reach(gmd_session *s, const uint64_t maps[GMD_MAX_DEVICES]);

/* Can `s`'s process use `holder`'s VRAM at a buffer's address on `home`?
 * Always its own device; another only as its last MSG_REACH said. */
bool peer_owner_maps(const gmd_session *s, unsigned home, unsigned holder);

/* `s`'s process failed to map `holder`'s VRAM for a buffer of `home`
 * (a remap's failed ack): it no longer counts as able to. */
void peer_owner_cannot_map(gmd_session *s, unsigned home, unsigned holder);

#endif
