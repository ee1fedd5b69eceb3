/*
 * cuda_driver — see cuda_driver.h. The load runs once under pthread_once;
 * its outcome (table, error, reason) is kept in file-level state that is
 * written only inside that once-routine and read-only afterwards, which is
 * why the usual "no hidden globals" habit gives way here: the driver is one
 * per process whatever we do.
 *
 * Symbols are asked for by their plain names with the toolkit's version
 * (CUDA_VERSION), which is how cuGetProcAddress hands out the ABI the header
 * describes; if that fails the versioned name is looked up with dlsym.
 */
#include "cuda_driver.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define GMD_CUDA_LIB "libcuda.so.1"

#define GMD_STR2(x) #x
#define GMD_STR(x) GMD_STR2(x)

/* Plain name (for cuGetProcAddress), versioned name (for dlsym) and the
 * member's place in the table. */
typedef struct cuda_symbol {
        const char *name;
        const char *versioned;
        size_t offset;
} cuda_symbol;

#define GMD_CUDA_SYMBOL(fn) \
        { #fn, GMD_STR(fn), offsetof(gmd_cuda_driver, fn) },

static const cuda_symbol cuda_symbols[] = {
        GMD_CUDA_DRIVER_FUNCTIONS(GMD_CUDA_SYMBOL)
};

typedef CUresult (*cuda_get_proc_fn)(const char *symbol, void **pfn,
                                     int version, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *status);

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static gmd_cuda_driver cuda_table;
static int cuda_load_error = -ENODEV;
static char cuda_reason[256] = "not loaded";

static int cuda_fail(int err, const char *fmt, const char *a, const char *b)
{
        snprintf(cuda_reason, sizeof(cuda_reason), fmt, a ? a : "",
                 b ? b : "");
        return err;
}

static int cuda_resolve(void *lib)
{
        cuda_get_proc_fn get_proc;
        size_t i;

        get_proc = (cuda_get_proc_fn)dlsym(lib, "cuGetProcAddress_v2");
        for (i = 0; i < sizeof(cuda_symbols) / sizeof(cuda_symbols[0]); i++) {
                const cuda_symbol *sym = &cuda_symbols[i];
                CUdriverProcAddressQueryResult status;
                void *fn = NULL;

                if (get_proc &&
                    get_proc(sym->name, &fn, CUDA_VERSION,
                             CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
                            CUDA_SUCCESS)
                        fn = NULL;
                if (!fn)
                        fn = dlsym(lib, sym->versioned);
                if (!fn)
                        return cuda_fail(-ENOSYS,
                                         "the CUDA driver lacks %s%s (driver "
                                         "older than this build's toolkit?)",
                                         sym->versioned, NULL);
                memcpy((char *)&cuda_table + sym->offset, &fn, sizeof(fn));
        }
        return 0;
}

static int cuda_load(void)
{
        char err_buf[128];
        CUresult res;
        void *lib;
        int r;

        lib = dlopen(GMD_CUDA_LIB, RTLD_NOW | RTLD_LOCAL);
        if (!lib)
                return cuda_fail(-ENODEV, "no CUDA driver: %s%s", dlerror(),
                                 NULL);
        r = cuda_resolve(lib);
        if (r < 0)
                return r;   /* the library stays loaded: harmless, once */

        res = cuda_table.cuInit(0);
        if (res != CUDA_SUCCESS) {
                r = cuda_driver_errno(res);
                return cuda_fail(r == -ENODEV ? -ENODEV : -EIO,
                                 "cuInit failed: %s%s",
                                 cuda_driver_error(&cuda_table, res, err_buf,
                                                   sizeof(err_buf)), NULL);
        }
        if (cuda_table.cuDriverGetVersion(&cuda_table.version) != CUDA_SUCCESS)
                cuda_table.version = 0;
        snprintf(cuda_reason, sizeof(cuda_reason), "CUDA driver %d.%d loaded",
                 cuda_table.version / 1000, cuda_table.version % 1000 / 10);
        return 0;
}

static void cuda_load_once(void)
{
        cuda_load_error = cuda_load();
}

int cuda_driver_load(const gmd_cuda_driver **ret_driver,
                     const char **ret_reason)
{
        pthread_once(&cuda_once, cuda_load_once);
        if (ret_reason)
                *ret_reason = cuda_reason;
        if (cuda_load_error < 0)
                return cuda_load_error;
        *ret_driver = &cuda_table;
        return 0;
}

const char *cuda_driver_error(const gmd_cuda_driver *driver, CUresult result,
                              char *buf, size_t len)
{
        const char *name = NULL, *text = NULL;

        if (driver && driver->cuGetErrorName)
                driver->cuGetErrorName(result, &name);
        if (driver && driver->cuGetErrorString)
                driver->cuGetErrorString(result, &text);
        if (name && text)
                snprintf(buf, len, "%s (%s)", name, text);
        else
                snprintf(buf, len, "CUDA error %d", (int)result);
        return buf;
}

int cuda_driver_errno(CUresult result)
{
        switch (result) {
        case CUDA_SUCCESS:
                return 0;
        case CUDA_ERROR_OUT_OF_MEMORY:
                return -ENOMEM;
        case CUDA_ERROR_INVALID_VALUE:
        case CUDA_ERROR_INVALID_HANDLE:
                return -EINVAL;
        case CUDA_ERROR_NOT_SUPPORTED:
                return -EOPNOTSUPP;
        case CUDA_ERROR_NO_DEVICE:
        case CUDA_ERROR_INVALID_DEVICE:
        case CUDA_ERROR_NOT_INITIALIZED:
        case CUDA_ERROR_DEINITIALIZED:
        case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
        case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
                return -ENODEV;
        case CUDA_ERROR_ALREADY_MAPPED:
        case CUDA_ERROR_ALREADY_ACQUIRED:
                return -EEXIST;
        default:
                return -EIO;
        }
}

int cuda_driver_device_count(const gmd_cuda_driver *driver)
{
        CUresult res;
        int n = 0;

        res = driver->cuDeviceGetCount(&n);
        if (res != CUDA_SUCCESS)
                return cuda_driver_errno(res);
        return n;
}
