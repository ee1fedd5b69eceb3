/*
 * test_cuda_backend — the cuda backend and the cuda mapper across processes,
 * without the daemon: this process plays the daemon (backend_cuda), two
 * worker processes play clients (mapper_cuda + kernels) and receive the
 * exported fds over a socketpair, as gpu-memd's clients do.
 *
 * Checks: data written through one process's mapping is read by another;
 * several segments map into one range with one access call; unmap and map
 * again at the same address; mem_zero; reserve hits and refill, the
 * reserve off and held back by the free-memory floor; HOST-tier chunks
 * used by kernels; legacy IPC buffers; IPC events and their cache;
 * the driver's free memory moves with allocations; a too-large request
 * fails; restart recovery: arena pieces, a host copy and a VRAM buffer
 * handed on and adopted by a fresh backend. Prints timings of the steps (not assertions) for BENCHMARKS.md.
 * Exits 77 with one "SKIP:" line when there is no usable GPU.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_cuda.h"
#include "config.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"
#include "log.h"
#include "mapper.h"

enum { OP_MAP = 1, OP_FILL, OP_CHECK, OP_UNMAP, OP_FREE, OP_IPC_OPEN,
       OP_IPC_CLOSE, OP_EVENT_OPEN, OP_EVENT_CREATE, OP_QUIT };

#define SLOTS 8

typedef struct cmd {
        int op, slot, nseg;
        unsigned device;
        uint64_t size, offset, bytes, first;
        uint32_t seed;
        uint64_t seg_offset[4], seg_size[4];
        uint8_t handle[64];
} cmd;

typedef struct reply {
        int r;
        long long value;
        double us;
        uint8_t handle[64];
} reply;


/* ---- worker ------------------------------------------------------------- */

static int worker(int sock)
{
        struct { void *addr; uint64_t size; } slots[SLOTS] = { 0 };
        gmd_mapper *mapper;
        void *event = NULL;
        int fds[GPU_PROC_MAX_FDS];
        cmd c;

        /* No UUIDs: the daemon's device N is this process's ordinal N, as
         * it is here (the backend and the worker see the same GPUs). */
        static const gmd__device_id unnamed[8];

        if (gmd__mapper_cuda_new(unnamed, 8, &mapper) < 0)
                return 2;
        while (gpu_proc_recv(sock, &c, sizeof(c), fds) == 0) {
                reply rep = { 0 };
                void **addr = &slots[c.slot].addr;
                double t0 = gpu_now_us();

                switch (c.op) {
                case OP_MAP: {
                        gmd_map_segment seg[4];

                        for (int i = 0; i < c.nseg; i++) {
                                seg[i].fd = fds[i];
                                seg[i].offset = c.seg_offset[i];
                                seg[i].size = c.seg_size[i];
                        }
                        if (!*addr) {
                                rep.r = mapper->ops->reserve(mapper, c.size,
                                                             addr);
                                slots[c.slot].size = c.size;
                        }
                        if (rep.r == 0)
                                rep.r = mapper->ops->map(mapper, *addr,
                                                         c.device, seg,
                                                         (unsigned)c.nseg);
                        /* The mapper borrows the fds (mapper.h). */
                        for (int i = 0; i < c.nseg; i++)
                                close(seg[i].fd);
                        rep.value = (long long)(uintptr_t)*addr;
                        break;
                }
                case OP_FILL:
                        rep.r = gpu_fill((char *)*addr + c.offset, c.bytes,
                                         c.first, c.seed);
                        break;
                case OP_CHECK:
                        rep.value = gpu_check((char *)*addr + c.offset,
                                              c.bytes, c.first, c.seed);
                        rep.r = rep.value < 0 ? -EIO : 0;
                        break;
                case OP_UNMAP:
                        rep.r = mapper->ops->unmap(mapper, *addr,
                                                   slots[c.slot].size);
                        break;
                case OP_FREE:
                        mapper->ops->unreserve(mapper, *addr,
                                               slots[c.slot].size);
                        *addr = NULL;
                        break;
                case OP_IPC_OPEN:
                        rep.r = mapper->ops->ipc_open(mapper, c.device,
                                                      c.handle, addr);
                        break;
                case OP_IPC_CLOSE:
                        rep.r = mapper->ops->ipc_close(mapper, c.device,
                                                       *addr);
                        *addr = NULL;
                        break;
                case OP_EVENT_OPEN: {
                        void *e1 = NULL, *e2 = NULL;

                        rep.r = mapper->ops->event_open(mapper, c.device,
                                                        c.handle, &e1);
                        rep.us = gpu_now_us() - t0;
                        if (rep.r == 0)
                                rep.r = mapper->ops->event_open(mapper,
                                                c.device, c.handle, &e2);
                        if (rep.r == 0 && e1 != e2)
                                rep.r = -EINVAL;   /* cache missed */
                        if (rep.r == 0)
                                rep.r = gpu_wait_event(e1);
                        break;
                }
                case OP_EVENT_CREATE:
                        rep.r = mapper->ops->event_create(mapper, c.device,
                                                          &event, rep.handle);
                        break;
                case OP_QUIT:
                        mapper->ops->destroy(mapper);
                        return 0;
                }
                if (c.op != OP_EVENT_OPEN)
                        rep.us = gpu_now_us() - t0;
                if (rep.r < 0 && c.op != OP_MAP)
                        fprintf(stderr, "worker op %d: %d %s\n", c.op, rep.r,
                                gpu_last_error());
                gpu_proc_send(sock, &rep, sizeof(rep), NULL, 0);
        }
        return 1;
}

