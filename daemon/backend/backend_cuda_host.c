/*
 * backend_cuda_host — the HOST tier: the host arena, and the worker thread
 * that pins it and releases host allocations.
 *
 * A host-located VMM allocation pins its pages when created: 235 ms for
 * 1 GiB on the GPU machine (ARCHITECTURE.md), ten times the 20 ms its copy
 * takes, releasing it unpins them again, and while either runs the driver
 * stalls the other processes on the machine too (measured: BENCHMARKS.md).
 * A swap-out creates its destination on the request path, so pinning there
 * would hold every swap-out to ~4 GB/s. Hence the arena:
 *
 *   - At open each device gets a VA range of its share of [pools]
 *     host_limit, and the worker fills it from the start with its share
 *     of [pools] host_stock, in pieces of CUDA_ARENA_PIECE (pinned,
 *     mapped, access for the device), logging its progress: the pinning
 *     happens off the loop thread.
 *   - When what is free of it runs low, before it is full, the core asks
 *     it to grow ([pools] host_stock_grow, host_stock_vram,
 *     backing_arena_grow): the target rises by whole pieces and the
 *     worker pins them the same way, within the range. A growth asked
 *     while one is being pinned moves the target on, so the worker keeps
 *     pinning without a gap. A full arena made every swap-out beyond it
 *     pin on the spot, at ~4 GB/s, step after step: H100, GPT-2 17 x 2048
 *     trained at half its 27 GiB peak moved ~20 GiB each way a step at
 *     21-27 GB/s with the default 8 GiB arena; and growing only then, a
 *     piece per miss, took a co-tenancy round's 20 GiB of growth 1 GiB at
 *     a time while the jobs waited.
 *   - mem_create_private carves a swap-out's host copy out of what is
 *     built, best fit, in up to CUDA_ARENA_MAX_PARTS ranges when no single
 *     free range holds it (daemon/backend/host_arena.c, the bookkeeping the sim
 *     backend's arena shares; no range crosses a piece, as
 *     one copy cannot span two physical allocations). The copy engine
 *     walks the parts (cuda_mem_at). Freeing gives the ranges back: no
 *     driver call either way, so a steady swap workload pins nothing.
 *   - Arena memory never reaches a client (its owner unmaps a SWAPPABLE
 *     buffer that goes out, and nobody maps the copy), so it needs no fd,
 *     and no zeroing: the copy writes every byte of it before anyone
 *     reads it, and what it held before was the daemon's own.
 *
 * Memory a client maps (a SPILLABLE buffer on HOST) must be a whole
 * allocation with an fd, so cuda_host_create makes one on the spot; the
 * worker releases those when they are freed.
 *
 * Each piece is exported to an fd as soon as it is pinned, on the worker,
 * so restart recovery (backend_cuda_adopt.c) can hand the pieces on
 * without a driver call on the loop thread.
 *
 * Locking: cuda_host.lock guards every arena's extents and counters and
 * the worker's lists; CUDA calls are made outside it.
 */
#include "backend_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "log.h"
#include "timeutil.h"

/* Progress lines while the arenas are built: at most one a second. */
#define CUDA_ARENA_PROGRESS_US 1000000u

/* ---- building ------------------------------------------------------------ */

int cuda_arena_map(cuda_backend *b, cuda_device *d, CUdeviceptr at,
                   uint64_t bytes, CUmemGenericAllocationHandle h)
{
        const gmd_cuda_driver *cu = b->cu;
        CUmemAccessDesc access = { 0 };
        int r;

        r = cuda_check(b, cu->cuMemMap(at, bytes, 0, h, 0), "cuMemMap (host arena)");
        if (r < 0)
                return r;
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = d->dev;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        r = cuda_check(b, cu->cuMemSetAccess(at, bytes, &access, 1),
                       "cuMemSetAccess (host arena)");
        if (r < 0) {
                cu->cuMemUnmap(at, bytes);
                return r;
        }
        return 0;
}

