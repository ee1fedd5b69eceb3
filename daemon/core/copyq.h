/*
 * copyq — the copy engine of one device: a queue per direction (VRAM to
 * host, host to VRAM), each holding copies in three classes served in
 * order — urgent (an acquire waits), eviction (an allocation waits), bulk
 * (pageout, prefetch). Copies are cut into chunks ([swap] chunk_size) and
 * [swap] copies_in_flight chunks per direction are with the backend at
 * once — more while those hold fewer than [swap] bytes_in_flight, up to
 * COPYQ_MAX_CHUNKS: a chunk's end reaches the loop some 50-100 us after
 * the copy engine finished it, and two 2 MiB chunks (38 us each at 55
 * GB/s) would leave the link idle while the next is issued. Both
 * directions run at the same time.
 *
 * With [swap] preempt_step on and a backend that has an urgent lane
 * (copy_submit_urgent: both do), urgent copies go there, with limits of
 * their own (so a direction may have twice copies_in_flight with the
 * backend), and the other chunks of that device and direction already
 * with the backend pause at their next step while an urgent one is in
 * flight (on cuda only copies in are stepped: only swap-ins are urgent):
 * an acquire waits behind a step or two of a prefetch (4M: ~0.1 ms)
 * instead of its chunks in flight (2 x 64M: ~2.4 ms, measured on the H100: an acquire of a
 * paged-out 64 MiB buffer took 2.9 ms during a bulk prefetch against 1.5
 * ms idle). Off, urgent copies come first in the one lane and overtake
 * the others within a chunk or two, or the bytes in flight.
 *
 * Devices whose links to host memory are one (behind one PCIe switch, on
 * one riser: the backend's link_shared_with) share those limits: the
 * chunks in flight and their bytes are counted per link, and the next
 * chunk is the first copy of the best class on any of the link's devices,
 * the devices taken in turn within a class. So an acquire on one GPU
 * overtakes the other GPU's prefetch as it overtakes its own, instead of
 * queueing behind everything both devices have in flight, and two GPUs on
 * one link are never given twice what it carries.
 *
 * The host has a limit of its own across links: on a 4-GPU machine each
 * link carried 52-55 GB/s alone and far less with all four copying (the
 * CPU's lanes, its memory, the root complex). The backend measures each
 * link alone (link_info) and all of them at once (host_link_info: H, the
 * bytes per second of every device together, each way). Where H is
 * below S, the sum of the links' rates alone (a link shared by devices
 * counted once, at its fastest device's rate), a chunk of any class but
 * urgent goes to the backend only while the bytes in flight that way on
 * every device together, urgent ones included, stay within
 *
 *     host budget = L x H / (S / links)
 *
 * where L is one link's own allowance (copies_in_flight x chunk_size,
 * or bytes_in_flight where that is more): what the host drains, every
 * link busy, in the time an average link drains L alone. So the copies
 * wait in these queues, where class order holds across devices, rather
 * than on the backend's streams, where it does not: when a chunk ends,
 * the next one is the best class on any link with room (links taken in
 * turn within a class), so an eviction on one GPU goes before another
 * GPU's prefetch. Urgent copies (an acquire waits) are never held back
 * by the budget, only by their link's limits, and count in it, so while
 * they run the others get less. With one link, H not known (not
 * measured yet, or skipped) or H >= S there is no budget and nothing
 * changes; a single busy link is never held (the budget is at least L,
 * H being at least the fastest link's rate). The log says the budget
 * once the figures are known.
 *
 * A copy is the byte-moving part of a move (move.h embeds one). copyq
 * knows nothing of moves: a copy whose last chunk came back, or that was
 * refused, goes on the device's ended list and is marked PENDING_COPIES;
 * the scheduling pass takes it from there (copyq_take_ended). A copy
 * stopped by its move with nothing in flight is over at once, and
 * copyq_stop says so to the caller instead.
 */
#ifndef GMD_COPYQ_H
#define GMD_COPYQ_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "config.h"
#include "list.h"
#include "pending.h"
#include "stats.h"

/* Chunks per direction with the backend at most, however small. */
#define COPYQ_MAX_CHUNKS 64

typedef enum move_class {
        MOVE_URGENT = 0,
        MOVE_EVICT = 1,
        MOVE_BULK = 2,
} move_class;

/* Where a copy stands. ISSUING -> ISSUED -> ENDED, or, stopped or failed,
 * -> STOPPING -> ENDED (straight to ENDED with nothing in flight). */