/* ---- the "daemon" side --------------------------------------------------- */

static reply ask(gpu_proc *w, cmd *c, gmd_mem **mems, int n_mems)
{
        int fds[GPU_PROC_MAX_FDS] = { 0 };
        reply rep = { .r = -EIO };

        for (int i = 0; i < n_mems; i++)
                fds[i] = mems[i]->fd;
        if (gpu_proc_send(w->sock, c, sizeof(*c), fds, (unsigned)n_mems) < 0 ||
            gpu_proc_recv(w->sock, &rep, sizeof(rep), fds) < 0)
                rep.r = -EIO;
        return rep;
}

/* Map `mems` back to back into slot `slot` of worker `w`. */
static reply map_mems(gpu_proc *w, int slot, gmd_mem **mems, int n)
{
        cmd c = { .op = OP_MAP, .slot = slot, .nseg = n };

        for (int i = 0; i < n; i++) {
                c.seg_offset[i] = c.size;
                c.seg_size[i] = mems[i]->size;
                c.size += mems[i]->size;
        }
        return ask(w, &c, mems, n);
}

static reply simple(gpu_proc *w, int op, int slot, uint64_t bytes,
                    uint64_t first, uint32_t seed)
{
        cmd c = { .op = op, .slot = slot, .bytes = bytes, .first = first,
                  .seed = seed };

        return ask(w, &c, NULL, 0);
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
        qsort(v, (size_t)n, sizeof(double), cmp_double);
        return v[n / 2];
}

/* Where a round trip's time goes, step by step, 4 MiB (never the reserve):
 * daemon create, client map, client unmap+unreserve, daemon destroy. */
