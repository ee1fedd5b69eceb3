/*
 * quota — who may use how much: per-user and per-group rules from the
 * config file, resolved into the limits of one client.
 *
 *   [users]            defaults for everyone
 *   [group NAME|GID]   for each member (not shared among the members)
 *   [user NAME|UID]    for that user
 *
 * Keys in each: vram_quota, host_quota (bytes a user may hold across all
 * their clients; 0 = no limit), max_buffers (across their clients; 0 = no
 * limit), priority (a client's default) and max_priority (the most a client
 * may ask for). Key by key, a [user] section wins over the first matching
 * [group] section in file order, which wins over [users].
 */
#ifndef GMD_QUOTA_H
#define GMD_QUOTA_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "gpumem.h"
#include "result.h"

#define GMD_MAX_QUOTA_RULES 128
#define GMD_PRIORITY_MIN (-100)
#define GMD_PRIORITY_MAX 100

typedef enum quota_kind {
        QUOTA_USERS,    /* [users]: everyone */
        QUOTA_GROUP,
        QUOTA_USER,
} quota_kind;

/* Bits of gmd_quota_rule.set: which keys the section gave. */
enum {
        QUOTA_SET_VRAM = 1 << 0,
        QUOTA_SET_HOST = 1 << 1,
        QUOTA_SET_BUFFERS = 1 << 2,
        QUOTA_SET_PRIORITY = 1 << 3,
        QUOTA_SET_MAX_PRIORITY = 1 << 4,
};

typedef struct gmd_quota_rule {
        quota_kind kind;
        uint32_t id;              /* uid or gid */
        char section[80];         /* as written, for messages */
        unsigned set;
        uint64_t vram_quota;
        uint64_t host_quota;
        unsigned max_buffers;
        int priority;
        int max_priority;
} gmd_quota_rule;

/* The limits of one client, with where each came from. */
typedef struct gmd_limits {
        uint64_t vram_quota;      /* 0 = none */
        uint64_t host_quota;
        unsigned max_buffers;     /* 0 = none */
        int priority;
        int max_priority;
        char vram_from[80];       /* "[user alice]", "built-in default" */
        char host_from[80];
        char buffers_from[80];
} gmd_limits;

/* What all clients of one user hold together. */
typedef struct gmd_usage {
        uint64_t bytes[2];          /* by tier, parked buffers included */
        uint64_t parked;            /* of bytes[GMD_TIER_VRAM], parked */
        unsigned buffers;           /* parked included */
        unsigned parked_buffers;
        /* VRAM its clients' processes hold outside gpu-memd (through fds
         * they kept, or allocated beside it), charged to its vram_quota
         * (core/outside.h); 0 where not charged. */
        uint64_t outside;
} gmd_usage;

typedef enum quota_verdict {
        QUOTA_OK,
        QUOTA_REFUSED,      /* `ret` says why */
        QUOTA_PARKED,       /* over only by what the user's caches hold */
} quota_verdict;

/* Does any limit of `limits` bound a new buffer on `tier`? If not, the
 * user's usage need not be counted. */
bool quota_applies(const gmd_limits *limits, gmd_tier tier);

/* Would `size` more bytes on `tier` pass the limits of user `uid`, who
 * holds `usage` across its clients? Parked buffers count (an unpark cannot
 * be refused), but when they are all that is in the way the answer is
 * QUOTA_PARKED: the caller asks for them back and waits. VRAM held
 * outside gpu-memd (usage->outside) counts against vram_quota too, and a
 * refusal it takes part in says so. QUOTA_REFUSED fills `ret` with
 * GMD_ERR_QUOTA and what is held. */
quota_verdict quota_check(const gmd_limits *limits, uid_t uid,
                          const gmd_usage *usage, uint64_t size, gmd_tier tier,
                          gmd_result *ret);

/* Is `section` a quota section ("users", "user X", "group X")? */
bool quota_is_section(const char *section);

/*
 * Set `key` of the rule for `section`, adding the rule if new, in
 * rules[]/n_rules (GMD_MAX_QUOTA_RULES entries). Names are resolved to
 * ids now. 0 or -EINVAL after one message on `err` naming `where`.
 */
int quota_set(gmd_quota_rule *rules, unsigned *n_rules, const char *section,
              const char *key, const char *value, const char *where, FILE *err);

/* The limits of a client of `uid` in groups `gids` (primary first). */
void quota_resolve(const gmd_quota_rule *rules, unsigned n_rules, uid_t uid,
                   const gid_t *gids, unsigned n_gids, gmd_limits *ret_limits);

/* Write the rules back as config sections. */
void quota_dump(const gmd_quota_rule *rules, unsigned n_rules, FILE *out);

#endif
