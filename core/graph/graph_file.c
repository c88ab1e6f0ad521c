/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL_GRAPH_FILE: one node's graphs in NCCL's schema (src/graph/search.cc),
 *
 *   <graphs version="1">
 *     <graph id="0" pattern="4" crossnic="0" nchannels="2" speedintra="40" speedinter="40"
 *            latencyinter="0" typeintra="NVL" typeinter="PIX" samechannels="1">
 *       <channel><net dev="0"/><gpu dev="0"/><gpu dev="0x1"/>...<net dev="0"/></channel>
 *     </graph>
 *   </graphs>
 *
 * Devices are hexadecimal as NCCL reads them (strtol base 16: "0x1" and "1" are both 1).
 * The ring graph (id 0) is applied to every node: each search channel orders a node's
 * ranks by their GPU's <gpu dev>; ranks without a GPU are listed as <cpu dev> with their
 * position in the node (a Braid addition NCCL's reader skips). Other graphs are ignored.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_int.h"
#include "topo_xml.h"

static ncclResult_t file_read(const char *path, char **text_p, size_t *len_p)
{
    FILE *f = fopen(path, "r");
    char *text = NULL;
    size_t len = 0, cap = 0;
    if (f == NULL) {
        BR_WARN(NCCL_GRAPH | NCCL_INIT, "NCCL_GRAPH_FILE: cannot open %s: %s", path,
                strerror(errno));
        return ncclInvalidUsage;
    }
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 65536;
            char *t = cap <= (64u << 20) ? realloc(text, cap + 1) : NULL;
            if (t == NULL) {
                BR_WARN(NCCL_GRAPH | NCCL_INIT, "NCCL_GRAPH_FILE %s: %s", path,
                        cap > (64u << 20) ? "larger than 64 MiB" : "out of memory");
                free(text);
                fclose(f);
                return ncclInvalidUsage;
            }
            text = t;
        }
        size_t n = fread(text + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            break;
        }
    }
    fclose(f);
    *text_p = text;
    *len_p = len;
    return ncclSuccess;
}

/* A required attribute as a number (base 16 for devices, else 10 or 0x); -1 on error. */
static int attr_num(const char *path, const br_xml_t *e, const char *key, int base, double *v)
{
    const char *s = br_topo_xml_get(e, key);
    char *end = NULL;
    if (s == NULL) {
        BR_WARN(NCCL_GRAPH | NCCL_INIT, "%s:%d: <%s>: attribute %s is missing", path, e->line,
                e->name, key);
        return -1;
    }
    *v = base == 16 ? (double)strtol(s, &end, 16) : strtod(s, &end);
    if (end == s || *end != '\0') {
        BR_WARN(NCCL_GRAPH | NCCL_INIT, "%s:%d: <%s>: %s=\"%s\" is not a number", path, e->line,
                e->name, key, s);
        return -1;
    }
    return 0;
}

static int path_type(const char *s)
{
    for (int t = BR_TOPO_PATH_LOC; t <= BR_TOPO_PATH_DIS; t++) {
        if (strcmp(s, br_topo_path_str(t)) == 0) {
            return t;
        }
    }
    return -1;
}

/* The <graph> attributes. */
static ncclResult_t graph_attrs(const char *path, const br_xml_t *e, br_graph_file_t *f)
{
    double cross, nch, intra, inter;
    if (attr_num(path, e, "crossnic", 10, &cross) || attr_num(path, e, "nchannels", 10, &nch) ||
        attr_num(path, e, "speedintra", 10, &intra) ||
        attr_num(path, e, "speedinter", 10, &inter)) {
        return ncclInvalidUsage;
    }
    const char *ti = br_topo_xml_get(e, "typeintra"), *te = br_topo_xml_get(e, "typeinter");
    f->s.type_intra = ti != NULL ? path_type(ti) : -1;
    f->s.type_inter = te != NULL ? path_type(te) : -1;
    if (f->s.type_intra < 0 || f->s.type_inter < 0) {
        BR_WARN(NCCL_GRAPH | NCCL_INIT,
                "%s:%d: <graph>: typeintra and typeinter must be path "
                "types (LOC, NVL, NVB, PIX, PXB, PXN, PHB, SYS)",
                path, e->line);
        return ncclInvalidUsage;
    }
    f->s.cross_nic = (int)cross;
    f->s.bw_intra = (float)intra;
    f->s.bw_inter = (float)inter;
    f->s.nsearch = (int)nch;
    return ncclSuccess;
}

