/* SPDX-License-Identifier: Apache-2.0 */
/*
 * braid-sim --model nccl: what NVIDIA's NCCL would choose and reach on a cluster, from its
 * tuning model (src/graph/tuning.cc) fed by Braid's graph of the cluster. This table is
 * braid-sim's alone: Braid's executors run none of NVLS, NVLSTree, CollNet or PAT, and the
 * plan used at init (core/plan) never sees it.
 */
#ifndef BR_SIM_NCCL_H_
#define BR_SIM_NCCL_H_

#include <stddef.h>

#include "graph.h"
#include "topo.h"

/* NCCL's algorithm ids and names. */
enum {
    SIM_TREE,
    SIM_RING,
    SIM_COLLNET_DIRECT,
    SIM_COLLNET_CHAIN,
    SIM_NVLS,
    SIM_NVLS_TREE,
    SIM_PAT,
    SIM_NUM_ALGOS
};

/* What the model needs of the cluster beyond the ring graph, with NCCL's defaults where the
 * topology file is silent (each noted in `why` for the output). */
typedef struct {
    int nranks, nnodes, ppn, sm, amd;
    int ring_nch, comm_nch;   /* ring graph's search channels; the communicator's channels */
    float bw_intra, bw_inter; /* ring graph's per-channel speeds */
    int type_intra, type_inter;
    float nvs_bw;   /* a GPU's NVLink bandwidth to the NVSwitch, 0 without one */
    int nvls;       /* NVSwitch on every node and sm90+: NCCL builds an NVLS graph */
    int collnet;    /* every NIC coll="1" and NCCL_COLLNET_ENABLE=1 */
    int nics;       /* NICs per node (node 0) */
    float nic_lat;  /* us, the graph's latencyInter */
    int algo_mask;  /* NCCL_ALGO: bit per SIM_* (all by default) */
    int proto_mask; /* NCCL_PROTO: bit per protocol; -1 = NCCL's default (LL128 by rule) */
    int version;    /* NCCL 2.x whose tuning constants are used: x from SIM_NCCL_VERSION_MIN */
    /* That version's constants (tuning.cc): base and per-hop latencies {LL, LL128, Simple},
     * hops over NVLink, PCI and the network; the LL bandwidth caps [row][1 node, 2, more];
     * per-channel caps of Ring/LL128 [arch], Tree/LL128 and Tree [arch][1 node, 2, more]. */
    double base_lat[SIM_NUM_ALGOS][3];
    double hw_lat[3][SIM_NUM_ALGOS][3];
    double ll_max[4][3];
    double ring_ll128_max[4], tree_ll128_max[4][3], tree_max[4][3];
    char why[640]; /* the defaults taken, for the output */
} sim_nccl_t;

/* The NCCL releases whose constants the model carries: 2.19 to 2.30 (the default). */
#define SIM_NCCL_VERSION_MIN 19
#define SIM_NCCL_VERSION_MAX 30

/* "2.21" or "2.21.5" (the patch level changes no constant) to its minor number. -1 with a
 * message for anything else or a release outside the range. */
int sim_nccl_version_parse(const char *s, int *minor);

/* Fill the model from the graph and node 0's topology with NCCL 2.`version`'s constants;
 * NCCL_ALGO / NCCL_PROTO are read from the environment as NCCL reads them (a list, "^"
 * negating). -1 with a message on a bad list. */
int sim_nccl_init(sim_nccl_t *m, const br_graph_t *g, const br_topo_t *topo0, int version);

/* The fastest (algorithm, protocol) NCCL's model picks for func (BR_FUNC_*) on `bytes` (per
 * rank for AllGather/ReduceScatter, as br_op_bytes), its channels and time (us). -1 when
 * nothing is enabled. */
int sim_nccl_predict(const sim_nccl_t *m, int func, size_t bytes, int *algo, int *proto, int *nch,
                     double *us);

const char *sim_nccl_algo_name(int algo);

#endif /* BR_SIM_NCCL_H_ */
