/*
 * backend_cuda_host — the HOST tier's allocations, made and released off
 * the loop thread.
 *
 * A host-located VMM allocation pins its pages when created: 235 ms for
 * 1 GiB on the GPU machine (DESIGN.md), ten times the 20 ms its copy
 * takes, and releasing it unpins them again. A swap-out creates its
 * destination on the request path (move_out_start), and the daemon runs
 * one loop thread, so both costs would stall every client. Hence a worker
 * thread and a stock:
 *
 *   - mem_create(HOST) takes a ready allocation of exactly that size from
 *     the device's stock when there is one (made, exported, mapped for the
 *     device and zeroed already); otherwise it makes one on the spot and
 *     raises that size's target, so the worker keeps more of it ready.
 *     Buffers of a workload come in few sizes that repeat (the tensors of
 *     one model), so the stock learns them after the first page-out.
 *   - The worker tops every size up to its target while the stock holds
 *     fewer than `budget` bytes (ready plus being made), zeroing on a
 *     stream of its own, and releases allocations mem_destroy hands it.
 *   - A size not asked for in CUDA_HOST_IDLE_US goes back (maintain).
 *
 * The budget comes from [pools] host_limit (backend_cuda.c); stock is
 * pinned memory the daemon holds besides what the host pool counts, which
 * is why it is a bounded fraction ([pools] host_stock).
 *
 * Recycling: an allocation whose fd no client ever received (the host copy
 * of a SWAPPABLE buffer, which its owner does not map) goes back to the
 * stock when freed, still pinned — in steady state swap-outs then pin
 * nothing, and pinning is what held them to ~4.5 GB/s (it stalls the
 * driver for every process). It comes back marked dirty: handed out for a
 * copy's destination as it is, zeroed first otherwise. An allocation a
 * client received may still be mapped there, so it is released.
 *
 * Locking: cuda_host.lock guards the stock classes of every device and the
 * worker's lists; CUDA calls are made outside it.
 */
#include "backend_cuda.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "timeutil.h"

/* Ready allocations kept per size at most; the stock's byte budget is the
 * bound that matters (a working set of 32 x 64 MiB must fit whole, or every
 * round pins again). */
#define CUDA_HOST_MAX_TARGET 1024u
/* A size unused this long leaves the stock. */
#define CUDA_HOST_IDLE_US (60ull * 1000000)
/* After a failed make, the worker waits this long. */
#define CUDA_HOST_BACKOFF_US 1000000u

static cuda_host_class *host_class_find(cuda_device *d, uint64_t size)
{
        for (unsigned i = 0; i < CUDA_HOST_CLASSES; i++)
                if (d->host_classes[i].size == size)
                        return &d->host_classes[i];
        return NULL;
}

/* Empty a class's ready list into the free list (lock held). */
static void host_class_drop(cuda_host *h, cuda_host_class *c)
{
        while (c->ready) {
                cuda_mem *m = c->ready;

                c->ready = m->next;
                m->next = h->to_free;
                h->to_free = m;
                h->stock_bytes -= c->size;
        }
        c->n_ready = 0;
        c->target = 0;
}

/* A class for `size`, taking a free slot or the least recently used one
 * that the worker is not filling (lock held). NULL when every slot is
 * busy. */
static cuda_host_class *host_class_get(cuda_host *h, cuda_device *d,
                                       uint64_t size)
{
        cuda_host_class *c = host_class_find(d, size), *lru = NULL;

        if (c)
                return c;
        for (unsigned i = 0; i < CUDA_HOST_CLASSES; i++) {
                c = &d->host_classes[i];
                if (c->size == 0)
                        break;
                if (c->n_making == 0 && (!lru || c->last_use_us < lru->last_use_us))
                        lru = c;
                c = NULL;
        }
        if (!c)
                c = lru;
        if (!c)
                return NULL;
        host_class_drop(h, c);
        memset(c, 0, sizeof(*c));
        c->size = size;
        return c;
}

/* Make room in the stock's budget for `size` more bytes of class `keep`
 * (lock held): the least recently used other sizes give ready allocations
 * back — the worker releases them — and stop being refilled. A workload's
 * sizes change (a new model, a new phase); the stock follows instead of
 * holding pinned memory for sizes nobody asks for while the ones in use
 * are pinned on the request path. */
