/*
 * cuda_driver — the CUDA driver API, loaded at run time.
 *
 * gpu-memd and libgpumem must start on machines without an NVIDIA driver
 * (CI has the toolkit's headers but no libcuda.so.1), so neither links
 * libcuda: the first caller dlopen()s "libcuda.so.1", resolves every entry
 * point named below through cuGetProcAddress (dlsym of the versioned name as
 * a fallback) and calls cuInit(0). <cuda.h> is used for types only.
 *
 * The table is one per process and filled once (pthread_once): the driver
 * itself is process-wide state, so a second copy would buy nothing. After a
 * successful load it is read-only and safe to use from any thread. A failed
 * load is remembered too, with its reason, and every later call returns the
 * same error at once.
 *
 * Members are declared with the macro names of <cuda.h> (cuMemAlloc is
 * cuMemAlloc_v2 there), so `drv->cuMemAlloc(...)` has exactly the prototype
 * the header gives and resolves to the matching driver ABI.
 */
#ifndef GMD_CUDA_DRIVER_H
#define GMD_CUDA_DRIVER_H

#include <stddef.h>

#include <cuda.h>

#define GMD_CUDA_FN(name) __typeof__(name) *name

/* X-list of every entry point used; keep it sorted by subject. */
#define GMD_CUDA_DRIVER_FUNCTIONS(X)                                    \
        X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName)               \
        X(cuGetErrorString)                                             \
        X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)           \
        X(cuDeviceGetAttribute) X(cuDeviceTotalMem)                     \
        X(cuDeviceGetUuid) X(cuDeviceGetPCIBusId)                       \
        X(cuDeviceCanAccessPeer)                                        \
        X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)        \
        X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxPushCurrent)       \
        X(cuCtxPopCurrent) X(cuCtxSynchronize) X(cuCtxEnablePeerAccess) \
        X(cuMemGetInfo) X(cuMemAlloc) X(cuMemFree)                      \
        X(cuMemsetD8Async) X(cuMemcpyDtoH) X(cuMemcpyHtoD)              \
        X(cuMemcpyAsync) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)      \
        X(cuMemcpyPeerAsync)                                            \
        X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemHostGetDevicePointer) \
        X(cuMemCreate) X(cuMemRelease) X(cuMemGetAllocationGranularity) \
        X(cuMemExportToShareableHandle)                                 \
        X(cuMemImportFromShareableHandle) X(cuMemRetainAllocationHandle) \
        X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap)          \
        X(cuMemUnmap) X(cuMemSetAccess) X(cuMemGetAccess)               \
        X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)     \
        X(cuStreamWaitEvent) X(cuStreamQuery) X(cuLaunchHostFunc)       \
        X(cuStreamWaitValue32)                                          \
        X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)             \
        X(cuEventSynchronize) X(cuEventQuery) X(cuEventElapsedTime)     \
        X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle)                      \
        X(cuIpcCloseMemHandle) X(cuIpcGetEventHandle)                   \
        X(cuIpcOpenEventHandle)

#define GMD_CUDA_DRIVER_MEMBER(name) GMD_CUDA_FN(name);

typedef struct gmd_cuda_driver {
        GMD_CUDA_DRIVER_FUNCTIONS(GMD_CUDA_DRIVER_MEMBER)
        int version;            /* cuDriverGetVersion, e.g. 13000 */
} gmd_cuda_driver;

/*
 * Load the driver (once per process) and return its table. On failure
 * returns -ENODEV when there is no driver or no usable device, -ENOSYS when
 * the driver lacks an entry point this build needs, -EIO for other driver
 * failures; *ret_reason (may be NULL) then points to a static sentence
 * saying why ("libcuda.so.1: cannot open shared object file ...").
 */
int cuda_driver_load(const gmd_cuda_driver **ret_driver,
                     const char **ret_reason);

/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" in `buf`; returns buf. */
const char *cuda_driver_error(const gmd_cuda_driver *driver, CUresult result,
                              char *buf, size_t len);

/* A CUresult as a negative errno: OUT_OF_MEMORY -ENOMEM, INVALID_VALUE
 * -EINVAL, NOT_SUPPORTED -EOPNOTSUPP, NO_DEVICE -ENODEV, others -EIO.
 * CUDA_SUCCESS is 0. */
int cuda_driver_errno(CUresult result);

/* Number of devices the driver shows this process (CUDA_VISIBLE_DEVICES
 * applied), or a negative errno. */
int cuda_driver_device_count(const gmd_cuda_driver *driver);

#endif
