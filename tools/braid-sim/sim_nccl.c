/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL's tuning model as braid-sim's --model nccl runs it (facts from NCCL's
 * src/graph/tuning.cc and search.cc; nccl-internals.md sections 4.3-4.4):
 *
 *     time (us) = latency + bytes / (1000 x algorithm bandwidth in GB/s)
 *
 * for every (algorithm, protocol) the cluster allows; the smallest time wins. The graphs NCCL
 * searches for each algorithm are derived from Braid's ring graph:
 *   Ring, PAT: the ring graph as built (search channels, per-channel speeds, path types).
 *   Tree: the ring's channels; at two nodes the intra-node speed rises, as NCCL's search
 *     raises it, to the largest speed-table entry up to twice the NIC's that the GPU's
 *     NVLink carries on every channel.
 *   NVLS, NVLSTree: one channel per GPU (at most 16) on one node, one per head GPU with a
 *     NIC across nodes; on one node at the top entry of the intra-node speed table (60
 *     GB/s on sm90, 90 on sm100), across nodes at the NIC's speed.
 *   CollNetDirect/Chain: one channel per NIC at the NIC's speed.
 * NCCL's constants are copied as facts into the tables below: those of 2.30 (the newest
 * release read, 2.30.7), and what each release from 2.19 on had instead where it differed
 * (version_constants, from the releases' tuning.cc). The NVLS/NVLSTree bandwidth is 2.28's
 * formula (NVLS efficiency, two pipelined operations) at every version: before 2.28 NCCL
 * derived it from its own NVLS graph's speeds, which braid-sim does not search.
 */
#include "sim_nccl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "coll.h"
#include "plan.h"
#include "util.h"

static const char *const algo_names[SIM_NUM_ALGOS] = {
    "Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"};

/* NCCL 2.30's latencies (us). {LL, LL128, Simple} per algorithm. */
static const double base_lat_230[SIM_NUM_ALGOS][3] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0},
                                                      {0, 0, 0},        {0, 0, 0},        {0, 0, 0},
                                                      {8.0, 8.0, 8.0}};
/* Per hop: NVLink, PCI, network. */
static const double hw_lat_230[3][SIM_NUM_ALGOS][3] = {
    {{0.6, 1.25, 4.0},
     {0.6, 1.9, 3.4},
     {0, 0, 3.7},
     {0, 0, 2.8},
     {0, 0, 25},
     {0, 0, 25},
     {0, 0, 4.0}},
    {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 0}, {0, 0, 0}, {0, 0, 4.0}},
    {{5.0, 8.5, 14},
     {2.7, 4.0, 14.0},
     {0, 0, 31},
     {0, 0, 30},
     {0, 0, 18},
     {0, 0, 20.9},
     {0, 0, 14}}};
/* The bandwidth caps of Ring and Tree (LL, Ring/LL128, Tree/LL128, Tree) are the plan's
 * own copy of 2.30's (br_plan_gpu_constants). [arch: Volta, Ampere, Hopper, Blackwell]
 * [scale: 1 node, 2 nodes, more]. */
