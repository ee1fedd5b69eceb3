/*
 * stats — counters the daemon keeps for the metrics endpoint and
 * gpu-memctl: allocation latency, errors by kind, connections. Updated on
 * the loop thread only, read by the metrics endpoint on the same thread.
 */
#ifndef GMD_STATS_H
#define GMD_STATS_H

#include <stdint.h>

/* Upper bounds of the allocation latency histogram buckets, microseconds;
 * one more bucket (+Inf) follows. */
#define GMD_STATS_LATENCY_BUCKETS 12
extern const uint64_t gmd_stats_latency_bounds_us[GMD_STATS_LATENCY_BUCKETS];

/* Error codes of the protocol (GMD_ERR_*, result.h) counted by value. */
#define GMD_STATS_ERROR_CODES 16

typedef struct gmd_stats {
        uint64_t connections;          /* accepted, ever */
        uint64_t connections_refused;  /* refused: limits or out of fds */
        uint64_t disconnects_protocol; /* closed for a protocol error */
        uint64_t disconnects_outside;  /* closed for VRAM held outside
                                        * over quota (core/outside.h) */
        uint64_t allocations;          /* succeeded */
        uint64_t frees;
        uint64_t alloc_waited;         /* succeeded after waiting */
        uint64_t latency_count[GMD_STATS_LATENCY_BUCKETS + 1];
        uint64_t latency_sum_us;
        uint64_t errors[GMD_STATS_ERROR_CODES];  /* replies by code */
        /* Swap engine: bytes moved and copy time per direction. */
        uint64_t bytes_out, bytes_in;
        uint64_t copy_us_out, copy_us_in;
        /* Of bytes_in, those of chunks issued while an acquire waited
         * (the urgent class): what prefetching did not hide. */
        uint64_t bytes_in_waited;
        /* VRAM a swap-out left (reuse.h): swap-ins that copied into it,
         * and kept allocations released instead. */
        uint64_t vram_reused, vram_kept_released;
        /* Of vram_reused, swap-ins into VRAM the owner still mapped (no
         * import or map in the client); kept VRAM asked back from an
         * owner's mapping. */
        uint64_t vram_reused_mapped, vram_unmaps_asked;
        /* VRAM allocations the pool had room for and the driver had not:
         * memory held outside gpu-memd (core/vram.h). */
        uint64_t vram_refused;
        /* Moves out that copied nothing: a host copy kept since the
         * buffer's swap-in (core/hostcopy.h), and the bytes not copied. */
        uint64_t clean_outs, clean_bytes;
        /* Waits that lent what their process holds (core/loan.h), and
         * the buffers lent: still in VRAM when the wait ended, or moved
         * out and brought back. */
        uint64_t loans, lent_stayed, lent_moved;
} gmd_stats;

/* Count one allocation that took `us` microseconds from request to reply. */
void stats_alloc_latency(gmd_stats *stats, uint64_t us);

/* Count an error reply. */
void stats_error(gmd_stats *stats, int code);

/* Name of an error code for metric labels ("no_memory", "quota", ...). */
const char *stats_error_name(int code);

#endif
