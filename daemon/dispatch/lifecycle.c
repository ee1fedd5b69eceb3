/*
 * lifecycle — the server's life: start-up sizes the pools from what the
 * backend reports and the config asks and starts listening (listener.h);
 * reload applies a new config; stop tells every client and closes every
 * session. It sits above every other daemon module: it wires the session
 * layer to the requests (the listener's on_packet), to what the core
 * tells clients outside requests (server->sessions.ops) and to what a
 * closed session leaves behind (server->sessions.on_closed), so that
 * sessions know nothing of buffers, moves or waits.
 */
#include "lifecycle.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admission.h"
#include "backing.h"
#include "buffer.h"
#include "devices.h"
#include "ledger.h"
#include "gpumem.pb-c.h"
#include "listener.h"
#include "loan.h"
#include "log.h"
#include "metrics.h"
#include "peer.h"
#include "persist.h"
#include "restore.h"
#include "move.h"
#include "request.h"
#include "reuse.h"
#include "scheduler.h"
#include "session.h"
#include "session_io.h"
#include "tiering.h"
#include "timeutil.h"
#include "vram.h"
#include "waitq.h"

#define HOST_GRANULARITY (2ull << 20)
/* How often the driver's free memory is read besides at allocations
 * (core/vram.h); a read costs a few µs. */
#define VRAM_POLL_MS 5000

/* What reuse.c releases: destroy, pool bytes back. */
static void reuse_release(void *ctx, gmd_mem *mem)
{
        backing_release(ctx, mem);
}

static int reuse_ask_unmap(void *ctx, void *tag)
{
        return move_ask_unmap(ctx, tag);
}

/* A buffer with a swap-in queued or an acquire waiting for it. */
static bool reuse_coming_back(void *ctx, const void *tag)
{
        const gmd_dbuffer *b = tag;

        (void)ctx;
        return b->move_waiter || b->acquirer;
}

/* A session began to close: out of the restart record and no longer a
 * restore's claimer (once, here: a connection of its process may claim at
 * once, and a restart from now on finds its buffers claimed by nobody);
 * its waiters and waits dropped without answering; what it lent of its
 * process's other connections given back to them; the VRAM kept for its
 * swap-ins released. Its buffers follow, by batches
 * (session_release_buffers). */
static void session_release(gmd_session *s)
{
        gmd_server *server = s->server;

        persist_session_gone(server, s);
        restore_session_gone(s);
        waitq_cancel_session(&server->waitq, s);
        loan_session_closed(s);
        tiering_session_closed(s);
        reuse_forget(&server->reuse, &s->reuse);
}

/* Free a closing session's buffers (settling their moves) while `*left`
 * allows, decrementing it for each, and until `until_us`; once none is
 * left, the process's last connection gives up its slices of memory, and
 * the session is released: true. */
static bool session_release_buffers(gmd_session *s, unsigned *left,
                                    uint64_t until_us)
{
        gmd_server *server = s->server;
        unsigned n = 0;
        gmd_list *pos;

        while (!list_empty(&s->buffers)) {
                /* The clock every 16: a free takes a few µs. */
                if (*left == 0 || (++n % 16 == 0 && now_us() >= until_us))
                        return false;
                move_free_buffer(server, container_of(s->buffers.next,
                                                      gmd_dbuffer, owner_link));
                (*left)--;
        }
        list_for_each(pos, &server->sessions.all) {
                gmd_session *o = container_of(pos, gmd_session, link);

                if (o != s && session_same_process(o, s))
                        return true;
        }
        slice_forget(&server->slices, s->pid);
        return true;
}

/* The devices' free memory is read again: what other programs use now
 * matters for an automatic pool after a reload too. */
static uint64_t vram_capacity(gmd_server *server, unsigned device)
{
        gmd_device_info *info = &server->devices.info[device];
        const gmd_size_spec *limit = &server->config.vram_limit;
        uint64_t want;

        if (limit->bytes == 0 && limit->percent == 0) {
                uint64_t reserve = server->backend->ops->shares_device ?
                                   server->config.vram_reserve : 0;
                uint64_t mine = server->devices.pools[device].used;

                /* What this daemon already handed out counts as free here. */
                uint64_t avail = info->free + info->reserved + mine;

                return avail > reserve ? avail - reserve : 0;
        }
        want = size_spec_resolve(limit, info->total);
        if (want > info->free) {
                char a[32], b[32];

                log_warning("device %u: vram_limit %s is more than the %s free now; "
                            "allocations may fail in the driver",
                            device, size_format(want, a, sizeof(a)),
                            size_format(info->free, b, sizeof(b)));
        }
        return want < info->total ? want : info->total;
}

