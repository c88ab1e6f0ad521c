/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Detection: this machine written as an NCCL <system> tree, then read by the same loader
 * as a topology file, so that detected and loaded topologies follow one set of rules.
 *
 *  - <cpu>: one per hwloc NUMA node, with its CPU set, and NCCL's CPU identification
 *    (architecture, and on x86 the CPUID vendor, family and model as NCCL computes them).
 *  - <pci>: each GPU and NIC with the switches above it. hwloc gives the PCI tree; as in
 *    NCCL, a device's parent is the bridge two levels up (a switch's upstream port: the
 *    level between is the downstream port or root port), and a device whose chain ends at
 *    a host bridge hangs from the <cpu> of its NUMA node. Class, ids and link speed and
 *    width come from sysfs, as NCCL reads them (the slower of the device and its port).
 *    Siblings are kept in bus id order, as NCCL keeps them.
 *  - <nic>/<net>: the NICs the caller gives (a net plugin's devices), under the PCI
 *    function their sysfs path names, or under the first <cpu> when there is none.
 *  - <gpu>: from NVML when it loads (topo_nvml.c).
 *
 * Runs once per process (br_topo_system_get), single-threaded.
 */
#include <ctype.h>
#include <errno.h>
#include <hwloc.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "topo_int.h"
#include "util.h"

typedef struct {
    hwloc_topology_t hw;
    br_xml_t *system;
} detect_t;

/* A sysfs attribute of PCI device busid ("" when absent), newline removed. */
static void sysfs_read(const char *busid, const char *file, char *buf, size_t len)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/%s", busid, file);
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return;
    }
    if (fgets(buf, (int)len, f) == NULL) {
        buf[0] = '\0';
    }
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

/* Is s (up to a '/' or the end) a bus id "dddd:bb:dd.f"? NCCL's checkBDFFormat. */
static int is_bdf(const char *s)
{
    static const char pattern[] = "xxxx:xx:xx.x";
    for (int i = 0; i < 12; i++) {
        if (pattern[i] == 'x' ? !isxdigit((unsigned char)s[i]) : s[i] != pattern[i]) {
            return 0;
        }
    }
    return s[12] == '\0' || s[12] == '/';
}

static void cpu_ident(br_xml_t *cpu)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    char vendor[13];
    br_topo_xml_set(cpu, "arch", "x86_64");
    if (__get_cpuid(0, &a, &b, &c, &d)) {
        memcpy(vendor, &b, 4);
        memcpy(vendor + 4, &d, 4);
        memcpy(vendor + 8, &c, 4);
        vendor[12] = '\0';
        br_topo_xml_set(cpu, "vendor", "%s", vendor);
    }
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        /* NCCL's arithmetic: base family plus extended family shifted by 4 (not the
         * architectural sum), and likewise for the model. */
        unsigned family = ((a >> 8) & 0xf) + (((a >> 20) & 0xff) << 4);
        unsigned model = ((a >> 4) & 0xf) + (((a >> 16) & 0xf) << 4);
        br_topo_xml_set(cpu, "familyid", "%u", family);
        br_topo_xml_set(cpu, "modelid", "%u", model);
    }
#elif defined(__aarch64__)
    br_topo_xml_set(cpu, "arch", "arm64");
#elif defined(__PPC__)
    br_topo_xml_set(cpu, "arch", "ppc64");
#else
    br_topo_xml_set(cpu, "arch", "unknown");
#endif
}

