/*
 * backend_sim — the sim backend: host memory standing in for VRAM, with the
 * cuda backend's contract. A "device" is a budget of [sim] vram bytes; an
 * allocation is a memfd of the rounded size, which the client maps with
 * mmap(MAP_FIXED) at its reserved address, exactly as a VMM fd is imported
 * and mapped. A fresh memfd reads as zeros, so memory is never handed from
 * one client to another with its old contents; mem_zero exists for reuse.
 * Pages are committed as they are touched, so a large simulated device
 * costs nothing until used.
 *
 * The daemon maps every memfd too (the address is kept in gmd_mem.handle),
 * so copies between tiers are plain memcpy, run by sim_copier's worker
 * threads: one per device and direction, like the cuda backend's streams.
 */
#include "backend.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "sim_copier.h"

typedef struct sim_backend {
        gmd_backend base;
        unsigned n_devices;
        uint64_t vram;
        uint64_t granularity;
        uint64_t created[16];   /* bytes alive per device, as a driver counts */
        sim_copier *copier;     /* queue 2 * device + direction */
} sim_backend;

static sim_backend *to_sim(gmd_backend *b)
{
        return (sim_backend *)b;
}

static unsigned sim_device_count(gmd_backend *b)
{
        return to_sim(b)->n_devices;
}

static int sim_device_info(gmd_backend *b, unsigned device,
                           gmd_device_info *ret_info)
{
        sim_backend *sim = to_sim(b);

        if (device >= sim->n_devices)
                return -ENODEV;
        memset(ret_info, 0, sizeof(*ret_info));
        snprintf(ret_info->name, sizeof(ret_info->name), "sim%u", device);
        ret_info->total = sim->vram;
        ret_info->free = sim->vram > sim->created[device] ?
                         sim->vram - sim->created[device] : 0;
        ret_info->granularity = sim->granularity;
        return 0;
}

static int sim_mem_create(gmd_backend *b, gmd_tier tier, unsigned device,
                          uint64_t size, gmd_mem **ret_mem)
{
        sim_backend *sim = to_sim(b);
        char name[32];
        gmd_mem *mem;
        int fd, r;

        if (device >= sim->n_devices || size == 0 || size % sim->granularity)
                return -EINVAL;
        mem = calloc(1, sizeof(*mem));
        if (!mem)
                return -ENOMEM;
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

static void sim_mem_destroy(gmd_backend *b, gmd_mem *mem)
{
        if (!mem)
                return;
        if (mem->tier == GMD_TIER_VRAM)
                to_sim(b)->created[mem->device] -= mem->size;
        munmap((void *)(uintptr_t)mem->handle, mem->size);
        close(mem->fd);
        free(mem);
}

static int sim_mem_zero(gmd_backend *b, gmd_mem *mem)
{
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

static int sim_copy_submit(gmd_backend *b, unsigned device, gmd_copy_dir dir,
                           gmd_mem *dst, uint64_t dst_off, gmd_mem *src,
                           uint64_t src_off, uint64_t len, void *cookie)
{
        sim_backend *sim = to_sim(b);

        if (device >= sim->n_devices || dst_off + len > dst->size ||
            src_off + len > src->size)
                return -EINVAL;
        return sim_copier_submit(sim->copier, 2 * device + dir,
                                 (char *)(uintptr_t)dst->handle + dst_off,
                                 (const char *)(uintptr_t)src->handle + src_off,
                                 len, cookie);
}

static void sim_copy_reap(gmd_backend *b, gmd_copy_done_fn done, void *ctx)
{
        sim_copier_reap(to_sim(b)->copier, done, ctx);
}

static void sim_destroy(gmd_backend *b)
{
        sim_copier_free(to_sim(b)->copier);
        free(b);
}

static const gmd_backend_ops sim_ops = {
        .name = "sim",
        .shares_device = false,
        .device_count = sim_device_count,
        .device_info = sim_device_info,
        .mem_create = sim_mem_create,
        .mem_destroy = sim_mem_destroy,
        .mem_zero = sim_mem_zero,
        .destroy = sim_destroy,
        .set_wake = sim_set_wake,
        .copy_submit = sim_copy_submit,
        .copy_reap = sim_copy_reap,
};

int backend_sim_open(const gmd_config *config, gmd_backend **ret_backend)
{
        sim_backend *sim = calloc(1, sizeof(*sim));
        int r;

        if (!sim)
                return -ENOMEM;
        sim->base.ops = &sim_ops;
        sim->n_devices = config->sim_devices;
        sim->vram = config->sim_vram;
        sim->granularity = config->sim_granularity;
        r = sim_copier_new(2 * sim->n_devices, config->sim_copy_rate, &sim->copier);
        if (r < 0) {
                free(sim);
                return r;
        }
        *ret_backend = &sim->base;
        return 0;
}
