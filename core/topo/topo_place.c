/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Placing a rank in its node's topology (br_topo_place): its position in a depth-first
 * walk of the PCI tree (so that sorting ranks by it keeps devices under one switch, then
 * one CPU, together), the NET it uses by affinity and why, and the node facts the graph
 * search needs (GPU link bandwidth, the slowest and farthest GPU-to-GPU paths). Reads an
 * immutable topology; any thread.
 */
#include <stdio.h>
#include <string.h>

#include "topo_int.h"

/* Depth-first position of node n: children are visited in node order, roots (nodes
 * without parent) likewise. Quadratic in the node count, which is small (a DGX: ~40). */
static int dfs_position(const br_topo_t *topo, int n)
{
    int pos = 0, found = -1;
    /* An explicit stack of (node, next child to try) avoids recursion on deep trees. */
    int stack[64], next[64], depth = 0;
    for (int root = 0; root < topo->nnodes && found < 0; root++) {
        if (topo->nodes[root].parent >= 0) {
            continue;
        }
        stack[0] = root;
        next[0] = 0;
        depth = 1;
        if (root == n) {
            found = pos;
        }
        pos++;
        while (depth > 0 && found < 0) {
            int top = stack[depth - 1], child = -1;
            for (int k = next[depth - 1]; k < topo->nnodes; k++) {
                if (topo->nodes[k].parent == top) {
                    child = k;
                    break;
                }
            }
            if (child < 0 || depth == 64) {
                depth--;
                continue;
            }
            next[depth - 1] = child + 1;
            if (child == n) {
                found = pos;
            }
            pos++;
            stack[depth] = child;
            next[depth] = 0;
            depth++;
        }
    }
    return found < 0 ? n : found;
}

/* Is path a better than path b for reaching a NIC: closer type, then more bandwidth. */
static int path_better(const br_topo_path_t *a, const br_topo_path_t *b)
{
    return a->type < b->type || (a->type == b->type && a->bw > b->bw);
}

/* The NETs tied for best from node (t, i): a bit mask (NETs below 64) and the best path. */
static uint64_t best_nets(const br_topo_t *topo, br_topo_type_t t, int i, br_topo_path_t *best)
{
    uint64_t mask = 0;
    best->type = BR_TOPO_PATH_DIS;
    best->bw = 0.0f;
    for (int k = 0; k < topo->count[BR_TOPO_NET] && k < 64; k++) {
        const br_topo_path_t *p = br_topo_path(topo, t, i, BR_TOPO_NET, k);
        if (p == NULL) {
            continue;
        }
        if (path_better(p, best)) {
            *best = *p;
            mask = 0;
        }
        if (p->type == best->type && p->bw == best->bw) {
            mask |= (uint64_t)1 << k;
        }
    }
    return mask;
}

int br_topo_gpu_spread(const br_topo_t *topo, int g)
{
    br_topo_path_t b;
    uint64_t mine = best_nets(topo, BR_TOPO_GPU, g, &b);
    int spread = 0;
    for (int o = 0; o < g; o++) {
        spread += best_nets(topo, BR_TOPO_GPU, o, &b) == mine;
    }
    return spread;
}

/* The k-th set bit of mask (k taken modulo the bit count). */
static int nth_bit(uint64_t mask, int k)
{
    int n = __builtin_popcountll(mask);
    if (n == 0) {
        return -1;
    }
    k %= n;
    for (int b = 0; b < 64; b++) {
        if ((mask >> b & 1) && k-- == 0) {
            return b;
        }
    }
    return -1;
}

