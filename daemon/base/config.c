/*
 * config — see config.h. Every key is one row of `config_keys`: its section,
 * name, kind and where it lives in gmd_config. Parsing, defaults checking
 * and config_dump all walk the same table, so a key cannot be documented in
 * one place and missing in another.
 */
#include "config.h"

#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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
} key_kind;

typedef struct config_key {
        const char *section;
        const char *name;
        key_kind kind;
        size_t offset;
        size_t size;
        unsigned max;     /* KEY_UINT */
} config_key;

#define KEY(sec, nm, kind, field, max) \
        { sec, nm, kind, offsetof(gmd_config, field), \
          sizeof(((gmd_config *)0)->field), max }

static const config_key config_keys[] = {
        KEY("daemon", "socket", KEY_STRING, socket_path, 0),
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
        KEY("limits", "max_clients", KEY_UINT, max_clients, 65536),
        KEY("limits", "max_buffers_per_client", KEY_UINT, max_buffers_per_client, 1u << 24),
        KEY("limits", "max_waiting_per_client", KEY_UINT, max_waiting_per_client, 4096),
        KEY("limits", "max_send_queue", KEY_UINT, max_send_queue, 1u << 20),
        KEY("limits", "max_send_queue_bytes", KEY_SIZE, max_send_queue_bytes, 0),
        KEY("limits", "max_user_send_queue_bytes", KEY_SIZE, max_user_send_queue_bytes, 0),
        KEY("limits", "max_clients_per_user", KEY_COUNT, max_clients_per_user, 65536),
        KEY("limits", "admin_clients", KEY_COUNT, admin_clients, 65536),
        KEY("limits", "hello_timeout_ms", KEY_UINT, hello_timeout_ms, 600000),
        KEY("limits", "max_buffers_per_user", KEY_COUNT, max_buffers_per_user, 1u << 24),
        KEY("limits", "max_waiting_per_user", KEY_COUNT, max_waiting_per_user, 1u << 20),
        KEY("limits", "wait_hold_ms", KEY_COUNT, wait_hold_ms, 3600000),
        KEY("limits", "reclaim_timeout_ms", KEY_UINT, reclaim_timeout_ms, 3600000),
        KEY("limits", "priority_grace_ms", KEY_COUNT, priority_grace_ms, 3600000),
        KEY("limits", "memory_slice_ms", KEY_COUNT, memory_slice_ms, 3600000),
        KEY("limits", "user_turn_us", KEY_COUNT, user_turn_us, 1000000),
        KEY("swap", "chunk_size", KEY_SIZE, swap_chunk_size, 0),
        KEY("swap", "copies_in_flight", KEY_UINT, swap_copies_in_flight, 64),
        KEY("swap", "bytes_in_flight", KEY_SIZE, swap_bytes_in_flight, 0),
        KEY("swap", "preempt_step", KEY_SIZE, swap_preempt_step, 0),
        KEY("swap", "keep_vram", KEY_BOOL, swap_keep_vram, 0),
        KEY("sim", "devices", KEY_UINT, sim_devices, 16),
        KEY("sim", "vram", KEY_SIZE, sim_vram, 0),
        KEY("sim", "granularity", KEY_SIZE, sim_granularity, 0),
        KEY("sim", "copy_rate", KEY_SIZE, sim_copy_rate, 0),
        KEY("sim", "shared_link", KEY_BOOL, sim_shared_link, 0),
        KEY("metrics", "listen", KEY_STRING, metrics_listen, 0),
        KEY("metrics", "clients", KEY_STRING, metrics_clients, 0),
};

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
        config->reclaim_timeout_ms = 2000;
        config->user_turn_us = 100;
        config->swap_chunk_size = 64ull << 20;
        config->swap_copies_in_flight = 2;
        config->swap_bytes_in_flight = 64ull << 20;
        config->swap_preempt_step = 4ull << 20;
        config->swap_keep_vram = true;
        config->host_stock_grow = true;
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
        for (size_t i = 0; i < sizeof(config_keys) / sizeof(config_keys[0]); i++) {
                if (strcmp(config_keys[i].section, section) != 0)
                        continue;
                *ret_section_known = 1;
                if (strcmp(config_keys[i].name, name) == 0)
                        return &config_keys[i];
        }
        return NULL;
}

