/*
 * devices — the daemon's devices by identity, as the hello named them, and
 * the rule that finds a CUDA device of this process among them
 * (gmd_device_from_cuda, gmd_device_uuid of include/gpumem.h).
 *
 * The visible-devices rule is its own function, fed the environment's
 * value, so the unit tests can run every case of it without a GPU.
 */
#ifndef GMD_CLIENT_DEVICES_H
#define GMD_CLIENT_DEVICES_H

#include "gpumem.h"

/* One device of the daemon: "" where the daemon did not say. */
typedef struct gmd__device_id {
        char uuid[GMD_UUID_SIZE];
        char pci_bus_id[GMD_PCI_BUS_ID_SIZE];
} gmd__device_id;

/*
 * The devices a process with CUDA_VISIBLE_DEVICES=`visible` sees, in its
 * ordinal order, as indices into `ids` (the daemon's `n` devices), the
 * rule CUDA applies: NULL (unset) shows all in order; else each
 * comma-separated entry is a decimal index or a UUID or unique prefix of
 * one ("GPU-" included), and the first entry that names no device, names
 * more than one, or names one already listed ends the list. Writes at most
 * `max` into `ret` and returns how many it wrote.
 */
unsigned gmd__visible_devices(const char *visible, const gmd__device_id *ids,
                              unsigned n, unsigned *ret, unsigned max);

/*
 * For each of the daemon's devices (`maps`, client->n_devices of them), the
 * bits of the daemon's devices whose memory this process can map at a
 * buffer's address for use on it: itself and, on cuda, each other device
 * this process sees that cuDeviceCanAccessPeer says it reaches (the
 * mapper asks its driver); on sim, every device the emulated
 * CUDA_VISIBLE_DEVICES rule shows. 0 for a device this process does not
 * see. Bits above 63 are never set (the daemon serves 64 at most).
 */
void gmd__client_reach(const gmd_client *client, uint64_t *maps);

#endif