int cuda_arena_export(cuda_backend *b, CUmemGenericAllocationHandle h)
{
        int fd = -1;

        if (cuda_check(b, b->cu->cuMemExportToShareableHandle(&fd, h,
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                       "cuMemExportToShareableHandle (host arena)") < 0)
                return -1;
        /* The driver's fd has no CLOEXEC; the daemon's fds all do. */
        (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
        return fd;
}

/* Pin one piece of `bytes` at `at` in `d`'s arena and let the device
 * reach it. The device's context is current. */
static int arena_piece_make(cuda_backend *b, cuda_device *d, CUdeviceptr at,
                            uint64_t bytes, CUmemGenericAllocationHandle *ret)
{
        const gmd_cuda_driver *cu = b->cu;
        CUmemAllocationProp prop = { 0 };
        CUmemGenericAllocationHandle h = 0;
        int r;

        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        prop.location.id = d->host_numa_id;
        r = cuda_check(b, cu->cuMemCreate(&h, bytes, &prop, 0),
                       "cuMemCreate (host arena)");
        if (r < 0)
                return r;
        r = cuda_arena_map(b, d, at, bytes, h);
        if (r < 0) {
                cu->cuMemRelease(h);
                return r;
        }
        *ret = h;
        return 0;
}

/* The next arena with a piece to build (lock held), or NULL. */
static cuda_device *arena_next(cuda_backend *b)
{
        for (unsigned i = 0; i < b->n_devices; i++) {
                cuda_arena *a = &b->devices[i].arena;

                if (a->base && !a->failed && !a->adopting && !a->held &&
                    a->ranges.built < a->ranges.target)
                        return &b->devices[i];
        }
        return NULL;
}

static uint64_t arenas_built(const cuda_backend *b)
{
        uint64_t built = 0;

        for (unsigned i = 0; i < b->n_devices; i++)
                built += b->devices[i].arena.ranges.built;
        return built;
}

bool cuda_host_pinning(cuda_backend *b)
{
        return arena_next(b) != NULL;
}

static void arena_progress(cuda_backend *b, bool done)
{
        uint64_t built = 0, target = 0, now = now_us();
        double secs = (double)(now - b->host.build_start_us) / 1e6;
        uint64_t pinned = arenas_built(b) - b->host.build_from;

        if (!done && (b->host.build_from ||
                      now - b->host.progress_us < CUDA_ARENA_PROGRESS_US))
                return;
        b->host.progress_us = now;
        for (unsigned i = 0; i < b->n_devices; i++) {
                built += b->devices[i].arena.ranges.built;
                target += b->devices[i].arena.ranges.target;
        }
        if (done && b->host.build_from)
                log_info("cuda: host arena grown to %llu MiB: %llu MiB more "
                         "pinned in %.2f s (%.1f GB/s)",
                         (unsigned long long)(built >> 20),
                         (unsigned long long)(pinned >> 20), secs,
                         secs > 0 ? (double)pinned / secs / 1e9 : 0.0);
        else if (done)
                log_info("cuda: host arena ready: %llu MiB pinned in %.1f s "
                         "(%.1f GB/s)", (unsigned long long)(built >> 20), secs,
                         secs > 0 ? (double)pinned / secs / 1e9 : 0.0);
        else
                log_info("cuda: host arena: %llu of %llu MiB pinned (%.0f%%)",
                         (unsigned long long)(built >> 20),
                         (unsigned long long)(target >> 20),
                         target ? 100.0 * (double)built / (double)target : 0.0);
}

/* Build one piece of `d`'s arena; called and returns with the lock held. */
static void arena_build_piece(cuda_backend *b, cuda_device *d)
{
        cuda_host *h = &b->host;
        cuda_arena *a = &d->arena;
        uint64_t at = a->ranges.built, bytes = a->ranges.target - at;
        CUmemGenericAllocationHandle handle = 0;
        int fd = -1, r;

        if (bytes > a->piece)
                bytes = a->piece;
        a->building = true;
        pthread_mutex_unlock(&h->lock);
        r = cuda_device_enter(b, d);
        if (r == 0)
                r = arena_piece_make(b, d, a->base + at, bytes, &handle);
        /* Exported here, off the loop thread, for restart recovery
         * (arena_pieces): a failed export leaves the piece without one
         * (-1), and arena_pieces tries again. */
        if (r == 0)
                fd = cuda_arena_export(b, handle);
        pthread_mutex_lock(&h->lock);
        a->building = false;
        pthread_cond_broadcast(&h->idle);
        if (r == 0 && a->n_pieces == CUDA_ARENA_MAX_PIECES)
                r = -E2BIG;   /* cannot happen: arena_reserve sized the pieces */
        if (r == 0)
                r = host_arena_add(&a->ranges, at, bytes);
        if (r < 0) {
                /* Most likely the machine cannot pin more (RLIMIT_MEMLOCK,
                 * RAM): keep what is built, say so, make nothing more. */
                if (handle) {
                        b->cu->cuMemUnmap(a->base + at, bytes);
                        b->cu->cuMemRelease(handle);
                }
                if (fd >= 0)
                        close(fd);
                a->failed = true;
                log_warning("cuda: device %u: the host arena stops at %llu of "
                            "%llu MiB: %s; swap-outs beyond it pin their host "
                            "memory on the spot (slower)",
                            (unsigned)(d - b->devices),
                            (unsigned long long)(a->ranges.built >> 20),
                            (unsigned long long)(a->ranges.target >> 20),
                            strerror(-r));
                return;
        }
        a->pieces[a->n_pieces++] = (cuda_arena_piece){
                .handle = handle, .offset = at, .size = bytes, .fd = fd,
        };
        arena_progress(b, arena_next(b) == NULL);
}

static void host_free_list(cuda_backend *b, cuda_mem *m)
{
        while (m) {
                cuda_mem *next = m->next;
                cuda_device *d = cuda_device_get(b, m->mem.device);
                uint64_t t0 = now_us();

                if (d)
                        (void)cuda_device_enter(b, d);
                cuda_mem_free(b, m);
                log_debug("cuda: host worker released an allocation in %llu us",
                          (unsigned long long)(now_us() - t0));
                m = next;
        }
}

static void *host_worker(void *arg)
{
        cuda_backend *b = arg;
        cuda_host *h = &b->host;

        prctl(PR_SET_NAME, "gmd-hostpin", 0, 0, 0);
        pthread_mutex_lock(&h->lock);
        for (;;) {
                cuda_device *d;

                if (h->to_free) {
                        cuda_mem *list = h->to_free;

                        h->to_free = NULL;
                        pthread_mutex_unlock(&h->lock);
                        host_free_list(b, list);
                        pthread_mutex_lock(&h->lock);
                        continue;
                }
                if (h->stopping)
                        break;
                /* A restart's adopted pieces first: copies may wait for
                 * them (backend_cuda_reach.c). */
                if (cuda_arena_unreached(b)) {
                        bool did;

                        pthread_mutex_unlock(&h->lock);
                        did = cuda_arena_reach_next(b);
                        pthread_mutex_lock(&h->lock);
                        if (did)
                                continue;
                }
                d = arena_next(b);
                if (d)
                        arena_build_piece(b, d);
                else
                        pthread_cond_wait(&h->cond, &h->lock);
        }
        pthread_mutex_unlock(&h->lock);
        return NULL;
}

/* ---- open and close -------------------------------------------------------- */

/* Reserve `d`'s arena VA range of `limit` bytes, `target` of them to be
 * pinned now; on failure the device has no arena. The pieces are sized
 * so that a full range takes at most CUDA_ARENA_MAX_PIECES of them. */
static void arena_reserve(cuda_backend *b, cuda_device *d, uint64_t target,
                          uint64_t limit)
{
        cuda_arena *a = &d->arena;
        uint64_t gran = d->host_granularity;

        host_arena_init(&a->ranges, gran ? gran : 1, 0, 0);
        if (!gran || target < gran)
                return;
        target -= target % gran;
        if (limit < target)
                limit = target;
        limit -= limit % gran;
        a->piece = CUDA_ARENA_PIECE;
        if (limit / a->piece >= CUDA_ARENA_MAX_PIECES) {
                a->piece = limit / CUDA_ARENA_MAX_PIECES + gran;
                a->piece -= a->piece % gran;
        }
        if (cuda_device_enter(b, d) < 0 ||
            cuda_check(b, b->cu->cuMemAddressReserve(&a->base, limit, gran, 0, 0),
                       "cuMemAddressReserve (host arena)") < 0) {
                a->base = 0;
                return;
        }
        host_arena_init(&a->ranges, gran, target, limit);
}

int cuda_host_open(cuda_backend *b, uint64_t total, uint64_t limit,
                   bool held)
{
        cuda_host *h = &b->host;
        uint64_t share = b->n_devices ? total / b->n_devices : 0;
        uint64_t room = b->n_devices ? limit / b->n_devices : 0;
        int r;

        for (unsigned i = 0; i < b->n_devices; i++) {
                arena_reserve(b, &b->devices[i], share, room);
                b->devices[i].arena.held = held;
        }
        if (held)
                log_info("cuda: host arenas wait for the previous run's "
                         "pieces before pinning");
        else if (arena_next(b))
                log_info("cuda: pinning a host arena of %llu MiB per device for "
                         "swap-outs ([pools] host_stock), in the background",
                         (unsigned long long)(b->devices[0].arena.ranges.target >> 20));
        h->build_start_us = now_us();
        pthread_mutex_init(&h->lock, NULL);
        pthread_cond_init(&h->cond, NULL);
        pthread_cond_init(&h->idle, NULL);
        r = -pthread_create(&h->thread, NULL, host_worker, b);
        if (r < 0) {
                log_error("cuda: cannot start the host worker: %s", strerror(-r));
                pthread_cond_destroy(&h->idle);
                pthread_cond_destroy(&h->cond);
                pthread_mutex_destroy(&h->lock);
                return r;
        }
        h->started = true;
        return 0;
}

static void arena_close(cuda_backend *b, cuda_device *d, unsigned device)
{
        cuda_arena *a = &d->arena;

        const gmd_host_arena *r = &a->ranges;

        if (r->served + r->refused)
                log_info("cuda: device %u: the host arena served %llu of %llu "
                         "swap-outs", device, (unsigned long long)r->served,
                         (unsigned long long)(r->served + r->refused));
        if (a->base) {
                (void)cuda_device_enter(b, d);
                if (r->built)
                        b->cu->cuMemUnmap(a->base, r->built);
                for (unsigned i = 0; i < a->n_pieces; i++) {
                        b->cu->cuMemRelease(a->pieces[i].handle);
                        if (a->pieces[i].fd >= 0)
                                close(a->pieces[i].fd);
                }
                b->cu->cuMemAddressFree(a->base, r->limit);
        }
        host_arena_clear(&a->ranges);
        memset(a, 0, sizeof(*a));
}

void cuda_host_close(cuda_backend *b)
{
        cuda_host *h = &b->host;
        cuda_mem *list;

        if (h->started) {
                pthread_mutex_lock(&h->lock);
                h->stopping = true;
                pthread_cond_signal(&h->cond);
                pthread_mutex_unlock(&h->lock);
                pthread_join(h->thread, NULL);
                h->started = false;
                list = h->to_free;
                h->to_free = NULL;
                host_free_list(b, list);
                pthread_cond_destroy(&h->idle);
                pthread_cond_destroy(&h->cond);
                pthread_mutex_destroy(&h->lock);
        }
        for (unsigned i = 0; i < b->n_devices; i++)
                arena_close(b, &b->devices[i], i);
}

/* ---- the ops --------------------------------------------------------------- */

int cuda_host_create(cuda_backend *b, cuda_device *d, unsigned device,
                     uint64_t size, bool filled, cuda_mem **ret_mem)
{
        int r = cuda_device_enter(b, d);

        if (r < 0)
                return r;
        return cuda_mem_make_as(b, d, device, GMD_TIER_HOST, size, d->stream,
                                !filled, ret_mem);
}

int cuda_ops_mem_create_private(gmd_backend *backend, unsigned device,
                                uint64_t size, gmd_mem **ret_mem)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);
        cuda_mem *m;
        int r;

        if (!d || size == 0)
                return -EINVAL;
        /* No arena (none configured, or no HOST tier on this machine): the
         * caller's fallback says what is possible. */
        if (!b->host.started || !d->arena.base)
                return -ENOSPC;
        if (size % d->host_granularity)
                return -EINVAL;
        m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        pthread_mutex_lock(&b->host.lock);
        r = host_arena_take_mem(&d->arena.ranges, device, size,
                                CUDA_ARENA_MAX_PARTS, &m->span, &m->mem);
        pthread_mutex_unlock(&b->host.lock);
        if (r < 0) {
                free(m);
                return r;
        }
        *ret_mem = &m->mem;
        return 0;
}