static const double nvls_tree_max[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0.0, 57.7, 45.5}, {0.0, 96.0, 80.0}};
static const double nvls_eff[4] = {0.0, 0.0, 0.85, 0.74};
/* The tree's bandwidth correction by log2(bytes / 64), per protocol. */
static const double tree_corr[3][24] = {{1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7,  .7,  .7,  .6,  .5,
                                         .4,  .4,  .5,  .6,  .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
                                        {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7,  .6,  .6,
                                         .6,  .6,  .6,  .6,  .8,  .9, .9, .9, .9, 1.0, 1.0, 1.0},
                                        {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5,
                                         .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};
/* sm90's inter-node search speeds (GB/s per channel), fastest first. */
static const float sm90_inter[] = {48.0f, 45.0f, 42.0f, 40.0f, 30.0f, 24.0f, 22.0f, 20.0f, 17.5f,
                                   15.0f, 12.0f, 6.0f,  3.0f,  2.4f,  1.2f,  0.24f, 0.12f};

const char *sim_nccl_algo_name(int algo)
{
    return algo >= 0 && algo < SIM_NUM_ALGOS ? algo_names[algo] : "?";
}

/* NCCL's compute-capability row; before 2.25 NCCL had no Blackwell row and took Hopper's. */
static int arch_row(const sim_nccl_t *m)
{
    int bw_row = m->version >= 25 ? 3 : 2;
    return m->sm >= 100 ? bw_row : m->sm >= 90 ? 2 : m->sm >= 80 ? 1 : 0;
}

int sim_nccl_version_parse(const char *s, int *minor)
{
    char *end = NULL;
    long v = -1;
    if (strncmp(s, "2.", 2) == 0 && s[2] >= '1' && s[2] <= '9') {
        v = strtol(s + 2, &end, 10);
        if (*end == '.' && end[1] >= '0' && end[1] <= '9') {
            (void)strtol(end + 1, &end, 10); /* the patch level */
        }
    }
    if (v < SIM_NCCL_VERSION_MIN || v > SIM_NCCL_VERSION_MAX || end == NULL || *end != '\0') {
        fprintf(stderr,
                "braid-sim: --nccl-version %s: not an NCCL release braid-sim has the constants of "
                "(2.%d to 2.%d, as 2.21 or 2.21.5)\n",
                s, SIM_NCCL_VERSION_MIN, SIM_NCCL_VERSION_MAX);
        return -1;
    }
    *minor = (int)v;
    return 0;
}

/* 2.30's tables, then what the chosen release had instead (each release's tuning.cc). */
static void version_constants(sim_nccl_t *m)
{
    int v = m->version;
    br_tune_constants_t k;

    br_plan_gpu_constants(&k);
    for (int a = 0; a < 4; a++) {
        m->ring_ll128_max[a] = k.per_ch_max_ring_ll128_bws[a][0];
        for (int s = 0; s < 3; s++) {
            m->ll_max[a][s] = k.ll_max_bws[a][s];
            m->tree_ll128_max[a][s] = k.per_ch_max_tree_ll128_bws[a][s];
            m->tree_max[a][s] = k.per_ch_max_tree_bws[a][s];
        }
    }
    memcpy(m->base_lat, base_lat_230, sizeof(m->base_lat));
    memcpy(m->hw_lat, hw_lat_230, sizeof(m->hw_lat));
    if (v <= 28) {
        m->hw_lat[2][SIM_NVLS_TREE][BR_PROTO_SIMPLE] = 14.0; /* 20.9 from 2.29 */
    }
    if (v <= 22) {
        /* Tree/Simple: no base latency, 28 us per hop everywhere (2.23: 8.4; 4, 4, 14). */
        m->base_lat[SIM_TREE][BR_PROTO_SIMPLE] = 0.0;
        for (int hw = 0; hw < 3; hw++) {
            m->hw_lat[hw][SIM_TREE][BR_PROTO_SIMPLE] = 28.0;
        }
    }
    if (v <= 20) {
        /* NVLS over NVLink 23 us (25 from 2.21); Hopper's LL caps were Ampere's. */
        m->hw_lat[0][SIM_NVLS][BR_PROTO_SIMPLE] = m->hw_lat[0][SIM_NVLS_TREE][BR_PROTO_SIMPLE] =
            23.0;
        memcpy(m->ll_max[2], m->ll_max[1], sizeof(m->ll_max[2]));
    }
}

static int log2i(size_t v)
{
    int l = -1;
    while (v != 0) {
        v >>= 1, l++;
    }
    return l;
}

static double min2(double a, double b)
{
    return a < b ? a : b;
}

/* NCCL_ALGO / NCCL_PROTO: a comma list of names, "^" negating it. */
static int parse_mask(const char *var, const char *const *names, int n, int *mask)
{
    const char *s = getenv(var);
    if (s == NULL || *s == '\0') {
        return 0;
    }
    int neg = s[0] == '^', bits = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s + neg);
    for (char *tok = strtok(buf, ","); tok != NULL; tok = strtok(NULL, ",")) {
        int found = 0;
        for (int i = 0; i < n; i++) {
            if (strcasecmp(tok, names[i]) == 0 ||
                (n == SIM_NUM_ALGOS && strcasecmp(tok, "collnet") == 0 &&
                 (i == SIM_COLLNET_DIRECT || i == SIM_COLLNET_CHAIN))) {
                bits |= 1 << i, found = 1;
            }
        }
        if (!found) {
            fprintf(stderr, "braid-sim: %s=%s: unknown name '%s' for --model nccl\n", var, s, tok);
            return -1;
        }
    }
    *mask = neg ? ((1 << n) - 1) & ~bits : bits;
    return 0;
}

int sim_nccl_init(sim_nccl_t *m, const br_graph_t *g, const br_topo_t *topo0, int version)
{
    static const char *const protos[3] = {"LL", "LL128", "Simple"};
    memset(m, 0, sizeof(*m));
    m->version = version;
    version_constants(m);
    m->nranks = g->nranks;
    m->nnodes = g->nnodes;
    m->ppn = g->nranks / g->nnodes;
    m->sm = g->sm;
    m->amd = g->cpu_vendor == 2;
    m->ring_nch = g->nsearch;
    m->comm_nch = g->nchannels;
    m->bw_intra = g->bw_intra;
    m->bw_inter = g->bw_inter;
    m->type_intra = g->type_intra;
    m->type_inter = g->type_inter;
    if (br_topo_count(topo0, BR_TOPO_NVS) > 0 && br_topo_count(topo0, BR_TOPO_GPU) > 0) {
        const br_topo_path_t *p = br_topo_path(topo0, BR_TOPO_GPU, 0, BR_TOPO_NVS, 0);
        m->nvs_bw = p != NULL ? p->bw : 0.0f;
    }
    m->nvls = m->nvs_bw > 0.0f && m->sm >= 90;
    m->nics = br_topo_count(topo0, BR_TOPO_NET);
    int coll = m->nics > 0, lat_set = 0;
    for (int i = 0; i < m->nics; i++) {
        const br_topo_node_t *n = br_topo_node(topo0, BR_TOPO_NET, i);
        int set;
        float lat = br_topo_net_latency(n, &set);
        m->nic_lat = lat > m->nic_lat ? lat : m->nic_lat;
        lat_set |= set;
        coll &= br_topo_net_coll(n) == 1;
    }
    m->collnet = coll && BR_PARAM_INT(COLLNET_ENABLE) && m->nnodes > 1;
    snprintf(m->why, sizeof(m->why),
             "NCCL 2.%d's tuning constants (--nccl-version 2.%d to 2.%d%s); "
             "NVLS %s (%s; multicast assumed, as NCCL_NVLS_ENABLE=2 finds it on such a node); "
             "CollNet %s (%s); NIC latency %.1f us (%s)",
             m->version, SIM_NCCL_VERSION_MIN, SIM_NCCL_VERSION_MAX,
             m->version < 28 ? "; NVLS bandwidth by 2.28's formula" : "", m->nvls ? "on" : "off",
             m->nvls      ? "NVSwitch and sm90+"
             : m->sm < 90 ? "below sm90"
                          : "no NVSwitch",
             m->collnet ? "on" : "off",
             m->collnet       ? "every <net> coll=\"1\", NCCL_COLLNET_ENABLE=1"
             : !coll          ? "no <net coll=\"1\">: no SHARP, NCCL's default"
             : m->nnodes == 1 ? "one node"
                              : "SHARP NICs, NCCL_COLLNET_ENABLE=0 (NCCL's default)",
             (double)m->nic_lat, lat_set ? "<net latency>" : "no <net latency>: NCCL's default 0");
    m->algo_mask = (1 << SIM_NUM_ALGOS) - 1;
    m->proto_mask = -1;
    if (parse_mask("NCCL_ALGO", algo_names, SIM_NUM_ALGOS, &m->algo_mask) != 0 ||
        parse_mask("NCCL_PROTO", protos, 3, &m->proto_mask) != 0) {
        return -1;
    }
    return 0;
}

/* The graph NCCL would search for algo: channels and per-channel speeds. */
static void algo_graph(const sim_nccl_t *m, int algo, int *nch, double *intra, double *inter)
{
    *nch = m->ring_nch;
    *intra = m->bw_intra;
    *inter = m->bw_inter;
    if (algo == SIM_TREE && m->nnodes == 2 && m->nvs_bw > 0.0f) {
        for (size_t i = 0; i < sizeof(sm90_inter) / sizeof(sm90_inter[0]); i++) {
            if (sm90_inter[i] <= 2.0f * m->bw_inter && sm90_inter[i] * *nch <= m->nvs_bw) {
                *intra = sm90_inter[i] > *intra ? sm90_inter[i] : *intra;
                break;
            }
        }
    } else if (algo == SIM_NVLS || algo == SIM_NVLS_TREE) {
        /* One node: the intra table's top; across nodes the search runs on the inter table,
         * one speed for both, which the NIC bounds. */
        double top = m->sm >= 100 ? 90.0 : 60.0;
        *intra = *inter = m->nnodes == 1 ? min2(top, m->nvs_bw) : m->bw_inter;
        *nch = m->nnodes == 1 ? (m->ppn < 16 ? m->ppn : 16) : (m->ppn < m->nics ? m->ppn : m->nics);
    } else if (algo == SIM_COLLNET_DIRECT || algo == SIM_COLLNET_CHAIN) {
        *nch = m->ppn < m->nics ? m->ppn : m->nics;
        *intra = *inter = m->bw_inter;
    }
}

/* Whether NCCL would consider (func, algo, proto) here at all. */
static int allowed(const sim_nccl_t *m, int func, int algo, int proto, int ring_backup)
{
    int agrs = func == BR_FUNC_ALLGATHER || func == BR_FUNC_REDUCESCATTER;
    int ar = func == BR_FUNC_ALLREDUCE;
    if (ring_backup ? algo != SIM_RING : !(m->algo_mask >> algo & 1)) {
        return 0;
    }
    if (!ar && !agrs && algo != SIM_RING) {
        return 0;
    }
    if (agrs && algo != SIM_RING && algo != SIM_PAT && algo != SIM_NVLS &&
        algo != SIM_COLLNET_DIRECT) {
        return 0;
    }
    if ((ar && algo == SIM_PAT) ||
        (algo != SIM_RING && algo != SIM_TREE && proto != BR_PROTO_SIMPLE)) {
        return 0;
    }
    if ((algo == SIM_NVLS || algo == SIM_NVLS_TREE) &&
        (!m->nvls || (algo == SIM_NVLS_TREE && m->nnodes == 1) ||
         (algo == SIM_NVLS && m->nnodes > 1 && !m->collnet))) {
        return 0;
    }
    if ((algo == SIM_COLLNET_DIRECT || algo == SIM_COLLNET_CHAIN) &&
        (!m->collnet || (algo == SIM_COLLNET_DIRECT && m->nvs_bw <= 0.0f))) {
        return 0;
    }
    /* Across nodes NVLS and CollNetDirect AllGather/ReduceScatter need the collnet plugin's
     * iallgather / ireducescatter, not modelled: off. PAT: one GPU per node, sm60+. */
    if (agrs && m->nnodes > 1 && (algo == SIM_NVLS || algo == SIM_COLLNET_DIRECT)) {
        return 0;
    }
    if (algo == SIM_PAT && (m->ppn != 1 || m->sm < 60 || m->version < 23)) {
        return 0;
    }
    if (m->proto_mask >= 0) {
        return m->proto_mask >> proto & 1;
    }
    if (proto == BR_PROTO_LL128) {
        int ok =
            m->sm >= 90 ? m->type_inter <= BR_TOPO_PATH_PXN : m->type_inter <= BR_TOPO_PATH_PXB;
        return ok && m->type_intra <= BR_TOPO_PATH_NVB && m->sm >= 70;
    }
    return 1;
}

/* NCCL's algorithm bandwidth (GB/s) of (func, algo, proto), before the size correction. */
static double alg_bw(const sim_nccl_t *m, int func, int algo, int proto, int *nch_p)
{
    int n = m->nranks, N = m->nnodes, arch = arch_row(m), col = N <= 2 ? N - 1 : 2;
    int ar = func == BR_FUNC_ALLREDUCE;
    int agrs = func == BR_FUNC_ALLGATHER || func == BR_FUNC_REDUCESCATTER;
    int nsteps = ar ? 2 * (n - 1) : agrs ? n - 1 : n, nch;
    double intra, inter, ppn = (double)n / N;
    algo_graph(m, algo, &nch, &intra, &inter);
    *nch_p = nch;
    int collnet = algo == SIM_COLLNET_DIRECT || algo == SIM_COLLNET_CHAIN;
    double bw = N <= 2 || collnet ? intra : inter;
    if (algo == SIM_NVLS || algo == SIM_NVLS_TREE) {
        if (nch < 2) {
            return 0.0;
        }
        double ibw = intra * nvls_eff[arch] * (nch - 1) / nch * (ar ? 2.0 : (ppn - 1) / ppn);
        double xbw = inter * (N <= 2 && algo == SIM_NVLS_TREE ? 2.0 : 1.0);
        bw = min2(ibw, xbw);
        if (algo == SIM_NVLS_TREE) {
            bw = min2(bw, nvls_tree_max[arch][col]);
        }
    }
    double bus = nch * bw;
    int llrow = N == 1 ? arch : m->amd ? 1 : 0;
    if (algo == SIM_RING && proto == BR_PROTO_LL) {
        /* Up to 2.20: a quarter for AllReduce, Reduce and across nodes, else a third. */
        double f = m->version >= 21                        ? 0.5
                   : N > 1 || ar || func == BR_FUNC_REDUCE ? 0.25
                                                           : 1.0 / 3.0;
        bus = min2(m->ll_max[llrow][col], bus * f);
    } else if (algo == SIM_RING && proto == BR_PROTO_LL128) {
        /* Up to 2.22 one GPU per node had 0.7. */
        bus = min2(bus * (m->version <= 22 && ppn < 2 ? 0.7 : 0.92), nch * m->ring_ll128_max[arch]);
    } else if (algo == SIM_TREE) {
        bus = min2(bus * 0.92, nch * m->tree_max[arch][col]);
        if (proto == BR_PROTO_LL) {
            bus = min2(bus / 3.8, m->ll_max[llrow][col]);
        } else if (proto == BR_PROTO_LL128) {
            bus = min2(bus * (N == 1 ? 7.0 / 9.0 : 120.0 / 128.0), nch * m->tree_ll128_max[arch][col]);
        }
    } else if (algo == SIM_PAT) {
        bus *= m->version == 23 ? 0.85 : 0.75;
    } else if (algo == SIM_COLLNET_DIRECT) {
        if (agrs) {
            bus = ppn * min2(intra, inter * 0.9);
        } else {
            double f = ppn / nch;
            bus /= f - (f - 1) / 2;
            bus *= m->sm >= 90 ? 0.85 : 1.0;
        }
    }
    if (algo != SIM_RING && agrs) {
        return bus;
    }
    int ring_like = algo == SIM_RING || algo == SIM_NVLS || algo == SIM_NVLS_TREE;
    return bus * (ring_like ? (double)n / nsteps : 0.5);
}

/* NCCL's latency (us) of (func, algo, proto). */
static double latency(const sim_nccl_t *m, int func, int algo, int proto)
{
    int n = m->nranks, N = m->nnodes, ppn = n / N;
    int ar = func == BR_FUNC_ALLREDUCE;
    int agrs = func == BR_FUNC_ALLGATHER || func == BR_FUNC_REDUCESCATTER;
    int nsteps = ar ? 2 * (n - 1) : agrs ? n - 1 : n;
    int intra_hw = m->type_intra <= BR_TOPO_PATH_NVL ? 0 : 1, hw = N == 1 ? intra_hw : 2;
    double intra = m->hw_lat[intra_hw][algo][proto];
    /* From 2.23 one GPU per node takes the tree's network latency for every algorithm. */
    int net_algo = ppn == 1 && m->version >= 23 ? SIM_TREE : algo;
    double inter = m->hw_lat[2][net_algo][proto] + m->nic_lat;
    double lat = m->base_lat[algo][proto];
    if (proto == BR_PROTO_SIMPLE) {
        inter += m->nic_lat; /* the flush */
    }
    switch (algo) {
    case SIM_RING:
        if (!ar && !agrs) {
            /* Braid's graph keeps every channel on one order (NCCL's sameChannels). */
            return lat + m->hw_lat[hw][algo][proto];
        } else {
            double ov = N > 1 ? (m->amd ? 2.0 : 1.0) * (proto == BR_PROTO_SIMPLE ? 3.0 : 1.0) : 0.0;
            /* Up to 2.22 an AllReduce counted 2 x nodes network steps. */
            int isteps = N == 1 ? 0 : ar ? 2 * (N - (m->version <= 22 ? 0 : 1)) : N - 1;
            return lat + (nsteps - isteps) * (intra > ov ? intra : ov) + isteps * inter;
        }
    case SIM_TREE: return lat + 2.0 * ((ppn - 1) * intra + log2i((size_t)N) * inter);
    case SIM_COLLNET_DIRECT:
        return lat + 2.0 * ((ppn - 1 < 1 ? ppn - 1 : 1) * intra + (ppn - 1) * 0.4) + inter;
    case SIM_COLLNET_CHAIN: return lat + 2.0 * (ppn - 1) * intra + inter;
    case SIM_NVLS: return intra + (N > 1 ? inter : 0.0);
    case SIM_NVLS_TREE: return lat + intra + 2.0 * log2i((size_t)N) * inter;
    default: /* PAT */ return lat + log2i((size_t)N) * (inter / 3.5) + n * 2.8;
    }
}

/* The fastest allowed (algorithm, protocol); ring_backup: Ring alone, whatever NCCL_ALGO says. */
static int best(const sim_nccl_t *m, int func, size_t bytes, int ring_backup, int *algo_p,
                int *proto_p, int *nch_p, double *us_p)
{
    int agrs = func == BR_FUNC_ALLGATHER || func == BR_FUNC_REDUCESCATTER, found = -1;
    double nbytes = (double)bytes * (agrs ? m->nranks : 1);
    int logsz = log2i((size_t)nbytes >> 6);
    for (int a = 0; a < SIM_NUM_ALGOS; a++) {
        for (int p = 0; p < 3; p++) {
            int nch;
            if (m->nranks < 2 || !allowed(m, func, a, p, ring_backup)) {
                continue;
            }
            double bw = alg_bw(m, func, a, p, &nch), lat = latency(m, func, a, p);
            if (bw <= 0.0) {
                continue;
            }
            if (a == SIM_TREE && func == BR_FUNC_ALLREDUCE && logsz >= 0 && logsz < 23) {
                bw *= tree_corr[p][logsz];
            }
            if (a == SIM_RING && p == BR_PROTO_SIMPLE && m->nnodes > 1 &&
                func == BR_FUNC_ALLREDUCE && nbytes / ((double)m->comm_nch * m->nranks) >= 64.0) {
                lat *= m->sm < 80 ? 1.9 : 1.4;
            }
            double t = lat + nbytes / (1000.0 * bw);
            if (found < 0 || t < *us_p) {
                found = 0;
                *algo_p = a, *proto_p = p, *nch_p = nch, *us_p = t;
            }
        }
    }
    return found;
}

int sim_nccl_predict(const sim_nccl_t *m, int func, size_t bytes, int *algo_p, int *proto_p,
                     int *nch_p, double *us_p)
{
    if (best(m, func, bytes, 0, algo_p, proto_p, nch_p, us_p) == 0) {
        return 0;
    }
    /* Up to 2.23 a function NCCL_ALGO left nothing for ran Ring (NCCL's ring backup); from
     * 2.24 NCCL refuses it. */
    return m->version <= 23 ? best(m, func, bytes, 1, algo_p, proto_p, nch_p, us_p) : -1;
}
