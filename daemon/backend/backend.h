/*
 * backend — where buffer memory comes from: the small interface between the
 * daemon's bookkeeping and the memory itself.
 *
 * Two backends implement it: `cuda` (CUDA VMM physical allocations exported
 * as POSIX fds, daemon/backend/backend_cuda.c) and `sim` (memfd chunks standing in
 * for VRAM, daemon/backend/backend_sim.c), so every scheduling, protocol and failure
 * path runs where there is no GPU. Both hand out the same thing: a gmd_mem,
 * one physical allocation with an fd a client can map. The daemon keeps the
 * fd for the allocation's life and sends duplicates of it (SCM_RIGHTS does
 * the duplicating) to the owner.
 *
 * All calls are made from the loop thread. Copies between tiers are
 * asynchronous: copy_submit starts one and returns; the backend finishes it
 * on its own threads or streams, then calls the wake function the daemon
 * gave it (from any thread), and the daemon collects what finished with
 * copy_reap on the loop thread.
 */
#ifndef GMD_BACKEND_H
#define GMD_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "extent.h"
#include "gpumem.h"

typedef struct gmd_backend gmd_backend;
typedef struct gmd_config gmd_config;

#define GMD_IPC_HANDLE_SIZE 64   /* CU_IPC_HANDLE_SIZE */

/* One physical allocation. */
typedef struct gmd_mem {
        int fd;            /* exported handle; owned by the gmd_mem; -1 for
                            * a legacy IPC buffer */
        uint64_t size;     /* bytes, a multiple of the device granularity */
        gmd_tier tier;
        unsigned device;
        uint64_t handle;   /* backend's own handle (CUmemGenericAllocationHandle) */
        bool shared;       /* its fd went to a client: it may be mapped or
                            * kept there, so it is never handed out again */
        bool daemon_only;  /* a piece of the host arena (mem_create_private):
                            * no fd (-1), never sent to a client */
        /* VRAM holding the swapped-out bytes of a buffer of device
         * `peer_home` (the peer tier, core/peer.h): set by the core, which
         * counts such memory per pair of devices. */
        bool peer;
        unsigned peer_home;
        /* Legacy IPC buffers only (mem_create_ipc): the CUipcMemHandle a
         * client opens with cudaIpcOpenMemHandle. */
        uint8_t ipc_handle[GMD_IPC_HANDLE_SIZE];
} gmd_mem;

/* A CUDA IPC event (cuda backend only): the daemon records "copy done" on
 * its copy stream into events it created, and makes that stream wait on
 * "last use" events clients recorded. */
typedef struct gmd_event {
        unsigned device;
        uint8_t ipc_handle[GMD_IPC_HANDLE_SIZE];  /* what the peer opens */
} gmd_event;

/* Direction of a copy between tiers. */
typedef enum gmd_copy_dir {
        GMD_COPY_OUT = 0,   /* VRAM -> host (swap-out, eviction) */
        GMD_COPY_IN = 1,    /* host -> VRAM (swap-in, prefetch) */
} gmd_copy_dir;

/* Called by copy_reap for each finished copy: `status` is 0 or a negative
 * errno. */
typedef void (*gmd_copy_done_fn)(void *ctx, void *cookie, int status);

