/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Building the graph (graph.h): nodes from the ranks' hosts, one ring shared by every
 * channel, and per tree index a binary tree over the nodes, hung from the node heads with
 * a chain inside each node. All arrays are flat, indexed [channel * nranks + rank]. Pure
 * computation on the caller's thread.
 */
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "util.h"

/* Tree 0 over n nodes: the parent and children of node i. Node 0 is the root with a single
 * child, the largest power of two below n. Any other node i, with lowest set bit b, has
 * parent i with bit b cleared and bit 2b set, or only cleared when that is past the end;
 * children i - b/2 and the first of i + b/2, i + b/4, ... that exists (none when b is 1). */
static void btree(int n, int i, int *up, int *d0, int *d1)
{
    *up = *d0 = *d1 = -1;
    if (i == 0) {
        int top = 1;
        while (top < n) {
            top <<= 1;
        }
        *d1 = n > 1 ? top >> 1 : -1;
        return;
    }
    int b = i & -i;
    *up = ((i ^ b) | (b << 1)) < n ? ((i ^ b) | (b << 1)) : i ^ b;
    for (int h = b >> 1; h > 0; h >>= 1) {
        if (*d0 < 0) {
            *d0 = i - h;
        }
        if (i + h < n) {
            *d1 = i + h;
            break;
        }
    }
}

/* Tree t (0 or 1) over n nodes. Tree 1 relabels tree 0: node i plays node n-1-i (even n)
 * or node i-1 (odd n). */
static void node_tree(int n, int t, int i, int *up, int *d0, int *d1)
{
    int role = i, u, a, b;
    if (t == 1) {
        role = n % 2 == 0 ? n - 1 - i : (i - 1 + n) % n;
    }
    btree(n, role, &u, &a, &b);
    if (t == 1) {
        int *links[3] = {&u, &a, &b};
        for (int k = 0; k < 3; k++) {
            if (*links[k] >= 0) {
                *links[k] = n % 2 == 0 ? n - 1 - *links[k] : (*links[k] + 1) % n;
            }
        }
    }
    *up = u;
    *d0 = a;
    *d1 = b;
}

static void tree_add_child(br_tree_node_t *t, int child)
{
    if (child >= 0 && t->ndown < BR_MAX_TREE_ARITY) {
        t->down[t->ndown++] = child;
    }
}

/* Channel c's tree: chains inside nodes, node heads linked by tree c % 2. */
static void build_tree(br_graph_t *g, int c)
{
    br_tree_node_t *tree = g->tree + (size_t)c * (size_t)g->nranks;
    int t = br_graph_tree_index(c);

    for (int r = 0; r < g->nranks; r++) {
        tree[r].up = -1;
        tree[r].ndown = 0;
        for (int k = 0; k < BR_MAX_TREE_ARITY; k++) {
            tree[r].down[k] = -1;
        }
    }
    /* The chain of each node: each rank's parent is the previous rank of its node. */
    for (int r = 0; r < g->nranks; r++) {
        for (int next = r + 1; next < g->nranks; next++) {
            if (g->node_of[next] == g->node_of[r]) {
                tree_add_child(&tree[r], next);
                tree[next].up = r;
                break;
            }
        }
    }
    for (int node = 0; node < g->nnodes; node++) {
        int up, d0, d1, head = g->node_head[node];
        node_tree(g->nnodes, t, node, &up, &d0, &d1);
        tree[head].up = up >= 0 ? g->node_head[up] : -1;
        tree_add_child(&tree[head], d0 >= 0 ? g->node_head[d0] : -1);
        tree_add_child(&tree[head], d1 >= 0 ? g->node_head[d1] : -1);
        if (up < 0) {
            g->tree_root[c] = head;
        }
    }
}

/* Nodes in order of first appearance; the ring visits them in that order, each node's
 * ranks in increasing order. */