static void steps(gmd_backend *be, gpu_proc *w)
{
        enum { N = 50 };
        double create[N], map[N], unmap[N], destroy[N], t0;
        gmd_mem *m;
        reply rep;

        for (int i = 0; i < N; i++) {
                t0 = gpu_now_us();
                CHECK(be->ops->mem_create(be, GMD_TIER_VRAM, 0, 4u << 20,
                                          &m) == 0, "steps: create");
                create[i] = gpu_now_us() - t0;
                rep = map_mems(w, 5, &m, 1);
                map[i] = rep.us;
                rep = simple(w, OP_FREE, 5, 0, 0, 0);
                unmap[i] = rep.us;
                t0 = gpu_now_us();
                be->ops->mem_destroy(be, m);
                destroy[i] = gpu_now_us() - t0;
        }
        printf("steps, 4 MiB, median of %d: daemon create+export+map+zero "
               "%.1f us, client import+map+access %.1f us, client "
               "unmap+unreserve %.1f us, daemon destroy %.1f us\n", N,
               median(create, N), median(map, N), median(unmap, N),
               median(destroy, N));
        /* gpu-memd answers a FREE before it destroys the memory, so the
         * daemon's destroy and the client's unmap overlap and either may
         * finish first: measure destroy while the client still maps too. */
        for (int i = 0; i < N; i++) {
                t0 = gpu_now_us();
                be->ops->mem_create(be, GMD_TIER_VRAM, 0, 4u << 20, &m);
                create[i] = gpu_now_us() - t0;
                rep = map_mems(w, 5, &m, 1);
                map[i] = rep.us;
                t0 = gpu_now_us();
                be->ops->mem_destroy(be, m);
                destroy[i] = gpu_now_us() - t0;
                rep = simple(w, OP_FREE, 5, 0, 0, 0);
                unmap[i] = rep.us;
        }
        printf("steps, destroy before client unmap: create %.1f us, map "
               "%.1f us, destroy %.1f us, client unmap+unreserve %.1f us\n",
               median(create, N), median(map, N), median(destroy, N),
               median(unmap, N));
}

