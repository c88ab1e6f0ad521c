/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a communicator decides with: the facts plan's cost model needs, made identical on
 * every rank (the few that come from a rank's own environment are agreed over the
 * bootstrap), the plan, then the tuner plugin (which may edit the model's constants at
 * its init) and the profiler plugin.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "util.h"

/* What br_transport_select_pair reads of a rank, sorted by host, /dev/shm, then process. */
typedef struct {
    uint64_t host, shm, pid;
    int p2p_off, shm_off;
} hw_key_t;

static int hw_key_cmp(const void *a, const void *b)
{
    const hw_key_t *x = a, *y = b;
    if (x->host != y->host) {
        return x->host < y->host ? -1 : 1;
    }
    if (x->shm != y->shm) {
        return x->shm < y->shm ? -1 : 1;
    }
    return x->pid < y->pid ? -1 : x->pid > y->pid;
}

/*
 * The slowest link among the ranks k[0..n) of one host (one process group after another).
 * A pair is P2P when one process holds both and neither disables p2p; any other pair is
 * SHM when neither disables shm, else NET. So NET is there when a rank that disables shm
 * has a non-P2P partner: any other rank if it disables p2p too, else one of another
 * process or one of its own that disables p2p. SHM is there when ranks that keep shm live
 * in two processes, or two of one process do and one of them disables p2p.
 */
static int host_hw(const hw_key_t *k, int n)
{
    int net = 0, shm = 0, procs_with_shm = 0;
    for (int i = 0, j; i < n; i = j) {
        int p2p_off = 0, keep_shm = 0, keep_shm_p2p_off = 0;
        for (j = i; j < n && k[j].pid == k[i].pid; j++) {
            p2p_off += k[j].p2p_off != 0;
            keep_shm += k[j].shm_off == 0;
            keep_shm_p2p_off += k[j].shm_off == 0 && k[j].p2p_off != 0;
        }
        for (int x = i; x < j; x++) {
            if (k[x].shm_off != 0 && (k[x].p2p_off != 0 || n - (j - i) > 0 || p2p_off > 0)) {
                net = 1;
            }
        }
        shm |= keep_shm >= 2 && keep_shm_p2p_off >= 1;
        procs_with_shm += keep_shm > 0;
    }
    shm |= procs_with_shm >= 2;
    return n < 2 ? BR_HW_NVLINK : net ? BR_HW_NET : shm ? BR_HW_PCI : BR_HW_NVLINK;
}

/* The pairwise answer, for when there is no memory to sort. */
static int intra_hw_pairs(const br_transport_comm_t *tc)
{
    int hw = BR_HW_NVLINK;
    for (int a = 0; a < tc->nranks; a++) {
        for (int b = a + 1; b < tc->nranks; b++) {
            if (tc->peers[a].host_hash != tc->peers[b].host_hash) {
                continue;
            }
            br_transport_t k = br_transport_select_pair(&tc->peers[a], &tc->peers[b]);
            int h = k == BR_TRANSPORT_P2P   ? BR_HW_NVLINK
                    : k == BR_TRANSPORT_SHM ? BR_HW_PCI
                                            : BR_HW_NET;
            hw = h > hw ? h : hw;
        }
    }
    return hw;
}

/*
 * The model's intra-host latency class (the graph's trees inside hosts follow it too): the
 * slowest kind br_transport_select_pair gives any two ranks of one host. The ranks sorted
 * by host and process, each host is judged from counts in O(n log n); asking every pair
 * was n^2 / 2 calls on every rank, twice per init, half a million at 1024 ranks (issue 40).
 */
int br_comm_intra_hw(const br_transport_comm_t *tc)
{
    int n = tc->nranks, hw = BR_HW_NVLINK;
    hw_key_t *k = malloc(sizeof(*k) * (size_t)n);

    if (k == NULL) {
        return intra_hw_pairs(tc);
    }
    for (int r = 0; r < n; r++) {
        const br_peer_info_t *p = &tc->peers[r];
        k[r] = (hw_key_t){p->host_hash, p->shm_key, p->pid_hash, p->p2p_disable, p->shm_disable};
    }
    qsort(k, (size_t)n, sizeof(*k), hw_key_cmp);
    for (int i = 0, j; i < n; i = j) {
        for (j = i; j < n && k[j].host == k[i].host && k[j].shm == k[i].shm; j++) {
        }
        /* Ranks of one host behind different /dev/shm (containers) talk over the network. */
        int h = i > 0 && k[i - 1].host == k[i].host ? BR_HW_NET : host_hw(k + i, j - i);
        hw = h > hw ? h : hw;
    }
    free(k);
    return hw;
}

