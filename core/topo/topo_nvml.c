/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPUs for detection, from NVML loaded with dlopen (BRAID_NVML_LIBRARY, else
 * libnvidia-ml.so.1): each GPU's bus id, compute capability and active NVLinks, counted
 * per remote device, with the remote's PCI class from sysfs (an NVSwitch when sysfs does
 * not know it, as NCCL assumes). No NVML, or no driver: no GPUs, and an INFO says so.
 * The few NVML types used are declared here with NVML's layout (nvml.h); the PCI info is
 * read through its numeric fields, so the size of its bus id strings does not matter.
 * Called once per process by detection; NVML is shut down and unloaded afterwards.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "topo_int.h"
#include "util.h"

typedef int nvml_ret_t; /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef void *nvml_dev_t;

typedef struct {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
    char spare[64]; /* room for fields a newer NVML may write */
} nvml_pci_t;

#define NVML_NVLINK_CAP_P2P_SUPPORTED 0
#define NVML_FEATURE_ENABLED 1
#define PCI_NVSWITCH_CLASS "0x068000"

typedef struct {
    void *lib;
    nvml_ret_t (*init)(void);
    nvml_ret_t (*shutdown)(void);
    nvml_ret_t (*count)(unsigned *);
    nvml_ret_t (*by_index)(unsigned, nvml_dev_t *);
    nvml_ret_t (*pci)(nvml_dev_t, nvml_pci_t *);
    nvml_ret_t (*cc)(nvml_dev_t, int *, int *);
    nvml_ret_t (*link_cap)(nvml_dev_t, unsigned, int, unsigned *);
    nvml_ret_t (*link_state)(nvml_dev_t, unsigned, int *);
    nvml_ret_t (*link_remote)(nvml_dev_t, unsigned, nvml_pci_t *);
} nvml_t;

static int nvml_open(nvml_t *n)
{
    const char *path = BR_PARAM_STR(NVML_LIBRARY);
    struct {
        void **fn;
        const char *sym;
    } syms[] = {
        {(void **)&n->init, "nvmlInit_v2"},
        {(void **)&n->shutdown, "nvmlShutdown"},
        {(void **)&n->count, "nvmlDeviceGetCount_v2"},
        {(void **)&n->by_index, "nvmlDeviceGetHandleByIndex_v2"},
        {(void **)&n->pci, "nvmlDeviceGetPciInfo_v3"},
        {(void **)&n->cc, "nvmlDeviceGetCudaComputeCapability"},
        {(void **)&n->link_cap, "nvmlDeviceGetNvLinkCapability"},
        {(void **)&n->link_state, "nvmlDeviceGetNvLinkState"},
        {(void **)&n->link_remote, "nvmlDeviceGetNvLinkRemotePciInfo_v2"},
    };
    memset(n, 0, sizeof(*n));
    if (path == NULL) {
        path = "libnvidia-ml.so.1";
    }
    if ((n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
        BR_INFO(NCCL_GRAPH | NCCL_INIT, "no NVML (%s): topology without GPUs", dlerror());
        return -1;
    }
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        /* POSIX: a function pointer may be stored through a void ** from dlsym. */
        *syms[i].fn = dlsym(n->lib, syms[i].sym);
        if (*syms[i].fn == NULL) {
            BR_INFO(NCCL_GRAPH | NCCL_INIT, "NVML %s has no %s: topology without GPUs", path,
                    syms[i].sym);
            dlclose(n->lib);
            return -1;
        }
    }
    nvml_ret_t r = n->init();
    if (r != 0) {
        BR_INFO(NCCL_GRAPH | NCCL_INIT,
                "nvmlInit_v2 failed (NVML error %d): topology without "
                "GPUs",
                r);
        dlclose(n->lib);
        return -1;
    }
    return 0;
}

static void busid_of(const nvml_pci_t *p, char *buf, size_t len)
{
    snprintf(buf, len, "%04x:%02x:%02x.0", p->domain & 0xffff, p->bus & 0xff, p->device & 0x1f);
}

/* GPU Direct RDMA needs the peer memory module (NCCL looks for it likewise). */
static int gdr_possible(void)
{
    return access("/sys/kernel/mm/memory_peers/nv_mem/version", F_OK) == 0 ||
           access("/sys/module/nvidia_peermem/version", F_OK) == 0 ||
           access("/sys/module/nv_peer_mem/version", F_OK) == 0;
}

