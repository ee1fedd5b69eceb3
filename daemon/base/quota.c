/*
 * quota — see quota.h. Names are resolved when the config is read, so a
 * typo in a user or group name fails the start (or the reload) with the
 * line that has it, instead of silently never matching.
 */
#include "quota.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>

#include "size.h"

bool quota_is_section(const char *section)
{
        return strcmp(section, "users") == 0 ||
               strncmp(section, "user ", 5) == 0 ||
               strncmp(section, "group ", 6) == 0;
}

static int parse_id(const char *text, uint32_t *ret)
{
        char *end;
        unsigned long v;

        errno = 0;
        v = strtoul(text, &end, 10);
        if (errno || end == text || *end || v > UINT32_MAX - 1)
                return -EINVAL;
        *ret = (uint32_t)v;
        return 0;
}

static int rule_target(const char *section, quota_kind *ret_kind,
                       uint32_t *ret_id, const char *where, FILE *err)
{
        const char *name;

        if (strcmp(section, "users") == 0) {
                *ret_kind = QUOTA_USERS;
                *ret_id = 0;
                return 0;
        }
        if (strncmp(section, "user ", 5) == 0) {
                struct passwd *pw;

                name = section + 5;
                *ret_kind = QUOTA_USER;
                if (parse_id(name, ret_id) == 0)
                        return 0;
                pw = getpwnam(name);
                if (!pw) {
                        fprintf(err, "%s: [%s]: no user named '%s' on this machine\n",
                                where, section, name);
                        return -EINVAL;
                }
                *ret_id = pw->pw_uid;
                return 0;
        } else {
                struct group *gr;

                name = section + 6;
                *ret_kind = QUOTA_GROUP;
                if (parse_id(name, ret_id) == 0)
                        return 0;
                gr = getgrnam(name);
                if (!gr) {
                        fprintf(err, "%s: [%s]: no group named '%s' on this machine\n",
                                where, section, name);
                        return -EINVAL;
                }
                *ret_id = gr->gr_gid;
                return 0;
        }
}

static int parse_priority(const char *value, int *ret)
{
        char *end;
        long v;

        errno = 0;
        v = strtol(value, &end, 10);
        if (errno || end == value || *end || v < GMD_PRIORITY_MIN ||
            v > GMD_PRIORITY_MAX)
                return -EINVAL;
        *ret = (int)v;
        return 0;
}

int quota_set(gmd_quota_rule *rules, unsigned *n_rules, const char *section,
              const char *key, const char *value, const char *where, FILE *err)
{
        gmd_quota_rule *rule = NULL;
        quota_kind kind;
        uint32_t id;
        uint64_t bytes;
        int r;

        r = rule_target(section, &kind, &id, where, err);
        if (r < 0)
                return r;
        for (unsigned i = 0; i < *n_rules; i++)
                if (rules[i].kind == kind && rules[i].id == id)
                        rule = &rules[i];
        if (!rule) {
                if (*n_rules >= GMD_MAX_QUOTA_RULES) {
                        fprintf(err, "%s: more than %d user and group sections\n",
                                where, GMD_MAX_QUOTA_RULES);
                        return -EINVAL;
                }
                rule = &rules[(*n_rules)++];
                memset(rule, 0, sizeof(*rule));
                rule->kind = kind;
                rule->id = id;
                snprintf(rule->section, sizeof(rule->section), "[%s]", section);
        }

        if (strcmp(key, "vram_quota") == 0 || strcmp(key, "host_quota") == 0) {
                if (size_parse(value, &bytes) < 0) {
                        fprintf(err, "%s: bad value '%s' for key '%s' in [%s]: "
                                "expected a size such as 8G (0 = no limit)\n",
                                where, value, key, section);
                        return -EINVAL;
                }
                if (key[0] == 'v') {
                        rule->vram_quota = bytes;
                        rule->set |= QUOTA_SET_VRAM;
                } else {
                        rule->host_quota = bytes;
                        rule->set |= QUOTA_SET_HOST;
                }
                return 0;
        }
        if (strcmp(key, "max_buffers") == 0) {
                uint32_t n;

                if (parse_id(value, &n) < 0) {
                        fprintf(err, "%s: bad value '%s' for key 'max_buffers' in [%s]: "
                                "expected a whole number (0 = no limit)\n",
                                where, value, section);
                        return -EINVAL;
                }
                rule->max_buffers = n;
                rule->set |= QUOTA_SET_BUFFERS;
                return 0;
        }
        if (strcmp(key, "priority") == 0 || strcmp(key, "max_priority") == 0) {
                int p;

                if (parse_priority(value, &p) < 0) {
                        fprintf(err, "%s: bad value '%s' for key '%s' in [%s]: "
                                "expected a whole number from %d to %d\n",
                                where, value, key, section, GMD_PRIORITY_MIN,
                                GMD_PRIORITY_MAX);
                        return -EINVAL;
                }
                if (key[0] == 'p') {
                        rule->priority = p;
                        rule->set |= QUOTA_SET_PRIORITY;
                } else {
                        rule->max_priority = p;
                        rule->set |= QUOTA_SET_MAX_PRIORITY;
                }
                return 0;
        }
        fprintf(err, "%s: unknown key '%s' in section [%s] (expected vram_quota, "
                "host_quota, max_buffers, priority or max_priority)\n",
                where, key, section);
        return -EINVAL;
}

