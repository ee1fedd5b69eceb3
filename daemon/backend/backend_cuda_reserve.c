/*
 * backend_cuda_reserve — chunks made ahead of demand. Creating and
 * exporting a VMM chunk costs ~10 + 75..590 µs (ARCHITECTURE.md decision 6), so
 * each device keeps a stack of zeroed, exported, one-granule chunks that
 * mem_create pops in well under a microsecond. The daemon's maintain timer
 * tops the stack up off the request path, a few chunks per call so one
 * call stays around a millisecond (daemon/core/server.c calls again after 10 ms
 * while work is left, else after 250 ms).
 *
 * Its size is [pools] cuda_reserve_chunks, read when the backend opens (0
 * turns the reserve off: every request then creates its chunk, which is
 * what the benchmark's "miss" case measures). The reserve yields to
 * everything else on the GPU: it is given back to the driver when an
 * allocation runs out of memory, and topped up only while the driver's free
 * memory stays above [pools] vram_reserve, the room the daemon leaves to
 * other programs. A top-up that fails waits a second before the next try,
 * so a GPU that is full for another reason does not fill the log.
 *
 * The anchor chunk lives here too: one chunk per device, never handed out,
 * made at open even with the reserve off (see cuda_device in
 * backend_cuda.h for why). Both count as "reserved" in device_info, which
 * an automatic pool adds to the driver's free memory.
 */
#include "backend_cuda.h"

#include "log.h"
#include "timeutil.h"

/* Chunks maintain makes per device and call. */
#define CUDA_MAINTAIN_BATCH 4u
/* Pause after a failed top-up. */
#define CUDA_REFILL_BACKOFF_US 1000000u

uint64_t cuda_reserve_bytes(const cuda_device *d)
{
        return (uint64_t)(d->n_reserve + (d->anchor != NULL)) * d->granularity;
}

cuda_mem *cuda_reserve_take(cuda_device *d)
{
        cuda_mem *m = d->reserve;

        if (!m)
                return NULL;
        d->reserve = m->next;
        d->n_reserve--;
        m->next = NULL;
        return m;
}

unsigned cuda_reserve_drain(cuda_backend *b, cuda_device *d)
{
        unsigned n = d->n_reserve;
        cuda_mem *m;

        while ((m = cuda_reserve_take(d)))
                cuda_mem_free(b, m);
        return n;
}

void cuda_reserve_close(cuda_backend *b, cuda_device *d)
{
        cuda_reserve_drain(b, d);
        cuda_mem_free(b, d->anchor);
        d->anchor = NULL;
}

/* How many more chunks fit above the free-memory floor now. */
static unsigned cuda_reserve_room(cuda_backend *b, cuda_device *d)
{
        size_t free_b = 0, total_b = 0;
        uint64_t above;

        if (cuda_check(b, b->cu->cuMemGetInfo(&free_b, &total_b),
                       "cuMemGetInfo") < 0)
                return 0;
        if (free_b <= b->free_floor)
                return 0;
        above = (free_b - b->free_floor) / d->granularity;
        return above > b->reserve_target ? b->reserve_target : (unsigned)above;
}

/* Make up to `max` chunks, within the target and the floor. The device's
 * context must be current. Returns how many more it could make at once:
 * 0 when the reserve is full, blocked by the floor, or backing off. */
static int cuda_reserve_fill(cuda_backend *b, cuda_device *d, unsigned device,
                             unsigned max)
{
        unsigned room, made = 0;
        cuda_mem *m;

        if (d->n_reserve >= b->reserve_target)
                return 0;
        room = cuda_reserve_room(b, d);
        while (d->n_reserve < b->reserve_target && made < max && made < room) {
                if (cuda_mem_new(b, d, device, GMD_TIER_VRAM, d->granularity,
                                 &m) < 0) {
                        /* Logged by cuda_mem_new. */
                        d->refill_after_us = now_us() + CUDA_REFILL_BACKOFF_US;
                        return 0;
                }
                m->next = d->reserve;
                d->reserve = m;
                d->n_reserve++;
                made++;
        }
        if (made >= room)
                return 0;   /* at the floor: wait for memory, slowly */
        return (int)(b->reserve_target - d->n_reserve);
}

int cuda_reserve_open(cuda_backend *b, cuda_device *d, unsigned device)
{
        int r;

        r = cuda_mem_new(b, d, device, GMD_TIER_VRAM, d->granularity,
                         &d->anchor);
        if (r < 0)
                return r;
        cuda_reserve_fill(b, d, device, b->reserve_target);
        if (d->n_reserve < b->reserve_target)
                log_notice("cuda: device %u: reserve holds %u of %u chunks; "
                           "the rest is made once the driver's free memory "
                           "is above [pools] vram_reserve", device,
                           d->n_reserve, b->reserve_target);
        return 0;
}

int cuda_ops_maintain(gmd_backend *backend)
{
        cuda_backend *b = (cuda_backend *)backend;
        uint64_t now = now_us();
        int want = 0;
        unsigned i;

        /* The same timer watches the copy streams, and measures each
         * device's link once its host arena has room. */
        cuda_copy_poll(b);
        cuda_link_maintain(b);

        for (i = 0; i < b->n_devices; i++) {
                cuda_device *d = &b->devices[i];

                if (d->n_reserve >= b->reserve_target ||
                    now < d->refill_after_us ||
                    cuda_device_enter(b, d) < 0)
                        continue;
                want += cuda_reserve_fill(b, d, i, CUDA_MAINTAIN_BATCH);
        }
        return want;
}