static ncclResult_t add_cpus(detect_t *d)
{
    char buf[1024];
    int n = hwloc_get_nbobjs_by_type(d->hw, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < (n > 0 ? n : 1); i++) {
        hwloc_obj_t numa = n > 0 ? hwloc_get_obj_by_type(d->hw, HWLOC_OBJ_NUMANODE, (unsigned)i)
                                 : hwloc_get_root_obj(d->hw);
        br_xml_t *cpu = br_topo_xml_new(d->system, "cpu");
        if (cpu == NULL) {
            return ncclSystemError;
        }
        BR_CHECK(br_topo_xml_set(cpu, "host_hash", "0x%llx", (unsigned long long)br_host_hash()));
        BR_CHECK(br_topo_xml_set(cpu, "numaid", "%u", n > 0 ? numa->os_index : 0));
        /* The CPU set in sysfs cpumap's format: 32-bit words, most significant first. */
        int last = hwloc_bitmap_last(numa->cpuset), words = last >= 0 ? last / 64 + 1 : 1;
        uint64_t *set = calloc((size_t)words, sizeof(*set));
        if (set == NULL) {
            BR_WARN(NCCL_ALLOC, "out of memory detecting the topology");
            return ncclSystemError;
        }
        unsigned c;
        hwloc_bitmap_foreach_begin(c, numa->cpuset)
        {
            set[c / 64] |= 1ull << (c % 64);
        }
        hwloc_bitmap_foreach_end();
        br_topo_cpuset_format(set, words, buf, sizeof(buf));
        free(set);
        BR_CHECK(br_topo_xml_set(cpu, "affinity", "%s", buf));
        cpu_ident(cpu);
    }
    return ncclSuccess;
}

/* The <cpu> of a NUMA node (the first one when unknown). */
static br_xml_t *cpu_elem(const detect_t *d, int numaid)
{
    for (br_xml_t *c = br_topo_xml_child(d->system, "cpu", NULL); c != NULL;
         c = br_topo_xml_child(d->system, "cpu", c)) {
        if (atoi(br_topo_xml_get(c, "numaid")) == numaid) {
            return c;
        }
    }
    return br_topo_xml_child(d->system, "cpu", NULL);
}

/* The <pci> with this bus id anywhere below e, or NULL. */
static br_xml_t *find_pci(br_xml_t *e, int64_t busnum)
{
    for (br_xml_t *k = e->kids; k != NULL; k = k->next) {
        const char *b = strcmp(k->name, "pci") == 0 ? br_topo_xml_get(k, "busid") : NULL;
        if (b != NULL && br_topo_busnum(b) == busnum) {
            return k;
        }
        br_xml_t *found = find_pci(k, busnum);
        if (found != NULL) {
            return found;
        }
    }
    return NULL;
}

/* Move e (the last child of its parent) to its place in bus id order. */
static void keep_sorted(br_xml_t *e)
{
    br_xml_t *p = e->parent, *prev = NULL;
    int64_t mine = br_topo_busnum(br_topo_xml_get(e, "busid"));
    br_topo_xml_unlink(e);
    e->parent = p;
    br_xml_t *k = p->kids;
    for (; k != NULL; prev = k, k = k->next) {
        const char *b = br_topo_xml_get(k, "busid");
        if (b != NULL && br_topo_busnum(b) > mine) {
            break;
        }
    }
    e->next = k;
    if (prev != NULL) {
        prev->next = e;
    } else {
        p->kids = e;
    }
    if (k == NULL) {
        p->last_kid = e;
    }
}

/* NCCL's link attributes: the slower of the device's and its port's maximum. */
static void link_attrs(br_xml_t *e, const char *busid)
{
    char path[PATH_MAX], dev_speed[64], port_speed[64], dev_w[16], port_w[16], real[PATH_MAX];
    float ds = 1e30f, ps = 1e30f;
    sysfs_read(busid, "max_link_speed", dev_speed, sizeof(dev_speed));
    sysfs_read(busid, "max_link_width", dev_w, sizeof(dev_w));
    port_speed[0] = port_w[0] = '\0';
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s", busid);
    if (realpath(path, real) != NULL) {
        char *slash = strrchr(real, '/');
        if (slash != NULL) {
            *slash = '\0';
            const char *up = strrchr(real, '/');
            if (up != NULL && is_bdf(up + 1)) {
                sysfs_read(up + 1, "max_link_speed", port_speed, sizeof(port_speed));
                sysfs_read(up + 1, "max_link_width", port_w, sizeof(port_w));
            }
        }
    }
    sscanf(dev_speed, "%f GT/s", &ds);
    sscanf(port_speed, "%f GT/s", &ps);
    br_topo_xml_set(e, "link_speed", "%s", ps < ds ? port_speed : dev_speed);
    int dw = atoi(dev_w), pw = atoi(port_w);
    br_topo_xml_set(e, "link_width", "%d", dw < pw ? dw : pw);
}

