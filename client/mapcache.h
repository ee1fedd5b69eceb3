/*
 * mapcache — libgpumem's cache of idle mappings (ARCHITECTURE.md decision 6).
 *
 * Importing and mapping a buffer costs the client ~130 µs a chunk, more
 * than cudaMalloc + cudaFree, so gmd_free of an ordinary buffer keeps its
 * mapping ("parks" it) and tells the daemon with MSG_PARK; a later gmd_alloc
 * of the same device, rounded size and flags takes it back with MSG_UNPARK
 * and no round trip. The daemon keeps counting a parked buffer as the
 * client's and, when it needs the room, sends MSG_RECLAIM; the library then
 * unmaps what it still has parked there and answers MSG_RETURN. The cache
 * is bounded ($GPU_MEMD_CACHE_LIMIT, oldest returned first) and can be
 * switched off ($GPU_MEMD_CACHE=0).
 *
 * Parked buffers stay in the client's buffer table (client->buffers): a
 * remap or revoke the daemon sends for one must still find it. What marks
 * them is `parked` and their place on the cache's list, oldest first.
 *
 * Locking: the cache shares client->buffers_lock. Every change of a
 * buffer's parked state is announced to the daemon in the order the changes
 * were made: the thread that made one takes send_lock before it lets go of
 * buffers_lock (gmd__client_send_after), so a PARK cannot overtake the UNPARK or
 * RETURN of the same buffer on the socket, and the daemon's view always
 * agrees with ours once it has read our messages. buffers_lock is never
 * held across the send itself, nor across unmapping.
 */
#ifndef GMD_MAPCACHE_H
#define GMD_MAPCACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "list.h"

typedef struct gmd_client gmd_client;
typedef struct gmd_buffer gmd_buffer;

/* 1 GiB parked per client unless $GPU_MEMD_CACHE_LIMIT says otherwise. */
#define MAPCACHE_DEFAULT_LIMIT (1ull << 30)

typedef struct gmd_mapcache {
        bool enabled;                   /* $GPU_MEMD_CACHE is not "0" */
        uint64_t limit;                 /* bytes parked at most */
        /* Under client->buffers_lock: */
        uint64_t bytes;                 /* bytes parked now */
        unsigned count;                 /* buffers parked now */
        gmd_list lru;                   /* gmd_buffer.cache_node, oldest
                                         * first */
} gmd_mapcache;

/* Read $GPU_MEMD_CACHE and $GPU_MEMD_CACHE_LIMIT. -EINVAL (explained by
 * gmd_last_error) when either does not parse. */
int gmd__mapcache_init(gmd_mapcache *cache);

/*
 * gmd_free's first step: park `buffer` if it may be (the cache is on, the
 * buffer is an ordinary VMM buffer that is neither revoked nor larger than
 * the bound, and the connection is alive). Parking takes it out of the
 * application's hands, sends MSG_PARK, and returns the oldest parked
 * buffers to the daemon if the bound is passed. Returns true when the
 * buffer was parked (gmd_free is done), false when it must be freed.
 */
bool gmd__mapcache_park(gmd_client *client, gmd_buffer *buffer);

/*
 * gmd_alloc's first step: the most recently parked buffer of `device`,
 * `size` rounded to the device's granularity and `flags`, unparked with
 * MSG_UNPARK (no reply awaited). Returns 1 with *ret_buffer set, 0 on a
 * miss (ask the daemon), or the connection's error.
 */
int gmd__mapcache_take(gmd_client *client, unsigned device, uint64_t size,
                  unsigned flags, gmd_buffer **ret_buffer);

/*
 * Return parked buffers to the daemon: unmap them, give back their address
 * ranges, send MSG_RETURN listing them. `all_devices` or only `device`;
 * oldest first until `bytes` are covered (0: every one). Run by the I/O
 * thread for MSG_RECLAIM and by gmd_trim_cache. Returns how many buffers
 * went back, or the connection's error when the RETURN could not be sent.
 */
int gmd__mapcache_return(gmd_client *client, bool all_devices, unsigned device,
                    uint64_t bytes);

/* The connection is gone: unmap every parked buffer without telling the
 * daemon (it freed them when the connection closed). Run by the I/O thread
 * as it ends, so memory of buffers the application freed is not held
 * outside gpu-memd until the program exits. */
void gmd__mapcache_drop_all(gmd_client *client);

/* Under buffers_lock: take every parked buffer out of the cache and the
 * client's table onto `out` (by cache_node), for
 * gmd__mapcache_destroy_list once the lock is let go. */
void gmd__mapcache_take_all_locked(gmd_client *client, gmd_list *out);

/* Unmap and free the buffers gmd__mapcache_take_all_locked took, telling
 * the daemon nothing (it freed them, or will: a restarted one frees what
 * nobody claims). */
void gmd__mapcache_destroy_list(gmd_client *client, gmd_list *list);

/* Under buffers_lock: take a parked buffer off the cache's list (the
 * daemon revoked it). */
void gmd__mapcache_forget_locked(gmd_mapcache *cache, gmd_buffer *buffer);

#endif
