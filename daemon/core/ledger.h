/*
 * ledger — the state record that outlives the daemon: which buffer is
 * whose, its size, device, flags, which tier holds its bytes and where
 * (the identity of the VRAM its owner maps, the host arena parts or the
 * host allocation of its host copy), and each session's identity and
 * resume token. A restarted daemon reads it (restore.h) and checks the
 * claims of the clients that come back against it.
 *
 * Shape: two memfds kept across restarts by the keep facility (base/keep.h)
 * under the names "state" (a header and the session slots) and
 * "state.buffers" (the buffer slots), each mapped once and written in
 * place, so a change costs a few stores and no system call. The daemon
 * can die between any two instructions, so every slot holds two records
 * and a one-word index of the current one: a change writes the other
 * record whole, then flips the index with one atomic store. A reader finds
 * either the old state or the new one, never half of each. Slot counts
 * come from the files' sizes, so growing (ftruncate, mremap) needs no
 * header update that could be torn.
 *
 * What the record says must be true at every instant (ledger_sync derives
 * it from the buffer and its move, ARCHITECTURE.md "Restarts"): a buffer's
 * recorded host copy is whole before its owner is told to unmap its VRAM;
 * its recorded tier changes to VRAM only when the swap-in's bytes are in
 * and acked; memory nobody but the daemon holds while it is the only copy
 * (a host allocation of its own, the VRAM an early unmap left with the
 * daemon) is kept by name ("h<id>", "m<id>") for exactly as long.
 *
 * Versioned: LEDGER_VERSION names the layout; a daemon reads the versions
 * it knows (today: 2, and 1, which lacks only LEDGER_HOST_PEER) and
 * refuses others with a sentence, losing nothing:
 * the fds stay kept.
 */
#ifndef GMD_LEDGER_H
#define GMD_LEDGER_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "extent.h"
#include "keep.h"

#define LEDGER_MAGIC "GMDSTATE"
#define LEDGER_VERSION 2
#define LEDGER_TOKEN_SIZE 16
#define LEDGER_MAX_PARTS GMD_ARENA_MAX_PARTS

typedef struct gmd_dbuffer gmd_dbuffer;
typedef struct gmd_session gmd_session;

/* Where a buffer's host copy is. */
typedef enum ledger_host {
        LEDGER_HOST_NONE = 0,
        LEDGER_HOST_ARENA = 1,    /* parts of the device's host arena */
        LEDGER_HOST_KEPT = 2,     /* a host allocation of its own, kept as
                                   * "h<id>" (no room in the arena) */
        LEDGER_HOST_MAPPED = 3,   /* the host backing its owner maps (a
                                   * SPILLABLE buffer on HOST): the owner
                                   * offers it back */
        LEDGER_HOST_PEER = 4,     /* VRAM of device host_device (the peer
                                   * tier, peer.h), kept as "h<id>" */
} ledger_host;

/* One buffer as recorded. */
typedef struct ledger_buffer {
        uint64_t id;
        uint64_t session_id;
        uint64_t size;
        uint32_t device;
        uint32_t flags;
        uint8_t used;
        uint8_t tier;             /* gmd_tier that holds the bytes */
        uint8_t host;             /* ledger_host */
        uint8_t n_parts;
        uint8_t vram_mapped;      /* its owner maps VRAM of this identity */
        uint8_t vram_kept;        /* that VRAM is kept as "m<id>" too: its
                                   * owner was told to unmap it early */
        uint8_t host_device;      /* LEDGER_HOST_PEER: the device */
        uint8_t pad;
        uint64_t vram_dev, vram_ino;
        uint64_t host_dev, host_ino;
        gmd_extent parts[LEDGER_MAX_PARTS];
} ledger_buffer;

