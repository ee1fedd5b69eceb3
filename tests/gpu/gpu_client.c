/*
 * gpu_client — gpu_client_test of gpu_proc.h: one client of one gpu-memd,
 * from the GPU check to the verdict, on device 0 whatever the machine has
 * (it says so in its first line). Apart from gpu_proc.c because it
 * calls libgpumem, which the backend's own tests do not link.
 */
#include "gpu_proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_kernels.h"
#include "gpumem.h"

int gpu_client_test(const char *name, void (*run)(gmd_client *c))
{
        const gmd_cuda_driver *cu;
        gmd_client *c = NULL;
        gpu_daemon d;
        int r;

        setvbuf(stdout, NULL, _IOLBF, 0);
        cu = gpu_usable();
        if (!cu)
                return GPU_TEST_SKIP;
        gpu_say_device(cu, 0, "the daemon's device 0, where every buffer "
                       "of this test is (the daemon serves all the GPUs)");
        setenv("GPU_MEMD_CACHE", "0", 1);
        r = gpu_daemon_start(NULL, &d);
        CHECK(r == 0, "start gpu-memd: %s", strerror(-r));
        if (r < 0)
                return 1;
        r = gmd_connect(NULL, name, &c);
        CHECK(r == 0, "connect: %s", gmd_last_error());
        if (r == 0) {
                run(c);
                gmd_disconnect(c);
        }
        CHECK(gpu_daemon_stop(&d, gpu_failures ? stdout : NULL) == 0,
              "gpu-memd stops cleanly");
        printf("%s: %d failure(s)\n", gpu_failures ? "FAIL" : "PASS", gpu_failures);
        return gpu_failures ? 1 : 0;
}
