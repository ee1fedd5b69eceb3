/*
 * bench_cli — the command line the GPU benchmarks share, `[--json FILE]
 * [--reps N]`, and the file their --json results go to: opened for
 * writing and closed, each failure said once with the path and the
 * system's words, so a bench's main only prints into it and exits 1 when
 * either returns the failure.
 */
#ifndef GMD_BENCH_CLI_H
#define GMD_BENCH_CLI_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* `[--json FILE] [--reps N]` into *json and *reps (untouched when not
 * given), N from 1 to `max_reps`; --reps is refused when `max_reps` is 0.
 * 0, or 2 (the exit status) after saying what is wrong. */
static inline int bench_parse_args(int argc, char **argv, const char **json,
                                   int *reps, int max_reps)
{
        const char *usage = max_reps ? "[--json FILE] [--reps N]" :
                                       "[--json FILE]";

        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
                        *json = argv[++i];
                } else if (max_reps && strcmp(argv[i], "--reps") == 0 &&
                           i + 1 < argc) {
                        *reps = atoi(argv[++i]);
                        if (*reps < 1 || *reps > max_reps) {
                                fprintf(stderr, "--reps: 1 to %d\n", max_reps);
                                return 2;
                        }
                } else {
                        fprintf(stderr, "usage: %s %s\n", argv[0], usage);
                        return 2;
                }
        }
        return 0;
}

/* qsort's order of doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

/* The median of v[0, n): the middle value, or the mean of the two middle
 * ones; 0 when n is 0. Sorts `v` in place. */
static inline double bench_median(double *v, int n)
{
        if (n <= 0)
                return 0;
        qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* `path` opened for writing, or NULL (said on stderr). */
static inline FILE *bench_json_open(const char *path)
{
        FILE *f = fopen(path, "w");

        if (!f)
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return f;
}

/* Close `f`, written as `path`: 0, or -1 when what was written may be
 * lost (said on stderr). */
static inline int bench_json_close(FILE *f, const char *path)
{
        if (fclose(f) != 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                return -1;
        }
        return 0;
}

#endif
