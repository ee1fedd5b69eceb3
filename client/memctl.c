/*
 * gpu-memctl — shows what gpu-memd holds (pools, each device's copies,
 * clients and their bytes by tier, buffers with tier and state, a live
 * view) and sends the administrator's requests (drain, priority, evict).
 *
 * A thin user of the public libgpumem API and nothing else, shaped like
 * OpenBSD's ikectl: a table of commands, each naming its arguments and the
 * function that runs it; options may come before or after the command (GNU
 * getopt permutes). Output is a table for people that fits 80 columns, or
 * with --json one JSON object with stable key names (sizes in bytes) for
 * scripts. The live view is in memctl_top.c.
 *
 * Exit status: 0 done, 1 the daemon could not be reached, refused or
 * failed, 2 the command line was wrong.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpumem.h"
#include "json.h"
#include "memctl.h"

typedef struct command command;

struct command {
        const char *name;
        const char *args;
        const char *help;
        unsigned n_args;                /* words after the command's name */
        /* Talks to the daemon over `client`; NULL: prints the help. */
        int (*run)(const ctl *c, const command *cmd, gmd_client *client);
        gmd_status_what what;           /* status commands: what to ask */
        void (*show)(const gmd_status *status);
};

static int run_show(const ctl *c, const command *cmd, gmd_client *client);
static int run_top(const ctl *c, const command *cmd, gmd_client *client);
static int run_admin(const ctl *c, const command *cmd, gmd_client *client);
static void show_status(const gmd_status *status);
static void show_clients(const gmd_status *status);
static void show_buffers(const gmd_status *status);

static const command commands[] = {
        { "status",   "",          "pools, copies, clients and totals",
          0, run_show,  GMD_STATUS_CLIENTS, show_status },
        { "clients",  "",          "the connected clients",
          0, run_show,  GMD_STATUS_CLIENTS, show_clients },
        { "buffers",  "[--pid N]", "every buffer, or one process's",
          0, run_show,  GMD_STATUS_BUFFERS, show_buffers },
        { "top",      "[--once]",  "live view, each second; q quits",
          0, run_top,   GMD_STATUS_CLIENTS, NULL },
        { "drain",    "PID",       "free process PID's buffers, disconnect it",
          1, run_admin, GMD_STATUS_POOLS,   NULL },
        { "priority", "PID N",     "set process PID's priority to N",
          2, run_admin, GMD_STATUS_POOLS,   NULL },
        { "evict",    "PID",       "move process PID's released buffers out",
          1, run_admin, GMD_STATUS_POOLS,   NULL },
        { "help",     "",          "this text",
          0, NULL,      GMD_STATUS_POOLS,   NULL },
};

static void usage(FILE *out)
{
        fprintf(out,
                "usage: gpu-memctl [--socket PATH] [--json] COMMAND [ARGS]\n"
                "\n"
                "Commands:\n");
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
                char left[32];

                snprintf(left, sizeof(left), "%s %s", commands[i].name,
                         commands[i].args);
                fprintf(out, "  %-20s %s\n", left, commands[i].help);
        }
        fprintf(out,
                "\n"
                "Options:\n"
                "  -s, --socket PATH    the daemon's socket (default: $%s,\n"
                "                       else %s)\n"
                "  -j, --json           print JSON, sizes in bytes (top: one\n"
                "                       object a second)\n"
                "  -p, --pid N          buffers: only those of process N\n"
                "      --once           top: print one frame and exit (also\n"
                "                       when stdout is not a terminal)\n"
                "  -h, --help           this text\n"
                "      --version        print the version\n"
                "\n"
                "drain, priority and evict act on every client of process PID\n"
                "and need root or gpu-memd's admin group.\n"
                "\n"
                "Exit status: 0 done, 1 the daemon could not be reached,\n"
                "refused or failed, 2 the command line was wrong.\n",
                GMD_SOCKET_ENV, GMD_DEFAULT_SOCKET);
}

static int usage_error(const char *fmt, const char *arg)
{
        fputs("gpu-memctl: ", stderr);
        fprintf(stderr, fmt, arg);
        fputs("\nRun 'gpu-memctl --help' for usage.\n", stderr);
        return EXIT_USAGE;
}

/* ---- tables for people ---------------------------------------------- */

const char *ctl_size_text(uint64_t bytes, char *buf, size_t len)
{
        return gmd_format_size(bytes, buf, len);
}

