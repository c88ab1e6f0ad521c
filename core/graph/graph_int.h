/* SPDX-License-Identifier: Apache-2.0 */
/* graph module-private: the search result before it is spread over nodes and channels,
 * and NCCL_GRAPH_FILE's contents. */
#ifndef BR_GRAPH_INT_H_
#define BR_GRAPH_INT_H_

#include "graph.h"
#include "util.h"

/* What the search (or a graph file) decides, per search channel and node. */
typedef struct {
    int nsearch;
    float bw_intra, bw_inter;
    int type_intra, type_inter, cross_nic;
} br_graph_search_t;

/* An NCCL_GRAPH_FILE: the ring graph (id 0) of one node. */
typedef struct {
    br_graph_search_t s;
    int width; /* entries per channel (the node's ranks) */
    int *dev;  /* [nsearch * width]: <gpu dev>, or for <cpu dev> the local index + 1 negated */
    int *net;  /* [nsearch * 2]: <net dev> in and out, -1 without */
} br_graph_file_t;

/* Node-ordered ranks: base[node_start[node] .. + node_size[node]] sorted by place order. */
typedef struct {
    int *base;
    int *node_start;
} br_graph_nodes_t;

/* Channel counts and bandwidths from the places (NCCL's speed tables); no GPUs: the host
 * count with the NICs' bandwidth. */
void br_graph_search(const br_graph_t *g, const br_graph_opts_t *opts, br_graph_search_t *s);

/* Search channel s's order of `node`'s ranks into out, its NICs into net_in/net_out. */
void br_graph_search_chain(const br_graph_t *g, const br_graph_nodes_t *nodes, int s, int node,
                           int *out, int *net_in, int *net_out);

/* Load / free a graph file; errors name the file and line. */
ncclResult_t br_graph_file_load(const char *path, br_graph_file_t **file_p);
void br_graph_file_free(br_graph_file_t *file);

/* Apply channel s of a loaded file to node: the order of its ranks by device. Fails with
 * ncclInvalidUsage (logged) when the node's ranks do not match the file's devices. */
ncclResult_t br_graph_file_chain(const br_graph_t *g, const br_graph_nodes_t *nodes,
                                 const br_graph_file_t *f, const char *path, int s, int node,
                                 int *out);

#endif /* BR_GRAPH_INT_H_ */
