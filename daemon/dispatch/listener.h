/*
 * listener — the daemon's front door on its socket: the listening socket
 * (made here, or passed by systemd), accepting connections a few per loop
 * turn and admitting or refusing each, pausing when out of fds, the hello
 * deadline's timer, and the scratch buffers the sessions' packets are read
 * into and encoded in (session_io.c). The dispatch layer's own state:
 * the server holds it (server->listener) and knows nothing inside it.
 */
#ifndef GMD_LISTENER_H
#define GMD_LISTENER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "wire.h"

typedef struct gmd_server gmd_server;
typedef struct gmd_session gmd_session;

typedef struct gmd_listener {
        gmd_server *server;
        int fd;                       /* the listening socket, or -1 */
        bool fd_owned;                /* false when systemd passed it */
        bool listening;               /* poll is initialised */
        uv_poll_t poll;
        int spare_fd;                 /* /dev/null, given up to refuse a
                                       * client when out of fds */
        uv_timer_t accept_timer;      /* accepting again after EMFILE */
        uv_timer_t sweep_timer;       /* hello deadlines (admission.h) */
        bool sweep_open;              /* both timers are initialised */

        /* What a session's packet goes to (request_handle; a test's own). */
        void (*on_packet)(gmd_session *session, gmd_wire_packet *packet);
        /* Receive and encode scratch: one loop thread, so one of each. */
        uint8_t rx[GMD_WIRE_MAX_PACKET];
        uint8_t tx[GMD_WIRE_MAX_PAYLOAD];
} gmd_listener;

/* A listener for `server` whose sessions' packets go to `on_packet`; it
 * listens from listener_start on. */
int listener_new(gmd_server *server,
                 void (*on_packet)(gmd_session *, gmd_wire_packet *),
                 gmd_listener **ret_listener);

/* Listen on the config's socket_path, or on `fd` when >= 0 (socket
 * activation), and accept from the loop. */
int listener_start(gmd_listener *listener, int fd);

/* Give the socket file the config's mode and group again (a reload), if
 * this daemon made it. */
void listener_set_access(gmd_listener *listener, const gmd_config *config);

/* Stop accepting: the handles close with the loop's next turn. */
void listener_stop(gmd_listener *listener);

/* Close the sockets (removing the socket file this daemon made) and free.
 * Accepts NULL, returns NULL. */
gmd_listener *listener_free(gmd_listener *listener);

#endif
