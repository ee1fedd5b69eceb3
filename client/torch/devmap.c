/*
 * devmap — see devmap.h. A fixed table under its own lock: a lookup is a
 * few loads, and the first one of an ordinal asks libgpumem, which asks
 * the CUDA driver in this process (microseconds), so holding the lock
 * across it costs nothing worth a second path.
 */
#include "devmap.h"

#include <errno.h>
#include <pthread.h>

#define DEVMAP_MAX 64

static pthread_mutex_t devmap_lock = PTHREAD_MUTEX_INITIALIZER;
/* The daemon's device + 1 of each CUDA ordinal; 0: not asked yet. */
static unsigned devmap_table[DEVMAP_MAX];

int devmap_to_daemon(gmd_client *client, unsigned cuda_ordinal,
                     unsigned *ret_device)
{
        unsigned device;
        int r = 0;

        if (cuda_ordinal >= DEVMAP_MAX)
                return gmd_device_from_cuda(client, (int)cuda_ordinal,
                                            ret_device);
        pthread_mutex_lock(&devmap_lock);
        if (devmap_table[cuda_ordinal]) {
                *ret_device = devmap_table[cuda_ordinal] - 1;
                pthread_mutex_unlock(&devmap_lock);
                return 0;
        }
        r = gmd_device_from_cuda(client, (int)cuda_ordinal, &device);
        if (r == GMD_ENOTSUP) {
                /* An older daemon: ordinals are all there is. */
                device = cuda_ordinal;
                r = 0;
        }
        if (r == 0) {
                devmap_table[cuda_ordinal] = device + 1;
                *ret_device = device;
        }
        pthread_mutex_unlock(&devmap_lock);
        return r;
}

int devmap_to_cuda(unsigned device)
{
        int ordinal = -ENOENT;

        pthread_mutex_lock(&devmap_lock);
        for (unsigned i = 0; i < DEVMAP_MAX && ordinal < 0; i++)
                if (devmap_table[i] == device + 1)
                        ordinal = (int)i;
        pthread_mutex_unlock(&devmap_lock);
        return ordinal;
}

void devmap_reset(void)
{
        pthread_mutex_init(&devmap_lock, NULL);
        for (unsigned i = 0; i < DEVMAP_MAX; i++)
                devmap_table[i] = 0;
}
