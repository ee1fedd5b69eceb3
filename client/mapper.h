/*
 * mapper — how libgpumem puts a buffer's backing at its stable address.
 *
 * The address range of a buffer is reserved once, when the buffer is
 * allocated, and stays reserved until it is freed; the backing (one or more
 * segments, each an fd the daemon sent) is mapped into it and may later be
 * unmapped and replaced by another backing at the same address (a remap,
 * when the daemon moves the buffer between tiers). Two implementations:
 * sim (mmap of memfds, mapper_sim.c) and cuda (cuMemImportFromShareableHandle
 * + cuMemMap + cuMemSetAccess into a cuMemAddressReserve range,
 * mapper_cuda.c). The daemon's hello reply says which one a connection uses.
 */
#ifndef GMD_MAPPER_H
#define GMD_MAPPER_H

#include <stddef.h>
#include <stdint.h>

#include "devices.h"

/* One piece of backing: `size` bytes of `fd` from its start, placed at
 * `offset` from the buffer's base. */
typedef struct gmd_map_segment {
        int fd;
        uint64_t offset;
        uint64_t size;
} gmd_map_segment;

typedef struct gmd_mapper gmd_mapper;

typedef struct gmd_mapper_ops {
        const char *name;
        /* Reserve `size` bytes of address space, inaccessible until mapped. */
        int (*reserve)(gmd_mapper *mapper, uint64_t size, void **ret_addr);
        /* Give the range back; anything mapped in it is unmapped first. */
        void (*unreserve)(gmd_mapper *mapper, void *addr, uint64_t size);
        /* Map every segment at addr + offset, usable by `device`. The fds
         * are borrowed: the caller still owns them afterwards, whether or
         * not this succeeds (libgpumem keeps them to offer the memory to a
         * restarted daemon, buffer.h). On failure nothing stays mapped. */
        int (*map)(gmd_mapper *mapper, void *addr, unsigned device,
                   const gmd_map_segment *segments, unsigned n_segments);
        /* Unmap the backing; the range stays reserved and inaccessible. */
        int (*unmap)(gmd_mapper *mapper, void *addr, uint64_t size);
        /* Optional (NULL: the library calls unmap, then map). Replace the
         * backing of the mapped range [addr, addr + size) by `segments`
         * without a moment where the range is inaccessible, if the mapper
         * can. Borrows the fds like map. On failure the range is left
         * unmapped (reserved, inaccessible). */
        int (*remap)(gmd_mapper *mapper, void *addr, uint64_t size,
                     unsigned device, const gmd_map_segment *segments,
                     unsigned n_segments);
        void (*destroy)(gmd_mapper *mapper);

        /* ---- optional, cuda only (NULL in sim) ---------------------- */

        /* The daemon's devices (a bit each) whose memory this process can
         * map for use on the daemon's `device`: itself and those its
         * driver says `device` reaches (peer access), among the GPUs this
         * process sees; 0 when it does not see `device`. Sim's answer is
         * devices.c's (gmd__client_reach). */
        uint64_t (*reach)(gmd_mapper *mapper, unsigned device);
        /* Peer access (gmd_peer_access): the daemon's devices (a bit
         * each) given access too, beside `device` itself, to what is
         * mapped for use on `device` from now on. A map whose extra
         * access the driver refuses gives `device` its own all the same:
         * peers then copy the slower way, nothing fails. */
        void (*set_peers)(gmd_mapper *mapper, unsigned device,
                          uint64_t peers);
        /* Give the daemon's devices in `peers` access to the mapped
         * range [addr, addr + size) of a buffer of `device` as well.
         * 0 or -errno. */
        int (*grant)(gmd_mapper *mapper, void *addr, uint64_t size,
                     unsigned device, uint64_t peers);

        /* Legacy IPC buffer (GMD_ALLOC_LEGACY_IPC): open the daemon's
         * 64-byte CUipcMemHandle on `device`. The address is chosen by the
         * driver (no stable reservation) and is only valid while the daemon
         * lives. ipc_close takes the address ipc_open returned. */
        int (*ipc_open)(gmd_mapper *mapper, unsigned device,
                        const uint8_t handle[64], void **ret_addr);
        int (*ipc_close)(gmd_mapper *mapper, unsigned device, void *addr);
        /* IPC events: the returned pointer is a CUevent (cudaEvent_t). An
         * opened handle is cached for the mapper's life (opening costs
         * ~0.5 ms); created events are the caller's (cudaEventDestroy). */
        int (*event_open)(gmd_mapper *mapper, unsigned device,
                          const uint8_t handle[64], void **ret_event);
        int (*event_create)(gmd_mapper *mapper, unsigned device,
                            void **ret_event, uint8_t ret_handle[64]);
        /* Record an event from event_create on `stream` (a CUstream or
         * cudaStream_t; NULL: the default stream), in the device's
         * primary context. */
        int (*event_record)(gmd_mapper *mapper, unsigned device, void *event,
                            void *stream);
        /* Destroy an event from event_create. */
        void (*event_destroy)(gmd_mapper *mapper, unsigned device, void *event);
} gmd_mapper_ops;

struct gmd_mapper {
        const gmd_mapper_ops *ops;
};

int gmd__mapper_sim_new(gmd_mapper **ret_mapper);
#ifdef GMD_HAVE_CUDA
/* For the daemon's `n_ids` devices as the hello named them (their UUIDs
 * find this process's CUDA ordinal of each). -ENOTSUP when no CUDA driver
 * can be loaded in this process. */
int gmd__mapper_cuda_new(const gmd__device_id *ids, unsigned n_ids,
                         gmd_mapper **ret_mapper);
#endif

#endif
