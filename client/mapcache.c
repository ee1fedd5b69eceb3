/*
 * mapcache — see mapcache.h for what the cache is and how its locking keeps
 * the daemon's view in step with ours.
 *
 * The cache is a list, oldest parked first. A hit is looked for from the
 * newest end (the most recently parked mapping is the likeliest to be warm
 * in the driver's and the TLB's caches), evictions and returns from the
 * oldest. The bound keeps the list short (1 GiB of 2 MiB chunks is 512
 * entries), so a walk is cheaper than the hash table it would take to
 * avoid it, and far cheaper than the round trip it saves.
 *
 * Buffers leave the cache in one of four ways: taken by gmd_alloc (UNPARK),
 * pushed out by the bound or handed back on a reclaim or a trim (unmapped,
 * then RETURN), revoked by the daemon (dropped, nothing sent: the daemon
 * forgot it), or destroyed with the client.
 */
#include "mapcache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer.h"
#include "client.h"
#include "errors.h"
#include "gpumem.pb-c.h"

/* Ids per MSG_RETURN: well inside the packet bound and the daemon's limit
 * of 8192 ids per message. */
#define RETURN_BATCH 1024

int gmd__mapcache_init(gmd_mapcache *cache)
{
        const char *text;
        int r;

        memset(cache, 0, sizeof(*cache));
        list_init(&cache->lru);
        cache->limit = MAPCACHE_DEFAULT_LIMIT;
        r = gmd__env_switch(GMD_CACHE_ENV, "no mapping cache", &cache->enabled);
        if (r < 0)
                return r;
        text = secure_getenv(GMD_CACHE_LIMIT_ENV);
        if (text && *text && gmd_parse_size(text, &cache->limit) < 0) {
                gmd__error_set("%s='%.32s' is not a size (examples: 0, 256M, 2G)",
                          GMD_CACHE_LIMIT_ENV, text);
                return -EINVAL;
        }
        return 0;
}

/* Under buffers_lock. */
static void cache_insert_locked(gmd_mapcache *cache, gmd_buffer *buffer)
{
        buffer->parked = true;
        list_add_tail(&cache->lru, &buffer->cache_node);
        cache->bytes += buffer->size;
        cache->count++;
}

void gmd__mapcache_forget_locked(gmd_mapcache *cache, gmd_buffer *buffer)
{
        if (!buffer->parked)
                return;
        buffer->parked = false;
        list_remove(&buffer->cache_node);
        cache->bytes -= buffer->size;
        cache->count--;
}

/* Under buffers_lock: take `buffer` out of the cache and out of the
 * client's table, to be unmapped and returned; `out` lists them. */
static void cache_evict_locked(gmd_client *client, gmd_buffer *buffer,
                               gmd_list *out)
{
        gmd__mapcache_forget_locked(&client->cache, buffer);
        list_remove(&buffer->node);
        list_add_tail(out, &buffer->cache_node);
}

/* Send MSG_RETURN for `ids` in batches. */
static int send_return(gmd_client *client, uint64_t *ids, size_t n)
{
        Gmd__BufferList msg = GMD__BUFFER_LIST__INIT;
        int r = 0;

        for (size_t done = 0; done < n && r == 0; done += msg.n_buffer_ids) {
                msg.buffer_ids = ids + done;
                msg.n_buffer_ids = n - done < RETURN_BATCH ? n - done :
                                   RETURN_BATCH;
                r = gmd__client_send(client, GMD__MSG_TYPE__MSG_RETURN, &msg.base);
        }
        return r;
}

/* Destroy buffers the daemon already freed (revoked): nothing to tell it. */
static void drop_list(gmd_client *client, gmd_list *list)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, list) {
                list_remove(pos);
                gmd__buffer_destroy(client, container_of(pos, gmd_buffer, cache_node));
        }
}

/*
 * Unmap and destroy the buffers on `evicted` (out of every list but that
 * one, so no lock is needed), then tell the daemon with MSG_RETURN. The
 * mappings go first: once the daemon reads the RETURN it frees the memory.
 * The RETURN cannot overtake the buffers' PARKs: whoever parked one took
 * send_lock before the buffer could be seen in the cache. Returns the
 * number returned, or the send's error.
 */
