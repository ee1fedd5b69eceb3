/*
 * config — see config.h. Every key is one row of `config_keys`: its section,
 * name, kind, bounds and where it lives in gmd_config. Parsing, defaults
 * checking and config_dump all walk the same table, so a key cannot be
 * documented in one place and missing in another.
 *
 * A value is checked in full when it is set (key_parse), bounds and
 * address included, so that the message can name its line; only checks
 * across keys and group lookups wait for config_validate, which names the
 * key's origin as recorded by the table row's index.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>
#include <unistd.h>

typedef enum key_kind {
        KEY_STRING,       /* char[] of `size` bytes */
        KEY_BACKEND,      /* "auto" | "cuda" | "sim" */
        KEY_LOG_LEVEL,
        KEY_MODE,         /* octal permission bits */
        KEY_UINT,         /* unsigned, 1..max */
        KEY_COUNT,        /* unsigned, 0..max */
        KEY_SIZE,         /* uint64_t bytes */
        KEY_SIZE_SPEC,    /* bytes or percent */
        KEY_POOL_SIZE,    /* a pool: auto, bytes (a granule at least) or percent */
        KEY_BOOL,         /* yes | no (also true/false, on/off, 1/0) */
        KEY_PATH,         /* char[] of `size` bytes, not empty */
        KEY_LISTEN,       /* config_listen_parse */
        KEY_CHOICE,       /* char[]: one of `choices` */
        KEY_GRANULE,      /* uint64_t bytes: a power of two, `min` at least */
} key_kind;

typedef struct config_key {
        const char *section;
        const char *name;
        key_kind kind;
        size_t offset;
        size_t size;
        unsigned max;     /* KEY_UINT, KEY_COUNT */
        uint64_t min;     /* KEY_SIZE, KEY_GRANULE: smallest value... */
        bool zero_off;    /* ... unless 0 (off) is allowed too */
        const char *why;  /* KEY_SIZE, KEY_GRANULE: the bound's reason;
                           * KEY_CHOICE: its choices, "a|b|c" */
} config_key;

#define KEY(sec, nm, kind, field, max) \
        { sec, nm, kind, offsetof(gmd_config, field), \
          sizeof(((gmd_config *)0)->field), max, 0, false, NULL }
/* A size of `min` bytes at least (or 0, when `zero_off`), and why. */
#define KEY_MIN(sec, nm, kind, field, min, zero_off, why) \
        { sec, nm, kind, offsetof(gmd_config, field), \
          sizeof(((gmd_config *)0)->field), 0, min, zero_off, why }
#define KEY_ONE_OF(sec, nm, field, choices) \
        { sec, nm, KEY_CHOICE, offsetof(gmd_config, field), \
          sizeof(((gmd_config *)0)->field), 0, 0, false, choices }

