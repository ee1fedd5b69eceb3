/*
 * config — the daemon's settings: embedded defaults, then the config file
 * (INI, parsed by libinih), then command-line options, each overriding the
 * one before. configs/gpu-memd.conf documents every key with its default;
 * the table in config.c is the single place keys are defined.
 *
 * Every value is checked when it is set, so a bad one is reported against
 * its own line or option. What can only be checked later (across keys, a
 * group looked up, an address bound) finds where the value came from with
 * config_origin(): each key remembers its file line or option.
 */
#ifndef GMD_CONFIG_H
#define GMD_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "quota.h"
#include "size.h"

typedef enum gmd_log_level {
        GMD_LOG_ERR = 3,
        GMD_LOG_WARNING = 4,
        GMD_LOG_NOTICE = 5,
        GMD_LOG_INFO = 6,
        GMD_LOG_DEBUG = 7,
} gmd_log_level;

/* The keys config.c's table defines (checked there at compile time). */
#define CONFIG_N_KEYS 49

/* Where one key's value came from: a line of gmd_config.file, or the
 * `where` config_set was given (a command-line option), or neither (the
 * built-in default). */
typedef struct gmd_config_origin {
        unsigned line;                /* 0: not from the file */
        char where[48];               /* "" with line 0: the default */
} gmd_config_origin;

typedef struct gmd_config {
        /* [daemon] */
        char socket_path[108];        /* sun_path's size */
        unsigned socket_mode;         /* permission bits of the socket */
        char socket_group[64];        /* group of the socket; "" = the daemon's */
        char admin_group[64];         /* members may send admin requests */
        char backend[8];              /* "auto", "cuda", "sim" */
        gmd_log_level log_level;
        /* Resolved by config_validate: */
        gid_t socket_gid;             /* (gid_t)-1 when socket_group is "" */
        gid_t admin_gid;              /* (gid_t)-1 when admin_group is "" */

        /* [metrics] */
        char metrics_listen[108];     /* "off", "127.0.0.1:PORT", "unix:PATH" */
        char metrics_clients[8];      /* series per "users" (default), or
                                       * per client too: "ids", "names" */

        /* [pools] */
        gmd_size_spec vram_limit;     /* per device; 0 and 0% = automatic */
        uint64_t vram_reserve;        /* automatic: free memory minus this */
        gmd_size_spec host_limit;     /* % of physical RAM or bytes */
        unsigned cuda_reserve_chunks; /* ready chunks per device (cuda) */
        gmd_size_spec host_stock;     /* the host arena, pinned ahead of
                                       * swap-outs: bytes, or % of host_limit */
        bool host_stock_grow;         /* the arena grows ahead of
                                       * swap-outs, within host_limit */
        gmd_size_spec host_stock_vram; /* what a device's arena grows to
                                        * once its VRAM pool fills up:
                                        * bytes, or % of that pool */
        char peer_tier[8];            /* "auto": swap-outs go to a peer
                                       * GPU's free VRAM where its link is
                                       * faster than host memory's; "on":
                                       * wherever a peer is reachable;
                                       * "off" (core/peer.h) */
        uint64_t peer_headroom;       /* free VRAM the peer tier leaves
                                       * a peer's own clients */

        /* [limits] */
        unsigned max_clients;
        unsigned max_buffers_per_client;
        unsigned max_waiting_per_client;  /* allocations waiting for room */
        unsigned max_send_queue;          /* replies queued to a slow reader */
        uint64_t max_send_queue_bytes;    /* their bytes, per connection */
        uint64_t max_user_send_queue_bytes;  /* all of one user's connections */
        unsigned max_clients_per_user;    /* connections of a user who is not
                                           * an admin; 0 = no limit */
        unsigned admin_clients;           /* of max_clients, kept for admins */
        unsigned hello_timeout_ms;        /* a connection must say hello */
        unsigned max_buffers_per_user;    /* all of one user's clients; 0 =
                                           * half the open-file limit */
        unsigned max_waiting_per_user;    /* allocations of all of one user's
                                           * clients waiting; 0 = no limit */
        unsigned wait_hold_ms;            /* a waiter that does not fit this
                                           * long holds back smaller ones */
        /* VRAM a client's process holds beyond what gpu-memd accounts to
         * it (core/outside.h): "charge" (its user's quota and the pool
         * count it; the default), "disconnect" (also end the sessions of
         * a process whose user it puts over its vram_quota), "ignore"
         * (shown only); and what of a process's figure is its CUDA
         * context, never charged. */
        char outside_vram[16];
        uint64_t outside_vram_allowance;
        /* [restart]: what outlives the daemon (restore.h): "auto"
         * (systemd's fd store under systemd, else nothing),
         * "systemd", "keeper", "off"; how long a keeper holds what a dead
         * daemon left; how long a restored daemon waits for its clients
         * to claim their buffers. */
        char restart_keep[8];
        unsigned restart_hold_s;
        unsigned restart_claim_timeout_s;
        unsigned reclaim_timeout_ms;      /* parked buffers asked back and not
                                           * returned this long are not
                                           * counted on */
        unsigned priority_grace_ms;       /* a buffer released less than this
                                           * long ago is not evicted for a
                                           * lower-priority waiter; 0 = off */
        unsigned memory_slice_ms;         /* processes whose memory does not
                                           * fit together hold a device's
                                           * memory in turns this long
                                           * (slice.h); 0 = off, the
                                           * default */
        unsigned user_turn_us;            /* loop time a user may take per
                                           * loop turn (users.h); 0 = no
                                           * turns */

        /* [swap] */
        uint64_t swap_chunk_size;         /* bytes per copy handed to the backend */
        unsigned swap_copies_in_flight;   /* chunks per direction and lane
                                           * at once */
        uint64_t swap_bytes_in_flight;    /* and more, up to these bytes
                                           * per direction (small chunks) */
        uint64_t swap_preempt_step;       /* an urgent copy overtakes queued
                                           * ones at this step; 0: off. Read
                                           * at start */
        bool swap_keep_vram;              /* keep VRAM a swap-out left for the
                                           * owner's next swap-in (reuse.h) */

        /* [sim] */
        unsigned sim_devices;
        uint64_t sim_vram;            /* bytes each simulated device has */
        uint64_t sim_granularity;
        uint64_t sim_copy_rate;       /* bytes/s per copy queue; 0 = memcpy speed */
        uint64_t sim_peer_rate;       /* bytes/s between sim devices; 0 =
                                       * they cannot reach each other */
        bool sim_shared_link;         /* every device's copies share device
                                       * 0's queues (and copy_rate) */

        /* [users], [group NAME], [user NAME] */
        gmd_quota_rule quota_rules[GMD_MAX_QUOTA_RULES];
        unsigned n_quota_rules;

        /* Where each key's value came from, by its row in config.c's
         * table; read them with config_origin(). */
        char file[PATH_MAX];          /* the config file read; "" = none */
        gmd_config_origin origins[CONFIG_N_KEYS];
} gmd_config;