const char *ctl_name_text(const char *name, char *buf, size_t width)
{
        size_t i;

        for (i = 0; name[i] && i < width; i++) {
                unsigned char c = (unsigned char)name[i];

                buf[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
        }
        buf[i] = '\0';
        return buf;
}

const char *ctl_rate_text(uint64_t bytes, uint64_t us, char *buf, size_t len)
{
        char size[16];

        if (us == 0) {
                snprintf(buf, len, "-");
                return buf;
        }
        snprintf(buf, len, "%s/s",
                 ctl_size_text((uint64_t)((double)bytes * 1e6 / (double)us),
                               size, sizeof(size)));
        return buf;
}

const char *ctl_uptime_text(uint64_t ms, char *buf, size_t len)
{
        uint64_t s = ms / 1000;

        if (s >= 86400)
                snprintf(buf, len, "%" PRIu64 "d %02" PRIu64 "h", s / 86400,
                         s % 86400 / 3600);
        else if (s >= 3600)
                snprintf(buf, len, "%" PRIu64 "h %02" PRIu64 "m", s / 3600,
                         s % 3600 / 60);
        else if (s >= 60)
                snprintf(buf, len, "%" PRIu64 "m %02" PRIu64 "s", s / 60, s % 60);
        else
                snprintf(buf, len, "%" PRIu64 "s", s);
        return buf;
}

static void print_header(const gmd_status *status)
{
        char up[32];

        printf("gpu-memd %s, %s backend, up %s", status->daemon_version,
               status->backend, ctl_uptime_text(status->uptime_ms, up, sizeof(up)));
        if (status->restores)
                printf(", restored from the gpu-memd before it (%llu ms)",
                       (unsigned long long)status->restored_ms);
        printf("\n\n");
}

static void print_pools(const gmd_status *status)
{
        char cap[16], used[16], free_[16];

        printf("%-6s %-5s %12s %12s %12s %5s\n",
               "DEVICE", "TIER", "CAPACITY", "USED", "FREE", "USE%");
        for (size_t i = 0; i < status->n_pools; i++) {
                const gmd_pool_status *p = &status->pools[i];
                unsigned pct = p->capacity ?
                        (unsigned)(p->used * 100 / p->capacity) : 0;

                printf("%-6u %-5s %12s %12s %12s %4u%%\n", p->device,
                       gmd_tier_name(p->tier),
                       ctl_size_text(p->capacity, cap, sizeof(cap)),
                       ctl_size_text(p->used, used, sizeof(used)),
                       ctl_size_text(p->free, free_, sizeof(free_)), pct);
        }
        /* Which GPU each device number is: a process's CUDA ordinals
         * follow its CUDA_VISIBLE_DEVICES, the UUID does not. */
        for (size_t i = 0; i < status->n_pools; i++) {
                const gmd_pool_status *p = &status->pools[i];

                if (p->tier == GMD_TIER_VRAM && p->uuid[0])
                        printf("device %u is %s at PCI %s\n", p->device, p->uuid,
                               p->pci_bus_id[0] ? p->pci_bus_id : "(unknown)");
        }
}

/* Who holds `device`'s memory besides gpu-memd, where the daemon can tell
 * (NVML): one line per process, the largest first, naming the client when
 * it is one (`gpu-memctl drain PID` disconnects it; a process keeping
 * fds frees them only when it exits). */
static void print_gpu_processes(const gmd_status *status, unsigned device)
{
        char bytes[16];

        for (size_t i = 0; i < status->n_gpu_processes; i++) {
                const gmd_gpu_process_status *g = &status->gpu_processes[i];

                if (g->device != device)
                        continue;
                printf("  pid %-8" PRIu32 " %10s", g->pid, g->bytes ?
                       ctl_size_text(g->bytes, bytes, sizeof(bytes)) : "unknown");
                if (g->client_id)
                        printf("  gpu-memd client %" PRIu64 "\n", g->client_id);
                else
                        printf("  not a gpu-memd client\n");
        }
}

/* The copy engine of each device: moves queued or copying each way, the
 * bytes moved since the daemon started, and the average rate while
 * copying (bytes over the time a copy was running); then a line per
 * device for its link, its host arena and VRAM kept for swap-ins, when
 * it has any. */
/* "gpu0 shares its link to host memory with gpu1": a line for each GPU
 * whose link_group another has too, naming the others. */
static void print_shared_links(const gmd_status *status)
{
        for (size_t i = 0; i < status->n_pools; i++) {
                const gmd_pool_status *p = &status->pools[i];
                const char *sep = " shares its link to host memory with";
                bool any = false;

                if (p->tier != GMD_TIER_VRAM)
                        continue;
                for (size_t j = 0; j < status->n_pools; j++) {
                        const gmd_pool_status *o = &status->pools[j];

                        if (o->tier != GMD_TIER_VRAM || o->device == p->device ||
                            o->link_group != p->link_group)
                                continue;
                        if (!any)
                                printf("gpu%u", p->device);
                        printf("%s gpu%u", sep, o->device);
                        sep = ",";
                        any = true;
                }
                if (any)
                        printf(" (their copies are scheduled together)\n");
        }
}

/* "host links: 150.2 GB/s out, 160.1 in together (alone: 216.0 out,
 * 218.4 in)": what every GPU copying at once moves, all together, against
 * the GPUs' links each alone, summed (GPUs sharing a link counted once, at
 * the fastest's rate). One unit for all four, the largest's; the line
 * stays within 80 columns. Nothing when the daemon does not know it (one
 * link, not measured yet). */
static void print_host_links(const gmd_status *status)
{
        uint64_t alone[2] = { 0, 0 }, top = 0;
        const char *unit = "kB/s";
        double div = 1e3;

        if (!status->host_bytes_per_s_out && !status->host_bytes_per_s_in)
                return;
        for (size_t i = 0; i < status->n_pools; i++) {
                const gmd_pool_status *p = &status->pools[i];
                uint64_t link[2] = { 0, 0 };

                if (p->tier != GMD_TIER_VRAM || p->link_group != p->device)
                        continue;
                for (size_t j = 0; j < status->n_pools; j++) {
                        const gmd_pool_status *o = &status->pools[j];

                        if (o->tier != GMD_TIER_VRAM ||
                            o->link_group != p->device)
                                continue;
                        if (o->link_bytes_per_s_out > link[0])
                                link[0] = o->link_bytes_per_s_out;
                        if (o->link_bytes_per_s_in > link[1])
                                link[1] = o->link_bytes_per_s_in;
                }
                alone[0] += link[0];
                alone[1] += link[1];
        }
        top = status->host_bytes_per_s_out > status->host_bytes_per_s_in ?
              status->host_bytes_per_s_out : status->host_bytes_per_s_in;
        if (alone[0] > top)
                top = alone[0];
        if (alone[1] > top)
                top = alone[1];
        if (top >= 1000000000) {
                unit = "GB/s";
                div = 1e9;
        } else if (top >= 1000000) {
                unit = "MB/s";
                div = 1e6;
        }
        printf("host links: %.1f %s out, %.1f in together (alone: %.1f out, "
               "%.1f in)\n", (double)status->host_bytes_per_s_out / div, unit,
               (double)status->host_bytes_per_s_in / div,
               (double)alone[0] / div, (double)alone[1] / div);
}

/* The peer tier, one line per pair that may be used ("peer tier: gpu0 ->
 * gpu1 at 384.0 GB/s: 1.5 GiB held there"), and per device the VRAM kept
 * there for other devices' swap-outs; nothing where no GPU reaches
 * another. */
const char *ctl_peer_text(const gmd_peer_status *p, char *buf, size_t len)
{
        char held[32];

        snprintf(buf, len, "peer tier: gpu%u -> gpu%u at %.1f GB/s: %s held there",
                 p->home, p->holder, (double)p->bytes_per_s / 1e9,
                 ctl_size_text(p->held, held, sizeof(held)));
        return buf;
}

static void print_peers(const gmd_status *status)
{
        for (size_t i = 0; i < status->n_peers; i++) {
                char line[96];

                printf("%s\n", ctl_peer_text(&status->peers[i], line,
                                             sizeof(line)));
        }
        for (size_t i = 0; i < status->n_pools && status->n_peers; i++) {
                const gmd_pool_status *p = &status->pools[i];
                char spare[32];

                if (p->tier == GMD_TIER_VRAM && p->peer_spare)
                        printf("peer tier: gpu%u keeps %s for other GPUs' "
                               "swap-outs\n", p->device,
                               ctl_size_text(p->peer_spare, spare, sizeof(spare)));
        }
}

const char *ctl_slice_text(const gmd_status *status, const gmd_pool_status *p,
                           char *buf, size_t len)
{
        const char *name = NULL;
        char shown[17];

        if (p->tier != GMD_TIER_VRAM || !p->slice_pid)
                return NULL;
        for (size_t c = 0; c < status->n_clients && !name; c++)
                if (status->clients[c].pid == p->slice_pid &&
                    !status->clients[c].details_hidden)
                        name = ctl_name_text(status->clients[c].name, shown,
                                             sizeof(shown) - 1);
        snprintf(buf, len, "gpu%u memory slice: pid %" PRIu32 "%s%s%s, %"
                 PRIu64 " ms left at most", p->device, p->slice_pid,
                 name ? " (" : "", name ? name : "", name ? ")" : "",
                 p->slice_left_ms);
        return buf;
}

static void print_slices(const gmd_status *status)
{
        char line[96];

        for (size_t i = 0; i < status->n_pools; i++)
                if (ctl_slice_text(status, &status->pools[i], line, sizeof(line)))
                        printf("%s (what it holds stays in VRAM for it; "
                               "[limits] memory_slice_ms)\n", line);
}

static void print_copies(const gmd_status *status)
{
        char dev[16], out[16], in[16], rate_out[24], rate_in[24];

        printf(CTL_COPIES_FORMAT "\n", "COPIES", "QUEUED OUT", "QUEUED IN",
               "MOVED OUT", "MOVED IN", "AVG OUT", "AVG IN");
        for (size_t i = 0; i < status->n_pools; i++) {
                const gmd_pool_status *p = &status->pools[i];
                char queued_out[12], queued_in[12];

                if (p->tier != GMD_TIER_VRAM)
                        continue;
                snprintf(dev, sizeof(dev), "gpu%u", p->device);
                snprintf(queued_out, sizeof(queued_out), "%" PRIu32, p->queued_out);
                snprintf(queued_in, sizeof(queued_in), "%" PRIu32, p->queued_in);
                printf(CTL_COPIES_FORMAT "\n", dev, queued_out, queued_in,
                       ctl_size_text(p->bytes_out, out, sizeof(out)),
                       ctl_size_text(p->bytes_in, in, sizeof(in)),
                       ctl_rate_text(p->bytes_out, p->copy_us_out, rate_out,
                                     sizeof(rate_out)),
                       ctl_rate_text(p->bytes_in, p->copy_us_in, rate_in,
                                     sizeof(rate_in)));
        }
        /* What each link can do, each way (in: host to VRAM, as in the
         * columns above): measured at start (cuda) or the throttle of the
         * sim's copies; nothing where not known. Then the GPUs sharing a
         * link, each with the others on it. */
        for (size_t i = 0; i < status->n_pools; i++) {
                const gmd_pool_status *p = &status->pools[i];

                if (p->tier != GMD_TIER_VRAM ||
                    (!p->link_bytes_per_s_in && !p->link_bytes_per_s_out))
                        continue;
                printf("gpu%u link: %s in, %s out (%s)\n", p->device,
                       ctl_rate_text(p->link_bytes_per_s_in, 1000000, rate_in,
                                     sizeof(rate_in)),
                       ctl_rate_text(p->link_bytes_per_s_out, 1000000, rate_out,
                                     sizeof(rate_out)),
                       strcmp(status->backend, "sim") == 0 ?
                       "sim: [sim] copy_rate" : "measured at start");
        }
        print_shared_links(status);
        print_host_links(status);
        print_peers(status);
        /* Whether an acquire's swap-in overtakes the prefetches under way
         * (on when gpu-memd starts, unless [swap] preempt_step is 0; on
         * cuda it may turn itself off, and its log says why). */
        for (size_t i = 0; i < status->n_pools; i++) {
                const gmd_pool_status *p = &status->pools[i];

                if (p->tier != GMD_TIER_VRAM)
                        continue;
                if (p->preempt_step)
                        printf("gpu%u acquires overtake prefetches: copies in "
                               "pause every %s\n", p->device,
                               ctl_size_text(p->preempt_step, out, sizeof(out)));
                else
                        printf("gpu%u acquires wait behind prefetches in "
                               "flight ([swap] preempt_step)\n", p->device);
        }
        for (size_t i = 0; i < status->n_pools; i++) {
                const gmd_pool_status *p = &status->pools[i];

                if (p->tier != GMD_TIER_VRAM || !p->arena_size)
                        continue;
                /* On sim the arena is ordinary memory (memfd) set aside,
                 * not pinned: say what it is there. */
                printf("gpu%u host arena: %s %s, %s free\n", p->device,
                       ctl_size_text(p->arena_size, out, sizeof(out)),
                       strcmp(status->backend, "sim") == 0 ?
                       "set aside (sim: plain memory, not pinned)" : "pinned",
                       ctl_size_text(p->arena_free, in, sizeof(in)));
        }
        for (size_t i = 0; i < status->n_pools; i++) {
                const gmd_pool_status *p = &status->pools[i];

                if (p->tier != GMD_TIER_VRAM || !p->kept)
                        continue;
                printf("gpu%u VRAM kept for swap-ins: %s (in use until "
                       "needed)\n", p->device,
                       ctl_size_text(p->kept, out, sizeof(out)));
        }
        print_slices(status);
        /* What the pool cannot see: memory other processes (or a client
         * keeping freed buffers' fds) hold on the GPU, which no
         * allocation can use however free the pool looks. */
        for (size_t i = 0; i < status->n_pools; i++) {
                const gmd_pool_status *p = &status->pools[i];

                if (p->tier != GMD_TIER_VRAM || !p->unaccounted)
                        continue;
                printf("gpu%u VRAM held outside gpu-memd: %s (the GPU has %s "
                       "free; other processes, CUDA contexts, or freed buffers "
                       "whose fds a client keeps)\n", p->device,
                       ctl_size_text(p->unaccounted, out, sizeof(out)),
                       ctl_size_text(p->device_free, in, sizeof(in)));
                print_gpu_processes(status, p->device);
        }
}

/* A memory plan reported (gmd_report_plan): a name or any figure. */
static bool client_has_plan(const gmd_client_status *c)
{
        return c->planner[0] || c->plan_kept_bytes || c->plan_offloaded_bytes ||
               c->plan_recomputed_bytes || c->plan_streamed_bytes;
}

/* Another user's client seen by a non-admin: its name and buffer count
 * are withheld and show as "-". VRAM and HOST split the client's bytes by
 * tier; VRAM includes what it keeps cached. */
static void print_clients(const gmd_status *status, bool waiting)
{
        char name[17], vram[16], host[16], buffers[12], out[16];
        bool outside = false;

        /* VRAM a client's process holds outside gpu-memd, charged to its
         * user: a column only when some process holds any. */
        for (size_t i = 0; i < status->n_clients; i++)
                outside |= status->clients[i].outside_bytes != 0;
        printf("%-6s %7s %7s  %-16s %4s %10s %10s %5s", "CLIENT", "PID", "UID",
               "NAME", "PRIO", "VRAM", "HOST", "BUFS");
        printf(waiting ? " %4s" : "", "WAIT");
        printf(outside ? " %10s\n" : "\n", "OUTSIDE");
        if (status->n_clients == 0)
                printf("(no clients)\n");
        for (size_t i = 0; i < status->n_clients; i++) {
                const gmd_client_status *c = &status->clients[i];

                snprintf(buffers, sizeof(buffers), "%" PRIu32, c->buffers);
                printf("%-6" PRIu64 " %7" PRIu32 " %7" PRIu32 "  %-16s %4" PRId32
                       " %10s %10s %5s", c->client_id, c->pid, c->uid,
                       c->details_hidden ? "-" :
                       ctl_name_text(c->name, name, sizeof(name) - 1),
                       c->priority,
                       ctl_size_text(c->vram_bytes, vram, sizeof(vram)),
                       ctl_size_text(c->host_bytes, host, sizeof(host)),
                       c->details_hidden ? "-" : buffers);
                if (waiting)
                        printf(" %4" PRIu32, c->waiting);
                if (outside)
                        printf(" %10s", ctl_size_text(c->outside_bytes, out,
                                                      sizeof(out)));
                printf("\n");
        }
        for (size_t i = 0; i < status->n_clients; i++) {
                const gmd_client_status *c = &status->clients[i];

                if (c->outside_bytes)
                        printf("pid %" PRIu32 " holds %s of VRAM outside "
                               "gpu-memd (fds it kept after freeing buffers, "
                               "or memory allocated beside gpu-memd), charged "
                               "to uid %" PRIu32 "'s vram_quota\n", c->pid,
                               ctl_size_text(c->outside_bytes, out, sizeof(out)),
                               c->uid);
        }
        /* The memory plan a client reported (gmd_report_plan), if any:
         * who and which planner, then the figures. Within 80 columns at
         * any sizes: the figures take a line of their own, and "streamed"
         * one more when four long sizes would not fit. */
        for (size_t i = 0; i < status->n_clients; i++) {
                const gmd_client_status *c = &status->clients[i];
                char kept[16], off[16], rec[16], str[16], figures[96];
                char planner[sizeof(c->planner)];
                int n;

                if (!client_has_plan(c))
                        continue;
                printf("pid %" PRIu32 "%s%s: plan%s%s:\n", c->pid,
                       c->details_hidden ? "" : " ",
                       c->details_hidden ? "" :
                       ctl_name_text(c->name, name, sizeof(name) - 1),
                       c->planner[0] ? " by " : "",
                       ctl_name_text(c->planner, planner, sizeof(planner) - 1));
                ctl_size_text(c->plan_kept_bytes, kept, sizeof(kept));
                ctl_size_text(c->plan_offloaded_bytes, off, sizeof(off));
                ctl_size_text(c->plan_recomputed_bytes, rec, sizeof(rec));
                ctl_size_text(c->plan_streamed_bytes, str, sizeof(str));
                n = snprintf(figures, sizeof(figures),
                             "  kept %s, offloaded %s, recomputed %s",
                             kept, off, rec);
                if ((size_t)n + strlen(", streamed ") + strlen(str) <= 80)
                        printf("%s, streamed %s\n", figures, str);
                else
                        printf("%s,\n  streamed %s\n", figures, str);
        }
}

void ctl_drop_self(gmd_status *status)
{
        uint32_t self = (uint32_t)getpid();
        size_t kept = 0;

        for (size_t i = 0; i < status->n_clients; i++) {
                if (status->clients[i].pid == self) {
                        if (status->total_clients)
                                status->total_clients--;
                        continue;
                }
                status->clients[kept++] = status->clients[i];
        }
        status->n_clients = kept;
}

const char *ctl_tiers_text(const gmd_status *status, char *buf, size_t len)
{
        uint64_t used[2] = { 0, 0 }, cap[2] = { 0, 0 };
        char u[2][16], c[2][16];

        for (size_t i = 0; i < status->n_pools; i++) {
                const gmd_pool_status *p = &status->pools[i];
                unsigned t = p->tier == GMD_TIER_HOST;

                used[t] += p->used;
                cap[t] += p->capacity;
        }
        snprintf(buf, len, "used: VRAM %s of %s, host %s of %s",
                 ctl_size_text(used[0], u[0], sizeof(u[0])),
                 ctl_size_text(cap[0], c[0], sizeof(c[0])),
                 ctl_size_text(used[1], u[1], sizeof(u[1])),
                 ctl_size_text(cap[1], c[1], sizeof(c[1])));
        return buf;
}

/* Parked bytes are part of "used": memory clients keep mapped for reuse,
 * which the daemon takes back when it needs room. */
static void print_totals(const gmd_status *status)
{
        char tiers[160], cached[16], lent_text[16];
        uint64_t parked = 0, lent = 0;

        for (size_t i = 0; i < status->n_clients; i++) {
                parked += status->clients[i].parked_bytes;
                lent += status->clients[i].lent_bytes;
        }
        printf("\n%s\n%" PRIu32 " client%s, %" PRIu32 " buffer%s, %s cached",
               ctl_tiers_text(status, tiers, sizeof(tiers)),
               status->total_clients, status->total_clients == 1 ? "" : "s",
               status->total_buffers, status->total_buffers == 1 ? "" : "s",
               ctl_size_text(parked, cached, sizeof(cached)));
        /* In use by clients that wait, lent so that it may move out
         * meanwhile (GMD_ALLOC_YIELD, GMD_ACQUIRE_YIELD). */
        if (lent)
                printf(", %s lent while waiting",
                       ctl_size_text(lent, lent_text, sizeof(lent_text)));
        printf("\n");
}

static void show_status(const gmd_status *status)
{
        print_header(status);
        print_pools(status);
        printf("\n");
        print_copies(status);
        printf("\n");
        print_clients(status, false);
        print_totals(status);
}

static void show_clients(const gmd_status *status)
{
        print_clients(status, true);
}

static const char *flags_text(unsigned flags, char *buf, size_t len)
{
        snprintf(buf, len, "%s%s%s",
                 (flags & GMD_ALLOC_PIN_VRAM) ? "pin" :
                 (flags & GMD_ALLOC_SPILLABLE) ? "spill" : "swap",
                 (flags & GMD_ALLOC_PIN_VRAM) && (flags & GMD_ALLOC_SPILLABLE) ?
                 ",spill" : "",
                 (flags & GMD_ALLOC_LEGACY_IPC) ? ",ipc" : "");
        return buf;
}

static void show_buffers(const gmd_status *status)
{
        char size[16], flags[24];

        /* ACQ "cached": parked in its client's mapping cache (never
         * acquired then). FLAGS is one narrower than it was so that
         * fits 80 columns. */
        printf("%-10s %-8s %8s %4s %11s %-5s %-11s %-9s %s\n", "BUFFER",
               "CLIENT", "PID", "DEV", "SIZE", "TIER", "STATE", "FLAGS", "ACQ");
        if (status->n_buffers == 0)
                printf("(no buffers)\n");
        for (size_t i = 0; i < status->n_buffers; i++) {
                const gmd_buffer_status *b = &status->buffers[i];

                printf("%-10" PRIu64 " %-8" PRIu64 " %8" PRIu32 " %4u %11s "
                       "%-5s %-11s %-9s %s\n",
                       b->buffer_id, b->client_id, b->pid, b->device,
                       ctl_size_text(b->size, size, sizeof(size)),
                       gmd_tier_name(b->tier), gmd_state_name(b->state),
                       flags_text(b->flags, flags, sizeof(flags)),
                       b->parked ? "cached" : b->acquired ? "yes" : "no");
        }
}

/* ---- JSON ----------------------------------------------------------- */

void ctl_print_json(const gmd_status *status, gmd_status_what what)
{
        json_writer w;

        json_init(&w, stdout);
        json_begin_object(&w, NULL);
        json_string(&w, "daemon_version", status->daemon_version);
        json_string(&w, "backend", status->backend);
        json_uint(&w, "uptime_ms", status->uptime_ms);
        json_uint(&w, "restores", status->restores);
        json_uint(&w, "restored_ms", status->restored_ms);
        json_uint(&w, "host_bytes_per_s_out", status->host_bytes_per_s_out);
        json_uint(&w, "host_bytes_per_s_in", status->host_bytes_per_s_in);
        json_begin_object(&w, "totals");
        json_uint(&w, "capacity", status->total_capacity);
        json_uint(&w, "used", status->total_used);
        json_uint(&w, "clients", status->total_clients);
        json_uint(&w, "buffers", status->total_buffers);
        json_end_object(&w);

        json_begin_array(&w, "pools");
        for (size_t i = 0; i < status->n_pools; i++) {
                const gmd_pool_status *p = &status->pools[i];

                json_begin_object(&w, NULL);
                json_uint(&w, "device", p->device);
                json_string(&w, "tier", gmd_tier_name(p->tier));
                json_uint(&w, "capacity", p->capacity);
                json_uint(&w, "used", p->used);
                json_uint(&w, "free", p->free);
                json_uint(&w, "queued_out", p->queued_out);
                json_uint(&w, "queued_in", p->queued_in);
                json_uint(&w, "bytes_out", p->bytes_out);
                json_uint(&w, "bytes_in", p->bytes_in);
                json_uint(&w, "copy_us_out", p->copy_us_out);
                json_uint(&w, "copy_us_in", p->copy_us_in);
                if (p->tier == GMD_TIER_VRAM) {
                        json_uint(&w, "arena_size", p->arena_size);
                        json_uint(&w, "arena_free", p->arena_free);
                        json_uint(&w, "kept", p->kept);
                        json_uint(&w, "device_free", p->device_free);
                        json_uint(&w, "unaccounted", p->unaccounted);
                        json_uint(&w, "link_bytes_per_s_out",
                                  p->link_bytes_per_s_out);
                        json_uint(&w, "link_bytes_per_s_in",
                                  p->link_bytes_per_s_in);
                        json_uint(&w, "link_group", p->link_group);
                        json_uint(&w, "slice_pid", p->slice_pid);
                        json_uint(&w, "slice_left_ms", p->slice_left_ms);
                        json_uint(&w, "preempt_step", p->preempt_step);
                        json_string(&w, "uuid", p->uuid);
                        json_string(&w, "pci_bus_id", p->pci_bus_id);
                        json_uint(&w, "peer_held", p->peer_held);
                        json_uint(&w, "peer_spare", p->peer_spare);
                }
                json_end_object(&w);
        }
        json_end_array(&w);

        json_begin_array(&w, "peers");
        for (size_t i = 0; i < status->n_peers; i++) {
                const gmd_peer_status *p = &status->peers[i];

                json_begin_object(&w, NULL);
                json_uint(&w, "home", p->home);
                json_uint(&w, "holder", p->holder);
                json_uint(&w, "bytes_per_s", p->bytes_per_s);
                json_uint(&w, "held", p->held);
                json_end_object(&w);
        }
        json_end_array(&w);

        json_begin_array(&w, "gpu_processes");
        for (size_t i = 0; i < status->n_gpu_processes; i++) {
                const gmd_gpu_process_status *g = &status->gpu_processes[i];

                json_begin_object(&w, NULL);
                json_uint(&w, "device", g->device);
                json_uint(&w, "pid", g->pid);
                json_uint(&w, "bytes", g->bytes);
                json_uint(&w, "client_id", g->client_id);
                json_end_object(&w);
        }
        json_end_array(&w);

        json_begin_array(&w, "clients");
        for (size_t i = 0; i < status->n_clients; i++) {
                const gmd_client_status *c = &status->clients[i];

                json_begin_object(&w, NULL);
                json_uint(&w, "client_id", c->client_id);
                json_uint(&w, "pid", c->pid);
                json_uint(&w, "uid", c->uid);
                json_string(&w, "name", c->name);
                json_uint(&w, "bytes", c->bytes);
                json_uint(&w, "buffers", c->buffers);
                json_uint(&w, "waiting", c->waiting);
                json_uint(&w, "gid", c->gid);
                json_int(&w, "priority", c->priority);
                json_bool(&w, "details_hidden", c->details_hidden);
                json_uint(&w, "parked_bytes", c->parked_bytes);
                json_uint(&w, "vram_bytes", c->vram_bytes);
                json_uint(&w, "host_bytes", c->host_bytes);
                json_uint(&w, "lent_bytes", c->lent_bytes);
                json_uint(&w, "outside_bytes", c->outside_bytes);
                json_string(&w, "planner", c->planner);
                json_uint(&w, "plan_kept_bytes", c->plan_kept_bytes);
                json_uint(&w, "plan_offloaded_bytes", c->plan_offloaded_bytes);
                json_uint(&w, "plan_recomputed_bytes", c->plan_recomputed_bytes);
                json_uint(&w, "plan_streamed_bytes", c->plan_streamed_bytes);
                json_end_object(&w);
        }
        json_end_array(&w);

        /* Only `buffers` asks the daemon for them; other commands leave
         * the key out rather than claim there are none. */
        if (what == GMD_STATUS_BUFFERS) {
                json_begin_array(&w, "buffers");
                for (size_t i = 0; i < status->n_buffers; i++) {
                        const gmd_buffer_status *b = &status->buffers[i];

                        json_begin_object(&w, NULL);
                        json_uint(&w, "buffer_id", b->buffer_id);
                        json_uint(&w, "client_id", b->client_id);
                        json_uint(&w, "pid", b->pid);
                        json_uint(&w, "device", b->device);
                        json_uint(&w, "size", b->size);
                        json_string(&w, "tier", gmd_tier_name(b->tier));
                        json_string(&w, "state", gmd_state_name(b->state));
                        json_uint(&w, "flags", b->flags);
                        json_bool(&w, "acquired", b->acquired);
                        json_bool(&w, "parked", b->parked);
                        json_end_object(&w);
                }
                json_end_array(&w);
        }
        json_end_object(&w);
}

/* ---- commands ------------------------------------------------------- */

static int run_show(const ctl *c, const command *cmd, gmd_client *client)
{
        gmd_status *status = NULL;
        int r;

        r = gmd_query_status(client, cmd->what, c->pid, &status);
        if (r < 0) {
                fprintf(stderr, "gpu-memctl: %s: %s\n", cmd->name,
                        gmd_last_error());
                return EXIT_FAILURE;
        }
        ctl_drop_self(status);
        if (c->json)
                ctl_print_json(status, cmd->what);
        else
                cmd->show(status);
        gmd_status_free(status);
        return EXIT_SUCCESS;
}

static int run_top(const ctl *c, const command *cmd, gmd_client *client)
{
        return ctl_top(c, client);
}

/* Send the admin request `cmd` names and say what happened. */
static int run_admin(const ctl *c, const command *cmd, gmd_client *client)
{
        json_writer w;
        int r;

        if (strcmp(cmd->name, "drain") == 0)
                r = gmd_admin_drain(client, c->pid);
        else if (strcmp(cmd->name, "priority") == 0)
                r = gmd_admin_set_priority(client, c->pid, c->priority);
        else
                r = gmd_admin_evict(client, c->pid);

        if (r == GMD_EPERM) {
                fprintf(stderr, "gpu-memctl: not allowed: %s\n", gmd_last_error());
                return EXIT_FAILURE;
        }
        if (r < 0) {
                fprintf(stderr, "gpu-memctl: %s %" PRIu32 ": %s\n", cmd->name,
                        c->pid, gmd_last_error());
                return EXIT_FAILURE;
        }
        if (c->json) {
                json_init(&w, stdout);
                json_begin_object(&w, NULL);
                json_string(&w, "command", cmd->name);
                json_uint(&w, "pid", c->pid);
                if (cmd->n_args == 2)
                        json_int(&w, "priority", c->priority);
                json_bool(&w, "ok", true);
                json_end_object(&w);
        } else if (strcmp(cmd->name, "drain") == 0) {
                printf("process %" PRIu32 " drained: its buffers are freed and "
                       "its connections closed\n", c->pid);
        } else if (cmd->n_args == 2) {
                printf("process %" PRIu32 ": priority set to %" PRId32 "\n",
                       c->pid, c->priority);
        } else {
                printf("process %" PRIu32 ": its released buffers are evicted\n",
                       c->pid);
        }
        return EXIT_SUCCESS;
}

/* ---- running a command ---------------------------------------------- */

/* gmd_connect's error already names the socket and what to check. */
static int connect_error(void)
{
        fprintf(stderr, "gpu-memctl: %s\n", gmd_last_error());
        return EXIT_FAILURE;
}

static int run_command(const ctl *c, const command *cmd)
{
        gmd_client *client = NULL;
        int r, status;

        r = gmd_connect(c->socket, "gpu-memctl", &client);
        if (r < 0)
                return connect_error();
        status = cmd->run(c, cmd, client);
        gmd_disconnect(client);
        if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "gpu-memctl: cannot write output: %s\n",
                        strerror(errno));
                return EXIT_FAILURE;
        }
        return status;
}

