/*
 * backend_sim — the sim backend: host memory standing in for VRAM, with the
 * cuda backend's contract. A "device" is a budget of [sim] vram bytes; an
 * allocation is a memfd of the rounded size, which the client maps with
 * mmap(MAP_FIXED) at its reserved address, exactly as a VMM fd is imported
 * and mapped. A fresh memfd reads as zeros, so memory is never handed from
 * one client to another with its old contents; mem_zero exists for reuse.
 * Pages are committed as they are touched, so a large simulated device
 * costs nothing until used. Device N has the UUID
 * "GPU-5140dd00-0000-4000-8000-" followed by N in 12 hex digits and the
 * PCI bus id "0000:8N:00.0" (0x80 + N), the same at every start.
 *
 * The daemon maps every memfd too (the address is kept in gmd_mem.handle),
 * so copies between tiers are plain memcpy, run by sim_copier's worker
 * threads: one per device and direction, like the cuda backend's streams.
 *
 * The host arena (mem_create_private) has the cuda backend's shape and
 * its bookkeeping (host_arena.c, shared by both): per device one memfd of
 * its share of [pools] host_limit, mapped once, its share of [pools]
 * host_stock added as SIM_ARENA_PIECES separate pieces so a host copy may
 * come in parts and no part crosses a piece, as on a GPU; a growth
 * (arena_grow) adds one more piece at once, as large as the first ones
 * or as asked. Freed parts are punched out, so the arena costs only what
 * is in use.
 *
 * Restart recovery (arena_adopt): the memfds of a previous run's arena
 * pieces are mapped over the start of the range, each at its offset, and
 * the arena's own memfd is mapped again after them, from its first byte,
 * so each file's byte 0 is its piece's first byte, as a cuda piece's
 * allocation is. arena_pieces then names the adopted memfds and the own
 * one after them.
 *
 * For tests only: with GMD_SIM_FAIL_COPIES naming a file, every copy
 * submitted while that file exists fails with -EIO, as a refused
 * cudaMemcpyAsync would. The copy-failure paths of the swap engine have no
 * other way to run in CI; tests switch failures on and off by creating and
 * removing the file. The variable is read once, at open.
 *
 * For tests only: with GMD_SIM_VRAM_OTHERS naming a file, the size written
 * in it ("3G", "512M", a byte count) is VRAM "used by others" on every
 * device while the file exists: device_info's free shrinks by it, as
 * cuMemGetInfo's does when another process (or a client keeping a freed
 * buffer's fd) holds GPU memory, and mem_create of VRAM fails with
 * -ENOMEM, as cuMemCreate does, when it would not fit beside it. Tests
 * write and remove the file to make memory appear and go outside the pool
 * (core/vram.c). Lines after the first, "PID SIZE" or "PID SIZE DEVICE",
 * are the processes holding device memory as the driver would report
 * them per process (device_processes): on every device, or on DEVICE
 * only. A figure stands for all the process holds there, the gpu-memd
 * buffers it maps included (processes_count_imports), so a test says
 * "pid P holds B bytes on device D" and the daemon charges P's user what
 * that is beyond its sessions' buffers (core/outside.h). Never on by
 * default: without the variable there are no per-process figures.
 *
 * For tests only: GMD_SIM_HOST_RATE ("12M", a byte count) is the host's
 * own limit across links: the copies of every device one way move that
 * many bytes per second together at most (sim_copier books each step's
 * turn on the host), as a host that cannot feed all its GPUs' links at
 * once. host_link_info reports it, as cuda reports what it measured
 * with every device copying at once (capped at the links' sum where
 * [sim] copy_rate throttles them), so the copy engine's host budget
 * (core/copyq.h) runs in CI. Without it the host never limits. The
 * variable is read once, at open.
 */
#include "backend.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "gpu_uuid.h"
#include "host_arena.h"
#include "log.h"
#include "sim_copier.h"
#include "size.h"

#define SIM_MAX_DEVICES 16
#define SIM_ARENA_PIECES 4
#define SIM_ARENA_MAX_PARTS 32
/* Stretches of one copy: each end's parts split it at most that often. */
#define SIM_COPY_MAX_PARTS (2 * SIM_ARENA_MAX_PARTS)

/* A gmd_mem with, for a host copy from the arena, its parts there. */
typedef struct sim_mem {
        gmd_mem mem;
        gmd_arena_span span;
} sim_mem;

/* A piece of a previous run's arena, adopted: its memfd, mapped at its
 * offset. */
typedef struct sim_piece {
        uint64_t offset;
        uint64_t size;
        int fd;
} sim_piece;

/* One device's host arena: a memfd mapped once (after the adopted pieces,
 * when there are some); its bookkeeping is host_arena.c's, as the cuda
 * backend's is. */
