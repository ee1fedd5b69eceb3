/*
 * backend_cuda_reach — device access to a restart's adopted arena pieces,
 * after the daemon is ready instead of before.
 *
 * A new gpu-memd adopts the previous run's arena pieces (backend_cuda_
 * adopt.c): importing and mapping them is quick (3 ms for 51 GiB on an
 * H200), but giving the GPU access to that much host memory is not: the
 * cuMemSetAccess calls over it took 532 ms, ~10 ms a GiB, and eight
 * threads did not shorten them. Until the device has access, no copy may
 * touch a piece, and a restored client's first request needs none of
 * them unless it asks for a paged-out buffer. So adoption maps the
 * pieces, marks them CUDA_REACH_NONE and returns; the host worker gives
 * access one piece at a time in the background (cuda_arena_reach_next,
 * before it pins anything new), and a copy that needs a piece first
 * (cuda_mem_at) gives it there and then (cuda_arena_reach).
 *
 * Each piece's state is an atomic: NONE (or FAILED) -> SETTING by the one
 * thread that wins the exchange, SETTING -> DONE once the driver returned,
 * or FAILED: the worker leaves a FAILED piece alone, a copy that needs it
 * tries again. A thread that finds
 * SETTING waits for it: at most one piece's call, ~10 ms a GiB. Once
 * every adopted piece is DONE (`unreached` 0), cuda_arena_reach is one
 * atomic load.
 */
#include "backend_cuda.h"

#include <errno.h>
#include <unistd.h>

#include "log.h"
#include "timeutil.h"

/* How long a thread that found a piece being given access sleeps between
 * looks. */
#define REACH_WAIT_US 50

/* Give `d` access to adopted piece `k`, or wait for the thread giving it;
 * 0 or -errno (logged). */
static int reach_piece(cuda_backend *b, cuda_device *d, unsigned k)
{
        cuda_arena *a = &d->arena;
        const cuda_arena_piece *p = &a->pieces[k];
        CUmemAccessDesc access = { 0 };
        unsigned char state;
        int r;

        for (;;) {
                state = atomic_load(&a->reach[k]);
                if (state == CUDA_REACH_DONE)
                        return 0;
                if (state == CUDA_REACH_SETTING)
                        usleep(REACH_WAIT_US);
                else if (atomic_compare_exchange_strong(&a->reach[k], &state,
                                                        CUDA_REACH_SETTING))
                        break;
        }
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = d->dev;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        /* In `d`'s context, the caller's own current again after: a copy
         * may be queued on another device's stream. */
        r = cuda_check(b, b->cu->cuCtxPushCurrent(d->ctx), "cuCtxPushCurrent");
        if (r == 0) {
                CUcontext was;

                r = cuda_check(b, b->cu->cuMemSetAccess(a->base + p->offset,
                                                        p->size, &access, 1),
                               "cuMemSetAccess (adopted host arena)");
                (void)b->cu->cuCtxPopCurrent(&was);
        }
        if (r < 0) {
                atomic_store(&a->reach[k], CUDA_REACH_FAILED);
                return r;
        }
        atomic_store(&a->reach[k], CUDA_REACH_DONE);
        if (atomic_fetch_sub(&a->unreached, 1) == 1)
                log_info("cuda: device %u: access to the %u adopted host "
                         "arena pieces set in %.1f ms after adoption",
                         (unsigned)(d - b->devices), a->n_reach,
                         (double)(now_us() - a->reach_start_us) / 1e3);
        return 0;
}

int cuda_arena_reach(cuda_backend *b, cuda_device *d, uint64_t at,
                     uint64_t len)
{
        cuda_arena *a = &d->arena;

        if (atomic_load_explicit(&a->unreached, memory_order_acquire) == 0)
                return 0;
        for (unsigned k = 0; k < a->n_reach; k++) {
                const cuda_arena_piece *p = &a->pieces[k];
                int r;

                if (p->offset + p->size <= at || p->offset >= at + len)
                        continue;
                r = reach_piece(b, d, k);
                if (r < 0)
                        return r;
        }
        return 0;
}

bool cuda_arena_unreached(const cuda_backend *b)
{
        for (unsigned i = 0; i < b->n_devices; i++)
                if (atomic_load_explicit(&b->devices[i].arena.unreached,
                                         memory_order_acquire))
                        return true;
        return false;
}

bool cuda_arena_reach_next(cuda_backend *b)
{
        for (unsigned i = 0; i < b->n_devices; i++) {
                cuda_device *d = &b->devices[i];
                cuda_arena *a = &d->arena;

                if (!atomic_load_explicit(&a->unreached, memory_order_acquire))
                        continue;
                for (unsigned k = 0; k < a->n_reach; k++) {
                        if (atomic_load(&a->reach[k]) != CUDA_REACH_NONE)
                                continue;
                        /* A failure is left FAILED, for the copy that
                         * needs the piece to try again and report. */
                        if (reach_piece(b, d, k) < 0)
                                log_warning("cuda: device %u: the adopted "
                                            "host arena piece at %llu MiB "
                                            "is left without access for "
                                            "now", i, (unsigned long long)
                                            (a->pieces[k].offset >> 20));
                        return true;
                }
        }
        return false;
}
