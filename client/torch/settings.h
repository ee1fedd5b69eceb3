/*
 * settings — what the PyTorch shim (libgpumem_torch.so) reads from its
 * environment, parsed once at the first allocation: how long an allocation
 * waits for room, the name gpu-memctl shows, and whether the shim may write
 * its one line to stderr when it gives up, and whether a wait lends what
 * the process holds (GMD_ALLOC_YIELD). Pure functions over strings, so
 * the unit tests need neither a daemon nor a GPU.
 */
#ifndef GMD_TORCH_SETTINGS_H
#define GMD_TORCH_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#define GMD_TORCH_TIMEOUT_ENV "GPU_MEMD_TORCH_TIMEOUT_MS"
#define GMD_TORCH_NAME_ENV    "GPU_MEMD_TORCH_NAME"
#define GMD_TORCH_QUIET_ENV   "GPU_MEMD_TORCH_QUIET"
#define GMD_TORCH_CUDART_ENV  "GPU_MEMD_TORCH_CUDART"
#define GMD_TORCH_YIELD_ENV   "GPU_MEMD_TORCH_YIELD"
#define GMD_TORCH_NAME_MAX    64

typedef struct torch_settings {
        int64_t timeout_ms;     /* -1: wait for room as long as it takes */
        int quiet;              /* 1: never write to stderr */
        int yield;              /* 1 (default; "0" turns it off): the
                                 * repeat of a refused request waits with
                                 * GMD_ALLOC_YIELD, after synchronizing */
        char name[GMD_TORCH_NAME_MAX + 1];
} torch_settings;

/*
 * The wait for room: NULL or "" is -1 (no deadline), else a decimal count
 * of milliseconds, -1 included. 0 or -EINVAL (anything else: a typo must
 * not turn into "wait forever").
 */
int torch_settings_parse_timeout(const char *text, int64_t *ret_ms);

/*
 * The client name from a command line (NUL-separated words, as in
 * /proc/self/cmdline, `len` bytes): for a Python interpreter, the script's
 * file name ("train.py"), "-m module" as the module's name, "-c" as
 * "python -c"; for anything else the program's own file name. Writes at
 * most GMD_TORCH_NAME_MAX bytes and a NUL to `out`.
 */
void torch_settings_name_from_cmdline(const char *cmdline, size_t len,
                                      char out[GMD_TORCH_NAME_MAX + 1]);

/*
 * All settings from the environment (and /proc/self/cmdline for the
 * name). 0, or -EINVAL with a sentence naming the variable in `err`.
 */
int torch_settings_load(torch_settings *ret, char *err, size_t err_len);

#endif