typedef struct gmd_device_info {
        char name[64];
        /* Who the device is, whatever ordinal a process sees it under:
         * its UUID as nvidia-smi prints it ("GPU-8932f937-..."; the cuda
         * backend asks cuDeviceGetUuid, sim makes "GPU-5140dd00-0000-
         * 4000-8000-00000000000N" for its device N) and its PCI bus id
         * ("0000:19:00.0"; sim "0000:8N:00.0"). Clients find their CUDA
         * devices among the daemon's by the UUID (gmd_device_from_cuda). */
        char uuid[GMD_UUID_SIZE];
        char pci_bus_id[GMD_PCI_BUS_ID_SIZE];
        uint64_t total;        /* bytes the device has */
        uint64_t free;         /* bytes free now, as the driver says */
        uint64_t granularity;  /* allocation granularity */
        /* Bytes the backend holds allocated but not handed out (the cuda
         * backend's reserve of pre-created chunks). They are not in `free`:
         * a pool sized from the driver's view gets free + reserved. */
        uint64_t reserved;
        /* Bytes of this device's memory the backend holds allocated, all
         * of it: buffers, VRAM kept for swap-ins, the reserve, legacy IPC
         * buffers. The driver's used bytes (total - free) minus these is
         * memory held outside gpu-memd (core/vram.h): other processes,
         * CUDA contexts, and freed buffers whose fds a client still holds
         * (an exported handle keeps its memory alive after the daemon
         * releases its own). */
        uint64_t own;
        /* Of `free`, what the driver may take for itself as memory is
         * mapped and contexts start (page tables): status does not offer
         * it. cuda: 64 MiB (an allocation of all the free memory read a
         * moment before was refused, two H200s, driver 580); sim: 0. */
        uint64_t slack;
} gmd_device_info;

/* The link between host memory and one device, each way, for planning
 * (clients' prefetch lead) and for the operator (status, metrics). */
typedef struct gmd_link_info {
        /* Bytes per second by gmd_copy_dir (out: VRAM to host, in: host
         * to VRAM); 0 where not known: not measured yet, the measurement
         * skipped (the daemon's log says why), or sim copies unthrottled. */
        uint64_t bytes_per_s[2];
} gmd_link_info;

/* One process using a device's memory, as the driver's management
 * library reports it (NVML on cuda). */
typedef struct gmd_gpu_process {
        uint32_t pid;
        uint64_t bytes;         /* its memory on the device */
} gmd_gpu_process;

/* The host arena of one device: pinned host memory made ahead of demand
 * for swap-outs (mem_create_private). */
typedef struct gmd_arena_info {
        uint64_t target;       /* bytes it is to have ([pools] host_stock,
                                * and what arena_grow added) */
        uint64_t limit;        /* what it may grow to (arena_grow) */
        uint64_t built;        /* bytes pinned so far */
        uint64_t free;         /* of those, not handed out */
        uint64_t largest;      /* the largest free piece */
        uint64_t served;       /* mem_create_private calls served ... */
        uint64_t refused;      /* ... and refused (-ENOSPC) since start */
} gmd_arena_info;

/* The most parts a host copy carved from an arena has, on any backend
 * (mem_span). */
#define GMD_ARENA_MAX_PARTS 64

/* The most pieces an arena has on the cuda backend (larger arenas get
 * larger pieces); sim's has one more than it adopted (arena_pieces). */
#define GMD_ARENA_MAX_PIECES 64

/* One piece of a device's host arena, for restart recovery: the arena's
 * bytes [offset, offset + size) are bytes [0, size) of the memory `fd`
 * names (cuda: a host-located VMM allocation exported as a POSIX fd; sim:
 * a memfd). Offsets and sizes are multiples of the arena's unit (the
 * host granularity). */
typedef struct gmd_arena_piece {
        uint64_t offset;
        uint64_t size;
        int fd;
} gmd_arena_piece;