/* Node facts: the slowest and farthest GPU pair, and GPU g's own bandwidth. */
static void gpu_facts(const br_topo_t *topo, int g, br_topo_place_t *pl)
{
    int ngpus = topo->count[BR_TOPO_GPU];
    pl->intra_bw = 0.0f;
    pl->intra_type = -1;
    for (int a = 0; a < ngpus; a++) {
        for (int b = 0; b < ngpus; b++) {
            const br_topo_path_t *p = br_topo_path(topo, BR_TOPO_GPU, a, BR_TOPO_GPU, b);
            if (a == b || p == NULL) {
                continue;
            }
            if (pl->intra_type < 0 || p->bw < pl->intra_bw) {
                pl->intra_bw = p->bw;
            }
            pl->intra_type = p->type > pl->intra_type ? p->type : pl->intra_type;
        }
    }
    pl->gpu_bw = 0.0f;
    if (g < 0) {
        return;
    }
    const br_topo_node_t *node = br_topo_node(topo, BR_TOPO_GPU, g);
    float pci = 0.0f;
    for (int l = 0; l < node->nlinks; l++) {
        if (node->links[l].type == BR_TOPO_LINK_NVL) {
            pl->gpu_bw += node->links[l].bw;
        } else if (node->links[l].type == BR_TOPO_LINK_PCI && pci == 0.0f) {
            pci = node->links[l].bw;
        }
    }
    pl->gpu_bw = pl->gpu_bw > 0.0f ? pl->gpu_bw : pci;
}

void br_topo_place(const br_topo_t *topo, int gpu, int cpu, int spread, br_topo_place_t *pl,
                   char *why, size_t why_len)
{
    uint64_t host = pl->host;
    memset(pl, 0, sizeof(*pl));
    pl->host = host;
    pl->gpu = pl->gpu_dev = pl->cpu = pl->net = pl->net_dev = -1;
    pl->net_path = BR_TOPO_PATH_DIS;
    pl->ngpus = topo->count[BR_TOPO_GPU];
    pl->nnets = topo->count[BR_TOPO_NET];
    if (gpu >= 0 && gpu < pl->ngpus) {
        const br_topo_node_t *g = br_topo_node(topo, BR_TOPO_GPU, gpu);
        pl->gpu = gpu;
        pl->gpu_dev = g->gpu.dev;
        pl->sm = g->gpu.sm;
        pl->cpu = br_topo_local_cpu(topo, BR_TOPO_GPU, gpu);
        pl->order = dfs_position(topo, br_topo_index(topo, BR_TOPO_GPU, gpu));
    } else {
        if (cpu < 0 || cpu >= topo->count[BR_TOPO_CPU]) {
            cpu = br_topo_process_cpu(topo);
        }
        pl->cpu = cpu < 0 ? (topo->count[BR_TOPO_CPU] > 0 ? 0 : -1) : cpu;
        pl->order =
            pl->cpu >= 0 ? dfs_position(topo, br_topo_index(topo, BR_TOPO_CPU, pl->cpu)) : 0;
    }
    if (pl->cpu >= 0) {
        pl->cpu_vendor = br_topo_node(topo, BR_TOPO_CPU, pl->cpu)->cpu.vendor_id;
    }
    gpu_facts(topo, pl->gpu, pl);

    br_topo_path_t best;
    br_topo_type_t from = pl->gpu >= 0 ? BR_TOPO_GPU : BR_TOPO_CPU;
    int from_i = pl->gpu >= 0 ? pl->gpu : pl->cpu;
    if (why != NULL && why_len > 0) {
        snprintf(why, why_len, "no network device in the topology");
    }
    if (pl->nnets == 0 || from_i < 0) {
        return;
    }
    pl->net_near = best_nets(topo, from, from_i, &best);
    pl->net = nth_bit(pl->net_near, spread < 0 ? 0 : spread);
    if (pl->net < 0) {
        return;
    }
    const br_topo_node_t *net = br_topo_node(topo, BR_TOPO_NET, pl->net);
    pl->net_dev = net->net.dev;
    pl->net_bw = br_topo_net_bw(net);
    pl->net_path = best.type;
    if (why != NULL && why_len > 0) {
        int ties = __builtin_popcountll(pl->net_near);
        char tie[96] = "";
        if (ties > 1) {
            snprintf(tie, sizeof(tie), "; %d NICs are as close, this one by the %s's position",
                     ties, pl->gpu >= 0 ? "GPU" : "rank");
        }
        snprintf(why, why_len, "%s from %s %d at %s, %.1f GB/s%s", net->net.name,
                 pl->gpu >= 0 ? "GPU" : "CPU", pl->gpu >= 0 ? pl->gpu : pl->cpu,
                 br_topo_path_str(best.type), (double)best.bw, tie);
    }
}
