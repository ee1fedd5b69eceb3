/*
 * server — see server.h: the record's lookups. Its life (start-up,
 * listening, reload, stop) is lifecycle.c's.
 */
#include "server.h"


gmd_pool *server_vram_pool(gmd_server *server, unsigned device)
{
        return device < server->n_devices ? &server->vram_pools[device] : NULL;
}

gmd_pool *server_pool(gmd_server *server, gmd_tier tier, unsigned device)
{
        return tier == GMD_TIER_HOST ? &server->host_pool :
               server_vram_pool(server, device);
}
