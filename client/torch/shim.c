/*
 * shim — libgpumem_torch.so's connection to gpu-memd and its buffers.
 *
 * One gmd_client per process, connected at the first allocation (or by
 * gmd_torch_connect), whatever thread makes it: autograd's backward thread
 * allocates as much as the main one. Buffers are SWAPPABLE and stay
 * acquired for their whole life (PyTorch may touch a segment at any time),
 * so the daemon never moves them; it sees them, counts them against quotas
 * and makes other clients wait for them. The repeat of a refused request
 * (PyTorch's out-of-memory retry) waits with GMD_ALLOC_NO_SELF_WAIT: it
 * fails at once when only this process's own memory stands in the way.
 *
 * Freed buffers are not parked in libgpumem's cache of idle mappings:
 * PyTorch caches on top already, and a segment it frees (empty_cache, or
 * its out-of-memory retry) must go back to the daemon so others can have
 * it. Hence gmd_trim_cache after each gmd_free.
 *
 * Locking: `lock` guards the connection, the table and the settings; it is
 * not held across gmd_alloc, which may wait for minutes while other
 * threads free. Counters are atomics.
 */
#include "shim.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devmap.h"
#include "gpumem.h"
#include "gpumem_torch.h"
#include "idmap.h"
#include "settings.h"
#include "timeutil.h"

/* How long a refused first request keeps its deadline for the repeat. */
#define RETRY_WINDOW_US (30ull * 1000 * 1000)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static gmd_client *client;
static gmd_idmap buffers;          /* device pointer -> gmd_buffer */
static int settings_loaded;
static torch_settings settings;
static atomic_uint_fast64_t stats[GMD_TORCH_N_STATS];

static pthread_mutex_t error_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_error[512];

/* The first refused request of this thread, whose repeat may wait. */
static __thread struct {
        size_t size;
        unsigned device;
        uint64_t deadline_us;      /* UINT64_MAX: no deadline */
        uint64_t expires_us;
} refused;
static __thread int thread_seen;

void shim_set_error(const char *fmt, ...)
{
        va_list ap;

        pthread_mutex_lock(&error_lock);
        va_start(ap, fmt);
        vsnprintf(last_error, sizeof(last_error), fmt, ap);
        va_end(ap);
        pthread_mutex_unlock(&error_lock);
}

static void count(int which, int64_t delta)
{
        atomic_fetch_add(&stats[which], (uint64_t)delta);
}

/* A forked child has no I/O thread: forget the parent's connection (its
 * socket is shared with the parent, so it is not closed either). */
static void after_fork_in_child(void)
{
        client = NULL;
        idmap_init(&buffers);
        devmap_reset();
        pthread_mutex_init(&lock, NULL);
}

static void fork_handler_install(void)
{
        pthread_atfork(NULL, NULL, after_fork_in_child);
}

/* Under `lock`. */
static int settings_ensure(void)
{
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        char err[256];

        pthread_once(&once, fork_handler_install);
        if (settings_loaded)
                return 0;
        if (torch_settings_load(&settings, err, sizeof(err)) < 0) {
                shim_set_error("%s", err);
                return -EINVAL;
        }
        settings_loaded = 1;
        return 0;
}

/* Under `lock`. */
static int connect_locked(void)
{
        int r;

        if (client)
                return 0;
        r = settings_ensure();
        if (r < 0)
                return r;
        r = gmd_connect(NULL, settings.name, &client);
        if (r < 0) {
                const char *path = getenv(GMD_SOCKET_ENV);

                shim_set_error("cannot connect to gpu-memd at %s: %s — is "
                               "gpu-memd running?", path && *path ? path :
                               GMD_DEFAULT_SOCKET, gmd_last_error());
                client = NULL;
        }
        return r;
}

/* The connected client, or NULL with the error set. */
static gmd_client *client_get(int64_t *ret_timeout, int *ret_quiet,
                              int *ret_lend)
{
        gmd_client *c;

        pthread_mutex_lock(&lock);
        c = connect_locked() == 0 ? client : NULL;
        if (ret_timeout)
                *ret_timeout = settings.timeout_ms;
        if (ret_quiet)
                *ret_quiet = settings.quiet;
        if (ret_lend)
                *ret_lend = settings.yield;
        pthread_mutex_unlock(&lock);
        return c;
}

/* The wait this request may take: none for a first request, the rest of
 * the first one's deadline for its repeat. */