/* One session as recorded. */
typedef struct ledger_session {
        uint64_t id;
        uint64_t prior;           /* the session of an earlier run it took
                                   * buffers back from (restore.h), or 0 */
        uint32_t uid, gid, pid;
        int32_t priority;
        uint8_t used;
        uint8_t pad[7];
        uint8_t token[LEDGER_TOKEN_SIZE];
        char name[65];
        char pad2[7];
} ledger_session;

/* One arena piece as recorded (kept as "a<device>.<offset>"). */
typedef struct ledger_piece {
        uint64_t offset, size;
        uint32_t device;
        uint32_t used;
} ledger_piece;

typedef struct gmd_ledger gmd_ledger;

/* Make a new, empty record and keep its fds in `keep`. 0 or -errno. */
int ledger_new(gmd_keep *keep, gmd_ledger **ret_ledger);

/*
 * Take over the record a previous run left (the fds named "state" and
 * "state.buffers", taken by the ledger). -ENOENT when it left none,
 * -EPROTO with `why` filled (a sentence) when it cannot be read: another
 * version, or damaged.
 */
int ledger_open(gmd_keep *keep, int state_fd, int buffers_fd,
                gmd_ledger **ret_ledger, char *why, size_t why_len);

/* Unmap and close; what is kept stays kept. Accepts NULL; returns NULL. */
gmd_ledger *ledger_close(gmd_ledger *ledger);

/* The keep facility it uses. */
gmd_keep *ledger_keep(gmd_ledger *ledger);

/* Its two fds ("state", "state.buffers"), owned by the ledger. */
int ledger_fd_state(const gmd_ledger *ledger);
int ledger_fd_buffers(const gmd_ledger *ledger);

/* ---- reading a record left by an earlier run ---------------------------- */

/* Counts and entries of the record as it stands, slots numbered from 1
 * (slot n is entry n - 1); an entry with `used` 0 is a free slot. Entries
 * an earlier run left stay in their slots: restore updates or clears them
 * there (ledger_put_buffer with that slot). */
unsigned ledger_n_sessions(const gmd_ledger *ledger);
void ledger_session_get(const gmd_ledger *ledger, unsigned slot,
                        ledger_session *ret);
unsigned ledger_n_buffers(const gmd_ledger *ledger);
void ledger_buffer_get(const gmd_ledger *ledger, unsigned slot,
                       ledger_buffer *ret);
unsigned ledger_n_pieces(const gmd_ledger *ledger);
void ledger_piece_get(const gmd_ledger *ledger, unsigned slot,
                      ledger_piece *ret);
/* The ids the earlier run gave last. */
uint64_t ledger_next_buffer_id(const gmd_ledger *ledger);
uint64_t ledger_next_client_id(const gmd_ledger *ledger);

/* ---- writing ----------------------------------------------------------- */

/* The last ids given, for the next run to go on from. */
void ledger_set_ids(gmd_ledger *ledger, uint64_t next_buffer_id,
                    uint64_t next_client_id);

/* Write `rec` into the buffer slot `*slot` (a free one is taken when
 * `*slot` is 0; slots are numbered from 1), or clear the slot when rec is
 * NULL (and set `*slot` to 0). -ENOMEM when the record cannot grow. */
int ledger_put_buffer(gmd_ledger *ledger, uint32_t *slot,
                      const ledger_buffer *rec);

/* The same for a session. */
int ledger_put_session(gmd_ledger *ledger, uint32_t *slot,
                       const ledger_session *rec);

/* Record an arena piece kept as "a<device>.<offset>" (the fd is kept by
 * the caller under that name), or its new size where it is recorded
 * already (sim's one memfd grows with the arena). */
int ledger_put_piece(gmd_ledger *ledger, unsigned device, uint64_t offset,
                     uint64_t size);
/* Whether that piece is recorded already. */
bool ledger_has_piece(const gmd_ledger *ledger, unsigned device,
                      uint64_t offset);

/* The name an "h"/"m"/"a" kept fd has: "h<id>", "m<id>", "a<dev>.<off>". */
void ledger_name(char *buf, size_t len, char kind, uint64_t a, uint64_t b);

#endif
