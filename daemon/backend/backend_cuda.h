/*
 * backend_cuda — internals shared by the cuda backend's files. Nothing
 * outside daemon/backend_cuda*.c (and the GPU test of the backend) includes
 * this; the daemon sees only daemon/backend/backend.h.
 *
 * The backend is split by job, one file each:
 *   backend_cuda.c          driver, devices and their contexts, the ops
 *                           table, open and close
 *   backend_cuda_mem.c      VMM allocations: create, export, map into the
 *                           daemon, zero, destroy
 *   backend_cuda_reserve.c  the per-device reserve of pre-created chunks and
 *                           its upkeep (maintain)
 *   backend_cuda_ipc.c      legacy CUDA IPC buffers (cuMemAlloc +
 *                           cuIpcGetMemHandle)
 *   backend_cuda_event.c    CUDA IPC events and their cache
 *   backend_cuda_copy.c     the copy engine: two streams (lanes) per device
 *                           and direction, completions through host
 *                           functions
 *   backend_cuda_gate.c     the gate that pauses a bulk lane's copies while
 *                           an urgent one runs
 *   backend_cuda_host.c     the HOST tier: the host arena pinned ahead of
 *                           swap-outs, and the worker thread that builds it
 *                           and releases other host allocations
 *   backend_cuda_adopt.c    restart recovery: the arena's pieces handed
 *                           on and adopted back, host copies made again
 *                           from their parts
 *   backend_cuda_nvml.c     the processes holding a device's memory (NVML,
 *                           loaded at run time when present)
 *   backend_cuda_peer.c     devices that reach each other's VRAM (the
 *                           peer tier): which, how fast, access
 *   backend_cuda_link.c     the links between host memory and the
 *                           devices, measured once each way soon after
 *                           start, each alone and then all at once, on a
 *                           thread of its own
 * Everything runs on the daemon's loop thread except three things, each
 * behind its own mutex: the copy engine's host functions (driver threads
 * mark copies finished), the host worker (it creates and releases pinned
 * host allocations, which take milliseconds to seconds) and the link
 * measurement's thread (its copies, on streams of its own, and their
 * waits).
 */
#ifndef GMD_BACKEND_CUDA_H
#define GMD_BACKEND_CUDA_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cuda_driver.h"
#include "host_arena.h"

/* Legacy IPC buffers are cuMemAlloc'd in whole 2 MiB steps: below that
 * the driver may sub-allocate, and a handle names the whole underlying
 * allocation, neighbours included. */
#define CUDA_IPC_ALIGN (2ull << 20)

typedef struct cuda_mem {
        gmd_mem mem;
        CUdeviceptr va;          /* the daemon's own mapping (or cuMemAlloc) */
        bool ipc;                /* legacy: cuMemAlloc'd, freed by cuMemFree */
        /* A piece of the device's host arena (mem.daemon_only): no
         * allocation, fd or mapping of its own (va is 0); its bytes are
         * the span's parts, offsets from the arena's base, in order. */
        gmd_arena_span span;
        struct cuda_mem *next;   /* reserve stack / host worker's list */
} cuda_mem;

typedef struct cuda_backend cuda_backend;

/* The gate of one device's bulk lane one way (backend_cuda_gate.c): that
 * lane's copies are queued in steps ([swap] preempt_step), each behind a
 * cuStreamWaitValue32 on `word` for its step number; the word says the
 * last step that may run. While an urgent copy of that device and
 * direction is in flight the word is set back, and the steps not started
 * wait. Under copy_lock but for `word_dev` and `step` (set at open) and
 * `queued` (the loop thread's alone). */