typedef struct gmd_backend_ops {
        const char *name;
        /* The device is shared with other programs and the daemon's own
         * context: an automatic VRAM pool leaves [pools] vram_reserve free. */
        bool shares_device;
        /* device_processes' figure for a process includes the memory of
         * gpu-memd buffers it imported and maps (core/outside.c then
         * subtracts what its sessions hold in the pool). False on cuda:
         * measured on an H100 (driver 580), NVML counts a VMM allocation
         * to the process that created it (this daemon) only, and one a
         * client holds only through a kept fd to no process at all. */
        bool processes_count_imports;
        /* Number of devices served. */
        unsigned (*device_count)(gmd_backend *backend);
        /* The device's memory as the driver sees it now (cuda:
         * cuMemGetInfo in the device's context, a few µs), and what the
         * backend holds of it. Called at start, at each VRAM allocation
         * and periodically (core/vram.c). */
        int (*device_info)(gmd_backend *backend, unsigned device,
                           gmd_device_info *ret_info);
        /* Create `size` bytes (granularity multiple) on `tier` of `device`,
         * zero-filled, exported as an fd. */
        int (*mem_create)(gmd_backend *backend, gmd_tier tier,
                          unsigned device, uint64_t size, gmd_mem **ret_mem);
        /* Release the allocation and close its fd. Accepts NULL. */
        void (*mem_destroy)(gmd_backend *backend, gmd_mem *mem);
        /* Fill with zeros (before memory is handed to another client). */
        int (*mem_zero)(gmd_backend *backend, gmd_mem *mem);
        void (*destroy)(gmd_backend *backend);

        /* ---- tiering ------------------------------------------------ */

        /* The function to call, from any thread, when copies finished. */
        void (*set_wake)(gmd_backend *backend, void (*wake)(void *ctx),
                         void *ctx);
        /* Copy `len` bytes from `src` at `src_off` to `dst` at `dst_off` on
         * `device`'s queue for `dir`, asynchronously. Both mems stay alive
         * until the copy is reaped. Copies of one direction on one device
         * finish in the order submitted. `len` 0 copies nothing and
         * finishes like a copy: after what that queue holds before it,
         * the last-use events it was made to wait for included (a clean
         * pageout waits for the owner's kernels that way). */
        int (*copy_submit)(gmd_backend *backend, unsigned device,
                           gmd_copy_dir dir, gmd_mem *dst, uint64_t dst_off,
                           gmd_mem *src, uint64_t src_off, uint64_t len,
                           void *cookie);
        /* Hand every finished copy to `done`. Loop thread only. */
        void (*copy_reap)(gmd_backend *backend, gmd_copy_done_fn done,
                          void *ctx);

        /* ---- optional: NULL where a backend has none ---------------- */

        /* As copy_submit, on `device`'s urgent lane for `dir` (an acquire
         * waits for this copy). The copies copy_submit queued for that
         * device and direction that have not run yet pause, at the
         * backend's step ([swap] preempt_step), while an urgent copy is in
         * flight, and go on when none is (cuda: only copies in are
         * stepped). Copies of one lane finish in the order submitted; the
         * two lanes' in any order. Both backends have it (cuda: a second
         * stream and gated steps; sim: its copy thread serves the lane
         * first). */
        int (*copy_submit_urgent)(gmd_backend *backend, unsigned device,
                                  gmd_copy_dir dir, gmd_mem *dst,
                                  uint64_t dst_off, gmd_mem *src,
                                  uint64_t src_off, uint64_t len,
                                  void *cookie);
        /* The step at which `device`'s copies in pause for an urgent one
         * now, 0 when they do not (cuda: no gate, or it retired; the log
         * says why). For status; cheap. */
        uint64_t (*copy_preempt_step)(gmd_backend *backend, unsigned device);

        /* As mem_create, for a buffer whose every byte the daemon writes
         * (a copy's destination) before any client sees it: the backend
         * may skip zeroing and hand out memory that it recycled — memory
         * that was never shared. */
        int (*mem_create_filled)(gmd_backend *backend, gmd_tier tier,
                                 unsigned device, uint64_t size,
                                 gmd_mem **ret_mem);
        /* A swap-out's destination that never leaves the daemon (the host
         * copy of a SWAPPABLE buffer: its owner unmaps and nobody maps the
         * copy), on the HOST tier of `device`, every byte of it written by
         * the copy. Served from the host arena, memory the backend pinned
         * ahead of time ([pools] host_stock), possibly as several pieces,
         * so it has no fd (fd -1, daemon_only set) and copies to and from
         * it go through copy_submit only. -ENOSPC when the arena has no
         * room for it now: the caller makes a whole allocation instead
         * (mem_create_filled), which pins on the spot. */
        int (*mem_create_private)(gmd_backend *backend, unsigned device,
                                  uint64_t size, gmd_mem **ret_mem);
        /* The processes using `device`'s memory and how much each holds,
         * up to `max` of them into `ret`: how many, or -ENOSYS when the
         * backend cannot tell (no NVML: libnvidia-ml.so.1 is loaded at
         * run time when present). Costs more than device_info (NVML
         * asks the kernel driver): called periodically and for status,
         * not per allocation. */
        int (*device_processes)(gmd_backend *backend, unsigned device,
                                gmd_gpu_process *ret, unsigned max);
        /* The host arena of `device`, for logs and status. */
        void (*arena_info)(gmd_backend *backend, unsigned device,
                           gmd_arena_info *ret_info);
        /* Grow `device`'s arena by about `want` bytes (rounded up to the
         * backend's piece, at most `most`, a cap on pinned memory the
         * caller keeps), built off the request path as at start (cuda: the
         * host worker pins it). The bytes it will add, or -ENOSPC when it
         * cannot: no arena, building failed, a growth still under way, or
         * its range (reserved at start for [pools] host_limit) or `most`
         * has no room for `want`. Optional. */
        int64_t (*arena_grow)(gmd_backend *backend, unsigned device,
                              uint64_t want, uint64_t most);
        /* ---- restart recovery (optional) ------------------------------

           What a new gpu-memd needs to take over the memory an old one held:
           the old one gives away fds of its arena pieces (arena_pieces) and
           records where its host copies lie in them (mem_span); the fds
           are kept across the restart (by a keeper outside this layer), and
           the new one, before it builds its arena or takes any host copy,
           maps those pieces back at their offsets (arena_adopt), then
           makes each host copy again from its parts (mem_adopt_private)
           and each whole allocation from its kept fd (mem_adopt_fd). */

        /* `device`'s arena pieces built so far, in offset order, into
         * ret[0..n), each with a NEW fd the caller owns (O_CLOEXEC): n, 0
         * with no arena; -ENOBUFS when there are more than `max` and
         * -errno (a dup failed), both with no fd made. A piece once
         * reported keeps its offset and its memory; its size never
         * shrinks: cuda adds pieces as the arena grows, each a whole
         * allocation of a fixed size (exported once, when the worker
         * built it; asking again dups that export); sim's arena is one
         * memfd after the adopted ones, whose size grows with the
         * arena, so a caller keeps the latest fd of each offset. Cheap:
         * no driver call. The caller asks after start and each time the
         * arena's `built` grows (arena_info). */
        int (*arena_pieces)(gmd_backend *backend, unsigned device,
                            gmd_arena_piece *ret, unsigned max);
        /* At start, before any mem_create_private or arena_grow for
         * `device`: make `pieces` (the previous run's, from arena_pieces)
         * the arena's first ones, each mapped at its offset with its
         * bytes as they are, all of them free; the arena then builds on
         * after them as usual, up to [pools] host_stock's share (or the
         * adopted size, when larger) within host_limit's range. They must
         * come in offset order and cover [0, end) without gap or overlap,
         * sizes unit multiples and > 0, `end` within the range: else
         * -EINVAL, logged with the reason. On success the backend owns
         * the fds (cuda keeps each as the piece's export, sim maps and
         * keeps them for punching freed parts out) and closes them at
         * destroy; on failure they are untouched and the arena is as
         * before (pieces it had built are built again). n = 0: nothing
         * to adopt; an arena held at open (GMD_BACKEND_ARENA_HELD) starts
         * building. cuda: what the worker pinned since open, if it was
         * not held, is released first (unused: no host copy was taken),
         * waiting for a piece being pinned, up to ~0.25 s per GiB; each
         * piece is imported and mapped as a new one is (a piece smaller
         * than its size: -EINVAL), and given device access afterwards,
         * in the background or by the first copy that needs it
         * (backend_cuda_reach.c). -EBUSY when a host copy was taken
         * already. */
        int (*arena_adopt)(gmd_backend *backend, unsigned device,
                           const gmd_arena_piece *pieces, unsigned n);
        /* Where a host copy from the arena (mem_create_private,
         * mem_adopt_private) lies in it: its parts, offsets from the
         * arena's start, in the copy's order, into ret[0..n): n (at most
         * GMD_ARENA_MAX_PARTS); -ENOENT for a mem not from an arena,
         * -ENOBUFS when it has more than `max` parts. */
        int (*mem_span)(gmd_backend *backend, const gmd_mem *mem,
                        gmd_extent *ret, unsigned max);
        /* After arena_adopt: the host copy of `size` bytes (a unit
         * multiple) made of exactly `parts` (what mem_span said in the
         * previous run), as mem_create_private would have returned it
         * (fd -1, daemon_only) with the bytes the pieces hold; it goes
         * back to the arena with mem_destroy. -EINVAL (logged) when a
         * part is not entirely free: outside what is built, overlapping
         * another part or another adopted copy; or when the parts do not
         * add up to `size`. -ENOSPC without an arena. */
        int (*mem_adopt_private)(gmd_backend *backend, unsigned device,
                                 uint64_t size, const gmd_extent *parts,
                                 unsigned n, gmd_mem **ret_mem);
        /* A whole allocation of `size` bytes (a granularity multiple of
         * `tier`) on `tier` of `device` made from `fd`, an fd of memory a
         * previous run created (a buffer's fd a client kept, a host
         * allocation's fd kept across the restart): mapped into the daemon
         * as mem_create's are, counted in device_info's `own` as they are,
         * marked shared (a client may have it), its bytes as they are. On
         * success the mem owns `fd` (mem_destroy closes it); on failure
         * `fd` is untouched. -EINVAL (logged) when the memory is smaller
         * than `size` (sim: fstat; cuda: cuMemMap refuses it) or `fd` is
         * not such memory. After that the mem is like a created one for
         * copies both ways, mem_zero and mem_destroy. */
        int (*mem_adopt_fd)(gmd_backend *backend, gmd_tier tier,
                            unsigned device, uint64_t size, int fd,
                            gmd_mem **ret_mem);

        /* The link of `device` each way: on cuda measured once, soon after
         * start, by timed copies between VRAM and the host arena while no
         * other device copies (backend_cuda_link.c); on sim the
         * configured [sim] copy_rate. Zeros while not known. Cheap: read
         * for every status reply and metrics scrape. */
        void (*link_info)(gmd_backend *backend, unsigned device,
                          gmd_link_info *ret_info);
        /* The host's own limit across the links: bytes per second each
         * way moved by every device copying at once, all devices
         * together. Where the host cannot feed every link at its rate
         * this is below the sum of link_info's figures, which cuda
         * measures each link alone (backend_cuda_link.c, first each
         * link, then all at once); sim gives GMD_SIM_HOST_RATE. Zeros
         * while not known: not measured yet, skipped, or fewer than two
         * links. The copy engine schedules against it (core/copyq.h).
         * Cheap. Optional: absent, nothing is known of it. */
        void (*host_link_info)(gmd_backend *backend, gmd_link_info *ret_info);
        /* The lowest-numbered device whose link to host memory `device`
         * shares (itself when it shares none): the copy engine schedules
         * the copies of devices on one link together (core/copyq.h). On
         * cuda from the PCIe topology (NVML: behind one PCIe switch), on
         * sim [sim] shared_link. Asked once per device at start.
         * Optional: absent, every device has a link of its own. */
        unsigned (*link_shared_with)(gmd_backend *backend, unsigned device);
        /* Off the request path: zero freed chunks, top up the reserve of
         * pre-created chunks, start measuring the links and take their
         * figures once measured (cuda: a thread of its own measures them
         * and wakes the loop when done; copy_reap takes them too, so it
         * never waits on the loop). The daemon calls it from an idle/timer
         * handler (every ~10 ms while it returns > 0 work left, else on a
         * slow timer). Returns how many chunks it still wants to make. */
        int (*maintain)(gmd_backend *backend);
        /* ---- peers (optional: absent, no device reaches another) ------

           Another device's free VRAM as a swap tier (core/peer.h): a
           buffer leaving a full device may go to a peer's VRAM over
           NVLink or PCIe peer-to-peer instead of host memory. */

        /* Bytes per second of copies from `from`'s VRAM to `to`'s, 0 when
         * `from` cannot reach `to` (cuda: cuDeviceCanAccessPeer, then
         * timed copies at start, backend_cuda_peer.c; sim: [sim]
         * peer_rate, or 0). Cheap. */
        uint64_t (*peer_rate)(gmd_backend *backend, unsigned from,
                              unsigned to);
        /* Let copies on `device`'s queues read and write `mem`, VRAM of
         * another device (cuda: cuMemSetAccess on the daemon's mapping;
         * sim: nothing to do). 0 or a negative errno. */
        int (*mem_grant)(gmd_backend *backend, gmd_mem *mem, unsigned device);
        /* Legacy CUDA IPC buffer (GMD_ALLOC_LEGACY_IPC): a cuMemAlloc'd,
         * zero-filled buffer of `size` (2 MiB multiple) with its handle in
         * mem->ipc_handle and mem->fd == -1. Freed with mem_destroy. It
         * cannot move between tiers and dies with the daemon. */
        int (*mem_create_ipc)(gmd_backend *backend, unsigned device,
                              uint64_t size, gmd_mem **ret_mem);
        /* A new interprocess event on `device`; its handle goes to clients. */
        int (*event_create)(gmd_backend *backend, unsigned device,
                            gmd_event **ret_event);
        /* Open a client's event handle. Opening costs ~0.5 ms, so events
         * are cached by handle: the same handle gives the same gmd_event,
         * with one more reference. */
        int (*event_open)(gmd_backend *backend, unsigned device,
                          const uint8_t handle[GMD_IPC_HANDLE_SIZE],
                          gmd_event **ret_event);
        /* Record on the device's copy stream / make that stream wait. */
        int (*event_record)(gmd_backend *backend, gmd_event *event);
        int (*event_wait)(gmd_backend *backend, gmd_event *event);
        /* Drop one reference; accepts NULL. */
        void (*event_unref)(gmd_backend *backend, gmd_event *event);
} gmd_backend_ops;

