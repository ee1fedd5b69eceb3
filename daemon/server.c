/*
 * server — see server.h: the record's lookups. Its life (start-up,
 * listening, reload, stop) is lifecycle.c's.
 */
#include "server.h"

#include "session.h"

gmd_pool *server_vram_pool(gmd_server *server, unsigned device)
{
        return device < server->n_devices ? &server->vram_pools[device] : NULL;
}

gmd_pool *server_pool(gmd_server *server, gmd_tier tier, unsigned device)
{
        return tier == GMD_TIER_HOST ? &server->host_pool :
               server_vram_pool(server, device);
}

void server_user_usage(gmd_server *server, uid_t uid, gmd_usage *ret_usage)
{
        gmd_usage u = { { 0, 0 }, 0, 0, 0 };
        gmd_list *pos;

        list_for_each(pos, &server->sessions) {
                gmd_session *s = container_of(pos, gmd_session, link);

                if (s->uid != uid)
                        continue;
                u.bytes[GMD_TIER_VRAM] += s->tier_bytes[GMD_TIER_VRAM];
                u.bytes[GMD_TIER_HOST] += s->tier_bytes[GMD_TIER_HOST];
                /* Only VRAM-resident buffers are ever parked (parking.c). */
                u.parked += s->parking.bytes;
                u.buffers += s->n_buffers;
                u.parked_buffers += s->parking.n;
        }
        *ret_usage = u;
}

