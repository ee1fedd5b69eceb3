/*
 * vram — see vram.h. Reading the driver costs a few µs (cuMemGetInfo), so
 * it is done at every VRAM allocation rather than trusted from a cache:
 * memory held outside gpu-memd comes and goes without telling anyone.
 */
#include "vram.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "log.h"
#include "outside.h"
#include "pool.h"
#include "server.h"
#include "size.h"
#include "timeutil.h"

/* A warning when the unaccounted bytes grew by this much since the last
 * one: a GiB, or a sixteenth of a smaller device's memory. */
#define VRAM_WARN_STEP (1ull << 30)

uint64_t vram_unaccounted(uint64_t total, uint64_t free, uint64_t own)
{
        uint64_t used = total > free ? total - free : 0;

        return used > own ? used - own : 0;
}

uint64_t vram_room(const gmd_vram_view *view, bool offer,
                   uint64_t granularity)
{
        uint64_t room;

        if (!view->known)
                return UINT64_MAX;
        room = view->free + view->spare;
        if (offer)
                room = room > view->slack ? room - view->slack : 0;
        if (granularity)
                room -= room % granularity;
        return room;
}

bool vram_fits(const gmd_vram_view *view, uint64_t size)
{
        return vram_room(view, false, 0) >= size;
}

int vram_refresh(gmd_server *server, unsigned device)
{
        gmd_device_info info;
        gmd_vram_view *v;
        int r;

        if (device >= server->devices.n)
                return -EINVAL;
        r = server->backend->ops->device_info(server->backend, device, &info);
        if (r < 0)
                return r;
        v = &server->devices.vram[device];
        v->known = true;
        v->total = info.total;
        v->free = info.free;
        v->own = info.own;
        v->spare = info.reserved;
        v->slack = info.slack;
        v->unaccounted = vram_unaccounted(info.total, info.free, info.own);
        v->read_us = now_us();
        return 0;
}

static int process_cmp(const void *a, const void *b)
{
        const gmd_gpu_process *x = a, *y = b;

        return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : 0;
}

void vram_refresh_processes(gmd_server *server, unsigned device)
{
        const gmd_backend_ops *ops = server->backend->ops;
        gmd_gpu_process all[4 * VRAM_MAX_PROCESSES];
        gmd_vram_view *v;
        unsigned n = 0;
        int got;

        if (device >= server->devices.n)
                return;
        v = &server->devices.vram[device];
        got = ops->device_processes ?
              ops->device_processes(server->backend, device, all,
                                    sizeof(all) / sizeof(all[0])) : -ENOSYS;
        if (got < 0) {
                v->processes_known = false;
                v->n_processes = 0;
                outside_refresh(server, device, NULL, 0);
                return;
        }
        for (int i = 0; i < got; i++)
                if (all[i].pid != (uint32_t)getpid())  /* counted as own */
                        all[n++] = all[i];
        /* Every process, not only those shown: each client's is charged. */
        outside_refresh(server, device, all, n);
        qsort(all, n, sizeof(all[0]), process_cmp);
        if (n > VRAM_MAX_PROCESSES)
                n = VRAM_MAX_PROCESSES;
        memcpy(v->processes, all, n * sizeof(all[0]));
        v->n_processes = n;
        v->processes_known = true;
}

void vram_refresh_all(gmd_server *server)
{
        for (unsigned d = 0; d < server->devices.n; d++) {
                gmd_vram_view *v = &server->devices.vram[d];
                char out[32], freeb[32];

                uint64_t step;

                if (vram_refresh(server, d) < 0)
                        continue;
                vram_refresh_processes(server, d);
                step = v->total / 16 < VRAM_WARN_STEP ? v->total / 16 :
                                                        VRAM_WARN_STEP;
                if (step == 0 || v->unaccounted < v->warned + step) {
                        /* Shrunk: warn again when it grows back. */
                        if (v->unaccounted + step <= v->warned)
                                v->warned = v->unaccounted;
                        continue;
                }
                char top[64] = "", topb[32];

                v->warned = v->unaccounted;
                if (v->n_processes)
                        snprintf(top, sizeof(top), "; the largest other "
                                 "process, pid %u, holds %s",
                                 v->processes[0].pid,
                                 size_format(v->processes[0].bytes, topb,
                                             sizeof(topb)));
                log_warning("device %u: %s of VRAM is held outside gpu-memd "
                            "(%s free on the GPU): other processes, or freed "
                            "buffers whose fds a client keeps%s; see "
                            "gpu-memctl status", d,
                            size_format(v->unaccounted, out, sizeof(out)),
                            size_format(v->free, freeb, sizeof(freeb)), top);
        }
}

static void vram_sentence(gmd_server *server, unsigned device, uint64_t size,
                          gmd_result *ret)
{
        const gmd_vram_view *v = &server->devices.vram[device];
        const gmd_pool *pool = &server->devices.pools[device];
        char asked[32], pfree[32], gfree[32], out[32], name[32];

        result_error(ret, GMD_ERR_NO_MEMORY,
                     "%s: the pool has %s free but the GPU has only %s free, "
                     "not enough for %s: %s is held outside gpu-memd (freed "
                     "buffers whose fds a client keeps, or processes not "
                     "using gpu-memd; see gpu-memctl status)",
                     pool_describe(pool, name, sizeof(name)),
                     size_format(pool_free(pool), pfree, sizeof(pfree)),
                     size_format(v->free + v->spare, gfree, sizeof(gfree)),
                     size_format(size, asked, sizeof(asked)),
                     size_format(v->unaccounted, out, sizeof(out)));
}

int vram_check(gmd_server *server, unsigned device, uint64_t size,
               gmd_result *ret)
{
        if (vram_refresh(server, device) < 0)
                return 0;
        if (vram_fits(&server->devices.vram[device], size))
                return 0;
        /* Buffers just freed whose fds no process was found holding yet:
         * their witnesses hold the memory, which their closing frees at
         * once (keptfd.h). */
        if (keptfd_give_back(server, device) && vram_refresh(server, device) == 0 &&
            vram_fits(&server->devices.vram[device], size))
                return 0;
        vram_sentence(server, device, size, ret);
        server->stats.vram_refused++;
        log_info("device %u: refused %llu bytes the pool has room for: %s",
                 device, (unsigned long long)size, ret->text);
        return -ENOMEM;
}

void vram_explain(gmd_server *server, unsigned device, uint64_t size,
                  gmd_result *ret)
{
        (void)vram_refresh(server, device);
        vram_sentence(server, device, size, ret);
        server->stats.vram_refused++;
}
