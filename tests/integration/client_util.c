/*
 * client_util — see client_util.h.
 */
#include "client_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int client_parse_size(const char *prog, const char *text, size_t *ret)
{
        uint64_t v;

        if (gmd_parse_size(text, &v) < 0 || v == 0) {
                fprintf(stderr, "%s: bad size '%s'\n", prog, text);
                return -1;
        }
        *ret = (size_t)v;
        return 0;
}

gmd_client *client_connect_or_die(const char *prog, const char *name)
{
        gmd_client *client = NULL;
        int r = gmd_connect(NULL, name, &client);

        if (r < 0) {
                fprintf(stderr, "%s: connect: %d %s\n", prog, r, gmd_last_error());
                printf("connect-failed %d\n", r);
                exit(2);
        }
        return client;
}