/* Parse `value` for `key` into `field`. Returns a hint on failure. */
static const char *key_parse(const config_key *key, const char *value,
                             void *field)
{
        char *end;

        switch (key->kind) {
        case KEY_STRING:
                if (strlen(value) >= key->size)
                        return "value too long";
                strcpy(field, value);
                return NULL;
        case KEY_BACKEND:
                if (strcmp(value, "auto") && strcmp(value, "cuda") &&
                    strcmp(value, "sim"))
                        return "expected auto, cuda or sim";
                strcpy(field, value);
                return NULL;
        case KEY_LOG_LEVEL:
                if (parse_log_level(value, field) < 0)
                        return "expected error, warning, notice, info or debug";
                return NULL;
        case KEY_MODE: {
                unsigned long mode;

                errno = 0;
                mode = strtoul(value, &end, 8);
                if (errno || end == value || *end || mode > 0777)
                        return "expected octal permission bits such as 0660";
                *(unsigned *)field = (unsigned)mode;
                return NULL;
        }
        case KEY_UINT:
        case KEY_COUNT: {
                unsigned long n;

                errno = 0;
                n = strtoul(value, &end, 10);
                if (errno || end == value || *end || *value == '-' ||
                    n < (key->kind == KEY_UINT ? 1u : 0u) || n > key->max)
                        return "expected a whole number in range";
                *(unsigned *)field = (unsigned)n;
                return NULL;
        }
        case KEY_SIZE:
                if (size_parse(value, field) < 0)
                        return "expected a size such as 512M or 2G";
                return NULL;
        case KEY_SIZE_SPEC:
                if (strcmp(value, "auto") == 0) {
                        *(gmd_size_spec *)field = (gmd_size_spec){ 0, 0 };
                        return NULL;
                }
                if (size_spec_parse(value, field) < 0)
                        return "expected auto, a size such as 40G or a percentage such as 90%";
                return NULL;
        case KEY_POOL_SIZE: {
                gmd_size_spec *spec = field;

                if (strcmp(value, "auto") == 0 && key->name[0] == 'v') {
                        *spec = (gmd_size_spec){ 0, 0 };
                        return NULL;
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
                return NULL;
        }
        case KEY_BOOL:
                if (!strcasecmp(value, "yes") || !strcasecmp(value, "true") ||
                    !strcasecmp(value, "on") || !strcmp(value, "1"))
                        *(bool *)field = true;
                else if (!strcasecmp(value, "no") || !strcasecmp(value, "false") ||
                         !strcasecmp(value, "off") || !strcmp(value, "0"))
                        *(bool *)field = false;
                else
                        return "expected yes or no";
                return NULL;
        }
        return "unknown key kind";
}

int config_set(gmd_config *config, const char *section, const char *key,
               const char *value, const char *where, FILE *err)
{
        const config_key *k;
        const char *hint;
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
        hint = key_parse(k, value, (char *)config + k->offset);
        if (hint) {
                fprintf(err, "%s: bad value '%s' for key '%s' in [%s]: %s\n",
                        where, value, key, section, hint);
                return -EINVAL;
        }
        return 0;
}

static int resolve_group(const char *key, const char *name, gid_t *ret_gid,
                         FILE *err)
{
        struct group *gr;

        *ret_gid = (gid_t)-1;
        if (!*name)
                return 0;
        gr = getgrnam(name);
        if (!gr) {
                fprintf(err, "config: [daemon] %s: no group named '%s' on this machine\n",
                        key, name);
                return -EINVAL;
        }
        *ret_gid = gr->gr_gid;
        return 0;
}

int config_validate(gmd_config *config, FILE *err)
{
        uint64_t g = config->sim_granularity;

        if (resolve_group("socket_group", config->socket_group,
                          &config->socket_gid, err) < 0 ||
            resolve_group("admin_group", config->admin_group,
                          &config->admin_gid, err) < 0)
                return -EINVAL;
        if (!config->socket_path[0] || !config->metrics_listen[0]) {
                fprintf(err, "config: [daemon] socket and [metrics] listen must "
                        "not be empty\n");
                return -EINVAL;
        }

        if (strcmp(config->metrics_clients, "users") != 0 &&
            strcmp(config->metrics_clients, "ids") != 0 &&
            strcmp(config->metrics_clients, "names") != 0) {
                fprintf(err, "config: [metrics] clients must be users, ids or names, "
                        "not '%s'\n", config->metrics_clients);
                return -EINVAL;
        }
        if (config->admin_clients >= config->max_clients) {
                fprintf(err, "config: [limits] admin_clients (%u) must be less than "
                        "max_clients (%u): the slots it keeps are part of them\n",
                        config->admin_clients, config->max_clients);
                return -EINVAL;
        }
        /* One reply is at most 128K and a bit (wire.h). */
        if (config->max_send_queue_bytes < (256u << 10) ||
            config->max_user_send_queue_bytes < (256u << 10)) {
                fprintf(err, "config: [limits] max_send_queue_bytes and "
                        "max_user_send_queue_bytes must be at least 256K (two of "
                        "the largest replies)\n");
                return -EINVAL;
        }
        if (g < 4096 || (g & (g - 1)) != 0) {
                fprintf(err, "config: [sim] granularity must be a power of two of at least 4K\n");
                return -EINVAL;
        }
        if (config->swap_chunk_size < (1u << 20)) {
                fprintf(err, "config: [swap] chunk_size must be at least 1M\n");
                return -EINVAL;
        }
        if (config->swap_preempt_step && config->swap_preempt_step < (256u << 10)) {
                fprintf(err, "config: [swap] preempt_step must be 0 (off) or at "
                        "least 256K\n");
                return -EINVAL;
        }
        if (config->sim_vram < g) {
                fprintf(err, "config: [sim] vram must be at least one granule (%llu bytes)\n",
                        (unsigned long long)g);
                return -EINVAL;
        }
        return 0;
}

/* Debian's libinih is built without line numbers in the handler, so the
 * reader counts lines itself: the handler runs right after the line it is
 * called for was read. */
typedef struct load_state {
        gmd_config *config;
        const char *path;
        FILE *file;
        FILE *err;
        int line;
        int failed;
} load_state;

static char *load_reader(char *str, int num, void *stream)
{
        load_state *st = stream;
        char *r = fgets(str, num, st->file);

        if (r)
                st->line++;
        return r;
}

static int load_handler(void *user, const char *section, const char *name,
                        const char *value)
{
        load_state *st = user;
        char where[PATH_MAX + 32];

        if (st->failed)
                return 0;
        snprintf(where, sizeof(where), "%s:%d", st->path, st->line);
        if (!*section) {
                fprintf(st->err, "%s: key '%s' outside any section\n", where, name);
                st->failed = 1;
                return 0;
        }
        if (config_set(st->config, section, name, value, where, st->err) < 0) {
                st->failed = 1;
                return 0;   /* stop at the first bad line */
        }
        return 1;
}

int config_load_file(gmd_config *config, const char *path, FILE *err)
{
        load_state st = { .config = config, .path = path, .err = err };
        FILE *f;
        int r;

        f = fopen(path, "re");
        st.file = f;
        if (!f) {
                r = -errno;
                fprintf(err, "%s: cannot read config file: %s\n", path,
                        strerror(errno));
                return r;
        }
        r = ini_parse_stream(load_reader, &st, load_handler, &st);
        fclose(f);
        if (st.failed)
                return -EINVAL;
        if (r > 0) {
                fprintf(err, "%s:%d: syntax error (expected [section] or key = value)\n",
                        path, r);
                return -EINVAL;
        }
        if (r < 0) {
                fprintf(err, "%s: cannot parse config file\n", path);
                return -EIO;
        }
        return 0;
}

static void key_print(const config_key *key, const void *field, FILE *out)
{
        char buf[32];

        switch (key->kind) {
        case KEY_STRING:
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

        for (size_t i = 0; i < sizeof(config_keys) / sizeof(config_keys[0]); i++) {
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
