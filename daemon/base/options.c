/*
 * options — see options.h. Two passes over argv: the first finds --config
 * (so options override the file whatever their order), the second applies
 * the rest.
 */
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>

enum {
        OPT_CONFIG = 'c',
        OPT_HELP = 'h',
        OPT_SOCKET = 's',
        OPT_VERSION = 'V',
        OPT_BACKEND = 0x100,
        OPT_VRAM_LIMIT,
        OPT_HOST_LIMIT,
        OPT_LOG_LEVEL,
        OPT_PRINT_CONFIG,
};

static const struct option long_options[] = {
        { "socket", required_argument, NULL, OPT_SOCKET },
        { "config", required_argument, NULL, OPT_CONFIG },
        { "backend", required_argument, NULL, OPT_BACKEND },
        { "vram-limit", required_argument, NULL, OPT_VRAM_LIMIT },
        { "host-limit", required_argument, NULL, OPT_HOST_LIMIT },
        { "log-level", required_argument, NULL, OPT_LOG_LEVEL },
        { "print-config", no_argument, NULL, OPT_PRINT_CONFIG },
        { "help", no_argument, NULL, OPT_HELP },
        { "version", no_argument, NULL, OPT_VERSION },
        { 0 },
};

/* Which config key each option sets. */
static const struct {
        int opt;
        const char *section, *key;
} option_keys[] = {
        { OPT_SOCKET, "daemon", "socket" },
        { OPT_BACKEND, "daemon", "backend" },
        { OPT_LOG_LEVEL, "daemon", "log_level" },
        { OPT_VRAM_LIMIT, "pools", "vram_limit" },
        { OPT_HOST_LIMIT, "pools", "host_limit" },
};

void options_usage(FILE *out)
{
        fputs("Usage: gpu-memd [OPTION]...\n"
              "Share GPU memory between processes: own the VRAM and a pinned host\n"
              "pool, hand buffers to clients over a Unix socket.\n"
              "\n"
              "  -s, --socket PATH       listen on PATH (default /run/gpu-memd/gpu-memd.sock)\n"
              "  -c, --config FILE       read settings from FILE (INI; see gpu-memd.conf)\n"
              "      --backend NAME      auto, cuda or sim (default auto: cuda if a GPU\n"
              "                          is usable, else sim)\n"
              "      --vram-limit SIZE   VRAM pool per device: bytes (K/M/G/T) or N%\n"
              "                          of the device (default: free memory minus\n"
              "                          [pools] vram_reserve)\n"
              "      --host-limit SIZE   pinned host pool: bytes or N% of RAM (default 25%)\n"
              "      --log-level LEVEL   error, warning, notice, info or debug (default info)\n"
              "      --print-config      print the settings in effect and exit\n"
              "  -h, --help              show this help and exit\n"
              "  -V, --version           show the version and exit\n"
              "\n"
              "Options override the config file. Exit status: 0 after a clean stop\n"
              "(SIGTERM or SIGINT), 1 when the daemon cannot start, 2 on a bad option\n"
              "or config line.\n", out);
}

int options_parse(int argc, char **argv, gmd_config *config,
                  options_action *ret_action, FILE *err)
{
        options_action action = OPTIONS_RUN;
        const char *config_path = NULL;
        int c;

        opterr = 0;
        optind = 1;
        while ((c = getopt_long(argc, argv, ":s:c:hV", long_options, NULL)) != -1) {
                if (c == OPT_CONFIG)
                        config_path = optarg;
        }
        if (config_path && config_load_file(config, config_path, err) < 0)
                return -EINVAL;

        optind = 1;
        while ((c = getopt_long(argc, argv, ":s:c:hV", long_options, NULL)) != -1) {
                char where[64];

                switch (c) {
                case OPT_CONFIG:
                        continue;
                case OPT_HELP:
                        action = OPTIONS_HELP;
                        continue;
                case OPT_VERSION:
                        action = OPTIONS_VERSION;
                        continue;
                case OPT_PRINT_CONFIG:
                        action = OPTIONS_PRINT_CONFIG;
                        continue;
                case ':':
                        fprintf(err, "gpu-memd: option %s needs a value\n",
                                argv[optind - 1]);
                        return -EINVAL;
                case '?':
                        fprintf(err, "gpu-memd: unknown option %s (see gpu-memd --help)\n",
                                argv[optind - 1]);
                        return -EINVAL;
                }
                for (size_t i = 0; i < sizeof(option_keys) / sizeof(option_keys[0]); i++) {
                        if (option_keys[i].opt != c)
                                continue;
                        for (const struct option *o = long_options; o->name; o++)
                                if (o->val == c)
                                        snprintf(where, sizeof(where),
                                                 "gpu-memd: option --%s", o->name);
                        if (config_set(config, option_keys[i].section,
                                       option_keys[i].key, optarg, where, err) < 0)
                                return -EINVAL;
                }
        }
        if (optind < argc) {
                fprintf(err, "gpu-memd: unexpected argument '%s' (see gpu-memd --help)\n",
                        argv[optind]);
                return -EINVAL;
        }
        if (action == OPTIONS_RUN || action == OPTIONS_PRINT_CONFIG) {
                if (config_validate(config, err) < 0)
                        return -EINVAL;
        }
        *ret_action = action;
        return 0;
}
