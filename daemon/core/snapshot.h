/*
 * snapshot — the daemon's state as status and metrics report it, copied
 * once: pools (with each device's copy queues, kept VRAM, host arena and
 * link), clients, totals, pinned host memory, counters and, when asked
 * for, buffers.
 *
 * The status reply (status.c) and the metrics page (metrics_render.c) are
 * both rendered from one of these, so they cannot disagree about what a
 * figure means or where it comes from, and neither reads the scheduler's
 * structures itself. A snapshot holds no pointer into live state (names
 * are copied), so a renderer needs nothing but the snapshot: the metrics
 * page is unit tested from a snapshot made by hand.
 */
#ifndef GMD_SNAPSHOT_H
#define GMD_SNAPSHOT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "stats.h"

typedef struct gmd_server gmd_server;

/* One memory pool: the VRAM of a device, or the host pool (the last). */
typedef struct gmd_pool_snapshot {
        unsigned device;
        int tier;                    /* gmd_tier */
        uint64_t capacity, used, free;  /* used: `outside` included */
        uint64_t outside;            /* charged for VRAM clients' processes
                                      * hold outside gpu-memd (outside.h) */
        /* VRAM pools only (zero on the host pool): */
        unsigned queued[2];          /* moves queued or copying, by gmd_copy_dir */
        uint64_t bytes[2];           /* bytes copied since start, by direction */
        uint64_t busy_us[2];         /* time a copy ran, by direction */
        uint64_t kept;               /* VRAM kept for swap-ins (reuse.h) */
        bool has_arena;              /* the backend has host arenas */
        uint64_t arena_built;        /* this device's arena: pinned */
        uint64_t arena_free;         /* ... and of that, free */
        bool has_driver_view;        /* the driver was read (vram.h) */
        uint64_t device_free;        /* free on the GPU, the driver's */
        uint64_t unaccounted;        /* used on the GPU, not by gpu-memd */
        uint64_t link[2];            /* the device's link, bytes per second
                                      * by gmd_copy_dir; 0: not known */
        unsigned link_group;         /* the lowest device on its link */
        pid_t slice_pid;             /* whose memory slice runs (slice.h); 0: none */
        uint64_t preempt_step;       /* copies in pause for an urgent one at
                                      * this step; 0: they do not */
        uint64_t slice_left_ms;      /* ... and for how long still */
        /* The peer tier (peer.h), of `used`: other devices' buffers this
         * VRAM holds, and VRAM kept here for their next swap-outs. */
        uint64_t peer_held, peer_spare;
} gmd_pool_snapshot;

/* One pair of devices of the peer tier: `home` reaches `holder`. */
typedef struct gmd_peer_snapshot {
        unsigned home, holder;
        uint64_t bytes_per_s;        /* home's copies into holder's VRAM */
        uint64_t held;               /* home's buffers held there now */
} gmd_peer_snapshot;

/* One client, after its hello. */
typedef struct gmd_client_snapshot {
        uint64_t id;
        pid_t pid;
        uid_t uid;
        gid_t gid;
        char name[65];
        int priority;
        unsigned n_buffers;
        unsigned waiting;            /* its allocations waiting for room */
        uint64_t bytes;
        uint64_t tier_bytes[2];      /* by gmd_tier */
        uint64_t parked_bytes;       /* of `bytes`, in its mapping cache */
        uint64_t lent_bytes;         /* of `bytes`, lent while its process
                                      * waits (loan.h) */
        uint64_t outside_bytes;      /* VRAM its process holds outside
                                      * gpu-memd, all devices (outside.h) */
        char planner[33];            /* its last reported plan (gmd_plan, */
        uint64_t plan_kept;          /* session.h): "" and 0s if none */
        uint64_t plan_offloaded;
        uint64_t plan_recomputed;
        uint64_t plan_streamed;
} gmd_client_snapshot;

/* One buffer (only with SNAPSHOT_BUFFERS, as the filter chose), in the
 * daemon's list order. */
typedef struct gmd_buffer_snapshot {
        uint64_t id;
        uint64_t client_id;
        pid_t pid;                   /* its owner's */
        uid_t uid;                   /* its owner's */
        unsigned device;
        uint64_t size;
        int tier;                    /* gmd_tier */
        int state;                   /* gmd_state */
        uint32_t flags;
        bool acquired, parked;
} gmd_buffer_snapshot;

/* A process holding a device's memory, other than this daemon (vram.h),
 * with the client it is when it is one. */
typedef struct gmd_process_snapshot {
        unsigned device;
        pid_t pid;
        uint64_t bytes;
        uint64_t client_id;          /* 0: not a client of gpu-memd */
} gmd_process_snapshot;

typedef struct gmd_snapshot {
        unsigned n_pools;            /* one per device, then the host pool */
        gmd_pool_snapshot *pools;
        unsigned n_clients;
        gmd_client_snapshot *clients;
        size_t n_buffers;
        gmd_buffer_snapshot *buffers;   /* NULL without SNAPSHOT_BUFFERS */
        size_t n_processes;
        gmd_process_snapshot *processes;  /* who holds the devices' memory,
                                           * where the backend can tell */
        uint64_t total_capacity, total_used;  /* over every pool */
        uint64_t total_buffers;         /* buffers of every client */
        unsigned waiting_allocations;   /* the wait queue's length */
        /* The host's limit across the devices' links: bytes per second
         * by gmd_copy_dir with every device copying at once, all of them
         * together (backend host_link_info); 0: not known. */
        uint64_t host_link[2];
        size_t n_peers;                 /* pairs the peer tier may use */
        gmd_peer_snapshot *peers;
        uint64_t host_pinned;           /* pinned host memory (backing.h) */
        uint64_t host_limit;            /* [pools] host_limit */
        gmd_stats stats;
        uint64_t slices_given;          /* memory slices given (slice.h) */
        uint64_t uptime_ms;
        unsigned restores;              /* state taken over at start (0/1) */
        uint64_t restored_ms;           /* how long that restore took */
        unsigned restore_lost;          /* buffers it could not give back */
        const char *version;            /* static strings */
        const char *backend;
} gmd_snapshot;

/* What snapshot_take copies beyond pools, clients and counters. */
enum {
        SNAPSHOT_BUFFERS = 1u << 0,
};

/* Which buffers SNAPSHOT_BUFFERS copies, in the daemon's list order:
 * those with an id past `after_id`, of process `pid` (0: any), owned by
 * user `uid` unless `all_users`; the first `max` of them (0: all). A
 * status reply shows a page of one user's buffers: it copies that page,
 * not every buffer of every client. */
typedef struct gmd_buffer_filter {
        uint64_t after_id;
        pid_t pid;
        bool all_users;
        uid_t uid;
        size_t max;
} gmd_buffer_filter;

/* Fill `ret` from the daemon's state now; `what` is SNAPSHOT_* flags,
 * `filter` chooses the buffers (NULL: all). Returns 0 or -ENOMEM (then
 * `ret` holds nothing to clear). */
int snapshot_take(const gmd_server *server, unsigned what,
                  const gmd_buffer_filter *filter, gmd_snapshot *ret);

/* Free what a snapshot holds; it may be cleared again. */
void snapshot_clear(gmd_snapshot *snapshot);

#endif
