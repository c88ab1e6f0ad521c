/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The graph written back in NCCL's schema (NCCL_TOPO_DUMP_FILE), laid out as NCCL lays
 * out its dumps: two spaces per level, attributes in NCCL's order, <cpu> elements in
 * order with their PCI trees below them. Every attribute the loader reads is written, so
 * loading a dump gives the same graph. Read-only on the graph; any thread.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "topo_int.h"
#include "util.h"

static void indent(FILE *f, int depth)
{
    for (int i = 0; i < depth; i++) {
        fputs("  ", f);
    }
}

static void put_int(FILE *f, const char *key, long long v)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%lld", v);
    br_topo_xml_put_attr(f, key, buf);
}

/* The <pci ...> opening tag of a PCI device (without its closing '>'). */
static void open_pci(FILE *f, const br_topo_node_t *node, int depth)
{
    const br_topo_pci_attr_t *a = &node->pci;
    indent(f, depth);
    fputs("<pci", f);
    br_topo_xml_put_attr(f, "busid", node->busid);
    br_topo_xml_put_attr(f, "class", a->cls);
    const char *keys[] = {"vendor", "device", "subsystem_vendor", "subsystem_device"};
    const char *vals[] = {a->vendor, a->device, a->subsys_vendor, a->subsys_device};
    for (int k = 0; k < 4; k++) {
        if (vals[k][0] != '\0') {
            br_topo_xml_put_attr(f, keys[k], vals[k]);
        }
    }
    br_topo_xml_put_attr(f, "link_speed", a->link_speed);
    br_topo_xml_put_attr(f, "link_width", a->link_width);
}

static void write_gpu(FILE *f, const br_topo_node_t *node, int depth)
{
    const br_topo_gpu_attr_t *g = &node->gpu;
    open_pci(f, node, depth);
    fputs(">\n", f);
    indent(f, depth + 1);
    fputs("<gpu", f);
    put_int(f, "dev", g->dev);
    put_int(f, "sm", g->sm);
    put_int(f, "rank", g->rank);
    put_int(f, "gdr", g->gdr);
    if (g->nnvlinks == 0 && g->c2c_count == 0) {
        fputs("/>\n", f);
    } else {
        fputs(">\n", f);
        for (int l = 0; l < g->nnvlinks; l++) {
            indent(f, depth + 2);
            fputs("<nvlink", f);
            br_topo_xml_put_attr(f, "target", g->nvlinks[l].target);
            put_int(f, "count", g->nvlinks[l].count);
            br_topo_xml_put_attr(f, "tclass", g->nvlinks[l].tclass);
            fputs("/>\n", f);
        }
        if (g->c2c_count > 0) {
            indent(f, depth + 2);
            fputs("<c2c", f);
            put_int(f, "bw", g->c2c_bw);
            put_int(f, "count", g->c2c_count);
            fputs("/>\n", f);
        }
        indent(f, depth + 1);
        fputs("</gpu>\n", f);
    }
    indent(f, depth);
    fputs("</pci>\n", f);
}

static void write_nets(FILE *f, const br_topo_t *topo, int nic, int depth)
{
    char buf[64];
    indent(f, depth);
    fputs("<nic>\n", f);
    for (int n = 0; n < topo->nnodes; n++) {
        const br_topo_node_t *node = &topo->nodes[n];
        if (node->type != BR_TOPO_NET || node->parent != nic) {
            continue;
        }
        const br_topo_net_attr_t *a = &node->net;
        indent(f, depth + 1);
        fputs("<net", f);
        br_topo_xml_put_attr(f, "name", a->name);
        put_int(f, "dev", a->dev);
        snprintf(buf, sizeof(buf), "%g", (double)a->latency);
        br_topo_xml_put_attr(f, "latency", buf);
        put_int(f, "speed", a->speed);
        put_int(f, "port", a->port);
        snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)a->guid);
        br_topo_xml_put_attr(f, "guid", buf);
        put_int(f, "maxconn", a->maxconn);
        put_int(f, "gdr", a->gdr);
        if (a->coll) {
            put_int(f, "coll", a->coll);
        }
        fputs("/>\n", f);
    }
    indent(f, depth);
    fputs("</nic>\n", f);
}