struct gmd_backend {
        const gmd_backend_ops *ops;
};

/* backend_open's flags. ARENA_HELD: a restore will offer the previous
 * run's host arena pieces (arena_adopt): the backend pins no arena of its
 * own until arena_adopt was called for the device, with those pieces or
 * with none (n = 0), instead of pinning one to release it again. */
#define GMD_BACKEND_ARENA_HELD 1u

/*
 * Open the backend named by the config ("auto", "cuda", "sim"). "auto"
 * picks cuda when a GPU is usable, else sim and logs one notice saying so.
 * On failure returns a negative errno and logs why.
 */
int backend_open(const gmd_config *config, unsigned flags,
                 gmd_backend **ret_backend);

/* Close a backend; accepts NULL, returns NULL. */
gmd_backend *backend_close(gmd_backend *backend);

/*
 * Who the memory an fd names is: fstat's st_dev and st_ino, 0 or -errno.
 * The daemon keeps one fd per allocation and sends clients duplicates of
 * it (SCM_RIGHTS duplicates the open file), so a client's fd of a buffer
 * and the daemon's have the same identity; restart recovery matches a
 * client's claim to a kept fd by it. Exact for sim memfds, each an inode
 * of its own (tests/unit/test_backend_adopt.c). Not for cuda: measured on
 * an H200 (driver 580), every cuMemExportToShareableHandle fd is an open
 * of /dev/nvidiactl, and all of them — two exports of one allocation,
 * exports of different ones — report the same (st_dev, st_ino) (6, 142
 * there); so on cuda this identifies nothing, and restore.c's match
 * accepts any export fd of the claiming client (what that allows is said
 * there). Each export is an open file of its own, shared by its dups and
 * SCM_RIGHTS copies: kcmp(KCMP_FILE) tells exports apart (core/keptfd.h).
 */
int mem_identity(int fd, uint64_t *ret_dev, uint64_t *ret_ino);

int backend_sim_open(const gmd_config *config, gmd_backend **ret_backend);
#ifdef GMD_HAVE_CUDA
/* -ENODEV when no GPU is usable (no driver, no device); then
 * backend_cuda_unusable_reason() says why, in words. */
int backend_cuda_open(const gmd_config *config, gmd_backend **ret_backend);
/* The same with backend_open's flags. */
int backend_cuda_open_flags(const gmd_config *config, unsigned flags,
                            gmd_backend **ret_backend);
const char *backend_cuda_unusable_reason(void);
#endif

#endif
