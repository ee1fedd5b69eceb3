/*
 * metrics_render — the exposition text of the metrics endpoint: one
 * family per gpu-memd quantity, HELP and TYPE lines first, labels escaped
 * by promtext. Rendered from a snapshot (snapshot.h, the one the status
 * reply is rendered from), never from live state; nothing here does I/O.
 */
#include "metrics_render.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gpumem.h"
#include "snapshot.h"

static void render_pools(promtext *t, const gmd_snapshot *snap)
{
        static const char *const names[2] = {
                "gpumemd_pool_capacity_bytes", "gpumemd_pool_used_bytes",
        };
        static const char *const helps[2] = {
                "Bytes the pool may hand out.",
                "Bytes of the pool held by buffers.",
        };

        for (unsigned k = 0; k < 2; k++) {
                promtext_family(t, names[k], "gauge", helps[k]);
                for (unsigned i = 0; i < snap->n_pools; i++) {
                        const gmd_pool_snapshot *p = &snap->pools[i];

                        promtext_printf(t, "%s{device=\"%u\",tier=\"%s\"} %" PRIu64 "\n",
                                        names[k], p->device,
                                        p->tier == GMD_TIER_VRAM ? "vram" : "host",
                                        k == 0 ? p->capacity : p->used);
                }
        }
}

/* The labels that name one client, without the braces:
 * `client="7",pid="123",uid="1000"` and, with [metrics] clients = names,
 * `,name="train"`. */
static void client_labels(promtext *t, const gmd_client_snapshot *s, bool names)
{
        promtext_printf(t, "client=\"%" PRIu64 "\",pid=\"%ld\",uid=\"%lu\"",
                        s->id, (long)s->pid, (unsigned long)s->uid);
        if (!names)
                return;
        promtext_append(t, ",name=\"", 7);
        promtext_label_value(t, s->name);
        promtext_append(t, "\"", 1);
}

/* Series per client connection ([metrics] clients = ids or names): one
 * per process that ever connects, so they churn with every new process. */
static void render_per_client(promtext *t, const gmd_snapshot *snap, bool names)
{
        /* One process may connect more than once: the client id keeps the
         * series apart. */
        promtext_family(t, "gpumemd_client_bytes", "gauge",
                        "Bytes held by one client connection.");
        for (unsigned i = 0; i < snap->n_clients; i++) {
                const gmd_client_snapshot *s = &snap->clients[i];

                promtext_printf(t, "gpumemd_client_bytes{");
                client_labels(t, s, names);
                promtext_printf(t, "} %" PRIu64 "\n", s->bytes);
        }
        /* The same bytes by tier: VRAM (parked buffers included) and
         * what was moved out to host memory. */
        promtext_family(t, "gpumemd_client_tier_bytes", "gauge",
                        "Bytes held by one client connection, by tier.");
        for (unsigned i = 0; i < snap->n_clients; i++) {
                const gmd_client_snapshot *s = &snap->clients[i];

                for (unsigned tier = GMD_TIER_VRAM; tier <= GMD_TIER_HOST; tier++) {
                        promtext_printf(t, "gpumemd_client_tier_bytes{");
                        client_labels(t, s, names);
                        promtext_printf(t, ",tier=\"%s\"} %" PRIu64 "\n",
                                        tier == GMD_TIER_VRAM ? "vram" : "host",
                                        s->tier_bytes[tier]);
                }
        }
}

typedef struct user_sum {
        unsigned long uid;
        unsigned clients;
        uint64_t bytes[2];          /* by tier */
        uint64_t outside;           /* VRAM held outside gpu-memd */
} user_sum;

/* Series per user (always): as many as users connected, stable while the
 * user's processes come and go, and no client names. */
