/*
 * log — see log.h. One fprintf per line so lines from the loop thread and
 * worker threads never interleave mid-line (stdio locks the stream).
 *
 * Repeated lines are rate-limited by their format string (the call site):
 * LOG_BURST lines of one format per LOG_WINDOW_MS, then the rest of the
 * window is counted, not written, and one line says how many were left
 * out. A flood a client can cause (refused connections, protocol
 * errors) so costs a few lines, not millions; a format seen rarely is
 * never held back, nor is a debug line (see log_admit).
 */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

#define LOG_BURST      50
#define LOG_WINDOW_MS  5000
#define LOG_SITES      32      /* formats tracked at once */

typedef struct log_site {
        const char *fmt;       /* NULL: free */
        uint64_t window_ms;    /* start of its window */
        unsigned lines;        /* written or left out in this window */
        unsigned dropped;
} log_site;

static gmd_log_level log_level = GMD_LOG_INFO;
static int log_journal;
static log_site log_sites[LOG_SITES];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void log_setup(gmd_log_level level)
{
        log_level = level;
        log_journal = getenv("JOURNAL_STREAM") != NULL;
}

void log_set_level(gmd_log_level level)
{
        log_level = level;
}

int log_enabled(gmd_log_level level)
{
        return level <= log_level;
}

static uint64_t log_now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void log_write(gmd_log_level level, const char *line);

/* May a line of `fmt` be written now? Reports a closed window's dropped
 * lines first. The site of the oldest window is reused when all are
 * taken. */
static bool log_admit(gmd_log_level level, const char *fmt)
{
        uint64_t now = log_now_ms();
        log_site *site = NULL, *oldest = &log_sites[0];
        const char *dropped_fmt = NULL;
        unsigned dropped = 0;
        bool ok;

        /* Debug lines are asked for by whoever runs the daemon at debug
         * level to see every event (swap_bench reads the per-move lines);
         * a client cannot turn that level on, so they are never held. */
        if (level >= GMD_LOG_DEBUG)
                return true;
        pthread_mutex_lock(&log_lock);
        for (unsigned i = 0; i < LOG_SITES; i++) {
                if (log_sites[i].fmt == fmt) {
                        site = &log_sites[i];
                        break;
                }
                if (log_sites[i].window_ms < oldest->window_ms)
                        oldest = &log_sites[i];
        }
        if (!site) {
                site = oldest;
                dropped = site->dropped;
                dropped_fmt = site->fmt;
                *site = (log_site){ fmt, now, 0, 0 };
        } else if (now - site->window_ms >= LOG_WINDOW_MS) {
                dropped = site->dropped;
                dropped_fmt = fmt;
                site->window_ms = now;
                site->lines = 0;
                site->dropped = 0;
        }
        ok = ++site->lines <= LOG_BURST;
        if (!ok)
                site->dropped++;
        pthread_mutex_unlock(&log_lock);
        if (dropped) {
                char note[200];

                snprintf(note, sizeof(note), "(left out %u more lines of the form "
                         "\"%.100s\": repeated too often)", dropped, dropped_fmt);
                log_write(level, note);
        }
        return ok;
}

void gmd_log(gmd_log_level level, const char *fmt, ...)
{
        char line[1024];
        va_list ap;

        if (!log_enabled(level) || !log_admit(level, fmt))
                return;
        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        log_write(level, line);
}

static void log_write(gmd_log_level level, const char *line)
{
        if (log_journal) {
                fprintf(stderr, "<%d>%s\n", (int)level, line);
        } else {
                struct timeval tv;
                struct tm tm;
                char stamp[32];

                gettimeofday(&tv, NULL);
                localtime_r(&tv.tv_sec, &tm);
                strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
                fprintf(stderr, "%s.%03ld %-7s %s\n", stamp,
                        (long)(tv.tv_usec / 1000),
                        config_log_level_name(level), line);
        }
}
