/*
 * settings — the PyTorch shim's environment: GPU_MEMD_TORCH_TIMEOUT_MS,
 * GPU_MEMD_TORCH_NAME, GPU_MEMD_TORCH_QUIET. See settings.h.
 */
#include "settings.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int torch_settings_parse_timeout(const char *text, int64_t *ret_ms)
{
        char *end;
        long long v;

        if (!text || !*text) {
                *ret_ms = -1;
                return 0;
        }
        errno = 0;
        v = strtoll(text, &end, 10);
        if (errno || end == text || *end || v < -1)
                return -EINVAL;
        *ret_ms = v;
        return 0;
}

static const char *base_name(const char *path)
{
        const char *slash = strrchr(path, '/');

        return slash ? slash + 1 : path;
}

static int is_python(const char *word)
{
        return strncmp(base_name(word), "python", 6) == 0;
}

/* Python options that take the next word as their argument. */
static int takes_argument(const char *opt)
{
        return strcmp(opt, "-W") == 0 || strcmp(opt, "-X") == 0 ||
               strcmp(opt, "--check-hash-based-pycs") == 0;
}

void torch_settings_name_from_cmdline(const char *cmdline, size_t len,
                                      char out[GMD_TORCH_NAME_MAX + 1])
{
        const char *words[64];
        const char *pick = NULL;
        size_t n = 0, at = 0;

        while (at < len && n < 64) {
                words[n++] = cmdline + at;
                at += strnlen(cmdline + at, len - at) + 1;
        }
        out[0] = '\0';
        if (n == 0)
                return;
        pick = base_name(words[0]);
        if (is_python(words[0])) {
                for (size_t i = 1; i < n; i++) {
                        const char *w = words[i];

                        if (strcmp(w, "-m") == 0) {
                                pick = i + 1 < n ? words[i + 1] : pick;
                                break;
                        }
                        if (strcmp(w, "-c") == 0) {
                                pick = "python -c";
                                break;
                        }
                        if (w[0] != '-' || strcmp(w, "-") == 0) {
                                pick = base_name(w);
                                break;
                        }
                        if (takes_argument(w))
                                i++;
                }
        }
        snprintf(out, GMD_TORCH_NAME_MAX + 1, "%s", pick);
}

static void name_from_proc(char out[GMD_TORCH_NAME_MAX + 1])
{
        char buf[4096];
        ssize_t n = -1;
        int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);

        if (fd >= 0) {
                n = read(fd, buf, sizeof(buf));
                close(fd);
        }
        torch_settings_name_from_cmdline(buf, n > 0 ? (size_t)n : 0, out);
}

int torch_settings_load(torch_settings *ret, char *err, size_t err_len)
{
        const char *timeout = getenv(GMD_TORCH_TIMEOUT_ENV);
        const char *name = getenv(GMD_TORCH_NAME_ENV);
        const char *quiet = getenv(GMD_TORCH_QUIET_ENV);
        const char *yield = getenv(GMD_TORCH_YIELD_ENV);
        torch_settings s = { 0 };

        if (torch_settings_parse_timeout(timeout, &s.timeout_ms) < 0) {
                snprintf(err, err_len, "%s=%s is not a number of milliseconds "
                         "(-1 or unset: wait as long as it takes)",
                         GMD_TORCH_TIMEOUT_ENV, timeout);
                return -EINVAL;
        }
        s.quiet = quiet && *quiet && strcmp(quiet, "0") != 0;
        s.yield = !yield || !*yield || strcmp(yield, "0") != 0;
        if (name && *name)
                snprintf(s.name, sizeof(s.name), "%s", name);
        else
                name_from_proc(s.name);
        *ret = s;
        return 0;
}
