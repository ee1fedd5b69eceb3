/*
 * memctl_top — `gpu-memctl top`, the live view: every second it asks the
 * daemon for its status and redraws one screen of pools (capacity, use, a
 * bar), each device's copy engine (moves queued each way and the rate of
 * the last interval: the growth of the bytes-moved counters between two
 * frames over the daemon's uptime between them) and clients (largest
 * first, their bytes on VRAM and on host). The first frame, and the one
 * --once prints, has no earlier sample: it shows the average rate since
 * the daemon started instead (bytes over the time copies ran), and says
 * so in its header.
 *
 * It runs in any plain terminal: ANSI "home", "clear to end of line" and
 * "clear to end of screen" sequences only, so a frame overwrites the last
 * without flicker, and termios non-canonical no-echo input so a single 'q'
 * quits. The terminal is restored on every way out — 'q', SIGINT, SIGTERM,
 * a lost daemon — because a program that leaves the terminal without echo
 * is worse than one that crashes. Without a terminal on stdout (or with
 * --once) it prints one frame and exits, for scripts and tests; --json
 * prints one status object a second instead of frames.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "memctl.h"

#define TOP_INTERVAL_MS 1000
#define TOP_BAR_WIDTH   24
#define TOP_MAX_DEVICES 64              /* copy counters remembered */

/* Set by SIGINT/SIGTERM: the loop leaves at its next turn. A signal
 * handler can reach nothing else. */
static volatile sig_atomic_t top_stop;

typedef struct top_view {
        bool live;                      /* redraw in place on a terminal */
        bool keys;                      /* termios changed: 'q' quits */
        struct termios saved;
        struct sigaction old_int, old_term;
        bool signals;                   /* handlers installed */
        unsigned rows, rows_left;       /* terminal height; lines free */
        /* The last frame's copy counters, for the rate of the interval. */
        bool have_prev;
        uint64_t prev_ms;               /* the daemon's uptime then */
        uint64_t prev_out[TOP_MAX_DEVICES], prev_in[TOP_MAX_DEVICES];
} top_view;

static void top_on_signal(int sig)
{
        top_stop = 1;
}

static void top_signals_install(top_view *v)
{
        struct sigaction sa = { .sa_handler = top_on_signal };

        /* No SA_RESTART: a signal must wake the poll at once. */
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &v->old_int);
        sigaction(SIGTERM, &sa, &v->old_term);
        v->signals = true;
}

static void top_terminal_setup(top_view *v)
{
        struct termios t;

        if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &v->saved) == 0) {
                t = v->saved;
                t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
                t.c_cc[VMIN] = 0;
                t.c_cc[VTIME] = 0;
                if (tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0)
                        v->keys = true;
        }
        fputs("\033[?25l\033[2J", stdout);      /* hide the cursor, clear */
}

/* Put everything back as it was; safe to call more than once. */
static void top_restore(top_view *v)
{
        if (v->live) {
                fputs("\033[?25h", stdout);
                fflush(stdout);
                v->live = false;
        }
        if (v->keys) {
                tcsetattr(STDIN_FILENO, TCSANOW, &v->saved);
                v->keys = false;
        }
        if (v->signals) {
                sigaction(SIGINT, &v->old_int, NULL);
                sigaction(SIGTERM, &v->old_term, NULL);
                v->signals = false;
        }
}

/* One line of the frame; on a terminal it clears what the last frame left
 * to its right, and lines beyond the screen's height are dropped. */
__attribute__((format(printf, 2, 3)))
static void top_line(top_view *v, const char *fmt, ...)
{
        va_list ap;

        if (v->live) {
                if (v->rows_left == 0)
                        return;
                v->rows_left--;
        }
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        fputs(v->live ? "\033[K\n" : "\n", stdout);
}

static void top_pools(top_view *v, const gmd_status *s)
{
        char name[16], cap[16], used[16], free_[16], bar[TOP_BAR_WIDTH + 1];

        top_line(v, "%-10s %10s %10s %10s  %-*s %4s", "POOL", "CAPACITY",
                 "USED", "FREE", TOP_BAR_WIDTH + 2, "", "USE");
        for (size_t i = 0; i < s->n_pools; i++) {
                const gmd_pool_status *p = &s->pools[i];
                unsigned pct = p->capacity ?
                        (unsigned)(p->used * 100 / p->capacity) : 0;
                unsigned fill = p->capacity ? (unsigned)(p->used * TOP_BAR_WIDTH /
                                                        p->capacity) : 0;

                if (p->tier == GMD_TIER_VRAM)
                        snprintf(name, sizeof(name), "gpu%u vram", p->device);
                else
                        snprintf(name, sizeof(name), "%s", gmd_tier_name(p->tier));
                memset(bar, ' ', TOP_BAR_WIDTH);
                memset(bar, '#', fill > TOP_BAR_WIDTH ? TOP_BAR_WIDTH : fill);
                bar[TOP_BAR_WIDTH] = '\0';
                top_line(v, "%-10s %10s %10s %10s  [%s] %3u%%", name,
                         ctl_size_text(p->capacity, cap, sizeof(cap)),
                         ctl_size_text(p->used, used, sizeof(used)),
                         ctl_size_text(p->free, free_, sizeof(free_)), bar, pct);
        }
}