static int64_t wait_for(size_t size, unsigned device, int64_t timeout_ms,
                        uint64_t now, int *ret_repeat)
{
        *ret_repeat = refused.expires_us > now && refused.size == size &&
                      refused.device == device;
        if (*ret_repeat) {
                if (refused.deadline_us == UINT64_MAX)
                        return GMD_WAIT_FOREVER;
                return refused.deadline_us > now ?
                       (int64_t)((refused.deadline_us - now + 999) / 1000) : 0;
        }
        refused.expires_us = now + RETRY_WINDOW_US;
        refused.size = size;
        refused.device = device;
        refused.deadline_us = timeout_ms < 0 ? UINT64_MAX :
                              now + (uint64_t)timeout_ms * 1000;
        return GMD_NO_WAIT;
}

int shim_alloc(size_t size, unsigned cuda_device, int (*quiesce)(void),
               void **ret_ptr)
{
        gmd_buffer *b = NULL;
        gmd_client *c;
        int64_t timeout_ms, wait_ms;
        uint64_t start = now_us();
        int quiet, repeat, lend, r;
        unsigned flags, device;

        if (!thread_seen) {
                thread_seen = 1;
                count(GMD_TORCH_THREADS, 1);
        }
        c = client_get(&timeout_ms, &quiet, &lend);
        if (!c) {
                count(GMD_TORCH_ALLOC_FAILS, 1);
                if (!quiet)
                        fprintf(stderr, "gpu-memd: %s\n", gmd_torch_last_error());
                return -ENOTCONN;
        }
        /* The daemon's number for this process's CUDA device: they differ
         * under a CUDA_VISIBLE_DEVICES that hides or reorders GPUs. */
        r = devmap_to_daemon(c, cuda_device, &device);
        if (r < 0) {
                shim_set_error("%s", gmd_last_error());
                count(GMD_TORCH_ALLOC_FAILS, 1);
                if (!quiet)
                        fprintf(stderr, "gpu-memd: %s\n", gmd_torch_last_error());
                return r;
        }
        wait_ms = wait_for(size, device, timeout_ms, start, &repeat);
        /* The repeat is made holding PyTorch's allocator mutex: no thread
         * of this process can free until it returns, so room only this
         * process holds would be waited for in vain (for ever by default).
         * The daemon then fails it at once, in words, and PyTorch raises
         * its out-of-memory error with them. While it waits for another
         * process's room, it lends the daemon what this process holds
         * (GMD_ALLOC_YIELD), so that two processes each mid-step do not
         * wait for each other for ever: nothing of this process runs on
         * the GPU meanwhile once `quiesce` synchronized its devices, and
         * its other threads wait for the allocator mutex. A daemon older
         * than a flag refuses it as unknown (-EINVAL): asked again
         * without them. */
        flags = GMD_ALLOC_SWAPPABLE;
        if (repeat) {
                flags = GMD_ALLOC_NO_SELF_WAIT;
                if (lend && quiesce && quiesce() == 0)
                        flags |= GMD_ALLOC_YIELD;
        }
        r = gmd_alloc(c, size, device, flags, wait_ms, &b);
        if (r == -EINVAL && (flags & GMD_ALLOC_YIELD))
                r = gmd_alloc(c, size, device, GMD_ALLOC_NO_SELF_WAIT, wait_ms, &b);
        if (r == -EINVAL && repeat)
                r = gmd_alloc(c, size, device, GMD_ALLOC_SWAPPABLE, wait_ms, &b);
        if (r < 0) {
                shim_set_error("%s", gmd_last_error());
                count(GMD_TORCH_ALLOC_FAILS, 1);
                /* The repeat gave up too: that is the error people see. */
                if (repeat || r == GMD_ETOOLARGE ||
                    r == GMD_EQUOTA) {
                        refused.expires_us = 0;
                        if (!quiet)
                                fprintf(stderr, "gpu-memd: %s\n",
                                        gmd_torch_last_error());
                }
                return r;
        }
        if (repeat) {
                count(GMD_TORCH_WAITS, 1);
                count(GMD_TORCH_WAIT_US, (int64_t)(now_us() - start));
        }
        refused.expires_us = 0;
        pthread_mutex_lock(&lock);
        r = idmap_put(&buffers, (uint64_t)(uintptr_t)gmd_buffer_ptr(b), b);
        pthread_mutex_unlock(&lock);
        if (r < 0) {
                gmd_free(c, b);
                shim_set_error("out of host memory for the table of buffers");
                return r;
        }
        count(GMD_TORCH_ALLOCS, 1);
        count(GMD_TORCH_BYTES_HELD, (int64_t)gmd_buffer_size(b));
        count(GMD_TORCH_SEGMENTS_HELD, 1);
        *ret_ptr = gmd_buffer_ptr(b);
        return 0;
}

