/*
 * options — gpu-memd's command line. Options are applied over the config
 * file through config_set(), so an option and a config key are checked by
 * the same code and fail with the same kind of message.
 */
#ifndef GMD_OPTIONS_H
#define GMD_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>

#include "config.h"

typedef enum options_action {
        OPTIONS_RUN,
        OPTIONS_HELP,
        OPTIONS_VERSION,
        OPTIONS_PRINT_CONFIG,
} options_action;

/*
 * Parse argv: read --config FILE (if given) over the defaults, then apply
 * the other options. Returns 0 with *ret_action set, or -EINVAL after
 * writing one message to `err` (the caller exits with status 2).
 */
int options_parse(int argc, char **argv, gmd_config *config,
                  options_action *ret_action, FILE *err);

void options_usage(FILE *out);

#endif
