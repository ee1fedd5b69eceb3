/*
 * hostcopy — see hostcopy.h. A kept copy is b->host_copy, linked in
 * server->host.copies through b->host_copy_link while the buffer holds it;
 * a move out that took it owns it as its destination until the move ends.
 */
#include "hostcopy.h"

#include <errno.h>

#include "backing.h"
#include "buffer.h"
#include "log.h"
#include "placement.h"
#include "server.h"

bool hostcopy_keep(gmd_server *server, gmd_dbuffer *b, gmd_mem *host)
{
        if (!b->lease_ro || placement_usable_on_host(b) || b->host_copy)
                return false;
        b->host_copy = host;
        list_add_tail(&server->host.copies, &b->host_copy_link);
        server->host.copy_bytes += host->size;
        return true;
}

gmd_mem *hostcopy_take(gmd_server *server, gmd_dbuffer *b)
{
        gmd_mem *host = b->host_copy;

        if (!host)
                return NULL;
        list_remove(&b->host_copy_link);
        b->host_copy = NULL;
        server->host.copy_bytes -= host->size;
        return host;
}

void hostcopy_drop(gmd_server *server, gmd_dbuffer *b)
{
        gmd_mem *host = hostcopy_take(server, b);

        if (host)
                backing_release(server, host);
}

void hostcopy_put_back(gmd_server *server, gmd_dbuffer *b, gmd_mem *host)
{
        if (!hostcopy_keep(server, b, host))
                backing_release(server, host);
}

uint64_t hostcopy_reclaim(gmd_server *server, uint64_t bytes)
{
        uint64_t freed = 0;

        while (freed < bytes && !list_empty(&server->host.copies)) {
                gmd_dbuffer *b = container_of(server->host.copies.next,
                                              gmd_dbuffer, host_copy_link);

                freed += b->size;
                hostcopy_drop(server, b);
        }
        if (freed)
                log_debug("gave up %llu bytes of kept host copies for room",
                          (unsigned long long)freed);
        return freed;
}

int hostcopy_pool_take(gmd_server *server, uint64_t size)
{
        int r = pool_take(&server->host.pool, size);

        if (r == -ENOSPC && hostcopy_reclaim(server, size))
                r = pool_take(&server->host.pool, size);
        return r;
}
