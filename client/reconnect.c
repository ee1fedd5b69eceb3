/*
 * reconnect — restart recovery on the client's side: riding through the
 * daemon going away (a crash, SIGKILL, `systemctl restart`, an upgrade)
 * without the application losing its buffers, its pointers or its calls.
 *
 * When the connection ends without a ShutdownNotify (the daemon stopping
 * for good) or a drain, and $GPU_MEMD_RECONNECT_S allows, the I/O thread
 * keeps every mapping (pointers to resident buffers go on working with no
 * daemon: the memory lives while a process maps it), drops what only the
 * old daemon knew of (the cache of idle mappings), and connects again to
 * the same path, backing off from 10 ms to 1 s with jitter, and at once
 * whenever an entry of the socket's folder is created or changed (inotify:
 * a restarted daemon binding its socket anew). At its largest the backoff
 * alone would have cost up to a second after the daemon was ready
 * (restart_bench on an H200: ready at 1.29 s, the client back at 2.64 s).
 * On a new
 * connection it says hello as before, then claims every live buffer with
 * the old session's id and token (proto/gpumem.proto, "restart
 * recovery"): what it maps, with the fds kept for it (buffer.h), and
 * whether it holds the lease. Each claim gets a verdict; a buffer not
 * taken back is revoked with a sentence that names it and says why, as a
 * RevokeNotify would, so a call on it fails instead of reading wrong bytes.
 * A daemon without restart recovery (no token, or a refusal) keeps
 * nothing: every buffer is revoked so.
 *
 * Requests wait on the pending list meanwhile; those sent on the old
 * connection were never answered, so all of them go again, in order, once
 * the claims are settled (state RESENDING, client.h), except those naming
 * a buffer that was not taken back: a fresh daemon's ids may name other
 * buffers, so they are answered here (a free is done; anything else is
 * GMD_EREVOKED). A call's own deadline goes with it, shortened by the
 * time spent away. The job's memory plan, last reported with
 * gmd_report_plan (and not taken back since), is reported again on the
 * new connection as soon as it is resumed: status shows what the job
 * planned, not nothing, until it plans again.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "buffer.h"
#include "client.h"
#include "errors.h"
#include "mapcache.h"
#include "timeutil.h"

#define BACKOFF_FIRST_MS   10
#define BACKOFF_MAX_MS     1000
#define HELLO_WAIT_MS      30000
/* At least this long for a resume reply, whatever the window left. */
#define RESUME_WAIT_MS     30000
/* The protocol allows 200 fds a ResumeRequest; a packet carries at most
 * GMD_WIRE_MAX_FDS. */
#define RESUME_MAX_FDS     (GMD_WIRE_MAX_FDS < 200 ? GMD_WIRE_MAX_FDS : 200)
#define RESUME_MAX_CLAIMS  1024
/* Connections that end while the claims are made before the resume is
 * given up as refused (a daemon that falls over on them). */
#define RESUME_EOF_TRIES   3

/* How one try at a new connection ended. */
enum {
        TRY_RESUMED = 0,
        TRY_AGAIN = 1,          /* no daemon yet, or it went again */
        TRY_STOP = -1,          /* the client is dead or being closed */
};

bool gmd__client_may_ride_through(gmd_client *client)
{
        bool ok;

        pthread_mutex_lock(&client->lock);
        ok = client->reconnect_ms > 0 && client->socket_path &&
             !client->shutdown_notice[0] && !client->drained &&
             (client->state == GMD_CONN_UP ||
              client->state == GMD_CONN_RESENDING);
        pthread_mutex_unlock(&client->lock);
        return ok;
}

/* The connection is gone: calls wait from now on, and the cache of idle
 * mappings goes (its buffers were freed by a daemon that lost us, and a
 * restarted one frees what nobody claims). Emptied under buffers_lock
 * with the state change, so nothing is parked after it (mapcache.c). */
static void go_away(gmd_client *client)
{
        gmd_list dropped;

        list_init(&dropped);
        pthread_mutex_lock(&client->buffers_lock);
        pthread_mutex_lock(&client->lock);
        gmd__client_change_state_locked(client, GMD_CONN_AWAY);
        client->away_since_ms = now_ms();
        pthread_mutex_unlock(&client->lock);
        gmd__mapcache_take_all_locked(client, &dropped);
        pthread_mutex_unlock(&client->buffers_lock);
        gmd__mapcache_destroy_list(client, &dropped);
}

/* An inotify fd watching the folder of `path` for entries made or
 * changed, or -1 (no inotify, no folder): the backoff alone then. */