static void render_per_user(promtext *t, const gmd_snapshot *snap)
{
        user_sum *users = calloc(snap->n_clients ? snap->n_clients : 1,
                                 sizeof(*users));
        unsigned n = 0;

        if (!users) {
                t->failed = true;
                return;
        }
        for (unsigned c = 0; c < snap->n_clients; c++) {
                const gmd_client_snapshot *s = &snap->clients[c];
                unsigned i;

                for (i = 0; i < n && users[i].uid != (unsigned long)s->uid; i++)
                        ;
                if (i == n)
                        users[n++].uid = (unsigned long)s->uid;
                users[i].clients++;
                users[i].bytes[GMD_TIER_VRAM] += s->tier_bytes[GMD_TIER_VRAM];
                users[i].bytes[GMD_TIER_HOST] += s->tier_bytes[GMD_TIER_HOST];
                users[i].outside += s->outside_bytes;
        }
        promtext_family(t, "gpumemd_user_clients", "gauge",
                        "Clients connected (after the hello), by user.");
        for (unsigned i = 0; i < n; i++)
                promtext_printf(t, "gpumemd_user_clients{uid=\"%lu\"} %u\n",
                                users[i].uid, users[i].clients);
        promtext_family(t, "gpumemd_user_bytes", "gauge",
                        "Bytes held by all clients of one user, by tier.");
        for (unsigned i = 0; i < n; i++)
                for (unsigned tier = GMD_TIER_VRAM; tier <= GMD_TIER_HOST; tier++)
                        promtext_printf(t, "gpumemd_user_bytes{uid=\"%lu\","
                                        "tier=\"%s\"} %" PRIu64 "\n", users[i].uid,
                                        tier == GMD_TIER_VRAM ? "vram" : "host",
                                        users[i].bytes[tier]);
        promtext_family(t, "gpumemd_user_outside_bytes", "gauge",
                        "VRAM the processes of one user's clients hold outside "
                        "gpu-memd (fds kept after freeing buffers, memory "
                        "allocated beside it), charged to its vram_quota "
                        "unless [limits] outside_vram = ignore.");
        for (unsigned i = 0; i < n; i++)
                promtext_printf(t, "gpumemd_user_outside_bytes{uid=\"%lu\"} %"
                                PRIu64 "\n", users[i].uid, users[i].outside);
        free(users);
}

static void render_clients(promtext *t, const gmd_snapshot *snap,
                           const char *clients)
{
        render_per_user(t, snap);
        if (strcmp(clients, "users") != 0)
                render_per_client(t, snap, strcmp(clients, "names") == 0);
        promtext_metric(t, "gpumemd_clients", "gauge",
                        "Clients connected (after the hello).",
                        snap->n_clients);
        promtext_metric(t, "gpumemd_buffers", "gauge",
                        "Buffers alive.",
                        snap->total_buffers);
        promtext_metric(t, "gpumemd_waiting_allocations", "gauge",
                        "Allocations waiting for room (queue depth).",
                        snap->waiting_allocations);
}

static void render_moves(promtext *t, const gmd_stats *st)
{
        promtext_family(t, "gpumemd_bytes_moved_total", "counter",
                        "Bytes copied between tiers, by direction "
                        "(out: VRAM to host, in: host to VRAM).");
        promtext_printf(t, "gpumemd_bytes_moved_total{direction=\"out\"} %"
                        PRIu64 "\n", st->bytes_out);
        promtext_printf(t, "gpumemd_bytes_moved_total{direction=\"in\"} %"
                        PRIu64 "\n", st->bytes_in);
        promtext_metric(t, "gpumemd_bytes_moved_waited_total", "counter",
                        "Bytes copied to VRAM while an acquire waited for "
                        "them (passive swap-ins, and the rest of prefetches "
                        "an acquire caught up with): what prefetching did "
                        "not hide.", st->bytes_in_waited);
        promtext_family(t, "gpumemd_copy_seconds_total", "counter",
                        "Time spent copying between tiers, by direction.");
        promtext_printf(t, "gpumemd_copy_seconds_total{direction=\"out\"} ");
        promtext_seconds(t, st->copy_us_out);
        promtext_printf(t, "\ngpumemd_copy_seconds_total{direction=\"in\"} ");
        promtext_seconds(t, st->copy_us_in);
        promtext_append(t, "\n", 1);
}

