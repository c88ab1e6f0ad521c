/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Communicator init and teardown. Init: bootstrap, allgather of peer info, agreement on
 * channels and buffer sizes (minimum over ranks, so every rank cuts operations alike),
 * the net plugin, the machine's topology (comm_topo.c: one detection per host), the
 * channels (comm_channels.c: graph, ring and tree connections), the node arena, and the
 * plan with its plugins (comm_tune.c). A process-wide registry of live communicators lets
 * the API reject stale handles.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "topo.h"
#include "util.h"

#define BR_INIT_NPHASES 8

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

/* Take comm out of the registry; was it there? */
static int registry_remove(ncclComm_t comm)
{
    int found = 0;
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < registry_n; i++) {
        if (registry[i] == comm) {
            registry[i] = registry[--registry_n];
            found = 1;
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
    return found;
}

/* Is comm in the registry? Called with registry_lock. */
static int registry_has(ncclComm_t comm)
{
    for (int i = 0; i < registry_n; i++) {
        if (registry[i] == comm) {
            return 1;
        }
    }
    return 0;
}

int br_comm_is_live(ncclComm_t comm)
{
    int live;
    uint64_t gen = atomic_load_explicit(&registry_gen, memory_order_acquire);
    if (comm != NULL && comm == live_comm && gen == live_gen) {
        return comm->magic == BR_COMM_MAGIC; /* no comm was removed since we looked */
    }
    pthread_mutex_lock(&registry_lock);
    gen = atomic_load_explicit(&registry_gen, memory_order_relaxed);
    live = registry_has(comm);
    pthread_mutex_unlock(&registry_lock);
    live = live && comm->magic == BR_COMM_MAGIC;
    if (live) {
        live_comm = comm;
        live_gen = gen;
    }
    return live;
}

ncclResult_t br_comm_hold(ncclComm_t comm)
{
    int live;
    /* Under the lock: a comm found here cannot be freed before the reference is taken. */
    pthread_mutex_lock(&registry_lock);
    live = registry_has(comm);
    if (live) {
        atomic_fetch_add_explicit(&comm->refs, 1, memory_order_acq_rel);
    }
    pthread_mutex_unlock(&registry_lock);
    return live ? ncclSuccess : ncclInvalidArgument;
}

void br_comm_hold_again(ncclComm_t comm)
{
    atomic_fetch_add_explicit(&comm->refs, 1, memory_order_acq_rel);
}

void br_comm_unhold(ncclComm_t comm)
{
    if (atomic_fetch_sub_explicit(&comm->refs, 1, memory_order_acq_rel) == 1) {
        br_comm_free(comm, comm->flush);
    }
}

void br_comm_hold_queued(ncclComm_t comm)
{
    br_comm_hold_again(comm);
    atomic_fetch_add_explicit(&comm->queued, 1, memory_order_acq_rel);
}

void br_comm_dequeue(ncclComm_t comm)
{
    atomic_fetch_sub_explicit(&comm->queued, 1, memory_order_acq_rel);
}

int br_comm_busy(ncclComm_t comm)
{
    return atomic_load_explicit(&comm->refs, memory_order_acquire) - 1 -
           atomic_load_explicit(&comm->queued, memory_order_acquire);
}

void br_comm_revoke(ncclComm_t comm, const char *why)
{
    br_exec_revoke(comm->ec, why);
    br_exec_cuda_abort(comm->ec);
    /* Connection setup and splits wait in the bootstrap: end those waits too. */
    br_bootstrap_cancel(comm->tc->boot, why);
}

ncclResult_t br_comm_hold_all(ncclComm_t **comms_p, int *n_p)
{
    ncclComm_t *list = NULL;
    int n;

    pthread_mutex_lock(&registry_lock);
    n = registry_n;
    if (n > 0 && (list = malloc((size_t)n * sizeof(*list))) == NULL) {
        pthread_mutex_unlock(&registry_lock);
        BR_WARN(NCCL_ALLOC, "out of memory listing the communicators");
        return ncclSystemError;
    }
    for (int i = 0; i < n; i++) {
        list[i] = registry[i];
        atomic_fetch_add_explicit(&list[i]->refs, 1, memory_order_acq_rel);
    }
    pthread_mutex_unlock(&registry_lock);
    *comms_p = list;
    *n_p = n;
    return ncclSuccess;
}

ncclResult_t br_comm_release(ncclComm_t comm, int flush, const char *fn)
{
    if (!registry_remove(comm)) {
        BR_WARN(NCCL_INIT,
                "%s: %p is not a live communicator (another thread destroyed or "
                "aborted it first) (host %s)",
                fn, (void *)comm, br_host_name());
        return ncclInvalidArgument;
    }
    br_comm_dump_detach(comm);
    comm->flush = flush;
    if (!flush && br_exec_cuda_pending(comm->ec)) {
        /* Device calls still wait in their streams with no thread inside a call (a peer
         * may never make its own; a stager may be running one): stopped as calls in
         * flight are, and their streams released. */
        br_comm_revoke(comm, "the communicator was aborted (ncclCommAbort) while device calls "
                             "were in flight");
    }
    if (atomic_load_explicit(&comm->refs, memory_order_acquire) > 1) {
        /* Another thread is inside a call on it: stop that call, and do not wait on the
         * network for a flush it may never see. */
        char why[160];
        snprintf(why, sizeof(why), "the communicator was %s (%s) by another thread",
                 flush ? "destroyed" : "aborted", fn);
        comm->flush = 0;
        br_comm_revoke(comm, why);
        /* Let their calls fail and return, so their resources go now; a thread that holds
         * the comm in an open group frees it at its ncclGroupEnd instead. */
        uint64_t until = br_time_ns() + 2000000000ull;
        while (br_comm_busy(comm) > 0 && br_time_ns() < until) {
            usleep(1000);
        }
        if (atomic_load_explicit(&comm->refs, memory_order_acquire) > 1) {
            BR_INFO(NCCL_INIT,
                    "%s: rank %d: another thread still holds the communicator; it "
                    "is freed when that thread's call or group ends",
                    fn, comm->rank);
        }
    }
    br_comm_unhold(comm);
    return ncclSuccess;
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
 * where a machine has fewer than two cores per rank on it (measured on 2 cores: one
 * channel moves 1.3x-1.5x more than two, at 2 and 4 ranks) they only compete for the CPU.
 * Unless the user chose the channel count, the ring gets at most cpus / ranks on the
 * machine channels, the minimum over the ranks so that every rank cuts operations alike.
 * Machines, not hosts: ranks that NCCL_HOSTID puts on different hosts of one machine
 * still share its cores. */
static int net_channel_cap(const br_transport_comm_t *tc, int nch)
{
    for (int r = 0; r < tc->nranks; r++) {
        const br_peer_info_t *p = &tc->peers[r];
        int local = 0;
        if (!p->channels_auto) {
            return nch;
        }
        for (int i = 0; i < tc->nranks; i++) {
            local += tc->peers[i].machine_hash == p->machine_hash;
        }
        int cap = p->cpus > 0 ? p->cpus / local : nch;
        nch = cap < 1 ? 1 : (cap < nch ? cap : nch);
    }
    return nch;
}

/* Bytes of the node arena's large buffers, all ranks together, unless the user set
 * BRAID_ONESHOT_BYTES: every process maps (and touches) every rank's buffers, so the
 * arena must not grow with the rank count. 32 MiB leaves the 64 KiB default in place up
 * to 64 ranks; at 256 it was 136 MiB, mapped by each of the 256 processes. */
#define BR_ARENA_BUDGET (32u << 20)

/* This rank's one-shot limit: BRAID_ONESHOT_BYTES, capped by the arena budget when it is
 * the default. Every rank computes the same cap (the min over ranks is taken anyway). */
static int64_t oneshot_bytes(int nranks)
{
    int64_t v = BR_PARAM_INT(ONESHOT_BYTES);
    int64_t cap = (int64_t)(BR_ARENA_BUDGET / ((size_t)nranks * BR_ARENA_NBUF)) & ~(int64_t)63;
    return param_is_default("BRAID_ONESHOT_BYTES") && cap < v ? cap : v;
}

static void peer_info_fill(br_peer_info_t *pi, int rank, ncclComm_t comm)
{
    memset(pi, 0, sizeof(*pi));
    pi->rank = rank;
    pi->pid = (int)getpid();
    pi->host_hash = br_host_hash();
    pi->machine_hash = br_machine_hash();
    pi->pid_hash = br_pid_hash();
    pi->shm_key = br_shm_key(&pi->shm_dev);
    pi->pid_ns = br_pid_ns();
    pi->comm_ptr = (uint64_t)(uintptr_t)comm;
    pi->buffsize = BR_PARAM_INT(BUFFSIZE);
    pi->ll_buffsize = BR_PARAM_INT(LL_BUFFSIZE);
    pi->oneshot_bytes = oneshot_bytes(comm->nranks);
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
    pi->collnet_enable = (int)BR_PARAM_INT(COLLNET_ENABLE);
    pi->collnet_threshold = (int)BR_PARAM_INT(COLLNET_NODE_THRESHOLD);
    pi->topo_share = BR_PARAM_INT(TOPO_SHARE) != 0 && BR_PARAM_STR(TOPO_FILE) == NULL;
    snprintf(pi->host, sizeof(pi->host), "%s", br_host_name());
    br_comm_gpu_identity(comm->init_dev, pi->gpu_busid, sizeof(pi->gpu_busid), &pi->gpu_mps);
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
    tc->traffic_class = comm->traffic_class;
    tc->net_required = req.net_name != NULL && req.net_name[0] != '\0';
    if (res == ncclSuccess) {
        char devs[256];
        size_t len = 0;
        devs[0] = '\0';
        for (int i = 0; i < tc->net->nused && len < sizeof(devs); i++) {
            int n = snprintf(devs + len, sizeof(devs) - len, "%s%d:%s", i ? " " : "",
                             tc->net->used[i], tc->net->used_name[i]);
            len += n > 0 ? (size_t)n : 0;
        }
        BR_INFO(NCCL_INIT | NCCL_NET, "Using network %s (v%d, %d of %d devices: %s)", tc->net->name,
                tc->net->version, tc->net->nused, tc->net->ndev, devs);
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
    br_net_regs_init(&comm->tc->net_regs);
    BR_CHECK(br_calloc(&comm->ec, 1, "executor state"));
    BR_CHECK(br_calloc(&comm->tc->peers, (size_t)nranks, "peer table"));
    BR_CHECK(br_calloc(&comm->ec->p2p_send, (size_t)nranks, "p2p connections"));
    BR_CHECK(br_calloc(&comm->ec->p2p_recv, (size_t)nranks, "p2p connections"));
    BR_CHECK(br_calloc(&comm->ec->send_seq, (size_t)nranks, "p2p sequence numbers"));
    BR_CHECK(br_calloc(&comm->ec->recv_seq, (size_t)nranks, "p2p sequence numbers"));
    BR_CHECK(br_calloc(&comm->ec->fold_send_seq, (size_t)nranks, "p2p sequence numbers"));
    BR_CHECK(br_calloc(&comm->ec->fold_recv_seq, (size_t)nranks, "p2p sequence numbers"));
    comm->tc->rank = comm->ec->rank = rank;
    comm->tc->nranks = comm->ec->nranks = nranks;
    comm->ec->tc = comm->tc;
    return ncclSuccess;
}

/* Ranks per core above which shm FIFOs are not written through at setup. */
#define BR_PREFAULT_RANKS_PER_CPU 4

/* From which per-rank input size the node arena's AllGather and Broadcast copy into the
 * output with non-temporal stores (BRAID_NT_COPY_BYTES): where the sources and
 * destinations of the ranks copying at once (this host's ranks, at most one per CPU that
 * shares the last-level cache) no longer fit that cache. Measured on 2 cores sharing 32
 * MiB: two 8 MiB copies at once ran 1.4-1.8x faster with them, two 4 MiB ones slower
 * (docs/performance.md). */
static size_t nt_bytes(int local, long cpus, int rank)
{
    int64_t v = BR_PARAM_INT(NT_COPY_BYTES);
    if (v >= 0) {
        return (size_t)v;
    }
    int sharing = 0;
    const char *source = NULL;
    size_t llc = br_llc_size(&sharing, &source);
    long copiers = sharing > 0 ? sharing : cpus;
    copiers = local < copiers ? local : copiers;
    if (llc == 0 || copiers <= 0) {
        BR_INFO(NCCL_INIT, "rank %d: the last-level cache size is unknown: copies use memcpy "
                "only (BRAID_NT_COPY_BYTES sets where non-temporal stores start)", rank);
        return 0;
    }
    size_t v_auto = llc / (2 * (size_t)copiers);
    char shared[48] = "";
    if (sharing > 0) {
        snprintf(shared, sizeof(shared), " shared by %d CPUs", sharing);
    } else {
        snprintf(shared, sizeof(shared), " (CPUs sharing it unknown: %ld assumed)", cpus);
    }
    BR_INFO(NCCL_INIT, "rank %d: last-level cache %zu KiB%s (%s): arena copies stream from %zu "
            "KiB per rank", rank, llc >> 10, shared, source, v_auto >> 10);
    return v_auto;
}

/* What follows from how many ranks share this machine's cores: waiters yield instead of
 * spinning once there are more ranks than cores, and shared memory is prefaulted only
 * while there are at most BR_PREFAULT_RANKS_PER_CPU ranks per core (BRAID_FIFO_PREFAULT).
 * Prefaulting spares the first operations their page faults, but each rank writes every
 * page of its FIFOs (17 MiB with 2 channels and the default 4 MiB buffers) and maps every
 * page of the node arena: with 64 ranks on 2 cores that was 0.8 s of init, with 256
 * several seconds, for pages an init-and-exit job never uses. */
static void host_policy(ncclComm_t comm)
{
    const br_transport_comm_t *tc = comm->tc;
    int local = 0, sharing = 0, rank = comm->rank;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 0; i < comm->nranks; i++) {
        local += tc->peers[i].host_hash == tc->peers[rank].host_hash;
        sharing += tc->peers[i].machine_hash == tc->peers[rank].machine_hash;
    }
    /* Ranks that pretend to be on other hosts (NCCL_HOSTID) still share the cores. */
    comm->ec->oversubscribed = cpus > 0 && sharing > cpus;
    comm->ec->nt_bytes = nt_bytes(local, cpus, rank);
    comm->ec->a2av_inline = (size_t)BR_PARAM_INT(ALLTOALLV_INLINE_BYTES);
    int64_t prefault = BR_PARAM_INT(FIFO_PREFAULT);
    comm->tc->shm_prefault =
        prefault >= 0 ? prefault != 0 : cpus <= 0 || sharing <= BR_PREFAULT_RANKS_PER_CPU * cpus;
    BR_INFO(NCCL_INIT, "comm %p rank %d nRanks %d localRanks %d cpus %ld%s%s", (void *)comm, rank,
            comm->nranks, local, cpus,
            comm->ec->oversubscribed ? " (oversubscribed: waiters yield instead of spinning)" : "",
            comm->tc->shm_prefault ? "" : " (shared memory pages are faulted in on first use)");
}

/* Where init's time went, phase by phase (the ends in t[], from t0): what a slow init at
 * scale is profiled with. */
static void log_phases(int rank, uint64_t t0, const uint64_t *t)
{
    static const char *const names[BR_INIT_NPHASES] = {
        "bootstrap", "peer info", "net", "topology", "channels", "arena", "tune", "barrier"};
    char buf[256];
    size_t len = 0;
    uint64_t prev = t0;
    buf[0] = '\0';
    for (int i = 0; i < BR_INIT_NPHASES && len < sizeof(buf); i++) {
        int n = snprintf(buf + len, sizeof(buf) - len, "%s%s %.1f", i ? ", " : "", names[i],
                         (double)(t[i] - prev) * 1e-6);
        len += n > 0 ? (size_t)n : 0;
        prev = t[i];
    }
    BR_INFO(NCCL_INIT, "rank %d init phases (ms): %s", rank, buf);
}

ncclResult_t br_comm_env_init(void)
{
    BR_CHECK(br_plugin_env_open(BR_PARAM_STR(ENV_PLUGIN)));
    return br_comm_tls_env();
}

ncclResult_t br_comm_arena_setup(ncclComm_t comm)
{
    br_transport_comm_t *tc = comm->tc;
    int rank = comm->rank;
    size_t cma = (size_t)BR_PARAM_INT(CMA_BYTES);
    /* With more processes than cores, reading in place measured slower than the rings (4
     * ranks on 2 cores: 10-25 % less from 256 KiB to 1 MiB, docs/performance.md): a
     * reader's system call holds a core that the rank it waits for needs. Set explicitly,
     * it holds. Ranks that are threads of one process read with loads, no system call:
     * there it measured 1.5-4x the rings' busbw at 4 and 8 threads on 2 cores. */
    if (comm->ec->oversubscribed && cma > 0 && param_is_default("BRAID_CMA_BYTES") &&
        !br_transport_one_process(tc)) {
        BR_INFO(NCCL_SHM | NCCL_INIT,
                "rank %d: no single-copy reads: more ranks than cores on this host "
                "(BRAID_CMA_BYTES set explicitly turns them on)",
                rank);
        cma = 0;
    }
    /* An AlltoAllV's blocks between processes: with more processes than cores, from 256
     * KiB on a block read in place measured slower than the FIFOs (4 processes on 2 cores,
     * 1 and 16 MiB: 1.16-1.30x the grouped sends' time) while 128 KiB ones were faster
     * (8 processes, 1 MiB: 0.63x; docs/performance.md). */
    int64_t a2av_max = BR_PARAM_INT(ALLTOALLV_READ_MAX_BYTES);
    if (a2av_max < 0) {
        a2av_max = comm->ec->oversubscribed ? (int64_t)128 << 10 : BR_PARAM_INT(CMA_MAX_BYTES);
    }
    BR_CHECK(br_transport_arena_setup(tc, comm->oneshot_bytes, cma,
                                      (size_t)BR_PARAM_INT(CMA_MAX_BYTES),
                                      BR_PARAM_INT(ALLTOALLV_ARENA) != 0, (size_t)a2av_max));
    comm->ec->arena = tc->arena;
    return ncclSuccess;
}

ncclResult_t br_comm_init(ncclComm_t *comm_p, int nranks, const ncclUniqueId *id, int rank,
                          const ncclConfig_t *config)
{
    ncclResult_t res;
    ncclComm_t comm = NULL;
    br_transport_comm_t *tc;
    uint64_t t0 = br_time_ns();
    uint64_t t[BR_INIT_NPHASES]; /* end of each phase, for the INFO breakdown */
    int needed = 0, nch = BR_MAX_CHANNELS;

    br_log_set_rank(rank);
    BR_CHECK(br_comm_env_init());
    BR_CHECK_GOTO(comm_alloc(&comm, nranks, rank), res, fail);
    config_apply(comm, config);
    comm->init_dev = br_comm_init_device(); /* before placement: the rank's GPU */
    tc = comm->tc;
    comm->comm_hash = br_hash_bytes(id, sizeof(*id), 0x62726169);
    tc->comm_hash = comm->comm_hash;
    BR_INFO(NCCL_INIT, "ncclCommInitRank comm %p rank %d nranks %d commId 0x%llx - Init START",
            (void *)comm, rank, nranks, (unsigned long long)comm->comm_hash);
    BR_CHECK_GOTO(br_bootstrap_init(id, rank, nranks, &tc->boot), res, fail);
    t[0] = br_time_ns();
    peer_info_fill(&tc->peers[rank], rank, comm);
    BR_CHECK_GOTO(br_bootstrap_allgather(tc->boot, tc->peers, sizeof(br_peer_info_t)), res, fail);
    t[1] = br_time_ns();
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
        if (i == 0 || p->ll_buffsize < tc->ll_buffsize) {
            tc->ll_buffsize = p->ll_buffsize;
        }
        if (i == 0 || p->pipeline < comm->pipeline) {
            comm->pipeline = p->pipeline;
        }
        if (i == 0 || (size_t)p->oneshot_bytes < comm->oneshot_bytes) {
            comm->oneshot_bytes = (size_t)p->oneshot_bytes;
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
    host_policy(comm);
    br_transport_report_split(tc);
    if (tc->buffsize < BR_STEPS * 64 || tc->p2p_chunk < 64 || tc->ll_buffsize < 0) {
        BR_WARN(NCCL_INIT,
                "NCCL_BUFFSIZE %lld, NCCL_LL_BUFFSIZE %lld or NCCL_P2P_NET_CHUNKSIZE %lld is too "
                "small (at least %d, 0 and 64 bytes)",
                (long long)tc->buffsize, (long long)tc->ll_buffsize, (long long)tc->p2p_chunk,
                BR_STEPS * 64);
        res = ncclInvalidUsage;
        goto fail;
    }
    BR_CHECK_GOTO(net_setup(comm, needed), res, fail);
    t[2] = br_time_ns();
    BR_CHECK_GOTO(br_comm_topo_setup(comm), res, fail); /* comm_topo.c */
    t[3] = br_time_ns();
    BR_CHECK_GOTO(br_comm_channels_setup(comm), res, fail);
    t[4] = br_time_ns();
    BR_CHECK_GOTO(br_comm_arena_setup(comm), res, fail);
    t[5] = br_time_ns();
    BR_CHECK_GOTO(br_comm_tune_setup(comm), res, fail);
    BR_CHECK_GOTO(br_comm_check_consistency(comm), res, fail);
    BR_CHECK_GOTO(br_comm_cuda_setup(comm), res, fail);
    t[6] = br_time_ns();
    BR_CHECK_GOTO(br_bootstrap_barrier(tc->boot), res, fail);
    t[7] = br_time_ns();
    comm->magic = BR_COMM_MAGIC;
    atomic_store_explicit(&comm->refs, 1, memory_order_release); /* the registry's */
    BR_CHECK_GOTO(registry_add(comm), res, fail);
    BR_CHECK_GOTO(br_comm_dump_attach(comm), res, fail); /* comm_dump.c */
    log_phases(rank, t0, t);
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

void br_comm_free(ncclComm_t comm, int flush)
{
    if (comm == NULL) {
        return;
    }
    /* The stager of device calls finishes what was deposited while the transports exist. */
    if (comm->ec != NULL) {
        br_exec_cuda_stage_detach(comm->ec);
    }
    registry_remove(comm);
    comm->magic = 0;
    br_plan_free(comm->plan);
    if (comm->tuner != NULL) {
        br_plugin_tuner_close(comm->tuner);
    }
    br_comm_collnet_free(comm);
    if (comm->tc != NULL) {
        br_transport_close_all(comm->tc, flush);
        if (comm->tc->net != NULL) {
            br_plugin_net_close(comm->tc->net);
        }
        if (comm->tc->boot != NULL) {
            br_bootstrap_close(comm->tc->boot);
        }
        free(comm->tc->peers);
        br_net_regs_fini(&comm->tc->net_regs);
        free(comm->tc);
    }
    br_graph_free(comm->graph);
    if (comm->ec != NULL) {
        if (comm->ec->prof != NULL) {
            br_plugin_profiler_close(comm->ec->prof);
        }
        br_exec_cuda_detach(comm->ec);
        br_exec_comm_release(comm->ec);
        free(comm->ec->p2p_send);
        free(comm->ec->p2p_recv);
        free(comm->ec->send_seq);
        free(comm->ec->recv_seq);
        free(comm->ec->fold_send_seq);
        free(comm->ec->fold_recv_seq);
        free(comm->ec);
    }
    br_comm_rma_free(comm);
    pthread_mutex_destroy(&comm->lock);
    free(comm);
}
