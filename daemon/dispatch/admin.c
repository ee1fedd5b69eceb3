/*
 * admin — see admin.h. A drain revokes each buffer (so the client library
 * knows why its pointers died) before the connection closes; a priority
 * set by an admin sticks across reloads.
 */
#include "admin.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "buffer.h"
#include "log.h"
#include "move.h"
#include "request.h"
#include "server.h"
#include "session.h"
#include "session_io.h"
#include "tiering.h"
#include "waitq.h"

static void admin_apply(gmd_session *target, const Gmd__AdminRequest *m,
                        const char *by)
{
        gmd_server *server = target->server;
        gmd_list *pos, *tmp;
        char who[128];
        unsigned n = 0;

        session_describe(target, who, sizeof(who));
        switch (m->op) {
        case GMD__ADMIN_OP__ADMIN_PRIORITY:
                log_info("%s: priority %d -> %d by %s", who, target->priority,
                         m->priority, by);
                target->priority = m->priority;
                target->priority_by_admin = true;
                return;
        case GMD__ADMIN_OP__ADMIN_DRAIN:
                list_for_each_safe(pos, tmp, &target->buffers) {
                        gmd_dbuffer *b = container_of(pos, gmd_dbuffer, owner_link);
                        Gmd__RevokeNotify note = GMD__REVOKE_NOTIFY__INIT;

                        note.buffer_id = b->id;
                        note.reason = GMD__ERROR_CODE__ERR_PERMISSION;
                        note.message = "drained by an administrator";
                        session_send(target, GMD__MSG_TYPE__MSG_REVOKE, 0,
                                     &note.base, NULL, 0);
                        move_free_buffer(server, b);
                        n++;
                }
                log_info("%s: drained by %s (%u buffers revoked)", who, by, n);
                /* What it is owed (an acquire that waited for a buffer
                 * just freed fails), and the revokes held behind it, go
                 * out before the connection closes. */
                request_send_answers(target);
                session_hang_up(target);
                session_close(target, "drained by an administrator");
                return;
        case GMD__ADMIN_OP__ADMIN_EVICT: {
                int r = tiering_pageout_all(target, MOVE_EVICT);

                if (r < 0)
                        log_warning("%s: evict by %s stopped: %s", who, by,
                                    r == -ENOSPC ? "no room in host memory "
                                    "([pools] host_limit)" : strerror(-r));
                else
                        log_info("%s: evicted by %s (%d idle buffers moving to host "
                                 "memory)", who, by, r);
                return;
        }
        default:
                return;
        }
}

gmd_outcome admin_handle(gmd_session *s, uint32_t id, const Gmd__AdminRequest *m,
                         gmd_result *ret)
{
        gmd_server *server = s->server;
        gmd_list *pos, *tmp;
        char by[128];
        unsigned n = 0;

        if (!s->admin)
                return result_error(ret, GMD__ERROR_CODE__ERR_PERMISSION,
                                    "administrative requests need root or membership "
                                    "in the admin group%s%s%s",
                                    server->config.admin_group[0] ? " '" : "",
                                    server->config.admin_group,
                                    server->config.admin_group[0] ? "'" :
                                    " ([daemon] admin_group is not set)");
        if (m->op == GMD__ADMIN_OP__ADMIN_EVICT && !server_can_move(server))
                return result_error(ret, GMD__ERROR_CODE__ERR_UNSUPPORTED,
                                    "evict moves a client's idle buffers to host "
                                    "memory; the %s backend cannot move buffers yet",
                                    server->backend->ops->name);
        if (m->op != GMD__ADMIN_OP__ADMIN_DRAIN &&
            m->op != GMD__ADMIN_OP__ADMIN_PRIORITY &&
            m->op != GMD__ADMIN_OP__ADMIN_EVICT)
                return result_error(ret, GMD__ERROR_CODE__ERR_INVALID,
                                    "unknown administrative operation %d", (int)m->op);
        if (m->op == GMD__ADMIN_OP__ADMIN_PRIORITY &&
            (m->priority < GMD_PRIORITY_MIN || m->priority > GMD_PRIORITY_MAX))
                return result_error(ret, GMD__ERROR_CODE__ERR_INVALID,
                                    "priority must be from %d to %d",
                                    GMD_PRIORITY_MIN, GMD_PRIORITY_MAX);
        session_describe(s, by, sizeof(by));
        list_for_each_safe(pos, tmp, &server->sessions.all) {
                gmd_session *t = container_of(pos, gmd_session, link);

                if (!t->hello_done || t->closing || (uint32_t)t->pid != m->pid)
                        continue;
                n++;
                /* Draining yourself: answer first, the connection closes. */
                if (t == s && m->op == GMD__ADMIN_OP__ADMIN_DRAIN)
                        request_answer(s, id, OUTCOME_OK, ret);
                admin_apply(t, m, by);
        }
        if (n == 0)
                return result_error(ret, GMD__ERROR_CODE__ERR_NOT_FOUND,
                                    "no client of gpu-memd has pid %u", m->pid);
        return s->closing ? OUTCOME_ANSWERED : OUTCOME_OK;
}
