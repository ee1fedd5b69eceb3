/*
 * destination — where a move's bytes go (destination.c): a swap-out's
 * host copy, whether the owner keeps mapping the VRAM it leaves, and a
 * destination no move took given back. Called by move.c only.
 */
#ifndef GMD_DESTINATION_H
#define GMD_DESTINATION_H

#include <stdbool.h>

#include "copyq.h"

typedef struct gmd_server gmd_server;
typedef struct gmd_dbuffer gmd_dbuffer;
typedef struct gmd_mem gmd_mem;

/* A move out's destination: the host copy kept since the swap-in
 * (*ret_clean: nothing to copy, already paid for), else a peer's free
 * VRAM (peer.h, paid for in the peer's pool), else new host memory,
 * paid for in the host pool, kept copies given up first where there is no
 * room. 0 or a negative errno (-ENOSPC: the host pool is full). */
int destination_out(gmd_server *server, gmd_dbuffer *buffer,
                    gmd_mem **ret_dst, bool *ret_clean);

/* New host memory for a copy of `b`, paid for in the host pool (kept
 * copies given up first where there is no room): what destination_out
 * falls back to, and where a peer's buffers go when the peer needs its
 * room (move_relocate_start). 0 or a negative errno (-ENOSPC). */
int destination_host(gmd_server *server, const gmd_dbuffer *b,
                     gmd_mem **ret_dst);

/* A destination destination_out gave that no move took: a kept host copy
 * is kept again, new memory released. */
void destination_out_undo(gmd_server *server, gmd_dbuffer *buffer,
                          gmd_mem *dst, bool clean);

/* Is the VRAM `buffer` is in wanted soon: does anything wait for room on
 * its device, or has its pool less free than the buffer? */
bool destination_room_wanted(gmd_server *server, const gmd_dbuffer *buffer);

/* Will the owner keep mapping the VRAM `buffer` leaves in a move out of
 * class `cls` (reuse.h, "Mapped")? Not for an eviction, nor where
 * destination_room_wanted. */
bool destination_keeps_mapping(gmd_server *server, const gmd_dbuffer *buffer,
                               move_class cls);

/* A swap-in's VRAM that no move took, back where it came from: VRAM the
 * buffer still maps (`mapped`) kept for it again, other kept VRAM
 * (`kept`) kept again rather than released (memory another buffer of the
 * owner mapped stays alive in the owner's mapping until it reads the
 * unmap it was sent, so releasing it would count as free memory the GPU
 * still holds), new VRAM released. */
void destination_in_undo(gmd_server *server, gmd_dbuffer *buffer,
                         gmd_mem *dst, bool mapped, bool kept);

#endif