static int return_evicted(gmd_client *client, gmd_list *evicted)
{
        gmd_list *pos, *tmp;
        uint64_t *ids = NULL;
        size_t n = 0, cap = 0;
        int r;

        list_for_each(pos, evicted)
                cap++;
        if (cap == 0)
                return 0;
        ids = malloc(cap * sizeof(*ids));
        list_for_each_safe(pos, tmp, evicted) {
                gmd_buffer *buffer = container_of(pos, gmd_buffer, cache_node);

                list_remove(pos);
                if (ids)
                        ids[n++] = buffer->id;
                /* Unreserving unmaps first (mapper.h): one call, not two. */
                gmd__buffer_destroy(client, buffer);
        }
        if (!ids) {
                /* Unmapped but not reported: the daemon keeps counting them
                 * as ours until the connection closes. Say so. */
                gmd__error_set("out of memory listing returned buffers");
                return -ENOMEM;
        }
        r = send_return(client, ids, n);
        free(ids);
        return r < 0 ? r : (int)n;
}

/* Only a buffer the application held the lease on when it freed it: the
 * daemon never moves such a buffer, so no remap can be on its way while it
 * sits in the cache and is handed out again. SPILLABLE buffers are kept
 * out all the same (a choice from when the daemon moved them while held;
 * it could be lifted). */
static bool may_park(gmd_client *client, const gmd_buffer *buffer)
{
        return client->cache.enabled && !buffer->ipc &&
               atomic_load(&buffer->leased) &&
               !(buffer->flags & GMD_ALLOC_SPILLABLE) &&
               !(buffer->flags & GMD_ALLOC_LEGACY_IPC) &&
               buffer->size <= client->cache.limit &&
               atomic_load(&buffer->tier) == GMD_TIER_VRAM &&
               !atomic_load(&buffer->revoked);
}

bool gmd__mapcache_park(gmd_client *client, gmd_buffer *buffer)
{
        gmd_mapcache *cache = &client->cache;
        Gmd__BufferList msg = GMD__BUFFER_LIST__INIT;
        uint64_t id = buffer->id;
        gmd_list evicted;
        bool up;
        int r;

        if (!may_park(client, buffer) || gmd__client_dead_error(client) < 0)
                return false;
        list_init(&evicted);

        pthread_mutex_lock(&client->buffers_lock);
        /* A revoke or a remap to host memory may have come in since the
         * check above: only a buffer resting mapped in VRAM is kept. And
         * only while connected: the connection going away empties the
         * cache under this lock (reconnect.c), and nothing is parked
         * until the next one is up. */
        pthread_mutex_lock(&client->lock);
        up = client->state == GMD_CONN_UP;
        pthread_mutex_unlock(&client->lock);
        if (!up || atomic_load(&buffer->revoked) || buffer->parked ||
            buffer->unmapped || atomic_load(&buffer->tier) != GMD_TIER_VRAM) {
                pthread_mutex_unlock(&client->buffers_lock);
                return false;
        }
        /* Oldest first, never the buffer being parked: it fits alone. */
        while (cache->bytes + buffer->size > cache->limit) {
                gmd_buffer *oldest = container_of(cache->lru.next, gmd_buffer,
                                                  cache_node);

                cache_evict_locked(client, oldest, &evicted);
        }
        cache_insert_locked(cache, buffer);
        msg.buffer_ids = &id;
        msg.n_buffer_ids = 1;
        /* A failed send means the connection is going: the buffer then
         * waits in the cache for gmd_disconnect, like every other. */
        gmd__client_send_after(client, &client->buffers_lock,
                          GMD__MSG_TYPE__MSG_PARK, &msg.base);
        r = return_evicted(client, &evicted);
        (void)r;        /* gmd_free has succeeded either way */
        return true;
}

/* The device's granularity multiple of `size`, or 0 when there is none. */
static uint64_t round_size(const gmd_client *client, unsigned device,
                           uint64_t size)
{
        uint64_t g;

        if (device >= client->n_devices)
                return 0;
        g = client->granularity[device];
        if (g == 0 || size > UINT64_MAX - (g - 1))
                return 0;
        return (size + g - 1) / g * g;
}