int shim_device_of(void *ptr)
{
        gmd_buffer *b;
        unsigned device;
        int ordinal;

        if (!ptr)
                return -ENOENT;
        pthread_mutex_lock(&lock);
        b = idmap_get(&buffers, (uint64_t)(uintptr_t)ptr);
        pthread_mutex_unlock(&lock);
        if (!b)
                return -ENOENT;
        /* Made through the table, so the table names its ordinal. */
        device = gmd_buffer_device(b);
        ordinal = devmap_to_cuda(device);
        return ordinal >= 0 ? ordinal : (int)device;
}

int shim_free(void *ptr)
{
        gmd_buffer *b;
        gmd_client *c;
        size_t size;
        int r;

        pthread_mutex_lock(&lock);
        b = ptr ? idmap_remove(&buffers, (uint64_t)(uintptr_t)ptr) : NULL;
        c = client;
        pthread_mutex_unlock(&lock);
        if (!b)
                return -ENOENT;
        size = gmd_buffer_size(b);
        r = gmd_free(c, b);
        if (r < 0 && r != GMD_ECONN && r != GMD_EPROTO && r != GMD_ENOENT) {
                /* Still ours: keep it findable so a later free can retry. */
                shim_set_error("%s", gmd_last_error());
                pthread_mutex_lock(&lock);
                idmap_put(&buffers, (uint64_t)(uintptr_t)ptr, b);
                pthread_mutex_unlock(&lock);
                return r;
        }
        gmd_trim_cache(c);
        count(GMD_TORCH_FREES, 1);
        count(GMD_TORCH_BYTES_HELD, -(int64_t)size);
        count(GMD_TORCH_SEGMENTS_HELD, -1);
        return 0;
}

int shim_pool_info(unsigned cuda_device, size_t *ret_free, size_t *ret_total)
{
        gmd_status *st = NULL;
        gmd_client *c = client_get(NULL, NULL, NULL);
        unsigned device;
        int r = -ENOENT;

        if (!c)
                return -ENOTCONN;
        if (devmap_to_daemon(c, cuda_device, &device) < 0) {
                shim_set_error("%s", gmd_last_error());
                return -ENODEV;
        }
        if (gmd_query_status(c, GMD_STATUS_POOLS, 0, &st) < 0) {
                shim_set_error("%s", gmd_last_error());
                return -EIO;
        }
        for (size_t i = 0; i < st->n_pools; i++) {
                const gmd_pool_status *p = &st->pools[i];

                if (p->device == device && p->tier == GMD_TIER_VRAM) {
                        *ret_free = p->free;
                        *ret_total = p->capacity;
                        r = 0;
                        break;
                }
        }
        gmd_status_free(st);
        if (r == 0)
                count(GMD_TORCH_MEMINFO, 1);
        return r;
}

int shim_peer_access(unsigned cuda_device, unsigned cuda_peer)
{
        gmd_client *c = client_get(NULL, NULL, NULL);
        unsigned device, peer;
        int r;

        if (!c)
                return -ENOTCONN;
        if (devmap_to_daemon(c, cuda_device, &device) < 0 ||
            devmap_to_daemon(c, cuda_peer, &peer) < 0) {
                shim_set_error("%s", gmd_last_error());
                return -ENODEV;
        }
        r = gmd_peer_access(c, device, peer);
        if (r < 0)
                shim_set_error("%s", gmd_last_error());
        return r;
}

void shim_count_foreign_free(void)
{
        count(GMD_TORCH_FOREIGN_FREES, 1);
}

/* ---- exported control functions (gpumem_torch.h) ----------------------- */

int gmd_torch_connect(void)
{
        int r;

        pthread_mutex_lock(&lock);
        r = connect_locked();
        pthread_mutex_unlock(&lock);
        return r;
}

const char *gmd_torch_last_error(void)
{
        /* A copy per thread: another thread may be writing last_error. */
        static __thread char copy[sizeof(last_error)];

        pthread_mutex_lock(&error_lock);
        memcpy(copy, last_error, sizeof(copy));
        pthread_mutex_unlock(&error_lock);
        return copy;
}

size_t gmd_torch_stats(uint64_t *ret, size_t n)
{
        if (n > GMD_TORCH_N_STATS)
                n = GMD_TORCH_N_STATS;
        for (size_t i = 0; i < n; i++)
                ret[i] = atomic_load(&stats[i]);
        return n;
}

int gmd_torch_set_timeout(int64_t timeout_ms)
{
        int r;

        if (timeout_ms < -1)
                return -EINVAL;
        pthread_mutex_lock(&lock);
        r = settings_ensure();
        if (r == 0)
                settings.timeout_ms = timeout_ms;
        pthread_mutex_unlock(&lock);
        return r;
}

void gmd_torch_set_quiet(int quiet)
{
        pthread_mutex_lock(&lock);
        if (settings_ensure() == 0)
                settings.quiet = quiet != 0;
        pthread_mutex_unlock(&lock);
}
