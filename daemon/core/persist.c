/*
 * persist — see persist.h.
 */
#include "persist.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buffer.h"
#include "ledger.h"
#include "log.h"
#include "move.h"
#include "server.h"
#include "session.h"

static void persist_failed(gmd_server *server, const char *what, int err)
{
        if (server->persist_errors++ == 0)
                log_error("restart record: %s failed (%s): a restart now "
                          "loses what could not be recorded", what,
                          strerror(-err));
}

static bool identity_of(const gmd_mem *mem, uint64_t *ret_dev,
                        uint64_t *ret_ino)
{
        struct stat st;

        if (!mem || mem->fd < 0 || fstat(mem->fd, &st) < 0)
                return false;
        *ret_dev = (uint64_t)st.st_dev;
        *ret_ino = (uint64_t)st.st_ino;
        return true;
}

/* Keep `mem`'s fd under kind+id, or forget what was kept (mem NULL);
 * `*kept` remembers which mem is kept, so nothing is sent twice. */
static void keep_as(gmd_server *server, gmd_dbuffer *b, char kind,
                    gmd_mem **kept, gmd_mem *mem)
{
        gmd_keep *keep = ledger_keep(server->ledger);
        char name[64];
        int r;

        if (*kept == mem || !keep)
                return;
        ledger_name(name, sizeof(name), kind, b->id, 0);
        if (mem && mem->fd >= 0)
                r = keep->ops->put(keep, name, mem->fd);
        else
                r = keep->ops->drop(keep, name);
        if (r < 0) {
                persist_failed(server, mem ? "keeping a buffer's memory" :
                               "forgetting a buffer's memory", r);
                /* Nothing kept under that name now, or the old one still:
                 * either way try again at the next change. */
                *kept = NULL;
                return;
        }
        *kept = mem && mem->fd >= 0 ? mem : NULL;
}

/* The host copy `mem` into the record. */
static void record_host(gmd_server *server, gmd_dbuffer *b, ledger_buffer *rec,
                        const gmd_mem *mem, gmd_mem **keep_h)
{
        const gmd_backend_ops *ops = server->backend->ops;

        if (mem->daemon_only) {
                int n = ops->mem_span ?
                        ops->mem_span(server->backend, mem, rec->parts,
                                      LEDGER_MAX_PARTS) : -ENOSYS;

                if (n > 0) {
                        rec->host = LEDGER_HOST_ARENA;
                        rec->n_parts = (uint8_t)n;
                }
                return;
        }
        if (identity_of(mem, &rec->host_dev, &rec->host_ino)) {
                /* A peer's VRAM (peer.h) is kept by name as a host
                 * allocation is; the record says which device holds it. */
                rec->host = mem->peer ? LEDGER_HOST_PEER : LEDGER_HOST_KEPT;
                rec->host_device = (uint8_t)mem->device;
                *keep_h = (gmd_mem *)mem;
        }
        (void)b;
}

void persist_buffer(gmd_server *server, gmd_dbuffer *b)
{
        ledger_buffer rec;
        gmd_mem *vram = NULL, *host = NULL, *keep_h = NULL, *keep_m = NULL;
        const gmd_move *m = b->move;
        int r;

        if (!server->ledger)
                return;
        memset(&rec, 0, sizeof(rec));
        rec.id = b->id;
        rec.session_id = b->owner->id;
        rec.size = b->size;
        rec.device = b->device;
        rec.flags = b->flags;
        if (!m) {
                rec.tier = (uint8_t)b->tier;
                if (b->tier == GMD_TIER_VRAM)
                        vram = b->mem;
                else
                        host = b->mem;
                /* Given back by a restore, not mapped by its owner yet. */
                if (b->restore_seq && b->tier == GMD_TIER_VRAM)
                        keep_m = b->mem;
        } else if (m->relocate) {
                /* From a peer to host memory: the peer holds the bytes
                 * until it is over. */
                rec.tier = GMD_TIER_HOST;
                host = m->copy.src;
        } else if (m->copy.dir == GMD_COPY_OUT) {
                rec.tier = GMD_TIER_VRAM;
                vram = m->copy.src;
                /* Whole once the copy is over without error, and from the
                 * start when the move copies nothing (the kept copy). */
                if ((m->clean || (!move_copying(m) && m->copy.status == 0)) &&
                    !move_stopping(m))
                        host = m->copy.dst;
                if (m->remap == MOVE_REMAP_EARLY)
                        keep_m = m->copy.src;
        } else {
                rec.tier = GMD_TIER_HOST;
                host = m->copy.src;
        }
        if (vram && identity_of(vram, &rec.vram_dev, &rec.vram_ino))
                rec.vram_mapped = 1;
        rec.vram_kept = keep_m != NULL;
        if (host)
                record_host(server, b, &rec, host, &keep_h);
        /* What only the daemon holds is kept before the record names it,
         * and forgotten only once the record no longer does. */
        if (keep_h)
                keep_as(server, b, 'h', &b->kept_h, keep_h);
        if (keep_m)
                keep_as(server, b, 'm', &b->kept_m, keep_m);
        r = ledger_put_buffer(server->ledger, &b->ledger_slot, &rec);
        if (r < 0)
                persist_failed(server, "recording a buffer", r);
        if (!keep_h)
                keep_as(server, b, 'h', &b->kept_h, NULL);
        if (!keep_m)
                keep_as(server, b, 'm', &b->kept_m, NULL);
}