typedef struct cuda_gate {
        volatile uint32_t *word; /* in pinned host memory; NULL: no gate */
        CUdeviceptr word_dev;    /* the same word, for the GPU */
        uint64_t step;           /* bytes per step */
        uint32_t queued;         /* the last step queued (loop thread) */
        uint32_t open_to;        /* the last step let run when open */
        unsigned urgent;         /* urgent copies of this epoch in flight,
                                  * not heard yet */
        uint32_t epoch;          /* bumped when the copies in flight are
                                  * given up on (overdue, release) */
        unsigned stale;          /* copies given up on, not heard yet: no
                                  * shutting while one is ahead */
        bool shut;               /* set back by an urgent copy now */
        uint64_t shut_heard;     /* urgent copies that ended while it was
                                  * shut: the urgent lane runs past it */
        uint64_t closed;         /* times an urgent copy shut it */
        uint64_t overdue;        /* times the watcher opened it early */
        bool retired;            /* open for good, no more steps: urgent
                                  * copies given up on GATE_OVERDUE_MAX
                                  * times and none ever ended with it shut */
} cuda_gate;

/* Does `g` step its lane's copies and shut for urgent ones (a word, not
 * retired)? copy_lock held: the watcher may retire it. */
static inline bool cuda_gate_on(const cuda_gate *g)
{
        return g && g->word && !g->retired;
}

/* One copy handed to a stream: `done` is recorded after it on the copy
 * stream, and the notify stream's host function marks it fired. Records
 * are recycled with their event (loop thread only). */
typedef struct cuda_copy {
        struct cuda_copy *next;  /* in-flight list, or the free list */
        cuda_backend *backend;
        CUevent done;
        void *cookie;
        bool fired;              /* under cuda_backend.copy_lock */
        bool called;             /* its host function ran (copy_lock): it
                                  * may be reused only then, or that host
                                  * function would mark the next copy */
        /* The watcher's (backend_cuda_watch.c), under copy_lock: */
        uint64_t gen;            /* which submit this record is for */
        uint64_t due_us;         /* when it should end (now_us clock) */
        uint64_t poll_us;        /* when to query its event next */
        /* An urgent lane's record: the gate its end opens (heard under
         * copy_lock, by the watcher or the host function), and the gate's
         * epoch when it was counted. NULL else. */
        cuda_gate *gate;
        uint32_t gate_epoch;
} cuda_copy;

/* One direction of one device: the stream copies run on, the stream
 * their host functions run on (waiting on each copy's event, so a host
 * function never holds the next copy back), and what is in flight,
 * oldest first. The list changes under copy_lock (the watcher reads it);
 * records are added and taken off by the loop thread only, and only
 * `fired` flags change elsewhere. */
typedef struct cuda_queue {
        CUstream stream;
        CUstream notify;
        cuda_copy *head, *tail;
        cuda_copy *spare;        /* reaped records, events kept (an event
                                  * belongs to its device's context) */
        /* Reaped records whose host function has not run yet (the watcher
         * heard them first), oldest first: spare once it ran. */
        cuda_copy *retired, *retired_tail;
        unsigned n_inflight;
        int error;               /* the stream failed: every copy fails */
        /* Copies ever submitted: the link measurement compares the count
         * before and after each of its copies to know it ran alone. */
        uint64_t n_submitted;
        uint64_t last_due_us;    /* when its last copy should end */
        /* The bulk lane's gate (its steps wait on it), or the urgent
         * lane's (its copies close it while in flight). */
        cuda_gate *gate;
        bool urgent;             /* the urgent lane */
} cuda_queue;

/* A device's queues: by gmd_copy_dir, the bulk lane (copy_submit), then
 * the urgent lane (copy_submit_urgent). */
#define CUDA_QUEUES 4
#define CUDA_QUEUE_URGENT 2      /* + dir */

/* The thread that hears copies end by polling their events near their
 * expected end (backend_cuda_watch.c). Its flags are under copy_lock. */
typedef struct cuda_watch {
        pthread_t thread;
        pthread_cond_t cond;     /* a copy queued, or stop */
        bool started, stopping;
        uint64_t gen;            /* records queued so far */
        uint64_t queries, heard; /* events queried; copies heard first */
} cuda_watch;