static void build_nodes_and_ring(br_graph_t *g, const uint64_t *host)
{
    int n = g->nranks, k = 0;
    for (int r = 0; r < n; r++) {
        g->node_of[r] = -1;
        for (int q = 0; q < r; q++) {
            if (host[q] == host[r]) {
                g->node_of[r] = g->node_of[q];
                break;
            }
        }
        if (g->node_of[r] < 0) {
            g->node_head[g->nnodes] = r;
            g->node_of[r] = g->nnodes++;
        }
    }
    for (int node = 0; node < g->nnodes; node++) {
        for (int r = 0; r < n; r++) {
            if (g->node_of[r] == node) {
                g->ring[k++] = r;
            }
        }
    }
    for (int p = 0; p < n; p++) {
        g->ring_pos[g->ring[p]] = p;
    }
    for (int c = 1; c < g->nchannels; c++) {
        memcpy(g->ring + (size_t)c * (size_t)n, g->ring, (size_t)n * sizeof(int));
        memcpy(g->ring_pos + (size_t)c * (size_t)n, g->ring_pos, (size_t)n * sizeof(int));
    }
}

ncclResult_t br_graph_build(int nranks, const uint64_t *host, int nchannels,
                            br_graph_t **graph_p)
{
    br_graph_t *g = NULL;
    ncclResult_t res = ncclSuccess;

    if (nranks < 1 || nchannels < 1 || nchannels > BR_MAX_CHANNELS || host == NULL) {
        BR_WARN(NCCL_GRAPH, "cannot build the rings and trees of %d ranks over %d channels "
                "(1 to %d channels)", nranks, nchannels, BR_MAX_CHANNELS);
        return ncclInvalidArgument;
    }
    size_t cells = (size_t)nchannels * (size_t)nranks;
    BR_CHECK(br_calloc(&g, 1, "graph"));
    g->nranks = nranks;
    g->nchannels = nchannels;
    BR_CHECK_GOTO(br_calloc(&g->node_of, (size_t)nranks, "graph"), res, fail);
    BR_CHECK_GOTO(br_calloc(&g->node_head, (size_t)nranks, "graph"), res, fail);
    BR_CHECK_GOTO(br_calloc(&g->ring, cells, "graph rings"), res, fail);
    BR_CHECK_GOTO(br_calloc(&g->ring_pos, cells, "graph rings"), res, fail);
    BR_CHECK_GOTO(br_calloc(&g->tree, cells, "graph trees"), res, fail);
    BR_CHECK_GOTO(br_calloc(&g->tree_root, (size_t)nchannels, "graph trees"), res, fail);
    build_nodes_and_ring(g, host);
    for (int c = 0; c < nchannels; c++) {
        build_tree(g, c);
    }
    *graph_p = g;
    return ncclSuccess;
fail:
    br_graph_free(g);
    return res;
}

void br_graph_free(br_graph_t *g)
{
    if (g == NULL) {
        return;
    }
    free(g->node_of);
    free(g->node_head);
    free(g->ring);
    free(g->ring_pos);
    free(g->tree);
    free(g->tree_root);
    free(g);
}

int br_graph_tree_child_toward(const br_graph_t *g, int c, int r, int target)
{
    int prev = -1;
    /* Walk up from target; r is an ancestor if the walk meets it. */
    for (int x = target; x >= 0; x = br_graph_tree(g, c, x)->up) {
        if (x == r) {
            return prev;
        }
        prev = x;
    }
    return -1;
}

int br_graph_tree_level(const br_graph_t *g, int c, int r)
{
    int level = 0;
    for (int x = br_graph_tree(g, c, r)->up; x >= 0; x = br_graph_tree(g, c, x)->up) {
        level++;
    }
    return level;
}

int br_graph_tree_depth(const br_graph_t *g, int c)
{
    int depth = 0;
    for (int r = 0; r < g->nranks; r++) {
        int l = br_graph_tree_level(g, c, r);
        depth = l > depth ? l : depth;
    }
    return depth;
}