static void host_make_room(cuda_backend *b, cuda_host_class *keep, uint64_t size)
{
        cuda_host *h = &b->host;

        while (h->stock_bytes + size > h->budget) {
                cuda_host_class *lru = NULL;
                cuda_mem *m;

                for (unsigned i = 0; i < b->n_devices; i++) {
                        for (unsigned k = 0; k < CUDA_HOST_CLASSES; k++) {
                                cuda_host_class *c = &b->devices[i].host_classes[k];

                                if (c != keep && c->n_ready > 0 &&
                                    c->last_use_us < keep->last_use_us &&
                                    (!lru || c->last_use_us < lru->last_use_us))
                                        lru = c;
                        }
                }
                if (!lru)
                        return;
                m = lru->ready;
                lru->ready = m->next;
                lru->n_ready--;
                lru->target = lru->n_ready;
                h->stock_bytes -= lru->size;
                m->next = h->to_free;
                h->to_free = m;
                pthread_cond_signal(&h->cond);
        }
}

/* What the worker should make next (lock held): a class below its target
 * whose next allocation fits the budget. */
static cuda_host_class *host_next_job(cuda_backend *b, unsigned *ret_device)
{
        cuda_host *h = &b->host;

        for (unsigned i = 0; i < b->n_devices; i++) {
                cuda_device *d = &b->devices[i];

                if (now_us() < d->host_refill_after_us)
                        continue;
                for (unsigned k = 0; k < CUDA_HOST_CLASSES; k++) {
                        cuda_host_class *c = &d->host_classes[k];

                        if (c->size && c->n_ready + c->n_making < c->target &&
                            h->stock_bytes + c->size <= h->budget) {
                                *ret_device = i;
                                return c;
                        }
                }
        }
        return NULL;
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
        CUstream streams[16] = { 0 };

        pthread_mutex_lock(&h->lock);
        for (;;) {
                cuda_host_class *c;
                cuda_device *d;
                cuda_mem *m = NULL;
                unsigned device = 0;
                uint64_t size, t0;
                int r;

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
                c = host_next_job(b, &device);
                if (!c) {
                        pthread_cond_wait(&h->cond, &h->lock);
                        continue;
                }
                size = c->size;
                c->n_making++;
                h->stock_bytes += size;
                d = &b->devices[device];
                pthread_mutex_unlock(&h->lock);

                t0 = now_us();
                r = cuda_device_enter(b, d);
                if (r == 0 && device < 16 && !streams[device])
                        r = cuda_check(b, b->cu->cuStreamCreate(&streams[device],
                                                CU_STREAM_NON_BLOCKING),
                                       "cuStreamCreate (host worker)");
                if (r == 0)
                        r = device < 16 ? cuda_mem_make(b, d, device, GMD_TIER_HOST,
                                                        size, streams[device], &m) :
                                          -EINVAL;

                pthread_mutex_lock(&h->lock);
                c->n_making--;
                if (r < 0) {
                        h->stock_bytes -= size;
                        d->host_refill_after_us = now_us() + CUDA_HOST_BACKOFF_US;
                        continue;
                }
                log_debug("cuda: host stock: %llu MiB made in %llu us",
                          (unsigned long long)(size >> 20),
                          (unsigned long long)(now_us() - t0));
                if (c->size != size) {
                        /* Cannot happen (a class being filled is never
                         * reassigned), but never mix sizes up. */
                        m->next = h->to_free;
                        h->to_free = m;
                        h->stock_bytes -= size;
                        continue;
                }
                m->next = c->ready;
                c->ready = m;
                c->n_ready++;
        }
        pthread_mutex_unlock(&h->lock);
        for (unsigned i = 0; i < b->n_devices && i < 16; i++) {
                if (!streams[i])
                        continue;
                (void)cuda_device_enter(b, &b->devices[i]);
                b->cu->cuStreamDestroy(streams[i]);
        }
        return NULL;
}

int cuda_host_open(cuda_backend *b, uint64_t budget)
{
        cuda_host *h = &b->host;
        int r;

        h->budget = budget;
        pthread_mutex_init(&h->lock, NULL);
        pthread_cond_init(&h->cond, NULL);
        r = -pthread_create(&h->thread, NULL, host_worker, b);
        if (r < 0) {
                log_error("cuda: cannot start the host worker: %s", strerror(-r));
                return r;
        }
        h->started = true;
        return 0;
}

void cuda_host_close(cuda_backend *b)
{
        cuda_host *h = &b->host;
        cuda_mem *list;

        if (!h->started)
                return;
        pthread_mutex_lock(&h->lock);
        h->stopping = true;
        pthread_cond_signal(&h->cond);
        pthread_mutex_unlock(&h->lock);
        pthread_join(h->thread, NULL);
        h->started = false;
        for (unsigned i = 0; i < b->n_devices; i++)
                for (unsigned k = 0; k < CUDA_HOST_CLASSES; k++)
                        host_class_drop(h, &b->devices[i].host_classes[k]);
        list = h->to_free;
        h->to_free = NULL;
        host_free_list(b, list);
        if (h->hits + h->misses)
                log_info("cuda: host stock served %u of %u host allocations "
                         "(%u recycled)", h->hits, h->hits + h->misses,
                         h->recycled);
        pthread_cond_destroy(&h->cond);
        pthread_mutex_destroy(&h->lock);
}