/* Take the keys `rule` sets that nothing stronger set yet. */
static void limits_merge(gmd_limits *l, unsigned *have, const gmd_quota_rule *rule)
{
        unsigned take = rule->set & ~*have;

        if (take & QUOTA_SET_VRAM) {
                l->vram_quota = rule->vram_quota;
                snprintf(l->vram_from, sizeof(l->vram_from), "%s", rule->section);
        }
        if (take & QUOTA_SET_HOST) {
                l->host_quota = rule->host_quota;
                snprintf(l->host_from, sizeof(l->host_from), "%s", rule->section);
        }
        if (take & QUOTA_SET_BUFFERS) {
                l->max_buffers = rule->max_buffers;
                snprintf(l->buffers_from, sizeof(l->buffers_from), "%s", rule->section);
        }
        if (take & QUOTA_SET_PRIORITY)
                l->priority = rule->priority;
        if (take & QUOTA_SET_MAX_PRIORITY)
                l->max_priority = rule->max_priority;
        *have |= take;
}

void quota_resolve(const gmd_quota_rule *rules, unsigned n_rules, uid_t uid,
                   const gid_t *gids, unsigned n_gids, gmd_limits *ret_limits)
{
        gmd_limits l = { 0 };
        unsigned have = 0;

        strcpy(l.vram_from, "no quota");
        strcpy(l.host_from, "no quota");
        strcpy(l.buffers_from, "no quota");

        for (unsigned i = 0; i < n_rules; i++)
                if (rules[i].kind == QUOTA_USER && rules[i].id == uid)
                        limits_merge(&l, &have, &rules[i]);
        for (unsigned i = 0; i < n_rules; i++) {
                if (rules[i].kind != QUOTA_GROUP)
                        continue;
                for (unsigned g = 0; g < n_gids; g++) {
                        if (rules[i].id == gids[g]) {
                                limits_merge(&l, &have, &rules[i]);
                                break;
                        }
                }
        }
        for (unsigned i = 0; i < n_rules; i++)
                if (rules[i].kind == QUOTA_USERS)
                        limits_merge(&l, &have, &rules[i]);
        if (l.max_priority < l.priority)
                l.max_priority = l.priority;
        *ret_limits = l;
}