int gmd__mapcache_take(gmd_client *client, unsigned device, uint64_t size,
                  unsigned flags, gmd_buffer **ret_buffer)
{
        gmd_mapcache *cache = &client->cache;
        Gmd__BufferList msg = GMD__BUFFER_LIST__INIT;
        gmd_buffer *found = NULL;
        uint64_t rounded, id;
        gmd_list *pos, *prev, stale, dropped;
        int r;

        if (!cache->enabled || (flags & GMD_ALLOC_LEGACY_IPC))
                return 0;
        list_init(&dropped);
        rounded = round_size(client, device, size);
        if (rounded == 0)
                return 0;

        list_init(&stale);
        pthread_mutex_lock(&client->buffers_lock);
        for (pos = cache->lru.prev; pos != &cache->lru; pos = prev) {
                gmd_buffer *b = container_of(pos, gmd_buffer, cache_node);

                prev = pos->prev;
                if (b->device != device || b->size != rounded || b->flags != flags)
                        continue;
                /* A parked buffer the daemon moved to host memory (its move
                 * had begun when the application freed it) is no use for an
                 * allocation: it goes back. One whose remap failed is
                 * revoked: the daemon freed it already. */
                if (atomic_load(&b->revoked)) {
                        gmd__mapcache_forget_locked(cache, b);
                        list_remove(&b->node);
                        list_add_tail(&dropped, &b->cache_node);
                        continue;
                }
                if (b->unmapped || atomic_load(&b->tier) != GMD_TIER_VRAM) {
                        cache_evict_locked(client, b, &stale);
                        continue;
                }
                found = b;
                break;
        }
        if (!found) {
                pthread_mutex_unlock(&client->buffers_lock);
                drop_list(client, &dropped);
                (void)return_evicted(client, &stale);
                return 0;
        }
        gmd__mapcache_forget_locked(cache, found);
        id = found->id;
        msg.buffer_ids = &id;
        msg.n_buffer_ids = 1;
        r = gmd__client_send_after(client, &client->buffers_lock,
                              GMD__MSG_TYPE__MSG_UNPARK, &msg.base);
        drop_list(client, &dropped);
        (void)return_evicted(client, &stale);
        /* The connection went away since the buffer was found: nothing
         * was sent, and the claims on the next connection say it is in
         * use again (reconnect.c). */
        if (r == -EAGAIN)
                r = 0;
        if (r == -ENOMEM || r == -EMSGSIZE) {
                /* Nothing went out: the buffer is still parked for the
                 * daemon, so it goes back; the request path decides. */
                pthread_mutex_lock(&client->buffers_lock);
                cache_insert_locked(cache, found);
                pthread_mutex_unlock(&client->buffers_lock);
                return 0;
        }
        if (r < 0) {
                /* The connection died: the daemon dropped the memory with
                 * it, so the handle must not reach the application. */
                gmd__buffer_unlink(client, found);
                gmd__buffer_destroy(client, found);
                if (r != GMD_ECONN && r != GMD_EPROTO) {
                        char reason[160];

                        snprintf(reason, sizeof(reason),
                                 "gpu-memd closed the connection (send: %s)",
                                 strerror(-r));
                        gmd__client_fail(client, GMD_ECONN, reason);
                }
                r = gmd__client_dead_error(client);
                return r < 0 ? r : GMD_ECONN;
        }
        atomic_store(&found->leased, true);
        *ret_buffer = found;
        return 1;
}

int gmd__mapcache_return(gmd_client *client, bool all_devices, unsigned device,
                    uint64_t bytes)
{
        gmd_mapcache *cache = &client->cache;
        gmd_list evicted, *pos, *tmp;
        uint64_t covered = 0;

        list_init(&evicted);
        pthread_mutex_lock(&client->buffers_lock);
        list_for_each_safe(pos, tmp, &cache->lru) {
                gmd_buffer *b = container_of(pos, gmd_buffer, cache_node);

                if (bytes > 0 && covered >= bytes)
                        break;
                if (!all_devices && b->device != device)
                        continue;
                covered += b->size;
                cache_evict_locked(client, b, &evicted);
        }
        pthread_mutex_unlock(&client->buffers_lock);
        return return_evicted(client, &evicted);
}

void gmd__mapcache_take_all_locked(gmd_client *client, gmd_list *out)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &client->cache.lru)
                cache_evict_locked(client, container_of(pos, gmd_buffer,
                                                        cache_node), out);
}

void gmd__mapcache_destroy_list(gmd_client *client, gmd_list *list)
{
        drop_list(client, list);
}

void gmd__mapcache_drop_all(gmd_client *client)
{
        gmd_list dropped;

        list_init(&dropped);
        pthread_mutex_lock(&client->buffers_lock);
        gmd__mapcache_take_all_locked(client, &dropped);
        pthread_mutex_unlock(&client->buffers_lock);
        drop_list(client, &dropped);
}

/** Return every parked buffer to the daemon; see gpumem.h. */
int gmd_trim_cache(gmd_client *client)
{
        int r;

        if (!client) {
                gmd__error_set("gmd_trim_cache: no client");
                return -EINVAL;
        }
        r = gmd__client_dead_error(client);
        if (r < 0)
                return r;
        r = gmd__mapcache_return(client, true, 0, 0);
        if (r < 0 && r != -ENOMEM) {
                int dead = gmd__client_dead_error(client);

                if (dead < 0)
                        return dead;
                gmd__error_set("cannot return cached buffers to gpu-memd: %s",
                          strerror(-r));
        }
        return r;
}
