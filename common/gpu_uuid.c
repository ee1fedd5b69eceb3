/*
 * gpu_uuid — see gpu_uuid.h. Kept apart from cuda_driver.c because the sim
 * backend and a build without the CUDA toolkit need it as well.
 */
#include "gpu_uuid.h"

#include <stdio.h>

char *gpu_uuid_format(const unsigned char b[16], char *buf, size_t len)
{
        snprintf(buf, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                 "%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4],
                 b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                 b[14], b[15]);
        return buf;
}

char *gpu_uuid_sim(unsigned index, char *buf, size_t len)
{
        snprintf(buf, len, "GPU-5140dd00-0000-4000-8000-%012x", index);
        return buf;
}