static const config_key config_keys[] = {
        KEY("daemon", "socket", KEY_PATH, socket_path, 0),
        KEY("daemon", "socket_mode", KEY_MODE, socket_mode, 0),
        KEY("daemon", "socket_group", KEY_STRING, socket_group, 0),
        KEY("daemon", "admin_group", KEY_STRING, admin_group, 0),
        KEY("daemon", "backend", KEY_BACKEND, backend, 0),
        KEY("daemon", "log_level", KEY_LOG_LEVEL, log_level, 0),
        KEY("pools", "vram_limit", KEY_POOL_SIZE, vram_limit, 0),
        KEY("pools", "vram_reserve", KEY_SIZE, vram_reserve, 0),
        KEY("pools", "host_limit", KEY_POOL_SIZE, host_limit, 0),
        KEY("pools", "cuda_reserve_chunks", KEY_COUNT, cuda_reserve_chunks, 4096),
        KEY("pools", "host_stock", KEY_SIZE_SPEC, host_stock, 0),
        KEY("pools", "host_stock_grow", KEY_BOOL, host_stock_grow, 0),
        KEY("pools", "host_stock_vram", KEY_SIZE_SPEC, host_stock_vram, 0),
        KEY_ONE_OF("pools", "peer_tier", peer_tier, "auto|on|off"),
        KEY("pools", "peer_headroom", KEY_SIZE, peer_headroom, 0),
        KEY_ONE_OF("restart", "keep", restart_keep, "auto|systemd|keeper|off"),
        KEY("restart", "hold_s", KEY_UINT, restart_hold_s, 86400),
        KEY("restart", "claim_timeout_s", KEY_UINT, restart_claim_timeout_s, 3600),
        KEY("limits", "max_clients", KEY_UINT, max_clients, 65536),
        KEY("limits", "max_buffers_per_client", KEY_UINT, max_buffers_per_client, 1u << 24),
        KEY("limits", "max_waiting_per_client", KEY_UINT, max_waiting_per_client, 4096),
        KEY("limits", "max_send_queue", KEY_UINT, max_send_queue, 1u << 20),
        /* One reply is at most 128K and a bit (wire.h). */
        KEY_MIN("limits", "max_send_queue_bytes", KEY_SIZE, max_send_queue_bytes,
                256u << 10, false, "two of the largest replies must fit"),
        KEY_MIN("limits", "max_user_send_queue_bytes", KEY_SIZE,
                max_user_send_queue_bytes, 256u << 10, false,
                "two of the largest replies must fit"),
        KEY("limits", "max_clients_per_user", KEY_COUNT, max_clients_per_user, 65536),
        KEY("limits", "admin_clients", KEY_COUNT, admin_clients, 65536),
        KEY("limits", "hello_timeout_ms", KEY_UINT, hello_timeout_ms, 600000),
        KEY("limits", "max_buffers_per_user", KEY_COUNT, max_buffers_per_user, 1u << 24),
        KEY("limits", "max_waiting_per_user", KEY_COUNT, max_waiting_per_user, 1u << 20),
        KEY("limits", "wait_hold_ms", KEY_COUNT, wait_hold_ms, 3600000),
        KEY_ONE_OF("limits", "outside_vram", outside_vram,
                   "charge|disconnect|ignore"),
        KEY("limits", "outside_vram_allowance", KEY_SIZE, outside_vram_allowance, 0),
        KEY("limits", "reclaim_timeout_ms", KEY_UINT, reclaim_timeout_ms, 3600000),
        KEY("limits", "priority_grace_ms", KEY_COUNT, priority_grace_ms, 3600000),
        KEY("limits", "memory_slice_ms", KEY_COUNT, memory_slice_ms, 3600000),
        KEY("limits", "user_turn_us", KEY_COUNT, user_turn_us, 1000000),
        KEY_MIN("swap", "chunk_size", KEY_SIZE, swap_chunk_size, 1u << 20, false,
                "smaller copies cost more than they move"),
        KEY("swap", "copies_in_flight", KEY_UINT, swap_copies_in_flight, 64),
        KEY("swap", "bytes_in_flight", KEY_SIZE, swap_bytes_in_flight, 0),
        KEY_MIN("swap", "preempt_step", KEY_SIZE, swap_preempt_step, 256u << 10,
                true, "smaller steps cost more than they win"),
        KEY("swap", "keep_vram", KEY_BOOL, swap_keep_vram, 0),
        KEY("sim", "devices", KEY_UINT, sim_devices, 16),
        KEY("sim", "vram", KEY_SIZE, sim_vram, 0),
        KEY_MIN("sim", "granularity", KEY_GRANULE, sim_granularity, 4096, false,
                "a page at least"),
        KEY("sim", "copy_rate", KEY_SIZE, sim_copy_rate, 0),
        KEY("sim", "shared_link", KEY_BOOL, sim_shared_link, 0),
        KEY("sim", "peer_rate", KEY_SIZE, sim_peer_rate, 0),
        KEY("metrics", "listen", KEY_LISTEN, metrics_listen, 0),
        KEY_ONE_OF("metrics", "clients", metrics_clients, "users|ids|names"),
};

#define N_KEYS (sizeof(config_keys) / sizeof(config_keys[0]))
_Static_assert(N_KEYS == CONFIG_N_KEYS, "CONFIG_N_KEYS counts config_keys");

static const char *const level_names[] = {
        [GMD_LOG_ERR] = "error",
        [GMD_LOG_WARNING] = "warning",
        [GMD_LOG_NOTICE] = "notice",
        [GMD_LOG_INFO] = "info",
        [GMD_LOG_DEBUG] = "debug",
};