static const char *const direction_names[2] = {
        [GMD_COPY_OUT] = "out", [GMD_COPY_IN] = "in",
};

/* The copy engine of each device: what its queues hold now, what they
 * moved and how long they were busy, and what its link can do. The sums
 * over devices are the global families above. */
static void render_copyqs(promtext *t, const gmd_snapshot *snap)
{
        unsigned n_devices = snap->n_pools - 1;   /* the host pool is last */

        promtext_family(t, "gpumemd_copy_queue_depth", "gauge",
                        "Moves queued or copying on a device, by direction.");
        for (unsigned i = 0; i < n_devices; i++)
                for (unsigned d = 0; d < 2; d++)
                        promtext_printf(t, "gpumemd_copy_queue_depth{device=\"%u\","
                                        "direction=\"%s\"} %u\n",
                                        snap->pools[i].device,
                                        direction_names[d],
                                        snap->pools[i].queued[d]);
        promtext_family(t, "gpumemd_device_bytes_moved_total", "counter",
                        "Bytes one device copied between tiers, by direction.");
        for (unsigned i = 0; i < n_devices; i++)
                for (unsigned d = 0; d < 2; d++)
                        promtext_printf(t, "gpumemd_device_bytes_moved_total{"
                                        "device=\"%u\",direction=\"%s\"} %"
                                        PRIu64 "\n", snap->pools[i].device,
                                        direction_names[d],
                                        snap->pools[i].bytes[d]);
        promtext_family(t, "gpumemd_device_copy_seconds_total", "counter",
                        "Time one device had a copy running, by direction.");
        for (unsigned i = 0; i < n_devices; i++)
                for (unsigned d = 0; d < 2; d++) {
                        promtext_printf(t, "gpumemd_device_copy_seconds_total{"
                                        "device=\"%u\",direction=\"%s\"} ",
                                        snap->pools[i].device,
                                        direction_names[d]);
                        promtext_seconds(t, snap->pools[i].busy_us[d]);
                        promtext_append(t, "\n", 1);
                }
        /* Only devices whose link is known: a 0 would read as a dead
         * link on a dashboard, where it means "not measured". */
        promtext_family(t, "gpumemd_link_bytes_per_second", "gauge",
                        "The link between host memory and a device, by "
                        "direction: measured once at start (cuda) or the "
                        "configured copy rate (sim).");
        for (unsigned i = 0; i < n_devices; i++)
                for (unsigned d = 0; d < 2; d++)
                        if (snap->pools[i].link[d])
                                promtext_printf(t, "gpumemd_link_bytes_per_second{"
                                                "device=\"%u\",direction=\"%s\"} %"
                                                PRIu64 "\n", snap->pools[i].device,
                                                direction_names[d],
                                                snap->pools[i].link[d]);
        /* The same: no sample while not known (one link, not measured
         * yet, skipped). */
        promtext_family(t, "gpumemd_host_link_bytes_per_second", "gauge",
                        "What every device's link to host memory carries "
                        "with all of them copying at once, all together, by "
                        "direction: below the sum of the links alone where "
                        "the host cannot feed them all (measured at start "
                        "on cuda).");
        for (unsigned d = 0; d < 2; d++)
                if (snap->host_link[d])
                        promtext_printf(t, "gpumemd_host_link_bytes_per_second{"
                                        "direction=\"%s\"} %" PRIu64 "\n",
                                        direction_names[d], snap->host_link[d]);
        /* The peer tier: one sample per pair that may be used. */
        promtext_family(t, "gpumemd_peer_link_bytes_per_second", "gauge",
                        "Copies from one device's VRAM into another's (the "
                        "peer tier: NVLink, PCIe peer-to-peer), measured at "
                        "start on cuda; only the pairs the tier may use.");
        for (size_t i = 0; i < snap->n_peers; i++)
                promtext_printf(t, "gpumemd_peer_link_bytes_per_second{"
                                "home=\"%u\",holder=\"%u\"} %" PRIu64 "\n",
                                snap->peers[i].home, snap->peers[i].holder,
                                snap->peers[i].bytes_per_s);
        promtext_family(t, "gpumemd_peer_held_bytes", "gauge",
                        "Bytes of a device's (home's) buffers held in another "
                        "device's (holder's) free VRAM: the peer tier.");
        for (size_t i = 0; i < snap->n_peers; i++)
                promtext_printf(t, "gpumemd_peer_held_bytes{home=\"%u\","
                                "holder=\"%u\"} %" PRIu64 "\n",
                                snap->peers[i].home, snap->peers[i].holder,
                                snap->peers[i].held);
        promtext_family(t, "gpumemd_peer_spare_bytes", "gauge",
                        "VRAM kept on a device for other devices' next "
                        "swap-outs to it (the peer tier; counted in the "
                        "pool's used bytes).");
        for (unsigned i = 0; i < n_devices; i++)
                if (snap->pools[i].peer_spare)
                        promtext_printf(t, "gpumemd_peer_spare_bytes{device="
                                        "\"%u\"} %" PRIu64 "\n", i,
                                        snap->pools[i].peer_spare);
        promtext_family(t, "gpumemd_vram_kept_bytes", "gauge",
                        "VRAM that swap-outs left, kept for the same clients' "
                        "next swap-ins (counted in the pool's used bytes).");
        for (unsigned i = 0; i < n_devices; i++)
                promtext_printf(t, "gpumemd_vram_kept_bytes{device=\"%u\"} %"
                                PRIu64 "\n", i, snap->pools[i].kept);
        promtext_family(t, "gpumemd_vram_unaccounted_bytes", "gauge",
                        "VRAM used on the device that gpu-memd did not create, "
                        "as the driver's free memory shows: other processes, "
                        "CUDA contexts, freed buffers whose fds a client "
                        "keeps.");
        for (unsigned i = 0; i < n_devices; i++)
                if (snap->pools[i].has_driver_view)
                        promtext_printf(t, "gpumemd_vram_unaccounted_bytes{"
                                        "device=\"%u\"} %" PRIu64 "\n", i,
                                        snap->pools[i].unaccounted);
        promtext_family(t, "gpumemd_vram_outside_charged_bytes", "gauge",
                        "VRAM clients' processes hold outside gpu-memd, "
                        "charged to the pool (counted in its used bytes).");
        for (unsigned i = 0; i < n_devices; i++)
                promtext_printf(t, "gpumemd_vram_outside_charged_bytes{"
                                "device=\"%u\"} %" PRIu64 "\n", i,
                                snap->pools[i].outside);
        promtext_family(t, "gpumemd_vram_device_free_bytes", "gauge",
                        "VRAM free on the device, as the driver says.");
        for (unsigned i = 0; i < n_devices; i++)
                if (snap->pools[i].has_driver_view)
                        promtext_printf(t, "gpumemd_vram_device_free_bytes{"
                                        "device=\"%u\"} %" PRIu64 "\n", i,
                                        snap->pools[i].device_free);
        promtext_metric(t, "gpumemd_vram_refused_total", "counter",
                        "VRAM allocations the pool had room for and the GPU "
                        "had not (memory held outside gpu-memd).",
                        snap->stats.vram_refused);
        promtext_family(t, "gpumemd_vram_kept_total", "counter",
                        "Kept VRAM by outcome: reused by a swap-in, or "
                        "released (room needed, client gone, nothing left to "
                        "come back).");
        promtext_printf(t, "gpumemd_vram_kept_total{outcome=\"reused\"} %" PRIu64
                        "\ngpumemd_vram_kept_total{outcome=\"released\"} %"
                        PRIu64 "\n", snap->stats.vram_reused,
                        snap->stats.vram_kept_released);
        promtext_metric(t, "gpumemd_swapins_mapped_total", "counter",
                        "Swap-ins into VRAM their owner still mapped: the "
                        "client imported and mapped nothing.",
                        snap->stats.vram_reused_mapped);
        promtext_metric(t, "gpumemd_vram_unmaps_asked_total", "counter",
                        "Kept VRAM its owner still mapped, asked back "
                        "(an unmap) because the room was wanted: by others, "
                        "or by another buffer of the owner.",
                        snap->stats.vram_unmaps_asked);
        promtext_metric(t, "gpumemd_clean_pageouts_total", "counter",
                        "Moves out that copied nothing: the buffer was only "
                        "read since its swap-in, whose host copy was kept.",
                        snap->stats.clean_outs);
        promtext_metric(t, "gpumemd_clean_pageout_bytes_total", "counter",
                        "Bytes those moves out did not copy.",
                        snap->stats.clean_bytes);
        promtext_metric(t, "gpumemd_loans_total", "counter",
                        "Waits (GMD_ALLOC_YIELD, GMD_ACQUIRE_YIELD) that lent "
                        "the buffers their process holds, so that others "
                        "could move them.",
                        snap->stats.loans);
        promtext_family(t, "gpumemd_lent_buffers_total", "counter",
                        "Buffers lent by waiting processes, by what became of "
                        "them: still in VRAM when the wait ended, or moved "
                        "out for another process and brought back.");
        promtext_printf(t, "gpumemd_lent_buffers_total{outcome=\"stayed\"} %"
                        PRIu64 "\ngpumemd_lent_buffers_total{outcome=\"moved\"} %"
                        PRIu64 "\n", snap->stats.lent_stayed,
                        snap->stats.lent_moved);
        promtext_metric(t, "gpumemd_memory_slices_total", "counter",
                        "Slices of a device's memory given to a process "
                        "([limits] memory_slice_ms): each a turn of processes "
                        "whose memory does not fit together.",
                        snap->slices_given);
        promtext_family(t, "gpumemd_host_pinned_bytes", "gauge",
                        "Host memory pinned, the host arenas included, which "
                        "[pools] host_limit bounds; and that limit.");
        promtext_printf(t, "gpumemd_host_pinned_bytes{state=\"pinned\"} %" PRIu64
                        "\ngpumemd_host_pinned_bytes{state=\"limit\"} %" PRIu64
                        "\n", snap->host_pinned, snap->host_limit);
        if (n_devices == 0 || !snap->pools[0].has_arena)
                return;
        promtext_family(t, "gpumemd_host_arena_bytes", "gauge",
                        "A device's host arena, pinned ahead of swap-outs: "
                        "bytes pinned, and of those free.");
        for (unsigned i = 0; i < n_devices; i++)
                promtext_printf(t, "gpumemd_host_arena_bytes{device=\"%u\","
                                "state=\"pinned\"} %" PRIu64 "\n"
                                "gpumemd_host_arena_bytes{device=\"%u\","
                                "state=\"free\"} %" PRIu64 "\n",
                                i, snap->pools[i].arena_built,
                                i, snap->pools[i].arena_free);
}