/* The host arena of one device (backend_cuda_host.c): one VA range of
 * `target` bytes in the daemon, filled from its start with host-located
 * allocations of up to CUDA_ARENA_PIECE each as the worker pins them, and
 * carved into the host copies of swap-outs. A copy cannot span two
 * physical allocations, so no free range crosses a piece's edge; a host
 * copy may be up to CUDA_ARENA_MAX_PARTS ranges instead. */
#define CUDA_ARENA_PIECE (1ull << 30)
#define CUDA_ARENA_MAX_PARTS 32
#define CUDA_ARENA_MAX_PIECES GMD_ARENA_MAX_PIECES  /* larger arenas get
                                                     * larger pieces */

/* One piece of an arena: a host-located allocation mapped at base +
 * offset, and its export, made once (arena_pieces hands out dups of it),
 * or the fd it was imported from (arena_adopt). */
typedef struct cuda_arena_piece {
        CUmemGenericAllocationHandle handle;
        uint64_t offset;
        uint64_t size;
        int fd;                  /* -1: not exported (the export failed) */
} cuda_arena_piece;

typedef struct cuda_arena {
        CUdeviceptr base;        /* reserved at open; 0: no arena */
        /* Under cuda_host.lock: */
        gmd_host_arena ranges;   /* target, bytes pinned and mapped from
                                  * base (built), what is free, counts */
        uint64_t piece;          /* bytes per piece (the last may be less) */
        cuda_arena_piece pieces[CUDA_ARENA_MAX_PIECES];  /* in offset order */
        unsigned n_pieces;
        bool failed;             /* a piece failed: building stopped */
        bool building;           /* the worker is pinning a piece of it,
                                  * the lock dropped */
        bool adopting;           /* arena_adopt is replacing its pieces:
                                  * the worker leaves it alone */
        bool adopted;            /* its first pieces are a previous run's */
        bool held;               /* opened with GMD_BACKEND_ARENA_HELD: the
                                  * worker builds nothing until
                                  * arena_adopt */
        /* The adopted pieces, pieces[0, n_reach), get their device access
         * after adoption (backend_cuda_reach.c): reach[k] is pieces[k]'s
         * CUDA_REACH_*; `unreached` counts those not yet DONE. Written
         * under no lock: n_reach once, before `unreached` is published. */
        unsigned n_reach;
        _Atomic unsigned char reach[CUDA_ARENA_MAX_PIECES];
        atomic_uint unreached;
        uint64_t reach_start_us;
} cuda_arena;

enum { CUDA_REACH_NONE = 0, CUDA_REACH_SETTING, CUDA_REACH_DONE,
       CUDA_REACH_FAILED };

/* Where the measurement of a device's link, or of them all, stands
 * (backend_cuda_link.c, whose top comment has the changes allowed). */
typedef enum cuda_link_state {
        CUDA_LINK_PENDING = 0,   /* not yet: waiting for its host arena */
        CUDA_LINK_COPYING,       /* the measurement's thread has it */
        CUDA_LINK_DONE,          /* measured: the figures hold it */
        CUDA_LINK_SKIPPED,       /* not possible; logged once, zeros */
} cuda_link_state;

/* One device's link. Loop thread only: the measurement's thread keeps
 * its own figures and hands them over when it is over. */
typedef struct cuda_link {
        cuda_link_state state;
        uint64_t bytes_per_s[2]; /* alone, by gmd_copy_dir */
        uint64_t together[2];    /* its part with every device copying */
        uint64_t first_try_us;   /* the first maintain that tried (now_us) */
} cuda_link;

/* The measurement's thread and what it measures (backend_cuda_link.c). */
typedef struct cuda_link_run cuda_link_run;

/* The measurement of every link (backend_cuda_link.c). Loop thread only;
 * the run is shared with its thread under its own lock. */
typedef struct cuda_links {
        cuda_link_state state;   /* PENDING until the thread starts */
        cuda_link_run *run;      /* while the thread runs or is not
                                  * joined yet */
        uint64_t host_bytes_per_s[2];  /* every device at once, in all;
                                        * 0: not measured */
        uint64_t patience_us;    /* for idle copy streams: 0 is
                                  * LINK_PATIENCE_US (the unit test's is
                                  * shorter) */
} cuda_links;

