/*
 * devices — finding the daemon's device that is a CUDA device of this
 * process. A process's CUDA ordinals are not the daemon's device numbers:
 * CUDA_VISIBLE_DEVICES (set per job by Slurm, torchrun, container
 * runtimes) filters and reorders what each process sees, so device 0 of a
 * job may be the daemon's device 1. The one name both sides agree on is
 * the GPU's UUID, which the daemon sends in its hello.
 *
 * On the cuda backend this process's driver says which GPU an ordinal is
 * (cuDeviceGet applies CUDA_VISIBLE_DEVICES in all its forms); the sim
 * backend has no driver, so its rule is emulated here over the daemon's
 * list, which stands for the machine's GPUs. Nothing is cached: both
 * paths cost microseconds and callers that ask per allocation (the
 * PyTorch shim) keep their own table.
 */
#include "devices.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client.h"
#include "errors.h"
#include "gpu_uuid.h"
#ifdef GMD_HAVE_CUDA
#include "cuda_driver.h"
#endif

/* The device one CUDA_VISIBLE_DEVICES entry names, or -1. */
static int entry_device(const char *entry, size_t len,
                        const gmd__device_id *ids, unsigned n)
{
        int found = -1;

        if (len == 0)
                return -1;
        if (isdigit((unsigned char)entry[0])) {
                unsigned long v = 0;

                for (size_t i = 0; i < len; i++) {
                        if (!isdigit((unsigned char)entry[i]) || v > 1000)
                                return -1;
                        v = v * 10 + (unsigned long)(entry[i] - '0');
                }
                return v < n ? (int)v : -1;
        }
        /* A UUID or a prefix of one, naming exactly one device. CUDA
         * compares the hex digits without regard to case. */
        for (unsigned d = 0; d < n; d++) {
                if (!ids[d].uuid[0] || strlen(ids[d].uuid) < len ||
                    strncasecmp(ids[d].uuid, entry, len) != 0)
                        continue;
                if (found >= 0)
                        return -1;
                found = (int)d;
        }
        return found;
}

unsigned gmd__visible_devices(const char *visible, const gmd__device_id *ids,
                              unsigned n, unsigned *ret, unsigned max)
{
        unsigned count = 0;
        const char *p = visible;

        if (!visible) {
                for (unsigned d = 0; d < n && count < max; d++)
                        ret[count++] = d;
                return count;
        }
        while (*p && count < max) {
                const char *end = strchr(p, ',');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                const char *e = p;
                int d;

                /* Spaces around an entry are allowed, as CUDA allows. */
                while (len && isspace((unsigned char)*e)) {
                        e++;
                        len--;
                }
                while (len && isspace((unsigned char)e[len - 1]))
                        len--;
                d = entry_device(e, len, ids, n);
                for (unsigned i = 0; d >= 0 && i < count; i++)
                        if (ret[i] == (unsigned)d)
                                d = -1;
                if (d < 0)
                        break;
                ret[count++] = (unsigned)d;
                if (!end)
                        break;
                p = end + 1;
        }
        return count;
}

/* "0 GPU-... (0000:19:00.0), 1 GPU-..." for error sentences. */
static const char *devices_text(const gmd_client *client, char *buf,
                                size_t len)
{
        size_t used = 0;

        buf[0] = '\0';
        for (unsigned d = 0; d < client->n_devices && used < len; d++) {
                int r = snprintf(buf + used, len - used, "%s%u %s", d ? ", " : "",
                                 d, client->ids[d].uuid);

                if (r < 0)
                        break;
                used += (size_t)r;
        }
        return buf;
}

/* The UUID of this process's CUDA device `ordinal`, from its driver. */
static int cuda_uuid_of(int ordinal, char *buf, size_t len)
{
#ifdef GMD_HAVE_CUDA
        const gmd_cuda_driver *cu = NULL;
        const char *reason = NULL;
        char err[128];
        CUdevice dev;
        CUuuid id;
        CUresult res;
        int r;

        r = cuda_driver_load(&cu, &reason);
        if (r < 0) {
                gmd__error_set("gpu-memd runs on GPUs but this process has no "
                               "usable CUDA driver to say which GPU its device "
                               "%d is: %s", ordinal, reason);
                return -ENODEV;
        }
        res = cu->cuDeviceGet(&dev, ordinal);
        if (res == CUDA_SUCCESS)
                res = cu->cuDeviceGetUuid(&id, dev);
        if (res != CUDA_SUCCESS) {
                const char *v = getenv("CUDA_VISIBLE_DEVICES");

                gmd__error_set("this process has no CUDA device %d "
                               "(CUDA_VISIBLE_DEVICES=%s): %s", ordinal,
                               v ? v : "(unset)",
                               cuda_driver_error(cu, res, err, sizeof(err)));
                return -ENODEV;
        }
        gpu_uuid_format((const unsigned char *)id.bytes, buf, len);
        return 0;
#else
        (void)buf;
        (void)len;
        gmd__error_set("gpu-memd runs on GPUs but this libgpumem was built "
                       "without CUDA, so it cannot say which GPU CUDA device "
                       "%d is", ordinal);
        return -ENODEV;
#endif
}