/* Does channel 0's ring cross the network? (Every rank judges every link alike.) */
static int ring_crosses_net(const br_transport_comm_t *tc, const br_graph_t *g)
{
    const int *ring = br_graph_ring(g, 0);
    for (int i = 0; i < g->nranks; i++) {
        if (br_transport_select_pair(&tc->peers[ring[i]], &tc->peers[ring[(i + 1) % g->nranks]]) ==
            BR_TRANSPORT_NET) {
            return 1;
        }
    }
    return 0;
}

typedef struct {
    uint64_t machine;
    int cpus;
} machine_cpus_t;

static int machine_cmp(const void *a, const void *b)
{
    uint64_t x = ((const machine_cpus_t *)a)->machine, y = ((const machine_cpus_t *)b)->machine;
    return x < y ? -1 : x > y;
}

/*
 * Ranks per core on the busiest machine (at least 1): every rank computes it from the same
 * peer table. The ranks sorted by machine, each machine's count is its run's length:
 * O(n log n), where counting every rank's machine mates took n^2 comparisons on every
 * rank, 10^9 among 1024 ranks (issue 40). Without memory for the copy, the n^2 count.
 */
static double core_share(const br_transport_comm_t *tc)
{
    int n = tc->nranks;
    double share = 1.0;
    machine_cpus_t *m = malloc(sizeof(*m) * (size_t)n);

    if (m == NULL) {
        for (int r = 0; r < n; r++) {
            int sharing = 0;
            for (int q = 0; q < n; q++) {
                sharing += tc->peers[q].machine_hash == tc->peers[r].machine_hash;
            }
            if (tc->peers[r].cpus > 0 && (double)sharing / tc->peers[r].cpus > share) {
                share = (double)sharing / tc->peers[r].cpus;
            }
        }
        return share;
    }
    for (int r = 0; r < n; r++) {
        m[r] = (machine_cpus_t){tc->peers[r].machine_hash, tc->peers[r].cpus};
    }
    qsort(m, (size_t)n, sizeof(*m), machine_cmp);
    for (int i = 0, j; i < n; i = j) {
        for (j = i; j < n && m[j].machine == m[i].machine; j++) {
        }
        int sharing = j - i;
        for (int k = i; k < j; k++) {
            if (m[k].cpus > 0 && (double)sharing / m[k].cpus > share) {
                share = (double)sharing / m[k].cpus;
            }
        }
    }
    free(m);
    return share;
}

/* The network's bandwidth per channel, the smallest any rank's plugin reports. */
static ncclResult_t agree_net_gbps(ncclComm_t comm, double *gbps_p)
{
    br_transport_comm_t *tc = comm->tc;
    double *all = NULL, mine = 1.25; /* 10 Gb/s when the plugin does not say */

    if (tc->net != NULL && tc->net->props.speed > 0) {
        mine = tc->net->props.speed / 8000.0;
    }
    BR_CHECK(br_calloc(&all, (size_t)comm->nranks, "tuning setup"));
    all[comm->rank] = mine;
    ncclResult_t res = br_bootstrap_allgather(tc->boot, all, sizeof(*all));
    for (int r = 0; r < comm->nranks && res == ncclSuccess; r++) {
        mine = all[r] < mine ? all[r] : mine;
    }
    free(all);
    *gbps_p = mine;
    return res;
}