void persist_buffer_gone(gmd_server *server, gmd_dbuffer *b)
{
        if (!server->ledger)
                return;
        ledger_put_buffer(server->ledger, &b->ledger_slot, NULL);
        keep_as(server, b, 'h', &b->kept_h, NULL);
        keep_as(server, b, 'm', &b->kept_m, NULL);
}

void persist_session(gmd_server *server, gmd_session *s)
{
        ledger_session rec;
        int r;

        if (!server->ledger)
                return;
        memset(&rec, 0, sizeof(rec));
        rec.id = s->id;
        rec.prior = s->resumed_from;
        rec.uid = (uint32_t)s->uid;
        rec.gid = (uint32_t)s->gid;
        rec.pid = (uint32_t)s->pid;
        rec.priority = s->priority;
        memcpy(rec.token, s->token, sizeof(rec.token));
        memcpy(rec.name, s->name, sizeof(rec.name));
        r = ledger_put_session(server->ledger, &s->ledger_slot, &rec);
        if (r < 0)
                persist_failed(server, "recording a session", r);
        persist_upkeep(server);
}

void persist_session_gone(gmd_server *server, gmd_session *s)
{
        if (server->ledger)
                ledger_put_session(server->ledger, &s->ledger_slot, NULL);
}

void persist_upkeep(gmd_server *server)
{
        const gmd_backend_ops *ops = server->backend->ops;
        gmd_keep *keep;

        if (!server->ledger)
                return;
        ledger_set_ids(server->ledger, server->buffers.next_id,
                       server->sessions.next_id);
        keep = ledger_keep(server->ledger);
        if (!ops->arena_pieces || !ops->arena_info || !keep)
                return;
        for (unsigned d = 0; d < server->devices.n; d++) {
                gmd_arena_piece pieces[GMD_ARENA_MAX_PIECES + 1];
                gmd_arena_info info;
                int n;

                /* Only when the arena grew: no driver call otherwise. */
                ops->arena_info(server->backend, d, &info);
                if (info.built == server->persist_built[d])
                        continue;
                server->persist_built[d] = info.built;
                n = ops->arena_pieces(server->backend, d, pieces,
                                      GMD_ARENA_MAX_PIECES + 1);
                for (int i = 0; i < n; i++) {
                        char name[64];
                        int r = 0;

                        /* Kept first, then recorded; a piece recorded
                         * already only grows (sim's memfd). */
                        if (!ledger_has_piece(server->ledger, d, pieces[i].offset)) {
                                ledger_name(name, sizeof(name), 'a', d,
                                            pieces[i].offset);
                                r = keep->ops->put(keep, name, pieces[i].fd);
                        }
                        if (r == 0)
                                r = ledger_put_piece(server->ledger, d,
                                                     pieces[i].offset,
                                                     pieces[i].size);
                        if (r < 0)
                                persist_failed(server, "keeping a host arena piece", r);
                        close(pieces[i].fd);
                }
        }
}