/* `chunks`: the [pools] cuda_reserve_chunks the backend was opened with. */
static void run(gmd_backend *be, gpu_proc *w, gpu_proc *rd, unsigned chunks)
{
        const gmd_backend_ops *ops = be->ops;
        gmd_device_info info, info2;
        gmd_mem *a, *x, *y, *h, *ipc, *big, *segs[2];
        gmd_event *ev, *ev2, *ev3;
        double t0, t_hit, t_miss;
        reply rep;
        cmd c;
        int r;

        CHECK(ops->device_info(be, 0, &info) == 0, "device_info");
        printf("device 0: %s, total %llu MiB, free %llu MiB, granularity "
               "%llu KiB, reserve %llu MiB\n", info.name,
               (unsigned long long)(info.total >> 20),
               (unsigned long long)(info.free >> 20),
               (unsigned long long)(info.granularity >> 10),
               (unsigned long long)(info.reserved >> 20));
        /* The reserve plus the anchor chunk. */
        CHECK(info.reserved == (chunks + 1) * info.granularity,
              "reserve full at open");

        t0 = gpu_now_us();
        r = ops->mem_create(be, GMD_TIER_VRAM, 0, info.granularity, &x);
        t_hit = gpu_now_us() - t0;
        CHECK(r == 0, "reserve hit: %d", r);
        t0 = gpu_now_us();
        r = ops->mem_create(be, GMD_TIER_VRAM, 0, 64u << 20, &a);
        t_miss = gpu_now_us() - t0;
        CHECK(r == 0, "create 64 MiB: %d", r);
        printf("backend mem_create: 2 MiB reserve hit %.1f us, 64 MiB "
               "(create+export+map+zero) %.1f us\n", t_hit, t_miss);

        /* Cross-process data: W writes, R reads. */
        rep = map_mems(w, 0, &a, 1);
        CHECK(rep.r == 0, "W map A: %d", rep.r);
        printf("client import+map+access, 64 MiB, 1 segment: %.1f us\n",
               rep.us);
        CHECK(simple(w, OP_FILL, 0, a->size, 0, 7).r == 0, "W fill");
        CHECK(map_mems(rd, 0, &a, 1).r == 0, "R map A");
        rep = simple(rd, OP_CHECK, 0, a->size, 0, 7);
        CHECK(rep.r == 0 && rep.value == 0, "R reads W's pattern: %lld bad",
              rep.value);

        /* mem_zero, seen through R's live mapping. */
        CHECK(ops->mem_zero(be, a) == 0, "mem_zero");
        rep = simple(rd, OP_CHECK, 0, a->size, 0, 0);
        CHECK(rep.value == 0, "zeroed: %lld nonzero words", rep.value);

        /* Unmap and map again at the same address (a remap's shape). */
        CHECK(simple(w, OP_UNMAP, 0, 0, 0, 0).r == 0, "W unmap");
        rep = map_mems(w, 0, &a, 1);
        CHECK(rep.r == 0, "W map again at the same address: %d", rep.r);
        CHECK(simple(w, OP_CHECK, 0, a->size, 0, 0).value == 0, "W zeros");

        /* Two segments in one range, one cuMemSetAccess. */
        CHECK(ops->mem_create(be, GMD_TIER_VRAM, 0, 4u << 20, &y) == 0, "y");
        segs[0] = x;
        segs[1] = y;
        rep = map_mems(w, 1, segs, 2);
        CHECK(rep.r == 0, "W map x+y: %d", rep.r);
        printf("client import+map+access, 6 MiB, 2 segments: %.1f us\n",
               rep.us);
        CHECK(simple(w, OP_FILL, 1, 6u << 20, 0, 9).r == 0, "W fill x+y");
        CHECK(map_mems(rd, 1, &y, 1).r == 0, "R map y");
        rep = simple(rd, OP_CHECK, 1, 4u << 20, (2u << 20) / 4, 9);
        CHECK(rep.value == 0, "R reads y: %lld bad", rep.value);
        CHECK(simple(w, OP_FREE, 1, 0, 0, 0).r == 0, "W unreserve x+y");
        CHECK(simple(rd, OP_FREE, 1, 0, 0, 0).r == 0, "R unreserve y");

        /* HOST tier (host-located VMM), used by kernels. */
        r = ops->mem_create(be, GMD_TIER_HOST, 0, 2u << 20, &h);
        if (r == -EOPNOTSUPP) {
                printf("host tier: not supported here (skipped)\n");
        } else {
                CHECK(r == 0, "create host chunk: %d", r);
                CHECK(map_mems(w, 2, &h, 1).r == 0, "W map host");
                CHECK(simple(w, OP_FILL, 2, h->size, 0, 11).r == 0, "fill h");
                CHECK(map_mems(rd, 2, &h, 1).r == 0, "R map host");
                rep = simple(rd, OP_CHECK, 2, h->size, 0, 11);
                CHECK(rep.value == 0, "R reads host chunk: %lld", rep.value);
                simple(w, OP_FREE, 2, 0, 0, 0);
                simple(rd, OP_FREE, 2, 0, 0, 0);
                ops->mem_destroy(be, h);
        }

        /* Legacy IPC: 2 MiB steps only (the daemon rounds), no fd, zeroed. */
        CHECK(ops->mem_create_ipc(be, 0, 3u << 20, &ipc) == -EINVAL,
              "ipc size not a 2 MiB multiple");
        CHECK(ops->mem_create_ipc(be, 0, 4u << 20, &ipc) == 0, "ipc alloc");
        CHECK(ipc->fd == -1 && ipc->size == (4u << 20) &&
              ipc->tier == GMD_TIER_VRAM, "ipc mem: fd %d", ipc->fd);
        memset(&c, 0, sizeof(c));
        c.op = OP_IPC_OPEN;
        c.slot = 3;
        memcpy(c.handle, ipc->ipc_handle, 64);
        rep = ask(w, &c, NULL, 0);
        CHECK(rep.r == 0, "W ipc open: %d", rep.r);
        printf("client cuIpcOpenMemHandle 4 MiB: %.1f us\n", rep.us);
        rep = simple(w, OP_CHECK, 3, 4u << 20, 0, 0);
        CHECK(rep.value == 0, "ipc buffer zeroed: %lld", rep.value);
        CHECK(simple(w, OP_FILL, 3, 4u << 20, 0, 13).r == 0, "W ipc fill");
        CHECK(ask(rd, &c, NULL, 0).r == 0, "R ipc open");
        rep = simple(rd, OP_CHECK, 3, 4u << 20, 0, 13);
        CHECK(rep.value == 0, "R reads ipc: %lld", rep.value);
        c.op = OP_IPC_CLOSE;
        CHECK(ask(w, &c, NULL, 0).r == 0, "W ipc close");
        CHECK(ask(rd, &c, NULL, 0).r == 0, "R ipc close");
        ops->mem_destroy(be, ipc);

        /* IPC events: daemon -> client (cached open), client -> daemon. */
        CHECK(ops->event_create(be, 0, &ev) == 0, "event_create");
        CHECK(ops->event_record(be, ev) == 0, "event_record");
        memset(&c, 0, sizeof(c));
        c.op = OP_EVENT_OPEN;
        memcpy(c.handle, ev->ipc_handle, 64);
        rep = ask(w, &c, NULL, 0);
        CHECK(rep.r == 0, "client opens, caches and waits: %d", rep.r);
        printf("client cuIpcOpenEventHandle (first open): %.1f us\n", rep.us);
        c.op = OP_EVENT_CREATE;
        rep = ask(w, &c, NULL, 0);
        CHECK(rep.r == 0, "client event create");
        t0 = gpu_now_us();
        CHECK(ops->event_open(be, 0, rep.handle, &ev2) == 0, "daemon opens");
        printf("daemon event_open: first %.1f us", gpu_now_us() - t0);
        t0 = gpu_now_us();
        CHECK(ops->event_open(be, 0, rep.handle, &ev3) == 0 && ev3 == ev2,
              "cached");
        printf(", cached %.1f us\n", gpu_now_us() - t0);
        CHECK(ops->event_wait(be, ev2) == 0, "daemon waits");
        ops->event_unref(be, ev3);
        ops->event_unref(be, ev2);
        ops->event_unref(be, ev);

        /* The driver's free memory follows allocations. */
        CHECK(ops->device_info(be, 0, &info) == 0, "info");
        CHECK(ops->mem_create(be, GMD_TIER_VRAM, 0, 256u << 20, &big) == 0,
              "256 MiB");
        CHECK(ops->device_info(be, 0, &info2) == 0, "info");
        printf("driver free: -%lld MiB after a 256 MiB create\n",
               (long long)(info.free - info2.free) >> 20);
        CHECK(info.free - info2.free >= (254u << 20) &&
              info.free - info2.free <= (260u << 20), "free moved by 256 MiB");
        ops->mem_destroy(be, big);

        /* Too large fails cleanly; the reserve refills off the path. */
        r = ops->mem_create(be, GMD_TIER_VRAM, 0,
                            (info.total + (4ull << 30)) & ~((2ull << 20) - 1),
                            &big);
        CHECK(r == -ENOMEM, "too large: %d", r);
        while (ops->maintain(be) > 0)
                ;
        CHECK(ops->device_info(be, 0, &info) == 0 &&
              info.reserved == (chunks + 1) * info.granularity,
              "reserve refilled");

        steps(be, w);

        simple(w, OP_FREE, 0, 0, 0, 0);
        simple(rd, OP_FREE, 0, 0, 0, 0);
        ops->mem_destroy(be, a);
        ops->mem_destroy(be, x);
        ops->mem_destroy(be, y);
}

