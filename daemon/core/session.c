/*
 * session — see session.h. The record of one client as the core keeps it;
 * its socket is dispatch/session_io.c's, which embeds this record in its
 * own. Closing is marked here and done by the scheduling pass, so nothing
 * below the dispatch layer ever frees a session under its caller. A close
 * goes in two parts: what must go at once (the layer above's on_closed),
 * then the buffers, by batches whose size the loop iteration allows
 * (release_left), so one big close never holds the loop for long.
 */
#include "session.h"

#include <errno.h>
#include <limits.h>
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
        list_init(&sessions->closing);
        list_init(&sessions->answers_due);
        sessions->release_left = SESSION_CLOSE_BATCH;
}

void sessions_next_turn(gmd_sessions *sessions)
{
        sessions->release_left = SESSION_CLOSE_BATCH;
}

uint64_t sessions_closing_vram(const gmd_sessions *sessions, unsigned device)
{
        const gmd_list *pos;
        uint64_t bytes = 0;

        /* No walk while none closes (nor on a record never initialised). */
        if (!sessions->n_closing || device >= GMD_MAX_DEVICES)
                return 0;
        list_for_each(pos, &sessions->closing)
                bytes += container_of(pos, gmd_session, close_link)->vram_on[device];
        return bytes;
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

/* The part of a close that goes at once: from here on the session reads,
 * sends and is owed nothing, and its waiters, waits, loans and records
 * are gone (on_closed); its buffers stay for session_release_some. */
static void session_close_begin(gmd_session *s, const char *reason)
{
        uint64_t kept = s->reuse.kept_bytes;
        char who[128];

        s->closing = true;
        s->releasing = true;
        s->reuse.gone = true;
        s->close_buffers = s->n_buffers;
        s->close_bytes = s->bytes;
        /* What its process holds outside gpu-memd is another session's
         * to carry from the next refresh (outside.h), as if it were gone. */
        memset(s->outside_on, 0, sizeof(s->outside_on));
        s->kept_outside = 0;
        if (s->close_pending) {
                s->close_pending = false;
                list_remove(&s->close_link);
        }
        if (reason)
                log_warning("%s: %s — disconnecting",
                            session_describe(s, who, sizeof(who)), reason);
        s->server->sessions.on_closed(s);
        /* The VRAM kept for its swap-ins went back: serve who waits. */
        if (kept > 0)
                pending_mark(&s->server->pending, PENDING_ROOM);
        /* What it was owed: nobody will read it. What its buffers' frees
         * decide later (an acquire failing) is not queued: it is closing. */
        answers_drop(&s->answers);
}

/* Free what this loop iteration allows of its buffers (all of them when
 * the server stops); true once everything it owned is released. */
static bool session_release_some(gmd_session *s)
{
        gmd_sessions *sessions = &s->server->sessions;
        unsigned all = UINT_MAX;

        if (!sessions->release)
                return true;
        if (s->server->stopping)
                return sessions->release(s, &all, UINT64_MAX);
        return sessions->release(s, &sessions->release_left,
                                 now_us() + SESSION_CLOSE_STEP_US);
}

bool session_end(gmd_session *s, const char *reason)
{
        gmd_server *server = s->server;
        gmd_sessions *sessions = &server->sessions;
        char who[128];

        if (s->closing && !s->releasing)
                return false;
        if (!s->closing)
                session_close_begin(s, reason);
        if (!session_release_some(s)) {
                /* Closing in steps: the pass frees the rest (scheduler.h). */
                if (list_empty(&s->close_link)) {
                        list_add_tail(&sessions->closing, &s->close_link);
                        sessions->n_closing++;
                }
                pending_mark_next(&server->pending, PENDING_CLOSES);
                return false;
        }
        if (!list_empty(&s->close_link)) {
                list_remove(&s->close_link);
                sessions->n_closing--;
        }
        s->releasing = false;
        list_remove(&s->link);
        sessions->n--;
        s->user->n_sessions--;
        if (s->hello_done)
                log_info("%s disconnected; freed %u buffers (%llu bytes)",
                         session_describe(s, who, sizeof(who)), s->close_buffers,
                         (unsigned long long)s->close_bytes);
        /* Memory came back: serve whoever waits for it. */
        if (s->close_buffers > 0)
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
        const gmd_session *any = NULL;
        const gmd_list *pos;

        list_for_each(pos, sessions) {
                const gmd_session *s = container_of(pos, gmd_session, link);

                if (s->uid != uid)
                        continue;
                any = s;
                u.bytes[GMD_TIER_VRAM] += s->tier_bytes[GMD_TIER_VRAM];
                u.bytes[GMD_TIER_HOST] += s->tier_bytes[GMD_TIER_HOST];
                /* Only VRAM-resident buffers are ever parked (parking.c). */
                u.parked += s->parking.bytes;
                u.buffers += s->n_buffers;
                u.parked_buffers += s->parking.n;
                for (unsigned d = 0; d < GMD_MAX_DEVICES; d++)
                        u.outside += s->outside_on[d];
        }
        /* VRAM its processes keep through fds of freed buffers, by uid:
         * a process holding them may have no session left (keptfd.h). */
        if (any)
                u.outside += kepttally_vram(&any->server->keptfd.tally, uid);
        *ret_usage = u;
}