void cuda_host_destroy(cuda_backend *b, cuda_mem *m)
{
        cuda_host *h = &b->host;
        cuda_device *d = cuda_device_get(b, m->mem.device);

        if (m->span.parts) {
                if (d) {
                        pthread_mutex_lock(&h->lock);
                        if (host_arena_give(&d->arena.ranges, &m->span) < 0)
                                log_error("cuda: device %u: a host copy went back "
                                          "to the arena twice", m->mem.device);
                        pthread_mutex_unlock(&h->lock);
                }
                free(m->span.parts);   /* NULL once given back */
                free(m);
                return;
        }
        if (!h->started) {
                host_free_list(b, m);
                return;
        }
        pthread_mutex_lock(&h->lock);
        m->next = h->to_free;
        h->to_free = m;
        pthread_cond_signal(&h->cond);
        pthread_mutex_unlock(&h->lock);
}

int64_t cuda_ops_arena_grow(gmd_backend *backend, unsigned device,
                            uint64_t want, uint64_t most)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);
        cuda_arena *a;
        uint64_t bytes, added = 0;
        bool idle;

        if (!d || !b->host.started || !d->arena.base)
                return -ENOSPC;
        a = &d->arena;
        pthread_mutex_lock(&b->host.lock);
        /* Whole pieces, so a range that grows to its end takes no more
         * than the pieces arena_reserve sized it for. */
        idle = arena_next(b) == NULL;
        bytes = host_arena_growth(&a->ranges, want, most, a->piece);
        if (bytes && !a->failed &&
            a->n_pieces + (bytes + a->piece - 1) / a->piece <= CUDA_ARENA_MAX_PIECES)
                added = host_arena_raise(&a->ranges, bytes);
        /* A growth asked while pieces are pinned extends that build: its
         * rate is logged once, from where it started. */
        if (added && idle) {
                b->host.build_start_us = now_us();
                b->host.build_from = arenas_built(b);
        }
        if (added)
                pthread_cond_signal(&b->host.cond);
        pthread_mutex_unlock(&b->host.lock);
        return added ? (int64_t)added : -ENOSPC;
}

CUdeviceptr cuda_mem_at(cuda_backend *b, const cuda_mem *m, uint64_t off,
                        uint64_t *ret_run)
{
        cuda_device *d;
        uint64_t at;

        *ret_run = 0;
        if (off >= m->mem.size)
                return 0;
        if (!m->span.parts) {
                if (!m->va)
                        return 0;
                *ret_run = m->mem.size - off;
                return m->va + off;
        }
        if (host_arena_locate(&m->span, off, &at, ret_run) < 0)
                return 0;
        d = &b->devices[m->mem.device];
        /* A restart's adopted pieces may not have device access yet. */
        if (cuda_arena_reach(b, d, at, *ret_run) < 0) {
                *ret_run = 0;
                return 0;
        }
        return d->arena.base + at;
}

void cuda_ops_arena_info(gmd_backend *backend, unsigned device,
                         gmd_arena_info *ret_info)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);

        memset(ret_info, 0, sizeof(*ret_info));
        if (!d || !b->host.started)
                return;
        pthread_mutex_lock(&b->host.lock);
        host_arena_info(&d->arena.ranges, ret_info);
        pthread_mutex_unlock(&b->host.lock);
}