int server_new(uv_loop_t *loop, const gmd_config *config, gmd_backend *backend,
               gmd_server **ret_server)
{
        gmd_server *server;
        gmd_copyq *queues;
        unsigned n_devices;
        int r;

        server = calloc(1, sizeof(*server));
        if (!server)
                return -ENOMEM;
        server->loop = loop;
        server->config = *config;
        server->backend = backend;
        server->start_ms = now_ms();
        sessions_init(&server->sessions);
        buffers_init(&server->buffers);
        waitq_init(&server->waitq, loop, &server->pending,
                   &scheduler_waitq_ops, server);
        waitq_set_hold_after(&server->waitq, config->wait_hold_ms);
        slices_init(&server->slices, config->memory_slice_ms);
        users_init(&server->users, (int64_t)config->user_turn_us * 1000);
        reuse_init(&server->reuse, config->swap_keep_vram, &server->stats,
                   reuse_release, reuse_ask_unmap, server);
        server->reuse.coming_back = reuse_coming_back;
        server->reuse.ask_timeout_ms = config->reclaim_timeout_ms;

        r = listener_new(server, request_handle, &server->listener);
        if (r < 0)
                goto fail;
        server->sessions.on_closed = session_release;
        server->sessions.release = session_release_buffers;
        server->sessions.ops = &request_session_ops;
        n_devices = backend->ops->device_count(backend);
        if (n_devices > GMD_MAX_DEVICES) {
                log_warning("%u devices: serving the first %d", n_devices,
                            GMD_MAX_DEVICES);
                n_devices = GMD_MAX_DEVICES;
        }
        r = devices_alloc(&server->devices, n_devices);
        queues = calloc(n_devices ? n_devices : 1, sizeof(*queues));
        if (r < 0 || !queues) {
                free(queues);
                r = -ENOMEM;
                goto fail;
        }
        copyqs_init(&server->copyqs, queues, server->devices.n, backend,
                    &server->config, &server->stats, &server->pending);
        for (unsigned i = 0; i < server->devices.n; i++) {
                gmd_device_info *info = &server->devices.info[i];
                char cap[32], tot[32];

                r = backend->ops->device_info(backend, i, info);
                if (r < 0) {
                        log_error("device %u: cannot read its memory: %s", i,
                                  strerror(-r));
                        goto fail;
                }
                pool_init(&server->devices.pools[i], i, GMD_TIER_VRAM,
                          vram_capacity(server, i), info->granularity);
                log_info("device %u (%s): VRAM pool %s of %s, granularity %llu KiB",
                         i, info->name,
                         size_format(server->devices.pools[i].capacity, cap, sizeof(cap)),
                         size_format(info->total, tot, sizeof(tot)),
                         (unsigned long long)(info->granularity >> 10));
        }
        host_tier_init(&server->host, config_host_limit_bytes(config),
                       HOST_GRANULARITY);
        peer_init(server);
        *ret_server = server;
        return 0;

fail:
        server->backend = NULL;   /* still the caller's on failure */
        server_free(server);
        return r;
}

/* Any thread: the backend finished copies. */
static void server_wake(void *ctx)
{
        gmd_server *server = ctx;

        uv_async_send(&server->copyqs.wake);
}

static bool copies_in_flight(const gmd_server *server)
{
        return copyqs_busy(&server->copyqs);
}

static void server_on_copies(uv_async_t *async)
{
        gmd_server *server = async->data;

        server->backend->ops->copy_reap(server->backend, copyq_on_done, &server->copyqs);
        /* Stopping: the handle closes once the last copy is reaped. */
        if (server->stopping && !copies_in_flight(server) && server->copyqs.wake_open) {
                server->copyqs.wake_open = false;
                uv_close((uv_handle_t *)&server->copyqs.wake, NULL);
        }
}

/* Top up the backend's reserve: every 10 ms while it has work left, every
 * 250 ms otherwise. Each call does a bounded amount, so the loop stays
 * responsive. */
static void server_on_vram_timer(uv_timer_t *timer)
{
        vram_refresh_all(timer->data);
}

static void server_on_maintain(uv_timer_t *timer)
{
        gmd_server *server = timer->data;
        int left = server->backend->ops->maintain(server->backend);

        /* The restart record: arena pieces built since. */
        persist_upkeep(server);

        uv_timer_start(timer, server_on_maintain, left > 0 ? 10 : 250, 0);
}

/* Every loop iteration, before the loop polls: a new turn (users.h), and
 * a new batch of buffers closes may free (session.h). */
static void server_on_turn(uv_prepare_t *prepare)
{
        gmd_server *server = prepare->data;

        users_next_turn(&server->users);
        sessions_next_turn(&server->sessions);
}

