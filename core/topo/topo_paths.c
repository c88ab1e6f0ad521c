/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Paths between every pair of GPUs, CPUs, NETs and the NVSwitch, computed the way NCCL's
 * src/graph/paths.cc does:
 *
 *  1. From every such node b, a breadth-first search gives every node's path to b. A
 *     path's type is the worst of its links' types, where a PCI hop between two switches
 *     counts as PXB and a PCI hop into or out of a CPU as PHB; its bandwidth is its
 *     narrowest link. A node keeps the best path found (type, then bandwidth, then fewer
 *     hops). GPUs do not forward traffic, except over NVLink from a GPU one NVLink hop
 *     away from b: such a path is NVB.
 *  2. GPU pairs farther apart than P2P allows (PXB; SYS on AMD CPUs with at most two
 *     GPUs) are routed through the CPU closest to the destination.
 *  3. A GPU reaches a NIC through another GPU (PXN) when that GPU is the NIC's local GPU,
 *     is NVLink-connected to it, sits close to the NIC (P2C or better) with GPU Direct
 *     RDMA, and is better placed than the direct path.
 *  4. Without GPU Direct RDMA (either end lacks it, or the NIC is farther than P2C), a
 *     GPU's traffic to and from a NIC goes through its CPU.
 *
 * What NCCL also applies but needs a communicator is left out: NCCL_P2P_LEVEL and
 * NCCL_NET_GDR_LEVEL, NVML's P2P status, and peers that P2P and SHM cannot connect.
 */
#include <stdlib.h>
#include <string.h>

#include "topo_int.h"
#include "util.h"

#define MAX_CHANNELS 64 /* NCCL's MAXCHANNELS, over which it spreads GPUs on NICs */

/* The types with paths to them. */
static int has_paths(int t)
{
    return t == BR_TOPO_GPU || t == BR_TOPO_CPU || t == BR_TOPO_NET || t == BR_TOPO_NVS;
}

/* The path from node n to the i-th node of type t. */
static br_topo_path_t *path_of(br_topo_t *topo, int n, int t, int i)
{
    return &topo->paths[t][(size_t)n * (size_t)topo->count[t] + (size_t)i];
}

static int has_link(const br_topo_node_t *node, int peer, int type)
{
    for (int l = 0; l < node->nlinks; l++) {
        if (node->links[l].peer == peer && node->links[l].type == type) {
            return 1;
        }
    }
    return 0;
}

/* Step 1 for one base node: every node's path to it. */
static ncclResult_t bfs(br_topo_t *topo, int base, int *frontier, int *next_frontier, char *queued)
{
    const br_topo_node_t *b = &topo->nodes[base];
    int t = b->type, bi = b->index, nf = 1;
    frontier[0] = base;
    *path_of(topo, base, t, bi) =
        (br_topo_path_t){.type = BR_TOPO_PATH_LOC, .bw = BR_TOPO_LOC_BW, .next = -1, .via = -1};
    while (nf > 0) {
        int nn = 0;
        memset(queued, 0, (size_t)topo->nnodes);
        for (int f = 0; f < nf; f++) {
            const br_topo_node_t *node = &topo->nodes[frontier[f]];
            const br_topo_path_t *p = path_of(topo, frontier[f], t, bi);
            for (int l = 0; l < node->nlinks; l++) {
                const br_topo_link_t *link = &node->links[l];
                const br_topo_node_t *rem = &topo->nodes[link->peer];
                /* A GPU forwards only NVLink to NVLink, one GPU away from the base. */
                if (frontier[f] != base && node->type == BR_TOPO_GPU &&
                    (link->type != BR_TOPO_LINK_NVL || rem->type != BR_TOPO_GPU || p->hops > 1)) {
                    continue;
                }
                float bw = p->bw < link->bw ? p->bw : link->bw;
                int type = link->type == BR_TOPO_LINK_NET ? BR_TOPO_PATH_LOC : link->type;
                if (node->type == BR_TOPO_PCI && rem->type == BR_TOPO_PCI) {
                    type = BR_TOPO_PATH_PXB;
                }
                if (link->type == BR_TOPO_LINK_PCI &&
                    (node->type == BR_TOPO_CPU || rem->type == BR_TOPO_CPU)) {
                    type = BR_TOPO_PATH_PHB;
                }
                if (node->type == BR_TOPO_GPU && p->type == BR_TOPO_PATH_NVL &&
                    type == BR_TOPO_PATH_NVL && p->hops == 1) {
                    type = BR_TOPO_PATH_NVB;
                }
                type = type > p->type ? type : p->type;
                br_topo_path_t *rp = path_of(topo, link->peer, t, bi);
                /* The path runs from rem back over this link: it needs the link back (NCCL
                 * fails without one; a one-way pcilink is just not used that way). */
                if ((type < rp->type || (type == rp->type && rp->bw < bw) ||
                     (type == rp->type && rp->bw == bw && rp->hops > p->hops + 1)) &&
                    has_link(rem, frontier[f], link->type)) {
                    *rp = (br_topo_path_t){.type = type,
                                           .bw = bw,
                                           .hops = p->hops + 1,
                                           .next = frontier[f],
                                           .via = -1};
                    if (!queued[link->peer]) {
                        queued[link->peer] = 1;
                        next_frontier[nn++] = link->peer;
                    }
                }
            }
        }
        memcpy(frontier, next_frontier, (size_t)nn * sizeof(*frontier));
        nf = nn;
    }
    return ncclSuccess;
}

