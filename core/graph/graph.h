/* SPDX-License-Identifier: Apache-2.0 */
/*
 * graph: the rings and trees of every channel, as plain data, built from where each rank
 * sits in its node's topology (br_topo_place_t, allgathered so that every rank builds the
 * same graph):
 *
 *  - Nodes are hosts, in order of first appearance in rank order. Inside a node the ranks
 *    are sorted by their position in the node's PCI tree (GPUs under one switch, then one
 *    CPU, are adjacent), ties by rank.
 *  - The search (graph_search.c) gives, as NCCL's does for one node, a few "search
 *    channels", each an order of the node's ranks and the NIC the ring enters and leaves
 *    the node by, and a per-channel bandwidth from the links (NCCL's speed tables). Where
 *    every GPU pair of a node is NVLink (an NVSwitch), any order is as good, so search
 *    channel s starts at the GPU that uses NIC s (round-robin over the node's NICs) and ends
 *    at the other GPU closest to that NIC (multi-rail); elsewhere the order stays.
 *  - Channel count: without GPUs, the caller's (the host executor's count); with GPUs,
 *    twice the search channels (NCCL duplicates them), within NCCL_MIN/MAX_NCHANNELS.
 *    Channel c follows search channel c % nsearch.
 *  - Ring of channel c: the node chains in node order. Trees (NCCL's double binary tree):
 *    inside a node the chain of the channel's order, whose head is the node's member in the
 *    tree across nodes. Across nodes, tree 0 is a binary tree over node indices in which
 *    node 0 is the root with a single child; tree 1 is its mirror (node i -> n-1-i) when
 *    the node count is even, and tree 0 shifted by one node when it is odd. Channel c uses
 *    tree c % 2. A rank has at most one parent and at most BR_MAX_TREE_ARITY children: its
 *    chain successor first, then child nodes' heads. Where the links inside a host are the
 *    network (opts.intra_net, ranks without GPUs) a chain would cost one network hop per
 *    rank, so the node's ranks form tree 0's binary tree instead, over their positions in
 *    the channel's order, rooted at the head (its one child: position 2^k, the largest
 *    power of two below the node's size): depth ceil(log2 size) instead of size - 1.
 *
 * NCCL_GRAPH_DUMP_FILE writes node 0's search channels in NCCL's graph schema;
 * NCCL_GRAPH_FILE loads such a file and applies it to every node. No threads, no I/O
 * except the dump, the load and the log lines.
 */
#ifndef BR_GRAPH_H_
#define BR_GRAPH_H_

#include <stdint.h>

#include "coll.h"
#include "topo.h"

/* One rank's links in one channel's tree. */
typedef struct {
    int up;                      /* parent rank, -1 at the tree's root */
    int down[BR_MAX_TREE_ARITY]; /* children (ranks), -1 for unused entries */
    int ndown;                   /* children in use: down[0..ndown-1] */
} br_tree_node_t;

/* NCCL's graph patterns (NCCL_TOPO_PATTERN_*) as the dump writes them. */
#define BR_GRAPH_PATTERN_BALANCED_TREE 1
#define BR_GRAPH_PATTERN_RING 4

typedef struct br_graph {
    int nranks;
    int nnodes; /* distinct hosts */
    int nchannels;
    int nsearch;    /* search channels: channel c follows search channel c % nsearch */
    int gpus;       /* every rank has a GPU: channels and bandwidths from the links */
    float bw_intra; /* GB/s per search channel inside a node */
    float bw_inter; /* and across nodes (the NIC's share) */
    int type_intra; /* farthest path type between ring neighbours in a node (BR_TOPO_PATH_*) */
    int type_inter; /* farthest path type from a ring end to its NIC */
    int cross_nic;  /* some ring enters and leaves a node by different NICs */
    int sm;         /* smallest compute capability, 0 without GPUs */
    int cpu_vendor; /* NCCL's CPU vendor code of rank 0's CPU (the tuning tables' row) */
    int intra_net;  /* trees inside nodes are binary (opts.intra_net without GPUs) */
    int *node_of;   /* [nranks]: node index of each rank, nodes numbered by first rank */
    int *node_head; /* [nnodes]: lowest rank of each node */
    int *node_size; /* [nnodes]: ranks of each node */
    int *ring;      /* [nchannels * nranks]: rank at position p of channel c's ring */
    int *ring_pos;  /* [nchannels * nranks]: position of rank r on channel c's ring */
    br_tree_node_t *tree;   /* [nchannels * nranks]: links of rank r in channel c's tree */
    int *tree_root;         /* [nchannels]: the rank at the root of channel c's tree */
    int *net;               /* [nsearch * nnodes * 2]: <net dev> a search channel's ring enters
                             * (0) and leaves (1) each node by, -1 without */
    br_topo_place_t *place; /* [nranks]: what the graph was built from */
} br_graph_t;