int server_listen(gmd_server *server, int fd)
{
        int r;

        r = listener_start(server->listener, fd);
        if (r < 0)
                return r;
        r = uv_async_init(server->loop, &server->copyqs.wake, server_on_copies);
        if (r < 0)
                return r;
        r = uv_prepare_init(server->loop, &server->turn_prepare);
        if (r < 0)
                return r;
        server->turn_prepare.data = server;
        server->turn_open = true;
        r = uv_prepare_start(&server->turn_prepare, server_on_turn);
        if (r < 0)
                return r;
        server->copyqs.wake.data = server;
        server->copyqs.wake_open = true;
        if (server_can_move(server))
                server->backend->ops->set_wake(server->backend, server_wake, server);
        if (server->backend->ops->maintain &&
            uv_timer_init(server->loop, &server->maintain_timer) == 0) {
                server->maintaining = true;
                server->maintain_timer.data = server;
                uv_timer_start(&server->maintain_timer, server_on_maintain, 0, 0);
        }
        /* A restore waits for claims until its deadline: the pass then
         * frees what nobody claimed (restore_tick). */
        if (server->restore.active)
                pending_mark_after(&server->pending, PENDING_ROOM,
                                   server->config.restart_claim_timeout_s * 1000ull + 1);
        persist_upkeep(server);
        /* Fds of freed buffers clients keep are looked for (keptfd.h). */
        r = keptfd_start(server);
        if (r < 0)
                return r;
        /* Memory held outside gpu-memd comes and goes unannounced: read
         * the driver now and then, so status, metrics and the log know. */
        vram_refresh_all(server);
        if (uv_timer_init(server->loop, &server->devices.vram_timer) == 0) {
                server->devices.vram_timer_open = true;
                server->devices.vram_timer.data = server;
                uv_timer_start(&server->devices.vram_timer, server_on_vram_timer,
                               VRAM_POLL_MS, VRAM_POLL_MS);
        }
        r = metrics_start(server, server->config.metrics_listen, &server->metrics);
        /* A listen value that does not parse, or is not loopback, is a
         * config error like any other; one that cannot be served now (the
         * port is taken, the directory is missing, the unit forbids the
         * address family) leaves the daemon serving its clients. */
        if (r < 0 && r != -EINVAL && r != -EPERM) {
                log_error("metrics: the endpoint %s is not served (see above); "
                          "gpu-memd runs without it: fix [metrics] listen and "
                          "reload", server->config.metrics_listen);
                r = 0;
        }
        return r;
}

void server_stop(gmd_server *server)
{
        Gmd__ShutdownNotify note = GMD__SHUTDOWN_NOTIFY__INIT;
        gmd_list *pos, *tmp;

        if (server->stopping)
                return;
        server->stopping = true;
        listener_stop(server->listener);
        if (server->turn_open) {
                server->turn_open = false;
                uv_close((uv_handle_t *)&server->turn_prepare, NULL);
        }
        if (server->maintaining)
                uv_close((uv_handle_t *)&server->maintain_timer, NULL);
        if (server->devices.vram_timer_open) {
                server->devices.vram_timer_open = false;
                uv_close((uv_handle_t *)&server->devices.vram_timer, NULL);
        }
        keptfd_stop(server);
        server->metrics = metrics_stop(server->metrics);
        waitq_fail_all(&server->waitq, GMD__ERROR_CODE__ERR_SHUTTING_DOWN,
                       "gpu-memd is stopping");
        note.message = "the daemon was told to stop; every buffer is freed";
        list_for_each_safe(pos, tmp, &server->sessions.all) {
                gmd_session *s = container_of(pos, gmd_session, link);

                /* What it is owed first: told on the spot as before. */
                request_send_answers(s);
                session_send(s, GMD__MSG_TYPE__MSG_SHUTDOWN, 0, &note.base,
                             NULL, 0);
                session_hang_up(s);
                session_close(s, NULL);
        }
        peer_drop_spares(server);
        /* Copies still running finish on their own; their orphaned moves
         * free the memory when reaped (server_on_copies). */
        if (server->copyqs.wake_open && !copies_in_flight(server)) {
                server->copyqs.wake_open = false;
                uv_close((uv_handle_t *)&server->copyqs.wake, NULL);
        }
        /* One more pass: it ends what stopped and closes its handles once
         * no copy is in flight (scheduler.c). */
        pending_mark(&server->pending, PENDING_COPIES);
}

