/*
 * stats — see stats.h.
 */
#include "stats.h"

#include "result.h"

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
                [GMD_ERR_NONE] = "none",
                [GMD_ERR_INVALID] = "invalid",
                [GMD_ERR_NO_MEMORY] = "no_memory",
                [GMD_ERR_TOO_LARGE] = "too_large",
                [GMD_ERR_NOT_FOUND] = "not_found",
                [GMD_ERR_PERMISSION] = "permission",
                [GMD_ERR_QUOTA] = "quota",
                [GMD_ERR_BUSY] = "busy",
                [GMD_ERR_UNSUPPORTED] = "unsupported",
                [GMD_ERR_VERSION] = "version",
                [GMD_ERR_INTERNAL] = "internal",
                [GMD_ERR_TIMED_OUT] = "timed_out",
                [GMD_ERR_SHUTTING_DOWN] = "shutting_down",
                [GMD_ERR_LIMIT] = "limit",
        };

        if (code < 0 || code >= GMD_STATS_ERROR_CODES || !names[code])
                return "other";
        return names[code];
}
