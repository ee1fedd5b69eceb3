/*
 * server — see server.h: the record's lookups (its pools, what a running
 * memory slice keeps). Its life (start-up,
 * listening, reload, stop) is lifecycle.c's.
 */
#include "server.h"

#include "slice.h"
#include "timeutil.h"


gmd_pool *server_vram_pool(gmd_server *server, unsigned device)
{
        return device < server->n_devices ? &server->vram_pools[device] : NULL;
}

gmd_pool *server_pool(gmd_server *server, gmd_tier tier, unsigned device)
{
        return tier == GMD_TIER_HOST ? &server->host_pool :
               server_vram_pool(server, device);
}

bool server_slice_keeps(gmd_server *server, unsigned device, pid_t pid,
                        int priority, uint64_t need, uint64_t *ret_left_ms)
{
        uint64_t left_ms = 0;
        gmd_pool *pool = server_vram_pool(server, device);

        if (!pool || !slice_over(&server->slices, device, pid, priority, now_ms(),
                                 &left_ms))
                return false;
        if (ret_left_ms)
                *ret_left_ms = left_ms;
        return pool_free(pool) < need;
}
