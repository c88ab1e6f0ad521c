/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Communicator init and teardown. Init: bootstrap, allgather of peer info, agreement on
 * channels and buffer sizes (minimum over ranks, so every rank cuts operations alike),
 * the net plugin, the ring (ranks of one host kept adjacent), and the ring connections
 * of every channel. p2p connections are made on first use (br_comm_connect_p2p).
 * A process-wide registry of live communicators lets the API reject stale handles.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "util.h"

#define BR_TAG_RING 1
#define BR_TAG_P2P 2

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static ncclComm_t *registry;
static int registry_n, registry_cap;
/* Bumped by every add and remove: a thread's last positive lookup stays valid while the
 * generation is unchanged, so a loop of calls on one comm takes no lock. */
static _Atomic uint64_t registry_gen = 1;
static _Thread_local ncclComm_t live_comm;
static _Thread_local uint64_t live_gen;

static ncclResult_t registry_add(ncclComm_t comm)
{
    pthread_mutex_lock(&registry_lock);
    if (registry_n == registry_cap) {
        int cap = registry_cap ? 2 * registry_cap : 16;
        ncclComm_t *r = realloc(registry, (size_t)cap * sizeof(*r));
        if (r == NULL) {
            pthread_mutex_unlock(&registry_lock);
            BR_WARN(NCCL_ALLOC, "out of memory registering a communicator");
            return ncclSystemError;
        }
        registry = r;
        registry_cap = cap;
    }
    registry[registry_n++] = comm;
    atomic_fetch_add_explicit(&registry_gen, 1, memory_order_acq_rel);
    pthread_mutex_unlock(&registry_lock);
    return ncclSuccess;
}

static void registry_remove(ncclComm_t comm)
{
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < registry_n; i++) {
        if (registry[i] == comm) {
            registry[i] = registry[--registry_n];
            break;
        }
    }
    atomic_fetch_add_explicit(&registry_gen, 1, memory_order_acq_rel);
    if (registry_n == 0) {
        free(registry);
        registry = NULL;
        registry_cap = 0;
    }
    pthread_mutex_unlock(&registry_lock);
}