static void render_latency(promtext *t, const gmd_stats *st)
{
        uint64_t cumulative = 0;

        promtext_family(t, "gpumemd_allocation_latency_seconds", "histogram",
                        "Time from an allocation request to its reply, "
                        "waiting included.");
        for (unsigned i = 0; i < GMD_STATS_LATENCY_BUCKETS; i++) {
                cumulative += st->latency_count[i];
                promtext_printf(t, "gpumemd_allocation_latency_seconds_bucket{le=\"");
                promtext_seconds(t, gmd_stats_latency_bounds_us[i]);
                promtext_printf(t, "\"} %" PRIu64 "\n", cumulative);
        }
        cumulative += st->latency_count[GMD_STATS_LATENCY_BUCKETS];
        promtext_printf(t, "gpumemd_allocation_latency_seconds_bucket{le=\"+Inf\"} %"
                        PRIu64 "\n", cumulative);
        promtext_printf(t, "gpumemd_allocation_latency_seconds_sum ");
        promtext_seconds(t, st->latency_sum_us);
        promtext_printf(t, "\ngpumemd_allocation_latency_seconds_count %" PRIu64
                        "\n", cumulative);
}

static void render_counters(promtext *t, const gmd_stats *st)
{
        uint64_t other = 0;

        promtext_metric(t, "gpumemd_allocations_total", "counter",
                        "Allocations that succeeded.",
                        st->allocations);
        promtext_metric(t, "gpumemd_frees_total", "counter",
                        "Buffers freed.",
                        st->frees);

        promtext_family(t, "gpumemd_errors_total", "counter",
                        "Error replies sent, by kind.");
        for (int code = 1; code < GMD_STATS_ERROR_CODES; code++) {
                const char *name = stats_error_name(code);

                if (strcmp(name, "other") == 0) {
                        other += st->errors[code];
                        continue;
                }
                promtext_printf(t, "gpumemd_errors_total{kind=\"%s\"} %" PRIu64
                                "\n", name, st->errors[code]);
        }
        promtext_printf(t, "gpumemd_errors_total{kind=\"other\"} %" PRIu64 "\n",
                        other);

        promtext_metric(t, "gpumemd_protocol_disconnects_total", "counter",
                        "Clients disconnected for breaking the protocol.",
                        st->disconnects_protocol);
        promtext_metric(t, "gpumemd_outside_disconnects_total", "counter",
                        "Clients disconnected for VRAM their process holds "
                        "outside gpu-memd over their user's vram_quota "
                        "([limits] outside_vram = disconnect).",
                        st->disconnects_outside);
        promtext_metric(t, "gpumemd_connections_total", "counter",
                        "Client connections accepted.",
                        st->connections);
        promtext_metric(t, "gpumemd_connections_refused_total", "counter",
                        "Client connections refused by a [limits] bound or for "
                        "want of file descriptors.",
                        st->connections_refused);
}