/* Options of a build. */
typedef struct {
    int host_channels; /* channels when some rank has no GPU (1..BR_MAX_CHANNELS) */
    int min_channels;  /* NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS: bounds with GPUs */
    int max_channels;
    const char *file; /* NCCL_GRAPH_FILE, or NULL to search */
    int intra_net;    /* ranks of one host talk over the network (shared memory and p2p off):
                       * without GPUs, trees inside nodes are binary, not chains */
} br_graph_opts_t;

/*
 * Build the graph of nranks ranks from their places (see the top of this file). A bad
 * NCCL_GRAPH_FILE fails with ncclInvalidUsage and a WARN naming the file and what does not
 * fit. *graph_p is freed with br_graph_free.
 */
ncclResult_t br_graph_build_places(int nranks, const br_topo_place_t *places,
                                   const br_graph_opts_t *opts, br_graph_t **graph_p);

/*
 * The same without topology: host[r] identifies rank r's host (equal values: same host);
 * nchannels (1..BR_MAX_CHANNELS) channels, ranks of a node in rank order.
 */
ncclResult_t br_graph_build(int nranks, const uint64_t *host, int nchannels, br_graph_t **graph_p);
void br_graph_free(br_graph_t *graph);

/* Rank at each position of channel c's ring, and position of each rank. */
static inline const int *br_graph_ring(const br_graph_t *g, int c)
{
    return g->ring + (size_t)c * (size_t)g->nranks;
}

static inline const int *br_graph_ring_pos(const br_graph_t *g, int c)
{
    return g->ring_pos + (size_t)c * (size_t)g->nranks;
}

/* Rank r's links in channel c's tree. */
static inline const br_tree_node_t *br_graph_tree(const br_graph_t *g, int c, int r)
{
    return &g->tree[(size_t)c * (size_t)g->nranks + (size_t)r];
}

/* Which of the two trees (0 or 1) channel c uses. */
static inline int br_graph_tree_index(int c)
{
    return c % 2;
}

/* The child of rank r through which `target` is reached in channel c's tree (target
 * itself when it is a child of r), or -1 when target is not below r (or is r). */
int br_graph_tree_child_toward(const br_graph_t *g, int c, int r, int target);

/* Number of links on the longest path from the root of channel c's tree to a leaf. */
int br_graph_tree_depth(const br_graph_t *g, int c);

/* Number of links from rank r up to the root of channel c's tree. */
int br_graph_tree_level(const br_graph_t *g, int c, int r);

/* Search channel s's order of node `node`'s ranks: out[0..node_size-1]. */
void br_graph_node_order(const br_graph_t *g, int s, int node, int *out);

/*
 * The INFO transcript in NCCL's words (subsystems INIT and GRAPH), for rank `rank`:
 * rank 0 prints per graph "Pattern 4, crossNic 0, nChannels 12, bw 30.0/30.0, type
 * NVL/PIX, sameChannels 1" and its node's search channels (" 0 : NET/0 GPU/0 ... NET/0"),
 * then "Channel 00/02 : 0 1 2 3" for every ring; every rank prints its trees as
 * "Trees [0] 1/-1/-1->0->-1 [1] ..." (children/parent of each channel).
 */
void br_graph_log(const br_graph_t *g, int rank);

/*
 * NCCL_GRAPH_DUMP_FILE: write node 0's search channels as NCCL's <graphs> XML (a ring
 * graph id 0 and a tree graph id 1; docs/topology.md). Logs and returns ncclSystemError
 * when the file cannot be written.
 */
ncclResult_t br_graph_dump(const br_graph_t *g, const char *path);

#endif /* BR_GRAPH_H_ */