static ncclResult_t plan_setup(ncclComm_t comm)
{
    br_transport_comm_t *tc = comm->tc;
    const br_graph_t *g = comm->graph;
    br_plan_comm_t pc;

    memset(&pc, 0, sizeof(pc));
    pc.rank = comm->rank;
    pc.nranks = comm->nranks;
    pc.nnodes = g->nnodes;
    for (int node = 0; node < g->nnodes; node++) {
        int local = 0;
        for (int r = 0; r < g->nranks; r++) {
            local += g->node_of[r] == node;
        }
        pc.local_ranks = local > pc.local_ranks ? local : pc.local_ranks;
    }
    pc.nchannels = comm->ec->nchannels;
    pc.intra_hw = br_comm_intra_hw(tc);
    /* Ranks on GPUs: the topology's bandwidths (NCCL's model); else the host constants. */
    pc.gpus = g->gpus;
    pc.sm = g->sm;
    pc.cpu_vendor = g->cpu_vendor;
    pc.graph_nch = g->nsearch;
    pc.bw_intra = g->bw_intra;
    pc.bw_inter = g->bw_inter;
    if (g->gpus) {
        pc.intra_hw = g->type_intra <= BR_TOPO_PATH_NVL ? BR_HW_NVLINK : BR_HW_PCI;
    }
    BR_CHECK(agree_net_gbps(comm, &pc.net_gbps));
    pc.step_bytes = ((size_t)tc->buffsize / BR_STEPS) & ~(size_t)63;
    pc.ll_bytes = comm->ec->ll_scratch_each;
    pc.pipeline = comm->pipeline;
    pc.ring_net = ring_crosses_net(tc, g);
    pc.oneshot_bytes = comm->oneshot_bytes;
    pc.share = core_share(tc);
    if (comm->ec->collnet != NULL) {
        pc.collnet = 1;
        memcpy(pc.collnet_red, comm->ec->collnet->red, sizeof(pc.collnet_red));
        pc.collnet_ag = comm->ec->collnet->allgather;
        pc.collnet_rs = comm->ec->collnet->reducescatter;
    }
    if (tc->arena != NULL) {
        pc.arena_bytes = tc->arena->max_bytes;
        pc.direct_lo = tc->arena->cma_bytes;
        pc.direct_hi = tc->arena->cma_max;
    }
    pc.one_process = br_transport_one_process(tc);
    return br_plan_create(&pc, g, &comm->plan);
}

ncclResult_t br_comm_tune_setup(ncclComm_t comm)
{
    br_transport_comm_t *tc = comm->tc;

    BR_CHECK(br_comm_collnet_setup(comm));
    BR_CHECK(plan_setup(comm));
    /* The tuner plugin edits the constants at its init, then sees every cost table. */
    br_tuner_request_t treq;
    memset(&treq, 0, sizeof(treq));
    treq.plugin = BR_PARAM_STR(TUNER_PLUGIN);
    treq.net = tc->net;
    treq.comm_hash = comm->comm_hash;
    treq.nranks = (size_t)comm->nranks;
    treq.nnodes = (size_t)comm->graph->nnodes;
    treq.nvl_domains = comm->graph->nnodes;
    treq.min_ranks_per_nvl = treq.max_ranks_per_nvl = 1;
    treq.constants = br_plan_constants(comm->plan);
    BR_CHECK(br_plugin_tuner_open(&treq, &comm->tuner));
    if (comm->tuner != NULL) {
        br_plan_set_tuner(comm->plan, br_plugin_tuner_hook, comm->tuner, comm->tuner->name);
        BR_INFO(NCCL_INIT | NCCL_TUNING, "tuner %s (v%d) from %s", comm->tuner->name,
                comm->tuner->version, comm->tuner->path);
    }
    br_plan_log_choices(comm->plan);

    br_profiler_request_t preq;
    memset(&preq, 0, sizeof(preq));
    preq.plugin = BR_PARAM_STR(PROFILER_PLUGIN);
    preq.net = tc->net;
    preq.comm_hash = comm->comm_hash;
    preq.comm_name = comm->name[0] ? comm->name : NULL;
    preq.nnodes = comm->graph->nnodes;
    preq.nranks = comm->nranks;
    preq.rank = comm->rank;
    BR_CHECK(br_plugin_profiler_open(&preq, &comm->ec->prof));
    if (comm->ec->prof != NULL && tc->proxy != NULL) {
        br_proxy_set_profiler(tc->proxy, comm->ec->prof);
    }
    return ncclSuccess;
}
