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
 * Adoption comes at start, before any host copy is taken. A daemon that
 * knows it will adopt opens its backend with GMD_BACKEND_ARENA_HELD, and
 * the worker pins nothing until then; otherwise the worker starts pinning
 * at open, and the pieces it pinned meanwhile hold nothing, so they are
 * released, after any piece being pinned is done (the worker leaves an
 * arena marked `adopting` alone: up to ~0.25 s a GiB, plus the release),
 * and the worker then builds on after the adopted ones.
 *
 * The pieces are adopted in parallel (adopt_map_some): importing and
 * mapping a GiB of pinned host memory costs the driver ~15 ms, which for
 * 50 pieces one after another was most of a restart's record adoption
 * (751 of 801 ms, H200). Up to ADOPT_THREADS_MAX threads, the loop
 * thread one of them, each with the device's primary context current,
 * take the next piece from an atomic counter, import its fd and map it at
 * its offset; the first error any of them meets is kept and stops the
 * others taking more. Giving the device access to the pieces is not done
 * here: it cost ~10 ms a GiB on any number of threads (532 ms for 51 GiB,
 * H200), so it follows after the daemon is ready (backend_cuda_reach.c).
 *
 * What the parallelism rests on: the driver API is thread-safe and a
 * context may be current on several threads at once (CUDA 4.0 on; the
 * context is bound per thread with cuCtxSetCurrent, which each thread
 * here does first, cuda_device_enter). The threads share no driver object:
 * each piece has its own fd, so its own imported handle, and its own part
 * of the one VA reservation, which no other thread maps, unmaps or
 * changes while they run (the worker leaves an arena marked `adopting`
 * alone, and the pieces it had built are unmapped before). The daemon
 * already relies on the same: the host worker maps arena pieces and sets
 * their access in this context and reservation while the loop thread
 * maps and unmaps VRAM and host allocations. The driver documents no
 * ordering between such calls beyond that; if it serialises them inside,
 * the parallel half takes as long as the serial one did and the log line
 * shows it.
 *
 * Called on the loop thread; the arena's bookkeeping is taken under
 * cuda_host.lock as everywhere, and the driver is called outside it (the
 * adopting threads take no lock: they write only their own pieces'
 * slots, read by the loop thread after joining them).
 */
#include "backend_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
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

/* Threads adopting one arena's pieces, the loop thread included: where
 * the driver does the pieces side by side, eight make 50 pieces about a
 * tenth of a second, and more would buy little against the rest of a
 * restart. */
#define ADOPT_THREADS_MAX 8u

/* One adoption's shared state: read-only but for the counters, the first
 * error, and each piece's slots, written by the one thread that took it. */
typedef struct adopt_job {
        cuda_backend *b;
        cuda_device *d;
        unsigned device;
        const gmd_arena_piece *pieces;
        unsigned n;
        cuda_arena_piece *made;       /* [n]: the piece as mapped */
        bool *mapped;                 /* [n]: made[k] is mapped */
        unsigned threads;             /* how many run */
        atomic_uint next;             /* the next piece (or run) to take */
        atomic_int error;             /* the first -errno met; 0: none */
} adopt_job;

typedef void (*adopt_fn)(adopt_job *job);

static void adopt_fail(adopt_job *job, int r)
{
        int none = 0;

        (void)atomic_compare_exchange_strong(&job->error, &none, r);
}

/* Import piece `p` and map it at its offset (the device gets access
 * later, backend_cuda_reach.c); 0 or -errno (logged). */
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
        r = cuda_check(b, cu->cuMemMap(d->arena.base + p->offset, p->size, 0,
                                       h, 0),
                       "cuMemMap (host arena)");
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

/* Take pieces until none is left or some thread failed. */
static void adopt_map_some(adopt_job *job)
{
        for (;;) {
                unsigned k;
                int r;

                if (atomic_load(&job->error))
                        return;
                k = atomic_fetch_add(&job->next, 1);
                if (k >= job->n)
                        return;
                r = arena_piece_adopt(job->b, job->d, job->device,
                                      &job->pieces[k], &job->made[k]);
                if (r < 0) {
                        adopt_fail(job, r);
                        return;
                }
                job->mapped[k] = true;
        }
}

typedef struct adopt_thread {
        adopt_job *job;
        adopt_fn fn;
        pthread_t thread;
} adopt_thread;

static void *adopt_thread_main(void *arg)
{
        adopt_thread *t = arg;
        int r;

        prctl(PR_SET_NAME, "gmd-adopt", 0, 0, 0);
        /* A thread of its own has no context: the driver's calls need
         * the device's (the one its arena is reserved in). */
        r = cuda_device_enter(t->job->b, t->job->d);
        if (r == 0)   /* else (logged) the other threads do its share */
                t->fn(t->job);
        (void)t->job->b->cu->cuCtxSetCurrent(NULL);
        return NULL;
}

