/*
 * client_util — what the test client programs (gmd_test_client,
 * gmd_tier_client) share: parsing a size argument and connecting, with
 * the messages and exit codes the tests read.
 */
#ifndef GMD_CLIENT_UTIL_H
#define GMD_CLIENT_UTIL_H

#include <stddef.h>

#include "gpumem.h"

/* Parse a nonzero size ("16M"); -1 after a message naming `prog`. */
int client_parse_size(const char *prog, const char *text, size_t *ret);

/* gmd_connect, or print "connect-failed CODE" and exit 2. */
gmd_client *client_connect_or_die(const char *prog, const char *name);

#endif