static void write_below(FILE *f, const br_topo_t *topo, int parent, int depth);

static void write_node(FILE *f, const br_topo_t *topo, int n, int depth)
{
    const br_topo_node_t *node = &topo->nodes[n];
    switch (node->type) {
    case BR_TOPO_GPU: write_gpu(f, node, depth); break;
    case BR_TOPO_NIC:
        if (node->busid[0] == '\0') {
            write_nets(f, topo, n, depth); /* a NIC without PCI device */
            break;
        }
        open_pci(f, node, depth);
        fputs(">\n", f);
        write_nets(f, topo, n, depth + 1);
        indent(f, depth);
        fputs("</pci>\n", f);
        break;
    case BR_TOPO_PCI:
        open_pci(f, node, depth);
        fputs(">\n", f);
        write_below(f, topo, n, depth + 1);
        for (int k = 0; k < node->npcilinks; k++) {
            indent(f, depth + 1);
            fputs("<pcilink", f);
            br_topo_xml_put_attr(f, "target", node->pcilinks[k]);
            fputs("/>\n", f);
        }
        indent(f, depth);
        fputs("</pci>\n", f);
        break;
    default: break;
    }
}

static void write_below(FILE *f, const br_topo_t *topo, int parent, int depth)
{
    for (int n = 0; n < topo->nnodes; n++) {
        if (topo->nodes[n].parent == parent && topo->nodes[n].type != BR_TOPO_NET) {
            write_node(f, topo, n, depth);
        }
    }
}

ncclResult_t br_topo_write(const br_topo_t *topo, FILE *f)
{
    char buf[1024];
    fputs("<system version=\"1\">\n", f);
    for (int c = 0; c < topo->count[BR_TOPO_CPU]; c++) {
        int n = topo->by_type[BR_TOPO_CPU][c];
        const br_topo_cpu_attr_t *a = &topo->nodes[n].cpu;
        fputs("  <cpu", f);
        if (topo->host_hash[0] != '\0') {
            br_topo_xml_put_attr(f, "host_hash", topo->host_hash);
        }
        put_int(f, "numaid", a->numaid);
        if (a->words > 0) {
            br_topo_cpuset_format(a->set, a->words, buf, sizeof(buf));
            br_topo_xml_put_attr(f, "affinity", buf);
        }
        br_topo_xml_put_attr(f, "arch", a->arch);
        if (a->vendor[0] != '\0') {
            br_topo_xml_put_attr(f, "vendor", a->vendor);
        }
        if (a->familyid >= 0) {
            put_int(f, "familyid", a->familyid);
        }
        if (a->modelid >= 0) {
            put_int(f, "modelid", a->modelid);
        }
        fputs(">\n", f);
        write_below(f, topo, n, 2);
        fputs("  </cpu>\n", f);
    }
    fputs("</system>\n", f);
    if (ferror(f)) {
        BR_WARN(NCCL_GRAPH, "writing the topology failed: %s", strerror(errno));
        return ncclSystemError;
    }
    return ncclSuccess;
}

ncclResult_t br_topo_dump(const br_topo_t *topo, const char *path)
{
    FILE *f = fopen(path, "w");
    ncclResult_t res;
    if (f == NULL) {
        BR_WARN(NCCL_GRAPH, "cannot write topology file %s: %s", path, strerror(errno));
        return ncclSystemError;
    }
    res = br_topo_write(topo, f);
    if (fclose(f) != 0 && res == ncclSuccess) {
        BR_WARN(NCCL_GRAPH, "cannot write topology file %s: %s", path, strerror(errno));
        res = ncclSystemError;
    }
    return res;
}