void config_init_defaults(gmd_config *config)
{
        memset(config, 0, sizeof(*config));
        strcpy(config->socket_path, "/run/gpu-memd/gpu-memd.sock");
        config->socket_mode = 0660;
        strcpy(config->backend, "auto");
        strcpy(config->metrics_listen, "off");
        strcpy(config->metrics_clients, "users");
        config->socket_gid = (gid_t)-1;
        config->admin_gid = (gid_t)-1;
        config->log_level = GMD_LOG_INFO;
        config->vram_limit = (gmd_size_spec){ 0, 0 };   /* automatic */
        config->vram_reserve = 512ull << 20;
        config->host_limit = (gmd_size_spec){ 0, 25.0 };
        config->cuda_reserve_chunks = 16;
        config->host_stock = (gmd_size_spec){ 0, 25.0 };
        config->max_clients = 256;
        config->max_buffers_per_client = 65536;
        config->max_waiting_per_client = 64;
        config->max_send_queue = 1024;
        config->max_send_queue_bytes = 4ull << 20;
        config->max_user_send_queue_bytes = 16ull << 20;
        config->max_clients_per_user = 64;
        config->admin_clients = 4;
        config->hello_timeout_ms = 5000;
        config->max_buffers_per_user = 0;
        config->max_waiting_per_user = 256;
        config->wait_hold_ms = 5000;
        strcpy(config->outside_vram, "ignore");
        /* A bare CUDA context: 518 MiB in NVML on an H100 (driver 580),
         * and some room for modules loaded later. */
        config->outside_vram_allowance = 640ull << 20;
        config->reclaim_timeout_ms = 2000;
        strcpy(config->restart_keep, "auto");
        config->restart_hold_s = 300;
        config->restart_claim_timeout_s = 60;
        config->user_turn_us = 100;
        config->swap_chunk_size = 64ull << 20;
        config->swap_copies_in_flight = 2;
        config->swap_bytes_in_flight = 64ull << 20;
        config->swap_preempt_step = 4ull << 20;
        config->swap_keep_vram = true;
        config->host_stock_grow = true;
        /* A device's whole pool swapped out once: jobs that do not fit
         * together take turns (ARCHITECTURE.md, decision 6). */
        config->host_stock_vram = (gmd_size_spec){ 0, 100.0 };
        strcpy(config->peer_tier, "auto");
        config->peer_headroom = 2ull << 30;
        config->sim_devices = 1;
        config->sim_vram = 1ull << 30;
        config->sim_granularity = 2ull << 20;
}

const char *config_log_level_name(gmd_log_level level)
{
        if (level < GMD_LOG_ERR || level > GMD_LOG_DEBUG)
                return "?";
        return level_names[level];
}

static int parse_log_level(const char *value, gmd_log_level *ret)
{
        for (int l = GMD_LOG_ERR; l <= GMD_LOG_DEBUG; l++) {
                if (strcasecmp(value, level_names[l]) == 0) {
                        *ret = (gmd_log_level)l;
                        return 0;
                }
        }
        return -EINVAL;
}

static const config_key *key_find(const char *section, const char *name,
                                  int *ret_section_known)
{
        *ret_section_known = 0;
        for (size_t i = 0; i < N_KEYS; i++) {
                if (strcmp(config_keys[i].section, section) != 0)
                        continue;
                *ret_section_known = 1;
                if (strcmp(config_keys[i].name, name) == 0)
                        return &config_keys[i];
        }
        return NULL;
}

int config_listen_parse(const char *value, gmd_listen *ret_listen,
                        const char **ret_hint)
{
        static const char expected[] =
                "expected off, 127.0.0.1:PORT, [::1]:PORT, localhost:PORT or "
                "unix:PATH";
        gmd_listen l = { .kind = GMD_LISTEN_OFF };
        const char *colon = strrchr(value, ':');
        char host[64], *end;
        unsigned long port;
        size_t host_len;

        if (strcmp(value, "off") == 0) {
                *ret_listen = l;
                return 0;
        }
        if (strncmp(value, "unix:", 5) == 0) {
                if (!value[5] || strlen(value + 5) >= sizeof(l.path)) {
                        *ret_hint = "unix:PATH needs a path of 1 to 107 bytes";
                        return -EINVAL;
                }
                l.kind = GMD_LISTEN_UNIX;
                strcpy(l.path, value + 5);
                *ret_listen = l;
                return 0;
        }
        if (!colon || colon == value || !colon[1] || colon[1] == '-' ||
            colon[1] == '+') {
                *ret_hint = expected;
                return -EINVAL;
        }
        errno = 0;
        port = strtoul(colon + 1, &end, 10);
        if (errno || *end || port > 65535) {
                *ret_hint = "the port must be a number from 0 to 65535";
                return -EINVAL;
        }
        host_len = (size_t)(colon - value);
        if (host_len >= sizeof(host)) {
                *ret_hint = expected;
                return -EINVAL;
        }
        memcpy(host, value, host_len);
        host[host_len] = '\0';
        if (strcmp(host, "localhost") == 0)
                strcpy(host, "127.0.0.1");
        if (host[0] == '[' && host_len > 2 && host[host_len - 1] == ']') {
                struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&l.addr;

                host[host_len - 1] = '\0';
                a6->sin6_family = AF_INET6;
                a6->sin6_port = htons((uint16_t)port);
                if (inet_pton(AF_INET6, host + 1, &a6->sin6_addr) != 1) {
                        *ret_hint = expected;
                        return -EINVAL;
                }
                if (!IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr))
                        goto not_loopback;
        } else {
                struct sockaddr_in *a4 = (struct sockaddr_in *)&l.addr;

                a4->sin_family = AF_INET;
                a4->sin_port = htons((uint16_t)port);
                if (inet_pton(AF_INET, host, &a4->sin_addr) != 1) {
                        *ret_hint = expected;
                        return -EINVAL;
                }
                if ((ntohl(a4->sin_addr.s_addr) >> 24) != 127)
                        goto not_loopback;
        }
        l.kind = GMD_LISTEN_TCP;
        *ret_listen = l;
        return 0;