void server_summary(const gmd_server *server, char *buf, size_t len)
{
        uint64_t used = 0, capacity = 0;
        unsigned waiting = 0;
        char u[32], c[32];

        for (unsigned i = 0; i < server->devices.n; i++) {
                used += server->devices.pools[i].used;
                capacity += server->devices.pools[i].capacity;
        }
        waiting = waitq_count(&server->waitq);
        snprintf(buf, len, "%u client%s, %s of %s VRAM in use, %u waiting",
                 server->sessions.n, server->sessions.n == 1 ? "" : "s",
                 size_format(used, u, sizeof(u)),
                 size_format(capacity, c, sizeof(c)), waiting);
}

static void warn_fixed(const char *key, bool changed)
{
        if (changed)
                log_warning("reload: %s cannot change while gpu-memd runs; "
                            "restart it to apply the new value", key);
}

void server_reload(gmd_server *server, const gmd_config *config)
{
        gmd_config *old = &server->config;
        gmd_list *pos;
        int r;

        warn_fixed("[daemon] socket", strcmp(old->socket_path, config->socket_path) != 0);
        warn_fixed("[daemon] backend", strcmp(old->backend, config->backend) != 0);
        warn_fixed("[sim] devices", old->sim_devices != config->sim_devices);
        warn_fixed("[sim] vram", old->sim_vram != config->sim_vram);
        warn_fixed("[sim] granularity", old->sim_granularity != config->sim_granularity);
        warn_fixed("[sim] copy_rate", old->sim_copy_rate != config->sim_copy_rate);
        warn_fixed("[pools] host_stock",
                   old->host_stock.bytes != config->host_stock.bytes ||
                   old->host_stock.percent != config->host_stock.percent);
        warn_fixed("[pools] cuda_reserve_chunks",
                   old->cuda_reserve_chunks != config->cuda_reserve_chunks);
        warn_fixed("[pools] peer_tier", strcmp(old->peer_tier, config->peer_tier) != 0);
        warn_fixed("[sim] peer_rate", old->sim_peer_rate != config->sim_peer_rate);

        waitq_set_hold_after(&server->waitq, config->wait_hold_ms);
        server->slices.length_ms = config->memory_slice_ms;
        users_set_quantum(&server->users, (int64_t)config->user_turn_us * 1000);
        gmd_config next = *config;
        strcpy(next.socket_path, old->socket_path);
        strcpy(next.backend, old->backend);
        next.sim_devices = old->sim_devices;
        next.sim_vram = old->sim_vram;
        next.sim_granularity = old->sim_granularity;
        next.sim_copy_rate = old->sim_copy_rate;
        next.cuda_reserve_chunks = old->cuda_reserve_chunks;
        next.host_stock = old->host_stock;
        strcpy(next.peer_tier, old->peer_tier);
        next.sim_peer_rate = old->sim_peer_rate;
        /* Also retried when it could not start before (a port in use). */
        bool metrics_changed = strcmp(old->metrics_listen, next.metrics_listen) != 0 ||
                               (!server->metrics &&
                                strcmp(next.metrics_listen, "off") != 0);
        *old = next;

        log_set_level(old->log_level);
        server->reuse.enabled = old->swap_keep_vram;
        server->reuse.ask_timeout_ms = old->reclaim_timeout_ms;
        for (unsigned i = 0; i < server->devices.n; i++) {
                gmd_pool *p = &server->devices.pools[i];

                r = server->backend->ops->device_info(server->backend, i,
                                                      &server->devices.info[i]);
                if (r < 0) {
                        log_error("reload: device %u: cannot read its memory: %s; "
                                  "pool unchanged", i, strerror(-r));
                        continue;
                }

                pool_resize(p, vram_capacity(server, i));
                if (p->used > p->capacity)
                        log_warning("device %u: the new VRAM pool is smaller than what "
                                    "clients hold; no allocation fits until they free",
                                    i);
        }
        pool_resize(&server->host.pool,
                    config_host_limit_bytes(old));
        listener_set_access(server->listener, old);
        if (metrics_changed) {
                server->metrics = metrics_stop(server->metrics);
                r = metrics_start(server, old->metrics_listen, &server->metrics);
                if (r < 0)
                        log_error("reload: metrics endpoint not restarted");
        }
        list_for_each(pos, &server->sessions.all) {
                gmd_session *s = container_of(pos, gmd_session, link);

                session_apply_config(s);
                if (!config->swap_keep_vram)
                        reuse_forget(&server->reuse, &s->reuse);
        }
        pending_mark(&server->pending, PENDING_ROOM);
        log_info("reloaded the configuration");
}

gmd_server *server_free(gmd_server *server)
{
        if (!server)
                return NULL;
        server->listener = listener_free(server->listener);
        restore_clear(server);
        server->ledger = ledger_close(server->ledger);
        buffers_clear(&server->buffers);
        keptfd_free(&server->keptfd);
        devices_free(&server->devices);
        free(server->copyqs.q);
        backend_close(server->backend);
        free(server);
        return NULL;
}
