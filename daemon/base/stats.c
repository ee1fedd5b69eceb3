/*
 * stats — see stats.h.
 */
#include "stats.h"

#include "gpumem.pb-c.h"

const uint64_t gmd_stats_latency_bounds_us[GMD_STATS_LATENCY_BUCKETS] = {
        10, 25, 50, 100, 250, 500, 1000, 2500, 10000, 100000, 1000000, 10000000,
};

void stats_alloc_latency(gmd_stats *stats, uint64_t us)
{
        unsigned i = 0;

        while (i < GMD_STATS_LATENCY_BUCKETS && us > gmd_stats_latency_bounds_us[i])
                i++;
        stats->latency_count[i]++;
        stats->latency_sum_us += us;
}

void stats_error(gmd_stats *stats, int code)
{
        if (code >= 0 && code < GMD_STATS_ERROR_CODES)
                stats->errors[code]++;
}

const char *stats_error_name(int code)
{
        static const char *const names[GMD_STATS_ERROR_CODES] = {
                [GMD__ERROR_CODE__ERR_NONE] = "none",
                [GMD__ERROR_CODE__ERR_INVALID] = "invalid",
                [GMD__ERROR_CODE__ERR_NO_MEMORY] = "no_memory",
                [GMD__ERROR_CODE__ERR_TOO_LARGE] = "too_large",
                [GMD__ERROR_CODE__ERR_NOT_FOUND] = "not_found",
                [GMD__ERROR_CODE__ERR_PERMISSION] = "permission",
                [GMD__ERROR_CODE__ERR_QUOTA] = "quota",
                [GMD__ERROR_CODE__ERR_BUSY] = "busy",
                [GMD__ERROR_CODE__ERR_UNSUPPORTED] = "unsupported",
                [GMD__ERROR_CODE__ERR_VERSION] = "version",
                [GMD__ERROR_CODE__ERR_INTERNAL] = "internal",
                [GMD__ERROR_CODE__ERR_TIMED_OUT] = "timed_out",
                [GMD__ERROR_CODE__ERR_SHUTTING_DOWN] = "shutting_down",
                [GMD__ERROR_CODE__ERR_LIMIT] = "limit",
        };

        if (code < 0 || code >= GMD_STATS_ERROR_CODES || !names[code])
                return "other";
        return names[code];
}