int br_comm_is_live(ncclComm_t comm)
{
    int live = 0;
    uint64_t gen = atomic_load_explicit(&registry_gen, memory_order_acquire);
    if (comm != NULL && comm == live_comm && gen == live_gen) {
        return comm->magic == BR_COMM_MAGIC; /* no comm was removed since we looked */
    }
    pthread_mutex_lock(&registry_lock);
    gen = atomic_load_explicit(&registry_gen, memory_order_relaxed);
    for (int i = 0; i < registry_n && !live; i++) {
        live = registry[i] == comm;
    }
    pthread_mutex_unlock(&registry_lock);
    live = live && comm->magic == BR_COMM_MAGIC;
    if (live) {
        live_comm = comm;
        live_gen = gen;
    }
    return live;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

static int param_is_default(const char *key)
{
    int n = 0;
    const br_param_row_t *rows = br_param_table(&n);
    for (int i = 0; i < n; i++) {
        if (strcmp(rows[i].key, key) == 0) {
            return rows[i].source == NULL || strcmp(rows[i].source, "default") == 0;
        }
    }
    return 1;
}

/* Channels over the network: each one is a connection with its own plugin threads, and
 * where a host has fewer than two cores per local rank (measured on 2 cores: one channel
 * moves 1.3x-1.5x more than two, at 2 and 4 ranks) they only compete for the CPU. Unless
 * the user chose the channel count, the ring gets at most cpus / local ranks channels,
 * the minimum over the ranks' hosts so that every rank cuts operations alike. */
static int net_channel_cap(const br_transport_comm_t *tc, int nch)
{
    for (int r = 0; r < tc->nranks; r++) {
        const br_peer_info_t *p = &tc->peers[r];
        int local = 0;
        if (!p->channels_auto) {
            return nch;
        }
        for (int i = 0; i < tc->nranks; i++) {
            local += tc->peers[i].host_hash == p->host_hash;
        }
        int cap = p->cpus > 0 ? p->cpus / local : nch;
        nch = cap < 1 ? 1 : (cap < nch ? cap : nch);
    }
    return nch;
}

static void peer_info_fill(br_peer_info_t *pi, int rank, ncclComm_t comm)
{
    memset(pi, 0, sizeof(*pi));
    pi->rank = rank;
    pi->pid = (int)getpid();
    pi->host_hash = br_host_hash();
    pi->pid_hash = br_pid_hash();
    pi->comm_ptr = (uint64_t)(uintptr_t)comm;
    pi->buffsize = BR_PARAM_INT(BUFFSIZE);
    pi->pipeline = (int)BR_PARAM_INT(RING_PIPELINE);
    pi->p2p_chunk = BR_PARAM_INT(P2P_NET_CHUNKSIZE);
    pi->nchannels = (int)clamp64(BR_PARAM_INT(NCHANNELS), BR_PARAM_INT(MIN_NCHANNELS),
                                 BR_PARAM_INT(MAX_NCHANNELS));
    pi->nchannels = (int)clamp64(pi->nchannels, 1, BR_MAX_CHANNELS);
    pi->channels_auto = param_is_default("BRAID_NCHANNELS") &&
                        param_is_default("NCCL_MIN_NCHANNELS") &&
                        param_is_default("NCCL_MAX_NCHANNELS");
    pi->cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    pi->shm_disable = (int)BR_PARAM_INT(SHM_DISABLE);
    pi->p2p_disable = (int)BR_PARAM_INT(P2P_DISABLE);
    snprintf(pi->host, sizeof(pi->host), "%s", br_host_name());
}

/* Load the net plugin. Failing is fatal when the user asked for a network or a peer can
 * only be reached through one; otherwise it is logged and init goes on without it. */
static ncclResult_t net_setup(ncclComm_t comm, int needed)
{
    br_transport_comm_t *tc = comm->tc;
    br_net_request_t req;
    const char *env_net = BR_PARAM_STR(NET), *plugin = BR_PARAM_STR(NET_PLUGIN);
    int requested;
    ncclResult_t res;

    memset(&req, 0, sizeof(req));
    req.net_name = env_net != NULL ? env_net : (comm->net_name[0] ? comm->net_name : NULL);
    req.plugin = plugin;
    req.comm_hash = comm->comm_hash;
    req.traffic_class = comm->traffic_class;
    requested = req.net_name != NULL || (plugin != NULL && strcmp(plugin, "none") != 0);
    res = br_plugin_net_open(&req, &tc->net);
    if (res == ncclSuccess) {
        BR_INFO(NCCL_INIT | NCCL_NET, "Using network %s (v%d, device %d of %d: %s)", tc->net->name,
                tc->net->version, tc->net->dev, tc->net->ndev,
                tc->net->props.name != NULL ? tc->net->props.name : "?");
        return ncclSuccess;
    }
    tc->net = NULL;
    if (requested || needed) {
        BR_WARN(NCCL_INIT | NCCL_NET, "rank %d: no usable net plugin (%s); %s", comm->rank,
                br_log_last_error(),
                requested ? "a network was requested, so init fails instead of falling back"
                          : "some peers can only be reached through the network");
        return res;
    }
    BR_WARN(NCCL_INIT | NCCL_NET,
            "rank %d: continuing without a net plugin: every peer is "
            "reachable through shared memory or in-process",
            comm->rank);
    return ncclSuccess;
}

/* Ring order: ranks of the same host adjacent (hosts in order of first appearance),
 * so at most one hop per host pair crosses the network. */
static void ring_order(const br_transport_comm_t *tc, int *order)
{
    int n = tc->nranks, k = 0;
    char *placed = calloc((size_t)n, 1);
    for (int i = 0; i < n && placed != NULL; i++) {
        if (placed[i]) {
            continue;
        }
        for (int j = i; j < n; j++) {
            if (!placed[j] && tc->peers[j].host_hash == tc->peers[i].host_hash) {
                order[k++] = j;
                placed[j] = 1;
            }
        }
    }
    if (placed == NULL) {
        for (int i = 0; i < n; i++) {
            order[i] = i;
        }
    }
    free(placed);
}

static ncclResult_t ring_setup(ncclComm_t comm)
{
    br_transport_comm_t *tc = comm->tc;
    br_exec_comm_t *ec = comm->ec;
    int n = comm->nranks, nch = ec->nchannels, pos = 0;
    int order[n], recv_peers[BR_MAX_CHANNELS], send_peers[BR_MAX_CHANNELS];
    char line[1024];

    ring_order(tc, order);
    for (int i = 0; i < n; i++) {
        if (order[i] == comm->rank) {
            pos = i;
        }
    }
    ec->ring_prev = order[(pos + n - 1) % n];
    ec->ring_next = order[(pos + 1) % n];
    ec->ring_pos = pos;
    BR_CHECK(br_calloc(&ec->ring_rank, (size_t)n, "ring order"));
    BR_CHECK(br_calloc(&ec->ring_pos_of, (size_t)n, "ring order"));
    int net_link = 0;
    for (int i = 0; i < n; i++) {
        ec->ring_rank[i] = order[i];
        ec->ring_pos_of[order[i]] = i;
        net_link |= br_transport_select_pair(&tc->peers[order[i]],
                                             &tc->peers[order[(i + 1) % n]]) == BR_TRANSPORT_NET;
    }
    /* Cutting steps finer pays where a link's copies and transfer can overlap (measured:
     * it halved shared-memory AllReduce at 1 MiB, and tripled socket AllGather). Every
     * rank sees the same ring, so they all decide alike. */
    if (!net_link) {
        ec->pipeline = 1;
    }
    if (comm->rank == 0) {
        size_t len = 0;
        for (int i = 0; i < n && len < sizeof(line) - 16; i++) {
            len += (size_t)snprintf(line + len, sizeof(line) - len, " %d", order[i]);
        }
        for (int c = 0; c < nch; c++) {
            BR_INFO(NCCL_INIT, "Channel %02d/%02d :%s", c, nch, line);
        }
    }
    if (n == 1) {
        return ncclSuccess;
    }
    for (int c = 0; c < nch; c++) {
        recv_peers[c] = ec->ring_prev;
        send_peers[c] = ec->ring_next;
    }
    size_t step = ((size_t)tc->buffsize / BR_STEPS) & ~(size_t)63;
    BR_CHECK(br_transport_connect(tc, nch, recv_peers, send_peers, step, BR_TAG_RING, ec->ring_recv,
                                  ec->ring_send));
    for (int c = 0; c < nch; c++) {
        br_conn_t *s = ec->ring_send[c];
        ec->has_net |= s->kind == BR_TRANSPORT_NET || ec->ring_recv[c]->kind == BR_TRANSPORT_NET;
        BR_INFO(NCCL_INIT, "Channel %02d/0 : %d[%d] -> %d[%d] via %s%s%s", c, comm->rank,
                comm->rank, s->peer, s->peer, br_transport_name(s->kind),
                s->kind == BR_TRANSPORT_NET ? "/" : "",
                s->kind == BR_TRANSPORT_NET ? tc->net->name : "");
    }
    BR_INFO(NCCL_INIT, "Connected all rings, %d channels of %zu-byte steps", nch, step);
    return ncclSuccess;
}

/* The cost model sees the slowest link the ring crosses. */
static ncclResult_t tune_setup(ncclComm_t comm)
{
    br_transport_comm_t *tc = comm->tc;
    br_tune_topo_t topo;
    int any_shm = 0;

    memset(&topo, 0, sizeof(topo));
    topo.nranks = comm->nranks;
    topo.max_channels = comm->ec->nchannels;
    for (int i = 0; i < comm->nranks; i++) {
        int first = 1;
        for (int j = 0; j < i; j++) {
            first &= tc->peers[j].host_hash != tc->peers[i].host_hash;
        }
        topo.nnodes += first;
        any_shm |= i != comm->rank && br_transport_select(tc, i) == BR_TRANSPORT_SHM;
    }
    if (comm->ec->has_net && tc->net != NULL) {
        topo.hw = BR_HW_NET;
        topo.link_gbps = tc->net->props.speed > 0 ? tc->net->props.speed / 8000.0 : 1.25;
    } else {
        topo.hw = any_shm ? BR_HW_PCI : BR_HW_NVLINK;
        topo.link_gbps = any_shm ? 6.0 : 10.0; /* one core's copy rate through the FIFO */
    }
    BR_CHECK(br_plan_tune_create(&topo, &comm->tune));

    /* The tuner plugin edits the constants at its init, then sees every cost table. */
    br_tuner_request_t treq;
    memset(&treq, 0, sizeof(treq));
    treq.plugin = BR_PARAM_STR(TUNER_PLUGIN);
    treq.net = tc->net;
    treq.comm_hash = comm->comm_hash;
    treq.nranks = (size_t)comm->nranks;
    treq.nnodes = (size_t)topo.nnodes;
    treq.nvl_domains = topo.nnodes;
    treq.min_ranks_per_nvl = treq.max_ranks_per_nvl = 1;
    treq.constants = br_plan_tune_constants(comm->tune);
    BR_CHECK(br_plugin_tuner_open(&treq, &comm->tuner));
    if (comm->tuner != NULL) {
        br_plan_tune_set_hook(comm->tune, br_plugin_tuner_hook, comm->tuner, comm->tuner->name);
        BR_INFO(NCCL_INIT | NCCL_TUNING, "tuner %s (v%d) from %s", comm->tuner->name,
                comm->tuner->version, comm->tuner->path);
    }

    br_profiler_request_t preq;
    memset(&preq, 0, sizeof(preq));
    preq.plugin = BR_PARAM_STR(PROFILER_PLUGIN);
    preq.net = tc->net;
    preq.comm_hash = comm->comm_hash;
    preq.comm_name = comm->name[0] ? comm->name : NULL;
    preq.nnodes = topo.nnodes;
    preq.nranks = comm->nranks;
    preq.rank = comm->rank;
    BR_CHECK(br_plugin_profiler_open(&preq, &comm->ec->prof));
    if (comm->ec->prof != NULL && tc->proxy != NULL) {
        br_proxy_set_profiler(tc->proxy, comm->ec->prof);
    }
    return ncclSuccess;
}

static void config_apply(ncclComm_t comm, const ncclConfig_t *config)
{
    comm->blocking = 1;
    comm->traffic_class = -1;
    if (config == NULL) {
        return;
    }
    if (config->blocking != NCCL_CONFIG_UNDEF_INT) {
        comm->blocking = config->blocking;
    }
    if (config->trafficClass != NCCL_CONFIG_UNDEF_INT) {
        comm->traffic_class = config->trafficClass;
    }
    if (config->netName != NULL) {
        snprintf(comm->net_name, sizeof(comm->net_name), "%s", config->netName);
    }
    if (config->commName != NULL) {
        snprintf(comm->name, sizeof(comm->name), "%s", config->commName);
    }
}

static ncclResult_t comm_alloc(ncclComm_t *comm_p, int nranks, int rank)
{
    ncclComm_t comm = NULL;
    BR_CHECK(br_calloc(&comm, 1, "communicator"));
    *comm_p = comm;
    comm->rank = rank;
    comm->nranks = nranks;
    pthread_mutex_init(&comm->lock, NULL);
    BR_CHECK(br_calloc(&comm->tc, 1, "transport state"));
    BR_CHECK(br_calloc(&comm->ec, 1, "executor state"));
    BR_CHECK(br_calloc(&comm->tc->peers, (size_t)nranks, "peer table"));
    BR_CHECK(br_calloc(&comm->ec->p2p_send, (size_t)nranks, "p2p connections"));
    BR_CHECK(br_calloc(&comm->ec->p2p_recv, (size_t)nranks, "p2p connections"));
    BR_CHECK(br_calloc(&comm->ec->send_seq, (size_t)nranks, "p2p sequence numbers"));
    BR_CHECK(br_calloc(&comm->ec->recv_seq, (size_t)nranks, "p2p sequence numbers"));
    comm->tc->rank = comm->ec->rank = rank;
    comm->tc->nranks = comm->ec->nranks = nranks;
    comm->ec->tc = comm->tc;
    return ncclSuccess;
}

ncclResult_t br_comm_init(ncclComm_t *comm_p, int nranks, const ncclUniqueId *id, int rank,
                          const ncclConfig_t *config)
{
    ncclResult_t res;
    ncclComm_t comm = NULL;
    br_transport_comm_t *tc;
    uint64_t t0 = br_time_ns();
    int needed = 0, nch = BR_MAX_CHANNELS;

    br_log_set_rank(rank);
    BR_CHECK_GOTO(comm_alloc(&comm, nranks, rank), res, fail);
    config_apply(comm, config);
    tc = comm->tc;
    comm->comm_hash = br_hash_bytes(id, sizeof(*id), 0x62726169);
    tc->comm_hash = comm->comm_hash;
    BR_INFO(NCCL_INIT, "ncclCommInitRank comm %p rank %d nranks %d commId 0x%llx - Init START",
            (void *)comm, rank, nranks, (unsigned long long)comm->comm_hash);
    BR_CHECK_GOTO(br_bootstrap_init(id, rank, nranks, &tc->boot), res, fail);
    peer_info_fill(&tc->peers[rank], rank, comm);
    BR_CHECK_GOTO(br_bootstrap_allgather(tc->boot, tc->peers, sizeof(br_peer_info_t)), res, fail);
    /* Every rank must cut operations alike: take the minimum of everyone's settings. */
    for (int i = 0; i < nranks; i++) {
        const br_peer_info_t *p = &tc->peers[i];
        nch = p->nchannels < nch ? p->nchannels : nch;
        if (i == 0 || p->buffsize < tc->buffsize) {
            tc->buffsize = p->buffsize;
        }
        if (i == 0 || p->p2p_chunk < tc->p2p_chunk) {
            tc->p2p_chunk = p->p2p_chunk;
        }
        if (i == 0 || p->pipeline < comm->ec->pipeline) {
            comm->ec->pipeline = p->pipeline;
        }
        needed |= br_transport_select(tc, i) == BR_TRANSPORT_NET;
    }
    if (needed) {
        int capped = net_channel_cap(tc, nch);
        if (capped < nch) {
            BR_INFO(NCCL_INIT,
                    "rank %d: %d channel%s over the network instead of %d: fewer than two "
                    "cores per local rank (BRAID_NCHANNELS sets it)",
                    rank, capped, capped == 1 ? "" : "s", nch);
            nch = capped;
        }
    }
    comm->ec->nchannels = nch;
    {
        int local = 0;
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        for (int i = 0; i < nranks; i++) {
            local += tc->peers[i].host_hash == tc->peers[rank].host_hash;
        }
        comm->ec->oversubscribed = cpus > 0 && local > cpus;
        BR_INFO(NCCL_INIT, "comm %p rank %d nRanks %d localRanks %d cpus %ld%s", (void *)comm, rank,
                nranks, local, cpus,
                comm->ec->oversubscribed ? " (oversubscribed: waiters yield instead of spinning)"
                                         : "");
    }
    if (tc->buffsize < BR_STEPS * 64 || tc->p2p_chunk < 64) {
        BR_WARN(NCCL_INIT,
                "NCCL_BUFFSIZE %lld or NCCL_P2P_NET_CHUNKSIZE %lld is too small "
                "(at least %d and 64 bytes)",
                (long long)tc->buffsize, (long long)tc->p2p_chunk, BR_STEPS * 64);
        res = ncclInvalidUsage;
        goto fail;
    }
    BR_CHECK_GOTO(net_setup(comm, needed), res, fail);
    BR_CHECK_GOTO(ring_setup(comm), res, fail);
    size_t cma = (size_t)BR_PARAM_INT(CMA_BYTES);
    /* With more ranks than cores, reading in place measured slower than the rings (4 ranks
     * on 2 cores: 10-25 % less from 256 KiB to 1 MiB, docs/performance.md): a reader's
     * system call holds a core that the rank it waits for needs. Set explicitly, it holds. */
    if (comm->ec->oversubscribed && cma > 0 && param_is_default("BRAID_CMA_BYTES")) {
        BR_INFO(NCCL_SHM | NCCL_INIT,
                "rank %d: no single-copy reads: more ranks than cores on this host "
                "(BRAID_CMA_BYTES set explicitly turns them on)",
                rank);
        cma = 0;
    }
    BR_CHECK_GOTO(br_transport_flat_setup(tc, (size_t)BR_PARAM_INT(ONESHOT_BYTES), cma,
                                          (size_t)BR_PARAM_INT(CMA_MAX_BYTES)),
                  res, fail);
    comm->ec->flat = tc->flat;
    BR_CHECK_GOTO(tune_setup(comm), res, fail);
    BR_CHECK_GOTO(br_bootstrap_barrier(tc->boot), res, fail);
    comm->magic = BR_COMM_MAGIC;
    BR_CHECK_GOTO(registry_add(comm), res, fail);
    BR_INFO(NCCL_INIT,
            "ncclCommInitRank comm %p rank %d nranks %d commId 0x%llx - Init COMPLETE "
            "(%.3f s)",
            (void *)comm, rank, nranks, (unsigned long long)comm->comm_hash,
            (double)(br_time_ns() - t0) * 1e-9);
    *comm_p = comm;
    return ncclSuccess;
fail:
    if (comm != NULL) {
        if (comm->tc != NULL && comm->tc->boot != NULL) {
            br_bootstrap_abort_notify(comm->tc->boot, br_log_last_error());
        }
        comm->magic = 0;
        br_comm_free(comm, 0);
    }
    return res;
}

ncclResult_t br_comm_connect_p2p(ncclComm_t comm, const char *need_send, const char *need_recv)
{
    br_exec_comm_t *ec = comm->ec;
    br_transport_comm_t *tc = comm->tc;
    int n = comm->nranks, any = 0;
    int *recv_peers = NULL, *send_peers = NULL;
    br_conn_t **recv_conns = NULL, **send_conns = NULL;
    ncclResult_t res = ncclSuccess;

    BR_CHECK_GOTO(br_calloc(&recv_peers, (size_t)n, "p2p setup"), res, out);
    BR_CHECK_GOTO(br_calloc(&send_peers, (size_t)n, "p2p setup"), res, out);
    BR_CHECK_GOTO(br_calloc(&recv_conns, (size_t)n, "p2p setup"), res, out);
    BR_CHECK_GOTO(br_calloc(&send_conns, (size_t)n, "p2p setup"), res, out);
    for (int p = 0; p < n; p++) {
        recv_peers[p] = (need_recv[p] && ec->p2p_recv[p] == NULL && p != comm->rank) ? p : -1;
        send_peers[p] = (need_send[p] && ec->p2p_send[p] == NULL && p != comm->rank) ? p : -1;
        any |= recv_peers[p] >= 0 || send_peers[p] >= 0;
    }
    if (!any) {
        goto out;
    }
    size_t step = (size_t)tc->p2p_chunk;
    BR_CHECK_GOTO(br_transport_connect(tc, n, recv_peers, send_peers, step, BR_TAG_P2P, recv_conns,
                                       send_conns),
                  res, out);
    for (int p = 0; p < n; p++) {
        if (recv_conns[p] != NULL) {
            ec->p2p_recv[p] = recv_conns[p];
            ec->has_net |= recv_conns[p]->kind == BR_TRANSPORT_NET;
        }
        if (send_conns[p] != NULL) {
            ec->p2p_send[p] = send_conns[p];
            ec->has_net |= send_conns[p]->kind == BR_TRANSPORT_NET;
            BR_INFO(NCCL_P2P, "P2P : %d -> %d via %s", comm->rank, p,
                    br_transport_name(send_conns[p]->kind));
        }
    }
out:
    free(recv_peers);
    free(send_peers);
    free(recv_conns);
    free(send_conns);
    return res;
}

void br_comm_free(ncclComm_t comm, int flush)
{
    if (comm == NULL) {
        return;
    }
    registry_remove(comm);
    comm->magic = 0;
    br_plan_tune_free(comm->tune);
    if (comm->tuner != NULL) {
        br_plugin_tuner_close(comm->tuner);
    }
    if (comm->tc != NULL) {
        br_transport_close_all(comm->tc, flush);
        if (comm->tc->net != NULL) {
            br_plugin_net_close(comm->tc->net);
        }
        if (comm->tc->boot != NULL) {
            br_bootstrap_close(comm->tc->boot);
        }
        free(comm->tc->peers);
        free(comm->tc);
    }
    if (comm->ec != NULL) {
        if (comm->ec->prof != NULL) {
            br_plugin_profiler_close(comm->ec->prof);
        }
        if (comm->ec->solo != NULL) {
            br_exec_batch_free(comm->ec->solo);
            free(comm->ec->solo);
        }
        free(comm->ec->gather_scratch);
        free(comm->ec->ring_rank);
        free(comm->ec->ring_pos_of);
        free(comm->ec->p2p_send);
        free(comm->ec->p2p_recv);
        free(comm->ec->send_seq);
        free(comm->ec->recv_seq);
        free(comm->ec);
    }
    pthread_mutex_destroy(&comm->lock);
    free(comm);
}