void quota_dump(const gmd_quota_rule *rules, unsigned n_rules, FILE *out)
{
        char buf[32];

        for (unsigned i = 0; i < n_rules; i++) {
                const gmd_quota_rule *r = &rules[i];

                fprintf(out, "\n%s\n", r->section);
                if (r->set & QUOTA_SET_VRAM)
                        fprintf(out, "vram_quota = %s\n",
                                size_format_exact(r->vram_quota, buf, sizeof(buf)));
                if (r->set & QUOTA_SET_HOST)
                        fprintf(out, "host_quota = %s\n",
                                size_format_exact(r->host_quota, buf, sizeof(buf)));
                if (r->set & QUOTA_SET_BUFFERS)
                        fprintf(out, "max_buffers = %u\n", r->max_buffers);
                if (r->set & QUOTA_SET_PRIORITY)
                        fprintf(out, "priority = %d\n", r->priority);
                if (r->set & QUOTA_SET_MAX_PRIORITY)
                        fprintf(out, "max_priority = %d\n", r->max_priority);
        }
}

bool quota_applies(const gmd_limits *l, gmd_tier tier)
{
        return (tier == GMD_TIER_HOST ? l->host_quota : l->vram_quota) ||
               l->max_buffers;
}

quota_verdict quota_check(const gmd_limits *l, uid_t uid, const gmd_usage *u,
                          uint64_t size, gmd_tier tier, gmd_result *ret)
{
        uint64_t quota = tier == GMD_TIER_HOST ? l->host_quota : l->vram_quota;
        const char *from = tier == GMD_TIER_HOST ? l->host_from : l->vram_from;
        uint64_t outside = tier == GMD_TIER_VRAM ? u->outside : 0;
        char held[32], asked[32], limit[32], out[32];

        if (quota && u->bytes[tier] + outside + size > quota) {
                uint64_t parked = tier == GMD_TIER_VRAM ? u->parked : 0;

                /* A client that parked a buffer it had released may see it
                 * moved to host memory after all: never count more parked
                 * than there is. */
                if (parked > u->bytes[tier])
                        parked = u->bytes[tier];

                if (u->bytes[tier] - parked + outside + size <= quota)
                        return QUOTA_PARKED;
                if (outside) {
                        result_error(ret, GMD_ERR_QUOTA,
                                     "uid %u holds %s of VRAM outside gpu-memd "
                                     "through fds its processes kept after "
                                     "freeing buffers, or memory they allocated "
                                     "beside gpu-memd, and %s in gpu-memd; %s "
                                     "more would pass its vram_quota of %s set "
                                     "in %s: close those fds (or end the "
                                     "processes holding them; gpu-memctl status "
                                     "shows which, under \"outside\"), and the "
                                     "charge goes within seconds", (unsigned)uid,
                                     size_format(outside, out, sizeof(out)),
                                     size_format(u->bytes[tier] - parked, held,
                                                 sizeof(held)),
                                     size_format(size, asked, sizeof(asked)),
                                     size_format(quota, limit, sizeof(limit)),
                                     from);
                        return QUOTA_REFUSED;
                }
                result_error(ret, GMD_ERR_QUOTA,
                             "uid %u holds %s of %s; %s more would pass its "
                             "%s_quota of %s set in %s", (unsigned)uid,
                             size_format(u->bytes[tier] - parked, held, sizeof(held)),
                             tier == GMD_TIER_HOST ? "host memory" : "VRAM",
                             size_format(size, asked, sizeof(asked)),
                             tier == GMD_TIER_HOST ? "host" : "vram",
                             size_format(quota, limit, sizeof(limit)), from);
                return QUOTA_REFUSED;
        }
        if (l->max_buffers && u->buffers + 1 > l->max_buffers) {
                if (u->buffers - u->parked_buffers + 1 <= l->max_buffers)
                        return QUOTA_PARKED;
                result_error(ret, GMD_ERR_QUOTA,
                             "uid %u holds %u buffers, the max_buffers quota "
                             "set in %s", (unsigned)uid,
                             u->buffers - u->parked_buffers, l->buffers_from);
                return QUOTA_REFUSED;
        }
        return QUOTA_OK;
}