not_loopback:
        /* The endpoint has no authentication: what it tells (users, their
         * memory) stays on the machine. */
        *ret_hint = "only loopback addresses are served (127.0.0.1:PORT, "
                    "[::1]:PORT, localhost:PORT) or unix:PATH; to publish "
                    "metrics further, put a reverse proxy in front of a "
                    "loopback port";
        return -EPERM;
}

/* "a, b or c" from "a|b|c". */
static const char *choices_text(const char *choices, char *buf, size_t len)
{
        size_t n = 0, count = 1, seen = 0;

        for (const char *p = choices; *p; p++)
                count += *p == '|';
        buf[0] = '\0';
        for (const char *p = choices; *p && n + 5 < len; p++) {
                if (*p != '|') {
                        buf[n++] = *p;
                        continue;
                }
                seen++;
                n += (size_t)snprintf(buf + n, len - n, "%s",
                                      seen + 1 == count ? " or " : ", ");
        }
        buf[n < len ? n : len - 1] = '\0';
        return buf;
}

static bool is_choice(const char *choices, const char *value)
{
        size_t len = strlen(value);

        for (const char *p = choices; *p; ) {
                size_t n = strcspn(p, "|");

                if (n == len && len > 0 && strncmp(p, value, n) == 0)
                        return true;
                p += n;
                if (*p)
                        p++;
        }
        return false;
}

/* The message for a size below key->min: what is allowed and why. */
static const char *size_bound_hint(const config_key *key, char *buf, size_t len)
{
        char min[32];

        size_format_exact(key->min, min, sizeof(min));
        if (key->kind == KEY_GRANULE)
                snprintf(buf, len, "expected a power of two of at least %s, such "
                         "as 64K or 2M (%s)", min, key->why);
        else
                snprintf(buf, len, "expected %sat least %s (%s)",
                         key->zero_off ? "0 (off) or " : "", min, key->why);
        return buf;
}

/*
 * Check `value` for `key` and, when it is good, store it in `field`
 * (key->size bytes); a refused value leaves the field as it was. Returns
 * NULL, or the hint for the message (maybe written into `buf`).
 */