typedef struct cuda_event {
        gmd_event event;
        CUevent handle;
        unsigned refs;
        bool imported;           /* opened from a peer's handle: cached */
        struct cuda_event *next; /* cache list of imported events */
} cuda_event;

typedef struct cuda_device {
        CUdevice dev;
        CUcontext ctx;           /* primary context, retained */
        CUstream stream;         /* non-blocking: zeroing, events */
        cuda_queue queues[CUDA_QUEUES];  /* copies: see CUDA_QUEUES */
        cuda_gate gates[2];      /* the bulk lanes', by gmd_copy_dir (only
                                  * the lane in has a word: the urgent copies
                                  * are swap-ins) */
        void *gate_page;         /* pinned host memory of its word */
        char name[64];
        char uuid[GMD_UUID_SIZE];             /* "GPU-..." */
        char pci_bus_id[GMD_PCI_BUS_ID_SIZE]; /* "0000:19:00.0" */
        uint64_t total;
        uint64_t granularity;
        uint64_t host_granularity;   /* 0: HOST tier not supported */
        int host_numa_id;
        /* One chunk never handed out: with no allocation left alive in
         * the process, the driver makes the next export and the last
         * release cost ~0.6 ms each instead of ~0.1 (measured on H200).
         * Kept even with the reserve off. */
        cuda_mem *anchor;
        cuda_mem *reserve;       /* clean chunks, zeroed and exported */
        unsigned n_reserve;
        /* After a failed top-up, maintain leaves the device alone until
         * then (now_us clock), so a full GPU does not log 100 errors a
         * second. */
        uint64_t refill_after_us;
        cuda_arena arena;
        /* Bytes of VRAM alive that this backend created (cuMemCreate on
         * the device, cuMemAlloc of legacy IPC buffers), reserve and
         * anchor included: device_info's `own`. Loop thread only. */
        uint64_t vram_own;
        void *nvml_handle;       /* its NVML device, once found
                                  * (backend_cuda_nvml.c) */
        cuda_link link;          /* its link to host memory */
} cuda_device;

/* The worker that pins the host arenas and releases host allocations
 * (unpinning takes as long as pinning). */
typedef struct cuda_host {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        pthread_cond_t idle;     /* broadcast when a piece is built:
                                  * arena_adopt waits for `building` */
        pthread_t thread;
        bool started, stopping;
        cuda_mem *to_free;       /* whole host allocations to release */
        uint64_t build_start_us; /* when building (or a growth) began */
        uint64_t build_from;     /* bytes pinned, all arenas, then */
        uint64_t progress_us;    /* last progress line */
} cuda_host;

struct cuda_backend {
        gmd_backend base;
        const gmd_cuda_driver *cu;
        unsigned reserve_target; /* [pools] cuda_reserve_chunks */
        uint64_t preempt_step;   /* [swap] preempt_step: the gates' step */
        /* [pools] vram_reserve: the reserve is topped up only while the
         * driver's free memory stays above this, so it never takes what
         * the daemon leaves to other programs. */
        uint64_t free_floor;
        cuda_event *events;      /* imported events, by handle */
        /* Copy engine: host functions mark copies fired and wake the
         * loop. */
        pthread_mutex_t copy_lock;
        bool copy_lock_ready;
        void (*wake)(void *ctx);
        void *wake_ctx;
        cuda_copy *zombies;      /* failed copies whose host function
                                  * never ran: freed at close */
        cuda_watch watch;
        cuda_host host;
        cuda_links links;
        /* [from * n_devices + to]: bytes/s of copies from one device's
         * VRAM into another's, 0 where it cannot reach it
         * (backend_cuda_peer.c). */
        uint64_t *peer_rates;
        unsigned n_devices;
        cuda_device devices[];
};

/* ---- backend_cuda.c ----------------------------------------------------- */

/* Make `d`'s context current on the calling thread; 0 or -errno. */
int cuda_device_enter(cuda_backend *b, cuda_device *d);