int cuda_host_create(cuda_backend *b, cuda_device *d, unsigned device,
                     uint64_t size, bool filled, cuda_mem **ret_mem)
{
        cuda_host *h = &b->host;
        cuda_host_class *c;
        cuda_mem *m = NULL;
        int r;

        if (h->started) {
                pthread_mutex_lock(&h->lock);
                c = h->budget >= size ? host_class_get(h, d, size) : NULL;
                if (c) {
                        c->last_use_us = now_us();
                        if (c->ready) {
                                m = c->ready;
                                c->ready = m->next;
                                m->next = NULL;
                                c->n_ready--;
                                h->stock_bytes -= size;
                                h->hits++;
                        } else {
                                uint64_t most = h->budget / size;

                                if (most > CUDA_HOST_MAX_TARGET)
                                        most = CUDA_HOST_MAX_TARGET;
                                if (c->target < most)
                                        c->target++;
                                h->misses++;
                                host_make_room(b, c, size);
                        }
                        pthread_cond_signal(&h->cond);   /* refill */
                } else {
                        h->misses++;
                }
                pthread_mutex_unlock(&h->lock);
        }
        if (m && m->dirty && !filled) {
                /* Recycled, and this one will not be overwritten whole:
                 * old bytes must not show. */
                r = cuda_device_enter(b, d);
                if (r == 0)
                        r = cuda_fill_zero(b, d->stream, m->va, size);
                if (r < 0) {
                        cuda_host_destroy(b, m);
                        return r;
                }
        }
        if (m) {
                m->dirty = false;
                *ret_mem = m;
                return 0;
        }
        r = cuda_device_enter(b, d);
        if (r < 0)
                return r;
        return cuda_mem_make(b, d, device, GMD_TIER_HOST, size, d->stream,
                             ret_mem);
}

void cuda_host_destroy(cuda_backend *b, cuda_mem *m)
{
        cuda_host *h = &b->host;
        cuda_device *d = cuda_device_get(b, m->mem.device);
        cuda_host_class *c;

        if (!h->started) {
                host_free_list(b, m);
                return;
        }
        pthread_mutex_lock(&h->lock);
        /* Memory no client ever received (a SWAPPABLE buffer's host copy,
         * which stays in the daemon) goes back to the stock as it is:
         * pinning and unpinning it again would cost ten times its copy.
         * Memory a client received may still be mapped there, so it is
         * released. */
        c = d && !m->mem.shared ? host_class_find(d, m->mem.size) : NULL;
        if (c && c->n_ready < CUDA_HOST_MAX_TARGET)
                host_make_room(b, c, m->mem.size);
        if (c && c->n_ready < CUDA_HOST_MAX_TARGET &&
            h->stock_bytes + m->mem.size <= h->budget) {
                m->dirty = true;
                m->next = c->ready;
                c->ready = m;
                c->n_ready++;
                h->stock_bytes += m->mem.size;
                h->recycled++;
        } else {
                m->next = h->to_free;
                h->to_free = m;
                pthread_cond_signal(&h->cond);
        }
        pthread_mutex_unlock(&h->lock);
}

void cuda_host_maintain(cuda_backend *b)
{
        cuda_host *h = &b->host;
        uint64_t now = now_us();
        bool signal = false;

        if (!h->started)
                return;
        pthread_mutex_lock(&h->lock);
        for (unsigned i = 0; i < b->n_devices; i++) {
                for (unsigned k = 0; k < CUDA_HOST_CLASSES; k++) {
                        cuda_host_class *c = &b->devices[i].host_classes[k];

                        if (c->size && c->n_making == 0 &&
                            now - c->last_use_us > CUDA_HOST_IDLE_US) {
                                host_class_drop(h, c);
                                c->size = 0;
                                signal = true;
                        }
                }
        }
        if (signal || h->to_free)
                pthread_cond_signal(&h->cond);
        pthread_mutex_unlock(&h->lock);
}

void cuda_host_stock(cuda_backend *b, unsigned device, uint64_t *ret_bytes,
                     unsigned *ret_hits, unsigned *ret_misses)
{
        cuda_host *h = &b->host;
        uint64_t bytes = 0;

        if (h->started)
                pthread_mutex_lock(&h->lock);
        if (device < b->n_devices)
                for (unsigned k = 0; k < CUDA_HOST_CLASSES; k++) {
                        cuda_host_class *c = &b->devices[device].host_classes[k];

                        bytes += (uint64_t)c->n_ready * c->size;
                }
        *ret_hits = h->hits;
        *ret_misses = h->misses;
        if (h->started)
                pthread_mutex_unlock(&h->lock);
        *ret_bytes = bytes;
}