static const char *key_parse(const config_key *key, const char *value,
                             void *field, char *buf, size_t len)
{
        union {
                char s[128];
                unsigned u;
                uint64_t u64;
                gmd_size_spec spec;
                bool b;
                gmd_log_level level;
        } v;
        char *end;

        memset(&v, 0, sizeof(v));
        if (key->size > sizeof(v))
                return "the key's field is larger than key_parse knows";
        switch (key->kind) {
        case KEY_STRING:
        case KEY_PATH:
        case KEY_LISTEN:
        case KEY_CHOICE:
                if (strlen(value) >= key->size) {
                        snprintf(buf, len, "value too long (at most %zu bytes)",
                                 key->size - 1);
                        return buf;
                }
                if (key->kind == KEY_PATH && !*value)
                        return "expected a path; it must not be empty";
                if (key->kind == KEY_LISTEN) {
                        gmd_listen l;
                        const char *hint;

                        if (config_listen_parse(value, &l, &hint) < 0)
                                return hint;
                }
                if (key->kind == KEY_CHOICE && !is_choice(key->why, value)) {
                        char choices[96];

                        snprintf(buf, len, "expected %s",
                                 choices_text(key->why, choices, sizeof(choices)));
                        return buf;
                }
                strcpy(v.s, value);
                break;
        case KEY_BACKEND:
                if (strcmp(value, "auto") && strcmp(value, "cuda") &&
                    strcmp(value, "sim"))
                        return "expected auto, cuda or sim";
                strcpy(v.s, value);
                break;
        case KEY_LOG_LEVEL:
                if (parse_log_level(value, &v.level) < 0)
                        return "expected error, warning, notice, info or debug";
                break;
        case KEY_MODE: {
                unsigned long mode;

                errno = 0;
                mode = strtoul(value, &end, 8);
                if (errno || end == value || *end || mode > 0777)
                        return "expected octal permission bits such as 0660";
                v.u = (unsigned)mode;
                break;
        }
        case KEY_UINT:
        case KEY_COUNT: {
                unsigned long n;

                errno = 0;
                n = strtoul(value, &end, 10);
                if (errno || end == value || *end || *value == '-' ||
                    n < (key->kind == KEY_UINT ? 1u : 0u) || n > key->max) {
                        snprintf(buf, len, "expected a whole number from %u to %u",
                                 key->kind == KEY_UINT ? 1u : 0u, key->max);
                        return buf;
                }
                v.u = (unsigned)n;
                break;
        }
        case KEY_SIZE:
        case KEY_GRANULE:
                if (size_parse(value, &v.u64) < 0)
                        return "expected a size such as 512M or 2G";
                if ((v.u64 < key->min && !(key->zero_off && v.u64 == 0)) ||
                    (key->kind == KEY_GRANULE && (v.u64 & (v.u64 - 1)) != 0))
                        return size_bound_hint(key, buf, len);
                break;
        case KEY_SIZE_SPEC:
                if (strcmp(value, "auto") == 0) {
                        v.spec = (gmd_size_spec){ 0, 0 };
                        break;
                }
                if (size_spec_parse(value, &v.spec) < 0)
                        return "expected auto, a size such as 40G or a percentage such as 90%";
                break;
        case KEY_POOL_SIZE: {
                gmd_size_spec *spec = &v.spec;

                if (strcmp(value, "auto") == 0 && key->name[0] == 'v') {
                        *spec = (gmd_size_spec){ 0, 0 };
                        break;
                }
                if (size_spec_parse(value, spec) < 0)
                        return key->name[0] == 'v' ?
                               "expected auto, a size such as 40G or a percentage such as 90%" :
                               "expected a size such as 40G or a percentage such as 25%";
                /* "0" used to mean auto and "512" 512 bytes: a whole device,
                 * or a pool nothing fits in, without a word. */
                if (spec->percent == 0 && spec->bytes == 0)
                        return key->name[0] == 'v' ?
                               "0 is no pool at all; write auto for the automatic size" :
                               "0 is no pool at all; write a size such as 16G or 25%";
                if (spec->percent == 0 && spec->bytes < (1u << 20))
                        return "less than 1M: sizes without a unit are bytes; did you "
                               "mean M or G (512M, 512G)?";
                break;
        }
        case KEY_BOOL:
                if (!strcasecmp(value, "yes") || !strcasecmp(value, "true") ||
                    !strcasecmp(value, "on") || !strcmp(value, "1"))
                        v.b = true;
                else if (!strcasecmp(value, "no") || !strcasecmp(value, "false") ||
                         !strcasecmp(value, "off") || !strcmp(value, "0"))
                        v.b = false;
                else
                        return "expected yes or no";
                break;
        default:
                return "unknown key kind";
        }
        memcpy(field, &v, key->size);
        return NULL;
}

/* config_set, recording where the value came from: line `line` of the
 * config file (config->file), or else `where`. */
static int key_set(gmd_config *config, const char *section, const char *key,
                   const char *value, const char *where, unsigned line,
                   FILE *err)
{
        gmd_config_origin *origin;
        const config_key *k;
        const char *hint;
        char buf[160];
        int section_known;

        if (quota_is_section(section))
                return quota_set(config->quota_rules, &config->n_quota_rules,
                                 section, key, value, where, err);
        k = key_find(section, key, &section_known);
        if (!k) {
                if (!section_known)
                        fprintf(err, "%s: unknown section [%s] (key '%s')\n",
                                where, section, key);
                else
                        fprintf(err, "%s: unknown key '%s' in section [%s]\n",
                                where, key, section);
                return -EINVAL;
        }
        hint = key_parse(k, value, (char *)config + k->offset, buf, sizeof(buf));
        if (hint) {
                fprintf(err, "%s: bad value '%s' for key '%s' in [%s]: %s\n",
                        where, value, key, section, hint);
                return -EINVAL;
        }
        origin = &config->origins[k - config_keys];
        origin->line = line;
        if (line)
                origin->where[0] = '\0';
        else    /* an option's name, cut to fit (it always does) */
                snprintf(origin->where, sizeof(origin->where), "%.*s",
                         (int)sizeof(origin->where) - 1, where);
        return 0;
}