static const command *command_find(const char *name)
{
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
                if (strcmp(commands[i].name, name) == 0)
                        return &commands[i];
        return NULL;
}

/* Leading blanks are allowed: args_protect_negatives() adds one. */
static int parse_pid(const char *text, uint32_t *ret_pid)
{
        unsigned long v;
        char *end;

        text += strspn(text, " ");
        errno = 0;
        v = strtoul(text, &end, 10);
        if (errno || end == text || *end || v == 0 || v > UINT32_MAX ||
            text[0] == '-')
                return -EINVAL;
        *ret_pid = (uint32_t)v;
        return 0;
}

static int parse_priority(const char *text, int32_t *ret_priority)
{
        char *end;
        long v;

        errno = 0;
        v = strtol(text, &end, 10);
        if (errno || end == text || *end || v < INT32_MIN || v > INT32_MAX)
                return -EINVAL;
        *ret_priority = (int32_t)v;
        return 0;
}

static void args_free(char **args, int argc)
{
        for (char **copy = args + argc + 1; *copy; copy++)
                free(*copy);
        free(args);
}

/* Does option word `a` take the next word as its value (--socket PATH,
 * -p N, -js PATH, --sock PATH)? */
static bool option_takes_next(const char *a)
{
        if (a[0] != '-' || !a[1])
                return false;
        if (a[1] == '-') {
                size_t n = strlen(a + 2);

                return n > 0 && !strchr(a, '=') &&
                       (strncmp("socket", a + 2, n) == 0 ||
                        strncmp("pid", a + 2, n) == 0);
        }
        for (const char *p = a + 1; *p; p++)
                if (*p == 's' || *p == 'p')
                        return p[1] == '\0';
        return false;
}