/* The device of that index, or NULL when there is none. */
cuda_device *cuda_device_get(cuda_backend *b, unsigned device);

/* Log a failed driver call ("what: CUDA_ERROR_... (text)") and return it
 * as a negative errno; 0 for CUDA_SUCCESS. */
int cuda_check(cuda_backend *b, CUresult res, const char *what);

/* ---- backend_cuda_peer.c ------------------------------------------------ */

/* Which devices reach each other's VRAM, and how fast (timed copies,
 * when `probe`: not when [pools] peer_tier is off); 0 or -ENOMEM. */
int cuda_peer_open(cuda_backend *b, bool probe);
void cuda_peer_close(cuda_backend *b);
uint64_t cuda_ops_peer_rate(gmd_backend *backend, unsigned from, unsigned to);
int cuda_ops_mem_grant(gmd_backend *backend, gmd_mem *mem, unsigned device);

/* ---- backend_cuda_watch.c ----------------------------------------------- */

/* Start the watcher thread; 0 or -errno (copies are then heard by their
 * host functions alone). */
int cuda_watch_start(cuda_backend *b);

/* Stop it and wait for it; before the copy queues close. */
void cuda_watch_stop(cuda_backend *b);

/* Loop thread, copy_lock held: `c`, `len` bytes, was just queued on `q`
 * (a copy of device `d`, direction `dir`): append it to the in-flight
 * list, reckon when it should end from the link's rate, and let the
 * watcher know. */
void cuda_watch_queued(cuda_backend *b, cuda_device *d, cuda_queue *q,
                       gmd_copy_dir dir, cuda_copy *c, uint64_t len,
                       uint64_t now);

/* One round of the watcher (copy_lock held; dropped around each driver
 * call): query the event of each queue's first copy not heard of yet
 * whose time has come, mark those that ended and wake the loop. Returns
 * when the next query is due (now_us clock), UINT64_MAX when nothing is
 * in flight. The thread's body; the unit tests call it directly. */
uint64_t cuda_watch_step(cuda_backend *b, uint64_t now);

/* ---- backend_cuda_mem.c ------------------------------------------------- */

static inline cuda_mem *cuda_mem_of(gmd_mem *mem)
{
        return (cuda_mem *)((char *)mem - offsetof(cuda_mem, mem));
}

/* Create, export, map into the daemon and zero one VMM allocation of
 * `size` on `tier`. The device's context must be current. 0 or -errno
 * (logged). */
int cuda_mem_new(cuda_backend *b, cuda_device *d, unsigned device,
                 gmd_tier tier, uint64_t size, cuda_mem **ret_mem);

/* Undo cuda_mem_new, every step tolerating "not done". Accepts NULL. */
void cuda_mem_free(cuda_backend *b, cuda_mem *m);

/* The same, zeroing on `stream` (any thread with the context current;
 * the host worker passes its own). */
int cuda_mem_make(cuda_backend *b, cuda_device *d, unsigned device,
                  gmd_tier tier, uint64_t size, CUstream stream,
                  cuda_mem **ret_mem);
/* cuda_mem_make, zeroing only when `zero` (a copy's destination needs
 * none: the copy overwrites it whole before anyone sees it). */
int cuda_mem_make_as(cuda_backend *b, cuda_device *d, unsigned device,
                     gmd_tier tier, uint64_t size, CUstream stream, bool zero,
                     cuda_mem **ret_mem);

/* Zero `size` bytes at `va` on `stream` and wait for it. */
int cuda_fill_zero(cuda_backend *b, CUstream stream, CUdeviceptr va,
                   uint64_t size);

/* The ops. */
int cuda_ops_mem_create_filled(gmd_backend *backend, gmd_tier tier,
                               unsigned device, uint64_t size, gmd_mem **ret_mem);
int cuda_ops_mem_create(gmd_backend *backend, gmd_tier tier, unsigned device,
                        uint64_t size, gmd_mem **ret_mem);