/* NCCL's mergePathType: C2C then PHB is P2C; otherwise the worse of the two. */
static int merge_type(int a, int b)
{
    int hi = a > b ? a : b, lo = a > b ? b : a;
    return hi == BR_TOPO_PATH_PHB && lo == BR_TOPO_PATH_C2C ? BR_TOPO_PATH_P2C : hi;
}

/* Route node (t1, i1) to (t2, i2) through (tx, ix): NCCL's addInterStep. */
static void inter_step(br_topo_t *topo, int tx, int ix, int t1, int i1, int t2, int i2)
{
    int src = topo->by_type[t1][i1], x = topo->by_type[tx][ix];
    const br_topo_path_t *a = path_of(topo, src, tx, ix), *b = path_of(topo, x, t2, i2);
    br_topo_path_t *p = path_of(topo, src, t2, i2);
    br_topo_path_t r = {.type = merge_type(a->type, b->type),
                        .bw = a->bw < b->bw ? a->bw : b->bw,
                        .hops = a->hops + b->hops,
                        .next = a->next >= 0 ? a->next : b->next,
                        .via = x};
    if (tx == BR_TOPO_GPU) {
        r.type = BR_TOPO_PATH_PXN;
    }
    *p = r;
}

/* NCCL's ncclTopoGetLocal: the nodes of type t2 with the best bandwidth from (t1, i1),
 * and among them the best path type. Returns their count; out gets their indexes. */
static int local_nodes(const br_topo_t *topo, int t1, int i1, int t2, int *out)
{
    float best_bw = 0;
    int best_type = BR_TOPO_PATH_DIS, count = 0;
    for (int i = 0; i < topo->count[t2]; i++) {
        const br_topo_path_t *p = br_topo_path(topo, t1, i1, t2, i);
        if (p->bw > best_bw || (p->bw == best_bw && p->type < best_type)) {
            best_bw = p->bw;
            best_type = p->type;
            count = 0;
        }
        if (p->bw == best_bw && p->type == best_type) {
            out[count++] = i;
        }
    }
    return count;
}

int br_topo_local_cpu(const br_topo_t *topo, br_topo_type_t t, int i)
{
    int *cpus = NULL, best = -1;
    if (br_topo_index(topo, t, i) < 0 || topo->count[BR_TOPO_CPU] == 0 ||
        (cpus = malloc((size_t)topo->count[BR_TOPO_CPU] * sizeof(*cpus))) == NULL) {
        return -1;
    }
    int n = local_nodes(topo, t, i, BR_TOPO_CPU, cpus);
    for (int k = 0; k < n; k++) {
        if (best < 0 || br_topo_path(topo, t, i, BR_TOPO_CPU, cpus[k])->hops <
                            br_topo_path(topo, t, i, BR_TOPO_CPU, best)->hops) {
            best = cpus[k];
        }
    }
    free(cpus);
    return best;
}

static int mirror_bits(int val, int pow2)
{
    int m = 0;
    for (int b = 1, mb = pow2 >> 1; b < pow2; b <<= 1, mb >>= 1) {
        if (val & b) {
            m |= mb;
        }
    }
    return m;
}

/* NCCL's ncclTopoGetLocalNet (policy AUTO): the NET GPU g uses on channel c, -1 if none.
 * scratch holds two arrays of max(GPUs, NETs) entries. */
static int local_net(const br_topo_t *topo, int g, int c, int *nets, int *gpus)
{
    int nnets = local_nodes(topo, BR_TOPO_GPU, g, BR_TOPO_NET, nets);
    if (nnets == 0) {
        return -1;
    }
    int ngpus = local_nodes(topo, BR_TOPO_NET, nets[0], BR_TOPO_GPU, gpus);
    if (ngpus == 0) {
        return -1;
    }
    int per_gpu = (nnets + ngpus - 1) / ngpus;
    int dev = br_topo_node(topo, BR_TOPO_GPU, g)->gpu.dev;
    int net = (dev < 0 ? 0 : dev) % ngpus;
    if ((nnets & (nnets - 1)) == 0) {
        net = mirror_bits(net, nnets);
    }
    net += c % per_gpu;
    return nets[net % nnets];
}