/* One <channel>: its devices and NICs. */
static ncclResult_t channel_read(const char *path, const br_xml_t *ch, int c, br_graph_file_t *f)
{
    int k = 0, nets = 0;
    f->net[2 * c] = f->net[2 * c + 1] = -1;
    for (const br_xml_t *e = ch->kids; e != NULL; e = e->next) {
        double dev;
        int is_gpu = strcmp(e->name, "gpu") == 0, is_cpu = strcmp(e->name, "cpu") == 0;
        if (!is_gpu && !is_cpu && strcmp(e->name, "net") != 0) {
            continue;
        }
        if (attr_num(path, e, "dev", 16, &dev)) {
            return ncclInvalidUsage;
        }
        if (!is_gpu && !is_cpu) {
            if (nets == 2) {
                BR_WARN(NCCL_GRAPH | NCCL_INIT, "%s:%d: a channel has at most two <net>", path,
                        e->line);
                return ncclInvalidUsage;
            }
            f->net[2 * c + nets++] = (int)dev;
            continue;
        }
        if (k == f->width) {
            BR_WARN(NCCL_GRAPH | NCCL_INIT,
                    "%s:%d: channel %d lists more devices than channel 0 "
                    "(%d)",
                    path, e->line, c, f->width);
            return ncclInvalidUsage;
        }
        f->dev[(size_t)c * (size_t)f->width + (size_t)k++] = is_gpu ? (int)dev : -1 - (int)dev;
    }
    if (nets == 1) {
        f->net[2 * c + 1] = f->net[2 * c];
    }
    if (k != f->width) {
        BR_WARN(NCCL_GRAPH | NCCL_INIT, "%s:%d: channel %d lists %d devices, channel 0 %d", path,
                ch->line, c, k, f->width);
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

static int count_devices(const br_xml_t *ch)
{
    int n = 0;
    for (const br_xml_t *e = ch->kids; e != NULL; e = e->next) {
        n += strcmp(e->name, "gpu") == 0 || strcmp(e->name, "cpu") == 0;
    }
    return n;
}

static ncclResult_t file_from_xml(const char *path, const br_xml_t *root, br_graph_file_t *f)
{
    const br_xml_t *ring = NULL;
    if (strcmp(root->name, "graphs") != 0) {
        BR_WARN(NCCL_GRAPH | NCCL_INIT, "%s:%d: the root element is <%s>, not <graphs>", path,
                root->line, root->name);
        return ncclInvalidUsage;
    }
    for (const br_xml_t *e = br_topo_xml_child(root, "graph", NULL); e != NULL && ring == NULL;
         e = br_topo_xml_child(root, "graph", e)) {
        const char *id = br_topo_xml_get(e, "id");
        ring = id != NULL && strtol(id, NULL, 10) == 0 ? e : NULL;
    }
    if (ring == NULL) {
        BR_WARN(NCCL_GRAPH | NCCL_INIT, "%s: no <graph id=\"0\"> (the ring graph)", path);
        return ncclInvalidUsage;
    }
    BR_CHECK(graph_attrs(path, ring, f));
    int nch = 0;
    for (const br_xml_t *c = br_topo_xml_child(ring, "channel", NULL); c != NULL;
         c = br_topo_xml_child(ring, "channel", c)) {
        f->width = nch == 0 ? count_devices(c) : f->width;
        nch++;
    }
    if (nch < 1 || nch > BR_MAX_CHANNELS || f->width < 1) {
        BR_WARN(NCCL_GRAPH | NCCL_INIT,
                "%s:%d: the ring graph has %d channels of %d devices (1 "
                "to %d channels, at least one device)",
                path, ring->line, nch, f->width, BR_MAX_CHANNELS);
        return ncclInvalidUsage;
    }
    /* NCCL counts the <channel> elements, whatever nchannels says. */
    f->s.nsearch = nch;
    BR_CHECK(br_calloc(&f->dev, (size_t)nch * (size_t)f->width, "graph file"));
    BR_CHECK(br_calloc(&f->net, (size_t)nch * 2, "graph file"));
    int c = 0;
    for (const br_xml_t *ch = br_topo_xml_child(ring, "channel", NULL); ch != NULL;
         ch = br_topo_xml_child(ring, "channel", ch), c++) {
        BR_CHECK(channel_read(path, ch, c, f));
    }
    return ncclSuccess;
}

ncclResult_t br_graph_file_load(const char *path, br_graph_file_t **file_p)
{
    char *text = NULL;
    size_t len = 0;
    br_xml_t *root = NULL;
    br_graph_file_t *f = NULL;
    ncclResult_t res;

    BR_CHECK(file_read(path, &text, &len));
    res = br_topo_xml_parse(text, len, path, &root);
    free(text);
    BR_CHECK(res);
    res = br_calloc(&f, 1, "graph file");
    if (res == ncclSuccess) {
        res = file_from_xml(path, root, f);
    }
    br_topo_xml_free(root);
    if (res != ncclSuccess) {
        br_graph_file_free(f);
        return res;
    }
    BR_INFO(NCCL_GRAPH | NCCL_INIT, "NCCL_GRAPH_FILE %s: %d channels of %d devices loaded", path,
            f->s.nsearch, f->width);
    *file_p = f;
    return ncclSuccess;
}

void br_graph_file_free(br_graph_file_t *f)
{
    if (f != NULL) {
        free(f->dev);
        free(f->net);
        free(f);
    }
}

ncclResult_t br_graph_file_chain(const br_graph_t *g, const br_graph_nodes_t *nodes,
                                 const br_graph_file_t *f, const char *path, int s, int node,
                                 int *out)
{
    const int *base = nodes->base + nodes->node_start[node];
    const int *want = f->dev + (size_t)s * (size_t)f->width;
    int size = g->node_size[node];
    if (size != f->width) {
        BR_WARN(NCCL_GRAPH | NCCL_INIT,
                "NCCL_GRAPH_FILE %s: node %d has %d ranks, the file's "
                "channels %d devices",
                path, node, size, f->width);
        return ncclInvalidUsage;
    }
    for (int k = 0; k < size; k++) {
        int found = -1;
        for (int i = 0; i < size && found < 0; i++) {
            const br_topo_place_t *p = &g->place[base[i]];
            int dev = p->gpu >= 0 ? p->gpu_dev : -1 - i;
            found = dev == want[k] ? base[i] : -1;
        }
        if (found < 0) {
            BR_WARN(NCCL_GRAPH | NCCL_INIT,
                    "NCCL_GRAPH_FILE %s: channel %d lists %s %d, which no "
                    "rank of node %d (first rank %d) has",
                    path, s, want[k] >= 0 ? "GPU dev" : "CPU",
                    want[k] >= 0 ? want[k] : -1 - want[k], node, base[0]);
            return ncclInvalidUsage;
        }
        for (int j = 0; j < k; j++) {
            if (out[j] == found) {
                BR_WARN(NCCL_GRAPH | NCCL_INIT,
                        "NCCL_GRAPH_FILE %s: channel %d lists a device "
                        "twice",
                        path, s);
                return ncclInvalidUsage;
            }
        }
        out[k] = found;
    }
    return ncclSuccess;
}
