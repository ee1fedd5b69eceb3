/*
 * gmd_sd_probe — the daemon's accounting in one line, for test_systemd.sh
 * (a shell test has no cmocka to call gmd_query_status with). It connects
 * to $GPU_MEMD_SOCKET, else the default socket, asks for the status with
 * the clients, and prints
 *   buffers N bytes B host H restores R restored_ms T
 * N: every buffer the daemon counts; B: the bytes its clients hold, summed
 * over the clients, as test_restart compares them; H: of those, on host
 * memory (paged out); R: 1 when this daemon took over an earlier one's
 * state. Exit 1 (with the library's sentence on stderr) when the daemon
 * cannot be asked.
 */
#include <inttypes.h>
#include <stdio.h>

#include "gpumem.h"

int main(void)
{
        gmd_client *c = NULL;
        gmd_status *st = NULL;
        uint64_t bytes = 0, host = 0;

        if (gmd_connect(NULL, "sd-probe", &c) < 0 ||
            gmd_query_status(c, GMD_STATUS_CLIENTS, 0, &st) < 0) {
                fprintf(stderr, "gmd_sd_probe: %s\n", gmd_last_error());
                return 1;
        }
        for (size_t i = 0; i < st->n_clients; i++) {
                bytes += st->clients[i].bytes;
                host += st->clients[i].host_bytes;
        }
        printf("buffers %" PRIu32 " bytes %" PRIu64 " host %" PRIu64
               " restores %" PRIu32 " restored_ms %" PRIu64 "\n",
               st->total_buffers, bytes, host, st->restores, st->restored_ms);
        gmd_status_free(st);
        gmd_disconnect(c);
        return 0;
}