/* The <nvlink> children of one GPU: active links, counted per remote device. */
static ncclResult_t add_nvlinks(const nvml_t *n, nvml_dev_t dev, int sm, br_xml_t *gpu)
{
    int max = sm < 60 ? 0 : sm < 70 ? 4 : sm < 80 ? 6 : sm < 90 ? 12 : 18; /* NCCL's bound */
    for (int l = 0; l < max; l++) {
        unsigned cap = 0;
        int active = 0;
        nvml_pci_t rem;
        char busid[32], path[64], cls[32] = "";
        if (n->link_cap(dev, (unsigned)l, NVML_NVLINK_CAP_P2P_SUPPORTED, &cap) != 0 || !cap ||
            n->link_state(dev, (unsigned)l, &active) != 0 || active != NVML_FEATURE_ENABLED) {
            continue;
        }
        memset(&rem, 0, sizeof(rem));
        if (n->link_remote(dev, (unsigned)l, &rem) != 0) {
            continue;
        }
        busid_of(&rem, busid, sizeof(busid));
        br_xml_t *x = NULL;
        for (br_xml_t *k = br_topo_xml_child(gpu, "nvlink", NULL); k != NULL && x == NULL;
             k = br_topo_xml_child(gpu, "nvlink", k)) {
            x = strcmp(br_topo_xml_get(k, "target"), busid) == 0 ? k : NULL;
        }
        if (x != NULL) {
            BR_CHECK(br_topo_xml_set(x, "count", "%d", atoi(br_topo_xml_get(x, "count")) + 1));
            continue;
        }
        if ((x = br_topo_xml_new(gpu, "nvlink")) == NULL) {
            return ncclSystemError;
        }
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/class", busid);
        FILE *f = fopen(path, "r");
        if (f == NULL || fgets(cls, sizeof(cls), f) == NULL) {
            snprintf(cls, sizeof(cls), "%s", PCI_NVSWITCH_CLASS);
        }
        if (f != NULL) {
            fclose(f);
        }
        cls[strcspn(cls, "\n")] = '\0';
        BR_CHECK(br_topo_xml_set(x, "target", "%s", busid));
        BR_CHECK(br_topo_xml_set(x, "count", "1"));
        BR_CHECK(br_topo_xml_set(x, "tclass", "%s", cls));
    }
    return ncclSuccess;
}

ncclResult_t br_topo_nvml_add_gpus(br_topo_place_fn_t place, void *ctx)
{
    nvml_t n;
    unsigned count = 0;
    ncclResult_t res = ncclSuccess;
    if (nvml_open(&n) != 0) {
        return ncclSuccess;
    }
    if (n.count(&count) != 0) {
        count = 0;
    }
    for (unsigned i = 0; i < count; i++) {
        nvml_dev_t dev;
        nvml_pci_t pci;
        int major = 0, minor = 0;
        char busid[32];
        memset(&pci, 0, sizeof(pci));
        if (n.by_index(i, &dev) != 0 || n.pci(dev, &pci) != 0 || n.cc(dev, &major, &minor) != 0) {
            BR_INFO(NCCL_GRAPH | NCCL_INIT, "NVML cannot describe GPU %u: left out", i);
            continue;
        }
        busid_of(&pci, busid, sizeof(busid));
        br_xml_t *xpci = place(ctx, busid), *gpu;
        if (xpci == NULL || (gpu = br_topo_xml_new(xpci, "gpu")) == NULL) {
            res = ncclSystemError;
            break;
        }
        if (br_topo_xml_get(xpci, "class")[0] == '\0') {
            BR_CHECK_GOTO(br_topo_xml_set(xpci, "class", "0x03"), res, out); /* as NCCL */
        }
        /* A process-wide topology has no ranks: GPU i counts as rank i. */
        BR_CHECK_GOTO(br_topo_xml_set(gpu, "dev", "%u", i), res, out);
        BR_CHECK_GOTO(br_topo_xml_set(gpu, "sm", "%d", major * 10 + minor), res, out);
        BR_CHECK_GOTO(br_topo_xml_set(gpu, "rank", "%u", i), res, out);
        BR_CHECK_GOTO(br_topo_xml_set(gpu, "gdr", "%d", gdr_possible()), res, out);
        BR_CHECK_GOTO(add_nvlinks(&n, dev, major * 10 + minor, gpu), res, out);
    }
out:
    n.shutdown();
    dlclose(n.lib);
    return res;
}
