/*
 * backend — choosing one. "auto" tries cuda and falls back to sim with one
 * notice, so `make run` works on a laptop and on the GPU machine alike;
 * naming a backend that cannot start is an error, never a silent fallback.
 * Also what both backends' memory shares: an fd's identity.
 */
#include "backend.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "log.h"

int backend_open(const gmd_config *config, unsigned flags,
                 gmd_backend **ret_backend)
{
        int r;

        (void)flags;    /* sim's arena costs nothing to build: no hold */

        if (strcmp(config->backend, "sim") == 0)
                return backend_sim_open(config, ret_backend);

#ifdef GMD_HAVE_CUDA
        r = backend_cuda_open_flags(config, flags, ret_backend);
        if (r == 0)
                return 0;
        if (strcmp(config->backend, "cuda") == 0) {
                if (r == -ENODEV)
                        log_error("the cuda backend cannot start: %s",
                                  backend_cuda_unusable_reason());
                return r;
        }
        log_notice("no usable GPU (%s): using the sim backend, host memory "
                   "standing in for VRAM", r == -ENODEV ?
                   backend_cuda_unusable_reason() : strerror(-r));
#else
        if (strcmp(config->backend, "cuda") == 0) {
                log_error("this gpu-memd was built without CUDA: the cuda backend "
                          "is not available (rebuild with the CUDA toolkit installed)");
                return -EOPNOTSUPP;
        }
        log_notice("built without CUDA: using the sim backend, host memory "
                   "standing in for VRAM");
#endif
        r = backend_sim_open(config, ret_backend);
        return r;
}

gmd_backend *backend_close(gmd_backend *backend)
{
        if (backend)
                backend->ops->destroy(backend);
        return NULL;
}

int mem_identity(int fd, uint64_t *ret_dev, uint64_t *ret_ino)
{
        struct stat st;

        if (fstat(fd, &st) < 0)
                return -errno;
        *ret_dev = (uint64_t)st.st_dev;
        *ret_ino = (uint64_t)st.st_ino;
        return 0;
}
