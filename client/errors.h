/*
 * errors — the per-thread explanation behind gmd_last_error(), and the
 * mapping from the protocol's ErrorCode to the library's return codes.
 * Thread-local like errno: the I/O thread never writes it for a caller;
 * it hands words over in the request record and the caller sets them.
 */
#ifndef GMD_ERRORS_H
#define GMD_ERRORS_H

/* Set this thread's last error, printf style. */
void gmd__error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The return code for a daemon ErrorReply code (Gmd__ErrorCode). */
int gmd__error_from_wire(int code);

#endif
