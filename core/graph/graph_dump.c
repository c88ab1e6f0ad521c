/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The graph in words: NCCL's INFO transcript ("Channel 00/02 : 0 1 2 3" for every ring on
 * rank 0, "Trees [0] 1/-1/-1->0->-1 ..." on every rank) and the NCCL_GRAPH_DUMP_FILE XML:
 *
 *   <graphs version="1" nranks="4" nnodes="2" nchannels="2">
 *     <graph id="0" pattern="ring" nchannels="2">
 *       <channel id="0">
 *         <rank id="0" node="0"/>            (in ring order)
 *       </channel>
 *     </graph>
 *     <graph id="1" pattern="tree" nchannels="2">
 *       <channel id="0" tree="0" root="0">
 *         <rank id="0" node="0" up="-1" down="1,2,-1"/>   (in rank order)
 *       </channel>
 *     </graph>
 *   </graphs>
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "graph.h"
#include "util.h"

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

void br_graph_log(const br_graph_t *g, int rank)
{
    char line[1024];
    for (int c = 0; c < g->nchannels && rank == 0; c++) {
        const int *ring = br_graph_ring(g, c);
        size_t at = 0;
        for (int p = 0; p < g->nranks; p++) {
            at = append(line, sizeof(line), at, " %d", ring[p]);
            if (at > BR_GRAPH_LINE && p + 1 < g->nranks) {
                BR_INFO(NCCL_INIT | NCCL_GRAPH, "Channel %02d/%02d :%s ...", c, g->nchannels,
                        line);
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

static void dump_rings(FILE *f, const br_graph_t *g)
{
    fprintf(f, "  <graph id=\"0\" pattern=\"ring\" nchannels=\"%d\">\n", g->nchannels);
    for (int c = 0; c < g->nchannels; c++) {
        const int *ring = br_graph_ring(g, c);
        fprintf(f, "    <channel id=\"%d\">\n", c);
        for (int p = 0; p < g->nranks; p++) {
            fprintf(f, "      <rank id=\"%d\" node=\"%d\"/>\n", ring[p], g->node_of[ring[p]]);
        }
        fprintf(f, "    </channel>\n");
    }
    fprintf(f, "  </graph>\n");
}

static void dump_trees(FILE *f, const br_graph_t *g)
{
    fprintf(f, "  <graph id=\"1\" pattern=\"tree\" nchannels=\"%d\">\n", g->nchannels);
    for (int c = 0; c < g->nchannels; c++) {
        fprintf(f, "    <channel id=\"%d\" tree=\"%d\" root=\"%d\">\n", c, br_graph_tree_index(c),
                g->tree_root[c]);
        for (int r = 0; r < g->nranks; r++) {
            const br_tree_node_t *t = br_graph_tree(g, c, r);
            fprintf(f, "      <rank id=\"%d\" node=\"%d\" up=\"%d\" down=\"%d,%d,%d\"/>\n", r,
                    g->node_of[r], t->up, t->down[0], t->down[1], t->down[2]);
        }
        fprintf(f, "    </channel>\n");
    }
    fprintf(f, "  </graph>\n");
}

ncclResult_t br_graph_dump(const br_graph_t *g, const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        BR_WARN(NCCL_GRAPH, "NCCL_GRAPH_DUMP_FILE: cannot open %s: %s", path, strerror(errno));
        return ncclSystemError;
    }
    fprintf(f, "<graphs version=\"1\" nranks=\"%d\" nnodes=\"%d\" nchannels=\"%d\">\n",
            g->nranks, g->nnodes, g->nchannels);
    dump_rings(f, g);
    dump_trees(f, g);
    fprintf(f, "</graphs>\n");
    int err = ferror(f) ? errno : 0;
    if (fclose(f) != 0 && err == 0) {
        err = errno;
    }
    if (err != 0) {
        BR_WARN(NCCL_GRAPH, "NCCL_GRAPH_DUMP_FILE: writing %s failed: %s", path, strerror(err));
        return ncclSystemError;
    }
    BR_INFO(NCCL_INIT | NCCL_GRAPH, "rings and trees of %d channels written to %s", g->nchannels,
            path);
    return ncclSuccess;
}