/* NCCL's ncclTopoGetLocalGpu: the GPU among those closest to NET n that uses n on the
 * lowest channel; -1 if none. */
static int local_gpu(const br_topo_t *topo, int n, int *scratch)
{
    int m = topo->count[BR_TOPO_GPU] > topo->count[BR_TOPO_NET] ? topo->count[BR_TOPO_GPU]
                                                                : topo->count[BR_TOPO_NET];
    int *gpus = scratch, *nets = scratch + m, *gpus2 = scratch + 2 * m;
    int ngpus = local_nodes(topo, BR_TOPO_NET, n, BR_TOPO_GPU, gpus);
    for (int c = 0; c < MAX_CHANNELS; c++) {
        for (int k = 0; k < ngpus; k++) {
            if (local_net(topo, gpus[k], c, nets, gpus2) == n) {
                return gpus[k];
            }
        }
    }
    return -1;
}

/* NCCL's ncclTopoCheckGdr with its default levels: both ends support it, the GPU (or
 * the PXN relay) is at most P2C from the NIC, and for reads before sm 80 the GPU has an
 * NVLink peer (or is alone). */
static int gdr_ok(const br_topo_t *topo, int g, int n, int read)
{
    const br_topo_node_t *gpu = br_topo_node(topo, BR_TOPO_GPU, g);
    const br_topo_node_t *net = br_topo_node(topo, BR_TOPO_NET, n);
    if (!net->net.gdr || !gpu->gpu.gdr) {
        return 0;
    }
    if (read && gpu->gpu.sm < 80) {
        int nvlink = topo->count[BR_TOPO_GPU] == 1;
        for (int i = 0; i < topo->count[BR_TOPO_GPU] && !nvlink; i++) {
            nvlink = i != g &&
                     br_topo_path(topo, BR_TOPO_GPU, g, BR_TOPO_GPU, i)->type == BR_TOPO_PATH_NVL;
        }
        if (!nvlink) {
            return 0;
        }
    }
    const br_topo_path_t *p = br_topo_path(topo, BR_TOPO_GPU, g, BR_TOPO_NET, n);
    int distance = p->type;
    if (distance == BR_TOPO_PATH_PXN && p->via >= 0) {
        /* Through a relay GPU: its own distance to the NIC counts. */
        distance = br_topo_path(topo, BR_TOPO_GPU, topo->nodes[p->via].index, BR_TOPO_NET, n)->type;
    }
    return distance <= BR_TOPO_PATH_P2C;
}

/* Step 2: GPU pairs beyond the P2P level go through the CPU next to the destination. */
static void gpu_p2p_paths(br_topo_t *topo)
{
    int ngpus = topo->count[BR_TOPO_GPU], level = BR_TOPO_PATH_PXB;
    const br_topo_node_t *cpu0 = br_topo_node(topo, BR_TOPO_CPU, 0);
    if (cpu0 != NULL && cpu0->cpu.arch_id == BR_TOPO_ARCH_X86 &&
        cpu0->cpu.vendor_id == BR_TOPO_VENDOR_AMD && ngpus <= 2) {
        level = BR_TOPO_PATH_SYS;
    }
    for (int g = 0; g < ngpus; g++) {
        int cpu = br_topo_local_cpu(topo, BR_TOPO_GPU, g);
        for (int p = 0; p < ngpus && cpu >= 0; p++) {
            if (br_topo_path(topo, BR_TOPO_GPU, p, BR_TOPO_GPU, g)->type > level) {
                inter_step(topo, BR_TOPO_CPU, cpu, BR_TOPO_GPU, p, BR_TOPO_GPU, g);
            }
        }
    }
}

/* C2C then PHB to a NIC counts as P2C when that NIC is one of the GPU's closest. */
static void p2c_paths(br_topo_t *topo, int *nets)
{
    for (int g = 0; g < topo->count[BR_TOPO_GPU]; g++) {
        int c = br_topo_local_cpu(topo, BR_TOPO_GPU, g);
        if (c < 0) {
            continue;
        }
        int nn = local_nodes(topo, BR_TOPO_GPU, g, BR_TOPO_NET, nets);
        for (int k = 0; k < nn; k++) {
            int n = nets[k];
            if (merge_type(br_topo_path(topo, BR_TOPO_GPU, g, BR_TOPO_CPU, c)->type,
                           br_topo_path(topo, BR_TOPO_NET, n, BR_TOPO_CPU, c)->type) ==
                BR_TOPO_PATH_P2C) {
                br_topo_path_t *a = path_of(topo, topo->by_type[BR_TOPO_GPU][g], BR_TOPO_NET, n);
                br_topo_path_t *b = path_of(topo, topo->by_type[BR_TOPO_NET][n], BR_TOPO_GPU, g);
                a->type = a->type < BR_TOPO_PATH_P2C ? a->type : BR_TOPO_PATH_P2C;
                b->type = b->type < BR_TOPO_PATH_P2C ? b->type : BR_TOPO_PATH_P2C;
            }
        }
    }
}

