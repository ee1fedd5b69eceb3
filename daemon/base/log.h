/*
 * log — the daemon's log lines on stderr. Under systemd (JOURNAL_STREAM is
 * set) each line starts with a syslog priority prefix "<N>" that journald
 * reads; on a terminal it starts with the time and the level name. The
 * level is daemon-wide state, set once from the config.
 */
#ifndef GMD_LOG_H
#define GMD_LOG_H

#include "config.h"

void log_setup(gmd_log_level level);
void log_set_level(gmd_log_level level);
int log_enabled(gmd_log_level level);

__attribute__((format(printf, 2, 3)))
void gmd_log(gmd_log_level level, const char *fmt, ...);

#define log_error(...)   gmd_log(GMD_LOG_ERR, __VA_ARGS__)
#define log_warning(...) gmd_log(GMD_LOG_WARNING, __VA_ARGS__)
#define log_notice(...)  gmd_log(GMD_LOG_NOTICE, __VA_ARGS__)
#define log_info(...)    gmd_log(GMD_LOG_INFO, __VA_ARGS__)
#define log_debug(...)   gmd_log(GMD_LOG_DEBUG, __VA_ARGS__)

#endif
