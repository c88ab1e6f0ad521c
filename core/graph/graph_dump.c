/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The graph in words: NCCL's INFO transcript (on rank 0 "Pattern 4, crossNic 0, ..." per
 * graph with node 0's search channels, "Channel 00/02 : 0 1 2 3" for every ring; on every
 * rank "Trees [0] 1/-1/-1->0->-1 ...") and the NCCL_GRAPH_DUMP_FILE XML in NCCL's graph
 * schema (graph_file.c reads it back).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_int.h"
/* Append to a line; returns the new length (clamped to the buffer). */
static size_t append(char *buf, size_t len, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static size_t append(char *buf, size_t len, size_t at, const char *fmt, ...)
{
    va_list ap;
    if (at >= len) {
        return at;
    }
    va_start(ap, fmt);
    int n = vsnprintf(buf + at, len - at, fmt, ap);
    va_end(ap);
    return n < 0 ? at : (at + (size_t)n < len ? at + (size_t)n : len);
}

#define BR_GRAPH_LINE 900 /* characters of one log line before it is split */

/* One device of a search channel: "GPU/<rank>" or, without a GPU, "CPU/<rank>". */
static size_t put_rank(const br_graph_t *g, char *line, size_t len, size_t at, int r)
{
    return append(line, len, at, " %s/%d", g->place[r].gpu >= 0 ? "GPU" : "CPU", r);
}

/* "Pattern ..." for the ring and tree graphs, then node 0's search channels. */
static void log_patterns(const br_graph_t *g)
{
    static const int patterns[2] = {BR_GRAPH_PATTERN_RING, BR_GRAPH_PATTERN_BALANCED_TREE};
    char line[1024];
    int *order = NULL;
    if (br_calloc(&order, (size_t)g->node_size[0], "graph log") != ncclSuccess) {
        return;
    }
    for (int k = 0; k < 2; k++) {
        BR_INFO(NCCL_GRAPH,
                "Pattern %d, crossNic %d, nChannels %d, bw %f/%f, type %s/%s, "
                "sameChannels %d",
                patterns[k], g->cross_nic, g->nsearch, (double)g->bw_intra, (double)g->bw_inter,
                br_topo_path_str(g->type_intra), br_topo_path_str(g->type_inter),
                g->nsearch > 1 ? 0 : 1);
        for (int s = 0; s < g->nsearch; s++) {
            const int *net = g->net + (size_t)s * (size_t)g->nnodes * 2;
            size_t at = 0;
            br_graph_node_order(g, s, 0, order);
            if (net[0] >= 0) {
                at = append(line, sizeof(line), at, " NET/%d", net[0]);
            }
            for (int i = 0; i < g->node_size[0]; i++) {
                at = put_rank(g, line, sizeof(line), at, order[i]);
            }
            if (net[1] >= 0) {
                at = append(line, sizeof(line), at, " NET/%d", net[1]);
            }
            BR_INFO(NCCL_GRAPH, "%2d :%s", s, at > 0 ? line : "");
        }
    }
    free(order);
}

void br_graph_log(const br_graph_t *g, int rank)
{
    char line[1024];
    if (rank == 0) {
        log_patterns(g);
    }
    for (int c = 0; c < g->nchannels && rank == 0; c++) {
        const int *ring = br_graph_ring(g, c);
        size_t at = 0;
        for (int p = 0; p < g->nranks; p++) {
            at = append(line, sizeof(line), at, " %d", ring[p]);
            if (at > BR_GRAPH_LINE && p + 1 < g->nranks) {
                BR_INFO(NCCL_INIT | NCCL_GRAPH, "Channel %02d/%02d :%s ...", c, g->nchannels, line);
                at = 0;
            }
        }
        BR_INFO(NCCL_INIT | NCCL_GRAPH, "Channel %02d/%02d :%s", c, g->nchannels, line);
    }
    size_t at = 0;
    for (int c = 0; c < g->nchannels; c++) {
        const br_tree_node_t *t = br_graph_tree(g, c, rank);
        at = append(line, sizeof(line), at, " [%d] %d/%d/%d->%d->%d", c, t->down[0], t->down[1],
                    t->down[2], rank, t->up);
        if (at > BR_GRAPH_LINE && c + 1 < g->nchannels) {
            BR_INFO(NCCL_INIT | NCCL_GRAPH, "Trees%s ...", line);
            at = 0;
        }
    }
    BR_INFO(NCCL_INIT | NCCL_GRAPH, "Trees%s", line);
}

/* One <graph> of node 0's search channels (NCCL writes devices with "%#lx"). */
static void dump_graph(FILE *f, const br_graph_t *g, int id, int pattern, int *order)
{
    fprintf(f,
            "  <graph id=\"%d\" pattern=\"%d\" crossnic=\"%d\" nchannels=\"%d\" "
            "speedintra=\"%g\" speedinter=\"%g\" latencyinter=\"0\" typeintra=\"%s\" "
            "typeinter=\"%s\" samechannels=\"%d\">\n",
            id, pattern, g->cross_nic, g->nsearch, (double)g->bw_intra, (double)g->bw_inter,
            br_topo_path_str(g->type_intra), br_topo_path_str(g->type_inter),
            g->nsearch > 1 ? 0 : 1);
    for (int s = 0; s < g->nsearch; s++) {
        const int *net = g->net + (size_t)s * (size_t)g->nnodes * 2;
        br_graph_node_order(g, s, 0, order);
        fprintf(f, "    <channel>\n");
        if (net[0] >= 0) {
            fprintf(f, "      <net dev=\"%#x\"/>\n", (unsigned)net[0]);
        }
        for (int i = 0; i < g->node_size[0]; i++) {
            const br_topo_place_t *p = &g->place[order[i]];
            int local = 0; /* a rank without GPU: its position in the node's PCI order */
            for (int q = 0; q < g->nranks; q++) {
                local += g->node_of[q] == 0 && (g->place[q].order < p->order ||
                                                (g->place[q].order == p->order && q < order[i]));
            }
            fprintf(f, "      <%s dev=\"%#x\"/>\n", p->gpu >= 0 ? "gpu" : "cpu",
                    (unsigned)(p->gpu >= 0 ? p->gpu_dev : local));
        }
        if (net[1] >= 0) {
            fprintf(f, "      <net dev=\"%#x\"/>\n", (unsigned)net[1]);
        }
        fprintf(f, "    </channel>\n");
    }
    fprintf(f, "  </graph>\n");
}

ncclResult_t br_graph_dump(const br_graph_t *g, const char *path)
{
    int *order = NULL;
    BR_CHECK(br_calloc(&order, (size_t)g->node_size[0], "graph dump"));
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        BR_WARN(NCCL_GRAPH, "NCCL_GRAPH_DUMP_FILE: cannot open %s: %s", path, strerror(errno));
        free(order);
        return ncclSystemError;
    }
    fprintf(f, "<graphs version=\"1\">\n");
    dump_graph(f, g, 0, BR_GRAPH_PATTERN_RING, order);
    dump_graph(f, g, 1, BR_GRAPH_PATTERN_BALANCED_TREE, order);
    fprintf(f, "</graphs>\n");
    free(order);
    int err = ferror(f) ? errno : 0;
    if (fclose(f) != 0 && err == 0) {
        err = errno;
    }
    if (err != 0) {
        BR_WARN(NCCL_GRAPH, "NCCL_GRAPH_DUMP_FILE: writing %s failed: %s", path, strerror(err));
        return ncclSystemError;
    }
    BR_INFO(NCCL_INIT | NCCL_GRAPH, "graphs of %d search channels (%d channels) written to %s",
            g->nsearch, g->nchannels, path);
    return ncclSuccess;
}
