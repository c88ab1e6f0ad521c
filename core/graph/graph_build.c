/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Building the graph (graph.h): nodes from the ranks' hosts, each node's ranks in PCI-tree
 * order, the search channels (graph_search.c or a graph file, graph_file.c) spread over
 * the channels as rings, and per tree index a binary tree over the nodes, hung from the
 * node heads (each channel's first rank of a node) with the channel's chain inside each
 * node (a binary tree where the node's links are the network). All arrays are flat,
 * indexed [channel * nranks + rank]. Pure computation on the caller's thread.
 */
#include <stdlib.h>
#include <string.h>

#include "graph_int.h"

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

/* Channel c's tree: inside each node a chain in the ring's order (or tree 0's binary tree
 * over the ring positions, g->intra_net), node heads (each node's first rank on the ring)
 * linked by tree c % 2. */
static void build_tree(br_graph_t *g, int c)
{
    br_tree_node_t *tree = g->tree + (size_t)c * (size_t)g->nranks;
    const int *ring = br_graph_ring(g, c);
    int t = br_graph_tree_index(c);

    for (int r = 0; r < g->nranks; r++) {
        tree[r].up = -1;
        tree[r].ndown = 0;
        for (int k = 0; k < BR_MAX_TREE_ARITY; k++) {
            tree[r].down[k] = -1;
        }
    }
    /* Nodes are contiguous on the ring, in node order: node k's ranks start at `at`. Each
     * rank's parent in the node is its predecessor (a chain) or its binary-tree parent. */
    for (int node = 0, at = 0; node < g->nnodes; at += g->node_size[node], node++) {
        g->node_head[node] = ring[at];
        for (int i = 1; i < g->node_size[node]; i++) {
            int up = i - 1, d0, d1;
            if (g->intra_net) {
                btree(g->node_size[node], i, &up, &d0, &d1);
            }
            tree[ring[at + i]].up = ring[at + up];
        }
        /* Children in position order, so a head's child in the node comes first. */
        for (int i = 1; i < g->node_size[node]; i++) {
            tree_add_child(&tree[tree[ring[at + i]].up], ring[at + i]);
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

/* Nodes in order of first appearance; each node's ranks sorted by place order, then
 * rank (insertion sort: nodes hold few ranks). */
static void build_nodes(br_graph_t *g, br_graph_nodes_t *nodes)
{
    int n = g->nranks;
    for (int r = 0; r < n; r++) {
        g->node_of[r] = -1;
        for (int q = 0; q < r; q++) {
            if (g->place[q].host == g->place[r].host) {
                g->node_of[r] = g->node_of[q];
                break;
            }
        }
        if (g->node_of[r] < 0) {
            g->node_of[r] = g->nnodes++;
        }
        g->node_size[g->node_of[r]]++;
    }
    for (int node = 0, at = 0; node < g->nnodes; node++) {
        nodes->node_start[node] = at;
        at += g->node_size[node];
    }
    int *fill = g->node_head; /* scratch until build_tree sets the heads */
    memcpy(fill, nodes->node_start, (size_t)g->nnodes * sizeof(int));
    for (int r = 0; r < n; r++) {
        int node = g->node_of[r], *b = nodes->base + nodes->node_start[node];
        int k = fill[node]++ - nodes->node_start[node];
        while (k > 0 && g->place[b[k - 1]].order > g->place[r].order) {
            b[k] = b[k - 1];
            k--;
        }
        b[k] = r;
    }
}

/* The rings: channel c takes search channel c % nsearch, nodes in order. */
static ncclResult_t build_rings(br_graph_t *g, const br_graph_nodes_t *nodes,
                                const br_graph_file_t *file, const char *path)
{
    int n = g->nranks;
    for (int s = 0; s < g->nsearch; s++) {
        int *ring = g->ring + (size_t)s * (size_t)n;
        for (int node = 0; node < g->nnodes; node++) {
            int *out = ring + nodes->node_start[node],
                *net = g->net + ((size_t)s * g->nnodes + node) * 2;
            if (file != NULL) {
                BR_CHECK(br_graph_file_chain(g, nodes, file, path, s, node, out));
                net[0] = file->net[2 * s];
                net[1] = file->net[2 * s + 1];
            } else {
                br_graph_search_chain(g, nodes, s, node, out, &net[0], &net[1]);
            }
        }
    }
    for (int c = g->nsearch; c < g->nchannels; c++) {
        memcpy(g->ring + (size_t)c * (size_t)n, g->ring + (size_t)(c % g->nsearch) * (size_t)n,
               (size_t)n * sizeof(int));
    }
    for (int c = 0; c < g->nchannels; c++) {
        const int *ring = br_graph_ring(g, c);
        int *pos = g->ring_pos + (size_t)c * (size_t)n;
        for (int p = 0; p < n; p++) {
            pos[ring[p]] = p;
        }
    }
    return ncclSuccess;
}

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

/* How many channels: the host count without GPUs, else twice the search's (NCCL
 * duplicates the searched channels) within NCCL_MIN/MAX_NCHANNELS. */
static int channel_count(const br_graph_t *g, const br_graph_opts_t *o)
{
    if (!g->gpus) {
        return clampi(o->host_channels, 1, BR_MAX_CHANNELS);
    }
    int lo = clampi(o->min_channels, 1, BR_MAX_CHANNELS);
    int hi = clampi(o->max_channels, lo, BR_MAX_CHANNELS);
    return clampi(2 * g->nsearch, lo, hi);
}

static ncclResult_t graph_alloc(br_graph_t *g)
{
    size_t n = (size_t)g->nranks, cells = (size_t)BR_MAX_CHANNELS * n;
    BR_CHECK(br_calloc(&g->node_of, n, "graph"));
    BR_CHECK(br_calloc(&g->node_head, n, "graph"));
    BR_CHECK(br_calloc(&g->node_size, n, "graph"));
    BR_CHECK(br_calloc(&g->ring, cells, "graph rings"));
    BR_CHECK(br_calloc(&g->ring_pos, cells, "graph rings"));
    BR_CHECK(br_calloc(&g->tree, cells, "graph trees"));
    BR_CHECK(br_calloc(&g->tree_root, (size_t)BR_MAX_CHANNELS, "graph trees"));
    BR_CHECK(br_calloc(&g->net, (size_t)BR_MAX_CHANNELS * n * 2, "graph NICs"));
    BR_CHECK(br_calloc(&g->place, n, "graph places"));
    return ncclSuccess;
}

/* Every rank has a GPU, the smallest compute capability, rank 0's CPU vendor. */
static void gpu_facts(br_graph_t *g)
{
    g->gpus = 1;
    g->sm = 0;
    for (int r = 0; r < g->nranks; r++) {
        const br_topo_place_t *p = &g->place[r];
        g->gpus &= p->gpu >= 0;
        g->sm = r == 0 || p->sm < g->sm ? p->sm : g->sm;
    }
    g->sm = g->gpus ? g->sm : 0;
    g->cpu_vendor = g->place[0].cpu_vendor;
}

ncclResult_t br_graph_build_places(int nranks, const br_topo_place_t *places,
                                   const br_graph_opts_t *opts, br_graph_t **graph_p)
{
    br_graph_t *g = NULL;
    br_graph_file_t *file = NULL;
    br_graph_nodes_t nodes = {NULL, NULL};
    br_graph_search_t s;
    ncclResult_t res = ncclSuccess;

    if (nranks < 1 || places == NULL || opts == NULL || opts->host_channels < 1 ||
        opts->host_channels > BR_MAX_CHANNELS) {
        BR_WARN(NCCL_GRAPH,
                "cannot build the rings and trees of %d ranks over %d channels "
                "(1 to %d channels)",
                nranks, opts != NULL ? opts->host_channels : 0, BR_MAX_CHANNELS);
        return ncclInvalidArgument;
    }
    BR_CHECK(br_calloc(&g, 1, "graph"));
    g->nranks = nranks;
    BR_CHECK_GOTO(graph_alloc(g), res, fail);
    memcpy(g->place, places, (size_t)nranks * sizeof(*places));
    BR_CHECK_GOTO(br_calloc(&nodes.base, (size_t)nranks, "graph"), res, fail);
    BR_CHECK_GOTO(br_calloc(&nodes.node_start, (size_t)nranks, "graph"), res, fail);
    build_nodes(g, &nodes);
    gpu_facts(g);
    if (opts->file != NULL) {
        BR_CHECK_GOTO(br_graph_file_load(opts->file, &file), res, fail);
        s = file->s;
    } else {
        br_graph_search(g, opts, &s);
    }
    g->nsearch = s.nsearch;
    g->bw_intra = s.bw_intra;
    g->bw_inter = s.bw_inter;
    g->type_intra = s.type_intra;
    g->type_inter = s.type_inter;
    g->cross_nic = s.cross_nic;
    g->nchannels = channel_count(g, opts);
    g->nsearch = g->nsearch < 1 ? 1 : (g->nsearch > g->nchannels ? g->nchannels : g->nsearch);
    g->intra_net = opts->intra_net && !g->gpus;
    BR_CHECK_GOTO(build_rings(g, &nodes, file, opts->file), res, fail);
    for (int c = 0; c < g->nchannels; c++) {
        build_tree(g, c);
    }
    *graph_p = g;
    goto out;
fail:
    br_graph_free(g);
out:
    br_graph_file_free(file);
    free(nodes.base);
    free(nodes.node_start);
    return res;
}

ncclResult_t br_graph_build(int nranks, const uint64_t *host, int nchannels, br_graph_t **graph_p)
{
    br_topo_place_t *places = NULL;
    br_graph_opts_t o = {.host_channels = nchannels,
                         .min_channels = 1,
                         .max_channels = BR_MAX_CHANNELS,
                         .file = NULL};
    if (nranks < 1 || host == NULL) {
        BR_WARN(NCCL_GRAPH, "cannot build the rings and trees of %d ranks", nranks);
        return ncclInvalidArgument;
    }
    BR_CHECK(br_calloc(&places, (size_t)nranks, "graph places"));
    for (int r = 0; r < nranks; r++) {
        places[r].host = host[r];
        places[r].gpu = places[r].gpu_dev = places[r].cpu = -1;
        places[r].net = places[r].net_dev = places[r].intra_type = -1;
        places[r].net_path = BR_TOPO_PATH_DIS;
    }
    ncclResult_t res = br_graph_build_places(nranks, places, &o, graph_p);
    free(places);
    return res;
}

void br_graph_node_order(const br_graph_t *g, int s, int node, int *out)
{
    const int *ring = br_graph_ring(g, s);
    int at = 0;
    for (int k = 0; k < node; k++) {
        at += g->node_size[k];
    }
    memcpy(out, ring + at, (size_t)g->node_size[node] * sizeof(int));
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
    free(g->node_size);
    free(g->net);
    free(g->place);
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
