/*
 * gpu-memctl — shows what gpu-memd holds: pools, clients, buffers.
 *
 * A thin user of the public libgpumem API and nothing else, shaped like
 * OpenBSD's ikectl: a table of commands, each naming the status it needs
 * and the function that prints it; options may come before or after the
 * command (GNU getopt permutes). Output is a table for people that fits 80
 * columns, or with --json one JSON object with stable key names (sizes in
 * bytes) for scripts.
 *
 * Exit status: 0 done, 1 the daemon could not be reached or failed, 2 the
 * command line was wrong.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem.h"
#include "json.h"

#define EXIT_USAGE 2

typedef struct ctl {
        const char *socket;
        bool json;
        bool pid_given;
        uint32_t pid;
} ctl;

typedef struct command {
        const char *name;
        const char *args;
        const char *help;
        bool query;                     /* talks to the daemon */
        gmd_status_what what;
        void (*show)(const gmd_status *status);
} command;

static void show_status(const gmd_status *status);
static void show_clients(const gmd_status *status);
static void show_buffers(const gmd_status *status);

static const command commands[] = {
        { "status",  "",          "pools, clients and totals",
          true,  GMD_STATUS_CLIENTS, show_status },
        { "clients", "",          "the connected clients",
          true,  GMD_STATUS_CLIENTS, show_clients },
        { "buffers", "[--pid N]", "every buffer, or one process's",
          true,  GMD_STATUS_BUFFERS, show_buffers },
        { "help",    "",          "this text",
          false, GMD_STATUS_POOLS,   NULL },
};

static void usage(FILE *out)
{
        fprintf(out,
                "usage: gpu-memctl [--socket PATH] [--json] COMMAND\n"
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
                "  -j, --json           print JSON, sizes in bytes\n"
                "  -p, --pid N          buffers: only those of process N\n"
                "  -h, --help           this text\n"
                "      --version        print the version\n",
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

static const char *size_text(uint64_t bytes, char *buf, size_t len)
{
        return gmd_format_size(bytes, buf, len);
}

/* Client names come from other processes: show control characters as '?'
 * so they cannot move the terminal's cursor, and cut them to `width`. */
static const char *name_text(const char *name, char *buf, size_t width)
{
        size_t i;

        for (i = 0; name[i] && i < width; i++) {
                unsigned char c = (unsigned char)name[i];

                buf[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
        }
        buf[i] = '\0';
        return buf;
}

static void print_uptime(uint64_t ms)
{
        uint64_t s = ms / 1000;

        if (s >= 86400)
                printf("%" PRIu64 "d %02" PRIu64 "h", s / 86400, s % 86400 / 3600);
        else if (s >= 3600)
                printf("%" PRIu64 "h %02" PRIu64 "m", s / 3600, s % 3600 / 60);
        else if (s >= 60)
                printf("%" PRIu64 "m %02" PRIu64 "s", s / 60, s % 60);
        else
                printf("%" PRIu64 "s", s);
}

static void print_header(const gmd_status *status)
{
        printf("gpu-memd %s, %s backend, up ", status->daemon_version,
               status->backend);
        print_uptime(status->uptime_ms);
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
                       size_text(p->capacity, cap, sizeof(cap)),
                       size_text(p->used, used, sizeof(used)),
                       size_text(p->free, free_, sizeof(free_)), pct);
        }
}

static void print_clients(const gmd_status *status, bool waiting)
{
        char name[25], bytes[16];

        printf("%-8s %8s %8s  %-24s %11s %7s", "CLIENT", "PID", "UID", "NAME",
               "BYTES", "BUFFERS");
        printf(waiting ? " %7s\n" : "\n", "WAITING");
        if (status->n_clients == 0)
                printf("(no clients)\n");
        for (size_t i = 0; i < status->n_clients; i++) {
                const gmd_client_status *c = &status->clients[i];

                printf("%-8" PRIu64 " %8" PRIu32 " %8" PRIu32 "  %-24s %11s %7" PRIu32,
                       c->client_id, c->pid, c->uid,
                       name_text(c->name, name, sizeof(name) - 1),
                       size_text(c->bytes, bytes, sizeof(bytes)), c->buffers);
                if (waiting)
                        printf(" %7" PRIu32, c->waiting);
                printf("\n");
        }
}

static void print_totals(const gmd_status *status)
{
        char used[16], cap[16];

        printf("\ntotal: %s used of %s, %" PRIu32 " client%s, %" PRIu32
               " buffer%s\n",
               size_text(status->total_used, used, sizeof(used)),
               size_text(status->total_capacity, cap, sizeof(cap)),
               status->total_clients, status->total_clients == 1 ? "" : "s",
               status->total_buffers, status->total_buffers == 1 ? "" : "s");
}

static void show_status(const gmd_status *status)
{
        print_header(status);
        print_pools(status);
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

        printf("%-10s %-8s %8s %4s %11s %-5s %-11s %-10s %s\n", "BUFFER",
               "CLIENT", "PID", "DEV", "SIZE", "TIER", "STATE", "FLAGS", "ACQ");
        if (status->n_buffers == 0)
                printf("(no buffers)\n");
        for (size_t i = 0; i < status->n_buffers; i++) {
                const gmd_buffer_status *b = &status->buffers[i];

                printf("%-10" PRIu64 " %-8" PRIu64 " %8" PRIu32 " %4u %11s "
                       "%-5s %-11s %-10s %s\n",
                       b->buffer_id, b->client_id, b->pid, b->device,
                       size_text(b->size, size, sizeof(size)),
                       gmd_tier_name(b->tier), gmd_state_name(b->state),
                       flags_text(b->flags, flags, sizeof(flags)),
                       b->acquired ? "yes" : "no");
        }
}

/* ---- JSON ----------------------------------------------------------- */

static void print_json(const gmd_status *status, gmd_status_what what)
{
        json_writer w;

        json_init(&w, stdout);
        json_begin_object(&w, NULL);
        json_string(&w, "daemon_version", status->daemon_version);
        json_string(&w, "backend", status->backend);
        json_uint(&w, "uptime_ms", status->uptime_ms);
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
                        json_end_object(&w);
                }
                json_end_array(&w);
        }
        json_end_object(&w);
}

