/*
 * admin — the administrative requests of gpumem.h (drain, priority,
 * evict): one AdminRequest each, answered with OkReply or an ErrorReply
 * whose message the caller finds in gmd_last_error(). Who may send them is
 * the daemon's decision alone (SO_PEERCRED and its admin group); the
 * library checks only what it can know without asking.
 */
#include <errno.h>

#include "client.h"
#include "errors.h"
#include "gpumem.pb-c.h"

static int admin_call(gmd_client *client, const char *fn, Gmd__AdminOp op,
                      uint32_t pid, int32_t priority)
{
        Gmd__AdminRequest msg = GMD__ADMIN_REQUEST__INIT;
        gmd_request req = { .device = 0 };
        int r;

        if (!client) {
                gmd__error_set("%s: client is NULL", fn);
                return -EINVAL;
        }
        if (pid == 0) {
                gmd__error_set("%s: pid 0 names no process", fn);
                return -EINVAL;
        }
        msg.op = op;
        msg.pid = pid;
        msg.priority = priority;
        r = gmd__client_call(client, &req, GMD__MSG_TYPE__MSG_ADMIN, &msg.base);
        gmd__request_clear(&req);
        return r;
}

/** Revoke and free every buffer of process `pid`, then disconnect it. */
int gmd_admin_drain(gmd_client *client, uint32_t pid)
{
        return admin_call(client, "gmd_admin_drain",
                          GMD__ADMIN_OP__ADMIN_DRAIN, pid, 0);
}

/** Set the priority of process `pid`'s clients. */
int gmd_admin_set_priority(gmd_client *client, uint32_t pid, int32_t priority)
{
        return admin_call(client, "gmd_admin_set_priority",
                          GMD__ADMIN_OP__ADMIN_PRIORITY, pid, priority);
}

/** Revoke and free the released buffers of process `pid`. */
int gmd_admin_evict(gmd_client *client, uint32_t pid)
{
        return admin_call(client, "gmd_admin_evict",
                          GMD__ADMIN_OP__ADMIN_EVICT, pid, 0);
}