void metrics_render(promtext *t, const gmd_snapshot *snap, const char *clients)
{
        render_pools(t, snap);
        render_clients(t, snap, clients);
        render_moves(t, &snap->stats);
        render_copyqs(t, snap);
        render_latency(t, &snap->stats);
        render_counters(t, &snap->stats);
        promtext_family(t, "gpumemd_uptime_seconds", "gauge",
                        "Seconds since the daemon started.");
        promtext_printf(t, "gpumemd_uptime_seconds ");
        promtext_seconds(t, snap->uptime_ms * 1000);
        promtext_append(t, "\n", 1);
        promtext_family(t, "gpumemd_restores_total", "counter",
                        "Times this daemon took over the state an earlier "
                        "one left (restart recovery).");
        promtext_printf(t, "gpumemd_restores_total %u\n", snap->restores);
        promtext_family(t, "gpumemd_restore_seconds", "gauge",
                        "How long the last restore took, start to the last "
                        "claim.");
        promtext_printf(t, "gpumemd_restore_seconds ");
        promtext_seconds(t, snap->restored_ms * 1000);
        promtext_append(t, "\n", 1);
        promtext_family(t, "gpumemd_restore_lost_buffers_total", "counter",
                        "Buffers a restore could not give back.");
        promtext_printf(t, "gpumemd_restore_lost_buffers_total %u\n",
                        snap->restore_lost);
        promtext_family(t, "gpumemd_info", "gauge",
                        "The daemon's version and backend; always 1.");
        promtext_printf(t, "gpumemd_info{version=\"%s\",backend=\"",
                        snap->version);
        promtext_label_value(t, snap->backend);
        promtext_printf(t, "\"} 1\n");
}
