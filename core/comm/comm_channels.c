/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A communicator's channels: the graph (core/graph: every channel's ring and tree, built
 * from every rank's place in its node's topology, allgathered) and the connections they need, made
 * at init in one batch: per channel one send and one receive connection per distinct peer (ring
 * neighbours, tree parent and children; a ring link and a tree link to one peer share a connection,
 * as in NCCL). p2p connections are made on first use, in group end. Logs NCCL's
 * transcript: rings, trees, the transport of every link, "Connected all rings/trees".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "util.h"

#define BR_TAG_CHANNELS 1

/* Add peer to a channel's list unless it is there already (or is this rank). */
static void peer_add(int *list, int *n, int peer, int me)
{
    if (peer < 0 || peer == me) {
        return;
    }
    for (int i = 0; i < *n; i++) {
        if (list[i] == peer) {
            return;
        }
    }
    list[(*n)++] = peer;
}

/* The distinct peers of channel c: whom this rank sends to and receives from. */
static void channel_peers(const br_graph_t *g, int c, int me, br_exec_channel_t *ch)
{
    const int *ring = br_graph_ring(g, c), *pos = br_graph_ring_pos(g, c);
    const br_tree_node_t *t = br_graph_tree(g, c, me);
    int n = g->nranks, p = pos[me];

    ch->nsend = ch->nrecv = 0;
    peer_add(ch->send_peer, &ch->nsend, ring[(p + 1) % n], me);
    peer_add(ch->recv_peer, &ch->nrecv, ring[(p + n - 1) % n], me);
    peer_add(ch->send_peer, &ch->nsend, t->up, me);
    peer_add(ch->recv_peer, &ch->nrecv, t->up, me);
    for (int i = 0; i < t->ndown; i++) {
        peer_add(ch->send_peer, &ch->nsend, t->down[i], me);
        peer_add(ch->recv_peer, &ch->nrecv, t->down[i], me);
    }
}

static void log_links(ncclComm_t comm)
{
    br_exec_comm_t *ec = comm->ec;
    for (int c = 0; c < ec->nchannels; c++) {
        for (int i = 0; i < ec->chan[c].nsend; i++) {
            br_conn_t *s = ec->chan[c].send[i];
            BR_INFO(NCCL_INIT, "Channel %02d/0 : %d[%d] -> %d[%d] via %s%s%s", c, comm->rank,
                    comm->rank, s->peer, s->peer, br_transport_name(s->kind),
                    s->kind == BR_TRANSPORT_NET ? "/" : "",
                    s->kind == BR_TRANSPORT_NET ? comm->tc->net->name : "");
            ec->has_net |= s->kind == BR_TRANSPORT_NET;
        }
        for (int i = 0; i < ec->chan[c].nrecv; i++) {
            ec->has_net |= ec->chan[c].recv[i]->kind == BR_TRANSPORT_NET;
        }
    }
}

/* Connect every channel's peers: one list per direction, padded with -1, in channel order
 * so that both ends of each link list it alike. */
static ncclResult_t channels_connect(ncclComm_t comm, size_t step, size_t ll_wire)
{
    br_exec_comm_t *ec = comm->ec;
    int total = 0, k = 0;
    ncclResult_t res = ncclSuccess;

    for (int c = 0; c < ec->nchannels; c++) {
        channel_peers(comm->graph, c, comm->rank, &ec->chan[c]);
        total += BR_CHANNEL_PEERS;
    }
    int *rp = NULL, *sp = NULL;
    br_conn_t **rc = NULL, **sc = NULL;
    BR_CHECK_GOTO(br_calloc(&rp, (size_t)total, "channel setup"), res, out);
    BR_CHECK_GOTO(br_calloc(&sp, (size_t)total, "channel setup"), res, out);
    BR_CHECK_GOTO(br_calloc(&rc, (size_t)total, "channel setup"), res, out);
    BR_CHECK_GOTO(br_calloc(&sc, (size_t)total, "channel setup"), res, out);
    for (int c = 0; c < ec->nchannels; c++) {
        for (int i = 0; i < BR_CHANNEL_PEERS; i++, k++) {
            rp[k] = i < ec->chan[c].nrecv ? ec->chan[c].recv_peer[i] : -1;
            sp[k] = i < ec->chan[c].nsend ? ec->chan[c].send_peer[i] : -1;
        }
    }
    BR_CHECK_GOTO(br_transport_connect(comm->tc, total, rp, sp, BR_CHANNEL_PEERS, step, ll_wire,
                                       BR_TAG_CHANNELS, NULL, rc, sc),
                  res, out);
    for (int c = 0, i = 0; c < ec->nchannels; c++) {
        for (int j = 0; j < BR_CHANNEL_PEERS; j++, i++) {
            if (j < ec->chan[c].nrecv) {
                ec->chan[c].recv[j] = rc[i];
            }
            if (j < ec->chan[c].nsend) {
                ec->chan[c].send[j] = sc[i];
            }
        }
    }
out:
    free(rp);
    free(sp);
    free(rc);
    free(sc);
    return res;
}