static br_xml_t *place_obj(detect_t *d, hwloc_obj_t obj);

/* The element a PCI object hangs from: the switch two bridge levels up, or its CPU. */
static br_xml_t *parent_of(detect_t *d, hwloc_obj_t obj)
{
    hwloc_obj_t p1 = obj->parent;
    if (p1 != NULL && p1->type == HWLOC_OBJ_BRIDGE &&
        p1->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI) {
        hwloc_obj_t p2 = p1->parent;
        if (p2 != NULL && p2->type == HWLOC_OBJ_BRIDGE &&
            p2->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI) {
            return place_obj(d, p2);
        }
    }
    hwloc_obj_t host = hwloc_get_non_io_ancestor_obj(d->hw, obj);
    int numa = host != NULL && host->nodeset != NULL ? hwloc_bitmap_first(host->nodeset) : -1;
    return cpu_elem(d, numa);
}

/* The <pci> of a device, made with its parents as needed; obj may be NULL (a device hwloc
 * does not know: it hangs from the first CPU, as NCCL does without sysfs). */
static br_xml_t *place(detect_t *d, const char *busid, hwloc_obj_t obj)
{
    char buf[64];
    br_xml_t *e = find_pci(d->system, br_topo_busnum(busid));
    if (e != NULL) {
        return e;
    }
    br_xml_t *parent = obj != NULL ? parent_of(d, obj) : cpu_elem(d, -1);
    if (parent == NULL || (e = br_topo_xml_new(parent, "pci")) == NULL) {
        return NULL;
    }
    br_topo_xml_set(e, "busid", "%s", busid);
    sysfs_read(busid, "class", buf, sizeof(buf));
    if (buf[0] == '\0' && obj != NULL && obj->type == HWLOC_OBJ_PCI_DEVICE) {
        snprintf(buf, sizeof(buf), "0x%04x00", obj->attr->pcidev.class_id);
    }
    br_topo_xml_set(e, "class", "%s", buf);
    static const char *const ids[] = {"vendor", "device", "subsystem_vendor", "subsystem_device"};
    for (int k = 0; k < 4; k++) {
        sysfs_read(busid, ids[k], buf, sizeof(buf));
        if (buf[0] != '\0') {
            br_topo_xml_set(e, ids[k], "%s", buf);
        }
    }
    link_attrs(e, busid);
    keep_sorted(e);
    return e;
}

static br_xml_t *place_obj(detect_t *d, hwloc_obj_t obj)
{
    char busid[32];
    const struct hwloc_pcidev_attr_s *a =
        obj->type == HWLOC_OBJ_BRIDGE ? &obj->attr->bridge.upstream.pci : &obj->attr->pcidev;
    snprintf(busid, sizeof(busid), "%04x:%02x:%02x.%x", a->domain, a->bus, a->dev, a->func);
    return place(d, busid, obj);
}

/* For NVML's GPUs: the <pci> of a bus id. */
static br_xml_t *place_busid(void *ctx, const char *busid)
{
    detect_t *d = ctx;
    hwloc_obj_t obj = hwloc_get_pcidev_by_busidstring(d->hw, busid);
    return obj != NULL ? place_obj(d, obj) : place(d, busid, NULL);
}

