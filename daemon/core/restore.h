/*
 * restore — a daemon started where an earlier run left its state (the
 * record, ledger.h, and the memory it kept, base/keep.h) takes it over:
 * at start it adopts the host arena's pieces, the host copies and the
 * VRAM only the old daemon held, and counts every recorded buffer in its
 * pools; then each old session's process comes back (libgpumem reconnects
 * by itself) and claims its buffers (MSG_RESUME): a claim is checked
 * against the record (same session and token, same user, size, device,
 * flags; an fd sent is the very memory handed out) and the buffer joins
 * the new session, on the tier that holds its whole bytes. A move the
 * restart cut off is redone from the copy known to be whole: a swap-in
 * cut off leaves the buffer on host (its owner is told to unmap what it
 * mapped early); a swap-out cut off before its copy was whole leaves it
 * in VRAM. When a session's last claim is in, or `[restart]
 * claim_timeout_s` passes, what nobody claimed is freed.
 *
 * The restore's progress and figures (sessions, buffers, bytes per tier,
 * how long) go to the log and to status (restores, restored_ms).
 */
#ifndef GMD_RESTORE_H
#define GMD_RESTORE_H

#include <stdbool.h>
#include <stdint.h>

#include "gpumem.h"
#include "keep.h"
#include "ledger.h"
#include "result.h"

typedef struct gmd_server gmd_server;
typedef struct gmd_session gmd_session;
typedef struct restored_session restored_session;

typedef struct gmd_restore {
        restored_session *sessions;
        unsigned n_sessions;
        unsigned n_left;            /* sessions whose claims are not in */
        uint64_t started_us;        /* when this daemon started restoring */
        uint64_t pieces_us;         /* of it, adopting the arenas' pieces */
        uint64_t buffers_us;        /* ... and the buffers' memory */
        uint64_t deadline_ms;       /* claims end then, claimed or not */
        bool active;
        unsigned restores;          /* restores since this daemon started
                                     * (the record counts them across runs) */
        uint64_t restored_ms;       /* start to the last claim, of the last */
        /* What was found, and what came back, for the log. */
        unsigned buffers_found, buffers_back, buffers_lost, buffers_freed;
        uint64_t bytes_found[2], bytes_back[2];
} gmd_restore;

/* One claim of a ResumeRequest, as the dispatch layer decoded it. */
typedef struct gmd_claim {
        uint64_t buffer_id;
        uint64_t size;
        unsigned device;
        unsigned flags;
        gmd_tier tier;              /* of what the client maps */
        int fd;                     /* what it maps (the packet owns it), or -1 */
        bool acquired;
        bool freeing;               /* its owner was freeing it */
} gmd_claim;

typedef struct gmd_resume_ask {
        uint64_t client_id;
        const uint8_t *token;
        size_t token_len;
        const gmd_claim *claims;
        unsigned n_claims;
        bool last;
} gmd_resume_ask;

/* A claim's verdict: code GMD_ERR_* (GMD_ERR_NONE: adopted) and words. */
typedef struct gmd_verdict {
        int code;
        char message[160];
} gmd_verdict;

/*
 * At start, after the backend is open and before clients are accepted:
 * take over what `keep` restored (its `restored` fds; the ones used are
 * taken, the rest closed), or make a new record when there is none. 0,
 * or -EPROTO when the record cannot be read (the log says why; nothing
 * was dropped: the caller must not start afresh over it), or -errno.
 */
int restore_begin(gmd_server *server, gmd_keep *keep);

/* Answer one ResumeRequest of `s` into `verdicts` (one per claim). Remaps
 * the claims need are sent after the reply: restore_after_reply. */
void restore_resume(gmd_session *s, const gmd_resume_ask *ask,
                    gmd_verdict *verdicts);

/* Send the remaps the last restore_resume of `s` decided. */
void restore_after_reply(gmd_session *s);

/* `s` is closing (from the dispatch layer's session release): a restored
 * session it was claiming may be claimed by another connection of its
 * process (a later reconnect). */
void restore_session_gone(gmd_session *s);

/* Give up on what is unclaimed past the deadline. From the pass. */
void restore_tick(gmd_server *server);

/* Free everything (the server is going away). */
void restore_clear(gmd_server *server);

#endif
