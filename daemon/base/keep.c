/*
 * keep — see keep.h. What both implementations share: the rule for names
 * and the restored list's ownership.
 */
#include "keep.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool keep_name_valid(const char *name)
{
        size_t n;

        if (!name)
                return false;
        for (n = 0; name[n]; n++) {
                char c = name[n];

                if (n + 1 >= GMD_KEEP_NAME_MAX)
                        return false;
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
                        return false;
        }
        return n > 0;
}

int keep_take(gmd_keep *k, const char *name)
{
        for (unsigned i = 0; i < k->n_restored; i++) {
                gmd_kept *e = &k->restored[i];

                if (e->fd >= 0 && strcmp(e->name, name) == 0) {
                        int fd = e->fd;

                        e->fd = -1;
                        return fd;
                }
        }
        return -ENOENT;
}

void keep_restored_free(gmd_keep *k)
{
        for (unsigned i = 0; i < k->n_restored; i++)
                if (k->restored[i].fd >= 0)
                        close(k->restored[i].fd);
        free(k->restored);
        k->restored = NULL;
        k->n_restored = 0;
}