void cuda_ops_mem_destroy(gmd_backend *backend, gmd_mem *mem);
int cuda_ops_mem_zero(gmd_backend *backend, gmd_mem *mem);
int cuda_ops_mem_adopt_fd(gmd_backend *backend, gmd_tier tier,
                          unsigned device, uint64_t size, int fd,
                          gmd_mem **ret_mem);

/* ---- backend_cuda_reserve.c --------------------------------------------- */

/* Create the device's anchor chunk and fill its reserve (backend open).
 * 0, or -errno when not even the anchor could be made. */
int cuda_reserve_open(cuda_backend *b, cuda_device *d, unsigned device);

/* A ready chunk of exactly one granule, or NULL when the reserve is
 * empty. The fast path of mem_create. */
cuda_mem *cuda_reserve_take(cuda_device *d);

/* Give every reserve chunk back to the driver (on out-of-memory); returns
 * how many there were. The anchor stays. */
unsigned cuda_reserve_drain(cuda_backend *b, cuda_device *d);

/* Drain, and free the anchor too (backend teardown). */
void cuda_reserve_close(cuda_backend *b, cuda_device *d);

/* Bytes the backend holds created but not handed out on `d`. */
uint64_t cuda_reserve_bytes(const cuda_device *d);

int cuda_ops_maintain(gmd_backend *backend);

/* ---- backend_cuda_ipc.c ------------------------------------------------- */

int cuda_ops_mem_create_ipc(gmd_backend *backend, unsigned device,
                            uint64_t size, gmd_mem **ret_mem);

/* Free a legacy IPC buffer (mem_destroy of one with m->ipc set). */
void cuda_ipc_free(cuda_backend *b, cuda_mem *m);

/* ---- backend_cuda_copy.c ------------------------------------------------ */

/* Streams of `d` (context current) and the lock; 0 or -errno. */
int cuda_copy_open(cuda_backend *b, cuda_device *d);
/* Free records and destroy their events (context current). */
void cuda_copy_list_free(cuda_backend *b, cuda_copy *list);
/* Wait for what is in flight, destroy the streams, drop unreaped copies. */
void cuda_copy_close(cuda_backend *b, cuda_device *d);
/* Loop thread, from maintain: notice a stream that failed without its host
 * functions running; wakes the loop so reap reports it. */
void cuda_copy_poll(cuda_backend *b);
/* Have `q`'s notify stream wake the loop (the daemon's wake function,
 * then copy_reap) once `after`, recorded on q's copy stream, happened:
 * how the link measurement learns soon that its copy is over. The device's
 * context is current. 0 or -errno (logged). */
int cuda_copy_wake_after(cuda_backend *b, cuda_queue *q, CUevent after);

void cuda_ops_set_wake(gmd_backend *backend, void (*wake)(void *ctx),
                       void *ctx);
int cuda_ops_copy_submit(gmd_backend *backend, unsigned device,
                         gmd_copy_dir dir, gmd_mem *dst, uint64_t dst_off,
                         gmd_mem *src, uint64_t src_off, uint64_t len,
                         void *cookie);
int cuda_ops_copy_submit_urgent(gmd_backend *backend, unsigned device,
                                gmd_copy_dir dir, gmd_mem *dst,
                                uint64_t dst_off, gmd_mem *src,
                                uint64_t src_off, uint64_t len, void *cookie);
void cuda_ops_copy_reap(gmd_backend *backend, gmd_copy_done_fn done,
                        void *ctx);

/* ---- backend_cuda_gate.c ------------------------------------------------ */

/* Give `d`'s bulk lane in a gate of `step` bytes (context current; the
 * lane out is never gated): pinned host memory for its word, and one
 * gated step tried on a stream, so a driver without stream memory
 * operations is found here. 0 with the gate, or with none (step 0,
 * CUDA_DEVICE_MAX_CONNECTIONS below 8, or it cannot work: logged once,
 * urgent copies then share the link with the others' chunks); -errno only
 * for what fails the device (out of memory). */
