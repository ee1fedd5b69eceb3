/*
 * devmap — which of the daemon's devices each CUDA device of this process
 * is. PyTorch names devices by the process's CUDA ordinal, which follows
 * its CUDA_VISIBLE_DEVICES (set per job by Slurm and torchrun); the daemon
 * by its own numbers. gmd_device_from_cuda matches them by UUID; the
 * answer is kept per ordinal, since it holds for the process's life and
 * every cudaMalloc asks.
 */
#ifndef GMD_TORCH_DEVMAP_H
#define GMD_TORCH_DEVMAP_H

#include "gpumem.h"

/*
 * The daemon's device that is CUDA device `cuda_ordinal` of this process,
 * into *ret_device. From a daemon that does not say its devices' UUIDs
 * (older than the translation) the ordinal itself, as before it. A negative
 * errno with the sentence in gmd_last_error() when the process's GPU is
 * not one the daemon serves, or there is no such ordinal.
 */
int devmap_to_daemon(gmd_client *client, unsigned cuda_ordinal,
                     unsigned *ret_device);

/* The CUDA ordinal that devmap_to_daemon mapped to the daemon's `device`,
 * or -ENOENT when none did. */
int devmap_to_cuda(unsigned device);

/* Forget every mapping (a forked child, which connects again). */
void devmap_reset(void);

#endif
