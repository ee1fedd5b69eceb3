/*
 * gpu_uuid — a GPU's UUID as text, the form nvidia-smi prints and
 * CUDA_VISIBLE_DEVICES accepts ("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6").
 *
 * The daemon names its devices to clients by this text (DeviceInfo.uuid)
 * and libgpumem finds a CUDA device of its own process among them by it,
 * so both ends format the driver's 16 bytes here, the same way. No CUDA
 * types: the bytes are CUuuid.bytes, passed as plain bytes, so the sim
 * build and the library without a toolkit use it too.
 */
#ifndef GMD_GPU_UUID_H
#define GMD_GPU_UUID_H

#include <stddef.h>

/* "GPU-" and the 16 bytes as 8-4-4-4-12 lower-case hex digits, into `buf`
 * (GMD_UUID_SIZE bytes of include/gpumem.h hold it); returns buf. */
char *gpu_uuid_format(const unsigned char bytes[16], char *buf, size_t len);

/* The sim backend's UUID of its device `index`: "GPU-5140dd00-0000-4000-
 * 8000-" and the index as 12 hex digits, stable across starts. */
char *gpu_uuid_sim(unsigned index, char *buf, size_t len);

#endif