int config_set(gmd_config *config, const char *section, const char *key,
               const char *value, const char *where, FILE *err)
{
        return key_set(config, section, key, value, where, 0, err);
}

const char *config_origin(const gmd_config *config, const char *section,
                          const char *name, char *buf, size_t len)
{
        int section_known;
        const config_key *k = key_find(section, name, &section_known);
        const gmd_config_origin *o = k ? &config->origins[k - config_keys] : NULL;

        if (o && o->line)
                snprintf(buf, len, "%s:%u", config->file, o->line);
        else if (o && o->where[0])
                snprintf(buf, len, "%s", o->where);
        else
                snprintf(buf, len, "built-in default");
        return buf;
}

/* How late a key was set: options come after the file, a later line after
 * an earlier one, and the default before everything. */
static unsigned long origin_rank(const gmd_config *config, const char *section,
                                 const char *name)
{
        int section_known;
        const config_key *k = key_find(section, name, &section_known);
        const gmd_config_origin *o = &config->origins[k - config_keys];

        return o->line ? o->line : o->where[0] ? ULONG_MAX : 0;
}

/* One message about a key after parsing, starting where its value came
 * from, as a parse error starts with its line. */
__attribute__((format(printf, 5, 6)))
static void key_error(const gmd_config *config, FILE *err, const char *section,
                      const char *name, const char *fmt, ...)
{
        char origin[PATH_MAX + 16];
        va_list ap;

        fprintf(err, "%s: key '%s' in [%s]: ",
                config_origin(config, section, name, origin, sizeof(origin)),
                name, section);
        va_start(ap, fmt);
        vfprintf(err, fmt, ap);
        va_end(ap);
        fputc('\n', err);
}

static int resolve_group(const gmd_config *config, const char *key,
                         const char *name, gid_t *ret_gid, FILE *err)
{
        struct group *gr;

        *ret_gid = (gid_t)-1;
        if (!*name)
                return 0;
        gr = getgrnam(name);
        if (!gr) {
                key_error(config, err, "daemon", key,
                          "no group named '%s' on this machine: create it "
                          "(groupadd %s) or name another", name, name);
                return -EINVAL;
        }
        *ret_gid = gr->gr_gid;
        return 0;
}

int config_validate(gmd_config *config, FILE *err)
{
        char origin[PATH_MAX + 16], size[32], vram[32];

        if (resolve_group(config, "socket_group", config->socket_group,
                          &config->socket_gid, err) < 0 ||
            resolve_group(config, "admin_group", config->admin_group,
                          &config->admin_gid, err) < 0)
                return -EINVAL;
        /* Across keys: blame the one set last, naming the other's origin. */
        if (config->admin_clients >= config->max_clients) {
                if (origin_rank(config, "limits", "admin_clients") >=
                    origin_rank(config, "limits", "max_clients"))
                        key_error(config, err, "limits", "admin_clients",
                                  "%u must be less than max_clients (%u, %s): the "
                                  "slots it keeps for admins are part of them; "
                                  "lower admin_clients or raise max_clients",
                                  config->admin_clients, config->max_clients,
                                  config_origin(config, "limits", "max_clients",
                                                origin, sizeof(origin)));
                else
                        key_error(config, err, "limits", "max_clients",
                                  "%u must be more than admin_clients (%u, %s): "
                                  "the slots admin_clients keeps are part of "
                                  "max_clients; raise max_clients or lower "
                                  "admin_clients",
                                  config->max_clients, config->admin_clients,
                                  config_origin(config, "limits", "admin_clients",
                                                origin, sizeof(origin)));
                return -EINVAL;
        }
        if (config->sim_vram < config->sim_granularity) {
                size_format_exact(config->sim_granularity, size, sizeof(size));
                if (origin_rank(config, "sim", "vram") >=
                    origin_rank(config, "sim", "granularity"))
                        key_error(config, err, "sim", "vram",
                                  "%s is less than one granule (granularity = "
                                  "%s, %s): raise vram or lower granularity",
                                  size_format_exact(config->sim_vram, vram,
                                                    sizeof(vram)), size,
                                  config_origin(config, "sim", "granularity",
                                                origin, sizeof(origin)));
                else
                        key_error(config, err, "sim", "granularity",
                                  "%s is more than vram (%s): a device must hold "
                                  "one granule at least; lower granularity or "
                                  "raise vram", size,
                                  config_origin(config, "sim", "vram", origin,
                                                sizeof(origin)));
                return -EINVAL;
        }
        return 0;
}