typedef struct sim_arena {
        int fd;                 /* -1: none */
        uint64_t fd_at;         /* the arena offset of the memfd's byte 0:
                                 * where the adopted pieces end (0: none) */
        char *base;
        uint64_t size;          /* mapped: the range it may grow to */
        uint64_t piece;         /* bytes of a first piece: a growth's unit */
        sim_piece *adopted;     /* in offset order, from 0 */
        unsigned n_adopted;
        gmd_host_arena ranges;
} sim_arena;

typedef struct sim_backend {
        gmd_backend base;
        unsigned n_devices;
        uint64_t vram;
        uint64_t granularity;
        uint64_t created[SIM_MAX_DEVICES];  /* bytes alive per device, as a
                                             * driver counts */
        sim_arena arenas[SIM_MAX_DEVICES];
        sim_copier *copier;     /* queue 2 * device + direction (device 0's
                                 * for all with [sim] shared_link) */
        bool shared_link;       /* [sim] shared_link */
        uint64_t peer_rate;     /* [sim] peer_rate: 0, no peers */
        uint64_t host_rate;     /* GMD_SIM_HOST_RATE, 0: none */
        char *fail_copies;      /* GMD_SIM_FAIL_COPIES, or NULL */
        char *vram_others;      /* GMD_SIM_VRAM_OTHERS, or NULL */
} sim_backend;

static sim_backend *to_sim(gmd_backend *b)
{
        return (sim_backend *)b;
}

static unsigned sim_device_count(gmd_backend *b)
{
        return to_sim(b)->n_devices;
}

/* GMD_SIM_VRAM_OTHERS's file now, into `buf`: 0 bytes, or -ENOENT without
 * the hook or the file. */