/* The rate of one direction: over the last interval when there is an
 * earlier sample, else the average while copying. A counter that went
 * backwards (another daemon on the socket) shows "-". */
static const char *top_rate(const top_view *v, uint64_t ms, uint64_t bytes,
                            uint64_t prev, uint64_t copy_us, char *buf,
                            size_t len)
{
        if (!v->have_prev)
                return ctl_rate_text(bytes, copy_us, buf, len);
        if (bytes < prev || ms <= v->prev_ms)
                return ctl_rate_text(0, 0, buf, len);
        return ctl_rate_text(bytes - prev, (ms - v->prev_ms) * 1000, buf, len);
}

static void top_copies(top_view *v, const gmd_status *s)
{
        char name[16], rate_out[24], rate_in[24], out[16], in[16];
        bool recent = v->have_prev;

        top_line(v, CTL_COPIES_FORMAT, "COPIES", "QUEUED OUT", "QUEUED IN",
                 "MOVED OUT", "MOVED IN", recent ? "RATE OUT" : "AVG OUT",
                 recent ? "RATE IN" : "AVG IN");
        for (size_t i = 0; i < s->n_pools; i++) {
                const gmd_pool_status *p = &s->pools[i];
                uint64_t prev_out = 0, prev_in = 0;
                char queued_out[12], queued_in[12];

                if (p->tier != GMD_TIER_VRAM)
                        continue;
                if (p->device < TOP_MAX_DEVICES) {
                        prev_out = v->prev_out[p->device];
                        prev_in = v->prev_in[p->device];
                }
                snprintf(name, sizeof(name), "gpu%u", p->device);
                snprintf(queued_out, sizeof(queued_out), "%" PRIu32, p->queued_out);
                snprintf(queued_in, sizeof(queued_in), "%" PRIu32, p->queued_in);
                top_line(v, CTL_COPIES_FORMAT, name, queued_out, queued_in,
                         ctl_size_text(p->bytes_out, out, sizeof(out)),
                         ctl_size_text(p->bytes_in, in, sizeof(in)),
                         top_rate(v, s->uptime_ms, p->bytes_out, prev_out,
                                  p->copy_us_out, rate_out, sizeof(rate_out)),
                         top_rate(v, s->uptime_ms, p->bytes_in, prev_in,
                                  p->copy_us_in, rate_in, sizeof(rate_in)));
        }
}

/* Whose memory slice runs on each GPU ([limits] memory_slice_ms). */
static void top_slices(top_view *v, const gmd_status *s)
{
        char line[96];

        for (size_t i = 0; i < s->n_pools; i++)
                if (ctl_slice_text(s, &s->pools[i], line, sizeof(line)))
                        top_line(v, "%s", line);
}

/* The peer tier's pairs that hold something now. */
static void top_peers(top_view *v, const gmd_status *s)
{
        char line[96];

        for (size_t i = 0; i < s->n_peers; i++)
                if (s->peers[i].held)
                        top_line(v, "%s", ctl_peer_text(&s->peers[i], line,
                                                         sizeof(line)));
}

/* Remember this frame's counters for the next frame's rates. */
static void top_remember(top_view *v, const gmd_status *s)
{
        for (size_t i = 0; i < s->n_pools; i++) {
                const gmd_pool_status *p = &s->pools[i];

                if (p->tier != GMD_TIER_VRAM || p->device >= TOP_MAX_DEVICES)
                        continue;
                v->prev_out[p->device] = p->bytes_out;
                v->prev_in[p->device] = p->bytes_in;
        }
        v->prev_ms = s->uptime_ms;
        v->have_prev = true;
}

/* Largest first; the pid breaks ties so rows do not jump between frames. */
static int client_cmp(const void *a, const void *b)
{
        const gmd_client_status *x = a, *y = b;

        if (x->bytes != y->bytes)
                return x->bytes < y->bytes ? 1 : -1;
        if (x->pid != y->pid)
                return x->pid < y->pid ? -1 : 1;
        return x->client_id < y->client_id ? -1 : x->client_id > y->client_id;
}

