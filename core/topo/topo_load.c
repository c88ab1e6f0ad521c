/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL's topology schema, read into the graph (the rules of NCCL's src/graph/topo.c
 * ncclTopoGetSystemFromXml):
 *
 *   <system version="1">
 *     <cpu numaid affinity arch vendor familyid modelid [host_hash]>
 *       <pci busid class vendor device subsystem_vendor subsystem_device link_speed link_width>
 *         <pci ...> (a switch: children again)    <pcilink target/>
 *         <gpu dev sm rank gdr> <nvlink target count tclass/> <c2c bw count/> </gpu>
 *         <nic> <net name dev speed port latency guid maxconn gdr [coll]/> </nic>
 *       </pci>
 *       <nic> (a NIC without PCI device) </nic>
 *     </cpu>
 *   </system>
 *
 * A <pci> holding a <gpu> is a GPU, one holding a <nic> a NIC (several <pci> with the same
 * busid make one NIC with several ports), one of bridge or unknown class a switch; other
 * devices are left out. A <gpu> without rank and a <net> without dev are left out, as
 * NCCL does. Unknown elements and attributes are ignored (NCCL adds some with every
 * release); a missing required attribute or a value that is not a number is an error
 * naming the file and line. NVLinks, C2C links and pcilinks are added once every device
 * exists; Broadcom Gen4/Gen5 switches that show as two levels are flattened first, and
 * every pair of CPUs is linked with the bandwidth of its interconnect.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo_int.h"
#include "util.h"

typedef struct {
    const char *file;
    br_topo_t *topo;
    const br_xml_t **gpu_xml; /* the <gpu> of each GPU node, by GPU index */
    int gpu_cap;
} load_t;

