/*
 * cu_check — the benchmarks' check of a CUDA driver call: in a function
 * that returns an int, a failed call prints where, which call and the
 * driver's words, and returns -EIO. Needs `cu`, the driver table
 * (common/cuda_driver.h), in scope. What the function created before the
 * call is not unwound: the benchmark counts the part as failed and the
 * process's exit frees it.
 */
#ifndef GMD_BENCH_CU_CHECK_H
#define GMD_BENCH_CU_CHECK_H

#include <errno.h>
#include <stdio.h>

#include "cuda_driver.h"

#define CU(call) do {                                                   \
        CUresult res_ = (call);                                         \
        if (res_ != CUDA_SUCCESS) {                                     \
                char buf_[128];                                         \
                fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__,  \
                        #call, cuda_driver_error(cu, res_, buf_,        \
                                                 sizeof(buf_)));        \
                return -EIO;                                            \
        }                                                               \
} while (0)

#endif