static ncclResult_t add_nic(detect_t *d, const br_topo_nic_info_t *nic)
{
    char busid[16] = "";
    br_xml_t *parent = NULL, *xnic, *net;
    /* The PCI function is the last bus id in the path ("/sys/devices/pci0000:00/
     * 0000:00:03.0/virtio2" names 0000:00:03.0). NCCL attaches such paths to the first
     * CPU instead. */
    for (const char *s = nic->pci_path; s != NULL && *s != '\0'; s++) {
        if ((s == nic->pci_path || s[-1] == '/') && is_bdf(s)) {
            memcpy(busid, s, 12);
            busid[12] = '\0';
        }
    }
    parent = busid[0] != '\0' ? place_busid(d, busid) : cpu_elem(d, -1);
    if (parent == NULL) {
        return ncclSystemError;
    }
    if (busid[0] != '\0' && br_topo_xml_get(parent, "class")[0] == '\0') {
        BR_CHECK(br_topo_xml_set(parent, "class", "0x02")); /* as NCCL, when sysfs is silent */
    }
    xnic = br_topo_xml_child(parent, "nic", NULL);
    if (xnic == NULL && (xnic = br_topo_xml_new(parent, "nic")) == NULL) {
        return ncclSystemError;
    }
    if ((net = br_topo_xml_new(xnic, "net")) == NULL) {
        return ncclSystemError;
    }
    BR_CHECK(br_topo_xml_set(net, "name", "%s", nic->name != NULL ? nic->name : ""));
    BR_CHECK(br_topo_xml_set(net, "dev", "%d", nic->dev));
    BR_CHECK(br_topo_xml_set(net, "latency", "%d", nic->latency));
    BR_CHECK(br_topo_xml_set(net, "speed", "%d", nic->speed));
    BR_CHECK(br_topo_xml_set(net, "port", "%d", nic->port));
    BR_CHECK(br_topo_xml_set(net, "guid", "0x%llx", (unsigned long long)nic->guid));
    BR_CHECK(br_topo_xml_set(net, "maxconn", "%d", nic->max_comms));
    return br_topo_xml_set(net, "gdr", "%d", nic->gdr ? 1 : 0);
}

ncclResult_t br_topo_detect(const br_topo_nic_info_t *nics, int nnics, br_topo_t **topo_p)
{
    detect_t d = {0};
    ncclResult_t res = ncclSuccess;

    if (hwloc_topology_init(&d.hw) != 0) {
        BR_WARN(NCCL_GRAPH | NCCL_INIT, "hwloc_topology_init failed: %s", strerror(errno));
        return ncclSystemError;
    }
#if HWLOC_API_VERSION >= 0x00020100
    /* hwloc's Linux backend reads the PCI tree from sysfs by itself. Its libpciaccess
     * plugin ("pci") is slower and leaks on every load (LeakSanitizer), and the GPU
     * plugins would initialize CUDA, OpenCL or NVML behind the caller's back. */
    static const char *const skip[] = {"pci", "opencl", "cuda", "nvml", "rsmi", "levelzero", "gl"};
    for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++) {
        hwloc_topology_set_components(d.hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, skip[i]);
    }
#endif
    /* PCI devices and bridges, NUMA nodes and PUs are all detection needs: leaving out
     * caches, cores and OS devices makes loading a quarter faster. */
    hwloc_topology_set_io_types_filter(d.hw, HWLOC_TYPE_FILTER_KEEP_ALL);
    hwloc_topology_set_type_filter(d.hw, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_NONE);
    hwloc_topology_set_cache_types_filter(d.hw, HWLOC_TYPE_FILTER_KEEP_NONE);
    hwloc_topology_set_icache_types_filter(d.hw, HWLOC_TYPE_FILTER_KEEP_NONE);
    hwloc_topology_set_type_filter(d.hw, HWLOC_OBJ_CORE, HWLOC_TYPE_FILTER_KEEP_NONE);
    if (hwloc_topology_load(d.hw) != 0) {
        BR_WARN(NCCL_GRAPH | NCCL_INIT, "hwloc_topology_load failed: %s", strerror(errno));
        res = ncclSystemError;
        goto out;
    }
    if ((d.system = br_topo_xml_new(NULL, "system")) == NULL) {
        res = ncclSystemError;
        goto out;
    }
    BR_CHECK_GOTO(br_topo_xml_set(d.system, "version", "1"), res, out);
    BR_CHECK_GOTO(add_cpus(&d), res, out);
    for (int i = 0; i < nnics; i++) {
        BR_CHECK_GOTO(add_nic(&d, &nics[i]), res, out);
    }
    BR_CHECK_GOTO(br_topo_nvml_add_gpus(place_busid, &d), res, out);
    BR_CHECK_GOTO(br_topo_from_xml(d.system, "(detected)", topo_p), res, out);
out:
    br_topo_xml_free(d.system);
    hwloc_topology_destroy(d.hw);
    return res;
}
