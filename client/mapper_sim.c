/*
 * mapper_sim — the mapper for the sim backend: buffers are memfds that the
 * daemon shares, mapped with mmap into a PROT_NONE reservation.
 *
 * The reservation is an anonymous PROT_NONE mapping; mapping a segment
 * replaces part of it with MAP_FIXED, and "unmapping" puts PROT_NONE
 * anonymous memory back with MAP_FIXED, so the range never becomes free
 * address space that another mmap could take. A remap simply maps the new
 * fds over the old ones: MAP_FIXED swaps each page atomically, so a thread
 * reading the buffer meanwhile sees the old or the new backing (the daemon
 * made both hold the same bytes) and never a hole.
 *
 * Sim memory maps anywhere; what a process could not map on GPUs (another
 * GPU's VRAM it cannot see or reach) is only said (devices.c,
 * gmd__client_reach). A test hook stands for a driver that refuses it all
 * the same: with $GMD_SIM_REFUSE_PEER set (not "" or "0") when the mapper
 * is made, mapping another device's VRAM (a memfd the sim backend named
 * "gmd-vramN", N not the buffer's device) fails with -ENODEV, as the CUDA
 * import of a GPU this process does not see does.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mapper.h"

typedef struct mapper_sim {
        gmd_mapper base;
        bool refuse_peer;       /* $GMD_SIM_REFUSE_PEER (top of file) */
} mapper_sim;

/* Is `fd` the sim backend's VRAM of a device other than `device`? Its
 * memfd's name says ("/memfd:gmd-vram1 (deleted)"). */
static bool other_vram(int fd, unsigned device)
{
        char path[32], target[128];
        unsigned holder;
        ssize_t n;

        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        n = readlink(path, target, sizeof(target) - 1);
        if (n <= 0)
                return false;
        target[n] = '\0';
        return sscanf(target, "/memfd:gmd-vram%u", &holder) == 1 &&
               holder != device;
}

/* The test hook's refusal, for any segment of another device's VRAM. */
static int refused(const gmd_mapper *mapper, unsigned device,
                   const gmd_map_segment *segments, unsigned n)
{
        if (!((const mapper_sim *)mapper)->refuse_peer)
                return 0;
        for (unsigned i = 0; i < n; i++)
                if (other_vram(segments[i].fd, device))
                        return -ENODEV;
        return 0;
}

static int sim_reserve(gmd_mapper *mapper, uint64_t size, void **ret_addr)
{
        void *addr;

        if (size == 0 || size > SIZE_MAX)
                return -EINVAL;
        addr = mmap(NULL, (size_t)size, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (addr == MAP_FAILED)
                return -errno;
        *ret_addr = addr;
        return 0;
}

static void sim_unreserve(gmd_mapper *mapper, void *addr, uint64_t size)
{
        munmap(addr, (size_t)size);
}

static int sim_unmap(gmd_mapper *mapper, void *addr, uint64_t size)
{
        void *p = mmap(addr, (size_t)size, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                       -1, 0);

        return p == MAP_FAILED ? -errno : 0;
}

/* Map every segment over whatever is at its place now. On failure the
 * segments mapped so far are turned back into reservation; the caller
 * decides what the rest of the range holds. */
static int map_over(void *addr, const gmd_map_segment *segments, unsigned n)
{
        unsigned i;
        int r = 0;

        for (i = 0; i < n; i++) {
                const gmd_map_segment *s = &segments[i];
                struct stat st;
                void *p;

                /* A memfd shorter than the segment would map, and SIGBUS on
                 * first touch: refuse it here instead. */
                if (fstat(s->fd, &st) < 0) {
                        r = -errno;
                        break;
                }
                if (st.st_size < 0 || (uint64_t)st.st_size < s->size ||
                    s->size > SIZE_MAX) {
                        r = -EINVAL;
                        break;
                }
                p = mmap((char *)addr + s->offset, (size_t)s->size,
                         PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                         s->fd, 0);
                if (p == MAP_FAILED) {
                        r = -errno;
                        break;
                }
        }
        if (r < 0)
                while (i-- > 0)
                        sim_unmap(NULL, (char *)addr + segments[i].offset,
                                  segments[i].size);
        return r;
}

static int sim_map(gmd_mapper *mapper, void *addr, unsigned device,
                   const gmd_map_segment *segments, unsigned n_segments)
{
        int r = refused(mapper, device, segments, n_segments);

        return r < 0 ? r : map_over(addr, segments, n_segments);
}

static int sim_remap(gmd_mapper *mapper, void *addr, uint64_t size,
                     unsigned device, const gmd_map_segment *segments,
                     unsigned n_segments)
{
        int r = refused(mapper, device, segments, n_segments);

        if (r == 0)
                r = map_over(addr, segments, n_segments);

        if (r < 0)
                sim_unmap(mapper, addr, size);
        return r;
}

static void sim_destroy(gmd_mapper *mapper)
{
        free(mapper);
}

static const gmd_mapper_ops sim_ops = {
        .name = "sim",
        .reserve = sim_reserve,
        .unreserve = sim_unreserve,
        .map = sim_map,
        .unmap = sim_unmap,
        .remap = sim_remap,
        .destroy = sim_destroy,
};

/* Create the sim mapper. Returns 0 or -ENOMEM. */
int gmd__mapper_sim_new(gmd_mapper **ret_mapper)
{
        mapper_sim *m = calloc(1, sizeof(*m));
        const char *refuse = getenv("GMD_SIM_REFUSE_PEER");

        if (!m)
                return -ENOMEM;
        m->base.ops = &sim_ops;
        m->refuse_peer = refuse && *refuse && strcmp(refuse, "0") != 0;
        *ret_mapper = &m->base;
        return 0;
}
