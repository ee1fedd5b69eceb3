/*
 * peer_access — one GPU's kernels and copies reaching another GPU's
 * gpu-memd buffers, as cudaDeviceEnablePeerAccess lets them reach its
 * cudaMalloc memory (gmd_peer_access in gpumem.h; the mapper does the
 * driver's part, mapper.h set_peers and grant).
 */
#ifndef GMD_PEER_ACCESS_H
#define GMD_PEER_ACCESS_H

#include "buffer.h"
#include "client.h"

/* Under buffers_lock, for a buffer mapped outside it (a new one, mapped
 * before it entered the table): if peer access changed since `gen`
 * (client->peer_gen read before the mapping), give it what its device's
 * peers have now. Best effort: the buffer works on its own device
 * whatever this does. */
void gmd__peer_access_catch_up_locked(gmd_client *client, gmd_buffer *buffer,
                                      unsigned gen);

#endif
