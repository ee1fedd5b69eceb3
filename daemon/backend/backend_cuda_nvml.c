/*
 * backend_cuda_nvml — which processes hold a device's memory, from NVML,
 * for the attribution of VRAM held outside gpu-memd (core/vram.h); and
 * which devices share their link to host memory, from the PCIe topology
 * NVML reports (link_shared_with: two GPUs that meet at a PCIe switch,
 * below the host bridge, reach host memory through that switch's one
 * uplink, and the copy engine schedules their copies together).
 *
 * NVML is optional: libnvidia-ml.so.1 is dlopen()ed on first use, like
 * libcuda (common/cuda_driver.c), and without it device_processes answers
 * -ENOSYS and the daemon shows the unaccounted bytes without owners. No
 * NVML header is needed: the few types used are declared here as the NVML
 * ABI has them (nvmlProcessInfo_t of the _v2/_v3 calls: pid, bytes, two
 * instance ids). A CUDA device is found in NVML by its PCI address, since
 * the two number devices differently (CUDA_VISIBLE_DEVICES, ordering).
 *
 * What NVML reports is per process with a context on the device: memory a
 * process holds only through an exported fd (a freed buffer whose fd a
 * client keeps, never mapped) may be charged to no process at all, so the
 * per-process figures can add up to less than the unaccounted bytes.
 */
#include "backend_cuda.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

#define NVML_LIB "libnvidia-ml.so.1"
#define NVML_SUCCESS 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_MAX_PROCESSES 64
/* nvmlGpuTopologyLevel_t: paths through one PCIe switch, or several
 * switches with no host bridge, are at most this. */
#define NVML_TOPOLOGY_MULTIPLE 20
/* usedGpuMemory when the driver will not say (some containers, Windows). */
#define NVML_VALUE_NOT_AVAILABLE (~0ull)

typedef int nvml_return;
typedef struct nvml_device_st *nvml_device;

/* nvmlProcessInfo_t (v2 and v3 share the layout). */
typedef struct nvml_process_info {
        unsigned int pid;
        unsigned long long used_gpu_memory;
        unsigned int gpu_instance_id;
        unsigned int compute_instance_id;
} nvml_process_info;

static struct {
        pthread_once_t once;
        bool ok;
        nvml_return (*init)(void);
        nvml_return (*by_pci)(const char *bus_id, nvml_device *ret);
        nvml_return (*processes)(nvml_device dev, unsigned int *count,
                                 nvml_process_info *infos);
        nvml_return (*ancestor)(nvml_device a, nvml_device b, int *ret_level);
} nvml = { .once = PTHREAD_ONCE_INIT };

static void nvml_load(void)
{
        void *lib = dlopen(NVML_LIB, RTLD_NOW | RTLD_LOCAL);

        if (!lib) {
                log_info("cuda: %s not found: VRAM held outside gpu-memd is "
                         "shown without the processes holding it", NVML_LIB);
                return;
        }
        *(void **)&nvml.init = dlsym(lib, "nvmlInit_v2");
        *(void **)&nvml.by_pci = dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
        *(void **)&nvml.processes = dlsym(lib,
                "nvmlDeviceGetComputeRunningProcesses_v3");
        if (!nvml.processes)
                *(void **)&nvml.processes = dlsym(lib,
                        "nvmlDeviceGetComputeRunningProcesses_v2");
        /* Optional: without it every device has a link of its own. */
        *(void **)&nvml.ancestor = dlsym(lib,
                "nvmlDeviceGetTopologyCommonAncestor");
        if (!nvml.init || !nvml.by_pci || !nvml.processes ||
            nvml.init() != NVML_SUCCESS) {
                log_info("cuda: %s lacks what gpu-memd needs or does not "
                         "start: no per-process VRAM figures", NVML_LIB);
                dlclose(lib);
                return;
        }
        nvml.ok = true;         /* the library stays loaded: NVML is global */
}

/* The NVML handle of `d`, found by its PCI address once. */
static int nvml_device_of(cuda_backend *b, cuda_device *d, nvml_device *ret)
{
        int domain = 0, bus = 0, dev = 0;
        char bus_id[32];

        if (d->nvml_handle) {
                *ret = d->nvml_handle;
                return 0;
        }
        if (b->cu->cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
                                        d->dev) ||
            b->cu->cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
                                        d->dev) ||
            b->cu->cuDeviceGetAttribute(&dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
                                        d->dev))
                return -EIO;
        snprintf(bus_id, sizeof(bus_id), "%08x:%02x:%02x.0", (unsigned)domain,
                 (unsigned)bus, (unsigned)dev);
        if (nvml.by_pci(bus_id, (nvml_device *)&d->nvml_handle) != NVML_SUCCESS) {
                d->nvml_handle = NULL;
                return -ENODEV;
        }
        *ret = d->nvml_handle;
        return 0;
}

int cuda_ops_device_processes(gmd_backend *backend, unsigned device,
                              gmd_gpu_process *ret, unsigned max)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);
        /* Twice the room asked for: a driver whose record is larger than
         * the one declared here still writes inside the array. */
        nvml_process_info infos[2 * NVML_MAX_PROCESSES];
        unsigned int count = NVML_MAX_PROCESSES, n = 0;
        nvml_device handle;
        nvml_return res;
        int r;

        if (!d)
                return -EINVAL;
        pthread_once(&nvml.once, nvml_load);
        if (!nvml.ok)
                return -ENOSYS;
        r = nvml_device_of(b, d, &handle);
        if (r < 0)
                return r;
        res = nvml.processes(handle, &count, infos);
        /* More than fit: the first NVML_MAX_PROCESSES are enough to name
         * the large holders. */
        if (res == NVML_ERROR_INSUFFICIENT_SIZE)
                count = NVML_MAX_PROCESSES;
        else if (res != NVML_SUCCESS)
                return -EIO;
        for (unsigned int i = 0; i < count && i < NVML_MAX_PROCESSES && n < max; i++) {
                ret[n].pid = infos[i].pid;
                /* 0: held, amount unknown (gpumem.h says so). */
                ret[n].bytes = infos[i].used_gpu_memory ==
                               NVML_VALUE_NOT_AVAILABLE ? 0 :
                               infos[i].used_gpu_memory;
                n++;
        }
        return (int)n;
}

unsigned cuda_ops_link_shared_with(gmd_backend *backend, unsigned device)
{
        cuda_backend *b = (cuda_backend *)backend;
        cuda_device *d = cuda_device_get(b, device);
        nvml_device mine, other;

        pthread_once(&nvml.once, nvml_load);
        if (!d || !nvml.ok || !nvml.ancestor || nvml_device_of(b, d, &mine) < 0)
                return device;
        for (unsigned i = 0; i < device; i++) {
                int level = 0;

                if (nvml_device_of(b, &b->devices[i], &other) < 0 ||
                    nvml.ancestor(other, mine, &level) != NVML_SUCCESS)
                        continue;
                if (level <= NVML_TOPOLOGY_MULTIPLE) {
                        log_info("cuda: devices %u and %u are behind one PCIe "
                                 "switch (NVML topology level %d): one link "
                                 "to host memory", i, device, level);
                        return i;
                }
        }
        return device;
}
