/*
 * peer_access — see peer_access.h and gmd_peer_access in gpumem.h.
 *
 * Why libgpumem must do it: a gpu-memd buffer is VMM memory, mapped with
 * access for its own device only (mapper_cuda.c), and peer access to VMM
 * memory is given per mapping (cuMemSetAccess), which
 * cudaDeviceEnablePeerAccess does not do. A copy from one GPU's buffer to
 * another's, queued on a GPU without access to the other's, still
 * completes, but not as a direct peer copy over NVLink. What an
 * application enabled is remembered per device and given to every buffer
 * of that device this client maps, then and later: after a move to host
 * memory and back or a daemon restart the buffer is mapped anew, with it.
 */
#include "peer_access.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <string.h>

#include "errors.h"
#include "mapper.h"

/* Under buffers_lock: give `buffer` access from `peers`, if mapped. */
static int grant_locked(gmd_client *client, gmd_buffer *buffer, uint64_t peers)
{
        const gmd_mapper_ops *ops = client->mapper->ops;

        if (!peers || !ops->grant || buffer->unmapped || buffer->ipc ||
            atomic_load(&buffer->revoked))
                return 0;
        return ops->grant(client->mapper, buffer->addr, buffer->size,
                          buffer->device, peers);
}

void gmd__peer_access_catch_up_locked(gmd_client *client, gmd_buffer *buffer,
                                      unsigned gen)
{
        if (atomic_load(&client->peer_gen) != gen &&
            buffer->device < client->n_devices)
                (void)grant_locked(client, buffer,
                                   client->peer_access[buffer->device]);
}

/** Let `device` reach the memory of the buffers on `peer`. */
int gmd_peer_access(gmd_client *client, unsigned device, unsigned peer)
{
        const gmd_mapper_ops *ops;
        uint64_t bit, failed_id = 0;
        gmd_list *pos;
        int r = 0;

        if (!client || device >= client->n_devices ||
            peer >= client->n_devices || device >= 64 || peer >= 64 ||
            device == peer) {
                gmd__error_set("gmd_peer_access(%u, %u): not two devices of "
                               "gpu-memd's (it has %u)", device, peer,
                               client ? client->n_devices : 0);
                return -EINVAL;
        }
        if (!((client->reach[device] >> peer) & 1)) {
                gmd__error_set("device %u cannot reach device %u's memory in "
                               "this process: the GPUs have no peer access "
                               "to each other (cuDeviceCanAccessPeer), or the "
                               "process does not see both "
                               "(CUDA_VISIBLE_DEVICES)", device, peer);
                return GMD_ENOTSUP;
        }
        ops = client->mapper->ops;
        bit = 1ull << device;
        pthread_mutex_lock(&client->buffers_lock);
        if (client->peer_access[peer] & bit) {
                pthread_mutex_unlock(&client->buffers_lock);
                return 0;               /* asked before: every map has it */
        }
        client->peer_access[peer] |= bit;
        /* sim: every device reaches all memory; nothing to map. */
        if (ops->set_peers)
                ops->set_peers(client->mapper, peer, client->peer_access[peer]);
        atomic_fetch_add(&client->peer_gen, 1);
        list_for_each(pos, &client->buffers) {
                gmd_buffer *b = container_of(pos, gmd_buffer, node);
                int e;

                if (b->device != peer)
                        continue;
                e = grant_locked(client, b, bit);
                if (e < 0 && r == 0) {
                        r = e;
                        failed_id = b->id;
                }
        }
        pthread_mutex_unlock(&client->buffers_lock);
        if (r < 0)
                gmd__error_set("device %u could not be given access to buffer "
                               "%" PRIu64 " of device %u: %s (it works on its "
                               "own device; copies from device %u reach it "
                               "the slower way)", device, failed_id, peer,
                               strerror(-r), device);
        return r;
}
