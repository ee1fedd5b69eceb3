/*
 * backend_cuda_adopt — restart recovery of the host arena: what a dying
 * gpu-memd hands on and what a new one takes back (backend.h, "restart
 * recovery").
 *
 * The arena's pieces are host-located VMM allocations; each keeps its
 * memory while any process holds an fd of it, so the old daemon hands
 * out fds (arena_pieces: dups of the export the worker made when it
 * pinned the piece, backend_cuda_host.c) and says where its host copies
 * lie (mem_span). The new daemon imports those fds and maps each at its
 * old offset in its own arena range (arena_adopt), the way the worker
 * maps a piece it pinned, so the offsets the old run recorded still name
 * the same bytes, and carves each host copy back out of exactly its old
 * parts (mem_adopt_private). An imported allocation cannot be exported
 * again (the driver refuses retain + export of an import:
 * tests/gpu/test_vmm_survives.c), so an adopted piece keeps the fd it came
 * from as its export, and the next restart hands that on.
 *
 * Adoption comes at start, before any host copy is taken, but the worker
 * starts pinning at open: the pieces it pinned meanwhile hold nothing, so
 * they are released, after any piece being pinned is done (the worker
 * leaves an arena marked `adopting` alone), and the worker then builds on
 * after the adopted ones.
 *
 * Loop thread only; the arena's bookkeeping is taken under cuda_host.lock
 * as everywhere, and the driver is called outside it.
 */
#include "backend_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "timeutil.h"

int cuda_ops_arena_pieces(gmd_backend *backend, unsigned device,
                          gmd_arena_piece *ret, unsigned max)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);
        cuda_arena_piece pieces[CUDA_ARENA_MAX_PIECES];
        cuda_arena *a;
        unsigned n;
        int r;

        if (!d)
                return -EINVAL;
        if (!b->host.started || !d->arena.base)
                return 0;
        a = &d->arena;
        pthread_mutex_lock(&b->host.lock);
        n = a->n_pieces;
        memcpy(pieces, a->pieces, sizeof(*pieces) * n);
        pthread_mutex_unlock(&b->host.lock);
        if (n > max)
                return -ENOBUFS;

        for (unsigned i = 0; i < n; i++) {
                int fd;

                /* The worker's export failed: try once more, here. Only
                 * the loop thread changes a built piece's fd. */
                if (pieces[i].fd < 0 && cuda_device_enter(b, d) == 0) {
                        pieces[i].fd = cuda_arena_export(b, pieces[i].handle);
                        pthread_mutex_lock(&b->host.lock);
                        a->pieces[i].fd = pieces[i].fd;
                        pthread_mutex_unlock(&b->host.lock);
                }
                fd = pieces[i].fd < 0 ? -1 : fcntl(pieces[i].fd, F_DUPFD_CLOEXEC, 0);
                if (fd < 0) {
                        r = pieces[i].fd < 0 ? -EIO : -errno;
                        while (i > 0)
                                close(ret[--i].fd);
                        return r;
                }
                ret[i] = (gmd_arena_piece){
                        .offset = pieces[i].offset,
                        .size = pieces[i].size,
                        .fd = fd,
                };
        }
        return (int)n;
}

/* Release the pieces the worker pinned since open (nothing was taken from
 * them) and empty the arena's bookkeeping, keeping its target, limit and
 * counts. The worker leaves the arena alone (adopting). */
static void arena_drop_built(cuda_backend *b, cuda_device *d)
{
        cuda_arena *a = &d->arena;
        cuda_arena_piece pieces[CUDA_ARENA_MAX_PIECES];
        uint64_t built, target, limit, served, refused;
        unsigned n;

        pthread_mutex_lock(&b->host.lock);
        n = a->n_pieces;
        memcpy(pieces, a->pieces, sizeof(*pieces) * n);
        built = a->ranges.built;
        target = a->ranges.target;
        limit = a->ranges.limit;
        served = a->ranges.served;
        refused = a->ranges.refused;
        host_arena_clear(&a->ranges);
        host_arena_init(&a->ranges, d->host_granularity, target, limit);
        a->ranges.served = served;
        a->ranges.refused = refused;
        a->n_pieces = 0;
        pthread_mutex_unlock(&b->host.lock);

        if (built)
                b->cu->cuMemUnmap(a->base, built);
        for (unsigned i = 0; i < n; i++) {
                b->cu->cuMemRelease(pieces[i].handle);
                if (pieces[i].fd >= 0)
                        close(pieces[i].fd);
        }
        if (n)
                log_info("cuda: device %u: %llu MiB of host arena pinned since "
                         "start released, to adopt the previous run's",
                         (unsigned)(d - b->devices),
                         (unsigned long long)(built >> 20));
}