/* Bytes of an LL slot on the wire: the agreed LL buffer over the slots, whole lines,
 * and no larger than a Simple slot (on net links LL lines travel in Simple slots). */
static size_t ll_wire_bytes(const br_transport_comm_t *tc, size_t step)
{
    size_t ll = ((size_t)tc->ll_buffsize / BR_STEPS) & ~(size_t)63;
    return ll < step ? ll : step;
}

/* The plugin device (among those in use) named `name`, -1 if none. */
static int net_dev_by_name(const br_net_t *net, const char *name)
{
    for (int i = 0; name != NULL && i < net->nused; i++) {
        if (strcmp(net->used_name[i], name) == 0) {
            return net->used[i];
        }
    }
    return -1;
}

/* Hand the NICs the placement chose to the net transport: the rank's own first, then the
 * others as near, in turn, each by its name among the plugin's devices. Returns the
 * plugin device of the rank's own NIC, -1 when the plugin has no device of that name (a
 * topology file of another machine): then connections are spread over every device. */
static int net_prefer(ncclComm_t comm, const br_topo_place_t *pl)
{
    br_transport_comm_t *tc = comm->tc;
    int nn = br_topo_count(comm->topo, BR_TOPO_NET), own = -1;

    tc->net_npref = 0;
    tc->net_pref_of = tc->net;
    if (tc->net == NULL || pl->net < 0) {
        return -1;
    }
    for (int k = 0; k < nn && tc->net_npref < BR_NET_MAX_DEVS; k++) {
        int i = (pl->net + k) % nn;
        if (i >= 64 || !(pl->net_near >> i & 1)) {
            continue;
        }
        int dev =
            net_dev_by_name(tc->net, br_topo_net_name(br_topo_node(comm->topo, BR_TOPO_NET, i)));
        own = k == 0 ? dev : own;
        if (dev >= 0 && own >= 0) {
            tc->net_pref[tc->net_npref++] = dev;
        }
    }
    return own;
}

/* This rank's place in its node's topology: on the GPU it is bound to when the topology
 * has it (gpu, a topology GPU index, else -1), else by its CPU set, with an INFO naming
 * its NIC, the net device its connections use and why. */
static void place_self(ncclComm_t comm, int gpu, br_topo_place_t *pl)
{
    br_transport_comm_t *tc = comm->tc;
    char why[256];
    int spread = 0;
    for (int r = 0; r < comm->rank; r++) {
        spread += tc->peers[r].host_hash == tc->peers[comm->rank].host_hash;
    }
    pl->host = tc->peers[comm->rank].host_hash;
    if (comm->topo == NULL) {
        br_topo_place_t none = {.host = pl->host,
                                .gpu = -1,
                                .gpu_dev = -1,
                                .cpu = -1,
                                .net = -1,
                                .net_dev = -1,
                                .net_path = BR_TOPO_PATH_DIS,
                                .intra_type = -1};
        *pl = none;
        tc->net_npref = 0;
        return;
    }
    if (gpu >= 0) {
        spread = br_topo_gpu_spread(comm->topo, gpu);
    }
    br_topo_place(comm->topo, gpu, -1, spread, pl, why, sizeof(why));
    if (pl->net < 0) {
        BR_INFO(NCCL_INIT | NCCL_NET | NCCL_GRAPH, "rank %d uses no NIC: %s", comm->rank, why);
        return;
    }
    int dev = net_prefer(comm, pl);
    if (tc->net == NULL) {
        BR_INFO(NCCL_INIT | NCCL_NET | NCCL_GRAPH, "rank %d uses NIC %d %s (no net plugin)",
                comm->rank, pl->net, why);
    } else if (dev < 0) {
        BR_INFO(NCCL_INIT | NCCL_NET | NCCL_GRAPH,
                "rank %d is nearest to NIC %d %s; network %s has no device of that name, so "
                "its connections are spread over the %d device%s in use",
                comm->rank, pl->net, why, tc->net->name, tc->net->nused,
                tc->net->nused == 1 ? "" : "s");
    } else {
        BR_INFO(NCCL_INIT | NCCL_NET | NCCL_GRAPH, "rank %d uses NIC %d %s; network %s device %d%s",
                comm->rank, pl->net, why, tc->net->name, dev,
                tc->net_npref > 1 ? " first, channels taking turns over the NICs as near" : "");
    }
}