/* With the reserve off ([pools] cuda_reserve_chunks = 0), and with it on
 * but the driver's free memory below [pools] vram_reserve, the backend
 * holds only its anchor chunk, creates granules on demand and maintain has
 * nothing to do. */
static void run_reserve_limits(const gmd_config *defaults)
{
        static const struct { unsigned chunks; bool floor_high;
                              const char *what; } cases[] = {
                { 0, false, "reserve off" },
                { 4, true, "free memory below vram_reserve" },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                gmd_config config = *defaults;
                gmd_device_info info;
                gmd_backend *be;
                gmd_mem *m;
                int r;

                config.cuda_reserve_chunks = cases[i].chunks;
                if (cases[i].floor_high)
                        config.vram_reserve = UINT64_MAX / 2;
                r = backend_cuda_open(&config, &be);
                CHECK(r == 0, "%s: open: %d", cases[i].what, r);
                if (r < 0)
                        continue;
                CHECK(be->ops->device_info(be, 0, &info) == 0 &&
                      info.reserved == info.granularity,
                      "%s: only the anchor is held", cases[i].what);
                r = be->ops->mem_create(be, GMD_TIER_VRAM, 0, info.granularity,
                                        &m);
                CHECK(r == 0, "%s: a granule on demand: %d", cases[i].what, r);
                CHECK(be->ops->maintain(be) == 0, "%s: maintain idle",
                      cases[i].what);
                if (r == 0)
                        be->ops->mem_destroy(be, m);
                be->ops->destroy(be);
                printf("%s: anchor only, granules made on demand\n",
                       cases[i].what);
        }
}

