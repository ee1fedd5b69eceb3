/*
 * errors — gmd_last_error() and the small naming functions of the public
 * API: error codes, tiers, states, and the size helpers (thin wrappers of
 * common/size.c, so gpu-memctl and applications parse sizes the way the
 * daemon's configuration does).
 *
 * The last error is thread-local, like dlerror(): a public call that fails
 * sets it before returning, so it describes the calling thread's failure
 * even while other threads use the same client.
 */
#include "errors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem.h"
#include "gpumem.pb-c.h"
#include "size.h"

static _Thread_local char last_error[512];

int gmd__env_switch(const char *name, const char *off_means, bool *ret_on)
{
        const char *text = secure_getenv(name);

        *ret_on = true;
        if (!text || !*text || strcmp(text, "1") == 0)
                return 0;
        if (strcmp(text, "0") == 0) {
                *ret_on = false;
                return 0;
        }
        gmd__error_set("%s='%.32s' is neither 0 (%s) nor 1", name, text,
                       off_means);
        return -EINVAL;
}

void gmd__error_set(const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(last_error, sizeof(last_error), fmt, ap);
        va_end(ap);
}

int gmd__error_from_wire(int code)
{
        switch (code) {
        case GMD__ERROR_CODE__ERR_INVALID:       return -EINVAL;
        case GMD__ERROR_CODE__ERR_NO_MEMORY:     return GMD_ENOMEM;
        case GMD__ERROR_CODE__ERR_TOO_LARGE:     return GMD_ETOOLARGE;
        case GMD__ERROR_CODE__ERR_NOT_FOUND:     return GMD_ENOENT;
        case GMD__ERROR_CODE__ERR_PERMISSION:    return GMD_EPERM;
        case GMD__ERROR_CODE__ERR_QUOTA:         return GMD_EQUOTA;
        case GMD__ERROR_CODE__ERR_BUSY:          return GMD_EBUSY;
        case GMD__ERROR_CODE__ERR_UNSUPPORTED:   return GMD_ENOTSUP;
        case GMD__ERROR_CODE__ERR_VERSION:       return GMD_EPROTO;
        case GMD__ERROR_CODE__ERR_TIMED_OUT:     return GMD_ETIMEDOUT;
        case GMD__ERROR_CODE__ERR_SHUTTING_DOWN: return GMD_ECONN;
        case GMD__ERROR_CODE__ERR_LIMIT:         return GMD_ELIMIT;
        /* ERR_INTERNAL, ERR_NONE in an error reply, and codes newer than
         * this library: the daemon failed in a way we cannot name. */
        default:                                 return -EIO;
        }
}

/** The explanation of this thread's last failure ("" if none). */
const char *gmd_last_error(void)
{
        return last_error;
}

/** A short description of a return code of this library. */
const char *gmd_strerror(int err)
{
        switch (err) {
        case 0:             return "success";
        case GMD_ENOMEM:    return "no room in the pool";
        case GMD_ETOOLARGE: return "larger than the pool can hold";
        case GMD_ETIMEDOUT: return "deadline passed";
        case GMD_EQUOTA:    return "quota exceeded";
        case GMD_ENOENT:    return "no such buffer";
        case GMD_EPERM:     return "not allowed";
        case GMD_EBUSY:     return "buffer busy";
        case GMD_ENOTSUP:   return "not supported by this daemon or backend";
        case GMD_EPROTO:    return "protocol error";
        case GMD_ECONN:     return "not connected to gpu-memd";
        case GMD_EREVOKED:  return "buffer revoked by the daemon";
        case GMD_ELIMIT:    return "too many requests or buffers";
        default:
                /* strerror's text for the rest; glibc's is a constant
                 * string for every known errno, so this is thread-safe. */
                return err < 0 ? strerror(-err) : "unknown error";
        }
}

/** "vram" or "host". */
const char *gmd_tier_name(gmd_tier tier)
{
        switch (tier) {
        case GMD_TIER_VRAM: return "vram";
        case GMD_TIER_HOST: return "host";
        }
        return "unknown";
}

/** "resident", "moving-out", "moving-in" or "revoked". */
const char *gmd_state_name(gmd_buffer_state state)
{
        switch (state) {
        case GMD_STATE_RESIDENT:   return "resident";
        case GMD_STATE_MOVING_OUT: return "moving-out";
        case GMD_STATE_MOVING_IN:  return "moving-in";
        case GMD_STATE_REVOKED:    return "revoked";
        }
        return "unknown";
}

/** Parse a size such as "512M" or "1.5G" into bytes. 0 or -EINVAL. */
int gmd_parse_size(const char *text, uint64_t *ret_bytes)
{
        uint64_t bytes;
        int r;

        r = size_parse(text, &bytes);
        if (r < 0) {
                gmd__error_set("'%s' is not a size (examples: 4096, 512M, 1.5G)",
                          text ? text : "(null)");
                return -EINVAL;
        }
        *ret_bytes = bytes;
        return 0;
}

/** Format `bytes` for people ("1.5 GiB") into buf. Returns buf. */
char *gmd_format_size(uint64_t bytes, char *buf, size_t len)
{
        if (!buf || len == 0)
                return buf;
        return size_format(bytes, buf, len);
}
