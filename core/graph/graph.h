/* SPDX-License-Identifier: Apache-2.0 */
/*
 * graph: the rings and trees of every channel, as plain data. Built from rank order and
 * the host of each rank (the topology issue will add the machine's shape):
 *
 *  - Ring: ranks of one host adjacent, hosts in order of first appearance in rank order,
 *    so that at most one hop per host pair crosses the network. Every channel has the
 *    same ring for now.
 *  - Trees (NCCL's double binary tree): inside a node (host) the ranks form a chain in
 *    rank order, whose head (the node's lowest rank) is the node's member in the tree
 *    across nodes. Across nodes, tree 0 is a binary tree over node indices in which node
 *    0 is the root with a single child; tree 1 is its mirror (node i -> n-1-i) when the
 *    node count is even, and tree 0 shifted by one node when it is odd, so that a node is
 *    interior in at most one of the two (for an odd count, one node must be interior in
 *    both). Channel c uses tree c % 2. A rank has at most one parent and at most
 *    BR_MAX_TREE_ARITY children: its chain successor first, then child nodes' heads.
 *
 * Every rank builds the same graph from the same inputs. No threads, no I/O except the
 * dump and the log lines.
 */
#ifndef BR_GRAPH_H_
#define BR_GRAPH_H_

#include <stdint.h>

#include "coll.h"

/* One rank's links in one channel's tree. */
typedef struct {
    int up;                          /* parent rank, -1 at the tree's root */
    int down[BR_MAX_TREE_ARITY];     /* children (ranks), -1 for unused entries */
    int ndown;                       /* children in use: down[0..ndown-1] */
} br_tree_node_t;

typedef struct br_graph {
    int nranks;
    int nnodes;         /* distinct hosts */
    int nchannels;
    int *node_of;       /* [nranks]: node index of each rank, nodes numbered by first rank */
    int *node_head;     /* [nnodes]: lowest rank of each node */
    int *ring;          /* [nchannels * nranks]: rank at position p of channel c's ring */
    int *ring_pos;      /* [nchannels * nranks]: position of rank r on channel c's ring */
    br_tree_node_t *tree; /* [nchannels * nranks]: links of rank r in channel c's tree */
    int *tree_root;     /* [nchannels]: the rank at the root of channel c's tree */
} br_graph_t;

/*
 * Build the graph of nranks ranks over nchannels (1..BR_MAX_CHANNELS) channels; host[r]
 * identifies rank r's host (equal values: same host). *graph_p is freed with
 * br_graph_free.
 */
ncclResult_t br_graph_build(int nranks, const uint64_t *host, int nchannels,
                            br_graph_t **graph_p);
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

/*
 * The INFO transcript in NCCL's words (subsystems INIT and GRAPH), for rank `rank`:
 * rank 0 prints "Channel 00/02 : 0 1 2 3" for every channel, every rank prints its
 * trees as "Trees [0] 1/-1/-1->0->-1 [1] ..." (children/parent of each channel).
 */
void br_graph_log(const br_graph_t *g, int rank);

/*
 * NCCL_GRAPH_DUMP_FILE: write every channel's ring and tree as XML to `path`
 * (docs/user-guide.md describes the format). Logs and returns ncclSystemError when the
 * file cannot be written.
 */
ncclResult_t br_graph_dump(const br_graph_t *g, const char *path);

#endif /* BR_GRAPH_H_ */