int cuda_gate_open(cuda_backend *b, cuda_device *d, uint64_t step);
/* Open every gate of `d` and give up on the urgent copies in flight
 * (copy_lock held): before its streams are waited for at close, and when
 * a stream failed. A later urgent copy shuts it again; one heard late
 * changes nothing. */
void cuda_gate_release(cuda_device *d);
/* copy_lock held: urgent copy `c`, first on its lane, is GATE_OVERDUE_US
 * past its time: unless given up on already, open its gate and give up
 * on the copies counted in flight (a new epoch: their ends count no
 * more, and the gate is not shut again until they are heard). The
 * GATE_OVERDUE_MAXth time, if no urgent copy ever ended with the gate
 * shut, retire the gate (open for good, copies in no longer stepped).
 * 1 the first time, 2 when it retires (the caller logs those), else 0. */
int cuda_gate_overdue(cuda_copy *c);
/* How late an urgent copy may run before the gate opens anyway. */
#define GATE_OVERDUE_US 20000
/* Open every gate of `d` for good, no more steps (copy_lock held): with
 * no watcher thread, nothing would open a gate whose urgent copy the
 * GPU holds behind it. */
void cuda_gate_retire(cuda_device *d);
/* The copy_preempt_step op: the gate's step in, 0 with none or retired. */
uint64_t cuda_ops_copy_preempt_step(gmd_backend *backend, unsigned device);
/* Free the words' memory; after the streams are gone. */
void cuda_gate_close(cuda_backend *b, cuda_device *d);
/* Queue `n` bytes from `from` to `to` on the bulk lane `q`, in steps,
 * each behind the gate, which opens for them first unless an urgent copy
 * is in flight (takes copy_lock). Without a gate, one cuMemcpyAsync. 0 or
 * -errno (logged); steps queued before a failure still run. Loop thread. */
int cuda_gate_copy(cuda_backend *b, cuda_queue *q, CUdeviceptr to,
                   CUdeviceptr from, uint64_t n);
/* copy_lock held: urgent copy `c` is queued (shut its gate, noting the
 * epoch) / was heard (open it when it was the last of its epoch in
 * flight). Records without a gate (bulk ones) are left alone. */
void cuda_gate_urgent(cuda_copy *c);
void cuda_gate_heard(cuda_copy *c);

/* ---- backend_cuda_host.c ------------------------------------------------ */

/* Reserve each device's arena (`total` bytes split evenly; 0: none), in a
 * range of `limit` bytes split evenly, what it may grow to, and start the
 * worker that pins it; `held`: it pins nothing for an arena until
 * arena_adopt was called for its device. 0 or -errno. */
int cuda_host_open(cuda_backend *b, uint64_t total, uint64_t limit,
                   bool held);
/* Whether the worker is pinning a piece of some arena now or will (a
 * build or a growth under way). Call with cuda_host.lock held. */
bool cuda_host_pinning(cuda_backend *b);
/* Map `bytes` of allocation `h` at `at` in `d`'s arena and let the device
 * read and write them (context current); on failure nothing is mapped.
 * 0 or -errno (logged). */
int cuda_arena_map(cuda_backend *b, cuda_device *d, CUdeviceptr at,
                   uint64_t bytes, CUmemGenericAllocationHandle h);
/* Export an arena piece's allocation as a POSIX fd (CLOEXEC); -1 when
 * the driver refuses (logged). */
int cuda_arena_export(cuda_backend *b, CUmemGenericAllocationHandle h);
/* Stop the worker after it released what it was given; free the arenas. */
void cuda_host_close(cuda_backend *b);

/* ---- backend_cuda_reach.c ----------------------------------------------- */

/* Give `d` access to the adopted arena pieces under [at, at + len) of its
 * arena that lack it, waiting for another thread already giving it; any
 * thread (the caller's context stays current). 0 at once when every adopted
 * piece has it; else 0 or -errno (logged). */
int cuda_arena_reach(cuda_backend *b, cuda_device *d, uint64_t at,
                     uint64_t len);
