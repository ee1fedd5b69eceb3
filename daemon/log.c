/*
 * log — see log.h. One fprintf per line so lines from the loop thread and
 * worker threads never interleave mid-line (stdio locks the stream).
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static gmd_log_level log_level = GMD_LOG_INFO;
static int log_journal;

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

void gmd_log(gmd_log_level level, const char *fmt, ...)
{
        char line[1024];
        va_list ap;

        if (!log_enabled(level))
                return;
        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);

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
