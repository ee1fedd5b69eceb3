/*
 * errors — the per-thread explanation behind gmd_last_error(), the
 * mapping from the protocol's ErrorCode to the library's return codes, and
 * the parsing of the library's on/off environment switches, which explain
 * themselves there.
 * Thread-local like errno: the I/O thread never writes it for a caller;
 * it hands words over in the request record and the caller sets them.
 */
#ifndef GMD_ERRORS_H
#define GMD_ERRORS_H

#include <stdbool.h>

/* Set this thread's last error, printf style. */
void gmd__error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The return code for a daemon ErrorReply code (Gmd__ErrorCode). */
int gmd__error_from_wire(int code);

/* An environment switch: "0" off; "1", unset or empty on. Anything else is
 * -EINVAL with gmd_last_error() naming `name` and saying what 0 does
 * (`off_means`). */
int gmd__env_switch(const char *name, const char *off_means, bool *ret_on);

#endif