/* The UUID of this process's ordinal as the sim's emulated rule sees it. */
static int sim_uuid_of(const gmd_client *client, int ordinal, char *buf,
                       size_t len)
{
        const char *v = getenv("CUDA_VISIBLE_DEVICES");
        unsigned list[64];
        unsigned n = gmd__visible_devices(v, client->ids, client->n_devices,
                                          list, 64);

        if ((unsigned)ordinal >= n) {
                gmd__error_set("this process has no CUDA device %d: "
                               "CUDA_VISIBLE_DEVICES=%s shows it %u of the "
                               "sim daemon's %u devices; set it to indices "
                               "or UUIDs of the daemon's devices "
                               "(gpu-memctl status lists them)", ordinal,
                               v ? v : "(unset)", n, client->n_devices);
                return -ENODEV;
        }
        snprintf(buf, len, "%s", client->ids[list[ordinal]].uuid);
        return 0;
}

/** The daemon's device that is this process's CUDA device `cuda_ordinal`. */
int gmd_device_from_cuda(gmd_client *client, int cuda_ordinal,
                         unsigned *ret_device)
{
        char uuid[GMD_UUID_SIZE], known[512];
        bool sim;
        int r;

        if (!client || !ret_device || cuda_ordinal < 0) {
                gmd__error_set("gmd_device_from_cuda: no client, no result "
                               "pointer or a negative ordinal");
                return -EINVAL;
        }
        for (unsigned d = 0; d < client->n_devices; d++) {
                if (!client->ids[d].uuid[0]) {
                        gmd__error_set("gpu-memd %s does not say its devices' "
                                       "UUIDs, so CUDA device %d cannot be "
                                       "matched to one of them: upgrade it, or "
                                       "run with the daemon's "
                                       "CUDA_VISIBLE_DEVICES",
                                       client->daemon_version, cuda_ordinal);
                        return GMD_ENOTSUP;
                }
        }
        sim = strcmp(client->backend, "sim") == 0;
        r = sim ? sim_uuid_of(client, cuda_ordinal, uuid, sizeof(uuid)) :
                  cuda_uuid_of(cuda_ordinal, uuid, sizeof(uuid));
        if (r < 0)
                return r;
        for (unsigned d = 0; d < client->n_devices; d++) {
                if (strcasecmp(client->ids[d].uuid, uuid) == 0) {
                        *ret_device = d;
                        return 0;
                }
        }
        gmd__error_set("CUDA device %d of this process is %s, which gpu-memd "
                       "does not manage (its devices: %s): run on one of "
                       "those (CUDA_VISIBLE_DEVICES naming it), or start "
                       "gpu-memd with this GPU visible", cuda_ordinal, uuid,
                       devices_text(client, known, sizeof(known)));
        return -ENODEV;
}

static int device_text(const gmd_client *client, unsigned device,
                       const char *text, char *buf, size_t len)
{
        size_t n;

        if (!client || !buf || device >= client->n_devices) {
                gmd__error_set("no device %u (gpu-memd has %u)", device,
                               client ? client->n_devices : 0);
                return -EINVAL;
        }
        if (!text[0]) {
                gmd__error_set("gpu-memd %s does not say its devices' "
                               "UUIDs and PCI bus ids",
                               client->daemon_version);
                return GMD_ENOTSUP;
        }
        n = strlen(text);
        if (n >= len) {
                gmd__error_set("%zu bytes do not hold device %u's %s", len,
                               device, text);
                return -ERANGE;
        }
        memcpy(buf, text, n + 1);
        return 0;
}

/** The daemon's `device`'s UUID. */
int gmd_device_uuid(const gmd_client *client, unsigned device, char *buf,
                    size_t len)
{
        const char *t = client && device < client->n_devices ?
                        client->ids[device].uuid : "";

        return device_text(client, device, t, buf, len);
}

/** The daemon's `device`'s PCI bus id. */
int gmd_device_pci_bus_id(const gmd_client *client, unsigned device,
                          char *buf, size_t len)
{
        const char *t = client && device < client->n_devices ?
                        client->ids[device].pci_bus_id : "";

        return device_text(client, device, t, buf, len);
}

void gmd__client_reach(const gmd_client *client, uint64_t *maps)
{
        const gmd_mapper *mapper = client->mapper;
        unsigned list[64], n;
        uint64_t seen = 0;

        for (unsigned d = 0; d < client->n_devices; d++)
                maps[d] = 0;
        if (strcmp(client->backend, "sim") != 0) {
                for (unsigned d = 0; d < client->n_devices && d < 64; d++)
                        maps[d] = mapper && mapper->ops->reach ?
                                  mapper->ops->reach((gmd_mapper *)mapper, d) :
                                  1ull << d;
                return;
        }
        /* sim: no driver says it, and sim memory maps anywhere; what this
         * process would see on GPUs, each of them reaching the others. */
        n = gmd__visible_devices(getenv("CUDA_VISIBLE_DEVICES"), client->ids,
                                 client->n_devices, list, 64);
        for (unsigned i = 0; i < n; i++)
                if (list[i] < 64)
                        seen |= 1ull << list[i];
        for (unsigned i = 0; i < n; i++)
                if (list[i] < 64)
                        maps[list[i]] = seen;
}