typedef enum copy_phase {
        COPY_ISSUING,               /* bytes left to hand over: in a queue */
        COPY_ISSUED,                /* every byte handed over */
        COPY_STOPPING,              /* stopped or failed: what is in flight
                                     * still finishes */
        COPY_ENDED,                 /* nothing in flight any more */
} copy_phase;

typedef struct gmd_copy {
        unsigned device;
        gmd_copy_dir dir;
        move_class cls;
        gmd_mem *src, *dst;
        uint64_t size;
        uint64_t issued, done;      /* bytes handed to the backend, copied */
        unsigned inflight;          /* chunks with the backend */
        uint64_t issued_us;         /* its first chunk went to the backend */
        int status;                 /* first error (a chunk or a submit) */
        copy_phase phase;
        gmd_list qlink;             /* in a queue, or in the ended list */
} gmd_copy;

typedef struct gmd_copyq {
        unsigned device;
        unsigned link;              /* the lowest device sharing this
                                     * device's link, or itself */
        unsigned link_turn[2];      /* of a link, in its first device's
                                     * queue: the device served last */
        gmd_list queued[2][3];      /* [dir][class]: copies with bytes to issue */
        unsigned inflight[2];       /* chunks with the backend */
        uint64_t inflight_bytes[2]; /* their bytes */
        unsigned urgent_inflight[2];   /* of those, on the urgent lane */
        uint64_t urgent_bytes[2];
        unsigned moves[2];          /* copies not ended, queued or copying */
        uint64_t bytes[2];          /* copied since start */
        uint64_t busy_us[2];        /* time with at least one chunk in flight */
        uint64_t busy_since[2];
        uint64_t broken_until_us[2];   /* a copy was refused: no new moves */
        uint64_t arena_warned_ms;      /* last "host arena full" warning */
        gmd_list ended;             /* copies over, for the pass to take */
} gmd_copyq;

/* The copy queues of every device and what they need: the backend that
 * copies, the [swap] settings, the counters, and where to mark ended
 * copies for the scheduling pass. Embedded in the server. */
typedef struct gmd_copyqs {
        gmd_copyq *q;               /* one per device */
        unsigned n;
        gmd_backend *backend;
        const gmd_config *config;
        gmd_stats *stats;
        gmd_pending *pending;
        bool lanes;                 /* urgent copies on the backend's urgent
                                     * lane ([swap] preempt_step) */
        uv_async_t wake;            /* the backend finished copies: the
                                     * loop reaps them (lifecycle.c) */
        bool wake_open;
        /* The host's limit across links (above), by gmd_copy_dir: */
        uint64_t host_budget[2];    /* bytes in flight on every device
                                     * together at most; 0: no limit */
        uint64_t host_inflight[2];  /* bytes in flight now, all devices,
                                     * both lanes */
        uint64_t host_held[2];      /* times a chunk waited for the budget */
        unsigned host_turn[2];      /* the link served last across links */
        bool host_known;            /* the budget is settled: the backend's
                                     * figures were read, or one link */
} gmd_copyqs;

/* Set up `n` queues in `q` (an array the caller owns). */
void copyqs_init(gmd_copyqs *qs, gmd_copyq *q, unsigned n, gmd_backend *backend,
                 const gmd_config *config, gmd_stats *stats, gmd_pending *pending);

/* Is any chunk with the backend? */
bool copyqs_busy(const gmd_copyqs *qs);

/* Queue a copy's bytes and start what the limits allow. */
void copyq_push(gmd_copyqs *qs, gmd_copy *copy);

/* Serve a queued copy in another class (an acquire now waits for it),
 * issuing what the limits allow. */
void copyq_reclass(gmd_copyqs *qs, gmd_copy *copy, move_class cls);

/* Issue no more of the copy's bytes. Returns true when nothing is in
 * flight: the copy is over now (COPY_ENDED, on no list) and the caller
 * ends its move. Otherwise it ends, later, on the ended list. */
bool copyq_stop(gmd_copyqs *qs, gmd_copy *copy);

/* May new moves start in `dir` on `device`? Not for a second after the
 * backend refused a copy, so a broken queue is not retried in a loop. */
bool copyq_usable(const gmd_copyqs *qs, unsigned device, gmd_copy_dir dir);

/* The next ended copy of any device, off its list, or NULL. */
gmd_copy *copyq_take_ended(gmd_copyqs *qs);

/* The reap callback (its ctx is the gmd_copyqs): one chunk finished. */
void copyq_on_done(void *ctx, void *cookie, int status);

#endif