/* ---- running a command ---------------------------------------------- */

static int connect_error(const char *path, int r)
{
        if (r == -ENOENT || r == -ECONNREFUSED)
                fprintf(stderr, "gpu-memctl: cannot connect to %s: %s — is "
                        "gpu-memd running?\n", path, strerror(-r));
        else if (r == -EACCES)
                fprintf(stderr, "gpu-memctl: cannot connect to %s: %s — is "
                        "this user in gpu-memd's group?\n", path, strerror(-r));
        else
                fprintf(stderr, "gpu-memctl: %s\n", gmd_last_error());
        return EXIT_FAILURE;
}

static int run_query(const ctl *c, const command *cmd)
{
        gmd_client *client = NULL;
        gmd_status *status = NULL;
        int r;

        r = gmd_connect(c->socket, "gpu-memctl", &client);
        if (r < 0)
                return connect_error(c->socket, r);
        r = gmd_query_status(client, cmd->what, c->pid, &status);
        if (r < 0) {
                fprintf(stderr, "gpu-memctl: %s: %s\n", cmd->name,
                        gmd_last_error());
                gmd_disconnect(client);
                return EXIT_FAILURE;
        }
        if (c->json)
                print_json(status, cmd->what);
        else
                cmd->show(status);
        gmd_status_free(status);
        gmd_disconnect(client);
        if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "gpu-memctl: cannot write output: %s\n",
                        strerror(errno));
                return EXIT_FAILURE;
        }
        return EXIT_SUCCESS;
}

static const command *command_find(const char *name)
{
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
                if (strcmp(commands[i].name, name) == 0)
                        return &commands[i];
        return NULL;
}

static int parse_pid(const char *text, uint32_t *ret_pid)
{
        unsigned long v;
        char *end;

        errno = 0;
        v = strtoul(text, &end, 10);
        if (errno || end == text || *end || v == 0 || v > UINT32_MAX ||
            text[0] == '-')
                return -EINVAL;
        *ret_pid = (uint32_t)v;
        return 0;
}

int main(int argc, char **argv)
{
        static const struct option options[] = {
                { "socket",  required_argument, NULL, 's' },
                { "json",    no_argument,       NULL, 'j' },
                { "pid",     required_argument, NULL, 'p' },
                { "help",    no_argument,       NULL, 'h' },
                { "version", no_argument,       NULL, 'V' },
                { NULL, 0, NULL, 0 },
        };
        ctl c = { .socket = NULL };
        const command *cmd;
        int opt;

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
        if (argc - optind > 1)
                return usage_error("unexpected argument '%s'", argv[optind + 1]);
        cmd = command_find(argv[optind]);
        if (!cmd)
                return usage_error("unknown command '%s'", argv[optind]);
        if (c.pid_given && cmd->what != GMD_STATUS_BUFFERS)
                return usage_error("--pid only goes with '%s'", "buffers");
        if (!cmd->query) {
                usage(stdout);
                return EXIT_SUCCESS;
        }

        if (!c.socket || !*c.socket)
                c.socket = getenv(GMD_SOCKET_ENV);
        if (!c.socket || !*c.socket)
                c.socket = GMD_DEFAULT_SOCKET;
        return run_query(&c, cmd);
}