static int sim_others_read(const sim_backend *sim, char *buf, size_t len)
{
        ssize_t n;
        int fd;

        if (!sim->vram_others)
                return -ENOENT;
        fd = open(sim->vram_others, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -ENOENT;
        n = read(fd, buf, len - 1);
        close(fd);
        buf[n > 0 ? n : 0] = '\0';
        return 0;
}

/* The bytes GMD_SIM_VRAM_OTHERS's file names now (its first line): 0
 * without the hook, without the file, or with something that is not a
 * size. */
static uint64_t sim_vram_others(const sim_backend *sim)
{
        char text[1024];
        uint64_t bytes = 0;

        if (sim_others_read(sim, text, sizeof(text)) < 0)
                return 0;
        text[strcspn(text, " \t\r\n")] = '\0';
        if (size_parse(text, &bytes) < 0)
                return 0;
        return bytes;
}

/* The file's "PID SIZE [DEVICE]" lines, after the first: who holds
 * `device`'s memory. */
static int sim_device_processes(gmd_backend *b, unsigned device,
                                gmd_gpu_process *ret, unsigned max)
{
        sim_backend *sim = to_sim(b);
        char text[1024], *line, *save = NULL;
        unsigned n = 0;

        if (device >= sim->n_devices || !sim->vram_others)
                return -ENOSYS;
        if (sim_others_read(sim, text, sizeof(text)) < 0)
                return 0;
        line = strtok_r(text, "\n", &save);            /* the total */
        while (n < max && (line = strtok_r(NULL, "\n", &save))) {
                char size[32];
                unsigned pid, on;
                uint64_t bytes;
                int got = sscanf(line, "%u %31s %u", &pid, size, &on);

                if (got == 3 && on != device)
                        continue;       /* another device's */
                if (got >= 2 && size_parse(size, &bytes) == 0) {
                        ret[n].pid = pid;
                        ret[n].bytes = bytes;
                        n++;
                }
        }
        return (int)n;
}

/* What the "driver" has free on `device`: the budget less what the
 * backend created there and what others use (the test hook). */
static uint64_t sim_vram_free(const sim_backend *sim, unsigned device)
{
        uint64_t used = sim->created[device] + sim_vram_others(sim);

        return sim->vram > used ? sim->vram - used : 0;
}

static int sim_device_info(gmd_backend *b, unsigned device,
                           gmd_device_info *ret_info)
{
        sim_backend *sim = to_sim(b);

        if (device >= sim->n_devices)
                return -ENODEV;
        memset(ret_info, 0, sizeof(*ret_info));
        snprintf(ret_info->name, sizeof(ret_info->name), "sim%u", device);
        /* Synthetic but stable, so tests and CUDA_VISIBLE_DEVICES can
         * name a sim device by UUID as they would a GPU. */
        gpu_uuid_sim(device, ret_info->uuid, sizeof(ret_info->uuid));
        snprintf(ret_info->pci_bus_id, sizeof(ret_info->pci_bus_id),
                 "0000:%02x:00.0", 0x80u + (device & 0x7fu));
        ret_info->total = sim->vram;
        ret_info->free = sim_vram_free(sim, device);
        ret_info->granularity = sim->granularity;
        ret_info->own = sim->created[device];
        return 0;
}

static int sim_mem_create(gmd_backend *b, gmd_tier tier, unsigned device,
                          uint64_t size, gmd_mem **ret_mem)
{
        sim_backend *sim = to_sim(b);
        char name[32];
        sim_mem *sm;
        gmd_mem *mem;
        int fd, r;

        if (device >= sim->n_devices || size == 0 || size % sim->granularity)
                return -EINVAL;
        /* As cuMemCreate: VRAM others hold is not there to take. Only
         * with the test hook: without it the sim device is the pool's. */
        if (tier == GMD_TIER_VRAM && sim->vram_others &&
            size > sim_vram_free(sim, device))
                return -ENOMEM;
        sm = calloc(1, sizeof(*sm));
        if (!sm)
                return -ENOMEM;
        mem = &sm->mem;
        snprintf(name, sizeof(name), "gmd-%s%u",
                 tier == GMD_TIER_HOST ? "host" : "vram", device);
        fd = memfd_create(name, MFD_CLOEXEC);
        if (fd < 0) {
                r = -errno;
                free(mem);
                return r;
        }
        void *addr;

        if (ftruncate(fd, (off_t)size) < 0) {
                r = -errno;
                close(fd);
                free(mem);
                return r;
        }
        addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (addr == MAP_FAILED) {
                r = -errno;
                close(fd);
                free(mem);
                return r;
        }
        mem->handle = (uint64_t)(uintptr_t)addr;
        if (tier == GMD_TIER_VRAM)
                sim->created[device] += size;
        mem->fd = fd;
        mem->size = size;
        mem->tier = tier;
        mem->device = device;
        *ret_mem = mem;
        return 0;
}

static sim_mem *sim_mem_of(gmd_mem *mem)
{
        return (sim_mem *)((char *)mem - offsetof(sim_mem, mem));
}

/* Drop the pages of a free part: in the memfd that holds it (a part
 * never crosses a piece). */
static void sim_arena_punch(const sim_arena *a, const gmd_extent *part)
{
        int fd = a->fd;
        uint64_t at = part->offset - a->fd_at;

        for (unsigned i = 0; part->offset < a->fd_at && i < a->n_adopted; i++) {
                const sim_piece *p = &a->adopted[i];

                if (part->offset >= p->offset &&
                    part->offset - p->offset < p->size) {
                        fd = p->fd;
                        at = part->offset - p->offset;
                        break;
                }
        }
        (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                        (off_t)at, (off_t)part->len);
}

/* Give a host copy back to the arena and drop its pages. */
static void sim_arena_give(sim_arena *a, sim_mem *sm)
{
        gmd_extent parts[SIM_ARENA_MAX_PARTS];
        unsigned n = sm->span.n_parts;

        memcpy(parts, sm->span.parts, sizeof(*parts) * n);
        /* A bad give (a bug) must not punch out someone else's copy. */
        if (host_arena_give(&a->ranges, &sm->span) < 0)
                return;
        for (unsigned i = 0; i < n; i++)
                sim_arena_punch(a, &parts[i]);
}

static void sim_mem_destroy(gmd_backend *b, gmd_mem *mem)
{
        if (!mem)
                return;
        if (sim_mem_of(mem)->span.parts) {
                sim_mem *sm = sim_mem_of(mem);

                sim_arena_give(&to_sim(b)->arenas[mem->device], sm);
                free(sm);
                return;
        }
        if (mem->tier == GMD_TIER_VRAM)
                to_sim(b)->created[mem->device] -= mem->size;
        munmap((void *)(uintptr_t)mem->handle, mem->size);
        close(mem->fd);
        free(sim_mem_of(mem));
}

static int sim_mem_create_private(gmd_backend *b, unsigned device,
                                  uint64_t size, gmd_mem **ret_mem)
{
        sim_backend *sim = to_sim(b);
        sim_arena *a;
        sim_mem *sm;
        int r;

        if (device >= sim->n_devices || size == 0 || size % sim->granularity)
                return -EINVAL;
        a = &sim->arenas[device];
        if (a->fd < 0)
                return -ENOSPC;
        sm = calloc(1, sizeof(*sm));
        if (!sm)
                return -ENOMEM;
        r = host_arena_take_mem(&a->ranges, device, size, SIM_ARENA_MAX_PARTS,
                                &sm->span, &sm->mem);
        if (r < 0) {
                free(sm);
                return r;
        }
        *ret_mem = &sm->mem;
        return 0;
}

static void sim_arena_info(gmd_backend *b, unsigned device,
                           gmd_arena_info *ret_info)
{
        sim_backend *sim = to_sim(b);
        sim_arena *a = &sim->arenas[device < SIM_MAX_DEVICES ? device : 0];

        memset(ret_info, 0, sizeof(*ret_info));
        if (device >= sim->n_devices || a->fd < 0)
                return;
        host_arena_info(&a->ranges, ret_info);
}

static int64_t sim_arena_grow(gmd_backend *b, unsigned device, uint64_t want,
                              uint64_t most)
{
        sim_backend *sim = to_sim(b);
        sim_arena *a;
        uint64_t bytes, at;

        if (device >= sim->n_devices)
                return -ENOSPC;
        a = &sim->arenas[device];
        if (a->fd < 0)
                return -ENOSPC;
        bytes = host_arena_growth(&a->ranges, want, most, a->piece);
        at = a->ranges.built;
        if (bytes == 0 || host_arena_raise(&a->ranges, bytes) == 0)
                return -ENOSPC;
        if (host_arena_add(&a->ranges, at, bytes) < 0) {
                a->ranges.target = at;
                return -ENOSPC;
        }
        return (int64_t)bytes;
}

/* With [sim] shared_link every device copies through device 0's queues,
 * one link of [sim] copy_rate each way for all. */
static unsigned sim_link_shared_with(gmd_backend *b, unsigned device)
{
        return to_sim(b)->shared_link ? 0 : device;
}

/* The link is what [sim] copy_rate throttles each copy queue to (each
 * device has one per direction); 0, unknown, when copies are unthrottled. */
static void sim_link_info(gmd_backend *b, unsigned device,
                          gmd_link_info *ret_info)
{
        sim_backend *sim = to_sim(b);
        uint64_t rate = device < sim->n_devices ? sim_copier_rate(sim->copier) : 0;

        ret_info->bytes_per_s[GMD_COPY_OUT] = rate;
        ret_info->bytes_per_s[GMD_COPY_IN] = rate;
}

/* GMD_SIM_HOST_RATE, what all the links carry together (the copier
 * enforces it), but never more than their sum where each is throttled;
 * 0 with one link (shared_link, one device), as cuda has nothing to
 * measure together there. */
static void sim_host_link_info(gmd_backend *b, gmd_link_info *ret_info)
{
        sim_backend *sim = to_sim(b);
        unsigned links = sim->shared_link ? 1 : sim->n_devices;
        uint64_t rate = links > 1 ? sim->host_rate : 0;
        uint64_t each = sim_copier_rate(sim->copier);

        if (rate && each && rate > each * links)
                rate = each * links;
        ret_info->bytes_per_s[GMD_COPY_OUT] = rate;
        ret_info->bytes_per_s[GMD_COPY_IN] = rate;
}

/* GMD_SIM_HOST_RATE at open: 0 or -EINVAL (logged). */
static int sim_host_rate_open(sim_backend *sim)
{
        const char *text = getenv("GMD_SIM_HOST_RATE");
        uint64_t links = sim->shared_link ? 1 : sim->n_devices;
        uint64_t each;

        if (!text || !*text)
                return 0;
        if (size_parse(text, &sim->host_rate) < 0) {
                log_error("sim: GMD_SIM_HOST_RATE=%s is not a size", text);
                return -EINVAL;
        }
        sim_copier_set_host_rate(sim->copier, sim->host_rate);
        each = sim_copier_rate(sim->copier);
        log_warning("sim: GMD_SIM_HOST_RATE is set (a test hook): the links "
                    "carry %llu bytes/s each way together at most",
                    (unsigned long long)sim->host_rate);
        if (links > 1 && each)
                log_info("sim: host links: %.1f MB/s each way together, "
                         "%.1f alone summed", (double)(sim->host_rate <
                         each * links ? sim->host_rate : each * links) / 1e6,
                         (double)(each * links) / 1e6);
        return 0;
}

/* The address of byte `off` of `mem` in the daemon and how many bytes are
 * contiguous from there; NULL past the end. */
static char *sim_mem_at(sim_backend *sim, gmd_mem *mem, uint64_t off,
                        uint64_t *ret_run)
{
        sim_mem *sm = sim_mem_of(mem);
        uint64_t at;

        *ret_run = 0;
        if (off >= mem->size)
                return NULL;
        if (!sm->span.parts) {
                *ret_run = mem->size - off;
                return (char *)(uintptr_t)mem->handle + off;
        }
        if (host_arena_locate(&sm->span, off, &at, ret_run) < 0)
                return NULL;
        return sim->arenas[mem->device].base + at;
}

static int sim_mem_zero(gmd_backend *b, gmd_mem *mem)
{
        if (mem->daemon_only)
                return -EINVAL;   /* an arena piece: the daemon's alone */
        /* Punching the whole range out drops the pages: they read as zeros,
         * in every process that maps them, and cost nothing until touched. */
        if (fallocate(mem->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                      (off_t)mem->size) < 0)
                return -errno;
        return 0;
}

static void sim_set_wake(gmd_backend *b, void (*wake)(void *ctx), void *ctx)
{
        sim_copier_set_wake(to_sim(b)->copier, wake, ctx);
}

/* A copy on the urgent or the bulk lane of its queue. */
static int sim_copy_queue(gmd_backend *b, unsigned device, gmd_copy_dir dir,
                          bool urgent, gmd_mem *dst, uint64_t dst_off,
                          gmd_mem *src, uint64_t src_off, uint64_t len,
                          void *cookie)
{
        sim_backend *sim = to_sim(b);
        sim_copy_part parts[SIM_COPY_MAX_PARTS];
        unsigned queue = 2 * (sim->shared_link ? 0 : device) + dir, n_parts = 0;

        if (device >= sim->n_devices || dst_off > dst->size ||
            len > dst->size - dst_off || src_off > src->size ||
            len > src->size - src_off)
                return -EINVAL;
        /* Test hook (see the top of this file): how CI runs the swap
         * engine's copy-failure paths. Costs one access() per submit
         * while GMD_SIM_FAIL_COPIES is set, a NULL test otherwise. */
        if (sim->fail_copies && access(sim->fail_copies, F_OK) == 0)
                return -EIO;
        /* One memcpy per stretch contiguous at both ends (arena parts),
         * queued together; only the last one reports. */
        for (uint64_t done = 0; done < len; n_parts++) {
                uint64_t to_run, from_run, n = len - done;
                char *to = sim_mem_at(sim, dst, dst_off + done, &to_run);
                char *from = sim_mem_at(sim, src, src_off + done, &from_run);

                if (n > to_run)
                        n = to_run;
                if (n > from_run)
                        n = from_run;
                if (!to || !from || n == 0 || n_parts == SIM_COPY_MAX_PARTS)
                        return -EINVAL;   /* cannot happen: checked above */
                parts[n_parts] = (sim_copy_part){ to, from, n };
                done += n;
        }
        if (len == 0) {
                /* An empty copy: a job of no bytes, done in its turn. */
                uint64_t run;
                char *to = sim_mem_at(sim, dst, dst_off, &run);
                char *from = sim_mem_at(sim, src, src_off, &run);

                if (!to || !from)
                        return -EINVAL;
                parts[n_parts++] = (sim_copy_part){ to, from, 0 };
        }
        return sim_copier_submit_parts(sim->copier, queue, urgent, parts,
                                       n_parts, cookie);
}

static int sim_copy_submit(gmd_backend *b, unsigned device, gmd_copy_dir dir,
                           gmd_mem *dst, uint64_t dst_off, gmd_mem *src,
                           uint64_t src_off, uint64_t len, void *cookie)
{
        return sim_copy_queue(b, device, dir, false, dst, dst_off, src,
                              src_off, len, cookie);
}

static int sim_copy_submit_urgent(gmd_backend *b, unsigned device,
                                  gmd_copy_dir dir, gmd_mem *dst,
                                  uint64_t dst_off, gmd_mem *src,
                                  uint64_t src_off, uint64_t len, void *cookie)
{
        return sim_copy_queue(b, device, dir, true, dst, dst_off, src,
                              src_off, len, cookie);
}

static uint64_t sim_copy_preempt_step(gmd_backend *b, unsigned device)
{
        sim_backend *sim = to_sim(b);

        return device < sim->n_devices ? sim_copier_step(sim->copier) : 0;
}

static void sim_copy_reap(gmd_backend *b, gmd_copy_done_fn done, void *ctx)
{
        sim_copier_reap(to_sim(b)->copier, done, ctx);
}

static void sim_destroy(gmd_backend *b)
{
        sim_backend *sim = to_sim(b);

        sim_copier_free(sim->copier);
        for (unsigned i = 0; i < SIM_MAX_DEVICES; i++) {
                sim_arena *a = &sim->arenas[i];

                if (a->base)
                        munmap(a->base, a->size);
                if (a->fd >= 0)
                        close(a->fd);
                for (unsigned k = 0; k < a->n_adopted; k++)
                        close(a->adopted[k].fd);
                free(a->adopted);
                host_arena_clear(&a->ranges);
        }
        free(sim->fail_copies);
        free(sim->vram_others);
        free(b);
}

/* Add [at, end) to the arena in pieces of a->piece (the last one up to
 * twice that): as built at open, after the adopted pieces if any. */
static int sim_arena_build(sim_arena *a, uint64_t at, uint64_t end)
{
        while (at < end) {
                uint64_t n = end - at < 2 * a->piece ? end - at : a->piece;
                int r = host_arena_add(&a->ranges, at, n);

                if (r < 0)
                        return r;
                at += n;
        }
        return 0;
}

/* Make `device`'s arena of `size` bytes (a granularity multiple) in
 * SIM_ARENA_PIECES pieces, in a range of `limit` bytes it may grow to. A
 * memfd reads as zeros and takes no memory until written, so this is
 * cheap at any size. */
static int sim_arena_open(sim_backend *sim, unsigned device, uint64_t size,
                          uint64_t limit)
{
        sim_arena *a = &sim->arenas[device];
        uint64_t piece;
        void *base;

        if (size < sim->granularity)
                return 0;
        if (limit < size)
                limit = size;
        limit -= limit % sim->granularity;
        a->fd = memfd_create("gmd-arena", MFD_CLOEXEC);
        if (a->fd < 0)
                return -errno;
        if (ftruncate(a->fd, (off_t)limit) < 0)
                return -errno;
        base = mmap(NULL, limit, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
        if (base == MAP_FAILED)
                return -errno;
        a->base = base;
        a->size = limit;
        host_arena_init(&a->ranges, sim->granularity, size, limit);
        piece = size / SIM_ARENA_PIECES;
        piece -= piece % sim->granularity;
        if (piece < sim->granularity)
                piece = size;
        a->piece = piece;
        return sim_arena_build(a, 0, size);
}

/* ---- restart recovery ----------------------------------------------------- */

static int sim_arena_pieces(gmd_backend *b, unsigned device,
                            gmd_arena_piece *ret, unsigned max)
{
        sim_backend *sim = to_sim(b);
        const sim_arena *a;
        uint64_t own;
        unsigned n;

        if (device >= sim->n_devices)
                return -EINVAL;
        a = &sim->arenas[device];
        if (a->fd < 0)
                return 0;
        own = a->ranges.built > a->fd_at ? a->ranges.built - a->fd_at : 0;
        n = a->n_adopted + (own > 0);
        if (n > max)
                return -ENOBUFS;
        for (unsigned i = 0; i < n; i++) {
                bool mine = i == a->n_adopted;
                int fd = fcntl(mine ? a->fd : a->adopted[i].fd,
                               F_DUPFD_CLOEXEC, 0);

                if (fd < 0) {
                        int r = -errno;

                        while (i > 0)
                                close(ret[--i].fd);
                        return r;
                }
                ret[i] = (gmd_arena_piece){
                        .offset = mine ? a->fd_at : a->adopted[i].offset,
                        .size = mine ? own : a->adopted[i].size,
                        .fd = fd,
                };
        }
        return (int)n;
}

/* Map the arena's own memfd, from its byte 0, at [at, a->size) of the
 * range, with that many bytes; 0 or -errno. */
static int sim_arena_map_own(sim_arena *a, uint64_t at)
{
        if (ftruncate(a->fd, 0) < 0 || ftruncate(a->fd, (off_t)(a->size - at)) < 0)
                return -errno;
        if (at == a->size)
                return 0;
        if (mmap(a->base + at, a->size - at, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_FIXED, a->fd, 0) == MAP_FAILED)
                return -errno;
        return 0;
}

/* Whether each piece's memfd holds its size: 0, or -EINVAL with the reason
 * logged. */
static int sim_pieces_sized(unsigned device, const gmd_arena_piece *pieces,
                            unsigned n)
{
        for (unsigned i = 0; i < n; i++) {
                struct stat st;

                if (fstat(pieces[i].fd, &st) < 0 || !S_ISREG(st.st_mode) ||
                    (uint64_t)st.st_size < pieces[i].size) {
                        log_warning("sim: device %u: cannot adopt the arena's "
                                    "pieces: the one at %llu MiB is no memfd of "
                                    "its %llu MiB", device,
                                    (unsigned long long)(pieces[i].offset >> 20),
                                    (unsigned long long)(pieces[i].size >> 20));
                        return -EINVAL;
                }
        }
        return 0;
}

static int sim_arena_adopt(gmd_backend *b, unsigned device,
                           const gmd_arena_piece *pieces, unsigned n)
{
        sim_backend *sim = to_sim(b);
        uint64_t end = 0, old_target, served, refused;
        const char *why = NULL;
        sim_piece *adopted;
        sim_arena *a;
        int r;

        if (device >= sim->n_devices)
                return -EINVAL;
        if (n == 0)
                return 0;
        a = &sim->arenas[device];
        if (a->fd < 0)
                why = "the device has no host arena ([pools] host_stock)";
        else if (a->n_adopted > 0 || a->ranges.free.n_out > 0)
                return -EBUSY;
        else if (n >= GMD_ARENA_MAX_PIECES)
                why = "too many pieces";
        else
                (void)host_arena_check_pieces(pieces, n, sim->granularity,
                                              a->size, &end, &why);
        if (why) {
                log_warning("sim: device %u: cannot adopt the arena's %u "
                            "pieces: %s", device, n, why);
                return -EINVAL;
        }
        r = sim_pieces_sized(device, pieces, n);
        if (r < 0)
                return r;
        adopted = calloc(n, sizeof(*adopted));
        if (!adopted)
                return -ENOMEM;

        /* Nothing was handed out: the own memfd's bytes are nobody's, so
         * it may be cut and mapped again after the pieces. */
        for (unsigned i = 0; i < n; i++) {
                if (mmap(a->base + pieces[i].offset, pieces[i].size,
                         PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                         pieces[i].fd, 0) == MAP_FAILED) {
                        r = -errno;
                        goto fail;
                }
                adopted[i] = (sim_piece){ pieces[i].offset, pieces[i].size,
                                          pieces[i].fd };
        }
        r = sim_arena_map_own(a, end);
        if (r < 0)
                goto fail;

        old_target = a->ranges.target;
        served = a->ranges.served;
        refused = a->ranges.refused;
        host_arena_clear(&a->ranges);
        host_arena_init(&a->ranges, sim->granularity,
                        end > old_target ? end : old_target, a->size);
        a->ranges.served = served;
        a->ranges.refused = refused;
        for (unsigned i = 0; i < n && r == 0; i++)
                r = host_arena_add(&a->ranges, pieces[i].offset, pieces[i].size);
        if (r == 0)
                r = sim_arena_build(a, end, a->ranges.target);
        if (r < 0) {
                host_arena_clear(&a->ranges);
                host_arena_init(&a->ranges, sim->granularity, old_target, a->size);
                (void)sim_arena_build(a, 0, old_target);
                goto fail;
        }
        a->adopted = adopted;
        a->n_adopted = n;
        a->fd_at = end;
        log_info("sim: device %u: adopted %u arena pieces, %llu MiB; the "
                 "arena is %llu MiB", device, n,
                 (unsigned long long)(end >> 20),
                 (unsigned long long)(a->ranges.built >> 20));
        return 0;
fail:
        /* As it was: the own memfd over the whole range. */
        (void)sim_arena_map_own(a, 0);
        free(adopted);
        log_warning("sim: device %u: cannot adopt the arena's pieces: %s",
                    device, strerror(-r));
        return r;
}

static int sim_mem_span(gmd_backend *b, const gmd_mem *mem, gmd_extent *ret,
                        unsigned max)
{
        const sim_mem *sm = (const sim_mem *)((const char *)mem -
                                              offsetof(sim_mem, mem));

        (void)b;
        return host_arena_span_parts(&sm->span, ret, max);
}

static int sim_mem_adopt_private(gmd_backend *b, unsigned device,
                                 uint64_t size, const gmd_extent *parts,
                                 unsigned n, gmd_mem **ret_mem)
{
        sim_backend *sim = to_sim(b);
        sim_arena *a;
        sim_mem *sm;
        int r;

        if (device >= sim->n_devices || size == 0 || size % sim->granularity ||
            n > SIM_ARENA_MAX_PARTS)
                return -EINVAL;
        a = &sim->arenas[device];
        if (a->fd < 0)
                return -ENOSPC;
        sm = calloc(1, sizeof(*sm));
        if (!sm)
                return -ENOMEM;
        r = host_arena_adopt_mem(&a->ranges, device, size, parts, n, &sm->span,
                                 &sm->mem);
        if (r < 0) {
                if (r == -EINVAL)
                        log_warning("sim: device %u: cannot adopt a host copy "
                                    "of %llu KiB in %u parts: they do not add "
                                    "up, or one is not free in the arena "
                                    "(unbuilt, overlapping, taken)", device,
                                    (unsigned long long)(size >> 10), n);
                free(sm);
                return r;
        }
        *ret_mem = &sm->mem;
        return 0;
}

static int sim_mem_adopt_fd(gmd_backend *b, gmd_tier tier, unsigned device,
                            uint64_t size, int fd, gmd_mem **ret_mem)
{
        sim_backend *sim = to_sim(b);
        struct stat st;
        sim_mem *sm;
        void *addr;

        if (device >= sim->n_devices || size == 0 || size % sim->granularity ||
            fd < 0)
                return -EINVAL;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < size) {
                log_warning("sim: device %u: cannot adopt a %s allocation of "
                            "%llu KiB: its fd is no memfd that large", device,
                            tier == GMD_TIER_HOST ? "host" : "VRAM",
                            (unsigned long long)(size >> 10));
                return -EINVAL;
        }
        sm = calloc(1, sizeof(*sm));
        if (!sm)
                return -ENOMEM;
        addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (addr == MAP_FAILED) {
                int r = -errno;

                free(sm);
                return r;
        }
        sm->mem.handle = (uint64_t)(uintptr_t)addr;
        sm->mem.fd = fd;
        sm->mem.size = size;
        sm->mem.tier = tier;
        sm->mem.device = device;
        sm->mem.shared = true;
        if (tier == GMD_TIER_VRAM)
                sim->created[device] += size;
        *ret_mem = &sm->mem;
        return 0;
}

/* Every device reaches every other at [sim] peer_rate, when set. The
 * copies themselves run on the device's queues like any other (at
 * [sim] copy_rate): the rate is what the core chooses by. */
static uint64_t sim_peer_rate(gmd_backend *b, unsigned from, unsigned to)
{
        sim_backend *sim = to_sim(b);

        if (from == to || from >= sim->n_devices || to >= sim->n_devices)
                return 0;
        return sim->peer_rate;
}

/* A memfd mapping: every queue reaches it already. */
static int sim_mem_grant(gmd_backend *b, gmd_mem *mem, unsigned device)
{
        (void)mem;
        return device < to_sim(b)->n_devices ? 0 : -EINVAL;
}

static const gmd_backend_ops sim_ops = {
        .name = "sim",
        .shares_device = false,
        .processes_count_imports = true,    /* the hook's figures say so */
        .device_count = sim_device_count,
        .device_info = sim_device_info,
        .device_processes = sim_device_processes,
        .mem_create = sim_mem_create,
        .mem_destroy = sim_mem_destroy,
        .mem_zero = sim_mem_zero,
        .destroy = sim_destroy,
        .set_wake = sim_set_wake,
        .copy_submit = sim_copy_submit,
        .copy_reap = sim_copy_reap,
        .copy_submit_urgent = sim_copy_submit_urgent,
        .copy_preempt_step = sim_copy_preempt_step,
        .mem_create_private = sim_mem_create_private,
        .arena_info = sim_arena_info,
        .arena_grow = sim_arena_grow,
        .link_info = sim_link_info,
        .host_link_info = sim_host_link_info,
        .link_shared_with = sim_link_shared_with,
        .peer_rate = sim_peer_rate,
        .mem_grant = sim_mem_grant,
        .arena_pieces = sim_arena_pieces,
        .arena_adopt = sim_arena_adopt,
        .mem_span = sim_mem_span,
        .mem_adopt_private = sim_mem_adopt_private,
        .mem_adopt_fd = sim_mem_adopt_fd,
};

int backend_sim_open(const gmd_config *config, gmd_backend **ret_backend)
{
        sim_backend *sim = calloc(1, sizeof(*sim));
        const char *fail_copies, *vram_others;
        uint64_t share, room;
        int r;

        if (!sim)
                return -ENOMEM;
        sim->base.ops = &sim_ops;
        sim->n_devices = config->sim_devices;
        sim->vram = config->sim_vram;
        sim->granularity = config->sim_granularity;
        sim->shared_link = config->sim_shared_link;
        sim->peer_rate = config->sim_peer_rate;
        if (sim->n_devices > SIM_MAX_DEVICES)
                sim->n_devices = SIM_MAX_DEVICES;
        for (unsigned i = 0; i < SIM_MAX_DEVICES; i++) {
                sim->arenas[i].fd = -1;
                host_arena_init(&sim->arenas[i].ranges, sim->granularity, 0, 0);
        }
        fail_copies = getenv("GMD_SIM_FAIL_COPIES");
        if (fail_copies && *fail_copies) {
                sim->fail_copies = strdup(fail_copies);
                if (!sim->fail_copies) {
                        sim_destroy(&sim->base);
                        return -ENOMEM;
                }
                log_warning("sim: GMD_SIM_FAIL_COPIES is set: copies fail while "
                            "%s exists (a test hook)", sim->fail_copies);
        }
        vram_others = getenv("GMD_SIM_VRAM_OTHERS");
        if (vram_others && *vram_others) {
                sim->vram_others = strdup(vram_others);
                if (!sim->vram_others) {
                        sim_destroy(&sim->base);
                        return -ENOMEM;
                }
                log_warning("sim: GMD_SIM_VRAM_OTHERS is set: the size in %s "
                            "counts as VRAM used by others (a test hook)",
                            sim->vram_others);
        }
        r = sim_copier_new(2 * sim->n_devices, config->sim_copy_rate,
                           config->swap_preempt_step, &sim->copier);
        if (r == 0)
                r = sim_host_rate_open(sim);
        if (r < 0) {
                sim_destroy(&sim->base);
                return r;
        }
        share = sim->n_devices ? config_host_stock_bytes(config) / sim->n_devices : 0;
        share -= share % sim->granularity;
        room = sim->n_devices ? config_host_limit_bytes(config) / sim->n_devices : 0;
        for (unsigned i = 0; i < sim->n_devices && r == 0; i++)
                r = sim_arena_open(sim, i, share, room);
        if (r < 0) {
                sim_destroy(&sim->base);
                return r;
        }
        *ret_backend = &sim->base;
        return 0;
}