/* ---- restart recovery -------------------------------------------------- */

static void adopt_copy_done(void *ctx, void *cookie, int status)
{
        (void)cookie;
        *(int *)ctx = status == 0 ? 1 : -1;
}

/* Copy `len` bytes between two mems and wait: 0 or the error. */
static int adopt_copy(gmd_backend *be, gmd_copy_dir dir, gmd_mem *dst,
                      gmd_mem *src, uint64_t len)
{
        int done = 0, r = be->ops->copy_submit(be, 0, dir, dst, 0, src, 0, len,
                                               NULL);

        if (r < 0)
                return r;
        for (unsigned i = 0; !done && i < 20000; i++) {
                usleep(500);
                be->ops->copy_reap(be, adopt_copy_done, &done);
        }
        return done == 1 ? 0 : -EIO;
}

static void adopt_wait_built(gmd_backend *be, gmd_arena_info *ret)
{
        for (unsigned i = 0; i < 400; i++) {
                be->ops->arena_info(be, 0, ret);
                if (ret->built >= ret->target)
                        return;
                usleep(25000);
        }
}

static bool same_file(int a, int b)
{
        uint64_t d0, i0, d1, i1;

        return mem_identity(a, &d0, &i0) == 0 && mem_identity(b, &d1, &i1) == 0 &&
               d0 == d1 && i0 == i1;
}

/* A backend hands on its arena pieces, a host copy's parts and a VRAM
 * buffer's fd, and closes (the daemon dies); a fresh one adopts them and
 * every byte is there. Also: what mem_identity says of exported fds. */