/* Fill with the embedded defaults. */
void config_init_defaults(gmd_config *config);

/*
 * Read an INI file over the current values. On a bad line, writes one
 * message naming the file, line and key to `err` and returns -EINVAL; a
 * missing or unreadable file is -errno with a message too.
 */
int config_load_file(gmd_config *config, const char *path, FILE *err);

/* Set one key as the file would ("pools", "vram_limit", "80%"). `where`
 * names the source for messages. 0 or -EINVAL with a message on `err`. */
int config_set(gmd_config *config, const char *section, const char *key,
               const char *value, const char *where, FILE *err);

/* Checks across keys, after every layer is applied, and resolves group
 * names. 0 or -EINVAL with one message on `err` that starts with the
 * origin of the key to fix (its file:line or option) and names it. */
int config_validate(gmd_config *config, FILE *err);

/*
 * Where the value of key `name` in [section] came from, for a message
 * about it written after parsing: "FILE:LINE", what config_set was told
 * ("gpu-memd: option --socket") or "built-in default". Returns `buf`.
 */
const char *config_origin(const gmd_config *config, const char *section,
                          const char *name, char *buf, size_t len);

/* A [metrics] listen value, parsed. */
typedef enum gmd_listen_kind {
        GMD_LISTEN_OFF,
        GMD_LISTEN_TCP,               /* a loopback address and port */
        GMD_LISTEN_UNIX,
} gmd_listen_kind;

typedef struct gmd_listen {
        gmd_listen_kind kind;
        struct sockaddr_storage addr; /* GMD_LISTEN_TCP: IPv4 or IPv6 */
        char path[108];               /* GMD_LISTEN_UNIX: sun_path's size */
} gmd_listen;

/*
 * Parse "off", "127.0.0.1:PORT" (any 127.x.y.z), "[::1]:PORT",
 * "localhost:PORT" or "unix:PATH". Returns 0, or -EINVAL for text that
 * is none of them and -EPERM for an address that is not loopback, with
 * *ret_hint saying what to write instead; *ret_listen is then untouched.
 * The config checks the value with it when it is set, and the metrics
 * endpoint binds what it returns.
 */
int config_listen_parse(const char *value, gmd_listen *ret_listen,
                        const char **ret_hint);

/* Write every key with its current value, as a config file would. */
void config_dump(const gmd_config *config, FILE *out);

const char *config_log_level_name(gmd_log_level level);

/* The host pool's size in bytes: [pools] host_limit resolved against the
 * machine's RAM. */
uint64_t config_host_limit_bytes(const gmd_config *config);

/* The host arena's size in bytes, all devices together: [pools]
 * host_stock resolved against the host pool, at most
 * CONFIG_HOST_STOCK_MAX when given as a percentage (pinned memory held
 * idle is memory the machine's other programs lack), never more than the
 * pool. */
#define CONFIG_HOST_STOCK_MAX (8ull << 30)
uint64_t config_host_stock_bytes(const gmd_config *config);

#endif