/*
 * "priority PID -5": getopt would take "-5" for options. Every argument
 * that is a negative number, and not an option's value, gets a leading
 * space in a copy of argv: getopt then sees a word, and strtol skips the
 * space. The copies are listed after the argv copy's NULL (getopt
 * reorders the words before it) so args_free finds them. NULL when out
 * of memory.
 */
static char **args_protect_negatives(int argc, char **argv)
{
        char **args = calloc(2 * ((size_t)argc + 1), sizeof(*args));
        char **copies = args + argc + 1;
        bool value_next = false, rest = false;

        if (!args)
                return NULL;
        for (int i = 0; i < argc; i++) {
                const char *a = argv[i];

                args[i] = argv[i];
                if (i == 0 || rest)
                        continue;
                if (value_next) {
                        value_next = false;
                } else if (strcmp(a, "--") == 0) {
                        rest = true;
                } else if (a[0] == '-' && a[1] &&
                           strspn(a + 1, "0123456789") == strlen(a + 1)) {
                        if (asprintf(copies, " %s", a) < 0) {
                                *copies = NULL;
                                args_free(args, argc);
                                return NULL;
                        }
                        args[i] = *copies++;
                } else {
                        value_next = option_takes_next(a);
                }
        }
        return args;
}

/* The words after the command: its PID and N. */
static int parse_command_args(ctl *c, const command *cmd, char **words,
                              int n_words)
{
        char what[64];

        if ((unsigned)n_words < cmd->n_args) {
                snprintf(what, sizeof(what), "'%s' needs %s", cmd->name,
                         cmd->args);
                return usage_error("%s", what);
        }
        if ((unsigned)n_words > cmd->n_args)
                return usage_error("unexpected argument '%s'",
                                   words[cmd->n_args] + strspn(words[cmd->n_args], " "));
        if (cmd->n_args >= 1 && parse_pid(words[0], &c->pid) < 0)
                return usage_error("'%s' is not a process id",
                                   words[0] + strspn(words[0], " "));
        if (cmd->n_args >= 2 && parse_priority(words[1], &c->priority) < 0)
                return usage_error("'%s' is not a priority (an integer)",
                                   words[1] + strspn(words[1], " "));
        return 0;
}