/*
 * Line numbers. Debian's libinih is built without line numbers in the
 * handler, so the reader counts lines itself: the handler runs right after
 * the line it is called for was read. Two things would put that count (and
 * inih's own) off the file's:
 *   - a line longer than inih's buffer would reach it in pieces, each
 *     counted as a line; the reader hands inih the start of a long comment
 *     and an empty line for any other long line, which it reports itself;
 *   - inih goes on after a syntax error, so after a header without its
 *     ']' ("[pools") the next key fails in the section before; the
 *     handler's message is held back and written only if its line is the
 *     first error, which ini_parse_stream's result gives.
 * The reader also takes indentation off every line (see load_reader).
 */
typedef struct load_state {
        gmd_config *config;
        const char *path;
        FILE *file;
        FILE *err;
        FILE *held;             /* the handler's message, until the end */
        int line;               /* of the line inih was handed last */
        int failed;             /* the handler's bad line; 0 = none */
        int too_long;           /* the first line too long for inih */
        int max_line;           /* ... and inih's buffer */
        char long_key[64];      /* ... and its key, if it has one */
        int open_header;        /* the first "[name" without its ']' */
        char header[64];        /* ... and that name */
} load_state;

/* "[name" with no ']' on the line: inih reports only a syntax error. */
static void note_open_header(load_state *st, const char *str)
{
        const char *p = str + strspn(str, " \t");

        if (st->open_header || *p != '[' || strchr(p, ']'))
                return;
        st->open_header = st->line;
        snprintf(st->header, sizeof(st->header), "%.*s",
                 (int)strcspn(p + 1, " \t\r\n;#"), p + 1);
}

static char *load_reader(char *str, int num, void *stream)
{
        load_state *st = stream;
        const char *p;
        size_t len;
        int c;

        if (!fgets(str, num, st->file))
                return NULL;
        st->line++;
        len = strlen(str);
        if (len == 0 || str[len - 1] == '\n')
                goto whole;
        c = getc(st->file);
        if (c == EOF || c == '\n')
                goto whole;             /* it just fitted */
        while (c != EOF && c != '\n')
                c = getc(st->file);
        p = str + strspn(str, " \t");
        if (*p == ';' || *p == '#')
                return str;             /* a long comment: its start will do */
        if (!st->too_long) {
                size_t n = strcspn(p, "=:");

                st->too_long = st->line;
                st->max_line = num;
                if (p[n])
                        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
                                n--;
                snprintf(st->long_key, sizeof(st->long_key), "%.*s",
                         p[n] ? (int)n : 0, p);
        }
        strcpy(str, "\n");
        return str;
whole:
        /* inih reads an indented line after a key as more of its value
         * (multi-line values): "  host_limit = 2G" under vram_limit was
         * a bad value for vram_limit. An indented line is a line. */
        p = str + strspn(str, " \t");
        if (p != str)
                memmove(str, p, strlen(p) + 1);
        note_open_header(st, str);
        return str;
}

static int load_handler(void *user, const char *section, const char *name,
                        const char *value)
{
        load_state *st = user;
        FILE *out = st->held ? st->held : st->err;
        char where[PATH_MAX + 32];

        if (st->failed)
                return 0;
        snprintf(where, sizeof(where), "%s:%d", st->path, st->line);
        if (!*section) {
                fprintf(out, "%s: key '%s' outside any section: put it under "
                        "its [section]\n", where, name);
                st->failed = st->line;
                return 0;
        }
        if (key_set(st->config, section, name, value, where,
                    (unsigned)st->line, out) < 0) {
                st->failed = st->line;
                return 0;   /* stop at the first bad line */
        }
        return 1;
}

/* The first of the lines that went wrong (0 for none). */
static int first_line(int a, int b)
{
        return !a ? b : !b ? a : a < b ? a : b;
}

