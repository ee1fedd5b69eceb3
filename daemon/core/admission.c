/*
 * admission — see admission.h. A user's connections and unread reply
 * bytes are counts in its record (users.h); its buffers are counted by
 * walking the sessions (max_clients bounds the walk), once per
 * allocation, never per packet read.
 */
#include "admission.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "evict.h"
#include "kepttally.h"
#include "server.h"
#include "session.h"
#include "timeutil.h"

/* Is the peer root or in [daemon] admin_group (as session_apply_config
 * decides for a session)? Its uid in `ret_uid`. */
static bool peer_is_admin(const gmd_config *c, int fd, uid_t *ret_uid)
{
        struct ucred cred;
        socklen_t len = sizeof(cred);
        gid_t groups[32];

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
                *ret_uid = (uid_t)-1;
                return false;
        }
        *ret_uid = cred.uid;
        if (cred.uid == 0 || (c->admin_gid != (gid_t)-1 && cred.gid == c->admin_gid))
                return true;
        len = sizeof(groups);
        if (c->admin_gid == (gid_t)-1 ||
            getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
                return false;
        for (unsigned i = 0; i < len / sizeof(gid_t); i++)
                if (groups[i] == c->admin_gid)
                        return true;
        return false;
}

static unsigned user_sessions(gmd_server *server, uid_t uid)
{
        gmd_user *user = users_find(&server->users, uid);

        return user ? user->n_sessions : 0;
}

int admission_check_connect(gmd_server *server, int fd, uid_t *ret_uid,
                            char *why, size_t len)
{
        const gmd_config *c = &server->config;
        uid_t uid;
        bool admin = peer_is_admin(c, fd, &uid);

        *ret_uid = uid;
        unsigned open_to_all = c->max_clients - c->admin_clients;

        if (server->sessions.n >= c->max_clients) {
                snprintf(why, len, "gpu-memd serves %u clients, the most [limits] "
                         "max_clients allows; try again when some have left",
                         server->sessions.n);
                return -EUSERS;
        }
        if (admin)
                return 0;
        if (server->sessions.n >= open_to_all) {
                snprintf(why, len, "gpu-memd serves %u clients; the last %u of "
                         "[limits] max_clients (%u) are kept for administrators",
                         server->sessions.n, c->admin_clients, c->max_clients);
                return -EUSERS;
        }
        if (c->max_clients_per_user &&
            user_sessions(server, uid) >= c->max_clients_per_user) {
                snprintf(why, len, "uid %u already has %u connections, the most "
                         "[limits] max_clients_per_user allows", (unsigned)uid,
                         c->max_clients_per_user);
                return -EUSERS;
        }
        return 0;
}

bool admission_allow_buffer(gmd_session *s, gmd_result *ret)
{
        unsigned limit = kepttally_bound(&s->server->config);
        unsigned n = 0, parked = 0, kept;
        char held[96] = "";
        gmd_list *pos;

        list_for_each(pos, &s->server->sessions.all) {
                const gmd_session *o = container_of(pos, gmd_session, link);

                if (o->uid == s->uid) {
                        n += o->n_buffers;   /* parked ones keep their fds too */
                        parked += o->parking.n;
                }
        }
        /* Fds of freed buffers its processes keep hold a witness each
         * (keptfd.h): the daemon's fds as much as buffers. */
        kept = kepttally_found_count(&s->server->keptfd.tally, s->uid);
        n += kept;
        if (n < limit)
                return true;
        /* Over only by what the user's mapping caches hold: they are asked
         * back (and come back at once), so the cache never costs a client
         * an allocation; the overshoot is bounded by what was parked. */
        if (n - parked < limit) {
                evict_reclaim_user(&s->server->sessions.all, s->server->devices.n,
                                   s->uid);
                return true;
        }
        n -= parked;
        if (kept)
                snprintf(held, sizeof(held), " (%u of them fds of freed "
                         "buffers its processes keep: close them)", kept);
        result_error(ret, GMD_ERR_LIMIT,
                     "uid %u holds %u buffers%s, the most [limits] "
                     "max_buffers_per_user allows%s; free some first",
                     (unsigned)s->uid, n, held,
                     s->server->config.max_buffers_per_user ? "" :
                     " (half of gpu-memd's open-file limit)");
        return false;
}

uint64_t admission_sweep_hellos(gmd_server *server)
{
        uint64_t now = now_ms(), limit = server->config.hello_timeout_ms;
        uint64_t next = 0;
        gmd_list *pos;
        gmd_result res;
        char why[96];

        list_for_each(pos, &server->sessions.all) {
                gmd_session *s = container_of(pos, gmd_session, link);
                uint64_t due = s->connected_ms + limit;

                if (s->hello_done || s->closing || s->close_pending ||
                    s->answers.close_after)
                        continue;
                if (due <= now) {
                        snprintf(why, sizeof(why), "no hello within %llu ms "
                                 "([limits] hello_timeout_ms)",
                                 (unsigned long long)limit);
                        server->stats.disconnects_protocol++;
                        result_error(&res, GMD_ERR_TIMED_OUT,
                                     "gpu-memd closed the connection: %s", why);
                        session_answer(s, ANSWER_NOTICE, 0, &res);
                        session_close_after_answers(s, why);
                } else if (!next || due - now < next) {
                        next = due - now;
                }
        }
        return next;
}