static ncclResult_t bad(const load_t *ld, const br_xml_t *e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ncclResult_t bad(const load_t *ld, const br_xml_t *e, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    BR_WARN(NCCL_GRAPH | NCCL_INIT, "%s:%d: <%s>: %s", ld->file, e->line, e->name, what);
    return ncclInvalidUsage;
}

static ncclResult_t attr_str(const load_t *ld, const br_xml_t *e, const char *key, const char **v_p)
{
    if ((*v_p = br_topo_xml_get(e, key)) == NULL) {
        return bad(ld, e, "attribute %s is missing", key);
    }
    return ncclSuccess;
}

/* An integer attribute (decimal, or hex with 0x): def when absent and not required. An
 * empty value reads as 0 where NCCL writes one for "unknown" (link_width). */
static ncclResult_t attr_int(const load_t *ld, const br_xml_t *e, const char *key, int required,
                             int def, int *v_p)
{
    const char *s = br_topo_xml_get(e, key);
    char *stop;
    if (s == NULL) {
        if (required) {
            return bad(ld, e, "attribute %s is missing", key);
        }
        *v_p = def;
        return ncclSuccess;
    }
    if (s[0] == '\0') {
        *v_p = 0; /* NCCL writes link_width="" when sysfs has no value; strtol reads 0 */
        return ncclSuccess;
    }
    long long v = strtoll(s, &stop, 0);
    if (stop == s || *stop != '\0' || v < -2147483648LL || v > 2147483647LL) {
        return bad(ld, e, "attribute %s=\"%s\" is not an integer", key, s);
    }
    *v_p = (int)v;
    return ncclSuccess;
}

static ncclResult_t attr_float(const load_t *ld, const br_xml_t *e, const char *key, float *v_p)
{
    const char *s = br_topo_xml_get(e, key);
    char *stop;
    *v_p = 0;
    if (s != NULL) {
        *v_p = strtof(s, &stop);
        if (stop == s || *stop != '\0') {
            return bad(ld, e, "attribute %s=\"%s\" is not a number", key, s);
        }
    }
    return ncclSuccess;
}

static void copy_attr(const br_xml_t *e, const char *key, char *dst)
{
    const char *s = br_topo_xml_get(e, key);
    snprintf(dst, BR_TOPO_STR, "%s", s != NULL ? s : "");
}

/* What a <pci> class makes (NCCL's kvDictPciClass: prefixes, in order). */
static br_topo_type_t class_type(const char *cls)
{
    static const struct {
        const char *prefix;
        br_topo_type_t type;
    } dict[] = {{"0x060400", BR_TOPO_PCI}, {"0x080100", BR_TOPO_PCI}, {"0x068000", BR_TOPO_NVS},
                {"0x068001", BR_TOPO_CPU}, {"0x03", BR_TOPO_GPU},     {"0x02", BR_TOPO_NIC}};
    for (size_t i = 0; i < sizeof(dict) / sizeof(dict[0]); i++) {
        if (strncmp(cls, dict[i].prefix, strlen(dict[i].prefix)) == 0) {
            return dict[i].type;
        }
    }
    return BR_TOPO_PCI;
}

float br_topo_nvlink_bw(int sm)
{
    return sm >= 100  ? 40.1f
           : sm >= 90 ? 20.6f
           : sm == 86 ? 12.0f
           : sm >= 80 ? 20.0f
           : sm >= 70 ? 20.0f
           : sm >= 60 ? 18.0f
                      : 20.0f;
}

float br_topo_pci_bw(const char *link_speed, const char *link_width)
{
    /* Per-lane rate in 100 Mb/s for each transfer rate (NCCL's kvDictPciGen); an unknown
     * or empty speed counts as 8 GT/s, an unknown width as x16. NCCL matches the text
     * ("16.0 GT/s PCIe", "16 GT/s"); this reads the number, which agrees on every form the
     * kernel and NVML write. */
    static const struct {
        float gts;
        int rate;
    } gen[] = {{2.5f, 15}, {5.0f, 30}, {8.0f, 60}, {16.0f, 120}, {32.0f, 240}, {64.0f, 480}};
    int rate = 60, width = link_width != NULL ? atoi(link_width) : 0;
    float gts = 0;
    if (link_speed != NULL && sscanf(link_speed, "%f GT/s", &gts) == 1) {
        for (size_t i = 0; i < sizeof(gen) / sizeof(gen[0]); i++) {
            if (gts == gen[i].gts) {
                rate = gen[i].rate;
            }
        }
    }
    return (float)((width > 0 ? width : 16) * rate) / 80.0f;
}

/* The device a <pci> names, as NCCL packs it: vendor, device, subsystem ids. */
static uint64_t pci_device64(const br_xml_t *e)
{
    static const char *const keys[] = {"vendor", "device", "subsystem_vendor", "subsystem_device"};
    uint64_t v = 0;
    for (int k = 0; k < 4; k++) {
        const char *s = br_topo_xml_get(e, keys[k]);
        v |= (s != NULL ? (uint64_t)strtoul(s, NULL, 0) & 0xffff : 0) << (48 - 16 * k);
    }
    return v;
}

/* Broadcom PEX switches (Gen4 in base mode, Gen5) that show as a switch with sub-switches
 * of the same chip: NCCL's getBcmGen. */
static int bcm_gen(uint64_t id, int level)
{
    if ((id & 0xfffffffffffff000ull) == 0x1000c0101000a000ull) {
        return 4;
    }
    if ((id & 0xfffffffffffff000ull) == (0x1000c03010000000ull | (uint64_t)level * 0x1000)) {
        return 5;
    }
    return 0;
}

/* Merge such sub-switches into their parent, in the tree, before building: their
 * children move up (to the end of the parent's), the sub-switch goes. As in NCCL, one
 * level per switch: children that move up are not merged in turn. */
static void flatten_bcm(br_xml_t *e)
{
    int gen = strcmp(e->name, "pci") == 0 ? bcm_gen(pci_device64(e), 0) : 0;
    br_xml_t *moved = NULL, *moved_last = NULL;
    for (br_xml_t *k = e->kids; k != NULL && gen != 0;) {
        br_xml_t *next = k->next;
        if (strcmp(k->name, "pci") == 0 && bcm_gen(pci_device64(k), 1) == gen) {
            while (k->kids != NULL) {
                br_xml_t *g = k->kids;
                br_topo_xml_unlink(g);
                g->parent = e;
                if (moved_last != NULL) {
                    moved_last->next = g;
                } else {
                    moved = g;
                }
                moved_last = g;
            }
            br_topo_xml_unlink(k);
            br_topo_xml_free(k);
        }
        k = next;
    }
    if (moved != NULL) {
        if (e->last_kid != NULL) {
            e->last_kid->next = moved;
        } else {
            e->kids = moved;
        }
        e->last_kid = moved_last;
    }
    for (br_xml_t *k = e->kids; k != NULL; k = k->next) {
        flatten_bcm(k);
    }
}

/* Keep e as entry i of a growing array. */
static ncclResult_t remember(const br_xml_t ***arr, int *cap, int i, const br_xml_t *e)
{
    if (i >= *cap) {
        int c = *cap ? 2 * *cap : 16;
        const br_xml_t **a = realloc(*arr, (size_t)c * sizeof(*a));
        if (a == NULL) {
            BR_WARN(NCCL_ALLOC, "out of memory loading a topology");
            return ncclSystemError;
        }
        *arr = a;
        *cap = c;
    }
    (*arr)[i] = e;
    return ncclSuccess;
}

static ncclResult_t pci_attrs(const load_t *ld, const br_xml_t *e, br_topo_node_t *node)
{
    const char *busid, *s;
    BR_CHECK(attr_str(ld, e, "busid", &busid));
    BR_CHECK(attr_str(ld, e, "link_speed", &s));
    BR_CHECK(attr_str(ld, e, "link_width", &s));
    if (br_topo_busnum(busid) < 0) {
        return bad(ld, e, "busid=\"%s\" is not a PCI bus id (dddd:bb:dd.f)", busid);
    }
    int width;
    BR_CHECK(attr_int(ld, e, "link_width", 1, 0, &width));
    snprintf(node->busid, sizeof(node->busid), "%s", busid);
    node->busnum = br_topo_busnum(busid);
    copy_attr(e, "class", node->pci.cls);
    copy_attr(e, "vendor", node->pci.vendor);
    copy_attr(e, "device", node->pci.device);
    copy_attr(e, "subsystem_vendor", node->pci.subsys_vendor);
    copy_attr(e, "subsystem_device", node->pci.subsys_device);
    copy_attr(e, "link_speed", node->pci.link_speed);
    copy_attr(e, "link_width", node->pci.link_width);
    node->pci.bw = br_topo_pci_bw(node->pci.link_speed, node->pci.link_width);
    return ncclSuccess;
}

static ncclResult_t add_nets(load_t *ld, const br_xml_t *xnic, int nic)
{
    for (const br_xml_t *x = br_topo_xml_child(xnic, "net", NULL); x != NULL;
         x = br_topo_xml_child(xnic, "net", x)) {
        int dev = -1, is_net = 1, n;
        BR_CHECK(attr_int(ld, x, "dev", 0, -1, &dev));
        BR_CHECK(attr_int(ld, x, "net", 0, 1, &is_net));
        if (dev < 0 || !is_net) {
            continue; /* not a device of the net plugin (NCCL skips it too) */
        }
        for (int i = 0; i < ld->topo->nnodes; i++) {
            const br_topo_node_t *o = &ld->topo->nodes[i];
            if (o->type == BR_TOPO_NET && o->net.dev == dev) {
                return bad(ld, x, "dev=\"%d\" names a second network device", dev);
            }
        }
        BR_CHECK(br_topo_node_add(ld->topo, BR_TOPO_NET, nic, &n));
        br_topo_net_attr_t *a = &ld->topo->nodes[n].net;
        const char *guid = br_topo_xml_get(x, "guid");
        snprintf(a->name, sizeof(a->name), "%s",
                 br_topo_xml_get(x, "name") ? br_topo_xml_get(x, "name") : "");
        a->dev = dev;
        BR_CHECK(attr_int(ld, x, "speed", 0, 0, &a->speed));
        BR_CHECK(attr_int(ld, x, "port", 0, 0, &a->port));
        BR_CHECK(attr_int(ld, x, "gdr", 0, 0, &a->gdr));
        BR_CHECK(attr_int(ld, x, "maxconn", 0, 64, &a->maxconn));
        BR_CHECK(attr_int(ld, x, "coll", 0, 0, &a->coll));
        BR_CHECK(attr_float(ld, x, "latency", &a->latency));
        a->latency_set = br_topo_xml_get(x, "latency") != NULL;
        a->guid = guid != NULL ? strtoull(guid, NULL, 16) : (uint64_t)dev;
        float bw = br_topo_net_bw(&ld->topo->nodes[n]);
        BR_CHECK(br_topo_connect(ld->topo, nic, n, BR_TOPO_LINK_NET, bw));
    }
    return ncclSuccess;
}

/* The NIC node of a <pci> (merged with an earlier one of the same busid), or the virtual
 * NIC of a CPU (busid NULL). */
static ncclResult_t add_nic(load_t *ld, const br_xml_t *xpci, const br_xml_t *xnic, int parent)
{
    br_topo_t *topo = ld->topo;
    const char *busid = NULL;
    int nic = -1;
    if (xpci != NULL) {
        BR_CHECK(attr_str(ld, xpci, "busid", &busid));
    }
    int64_t busnum = busid != NULL ? br_topo_busnum(busid) : -1;
    for (int i = 0; i < topo->nnodes && nic < 0; i++) {
        const br_topo_node_t *o = &topo->nodes[i];
        if (o->type == BR_TOPO_NIC && o->busnum == busnum && (busnum >= 0 || o->parent == parent)) {
            nic = i;
        }
    }
    if (nic < 0) {
        BR_CHECK(br_topo_node_add(topo, BR_TOPO_NIC, parent, &nic));
        if (xpci != NULL) {
            BR_CHECK(pci_attrs(ld, xpci, &topo->nodes[nic]));
            BR_CHECK(br_topo_connect(topo, nic, parent, BR_TOPO_LINK_PCI, topo->nodes[nic].pci.bw));
        } else {
            BR_CHECK(br_topo_connect(topo, nic, parent, BR_TOPO_LINK_PCI, BR_TOPO_LOC_BW));
        }
    }
    return add_nets(ld, xnic, nic);
}

static ncclResult_t add_gpu(load_t *ld, const br_xml_t *xpci, const br_xml_t *xgpu, int parent)
{
    int g;
    br_topo_t *topo = ld->topo;
    BR_CHECK(br_topo_node_add(topo, BR_TOPO_GPU, parent, &g));
    br_topo_node_t *node = &topo->nodes[g];
    BR_CHECK(pci_attrs(ld, xpci, node));
    BR_CHECK(attr_int(ld, xgpu, "rank", 1, 0, &node->gpu.rank));
    BR_CHECK(attr_int(ld, xgpu, "sm", 1, 0, &node->gpu.sm));
    BR_CHECK(attr_int(ld, xgpu, "dev", 1, 0, &node->gpu.dev));
    BR_CHECK(attr_int(ld, xgpu, "gdr", 1, 0, &node->gpu.gdr));
    for (int i = 0; i < topo->nnodes; i++) {
        if (i != g && topo->nodes[i].type == BR_TOPO_GPU && topo->nodes[i].busnum == node->busnum) {
            return bad(ld, xpci, "busid=\"%s\" names a second GPU", node->busid);
        }
    }
    BR_CHECK(remember(&ld->gpu_xml, &ld->gpu_cap, node->index, xgpu));
    return br_topo_connect(topo, g, parent, BR_TOPO_LINK_PCI, node->pci.bw);
}

static ncclResult_t add_pci(load_t *ld, const br_xml_t *e, int parent)
{
    const char *cls;
    const br_xml_t *xgpu = br_topo_xml_child(e, "gpu", NULL), *xnic;
    BR_CHECK(attr_str(ld, e, "class", &cls));
    if (xgpu != NULL) {
        if (br_topo_xml_get(xgpu, "rank") == NULL) {
            BR_INFO(NCCL_GRAPH, "%s:%d: <gpu> without rank left out, as NCCL does", ld->file,
                    xgpu->line);
            return ncclSuccess;
        }
        if (br_topo_xml_child(e, "gpu", xgpu) != NULL) {
            return bad(ld, e, "several <gpu> in one <pci> (GPU partitions) are not supported");
        }
        return add_gpu(ld, e, xgpu, parent);
    }
    if ((xnic = br_topo_xml_child(e, "nic", NULL)) != NULL) {
        for (; xnic != NULL; xnic = br_topo_xml_child(e, "nic", xnic)) {
            BR_CHECK(add_nic(ld, e, xnic, parent));
        }
        return ncclSuccess;
    }
    if (class_type(cls) != BR_TOPO_PCI) {
        return ncclSuccess; /* a GPU without <gpu>, an NVSwitch, ...: not part of the graph */
    }
    int sw;
    BR_CHECK(br_topo_node_add(ld->topo, BR_TOPO_PCI, parent, &sw));
    BR_CHECK(pci_attrs(ld, e, &ld->topo->nodes[sw]));
    BR_CHECK(br_topo_connect(ld->topo, sw, parent, BR_TOPO_LINK_PCI, ld->topo->nodes[sw].pci.bw));
    for (const br_xml_t *k = e->kids; k != NULL; k = k->next) {
        if (strcmp(k->name, "pci") == 0) {
            BR_CHECK(add_pci(ld, k, sw));
        } else if (strcmp(k->name, "pcilink") == 0) {
            const char *target;
            BR_CHECK(attr_str(ld, k, "target", &target));
            br_topo_node_t *node = &ld->topo->nodes[sw];
            char(*pl)[BR_TOPO_STR] =
                realloc(node->pcilinks, (size_t)(node->npcilinks + 1) * sizeof(*pl));
            if (pl == NULL) {
                BR_WARN(NCCL_ALLOC, "out of memory loading a topology");
                return ncclSystemError;
            }
            node->pcilinks = pl;
            snprintf(pl[node->npcilinks++], BR_TOPO_STR, "%s", target);
        } else {
            BR_INFO(NCCL_GRAPH, "%s:%d: <%s> inside <pci> ignored", ld->file, k->line, k->name);
        }
    }
    return ncclSuccess;
}

static int code_of(const char *s, const char *const *names, const int *codes, int n)
{
    for (int i = 0; s != NULL && i < n; i++) {
        if (strncmp(s, names[i], strlen(names[i])) == 0) {
            return codes[i];
        }
    }
    return 0;
}

static ncclResult_t cpu_attrs(const load_t *ld, const br_xml_t *e, br_topo_cpu_attr_t *c)
{
    static const char *const archs[] = {"x86_64", "arm64", "ppc64"};
    static const int arch_codes[] = {BR_TOPO_ARCH_X86, BR_TOPO_ARCH_ARM, BR_TOPO_ARCH_POWER};
    static const char *const vendors[] = {"GenuineIntel", "AuthenticAMD", "CentaurHauls",
                                          "  Shanghai  "};
    static const int vendor_codes[] = {BR_TOPO_VENDOR_INTEL, BR_TOPO_VENDOR_AMD,
                                       BR_TOPO_VENDOR_ZHAOXIN, BR_TOPO_VENDOR_ZHAOXIN};
    const char *arch, *affinity = br_topo_xml_get(e, "affinity");
    BR_CHECK(attr_int(ld, e, "numaid", 1, 0, &c->numaid));
    BR_CHECK(attr_str(ld, e, "arch", &arch));
    c->arch_id = code_of(arch, archs, arch_codes, 3);
    copy_attr(e, "arch", c->arch);
    copy_attr(e, "vendor", c->vendor);
    if (c->arch_id == BR_TOPO_ARCH_X86) {
        const char *vendor;
        BR_CHECK(attr_str(ld, e, "vendor", &vendor));
        c->vendor_id = code_of(vendor, vendors, vendor_codes, 4);
    }
    int need = c->vendor_id == BR_TOPO_VENDOR_INTEL || c->vendor_id == BR_TOPO_VENDOR_ZHAOXIN;
    BR_CHECK(attr_int(ld, e, "familyid", need, -1, &c->familyid));
    BR_CHECK(attr_int(ld, e, "modelid", need, -1, &c->modelid));
    if (c->vendor_id == BR_TOPO_VENDOR_INTEL) {
        c->model_id = c->familyid == 6 && c->modelid >= 0xCF   ? BR_TOPO_MODEL_INTEL_ERP
                      : c->familyid == 6 && c->modelid >= 0x8F ? BR_TOPO_MODEL_INTEL_SRP
                      : c->familyid == 6 && c->modelid >= 0x55 ? BR_TOPO_MODEL_INTEL_SKL
                                                               : BR_TOPO_MODEL_INTEL_BDW;
    } else if (c->vendor_id == BR_TOPO_VENDOR_ZHAOXIN && c->familyid == 7 && c->modelid == 0x5B) {
        c->model_id = BR_TOPO_MODEL_YONGFENG;
    }
    if (affinity != NULL && br_topo_cpuset_parse(affinity, &c->set, &c->words) != 0) {
        return bad(ld, e,
                   "affinity=\"%s\" is not a CPU mask (hex words of 32 bits separated by "
                   "commas, e.g. ffffffff,00000000)",
                   affinity);
    }
    return ncclSuccess;
}

static ncclResult_t add_cpu(load_t *ld, const br_xml_t *e)
{
    int c;
    br_topo_t *topo = ld->topo;
    BR_CHECK(br_topo_node_add(topo, BR_TOPO_CPU, -1, &c));
    BR_CHECK(cpu_attrs(ld, e, &topo->nodes[c].cpu));
    for (int i = 0; i < c; i++) {
        const br_topo_node_t *o = br_topo_node_at(topo, i);
        if (o->type == BR_TOPO_CPU && o->cpu.numaid == topo->nodes[c].cpu.numaid) {
            return bad(ld, e,
                       "numaid=\"%d\" appears twice (topologies of several hosts are not "
                       "supported)",
                       o->cpu.numaid);
        }
    }
    for (const br_xml_t *k = e->kids; k != NULL; k = k->next) {
        if (strcmp(k->name, "pci") == 0) {
            BR_CHECK(add_pci(ld, k, c));
        } else if (strcmp(k->name, "nic") == 0) {
            BR_CHECK(add_nic(ld, NULL, k, c));
        } else {
            BR_INFO(NCCL_GRAPH, "%s:%d: <%s> inside <cpu> ignored", ld->file, k->line, k->name);
        }
    }
    return ncclSuccess;
}

/* The CPU above node n in the tree. */
static int cpu_above(const br_topo_t *topo, int n)
{
    while (n >= 0 && topo->nodes[n].type != BR_TOPO_CPU) {
        n = topo->nodes[n].parent;
    }
    return n;
}

static ncclResult_t add_gpu_links(load_t *ld, int g)
{
    br_topo_t *topo = ld->topo;
    const br_xml_t *xgpu = ld->gpu_xml[topo->nodes[g].index];
    float per_link = br_topo_nvlink_bw(topo->nodes[g].gpu.sm);
    for (const br_xml_t *x = xgpu->kids; x != NULL; x = x->next) {
        int count = 0, nvs = -1;
        const char *tclass, *target = br_topo_xml_get(x, "target");
        if (strcmp(x->name, "c2c") == 0) {
            int bw = 0, cpu = cpu_above(topo, g);
            BR_CHECK(attr_int(ld, x, "count", 1, 0, &count));
            BR_CHECK(attr_int(ld, x, "bw", 1, 0, &bw));
            topo->nodes[g].gpu.c2c_bw = bw;
            topo->nodes[g].gpu.c2c_count = count;
            if (cpu >= 0) {
                BR_CHECK(br_topo_connect(topo, g, cpu, BR_TOPO_LINK_C2C,
                                         (float)bw * (float)count / 1000.0f));
            }
            continue;
        }
        if (strcmp(x->name, "nvlink") != 0) {
            BR_INFO(NCCL_GRAPH, "%s:%d: <%s> inside <gpu> ignored", ld->file, x->line, x->name);
            continue;
        }
        BR_CHECK(attr_int(ld, x, "count", 1, 0, &count));
        BR_CHECK(attr_str(ld, x, "tclass", &tclass));
        br_topo_type_t t = class_type(tclass);
        br_topo_node_t *node = &topo->nodes[g];
        br_topo_nvlink_t *nl =
            realloc(node->gpu.nvlinks, (size_t)(node->gpu.nnvlinks + 1) * sizeof(*nl));
        if (nl == NULL) {
            BR_WARN(NCCL_ALLOC, "out of memory loading a topology");
            return ncclSystemError;
        }
        node->gpu.nvlinks = nl;
        nl += node->gpu.nnvlinks++;
        snprintf(nl->target, sizeof(nl->target), "%s", target != NULL ? target : "");
        snprintf(nl->tclass, sizeof(nl->tclass), "%s", tclass);
        nl->count = count;
        float bw = (float)count * per_link;
        if (t == BR_TOPO_GPU) {
            if (target == NULL) {
                return bad(ld, x, "attribute target is missing");
            }
            int peer = br_topo_find_gpu(topo, target);
            if (peer >= 0) { /* a GPU not in the file: no link, as in NCCL */
                BR_CHECK(br_topo_link_add(topo, g, topo->by_type[BR_TOPO_GPU][peer],
                                          BR_TOPO_LINK_NVL, bw));
            }
        } else if (t == BR_TOPO_CPU) {
            int cpu = cpu_above(topo, g);
            if (cpu >= 0) {
                BR_CHECK(br_topo_connect(topo, g, cpu, BR_TOPO_LINK_NVL, bw));
            }
        } else {
            /* NVSwitches (and any other class, as NCCL reads it) are one fabric node. */
            for (int i = 0; i < topo->nnodes && nvs < 0; i++) {
                nvs = topo->nodes[i].type == BR_TOPO_NVS ? i : -1;
            }
            if (nvs < 0) {
                BR_CHECK(br_topo_node_add(topo, BR_TOPO_NVS, -1, &nvs));
            }
            BR_CHECK(br_topo_connect(topo, g, nvs, BR_TOPO_LINK_NVL, bw));
        }
    }
    return ncclSuccess;
}

/* Links that need every device in place: NVLinks, C2C, pcilinks; then the CPU mesh. */
/* Every NVLink from a GPU to a GPU must come back: NCCL's path search fails otherwise. */
static ncclResult_t check_nvlinks_back(load_t *ld)
{
    br_topo_t *topo = ld->topo;
    for (int g = 0; g < topo->count[BR_TOPO_GPU]; g++) {
        int n = topo->by_type[BR_TOPO_GPU][g];
        for (const br_xml_t *x = br_topo_xml_child(ld->gpu_xml[g], "nvlink", NULL); x != NULL;
             x = br_topo_xml_child(ld->gpu_xml[g], "nvlink", x)) {
            const char *target = br_topo_xml_get(x, "target");
            int peer = class_type(br_topo_xml_get(x, "tclass")) == BR_TOPO_GPU
                           ? br_topo_find_gpu(topo, target)
                           : -1;
            if (peer < 0) {
                continue;
            }
            const br_topo_node_t *p = &topo->nodes[topo->by_type[BR_TOPO_GPU][peer]];
            int back = 0;
            for (int l = 0; l < p->nlinks; l++) {
                back |= p->links[l].peer == n && p->links[l].type == BR_TOPO_LINK_NVL;
            }
            if (!back) {
                return bad(ld, x, "GPU %s has NVLinks to GPU %s, which lists none back",
                           topo->nodes[n].busid, p->busid);
            }
        }
    }
    return ncclSuccess;
}

static ncclResult_t add_second_pass(load_t *ld)
{
    br_topo_t *topo = ld->topo;
    int nnodes = topo->nnodes; /* an NVS node may be added below */
    /* Indexes by type, for br_topo_find_gpu. */
    BR_CHECK(br_topo_index_build(topo));
    for (int n = 0; n < nnodes; n++) {
        if (topo->nodes[n].type == BR_TOPO_GPU) {
            BR_CHECK(add_gpu_links(ld, n));
        }
        for (int k = 0; k < topo->nodes[n].npcilinks; k++) {
            int64_t want = br_topo_busnum(topo->nodes[n].pcilinks[k]);
            for (int m = 0; m < topo->nnodes; m++) {
                if (topo->nodes[m].type == BR_TOPO_PCI && topo->nodes[m].busnum == want) {
                    BR_CHECK(br_topo_link_add(topo, n, m, BR_TOPO_LINK_LOC, BR_TOPO_LOC_BW));
                }
            }
        }
    }
    BR_CHECK(check_nvlinks_back(ld));
    for (int a = 0; a < topo->nnodes; a++) {
        const br_topo_cpu_attr_t *c = &topo->nodes[a].cpu;
        float bw = c->arch_id == BR_TOPO_ARCH_POWER ? 32.0f
                   : c->arch_id == BR_TOPO_ARCH_ARM ? 6.0f
                                                    : BR_TOPO_LOC_BW;
        if (c->arch_id == BR_TOPO_ARCH_X86 && c->vendor_id == BR_TOPO_VENDOR_INTEL) {
            bw = c->model_id == BR_TOPO_MODEL_INTEL_ERP   ? 40.0f
                 : c->model_id == BR_TOPO_MODEL_INTEL_SRP ? 22.0f
                 : c->model_id == BR_TOPO_MODEL_INTEL_SKL ? 10.0f
                                                          : 6.0f;
        } else if (c->arch_id == BR_TOPO_ARCH_X86 && c->vendor_id == BR_TOPO_VENDOR_AMD) {
            bw = 16.0f;
        } else if (c->arch_id == BR_TOPO_ARCH_X86 && c->vendor_id == BR_TOPO_VENDOR_ZHAOXIN) {
            bw = c->model_id == BR_TOPO_MODEL_YONGFENG ? 9.0f : 6.0f;
        }
        for (int b = 0; b < topo->nnodes && topo->nodes[a].type == BR_TOPO_CPU; b++) {
            if (b != a && topo->nodes[b].type == BR_TOPO_CPU) {
                BR_CHECK(br_topo_link_add(topo, a, b, BR_TOPO_LINK_SYS, bw));
            }
        }
    }
    return ncclSuccess;
}

ncclResult_t br_topo_from_xml(br_xml_t *root, const char *file, br_topo_t **topo_p)
{
    load_t ld = {.file = file};
    ncclResult_t res;
    int version = 0;

    if (strcmp(root->name, "system") != 0) {
        return bad(&ld, root, "the root element must be <system>");
    }
    BR_CHECK(attr_int(&ld, root, "version", 1, 0, &version));
    if (version != 1) {
        return bad(&ld, root, "version=\"%d\": only version 1 of NCCL's schema is known", version);
    }
    flatten_bcm(root);
    BR_CHECK(br_topo_alloc(&ld.topo));
    /* As NCCL does, the host is this one, whatever host_hash the file says. */
    snprintf(ld.topo->host_hash, sizeof(ld.topo->host_hash), "0x%llx",
             (unsigned long long)br_host_hash());
    for (const br_xml_t *k = root->kids; k != NULL; k = k->next) {
        if (strcmp(k->name, "cpu") == 0) {
            BR_CHECK_GOTO(add_cpu(&ld, k), res, fail);
        } else {
            BR_INFO(NCCL_GRAPH, "%s:%d: <%s> inside <system> ignored", file, k->line, k->name);
        }
    }
    BR_CHECK_GOTO(add_second_pass(&ld), res, fail);
    BR_CHECK_GOTO(br_topo_finish(ld.topo), res, fail);
    free(ld.gpu_xml);
    *topo_p = ld.topo;
    return ncclSuccess;
fail:
    free(ld.gpu_xml);
    br_topo_free(ld.topo);
    return res;
}

ncclResult_t br_topo_parse(const char *text, size_t len, const char *name, br_topo_t **topo_p)
{
    br_xml_t *root = NULL;
    BR_CHECK(br_topo_xml_parse(text, len, name, &root));
    ncclResult_t res = br_topo_from_xml(root, name, topo_p);
    br_topo_xml_free(root);
    return res;
}

ncclResult_t br_topo_load(const char *path, br_topo_t **topo_p)
{
    FILE *f = fopen(path, "r");
    char *text = NULL;
    size_t len = 0;
    ncclResult_t res;
    if (f == NULL) {
        BR_WARN(NCCL_GRAPH | NCCL_INIT, "cannot open topology file %s: %s", path, strerror(errno));
        return ncclInvalidUsage;
    }
    /* Read it whole; topology files are kilobytes, 64 MiB is a generous bound. */
    size_t cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 65536;
            char *t = cap <= (64u << 20) ? realloc(text, cap + 1) : NULL;
            if (t == NULL) {
                BR_WARN(NCCL_GRAPH | NCCL_INIT, "topology file %s: %s", path,
                        cap > (64u << 20) ? "larger than 64 MiB" : "out of memory");
                res = ncclInvalidUsage;
                goto out;
            }
            text = t;
        }
        size_t n = fread(text + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            break;
        }
    }
    if (ferror(f)) {
        BR_WARN(NCCL_GRAPH | NCCL_INIT, "cannot read topology file %s: %s", path, strerror(errno));
        res = ncclInvalidUsage;
        goto out;
    }
    res = br_topo_parse(text, len, path, topo_p);
out:
    free(text);
    fclose(f);
    return res;
}
