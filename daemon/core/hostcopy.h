/*
 * hostcopy — host copies kept after a swap-in, so that the next move out
 * of a buffer nobody wrote copies nothing (a clean pageout).
 *
 * Weights streamed for inference are swapped in, read and paged out again,
 * block after block; copying them out each time spent half the link on
 * bytes the host already had, and made each VRAM slot wait for the copy
 * out of the block before it (H200, bench/torch/profile_stream.py: 0.61
 * of the streaming bound). So a SWAPPABLE buffer whose leases since its
 * last swap-in were all read only (GMD_ACQUIRE_READ_ONLY: the owner said
 * it does not write) keeps the host backing that swap-in came from; its
 * next move out takes that backing as its destination and copies no byte
 * (move.c: an empty copy, which still waits for the owner's last use on
 * the GPU before the owner unmaps and the VRAM is reused). A read-write
 * acquire gives the copy up at once, before the owner can write.
 *
 * A kept copy stays paid for in the host pool and holds its host memory
 * (arena or pinned). It is a cache: when a swap-out or a host allocation
 * finds no host room, kept copies are given up, oldest first
 * (hostcopy_reclaim), before anything is refused. SPILLABLE buffers keep
 * none: their owner maps their host copy.
 *
 * The server keeps the buffers holding one in a list, oldest first
 * (server->host.copies), so reclaiming costs what the kept copies number,
 * and their bytes (server->host.copy_bytes): host room that a move out
 * can have (evict.h counts it).
 */
#ifndef GMD_HOSTCOPY_H
#define GMD_HOSTCOPY_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

typedef struct gmd_dbuffer gmd_dbuffer;
typedef struct gmd_server gmd_server;

/* At the end of a swap-in of `b`: keep `host` (the backing it came from)
 * as its kept copy if its last lease was read only and it is SWAPPABLE.
 * True when kept (the caller then must not release it). */
bool hostcopy_keep(gmd_server *server, gmd_dbuffer *b, gmd_mem *host);

/* Give up `b`'s kept copy, if it has one: its memory and host pool bytes
 * are released. */
void hostcopy_drop(gmd_server *server, gmd_dbuffer *b);

/* Take `b`'s kept copy for a move out (NULL: none); still paid for in the
 * host pool, now the move's. */
gmd_mem *hostcopy_take(gmd_server *server, gmd_dbuffer *b);

/* A move out that took `host` (hostcopy_take) did not happen: `b` keeps it
 * again if its lease is still read only, else it is released. */
void hostcopy_put_back(gmd_server *server, gmd_dbuffer *b, gmd_mem *host);

/* Give up kept copies, oldest first, until `bytes` of host memory were
 * freed or none is left; returns the bytes freed. */
uint64_t hostcopy_reclaim(gmd_server *server, uint64_t bytes);

/* pool_take of `size` bytes from the host pool, kept copies given up
 * first when it has no room (a swap-out's destination, a host buffer). */
int hostcopy_pool_take(gmd_server *server, uint64_t size);

#endif