/* Ranks by host, then /dev/shm, then rank: for qsort_r over indices into the peer table. */
static int by_host_shm(const void *a, const void *b, void *arg)
{
    const br_peer_info_t *pi = arg;
    const br_peer_info_t *x = &pi[*(const int *)a], *y = &pi[*(const int *)b];
    if (x->host_hash != y->host_hash) {
        return x->host_hash < y->host_hash ? -1 : 1;
    }
    if (x->shm_key != y->shm_key) {
        return x->shm_key < y->shm_key ? -1 : 1;
    }
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* Groups by their first entries in the sorted ranks: for qsort_r over group starts. */
static int by_first_rank(const void *a, const void *b, void *arg)
{
    const int *idx = arg;
    int x = idx[*(const int *)a], y = idx[*(const int *)b];
    return x < y ? -1 : x > y;
}

/* Position of the group bit in a place's order: far above any depth-first position. */
#define BR_ORDER_GROUP_SHIFT 20

/*
 * Where a host's ranks sit behind several /dev/shm (containers), put each group's ranks
 * side by side in the host's part of the rings (the graph orders a host's ranks by place
 * order, then rank): the groups in the order of their lowest ranks, each keeping its own
 * order. Then a ring crosses between containers once per group, not wherever the rank
 * numbers interleave them. Every rank computes the same from the peer table; O(n log n).
 */
static ncclResult_t order_by_shm(const br_transport_comm_t *tc, br_topo_place_t *places)
{
    int n = tc->nranks, *idx = NULL, *gs = NULL;
    ncclResult_t res = ncclSuccess;

    BR_CHECK(br_calloc(&idx, (size_t)n, "graph order"));
    BR_CHECK_GOTO(br_calloc(&gs, (size_t)n, "graph order"), res, out);
    for (int r = 0; r < n; r++) {
        idx[r] = r;
    }
    qsort_r(idx, (size_t)n, sizeof(*idx), by_host_shm, tc->peers);
    for (int h0 = 0, h1; h0 < n; h0 = h1) {
        int ng = 0;
        for (h1 = h0; h1 < n && tc->peers[idx[h1]].host_hash == tc->peers[idx[h0]].host_hash;
             h1++) {
            if (h1 == h0 || tc->peers[idx[h1]].shm_key != tc->peers[idx[h1 - 1]].shm_key) {
                gs[ng++] = h1; /* a group starts: its lowest rank */
            }
        }
        if (ng < 2) {
            continue;
        }
        qsort_r(gs, (size_t)ng, sizeof(*gs), by_first_rank, idx);
        for (int k = 0; k < ng; k++) {
            for (int j = gs[k];
                 j < h1 && tc->peers[idx[j]].shm_key == tc->peers[idx[gs[k]]].shm_key; j++) {
                places[idx[j]].order += k << BR_ORDER_GROUP_SHIFT;
            }
        }
    }
out:
    free(gs);
    free(idx);
    return res;
}

ncclResult_t br_comm_channels_setup(ncclComm_t comm)
{
    br_transport_comm_t *tc = comm->tc;
    br_exec_comm_t *ec = comm->ec;
    br_topo_place_t *places = NULL;
    ncclResult_t res = ncclSuccess;
    const char *dump = BR_PARAM_STR(GRAPH_DUMP_FILE);
    br_graph_opts_t opts = {.host_channels = ec->nchannels,
                            .min_channels = (int)BR_PARAM_INT(MIN_NCHANNELS),
                            .max_channels = (int)BR_PARAM_INT(MAX_NCHANNELS),
                            .file = BR_PARAM_STR(GRAPH_FILE),
                            .intra_net = br_comm_intra_hw(tc) == BR_HW_NET};

    /* Every rank builds the graph from everyone's place, so all build the same one. */
    BR_CHECK(br_calloc(&places, (size_t)comm->nranks, "graph setup"));
    place_self(comm, br_comm_topo_gpu(comm), &places[comm->rank]);
    res = br_bootstrap_allgather(tc->boot, places, sizeof(*places));
    if (res == ncclSuccess) {
        res = order_by_shm(tc, places);
    }
    if (res == ncclSuccess) {
        res = br_graph_build_places(comm->nranks, places, &opts, &comm->graph);
    }
    free(places);
    BR_CHECK(res);
    ec->nchannels = comm->graph->nchannels;
    ec->graph = comm->graph;
    br_graph_log(comm->graph, comm->rank);
    if (dump != NULL && comm->rank == 0) {
        BR_CHECK(br_graph_dump(comm->graph, dump));
    }
    br_bootstrap_test_exit(tc->boot, "init-connect");
    return br_comm_channels_connect(comm);
}

ncclResult_t br_comm_channels_connect(ncclComm_t comm)
{
    br_transport_comm_t *tc = comm->tc;
    br_exec_comm_t *ec = comm->ec;

    if (comm->nranks == 1) {
        return ncclSuccess;
    }
    size_t step = ((size_t)tc->buffsize / BR_STEPS) & ~(size_t)63;
    size_t ll_wire = ll_wire_bytes(tc, step);
    BR_CHECK(channels_connect(comm, step, ll_wire));
    log_links(comm);
    /* LL steps unpack what they receive from up to BR_MAX_TREE_ARITY peers and build what
     * they send in this scratch. */
    ec->ll_scratch_each = ll_wire / 2;
    if (ll_wire > 0) {
        BR_CHECK(br_calloc(&ec->ll_scratch, (BR_MAX_TREE_ARITY + 1) * ec->ll_scratch_each,
                           "LL scratch"));
    }
    BR_INFO(NCCL_INIT,
            "Connected all rings, %d channels of %zu-byte steps (LL %zu-byte lines "
            "slots)",
            ec->nchannels, step, ll_wire);
    BR_INFO(NCCL_INIT, "Connected all trees");
    return ncclSuccess;
}

typedef struct {
    ncclComm_t comm;
    const br_p2p_calls_t *calls;
} p2p_check_t;

/* br_conn_purpose_t's check: a peer asked for a connection in a call that has the number
 * of one of ours but is another call. */
static ncclResult_t p2p_check(void *arg, int peer, const br_slot_desc_t *theirs, int attached)
{
    const p2p_check_t *c = arg;
    char msg[600];

    (void)attached; /* the same mismatch, whether it waits for us or we attach to it */
    for (int i = 0; i < c->calls->ncalls; i++) {
        const br_slot_desc_t *mine = &c->calls->calls[i];
        if (mine->seq != theirs->seq) {
            continue;
        }
        if (!br_exec_call_differs(mine, theirs)) {
            return ncclSuccess;
        }
        br_exec_call_mismatch(msg, sizeof(msg), c->comm->rank, mine, peer,
                              c->comm->tc->peers[peer].host, theirs);
        BR_WARN(NCCL_INIT | NCCL_P2P, "%s", msg);
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

ncclResult_t br_comm_connect_p2p(ncclComm_t comm, const char *need_send, const char *need_recv,
                                 const br_p2p_calls_t *calls)
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
    br_exec_oplog_connecting(ec, recv_peers, send_peers); /* for the state dump */
    p2p_check_t check = {comm, calls};
    br_conn_purpose_t purpose = {calls != NULL ? calls->recv_call : NULL,
                                 calls != NULL ? calls->send_call : NULL, p2p_check, &check};
    BR_CHECK_GOTO(br_transport_connect(tc, n, recv_peers, send_peers, 1, (size_t)tc->p2p_chunk, 0,
                                       BR_TRANSPORT_TAG_P2P, calls != NULL ? &purpose : NULL, recv_conns,
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
