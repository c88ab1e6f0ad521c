/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The search, in NCCL's terms but without NCCL's backtracking: the per-channel bandwidth
 * is the largest entry of NCCL's speed table (by compute capability; the intra-node table
 * on one node, the inter-node table across nodes) that the slowest path a ring crosses can
 * carry, and the search channels are as many as the links can feed at that speed (a GPU's
 * NVLink or PCI bandwidth on one node, the NICs a node's ranks use across nodes), doubled
 * as NCCL's ncclTopoDupChannels doubles them. The order of a node's ranks per search
 * channel follows the PCI tree; on NVLink-only nodes it is rotated so each channel enters
 * and leaves the node by its own NIC (multi-rail). Pure functions; any thread.
 */
#include <string.h>

#include "graph_int.h"

/* NCCL's per-channel speeds (GB/s, src/graph/search.cc), fastest first. */
static const float speed_intra[] = {40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3};
static const float speed_intra_sm90[] = {60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3};
static const float speed_intra_sm100[] = {90, 80, 70, 60, 50, 40, 30, 24, 20, 19};
static const float speed_inter[] = {48, 30, 28, 24, 20, 18,   15,   12,    10,   9,
                                    7,  6,  5,  4,  3,  2.4f, 1.2f, 0.24f, 0.12f};
static const float speed_inter_sm90[] = {48, 45, 42, 40, 30,   24,   22,    20,   17.5f,
                                         15, 12, 6,  3,  2.4f, 1.2f, 0.24f, 0.12f};

#define NSPEEDS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The largest speed of the table at most max (the smallest when none fits). */
static float pick_speed(int sm, int inter, float max)
{
    const float *t;
    int n;
    if (inter) {
        t = sm >= 90 ? speed_inter_sm90 : speed_inter;
        n = sm >= 90 ? NSPEEDS(speed_inter_sm90) : NSPEEDS(speed_inter);
    } else if (sm >= 100) {
        t = speed_intra_sm100;
        n = NSPEEDS(speed_intra_sm100);
    } else {
        t = sm >= 90 ? speed_intra_sm90 : speed_intra;
        n = sm >= 90 ? NSPEEDS(speed_intra_sm90) : NSPEEDS(speed_intra);
    }
    for (int i = 0; i < n; i++) {
        if (t[i] <= max) {
            return t[i];
        }
    }
    return t[n - 1];
}

/* NETs (bit mask) the ranks of a node use, and their bandwidth summed. */
static uint64_t node_nets(const br_graph_t *g, int node, float *bw_p)
{
    uint64_t used = 0;
    float bw = 0.0f;
    for (int r = 0; r < g->nranks; r++) {
        const br_topo_place_t *p = &g->place[r];
        if (g->node_of[r] != node || p->net < 0 || p->net >= 64 || (used >> p->net & 1)) {
            continue;
        }
        used |= (uint64_t)1 << p->net;
        bw += p->net_bw;
    }
    *bw_p = bw;
    return used;
}

void br_graph_search(const br_graph_t *g, const br_graph_opts_t *opts, br_graph_search_t *s)
{
    float net_bw = 0.0f, intra_bw = 0.0f, gpu_bw = 0.0f, node_net_bw = 0.0f;
    memset(s, 0, sizeof(*s));
    s->type_intra = BR_TOPO_PATH_LOC;
    s->type_inter = g->nnodes > 1 ? BR_TOPO_PATH_PIX : BR_TOPO_PATH_LOC;
    for (int r = 0; r < g->nranks; r++) {
        const br_topo_place_t *p = &g->place[r];
        int first = r == 0;
        net_bw = first || p->net_bw < net_bw ? p->net_bw : net_bw;
        gpu_bw = first || p->gpu_bw < gpu_bw ? p->gpu_bw : gpu_bw;
        if (p->intra_type >= 0 && g->node_size[g->node_of[r]] > 1) {
            intra_bw = intra_bw == 0.0f || p->intra_bw < intra_bw ? p->intra_bw : intra_bw;
            s->type_intra = p->intra_type > s->type_intra ? p->intra_type : s->type_intra;
        }
        if (g->nnodes > 1 && p->net >= 0 && p->net_path > s->type_inter) {
            s->type_inter = p->net_path;
        }
    }
    for (int node = 0; node < g->nnodes; node++) {
        float bw;
        node_nets(g, node, &bw);
        node_net_bw = node == 0 || bw < node_net_bw ? bw : node_net_bw;
    }
    if (!g->gpus) {
        /* The host executor: its own channel count; bandwidths for the log only. */
        s->nsearch = opts->host_channels;
        s->bw_inter = g->nnodes > 1 ? net_bw : 0.0f;
        s->bw_intra = intra_bw;
        return;
    }
    float max_bw, total;
    if (g->nnodes == 1) {
        max_bw = intra_bw > 0.0f ? intra_bw : gpu_bw;
        total = gpu_bw;
    } else {
        max_bw = intra_bw > 0.0f && intra_bw < net_bw ? intra_bw : net_bw;
        total = node_net_bw;
    }
    float speed = pick_speed(g->sm, g->nnodes > 1, max_bw);
    int n = (int)(total / speed);
    n = n < 1 ? 1 : (n > BR_MAX_CHANNELS / 2 ? BR_MAX_CHANNELS / 2 : n);
    /* ncclTopoDupChannels: fast channels are doubled, each at half the speed, except on
     * sm80+ when they are already many and slower than 50 GB/s. */
    if (speed >= 25.0f && !(g->sm >= 80 && speed < 50.0f && n > 4) &&
        2 * n <= BR_MAX_CHANNELS / 2) {
        n *= 2;
        speed /= 2.0f;
    }
    s->nsearch = n;
    s->bw_intra = s->bw_inter = speed;
}

void br_graph_search_chain(const br_graph_t *g, const br_graph_nodes_t *nodes, int s, int node,
                           int *out, int *net_in, int *net_out)
{
    const int *base = nodes->base + nodes->node_start[node];
    int size = g->node_size[node], nvl = 1, k = 0;
    float bw;
    uint64_t used = node_nets(g, node, &bw);

    memcpy(out, base, (size_t)size * sizeof(int));
    *net_in = *net_out = -1;
    if (used == 0 || g->nnodes == 1) {
        return; /* one node: no ring leaves it, no NIC to line up with */
    }
    /* This channel's NIC: round-robin over the NICs the node's ranks chose. */
    int pick = s % __builtin_popcountll(used), nic = -1;
    for (int b = 0; b < 64 && nic < 0; b++) {
        if ((used >> b & 1) && pick-- == 0) {
            nic = b;
        }
    }
    for (int i = 0; i < size; i++) {
        const br_topo_place_t *p = &g->place[base[i]];
        nvl &= p->gpu >= 0 && p->intra_type >= 0 && p->intra_type <= BR_TOPO_PATH_NVL;
        if (p->net == nic) {
            *net_in = *net_out = p->net_dev;
        }
    }
    if (!nvl || size < 2) {
        return; /* PCI or CPU: the tree order is the fast one; keep it */
    }
    /* Any order is as fast: enter at the rank that uses this NIC, leave at the next rank
     * (in tree order) as close to it, everyone else in between. */
    int entry = -1, exit = -1;
    for (int i = 0; i < size && entry < 0; i++) {
        entry = g->place[base[i]].net == nic ? i : -1;
    }
    for (int i = 1; i < size && exit < 0; i++) {
        int j = (entry + i) % size;
        exit = (g->place[base[j]].net_near >> nic & 1) ? j : -1;
    }
    exit = exit >= 0 ? exit : (entry + size - 1) % size;
    out[k++] = base[entry];
    for (int i = 0; i < size; i++) {
        if (i != entry && i != exit) {
            out[k++] = base[i];
        }
    }
    out[k] = base[exit];
}
