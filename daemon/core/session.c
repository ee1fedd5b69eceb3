/*
 * session — see session.h. The record of one client as the core keeps it;
 * its socket is dispatch/session_io.c's, which embeds this record in its
 * own. Closing is marked here and done by the scheduling pass, so nothing
 * below the dispatch layer ever frees a session under its caller.
 */
#include "session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "server.h"
#include "timeutil.h"

const char *session_describe(const gmd_session *session, char *buf, size_t len)
{
        snprintf(buf, len, "client %llu (pid %d, uid %u%s%s)",
                 (unsigned long long)session->id, (int)session->pid,
                 (unsigned)session->uid, session->name[0] ? ", " : "",
                 session->name);
        return buf;
}

void sessions_init(gmd_sessions *sessions)
{
        memset(sessions, 0, sizeof(*sessions));
        list_init(&sessions->all);
        list_init(&sessions->close_pending);
        list_init(&sessions->answers_due);
}

int session_init(gmd_session *s, gmd_server *server, const gmd_peer *peer)
{
        s->user = users_hold(&server->users, peer->uid);
        if (!s->user)
                return -ENOMEM;
        s->server = server;
        s->id = ++server->sessions.next_id;
        s->pid = peer->pid;
        s->uid = peer->uid;
        s->gid = peer->gid;
        memcpy(s->groups, peer->groups, sizeof(s->groups));
        s->n_groups = peer->n_groups;
        session_apply_config(s);
        s->priority = s->limits.priority;
        s->connected_ms = now_ms();
        list_init(&s->buffers);
        waits_init(&s->waits);
        answers_init(&s->answers, &server->sessions.answers_due, &server->pending);
        list_init(&s->link);
        list_init(&s->close_link);
        return 0;
}

void session_link(gmd_session *s)
{
        list_add_tail(&s->server->sessions.all, &s->link);
        s->server->sessions.n++;
        s->user->n_sessions++;
}

void session_fini(gmd_session *s)
{
        users_release(&s->server->users, s->user);
}

bool session_end(gmd_session *s, const char *reason)
{
        gmd_server *server = s->server;
        uint64_t bytes = s->bytes, kept = s->reuse.kept_bytes;
        unsigned n_buffers = s->n_buffers;
        char who[128];

        if (s->closing)
                return false;
        s->closing = true;
        s->reuse.gone = true;
        if (s->close_pending) {
                s->close_pending = false;
                list_remove(&s->close_link);
        }
        session_describe(s, who, sizeof(who));
        if (reason)
                log_warning("%s: %s — disconnecting", who, reason);

        /* Its buffers, waiters, waits and kept VRAM: the layer above's.
         * What it is owed goes after: freeing a buffer may fail an
         * acquire waiting for it, an answer nobody will read. */
        server->sessions.on_closed(s);
        answers_drop(&s->answers);
        list_remove(&s->link);
        server->sessions.n--;
        s->user->n_sessions--;
        if (s->hello_done)
                log_info("%s disconnected; freed %u buffers (%llu bytes)",
                         who, n_buffers, (unsigned long long)bytes);

        /* Memory came back: serve whoever waits for it. */
        if (n_buffers > 0 || kept > 0)
                pending_mark(&server->pending, PENDING_ROOM);
        return true;
}

int session_lost_packet(gmd_session *s, const char *what, int err)
{
        char why[96];

        snprintf(why, sizeof(why), "%s: %s", what, strerror(-err));
        session_close_later(s, why);
        return err;
}

void session_apply_config(gmd_session *s)
{
        const gmd_config *c = &s->server->config;

        quota_resolve(c->quota_rules, c->n_quota_rules, s->uid, s->groups,
                      s->n_groups, &s->limits);
        s->admin = s->uid == 0;
        for (unsigned i = 0; i < s->n_groups && c->admin_gid != (gid_t)-1; i++)
                if (s->groups[i] == c->admin_gid)
                        s->admin = true;
        if (s->priority > s->limits.max_priority && !s->priority_by_admin)
                s->priority = s->limits.max_priority;
}

void session_close_later(gmd_session *s, const char *reason)
{
        if (s->closing || s->close_pending)
                return;
        s->close_pending = true;
        snprintf(s->close_reason, sizeof(s->close_reason), "%s", reason);
        list_add_tail(&s->server->sessions.close_pending, &s->close_link);
        pending_mark(&s->server->pending, PENDING_CLOSES);
}

int session_answer(gmd_session *s, answer_kind kind, uint32_t request_id,
                   const gmd_result *r)
{
        int ret;

        if (s->closing || s->close_pending)
                return -ECONNRESET;
        ret = answers_push(&s->answers, kind, request_id, r);
        if (ret == -ENOMEM)
                session_lost_packet(s, "could not queue an answer", ret);
        return ret;
}

void session_close_after_answers(gmd_session *s, const char *reason)
{
        if (s->closing || s->close_pending || s->answers.close_after)
                return;
        answers_close_after(&s->answers, reason);
}

int session_notify_remap(gmd_session *s, const gmd_remap_notice *notice)
{
        return s->server->sessions.ops->notify_remap(s, notice);
}

int session_notify_reclaim(gmd_session *s, unsigned device, uint64_t bytes)
{
        return s->server->sessions.ops->notify_reclaim(s, device, bytes);
}

void session_user_usage(const gmd_list *sessions, uid_t uid, gmd_usage *ret_usage)
{
        gmd_usage u = { { 0, 0 }, 0, 0, 0, 0 };
        const gmd_list *pos;

        list_for_each(pos, sessions) {
                const gmd_session *s = container_of(pos, gmd_session, link);

                if (s->uid != uid)
                        continue;
                u.bytes[GMD_TIER_VRAM] += s->tier_bytes[GMD_TIER_VRAM];
                u.bytes[GMD_TIER_HOST] += s->tier_bytes[GMD_TIER_HOST];
                /* Only VRAM-resident buffers are ever parked (parking.c). */
                u.parked += s->parking.bytes;
                u.buffers += s->n_buffers;
                u.parked_buffers += s->parking.n;
                for (unsigned d = 0; d < GMD_MAX_DEVICES; d++)
                        u.outside += s->outside_on[d];
        }
        *ret_usage = u;
}