static int watch_socket_dir(const char *path)
{
        char dir[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
        const char *slash = strrchr(path, '/');
        size_t len = slash ? (size_t)(slash - path) : 0;
        int fd;

        if (!slash || len >= sizeof(dir))
                return -1;
        memcpy(dir, path, len);
        dir[len] = '\0';
        if (len == 0)
                strcpy(dir, "/");
        fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (fd < 0)
                return -1;
        if (inotify_add_watch(fd, dir, IN_CREATE | IN_MOVED_TO |
                              IN_ATTRIB) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

/* Sleep `ms`, or until the socket's folder changes (`watch_fd`, -1:
 * none), or until gmd_disconnect wakes the thread (false). */
static bool backoff_sleep(gmd_client *client, int watch_fd, unsigned ms)
{
        struct pollfd p[2] = {
                { .fd = client->wake_fd, .events = POLLIN },
                { .fd = watch_fd, .events = POLLIN },
        };
        char events[4096];

        while (poll(p, watch_fd >= 0 ? 2 : 1, (int)ms) < 0 && errno == EINTR)
                ;
        if (p[1].revents)
                while (read(watch_fd, events, sizeof(events)) > 0)
                        ;
        return !p[0].revents;
}

/* A new connection to the daemon's socket, or -1 with `why` saying what
 * stood in the way. Non-blocking: a full listen queue is a try again, not
 * a wait. */
static int connect_again(const char *path, char *why, size_t len)
{
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        int fd;

        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
                snprintf(why, len, "cannot create a socket: %s", strerror(errno));
                return -1;
        }
        if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
                snprintf(why, len, "cannot connect to %s: %s", path,
                         strerror(errno));
                close(fd);
                return -1;
        }
        return fd;
}

/* Put the new connection where the old one was: the same fd number, so
 * no thread ever holds a stale one. Under send_lock: no request is on its
 * way out meanwhile, and none goes until the state says so. */
static int install(gmd_client *client, int sock)
{
        int r = 0;

        pthread_mutex_lock(&client->send_lock);
        if (dup3(sock, client->sock, O_CLOEXEC) < 0)
                r = -errno;
        pthread_mutex_unlock(&client->send_lock);
        close(sock);
        return r;
}

/* Under client->lock: is a request of `type` about buffer `id` pending? */
static bool pending_about_locked(gmd_client *client, uint16_t type, uint64_t id)
{
        gmd_list *pos;

        list_for_each(pos, &client->pending) {
                const gmd_request *req = container_of(pos, gmd_request, node);

                if (req->type == type && req->buffer_id == id)
                        return true;
        }
        return false;
}

/* Under buffers_lock: `b` is lost, `why` says how. What is pending about
 * it is answered here when its turn to go again comes: a fresh daemon may
 * give its id to a buffer allocated meanwhile. */
static void lose_locked(gmd_client *client, gmd_buffer *b, const char *why)
{
        gmd_list *pos;

        gmd__buffer_revoke_locked(client, b, why, true);
        pthread_mutex_lock(&client->lock);
        list_for_each(pos, &client->pending) {
                gmd_request *req = container_of(pos, gmd_request, node);

                if (req->buffer_id == b->id)
                        req->orphan = true;
        }
        pthread_mutex_unlock(&client->lock);
}

/* Under buffers_lock: every live buffer is lost; `why` says how. */
static void lose_all_locked(gmd_client *client, const char *why)
{
        gmd_list *pos;

        list_for_each(pos, &client->buffers) {
                gmd_buffer *b = container_of(pos, gmd_buffer, node);
                char reason[256];

                if (b->parked || atomic_load(&b->revoked))
                        continue;
                snprintf(reason, sizeof(reason), "gpu-memd restarted without "
                         "keeping this client's buffers (%.160s); buffer %" PRIu64
                         " is lost", why, b->id);
                lose_locked(client, b, reason);
        }
}

static void lose_all(gmd_client *client, const char *why)
{
        pthread_mutex_lock(&client->buffers_lock);
        lose_all_locked(client, why);
        pthread_mutex_unlock(&client->buffers_lock);
}

/* What one resume exchange decided, claim by claim. */
typedef struct resume_state {
        uint64_t *ids;                  /* the buffers claimed, in order */
        size_t n, cap;
        int *codes;                     /* their verdicts (Gmd__ErrorCode) */
        char **words;
        size_t answered;
        char refused[200];              /* an ErrorReply's words, or "" */
} resume_state;

static void resume_state_free(resume_state *rs)
{
        for (size_t i = 0; i < rs->answered; i++)
                free(rs->words[i]);
        free(rs->ids);
        free(rs->codes);
        free(rs->words);
}

/* Under buffers_lock: the buffers to claim, and what the old daemon alone
 * could use goes: VRAM kept mapped for a buffer that is out (the daemon
 * decides anew where it lives) and legacy CUDA IPC mappings (memory of the
 * daemon's own context, gone with it). */
static int claims_collect_locked(gmd_client *client, resume_state *rs)
{
        gmd_list *pos;

        list_for_each(pos, &client->buffers) {
                gmd_buffer *b = container_of(pos, gmd_buffer, node);

                if (b->parked || atomic_load(&b->revoked))
                        continue;
                if (b->ipc) {
                        char why[160];

                        snprintf(why, sizeof(why), "legacy CUDA IPC buffers "
                                 "die with the gpu-memd that made them; "
                                 "buffer %" PRIu64 " is lost", b->id);
                        lose_locked(client, b, why);
                        continue;
                }
                if (b->kept_vram)
                        gmd__buffer_unmap_locked(client, b);
                if (rs->n == rs->cap) {
                        size_t cap = rs->cap ? rs->cap * 2 : 64;
                        uint64_t *ids = realloc(rs->ids, cap * sizeof(*ids));

                        if (!ids)
                                return -ENOMEM;
                        rs->ids = ids;
                        rs->cap = cap;
                }
                rs->ids[rs->n++] = b->id;
        }
        rs->codes = calloc(rs->n ? rs->n : 1, sizeof(*rs->codes));
        rs->words = calloc(rs->n ? rs->n : 1, sizeof(*rs->words));
        return rs->codes && rs->words ? 0 : -ENOMEM;
}

/* One ResumeRequest's claims, from claim `first` on, as many as one
 * packet carries: the payload packed into *ret_buf, the fds it names in
 * `fds`. Under buffers_lock, which must be held until it is sent (the
 * fds are the buffers'). Returns the number of claims. */
static size_t claims_pack_locked(gmd_client *client, resume_state *rs,
                                 size_t first, uint64_t old_id,
                                 const uint8_t *token, size_t token_len,
                                 int *fds, unsigned *ret_n_fds,
                                 uint8_t **ret_buf, size_t *ret_len)
{
        const Gmd__BufferClaim claim_init = GMD__BUFFER_CLAIM__INIT;
        const Gmd__Segment seg_init = GMD__SEGMENT__INIT;
        Gmd__ResumeRequest msg = GMD__RESUME_REQUEST__INIT;
        Gmd__BufferClaim *claims, **claim_ptrs;
        Gmd__Segment *segs, **seg_ptrs;
        unsigned n_fds = 0, n_segs = 0;
        size_t n = 0, len;
        uint8_t *buf = NULL;

        claims = calloc(RESUME_MAX_CLAIMS, sizeof(*claims));
        claim_ptrs = calloc(RESUME_MAX_CLAIMS, sizeof(*claim_ptrs));
        segs = calloc(RESUME_MAX_FDS, sizeof(*segs));
        seg_ptrs = calloc(RESUME_MAX_FDS, sizeof(*seg_ptrs));
        if (!claims || !claim_ptrs || !segs || !seg_ptrs)
                goto out;
        pthread_mutex_lock(&client->lock);
        while (first + n < rs->n && n < RESUME_MAX_CLAIMS) {
                gmd_buffer *b = gmd__buffer_find_locked(client, rs->ids[first + n]);
                Gmd__BufferClaim *c = &claims[n];
                bool offer;

                *c = claim_init;
                c->buffer_id = rs->ids[first + n];
                if (b) {
                        offer = gmd__buffer_offerable_locked(b);
                        if (offer && n_fds + b->n_kept > RESUME_MAX_FDS)
                                break;  /* into the next request */
                        c->size = b->size;
                        c->device = b->device;
                        c->flags = b->flags;
                        c->tier = (Gmd__Tier)atomic_load(&b->tier);
                        /* A release on its way may not have reached the
                         * old daemon: claimed held, it goes again with
                         * its last-use event. */
                        c->acquired = atomic_load(&b->leased) ||
                                pending_about_locked(client,
                                        GMD__MSG_TYPE__MSG_RELEASE, b->id);
                        /* Its fds went before its free, which the old
                         * daemon may not have read: the new one frees it
                         * rather than count its bytes lost. */
                        c->freeing = b->freeing;
                        if (offer) {
                                c->segments = &seg_ptrs[n_segs];
                                for (unsigned i = 0; i < b->n_kept; i++) {
                                        Gmd__Segment *s = &segs[n_segs];

                                        *s = seg_init;
                                        s->fd_index = n_fds;
                                        s->offset = b->kept[i].offset;
                                        s->size = b->kept[i].size;
                                        seg_ptrs[n_segs++] = s;
                                        fds[n_fds++] = b->kept[i].fd;
                                }
                                c->n_segments = b->n_kept;
                        }
                }
                claim_ptrs[n++] = c;
        }
        pthread_mutex_unlock(&client->lock);
        msg.client_id = old_id;
        msg.token.data = (uint8_t *)token;
        msg.token.len = token_len;
        msg.buffers = claim_ptrs;
        msg.n_buffers = n;
        msg.last = first + n == rs->n;
        len = gmd__resume_request__get_packed_size(&msg);
        buf = len <= GMD_WIRE_MAX_PAYLOAD ? malloc(len ? len : 1) : NULL;
        if (buf)
                gmd__resume_request__pack(&msg, buf);
        else
                n = 0;
out:
        free(claims);
        free(claim_ptrs);
        free(segs);
        free(seg_ptrs);
        *ret_buf = buf;
        *ret_len = buf ? len : 0;
        *ret_n_fds = n_fds;
        return n;
}

/* Send one packet on the client's socket with its fds, waiting for room
 * until `deadline`. */
static int send_with_fds(gmd_client *client, uint16_t type, uint32_t id,
                         const uint8_t *buf, size_t len, const int *fds,
                         unsigned n_fds, uint64_t deadline)
{
        int r;

        pthread_mutex_lock(&client->send_lock);
        for (;;) {
                struct pollfd p = { .fd = client->sock, .events = POLLOUT };
                uint64_t now = now_ms();

                r = gmd_wire_send(client->sock, type, id, buf, (uint32_t)len,
                                  fds, n_fds);
                if (r != -EAGAIN || now >= deadline)
                        break;
                if (poll(&p, 1, (int)(deadline - now)) < 0 && errno != EINTR) {
                        r = -errno;
                        break;
                }
        }
        pthread_mutex_unlock(&client->send_lock);
        return r;
}

/* How a wait for the resume's reply ended. */
enum {
        REPLY_OK = 0,
        REPLY_LOST = 1,         /* the connection ended first */
        REPLY_STOP = -1,        /* dead (protocol error) or woken */
};

/* Read until the reply to request `id` comes: notifications on the way
 * are applied as ever. Returns REPLY_OK with the packet in *packet (its
 * payload in `buf`). */
static int reply_wait(gmd_client *client, uint32_t id, uint8_t *buf,
                      uint64_t deadline, gmd_wire_packet *packet)
{
        for (;;) {
                struct pollfd p[2] = {
                        { .fd = client->sock, .events = POLLIN },
                        { .fd = client->wake_fd, .events = POLLIN },
                };
                const char *reason = NULL;
                uint64_t now = now_ms();
                int r;

                if (now >= deadline)
                        return REPLY_LOST;
                r = poll(p, 2, (int)(deadline - now));
                if (r < 0 && errno != EINTR)
                        return REPLY_LOST;
                if (r <= 0)
                        continue;
                if (p[1].revents)
                        return REPLY_STOP;
                *packet = (gmd_wire_packet){ .n_fds = 0 };
                r = gmd_wire_recv(client->sock, buf, packet, &reason);
                if (r == -EAGAIN)
                        continue;
                if (r <= 0 && r != -EPROTO && r != -EMSGSIZE)
                        return REPLY_LOST;
                if (r < 0) {
                        char why[200];

                        snprintf(why, sizeof(why), "bad packet from gpu-memd "
                                 "during the resume: %s; connection closed",
                                 reason ? reason : strerror(-r));
                        gmd__client_fail(client, GMD_EPROTO, why);
                        return REPLY_STOP;
                }
                if (packet->header.request_id == id)
                        return REPLY_OK;
                if (packet->header.request_id != 0) {
                        gmd_wire_packet_close_fds(packet);
                        gmd__client_fail(client, GMD_EPROTO, "protocol error "
                                         "from gpu-memd: a reply to no request "
                                         "during the resume; connection closed");
                        return REPLY_STOP;
                }
                r = gmd__io_handle_packet(client, packet);
                gmd_wire_packet_close_fds(packet);
                if (r < 0)
                        return REPLY_STOP;
        }
}

/* The answer to one ResumeRequest of `n` claims from `first`: verdicts
 * into `rs`, or the refusal's words. -EPROTO (connection failed) when it
 * does not fit the request. */
static int reply_take(gmd_client *client, resume_state *rs, size_t first,
                      size_t n, const gmd_wire_packet *packet)
{
        const gmd_wire_header *h = &packet->header;
        Gmd__ResumeReply *reply;

        if (h->type == GMD__MSG_TYPE__MSG_ERROR_REPLY) {
                Gmd__ErrorReply *e = gmd__error_reply__unpack(NULL, h->length,
                                                              packet->payload);

                /* A daemon without restart recovery answers
                 * ERR_UNSUPPORTED; whatever the code, nothing was taken
                 * back. */
                snprintf(rs->refused, sizeof(rs->refused), "it refused to "
                         "resume this client: %s", e && e->message && *e->message ?
                         e->message : gmd_strerror(gmd__error_from_wire(
                                                   e ? (int)e->code : 0)));
                if (e)
                        gmd__error_reply__free_unpacked(e, NULL);
                return 0;
        }
        reply = h->type == GMD__MSG_TYPE__MSG_RESUME_REPLY ?
                gmd__resume_reply__unpack(NULL, h->length, packet->payload) :
                NULL;
        if (!reply || reply->n_verdicts != n)
                goto bad;
        for (size_t i = 0; i < n; i++) {
                const Gmd__BufferVerdict *v = reply->verdicts[i];

                if (v->buffer_id != rs->ids[first + i])
                        goto bad;
                rs->codes[first + i] = v->code;
                rs->words[first + i] = strdup(v->message ? v->message : "");
                rs->answered = first + i + 1;
        }
        gmd__resume_reply__free_unpacked(reply, NULL);
        return 0;
bad:
        if (reply)
                gmd__resume_reply__free_unpacked(reply, NULL);
        gmd__client_fail(client, GMD_EPROTO, "protocol error from gpu-memd: "
                         "its answer to the resume does not match the claims; "
                         "connection closed");
        return -EPROTO;
}

/* Revoke what the verdicts did not give back. */
static void verdicts_apply(gmd_client *client, resume_state *rs)
{
        bool none_kept = rs->n > 0 && !rs->refused[0];

        for (size_t i = 0; i < rs->n && none_kept; i++)
                if (i >= rs->answered ||
                    rs->codes[i] != GMD__ERROR_CODE__ERR_NOT_FOUND)
                        none_kept = false;

        pthread_mutex_lock(&client->buffers_lock);
        if (rs->refused[0] && rs->answered == 0) {
                lose_all_locked(client, rs->refused);
                pthread_mutex_unlock(&client->buffers_lock);
                return;
        }
        for (size_t i = 0; i < rs->n; i++) {
                gmd_buffer *b = gmd__buffer_find_locked(client, rs->ids[i]);
                char why[256];
                bool freeing;

                if (!b || (i < rs->answered &&
                           rs->codes[i] == GMD__ERROR_CODE__ERR_NONE))
                        continue;
                pthread_mutex_lock(&client->lock);
                freeing = b->freeing ||
                          pending_about_locked(client, GMD__MSG_TYPE__MSG_FREE,
                                               b->id);
                pthread_mutex_unlock(&client->lock);
                if (i >= rs->answered)
                        snprintf(why, sizeof(why), "gpu-memd restarted without "
                                 "keeping this client's buffers (%.160s); buffer %"
                                 PRIu64 " is lost", rs->refused, b->id);
                else if (freeing &&
                         rs->codes[i] == GMD__ERROR_CODE__ERR_NOT_FOUND)
                        snprintf(why, sizeof(why), "freed");
                else if (none_kept)
                        snprintf(why, sizeof(why), "gpu-memd restarted without "
                                 "keeping this client's buffers (it kept none "
                                 "of them: a fresh start); buffer %" PRIu64
                                 " is lost", b->id);
                else
                        snprintf(why, sizeof(why), "gpu-memd restarted and did "
                                 "not give buffer %" PRIu64 " back: %.160s", b->id,
                                 rs->words[i][0] ? rs->words[i] :
                                 gmd_strerror(gmd__error_from_wire(rs->codes[i])));
                lose_locked(client, b, why);
        }
        pthread_mutex_unlock(&client->buffers_lock);
}

/* How a resume ended. */
enum {
        RESUME_DONE = 0,
        RESUME_LOST = 1,        /* the connection ended on the way */
        RESUME_STOP = -1,
};

/* Claim every live buffer back from the daemon on the (installed) new
 * connection, for the session `old_id` / `token`. */
static int resume(gmd_client *client, uint8_t *buf, uint64_t old_id,
                  const uint8_t *token, size_t token_len, uint64_t deadline)
{
        resume_state rs = { .refused = "" };
        int fds[RESUME_MAX_FDS];
        int result = RESUME_DONE;
        size_t first = 0;
        int r;

        pthread_mutex_lock(&client->buffers_lock);
        r = claims_collect_locked(client, &rs);
        pthread_mutex_unlock(&client->buffers_lock);
        if (r < 0) {
                snprintf(rs.refused, sizeof(rs.refused), "libgpumem ran out "
                         "of memory listing them");
                goto apply;
        }
        /* Even with nothing to claim one request goes (last = true): the
         * daemon frees the old session's buffers at once. */
        do {
                gmd_wire_packet packet;
                unsigned n_fds = 0;
                uint8_t *req_buf;
                size_t len, n;
                uint32_t id;

                pthread_mutex_lock(&client->lock);
                id = client->next_request_id++;
                if (client->next_request_id == 0)
                        client->next_request_id = 1;
                pthread_mutex_unlock(&client->lock);

                pthread_mutex_lock(&client->buffers_lock);
                n = claims_pack_locked(client, &rs, first, old_id, token,
                                       token_len, fds, &n_fds, &req_buf, &len);
                if (!req_buf) {
                        pthread_mutex_unlock(&client->buffers_lock);
                        snprintf(rs.refused, sizeof(rs.refused), "libgpumem "
                                 "could not build its claims");
                        break;
                }
                r = send_with_fds(client, GMD__MSG_TYPE__MSG_RESUME, id,
                                  req_buf, len, fds, n_fds, deadline);
                pthread_mutex_unlock(&client->buffers_lock);
                free(req_buf);
                if (r < 0) {
                        result = RESUME_LOST;
                        break;
                }
                r = reply_wait(client, id, buf,
                               deadline > now_ms() + RESUME_WAIT_MS ? deadline :
                               now_ms() + RESUME_WAIT_MS, &packet);
                if (r != REPLY_OK) {
                        result = r == REPLY_LOST ? RESUME_LOST : RESUME_STOP;
                        break;
                }
                r = reply_take(client, &rs, first, n, &packet);
                gmd_wire_packet_close_fds(&packet);
                if (r < 0) {
                        result = RESUME_STOP;
                        break;
                }
                first += n;
        } while (first < rs.n && !rs.refused[0]);
apply:
        if (result == RESUME_DONE)
                verdicts_apply(client, &rs);
        resume_state_free(&rs);
        return result;
}

/* One try at a new connection on `sock`: hello, claims. */
static int try_connection(gmd_client *client, int sock, uint8_t *buf,
                          uint64_t deadline, unsigned *eofs, char *why,
                          size_t why_len)
{
        uint64_t hello_deadline = now_ms() + HELLO_WAIT_MS;
        uint8_t token[GMD_RESUME_TOKEN_MAX];
        Gmd__HelloReply *reply = NULL;
        size_t token_len = client->resume_token_len;
        uint64_t old_id = client->client_id;
        char sentence[256];
        int r;

        memcpy(token, client->resume_token, token_len);
        if (hello_deadline > deadline)
                hello_deadline = deadline;
        r = gmd__hello(client, sock, hello_deadline, client->wake_fd, &reply);
        if (r == -ECANCELED) {
                close(sock);
                return TRY_STOP;
        }
        if (r == GMD_ECONN || r == GMD_ETIMEDOUT || r == GMD_ELIMIT) {
                /* Not up yet, starting, or full for now. */
                snprintf(why, why_len, "%s", gmd_last_error());
                close(sock);
                return TRY_AGAIN;
        }
        if (r == 0)
                r = gmd__hello_again(client, reply);
        /* What this process maps, before the claims: where the daemon may
         * put them next. */
        if (r == 0 && gmd__send_reach(client, sock, reply->asks_reach) < 0) {
                snprintf(why, why_len, "%s", gmd_last_error());
                gmd__hello_reply__free_unpacked(reply, NULL);
                close(sock);
                return TRY_AGAIN;
        }
        if (r < 0) {
                snprintf(sentence, sizeof(sentence), "gpu-memd came back but "
                         "this client cannot go on with it: %s",
                         gmd_last_error());
                if (reply)
                        gmd__hello_reply__free_unpacked(reply, NULL);
                close(sock);
                gmd__client_fail(client, r == GMD_ENOTSUP ? GMD_ECONN : r,
                                 sentence);
                return TRY_STOP;
        }
        r = install(client, sock);
        if (r < 0) {
                gmd__hello_reply__free_unpacked(reply, NULL);
                snprintf(why, why_len, "cannot take the new connection: %s",
                         strerror(-r));
                return TRY_AGAIN;
        }
        if (token_len == 0) {
                lose_all(client, "the gpu-memd that went away had no restart "
                         "recovery");
        } else if (*eofs >= RESUME_EOF_TRIES) {
                lose_all(client, "every connection ended while the buffers "
                         "were claimed");
        } else {
                r = resume(client, buf, old_id, token, token_len, deadline);
                if (r != RESUME_DONE) {
                        gmd__hello_reply__free_unpacked(reply, NULL);
                        if (r == RESUME_STOP)
                                return TRY_STOP;
                        (*eofs)++;
                        snprintf(why, why_len, "the connection ended while "
                                 "the buffers were claimed");
                        return TRY_AGAIN;
                }
        }
        /* The new session is the one to claim back next time. */
        client->client_id = reply->client_id;
        pthread_mutex_lock(&client->lock);
        client->resume_token_len = 0;
        if (reply->resume_token.len > 0 &&
            reply->resume_token.len <= sizeof(client->resume_token)) {
                memcpy(client->resume_token, reply->resume_token.data,
                       reply->resume_token.len);
                client->resume_token_len = reply->resume_token.len;
        }
        client->gen++;
        gmd__client_change_state_locked(client, GMD_CONN_RESENDING);
        pthread_mutex_unlock(&client->lock);
        gmd__hello_reply__free_unpacked(reply, NULL);
        /* The job's memory plan, which the new daemon does not know. A
         * failure is the connection gone again: the reader sees it. */
        (void)gmd__client_send_plan(client);
        return TRY_RESUMED;
}

int gmd__client_reconnect(gmd_client *client)
{
        uint64_t deadline, delay = BACKOFF_FIRST_MS;
        unsigned seed = (unsigned)(now_ns() ^ (uint64_t)getpid());
        char why[256] = "", reason[400];
        unsigned eofs = 0;
        int watch_fd;
        uint8_t *buf;

        buf = malloc(GMD_WIRE_MAX_PACKET);
        if (!buf) {
                gmd__client_fail(client, GMD_ECONN, "gpu-memd went away and "
                                 "libgpumem ran out of memory to reconnect");
                return -1;
        }
        go_away(client);
        watch_fd = watch_socket_dir(client->socket_path);
        deadline = client->away_since_ms + client->reconnect_ms;
        for (;;) {
                uint64_t now = now_ms();
                /* Jittered by up to a quarter either way, so clients of a
                 * restarted daemon do not all come back at once. */
                uint64_t sleep = delay * 3 / 4 + (uint64_t)rand_r(&seed) %
                                 (delay / 2 + 1);
                int sock, r;

                if (now >= deadline)
                        break;
                if (sleep > deadline - now)
                        sleep = deadline - now;
                if (!backoff_sleep(client, watch_fd, (unsigned)sleep))
                        goto stop;
                delay = delay * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : delay * 2;
                sock = connect_again(client->socket_path, why, sizeof(why));
                if (sock < 0)
                        continue;
                r = try_connection(client, sock, buf, deadline, &eofs, why,
                                   sizeof(why));
                if (r == TRY_RESUMED) {
                        if (watch_fd >= 0)
                                close(watch_fd);
                        free(buf);
                        return 0;
                }
                if (r == TRY_STOP)
                        goto stop;
        }
        snprintf(reason, sizeof(reason), "gpu-memd went away and did not come "
                 "back within %g s%s%s%s", (double)client->reconnect_ms / 1000,
                 why[0] ? " (last try: " : "", why, why[0] ? ")" : "");
        gmd__client_fail(client, GMD_ECONN, reason);
stop:
        if (watch_fd >= 0)
                close(watch_fd);
        free(buf);
        return -1;
}

/* A deadline-bound request's payload again, with the time it has left. */
static uint8_t *payload_retimed(const gmd_request *req, size_t *ret_len)
{
        ProtobufCMessage *msg = NULL;
        int64_t left = 0;
        uint64_t now = now_ms();
        uint8_t *out;
        size_t len;

        if (req->deadline_ms > now)
                left = (int64_t)(req->deadline_ms - now);
        if (req->deadline_ms) {
                switch (req->type) {
                case GMD__MSG_TYPE__MSG_ALLOC:
                        msg = (ProtobufCMessage *)gmd__alloc_request__unpack(
                                        NULL, req->packed_len, req->packed);
                        if (msg)
                                ((Gmd__AllocRequest *)msg)->timeout_ms = left;
                        break;
                case GMD__MSG_TYPE__MSG_ACQUIRE:
                        msg = (ProtobufCMessage *)gmd__acquire_request__unpack(
                                        NULL, req->packed_len, req->packed);
                        if (msg)
                                ((Gmd__AcquireRequest *)msg)->timeout_ms = left;
                        break;
                case GMD__MSG_TYPE__MSG_WAIT:
                        msg = (ProtobufCMessage *)gmd__wait_request__unpack(
                                        NULL, req->packed_len, req->packed);
                        if (msg)
                                ((Gmd__WaitRequest *)msg)->timeout_ms = left;
                        break;
                default:
                        break;
                }
        }
        if (!msg) {
                out = malloc(req->packed_len ? req->packed_len : 1);
                if (out)
                        memcpy(out, req->packed, req->packed_len);
                *ret_len = req->packed_len;
                return out;
        }
        len = protobuf_c_message_get_packed_size(msg);
        out = malloc(len ? len : 1);
        if (out)
                protobuf_c_message_pack(msg, out);
        protobuf_c_message_free_unpacked(msg, NULL);
        *ret_len = len;
        return out;
}

/* Requests about one buffer, by what their message names. */
static bool names_one_buffer(const gmd_request *req)
{
        switch (req->type) {
        case GMD__MSG_TYPE__MSG_FREE:
        case GMD__MSG_TYPE__MSG_ACQUIRE:
        case GMD__MSG_TYPE__MSG_RELEASE:
        case GMD__MSG_TYPE__MSG_PAGEOUT:
        case GMD__MSG_TYPE__MSG_PREFETCH:
        case GMD__MSG_TYPE__MSG_WAIT:
                return req->buffer_id != 0;
        default:
                return false;
        }
}

/* Under buffers_lock: the lost buffer `id` was, for its words. */
static const gmd_buffer *lost_find_locked(gmd_client *client, uint64_t id)
{
        const gmd_buffer *found = NULL;
        gmd_list *pos;

        list_for_each(pos, &client->buffers) {
                const gmd_buffer *b = container_of(pos, gmd_buffer, node);

                if (b->id == id && b->lost)
                        found = b;
        }
        return found;
}

/* Under buffers_lock and lock: a request about a buffer the new daemon
 * does not hold for us is answered here (true). */
static bool answer_here_locked(gmd_client *client, gmd_request *req)
{
        const gmd_buffer *b;
        char why[320];

        if (req->orphan) {
                b = lost_find_locked(client, req->buffer_id);
        } else {
                if (!names_one_buffer(req))
                        return false;
                b = gmd__buffer_find_locked(client, req->buffer_id);
                if (b && !atomic_load(&b->revoked))
                        return false;
        }
        list_remove(&req->node);
        if (req->type == GMD__MSG_TYPE__MSG_FREE) {
                gmd__request_complete_locked(client, req, 0, NULL);
                return true;
        }
        if (b)
                snprintf(why, sizeof(why), "buffer %" PRIu64 " is revoked: %s",
                         b->id, b->revoke_reason);
        else
                snprintf(why, sizeof(why), "buffer %" PRIu64 " was lost when "
                         "gpu-memd restarted", req->buffer_id);
        gmd__request_complete_locked(client, req, GMD_EREVOKED, why);
        return true;
}

void gmd__client_resend_some(gmd_client *client)
{
        for (;;) {
                gmd_request *req = NULL;
                gmd_list *pos;
                uint8_t *payload;
                size_t len = 0;
                uint16_t type;
                uint32_t id;
                int r;

                pthread_mutex_lock(&client->buffers_lock);
                pthread_mutex_lock(&client->lock);
                list_for_each(pos, &client->pending) {
                        gmd_request *p = container_of(pos, gmd_request, node);

                        if (p->sent_gen != client->gen) {
                                req = p;
                                break;
                        }
                }
                if (!req) {
                        /* All went: callers send their own from here on. */
                        gmd__client_change_state_locked(client, GMD_CONN_UP);
                        pthread_mutex_unlock(&client->lock);
                        pthread_mutex_unlock(&client->buffers_lock);
                        return;
                }
                if (answer_here_locked(client, req)) {
                        pthread_mutex_unlock(&client->lock);
                        pthread_mutex_unlock(&client->buffers_lock);
                        continue;
                }
                payload = payload_retimed(req, &len);
                req->sent_gen = client->gen;
                req->resent = true;
                id = req->id;
                type = req->type;
                pthread_mutex_unlock(&client->lock);
                pthread_mutex_unlock(&client->buffers_lock);

                pthread_mutex_lock(&client->send_lock);
                r = payload ? gmd_wire_send(client->sock, type, id, payload,
                                            (uint32_t)len, NULL, 0) : -EAGAIN;
                pthread_mutex_unlock(&client->send_lock);
                free(payload);
                if (r == -EAGAIN) {
                        /* Full (or no memory for the copy): again when
                         * the socket is writable. */
                        pthread_mutex_lock(&client->lock);
                        list_for_each(pos, &client->pending) {
                                gmd_request *p = container_of(pos, gmd_request,
                                                              node);

                                if (p->id == id) {
                                        p->sent_gen = 0;
                                        break;
                                }
                        }
                        pthread_mutex_unlock(&client->lock);
                        return;
                }
                if (r < 0)
                        return;         /* gone again: the reader sees it */
        }
}

bool gmd__client_leases_unmapped(gmd_client *client)
{
        bool waits = false;
        gmd_list *pos;

        pthread_mutex_lock(&client->buffers_lock);
        list_for_each(pos, &client->buffers) {
                const gmd_buffer *b = container_of(pos, gmd_buffer, node);

                if (atomic_load(&b->leased) && b->unmapped && !b->lost &&
                    !(b->flags & GMD_ALLOC_SPILLABLE)) {
                        waits = true;
                        break;
                }
        }
        pthread_mutex_unlock(&client->buffers_lock);
        return waits;
}