/* Steps 3 and 4 for GPU g and NET n. */
static void gpu_net_path(br_topo_t *topo, int g, int n, int *scratch)
{
    int peer = local_gpu(topo, n, scratch);
    if (peer >= 0 && peer != g) {
        const br_topo_path_t *pn = br_topo_path(topo, BR_TOPO_GPU, peer, BR_TOPO_NET, n);
        const br_topo_path_t *gn = br_topo_path(topo, BR_TOPO_GPU, g, BR_TOPO_NET, n);
        if (pn->type <= BR_TOPO_PATH_P2C && gdr_ok(topo, peer, n, 1) &&
            br_topo_path(topo, BR_TOPO_GPU, peer, BR_TOPO_GPU, g)->type <= BR_TOPO_PATH_NVL &&
            (pn->bw > gn->bw || gn->type > BR_TOPO_PATH_PXN)) {
            inter_step(topo, BR_TOPO_GPU, peer, BR_TOPO_GPU, g, BR_TOPO_NET, n);
        }
    }
    if (br_topo_path(topo, BR_TOPO_GPU, g, BR_TOPO_NET, n)->type < BR_TOPO_PATH_PHB &&
        !gdr_ok(topo, g, n, 0)) {
        int cpu = br_topo_local_cpu(topo, BR_TOPO_GPU, g);
        if (cpu >= 0) {
            inter_step(topo, BR_TOPO_CPU, cpu, BR_TOPO_NET, n, BR_TOPO_GPU, g);
            inter_step(topo, BR_TOPO_CPU, cpu, BR_TOPO_GPU, g, BR_TOPO_NET, n);
        }
    }
}

ncclResult_t br_topo_paths_compute(br_topo_t *topo)
{
    int nn = topo->nnodes, *frontier = NULL, *next = NULL, *scratch = NULL;
    char *queued = NULL;
    ncclResult_t res = ncclSuccess;
    int m = topo->count[BR_TOPO_GPU] > topo->count[BR_TOPO_NET] ? topo->count[BR_TOPO_GPU]
                                                                : topo->count[BR_TOPO_NET];

    for (int t = 0; t < BR_TOPO_NTYPES; t++) {
        free(topo->paths[t]);
        topo->paths[t] = NULL;
        if (!has_paths(t) || topo->count[t] == 0) {
            continue;
        }
        BR_CHECK(br_calloc(&topo->paths[t], (size_t)nn * (size_t)topo->count[t], "topology paths"));
        for (size_t k = 0; k < (size_t)nn * (size_t)topo->count[t]; k++) {
            topo->paths[t][k] = (br_topo_path_t){.type = BR_TOPO_PATH_DIS, .next = -1, .via = -1};
        }
    }
    BR_CHECK_GOTO(br_calloc(&frontier, (size_t)nn + 1, "topology search"), res, out);
    BR_CHECK_GOTO(br_calloc(&next, (size_t)nn + 1, "topology search"), res, out);
    BR_CHECK_GOTO(br_calloc(&queued, (size_t)nn + 1, "topology search"), res, out);
    BR_CHECK_GOTO(br_calloc(&scratch, 3 * (size_t)m + 1, "topology search"), res, out);
    /* NCCL's order: CPUs, GPUs, NETs, then the NVSwitch. */
    static const int order[] = {BR_TOPO_CPU, BR_TOPO_GPU, BR_TOPO_NET, BR_TOPO_NVS};
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < topo->count[order[k]]; i++) {
            BR_CHECK_GOTO(bfs(topo, topo->by_type[order[k]][i], frontier, next, queued), res, out);
        }
    }
    gpu_p2p_paths(topo);
    p2c_paths(topo, scratch);
    for (int n = 0; n < topo->count[BR_TOPO_NET]; n++) {
        for (int g = 0; g < topo->count[BR_TOPO_GPU]; g++) {
            gpu_net_path(topo, g, n, scratch);
        }
    }
out:
    free(frontier);
    free(next);
    free(queued);
    free(scratch);
    return res;
}
