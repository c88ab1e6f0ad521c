/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A fake NVML for check_topo (loaded through BRAID_NVML_LIBRARY): the entry points
 * topology detection calls, with NVML's signatures, describing GPUs that test_nvml_set
 * configures: ngpus GPUs (sm 90) at bus 0000:e1:00.0, 0000:e2:00.0, ..., and on every GPU
 * `links` active NVLinks to the next GPU's bus id (a device sysfs does not know, so
 * detection takes it for an NVSwitch, as NCCL does). Starts with no GPU.
 */
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} fake_pci_t;

static int ngpus, nlinks;
static int handles[8];

EXPORT void test_nvml_set(int gpus, int links);
EXPORT int nvmlInit_v2(void);
EXPORT int nvmlShutdown(void);
EXPORT int nvmlDeviceGetCount_v2(unsigned *count);
EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **dev);
EXPORT int nvmlDeviceGetPciInfo_v3(void *dev, fake_pci_t *pci);
EXPORT int nvmlDeviceGetCudaComputeCapability(void *dev, int *major, int *minor);
EXPORT int nvmlDeviceGetNvLinkCapability(void *dev, unsigned link, int cap, unsigned *result);
EXPORT int nvmlDeviceGetNvLinkState(void *dev, unsigned link, int *active);
EXPORT int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *dev, unsigned link, fake_pci_t *pci);

void test_nvml_set(int gpus, int links)
{
    ngpus = gpus < 8 ? gpus : 8;
    nlinks = links;
}

int nvmlInit_v2(void)
{
    return 0;
}

int nvmlShutdown(void)
{
    return 0;
}

int nvmlDeviceGetCount_v2(unsigned *count)
{
    *count = (unsigned)ngpus;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **dev)
{
    if (index >= (unsigned)ngpus) {
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    }
    handles[index] = (int)index;
    *dev = &handles[index];
    return 0;
}

static void fill(fake_pci_t *pci, int g)
{
    memset(pci, 0, sizeof(*pci));
    pci->bus = 0xe1 + (unsigned)g;
    pci->pci_device_id = 0x233010de;
}

int nvmlDeviceGetPciInfo_v3(void *dev, fake_pci_t *pci)
{
    fill(pci, *(int *)dev);
    return 0;
}

int nvmlDeviceGetCudaComputeCapability(void *dev, int *major, int *minor)
{
    (void)dev;
    *major = 9;
    *minor = 0;
    return 0;
}

int nvmlDeviceGetNvLinkCapability(void *dev, unsigned link, int cap, unsigned *result)
{
    (void)dev;
    (void)cap;
    *result = link < (unsigned)nlinks;
    return 0;
}

int nvmlDeviceGetNvLinkState(void *dev, unsigned link, int *active)
{
    (void)dev;
    *active = link < (unsigned)nlinks;
    return 0;
}

int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *dev, unsigned link, fake_pci_t *pci)
{
    (void)link;
    fill(pci, (*(int *)dev + 1) % ngpus);
    return 0;
}
