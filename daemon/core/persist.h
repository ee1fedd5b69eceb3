/*
 * persist — keeps the state record (ledger.h) true while the daemon runs:
 * what the record says of a buffer is derived here, in one place, from
 * the buffer and its move, and written whenever one of them changes in a
 * way a restart must know (the callers: alloc, free, a move's start, its
 * copy's end, its finish or abandon, a resume). The memory only the daemon
 * holds while it is a buffer's only copy is kept by name at the same time
 * and forgotten when it stops being so.
 *
 * The rules (ARCHITECTURE.md "Restarts"):
 *   - no move: the buffer's tier holds its bytes; VRAM is mapped by its
 *     owner (identity recorded); a host backing is an arena span (parts
 *     recorded) or an allocation of its own (kept as "h<id>");
 *   - moving out: VRAM holds the bytes until the move finishes; the host
 *     copy is recorded once the copy is over and whole (the late remap is
 *     sent after that); VRAM its owner was told to unmap early is kept as
 *     "m<id>" until the move ends;
 *   - moving in: the host copy holds the bytes until the move finishes
 *     (the owner's ack is in): a restart finds it on host.
 * Every call is a no-op when the server has no ledger ([restart] keep =
 * off). A failure to write (the record cannot grow, a keep fails) is
 * logged once and counted; the daemon goes on (what it cannot record, a
 * restart loses, and says so).
 */
#ifndef GMD_PERSIST_H
#define GMD_PERSIST_H

typedef struct gmd_server gmd_server;
typedef struct gmd_dbuffer gmd_dbuffer;
typedef struct gmd_session gmd_session;

/* Record the buffer as it stands now. */
void persist_buffer(gmd_server *server, gmd_dbuffer *buffer);

/* The buffer is being freed: clear its record and what was kept for it. */
void persist_buffer_gone(gmd_server *server, gmd_dbuffer *buffer);

/* Record the session (its hello is done: name, priority, token). */
void persist_session(gmd_server *server, gmd_session *session);

/* The session is closing. */
void persist_session_gone(gmd_server *server, gmd_session *session);

/* Keep the arena pieces built since the last call, and the ids given. */
void persist_upkeep(gmd_server *server);

#endif