/* Import piece `p` and map it at its offset; 0 or -errno (logged). */
static int arena_piece_adopt(cuda_backend *b, cuda_device *d, unsigned device,
                             const gmd_arena_piece *p, cuda_arena_piece *ret)
{
        const gmd_cuda_driver *cu = b->cu;
        CUmemGenericAllocationHandle h = 0;
        int r;

        r = cuda_check(b, cu->cuMemImportFromShareableHandle(&h,
                                (void *)(uintptr_t)p->fd,
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                       "cuMemImportFromShareableHandle (host arena)");
        if (r < 0)
                return r;
        r = cuda_arena_map(b, d, d->arena.base + p->offset, p->size, h);
        if (r < 0) {
                /* Most likely an allocation smaller than the size said. */
                log_warning("cuda: device %u: cannot map the adopted arena "
                            "piece at %llu MiB, %llu MiB: is its allocation "
                            "smaller?", device,
                            (unsigned long long)(p->offset >> 20),
                            (unsigned long long)(p->size >> 20));
                cu->cuMemRelease(h);
                return -EINVAL;
        }
        *ret = (cuda_arena_piece){
                .handle = h, .offset = p->offset, .size = p->size, .fd = p->fd,
        };
        return 0;
}

int cuda_ops_arena_adopt(gmd_backend *backend, unsigned device,
                         const gmd_arena_piece *pieces, unsigned n)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);
        cuda_arena_piece made[CUDA_ARENA_MAX_PIECES];
        const char *why = NULL;
        uint64_t end = 0;
        cuda_arena *a;
        unsigned k = 0;
        int r = 0;

        if (!d)
                return -EINVAL;
        if (n == 0)
                return 0;
        a = &d->arena;
        if (!b->host.started || !a->base)
                why = "the device has no host arena ([pools] host_stock, or "
                      "no HOST tier)";
        else if (n > CUDA_ARENA_MAX_PIECES)
                why = "too many pieces";
        else
                (void)host_arena_check_pieces(pieces, n, d->host_granularity,
                                              a->ranges.limit, &end, &why);
        if (why) {
                log_warning("cuda: device %u: cannot adopt the arena's %u "
                            "pieces: %s", device, n, why);
                return -EINVAL;
        }

        pthread_mutex_lock(&b->host.lock);
        if (a->adopted || a->ranges.free.n_out > 0) {
                pthread_mutex_unlock(&b->host.lock);
                return -EBUSY;
        }
        a->adopting = true;
        while (a->building)
                pthread_cond_wait(&b->host.idle, &b->host.lock);
        pthread_mutex_unlock(&b->host.lock);

        r = cuda_device_enter(b, d);
        if (r < 0)
                goto done;
        arena_drop_built(b, d);
        for (k = 0; k < n; k++) {
                r = arena_piece_adopt(b, d, device, &pieces[k], &made[k]);
                if (r < 0)
                        break;
        }

        pthread_mutex_lock(&b->host.lock);
        for (unsigned i = 0; i < k && r == 0; i++)
                r = host_arena_add(&a->ranges, made[i].offset, made[i].size);
        if (r == 0) {
                memcpy(a->pieces, made, sizeof(*made) * n);
                a->n_pieces = n;
                if (a->ranges.target < end)
                        a->ranges.target = end;
                a->adopted = true;
                a->failed = false;
        } else {
                /* As before adoption: nothing built, the worker starts
                 * again from the range's start. */
                uint64_t target = a->ranges.target, limit = a->ranges.limit;

                host_arena_clear(&a->ranges);
                host_arena_init(&a->ranges, d->host_granularity, target, limit);
        }
        pthread_mutex_unlock(&b->host.lock);
        if (r < 0) {
                for (unsigned i = 0; i < k; i++) {
                        b->cu->cuMemUnmap(a->base + made[i].offset, made[i].size);
                        b->cu->cuMemRelease(made[i].handle);
                }
        } else {
                log_info("cuda: device %u: adopted %u host arena pieces, %llu "
                         "MiB", device, n, (unsigned long long)(end >> 20));
        }
done:
        pthread_mutex_lock(&b->host.lock);
        a->adopting = false;
        if (a->ranges.built < a->ranges.target) {
                b->host.build_start_us = now_us();
                b->host.build_from = 0;
                for (unsigned i = 0; i < b->n_devices; i++)
                        b->host.build_from += b->devices[i].arena.ranges.built;
        }
        pthread_cond_signal(&b->host.cond);
        pthread_mutex_unlock(&b->host.lock);
        return r;
}

int cuda_ops_mem_span(gmd_backend *backend, const gmd_mem *mem,
                      gmd_extent *ret, unsigned max)
{
        const cuda_mem *m = (const cuda_mem *)((const char *)mem -
                                               offsetof(cuda_mem, mem));

        (void)backend;
        return host_arena_span_parts(&m->span, ret, max);
}

int cuda_ops_mem_adopt_private(gmd_backend *backend, unsigned device,
                               uint64_t size, const gmd_extent *parts,
                               unsigned n, gmd_mem **ret_mem)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);
        cuda_mem *m;
        int r;

        if (!d || size == 0 || n > CUDA_ARENA_MAX_PARTS)
                return -EINVAL;
        if (!b->host.started || !d->arena.base)
                return -ENOSPC;
        if (size % d->host_granularity)
                return -EINVAL;
        m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        pthread_mutex_lock(&b->host.lock);
        r = host_arena_adopt_mem(&d->arena.ranges, device, size, parts, n,
                                 &m->span, &m->mem);
        pthread_mutex_unlock(&b->host.lock);
        if (r < 0) {
                if (r == -EINVAL)
                        log_warning("cuda: device %u: cannot adopt a host copy "
                                    "of %llu KiB in %u parts: they do not add "
                                    "up, or one is not free in the arena "
                                    "(unbuilt, overlapping, taken)", device,
                                    (unsigned long long)(size >> 10), n);
                free(m);
                return r;
        }
        *ret_mem = &m->mem;
        return 0;
}