static void run_adopt(const gmd_config *defaults)
{
        const uint64_t size = 64ull << 20, gib = 1ull << 30;
        gmd_config config = *defaults;
        gmd_arena_piece pieces[GMD_ARENA_MAX_PIECES], again[GMD_ARENA_MAX_PIECES];
        gmd_extent parts[GMD_ARENA_MAX_PARTS];
        gmd_mem *v = NULL, *pc = NULL, *fill[3] = { 0 }, *v2 = NULL, *pc2 = NULL;
        gmd_mem *m = NULL;
        gmd_device_info di0, di1;
        gmd_arena_info info;
        const gmd_cuda_driver *cu;
        uint8_t *buf = malloc(size), *back = malloc(size);
        int n, n_parts, vfd, fd2 = -1, keep[GMD_ARENA_MAX_PIECES], r;
        gmd_backend *be;

        for (uint64_t i = 0; i < size; i++)
                buf[i] = (uint8_t)(i * 131 + (i >> 20));
        /* 3 GiB of arena per device: 3 pieces of 1 GiB (CUDA_ARENA_PIECE). */
        config.host_stock = (gmd_size_spec){ .bytes = 0 };
        r = backend_cuda_open(&config, &be);
        CHECK(r == 0, "adopt: open: %d", r);
        if (r < 0)
                return;
        n = (int)be->ops->device_count(be);
        be->ops->destroy(be);
        config.host_stock = (gmd_size_spec){ .bytes = 3 * gib * (uint64_t)n };
        config.host_limit = (gmd_size_spec){ .bytes = 8 * gib * (uint64_t)n };
        r = backend_cuda_open(&config, &be);
        CHECK(r == 0, "adopt: open: %d", r);
        if (r < 0)
                return;
        cu = ((cuda_backend *)be)->cu;
        adopt_wait_built(be, &info);
        if (info.target == 0) {
                printf("adopt: no host arena here (skipped)\n");
                be->ops->destroy(be);
                return;
        }
        CHECK(info.built == 3 * gib, "adopt: arena built: %llu MiB",
              (unsigned long long)(info.built >> 20));
        n = be->ops->arena_pieces(be, 0, pieces, GMD_ARENA_MAX_PIECES);
        CHECK(n == 3, "adopt: 3 pieces: %d", n);
        CHECK(be->ops->arena_pieces(be, 0, again, GMD_ARENA_MAX_PIECES) == n,
              "adopt: pieces again");
        for (int i = 0; i < n; i++) {
                CHECK(pieces[i].offset == (uint64_t)i * gib && pieces[i].size == gib,
                      "adopt: piece %d at %llu", i,
                      (unsigned long long)pieces[i].offset);
                CHECK(same_file(pieces[i].fd, again[i].fd),
                      "adopt: asking twice hands on one export");
                close(again[i].fd);
        }

        /* A VRAM buffer with known bytes, its host copy in two parts: the
         * fillers leave 32 MiB at the end of the first two pieces. */
        CHECK(be->ops->mem_create(be, GMD_TIER_VRAM, 0, size, &v) == 0, "adopt: v");
        CHECK(cu->cuMemcpyHtoD(cuda_mem_of(v)->va, buf, size) == CUDA_SUCCESS,
              "adopt: write v");
        CHECK(be->ops->mem_create_private(be, 0, gib - size / 2, &fill[0]) == 0 &&
              be->ops->mem_create_private(be, 0, gib - size / 2, &fill[1]) == 0 &&
              be->ops->mem_create_private(be, 0, gib, &fill[2]) == 0,
              "adopt: fillers");
        CHECK(be->ops->mem_create_private(be, 0, size, &pc) == 0, "adopt: pc");
        CHECK(adopt_copy(be, GMD_COPY_OUT, pc, v, size) == 0, "adopt: copy out");
        n_parts = be->ops->mem_span(be, pc, parts, GMD_ARENA_MAX_PARTS);
        CHECK(n_parts == 2, "adopt: the copy in 2 parts: %d", n_parts);
        CHECK(be->ops->mem_span(be, v, parts + 2, 1) == -ENOENT, "adopt: span of VRAM");

        /* Identity of exported fds (assumed in backend.h). */
        vfd = fcntl(v->fd, F_DUPFD_CLOEXEC, 0);
        CHECK(same_file(vfd, v->fd), "adopt: a dup of an export is the same file");
        if (cu->cuMemExportToShareableHandle(&fd2, v->handle,
                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS) {
                printf("adopt: a second export of one allocation is %s file\n",
                       same_file(fd2, v->fd) ? "the same" : "another");
                close(fd2);
        }

        /* The daemon dies: its memory is released, the kept fds hold it. */
        be->ops->mem_destroy(be, v);
        be->ops->mem_destroy(be, pc);
        for (int i = 0; i < 3; i++)
                be->ops->mem_destroy(be, fill[i]);
        be->ops->destroy(be);

        r = backend_cuda_open(&config, &be);
        CHECK(r == 0, "adopt: reopen: %d", r);
        if (r < 0)
                return;
        usleep(200000);   /* let the worker pin some: adopt releases it */
        for (int i = 0; i < n; i++)
                keep[i] = fcntl(pieces[i].fd, F_DUPFD_CLOEXEC, 0);
        r = be->ops->arena_adopt(be, 0, pieces, (unsigned)n);
        CHECK(r == 0, "adopt: arena_adopt: %d", r);
        adopt_wait_built(be, &info);
        CHECK(info.built == 3 * gib && info.free == info.built,
              "adopt: arena %llu MiB, %llu free",
              (unsigned long long)(info.built >> 20),
              (unsigned long long)(info.free >> 20));
        CHECK(be->ops->mem_adopt_private(be, 0, size, parts, (unsigned)n_parts,
                                         &pc2) == 0, "adopt: the host copy");
        CHECK(be->ops->mem_adopt_private(be, 0, size, parts, (unsigned)n_parts,
                                         &m) == -EINVAL, "adopt: taken twice");
        CHECK(be->ops->device_info(be, 0, &di0) == 0, "adopt: info");
        r = be->ops->mem_adopt_fd(be, GMD_TIER_VRAM, 0, 2 * size, vfd, &m);
        CHECK(r == -EINVAL && fcntl(vfd, F_GETFD) >= 0,
              "adopt: larger than its allocation: %d", r);
        r = be->ops->mem_adopt_fd(be, GMD_TIER_VRAM, 0, size, vfd, &v2);
        CHECK(r == 0, "adopt: the VRAM buffer: %d", r);
        if (r < 0)
                close(vfd);
        CHECK(be->ops->device_info(be, 0, &di1) == 0 && di1.own == di0.own + size,
              "adopt: counted as own");

        /* Every byte there: the buffer read directly, the host copy
         * copied into new VRAM first. */
        memset(back, 0, size);
        CHECK(v2 && cu->cuMemcpyDtoH(back, cuda_mem_of(v2)->va, size) == CUDA_SUCCESS &&
              memcmp(back, buf, size) == 0, "adopt: the VRAM buffer's bytes");
        memset(back, 0, size);
        CHECK(pc2 && be->ops->mem_create(be, GMD_TIER_VRAM, 0, size, &m) == 0 &&
              adopt_copy(be, GMD_COPY_IN, m, pc2, size) == 0 &&
              cu->cuMemcpyDtoH(back, cuda_mem_of(m)->va, size) == CUDA_SUCCESS &&
              memcmp(back, buf, size) == 0, "adopt: the host copy's bytes");
        CHECK(v2 && be->ops->mem_zero(be, v2) == 0, "adopt: zero");

        /* Handed on again as the same files (an import cannot be exported). */
        CHECK(be->ops->arena_pieces(be, 0, again, GMD_ARENA_MAX_PIECES) == n,
              "adopt: pieces after adoption");
        for (int i = 0; i < n; i++) {
                CHECK(same_file(again[i].fd, keep[i]), "adopt: piece %d same file", i);
                close(again[i].fd);
                close(keep[i]);
        }
        be->ops->mem_destroy(be, m);
        be->ops->mem_destroy(be, pc2);
        be->ops->mem_destroy(be, v2);
        be->ops->arena_info(be, 0, &info);
        CHECK(info.free == info.built, "adopt: all given back");
        be->ops->destroy(be);
        printf("adopt: arena pieces, a host copy and a VRAM buffer adopted\n");
        free(buf);
        free(back);
}

int main(int argc, char **argv)
{
        const gmd_cuda_driver *cu;
        gmd_backend *be;
        gmd_config config;
        gpu_proc w, rd;
        cmd quit = { .op = OP_QUIT };
        int r;

        cu = gpu_test_begin(argc, argv, worker);
        if (!cu)
                return GPU_TEST_SKIP;
        gpu_say_device(cu, 0, "the backend opens every GPU; its buffers, "
                       "reserve, arena and copies here are device 0's");
        log_setup(GMD_LOG_INFO);
        config_init_defaults(&config);
        config.cuda_reserve_chunks = 16;   /* the shipped default, explicitly */
        if (gpu_proc_spawn("writer", &w) < 0 || gpu_proc_spawn("reader", &rd) < 0)
                return 1;
        r = backend_cuda_open(&config, &be);
        CHECK(r == 0, "backend_cuda_open: %d", r);
        if (r == 0) {
                run(be, &w, &rd, config.cuda_reserve_chunks);
                be->ops->destroy(be);
                run_reserve_limits(&config);
                run_adopt(&config);
        }
        gpu_proc_send(w.sock, &quit, sizeof(quit), NULL, 0);
        gpu_proc_send(rd.sock, &quit, sizeof(quit), NULL, 0);
        CHECK(gpu_proc_wait(&w) == 0, "writer exit");
        CHECK(gpu_proc_wait(&rd) == 0, "reader exit");
        printf("%s: %d failure(s)\n", gpu_failures ? "FAIL" : "PASS", gpu_failures);
        return gpu_failures ? 1 : 0;
}