int config_load_file(gmd_config *config, const char *path, FILE *err)
{
        load_state st = { .config = config, .path = path, .err = err };
        char *held = NULL;
        size_t held_size = 0;
        int r, first;
        FILE *f;

        f = fopen(path, "re");
        st.file = f;
        if (!f) {
                r = -errno;
                fprintf(err, "%s: cannot read config file: %s\n", path,
                        strerror(errno));
                return r;
        }
        snprintf(config->file, sizeof(config->file), "%s", path);
        st.held = open_memstream(&held, &held_size);
        r = ini_parse_stream(load_reader, &st, load_handler, &st);
        fclose(f);
        if (st.held)
                fclose(st.held);
        first = first_line(first_line(r > 0 ? r : 0, st.failed), st.too_long);
        if (first == 0 && r < 0) {
                fprintf(err, "%s: cannot parse config file\n", path);
                r = -EIO;
        } else if (first == 0) {
                r = 0;
        } else if (first == st.too_long) {
                fprintf(err, "%s:%d: line longer than %d characters%s%s%s: "
                        "shorten it\n", path, first, st.max_line - 2,
                        st.long_key[0] ? " (key '" : "", st.long_key,
                        st.long_key[0] ? "')" : "");
                r = -EINVAL;
        } else if (first == st.failed) {
                if (held)
                        fputs(held, err);
                r = -EINVAL;
        } else if (first == st.open_header) {
                fprintf(err, "%s:%d: section header '[%s' has no closing ']': "
                        "write [%s]\n", path, first, st.header, st.header);
                r = -EINVAL;
        } else {
                fprintf(err, "%s:%d: syntax error (expected [section] or key = "
                        "value)\n", path, first);
                r = -EINVAL;
        }
        free(held);
        return r;
}

static void key_print(const config_key *key, const void *field, FILE *out)
{
        char buf[32];

        switch (key->kind) {
        case KEY_STRING:
        case KEY_PATH:
        case KEY_LISTEN:
        case KEY_CHOICE:
        case KEY_BACKEND:
                fprintf(out, "%s", (const char *)field);
                break;
        case KEY_LOG_LEVEL:
                fprintf(out, "%s", config_log_level_name(*(const gmd_log_level *)field));
                break;
        case KEY_MODE:
                fprintf(out, "%04o", *(const unsigned *)field);
                break;
        case KEY_UINT:
        case KEY_COUNT:
                fprintf(out, "%u", *(const unsigned *)field);
                break;
        case KEY_SIZE:
        case KEY_GRANULE:
                fprintf(out, "%s", size_format_exact(*(const uint64_t *)field, buf, sizeof(buf)));
                break;
        case KEY_SIZE_SPEC:
        case KEY_POOL_SIZE: {
                const gmd_size_spec *s = field;

                if (s->percent > 0)
                        fprintf(out, "%g%%", s->percent);
                else if (s->bytes == 0)
                        fprintf(out, "auto");
                else
                        fprintf(out, "%s", size_format_exact(s->bytes, buf, sizeof(buf)));
                break;
        }
        case KEY_BOOL:
                fprintf(out, "%s", *(const bool *)field ? "yes" : "no");
                break;
        }
}

void config_dump(const gmd_config *config, FILE *out)
{
        const char *section = "";

        for (size_t i = 0; i < N_KEYS; i++) {
                const config_key *k = &config_keys[i];

                if (strcmp(section, k->section) != 0) {
                        section = k->section;
                        fprintf(out, "%s[%s]\n", i ? "\n" : "", section);
                }
                fprintf(out, "%s = ", k->name);
                key_print(k, (const char *)config + k->offset, out);
                fputc('\n', out);
        }
        quota_dump(config->quota_rules, config->n_quota_rules, out);
}

uint64_t config_host_limit_bytes(const gmd_config *config)
{
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        uint64_t phys = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;

        return size_spec_resolve(&config->host_limit, phys);
}

uint64_t config_host_stock_bytes(const gmd_config *config)
{
        uint64_t limit = config_host_limit_bytes(config);
        uint64_t stock = size_spec_resolve(&config->host_stock, limit);

        /* A share of the host pool is capped; bytes given outright are not. */
        if (config->host_stock.percent > 0 && stock > CONFIG_HOST_STOCK_MAX)
                stock = CONFIG_HOST_STOCK_MAX;
        return stock < limit ? stock : limit;
}