static void top_clients(top_view *v, gmd_status *s)
{
        char name[19], vram[16], host[16], buffers[12], out[16] = "";
        bool outside = false;

        qsort(s->clients, s->n_clients, sizeof(*s->clients), client_cmp);
        /* VRAM a process holds outside gpu-memd: shown where some does. */
        for (size_t i = 0; i < s->n_clients; i++)
                outside |= s->clients[i].outside_bytes != 0;
        top_line(v, "%7s %7s  %-18s %4s %10s %10s %7s %7s%s", "PID", "UID",
                 "NAME", "PRIO", "VRAM", "HOST", "BUFFERS", "WAITING",
                 outside ? "    OUTSIDE" : "");
        if (s->n_clients == 0)
                top_line(v, "(no clients)");
        for (size_t i = 0; i < s->n_clients; i++) {
                const gmd_client_status *c = &s->clients[i];

                if (v->live && v->rows_left == 1 && i + 1 < s->n_clients) {
                        top_line(v, "... and %zu more", s->n_clients - i);
                        break;
                }
                snprintf(buffers, sizeof(buffers), "%" PRIu32, c->buffers);
                if (outside) {
                        char size[16];

                        snprintf(out, sizeof(out), " %10s",
                                 ctl_size_text(c->outside_bytes, size,
                                               sizeof(size)));
                }
                top_line(v, "%7" PRIu32 " %7" PRIu32 "  %-18s %4" PRId32
                         " %10s %10s %7s %7" PRIu32 "%s", c->pid, c->uid,
                         c->details_hidden ? "-" :
                         ctl_name_text(c->name, name, sizeof(name) - 1),
                         c->priority,
                         ctl_size_text(c->vram_bytes, vram, sizeof(vram)),
                         ctl_size_text(c->host_bytes, host, sizeof(host)),
                         c->details_hidden ? "-" : buffers, c->waiting, out);
        }
}

static void top_frame(top_view *v, gmd_status *s)
{
        char title[128], up[32], tiers[160], lent_text[40] = "";
        uint32_t waiting = 0;
        uint64_t lent = 0;
        struct winsize ws;

        v->rows = 24;
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0)
                v->rows = ws.ws_row;
        /* The last row stays empty: a newline there would scroll. */
        v->rows_left = v->rows - 1;
        for (size_t i = 0; i < s->n_clients; i++) {
                waiting += s->clients[i].waiting;
                lent += s->clients[i].lent_bytes;
        }
        if (lent) {
                char size[16];

                snprintf(lent_text, sizeof(lent_text), ", %s lent",
                         ctl_size_text(lent, size, sizeof(size)));
        }

        if (v->live)
                fputs("\033[H", stdout);
        snprintf(title, sizeof(title), "gpu-memd %s, %s backend, up %s",
                 s->daemon_version, s->backend,
                 ctl_uptime_text(s->uptime_ms, up, sizeof(up)));
        if (v->live)
                top_line(v, "%-71.71s %s", title, "q quits");
        else
                top_line(v, "%s", title);
        top_line(v, "%s", "");
        top_pools(v, s);
        top_line(v, "%s", "");
        top_copies(v, s);
        top_slices(v, s);
        top_peers(v, s);
        top_remember(v, s);
        top_line(v, "%s", "");
        top_line(v, "%s", ctl_tiers_text(s, tiers, sizeof(tiers)));
        top_line(v, "%" PRIu32 " client%s, %" PRIu32 " buffer%s, %" PRIu32
                 " waiting%s", s->total_clients, s->total_clients == 1 ? "" : "s",
                 s->total_buffers, s->total_buffers == 1 ? "" : "s", waiting,
                 lent_text);
        top_line(v, "%s", "");
        top_clients(v, s);
        if (v->live)
                fputs("\033[J", stdout);        /* what the last frame left */
}

/* Wait out the interval; true when the user asked to quit. */
static bool top_wait(top_view *v)
{
        uint64_t waited = 0;

        while (!top_stop && waited < TOP_INTERVAL_MS) {
                struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
                struct timespec t0, t1;
                char key;
                int r;

                clock_gettime(CLOCK_MONOTONIC, &t0);
                r = poll(&p, v->keys ? 1 : 0, (int)(TOP_INTERVAL_MS - waited));
                clock_gettime(CLOCK_MONOTONIC, &t1);
                waited += (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000 +
                                     (t1.tv_nsec - t0.tv_nsec) / 1000000);
                if (r > 0 && read(STDIN_FILENO, &key, 1) == 1 &&
                    (key == 'q' || key == 'Q'))
                        return true;
                if (r < 0 && errno != EINTR)
                        return true;
        }
        return top_stop != 0;
}

int ctl_top(const ctl *c, gmd_client *client)
{
        bool once = c->once || (!c->json && !isatty(STDOUT_FILENO));
        top_view v = { .live = false };
        int status = EXIT_SUCCESS;

        if (!once) {
                top_signals_install(&v);
                if (!c->json) {
                        v.live = true;
                        top_terminal_setup(&v);
                }
        }
        for (;;) {
                gmd_status *s = NULL;
                int r = gmd_query_status(client, GMD_STATUS_CLIENTS, 0, &s);

                if (r < 0) {
                        top_restore(&v);
                        fprintf(stderr, "gpu-memctl: top: %s\n", gmd_last_error());
                        status = EXIT_FAILURE;
                        break;
                }
                ctl_drop_self(s);
                if (c->json)
                        ctl_print_json(s, GMD_STATUS_CLIENTS);
                else
                        top_frame(&v, s);
                gmd_status_free(s);
                if (fflush(stdout) != 0 || once || top_wait(&v))
                        break;
        }
        top_restore(&v);
        return status;
}