static int ctl_main(int argc, char **argv)
{
        static const struct option options[] = {
                { "socket",  required_argument, NULL, 's' },
                { "json",    no_argument,       NULL, 'j' },
                { "pid",     required_argument, NULL, 'p' },
                { "once",    no_argument,       NULL, 'o' },
                { "help",    no_argument,       NULL, 'h' },
                { "version", no_argument,       NULL, 'V' },
                { NULL, 0, NULL, 0 },
        };
        ctl c = { .socket = NULL };
        const command *cmd;
        int opt, r;

        opterr = 0;
        while ((opt = getopt_long(argc, argv, ":s:jp:h", options, NULL)) != -1) {
                switch (opt) {
                case 's':
                        c.socket = optarg;
                        break;
                case 'j':
                        c.json = true;
                        break;
                case 'p':
                        if (parse_pid(optarg, &c.pid) < 0)
                                return usage_error("'%s' is not a process id",
                                                   optarg);
                        c.pid_given = true;
                        break;
                case 'o':
                        c.once = true;
                        break;
                case 'h':
                        usage(stdout);
                        return EXIT_SUCCESS;
                case 'V':
                        printf("gpu-memctl %s\n", GMD_VERSION_STRING);
                        return EXIT_SUCCESS;
                case ':':
                        return usage_error("option '%s' needs a value",
                                           argv[optind - 1]);
                default:
                        return usage_error("unknown option '%s'",
                                           argv[optind - 1]);
                }
        }
        if (optind >= argc)
                return usage_error("%s", "no command given");
        cmd = command_find(argv[optind]);
        if (!cmd)
                return usage_error("unknown command '%s'",
                                   argv[optind] + strspn(argv[optind], " "));
        r = parse_command_args(&c, cmd, argv + optind + 1, argc - optind - 1);
        if (r != 0)
                return r;
        if (c.pid_given && cmd->what != GMD_STATUS_BUFFERS)
                return usage_error("--pid only goes with '%s'", "buffers");
        if (c.once && cmd->run != run_top)
                return usage_error("--once only goes with '%s'", "top");
        if (!cmd->run) {
                usage(stdout);
                return EXIT_SUCCESS;
        }

        if (!c.socket || !*c.socket)
                c.socket = getenv(GMD_SOCKET_ENV);
        if (!c.socket || !*c.socket)
                c.socket = GMD_DEFAULT_SOCKET;
        return run_command(&c, cmd);
}

int main(int argc, char **argv)
{
        char **args = args_protect_negatives(argc, argv);
        int r;

        if (!args) {
                fprintf(stderr, "gpu-memctl: out of memory\n");
                return EXIT_FAILURE;
        }
        r = ctl_main(argc, args);
        args_free(args, argc);
        return r;
}
