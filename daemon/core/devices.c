/*
 * devices — see devices.h.
 */
#include "devices.h"

#include <errno.h>
#include <stdlib.h>

int devices_alloc(gmd_devices *devices, unsigned n)
{
        devices->n = n;
        devices->info = calloc(n ? n : 1, sizeof(*devices->info));
        devices->pools = calloc(n ? n : 1, sizeof(*devices->pools));
        return devices->info && devices->pools ? 0 : -ENOMEM;
}

void devices_free(gmd_devices *devices)
{
        free(devices->info);
        free(devices->pools);
        devices->info = NULL;
        devices->pools = NULL;
}