/* The host worker's share: give access to one adopted piece of some
 * arena that has not had it tried (CUDA_REACH_NONE). true when there was
 * one (given access or not). */
bool cuda_arena_reach_next(cuda_backend *b);
/* Whether some arena has adopted pieces without access. */
bool cuda_arena_unreached(const cuda_backend *b);
/* mem_create(HOST): a whole allocation of its own, made here (it pins);
 * zeroed unless `filled` (a copy overwrites it whole). */
int cuda_host_create(cuda_backend *b, cuda_device *d, unsigned device,
                     uint64_t size, bool filled, cuda_mem **ret_mem);
/* mem_destroy(HOST): an arena piece goes back to its arena; a whole
 * allocation to the worker, which releases it. */
void cuda_host_destroy(cuda_backend *b, cuda_mem *m);
/* The device address of byte `off` of `m` and how many bytes from there
 * are contiguous (the rest of the part, or of the allocation); 0 when
 * `off` is past the end or `m` is not mapped in the daemon. */
CUdeviceptr cuda_mem_at(cuda_backend *b, const cuda_mem *m, uint64_t off,
                        uint64_t *ret_run);

/* ---- backend_cuda_nvml.c ------------------------------------------------ */

int cuda_ops_device_processes(gmd_backend *backend, unsigned device,
                              gmd_gpu_process *ret, unsigned max);
unsigned cuda_ops_link_shared_with(gmd_backend *backend, unsigned device);

int cuda_ops_mem_create_private(gmd_backend *backend, unsigned device,
                                uint64_t size, gmd_mem **ret_mem);
void cuda_ops_arena_info(gmd_backend *backend, unsigned device,
                         gmd_arena_info *ret_info);
int64_t cuda_ops_arena_grow(gmd_backend *backend, unsigned device,
                            uint64_t want, uint64_t most);
/* Restart recovery (backend.h). */
int cuda_ops_arena_pieces(gmd_backend *backend, unsigned device,
                          gmd_arena_piece *ret, unsigned max);
int cuda_ops_arena_adopt(gmd_backend *backend, unsigned device,
                         const gmd_arena_piece *pieces, unsigned n);
int cuda_ops_mem_span(gmd_backend *backend, const gmd_mem *mem,
                      gmd_extent *ret, unsigned max);
int cuda_ops_mem_adopt_private(gmd_backend *backend, unsigned device,
                               uint64_t size, const gmd_extent *parts,
                               unsigned n, gmd_mem **ret_mem);

/* ---- backend_cuda_link.c ------------------------------------------------ */

/* From maintain (loop thread): once every device's host arena is pinned
 * and has room (or cannot, a device skipped with one log line), start the
 * measurement's thread; and take its figures as below. */
void cuda_link_maintain(cuda_backend *b);
/* From maintain and copy_reap (loop thread): never waits. When the
 * measurement's thread is over (it woke the loop), join it and publish
 * its figures. */
void cuda_link_poll(cuda_backend *b);
/* Stop the measurement's thread and wait for it (backend close, before
 * the copy streams close): it gives back what it held. */
void cuda_link_stop(cuda_backend *b);

void cuda_ops_link_info(gmd_backend *backend, unsigned device,
                        gmd_link_info *ret_info);
void cuda_ops_host_link_info(gmd_backend *backend, gmd_link_info *ret_info);

/* ---- backend_cuda_event.c ----------------------------------------------- */

int cuda_event_create(gmd_backend *backend, unsigned device,
                      gmd_event **ret_event);
int cuda_event_open(gmd_backend *backend, unsigned device,
                    const uint8_t handle[GMD_IPC_HANDLE_SIZE],
                    gmd_event **ret_event);
int cuda_event_record(gmd_backend *backend, gmd_event *event);
int cuda_event_wait(gmd_backend *backend, gmd_event *event);
void cuda_event_unref(gmd_backend *backend, gmd_event *event);
/* Destroy every cached event (backend teardown). */
void cuda_events_clear(cuda_backend *b);

#endif