/* Run `fn` on job->threads threads, this one (its context current) among
 * them, from the counter's start; a thread that does not start leaves its
 * share to the others. Returns how many ran. */
static unsigned adopt_run(adopt_job *job, adopt_fn fn)
{
        adopt_thread threads[ADOPT_THREADS_MAX];
        unsigned started = 0;

        atomic_store(&job->next, 0);
        for (unsigned i = 1; i < job->threads; i++) {
                adopt_thread *t = &threads[started];

                t->job = job;
                t->fn = fn;
                if (pthread_create(&t->thread, NULL, adopt_thread_main, t) == 0)
                        started++;
        }
        fn(job);
        for (unsigned i = 0; i < started; i++)
                pthread_join(threads[i].thread, NULL);
        return started + 1;
}

/* How many threads adopt `n` pieces: one a piece, at most
 * ADOPT_THREADS_MAX, at most one an online CPU. */
static unsigned adopt_threads(unsigned n)
{
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        unsigned t = n < ADOPT_THREADS_MAX ? n : ADOPT_THREADS_MAX;

        if (cpus > 0 && (unsigned long)cpus < t)
                t = (unsigned)cpus;
        return t ? t : 1;
}

int cuda_ops_arena_adopt(gmd_backend *backend, unsigned device,
                         const gmd_arena_piece *pieces, unsigned n)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);
        cuda_arena_piece made[CUDA_ARENA_MAX_PIECES];
        bool mapped[CUDA_ARENA_MAX_PIECES] = { false };
        adopt_job job;
        const char *why = NULL;
        uint64_t end = 0, t0 = 0, t_map = 0;
        unsigned ran = 0;
        cuda_arena *a;
        int r = 0;

        if (!d)
                return -EINVAL;
        a = &d->arena;
        if (n == 0) {
                if (!b->host.started)
                        return 0;
                pthread_mutex_lock(&b->host.lock);
                if (a->held) {
                        a->held = false;
                        b->host.build_start_us = now_us();
                        pthread_cond_signal(&b->host.cond);
                }
                pthread_mutex_unlock(&b->host.lock);
                return 0;
        }
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

        /* The pieces are contiguous from the range's start (checked
         * above), so made[] in index order is too, as pieces[] must be. */
        job.b = b;
        job.d = d;
        job.device = device;
        job.pieces = pieces;
        job.n = n;
        job.made = made;
        job.mapped = mapped;
        job.threads = adopt_threads(n);
        atomic_init(&job.next, 0);
        atomic_init(&job.error, 0);
        t0 = now_us();
        ran = adopt_run(&job, adopt_map_some);
        t_map = now_us();
        r = atomic_load(&job.error);

        pthread_mutex_lock(&b->host.lock);
        for (unsigned i = 0; i < n && r == 0; i++)
                r = host_arena_add(&a->ranges, made[i].offset, made[i].size);
        if (r == 0) {
                memcpy(a->pieces, made, sizeof(*made) * n);
                a->n_pieces = n;
                if (a->ranges.target < end)
                        a->ranges.target = end;
                a->adopted = true;
                a->failed = false;
                /* No copy can have touched them: device access comes in
                 * the background, or from the first copy that needs it. */
                a->n_reach = n;
                for (unsigned i = 0; i < n; i++)
                        atomic_store(&a->reach[i], CUDA_REACH_NONE);
                a->reach_start_us = now_us();
                atomic_store_explicit(&a->unreached, n, memory_order_release);
        } else {
                /* As before adoption: nothing built, the worker starts
                 * again from the range's start. */
                uint64_t target = a->ranges.target, limit = a->ranges.limit;

                host_arena_clear(&a->ranges);
                host_arena_init(&a->ranges, d->host_granularity, target, limit);
        }
        pthread_mutex_unlock(&b->host.lock);
        if (r < 0) {
                /* Every piece mapped, whichever thread mapped it; the fds
                 * stay the caller's. */
                for (unsigned i = 0; i < n; i++) {
                        if (!mapped[i])
                                continue;
                        b->cu->cuMemUnmap(a->base + made[i].offset, made[i].size);
                        b->cu->cuMemRelease(made[i].handle);
                }
        } else {
                log_info("cuda: device %u: adopted %u host arena pieces, %llu "
                         "MiB, on %u threads: imported and mapped in %.1f "
                         "ms, device access to follow", device, n,
                         (unsigned long long)(end >> 20), ran,
                         (double)(t_map - t0) / 1e3);
        }
done:
        pthread_mutex_lock(&b->host.lock);
        a->adopting = false;
        a->held = false;
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
