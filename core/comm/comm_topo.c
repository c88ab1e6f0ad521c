/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A communicator's topology at init: the process's topology (core/topo, built once per
 * process) is detected once per host. The host's first rank that shares detects it and
 * sends the XML down a binary tree of the host's other processes over the bootstrap
 * (tag BR_TAG_TOPO); each adopts it. Every parent first says hello to its children, so
 * that they see it die (their bootstrap connection from it closes) rather than wait out
 * the bootstrap timeout. Called by the thread that runs the rank's init.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "topo.h"
#include "util.h"

#define BR_TAG_TOPO 4 /* bootstrap tag; comm_channels.c uses 1 and 2, comm_split.c 3 */
#define BR_TOPO_TEXT_MAX (64 << 20) /* larger announced XML is a protocol error */

/* The process's topology, detected (or loaded from NCCL_TOPO_FILE) here, with the net
 * plugin's devices as its NICs. Only a bad NCCL_TOPO_FILE may fail. */
static ncclResult_t topo_build(ncclComm_t comm, const br_topo_t **topo_p, const char **source_p)
{
    br_net_t *net = comm->tc->net;
    br_topo_nic_info_t *nics = NULL;
    int n = 0;

    if (net != NULL && net->ndev > 0 && (nics = calloc((size_t)net->ndev, sizeof(*nics))) == NULL) {
        BR_INFO(NCCL_INIT | NCCL_GRAPH, "rank %d: out of memory listing NICs for the topology",
                comm->rank);
    }
    for (int d = 0; nics != NULL && d < net->ndev; d++) {
        ncclNetProperties_v12_t p;
        memset(&p, 0, sizeof(p));
        if (net->ops->get_properties(net, d, &p) != ncclSuccess) {
            continue; /* logged by the plugin; the topology goes without this device */
        }
        nics[n++] = (br_topo_nic_info_t){.name = p.name,
                                         .pci_path = p.pciPath,
                                         .dev = d,
                                         .speed = p.speed,
                                         .port = p.port,
                                         .guid = p.guid,
                                         .latency = (int)p.latency,
                                         .max_comms = p.maxComms,
                                         .gdr = (p.ptrSupport & NCCL_PTR_CUDA) != 0};
    }
    ncclResult_t res = br_topo_system_get(nics, n, comm->rank, topo_p, source_p);
    free(nics);
    return res;
}

/* What the first rank of a host sends ahead of the XML: its length, or one of these. */
#define TOPO_MSG_NONE (-1)   /* detection failed there: go without a topology */
#define TOPO_MSG_DETECT (-2) /* it could not send one: detect here */

/*
 * The host's ranks that take part in sharing its topology, in rank order: those that
 * share (peer info), less the other ranks of the first one's process, which have its
 * process's topology anyway. The first detects; position p receives from (p - 1) / 2 and
 * passes it on to 2p + 1 and 2p + 2, so the host's processes get it in log2 steps.
 * Returns this rank's position, -1 when it takes no part; *n_p gets the count.
 */
static int topo_share_list(const br_transport_comm_t *tc, int *list, int *n_p)
{
    const br_peer_info_t *me = &tc->peers[tc->rank];
    int n = 0, pos = -1;
    uint64_t first_pid = 0;

    for (int r = 0; r < tc->nranks; r++) {
        const br_peer_info_t *p = &tc->peers[r];
        /* Containers of one host may see different devices and CPU sets: a topology
         * goes only to ranks that share the same /dev/shm, i.e. the same container. */
        if (!p->topo_share || !br_peer_shares_shm(p, me)) {
            continue;
        }
        if (n > 0 && p->pid_hash == first_pid) {
            continue;
        }
        first_pid = n == 0 ? p->pid_hash : first_pid;
        pos = r == tc->rank ? n : pos;
        list[n++] = r;
    }
    *n_p = n;
    return me->topo_share ? pos : -1;
}

/* Tell the children of position pos (list[2 pos + 1] and list[2 pos + 2]) that their parent is
 * alive and on its way. The message opens the bootstrap connection to them, so that if this process
 * dies before the topology follows, their wait ends at once ("it closed its connection") instead of
 * at the bootstrap timeout. */
static ncclResult_t topo_hello(br_transport_comm_t *tc, const int *list, int n, int pos)
{
    const char hello = 1;
    for (int c = 2 * pos + 1; c <= 2 * pos + 2 && c < n; c++) {
        BR_CHECK(br_bootstrap_send(tc->boot, list[c], BR_TAG_TOPO, &hello, sizeof(hello)));
    }
    return ncclSuccess;
}

/* Pass the host's topology message (hdr, then hdr bytes of XML when hdr > 0) on to the
 * children of position pos. */
static ncclResult_t topo_forward(br_transport_comm_t *tc, const int *list, int n, int pos,
                                 int64_t hdr, const char *text)
{
    for (int c = 2 * pos + 1; c <= 2 * pos + 2 && c < n; c++) {
        BR_CHECK(br_bootstrap_send(tc->boot, list[c], BR_TAG_TOPO, &hdr, sizeof(hdr)));
        if (hdr > 0) {
            BR_CHECK(br_bootstrap_send(tc->boot, list[c], BR_TAG_TOPO, text, (size_t)hdr));
        }
    }
    return ncclSuccess;
}

/* The first rank of the host: detect, and send the result down the tree. */
static ncclResult_t topo_share_send(ncclComm_t comm, const int *list, int n,
                                    const br_topo_t **topo_p, const char **source_p)
{
    char *text = NULL;
    size_t len = 0;
    int64_t hdr = TOPO_MSG_NONE;
    ncclResult_t res = topo_hello(comm->tc, list, n, 0);

    if (res == ncclSuccess) {
        res = topo_build(comm, topo_p, source_p);
    }

    if (res != ncclSuccess) {
        hdr = TOPO_MSG_DETECT;
    } else if (*topo_p != NULL) {
        hdr = br_topo_to_text(*topo_p, &text, &len) == ncclSuccess ? (int64_t)len : TOPO_MSG_DETECT;
    }
    BR_INFO(NCCL_INIT | NCCL_GRAPH,
            "rank %d detected this host's topology for its %d other process%s (%lld bytes of "
            "XML)",
            comm->rank, n - 1, n == 2 ? "" : "es", (long long)hdr);
    ncclResult_t fres = topo_forward(comm->tc, list, n, 0, hdr, text);
    free(text);
    return res != ncclSuccess ? res : fres;
}

/* Any other rank of the host: receive from the parent, pass on, adopt. */
static ncclResult_t topo_share_recv(ncclComm_t comm, const int *list, int n, int pos,
                                    const br_topo_t **topo_p, const char **source_p)
{
    br_transport_comm_t *tc = comm->tc;
    int parent = list[(pos - 1) / 2];
    int64_t hdr = TOPO_MSG_DETECT;
    char *text = NULL, hello = 0;
    ncclResult_t res = topo_hello(tc, list, n, pos);

    if (res == ncclSuccess) {
        res = br_bootstrap_recv(tc->boot, parent, BR_TAG_TOPO, &hello, sizeof(hello));
    }
    if (res == ncclSuccess) {
        res = br_bootstrap_recv(tc->boot, parent, BR_TAG_TOPO, &hdr, sizeof(hdr));
    }

    if (res == ncclSuccess && hdr > (int64_t)BR_TOPO_TEXT_MAX) {
        BR_WARN(NCCL_INIT | NCCL_GRAPH, "rank %d (host %s): rank %d announced a %lld-byte topology",
                comm->rank, br_host_name(), parent, (long long)hdr);
        res = ncclInternalError;
    }
    if (res == ncclSuccess && hdr > 0) {
        res = br_calloc(&text, (size_t)hdr, "topology text");
        if (res == ncclSuccess) {
            res = br_bootstrap_recv(tc->boot, parent, BR_TAG_TOPO, text, (size_t)hdr);
        }
    }
    if (res != ncclSuccess) {
        /* The bootstrap said why (timeout, the peer's exit or failure); say what for. */
        BR_WARN(NCCL_INIT | NCCL_GRAPH,
                "rank %d (host %s): init failed waiting for this host's topology from rank %d "
                "(pid %d), which %s it (%s)",
                comm->rank, br_host_name(), parent, tc->peers[parent].pid,
                pos <= 2 ? "detects" : "passes on", br_log_last_error());
        free(text);
        return res;
    }
    res = topo_forward(tc, list, n, pos, hdr, text);
    if (res == ncclSuccess && hdr == TOPO_MSG_DETECT) {
        res = topo_build(comm, topo_p, source_p);
    } else if (res == ncclSuccess) {
        res = br_topo_system_adopt(hdr >= 0 ? text : NULL, hdr >= 0 ? (size_t)hdr : 0, list[0],
                                   comm->rank, topo_p, source_p);
    }
    free(text);
    return res;
}

/* The process's topology and this rank's "Topology:" summary; the graph places the rank in
 * it (comm_channels.c). One rank per host detects and the host's other processes get the
 * XML from it (BRAID_TOPO_SHARE): with 256 ranks as processes on 2 cores, 256 hwloc
 * detections took seconds. Only a bad NCCL_TOPO_FILE, or a failed exchange, fails init. */
ncclResult_t br_comm_topo_setup(ncclComm_t comm)
{
    const br_topo_t *topo = NULL;
    const char *source = NULL;
    int *list = NULL, n = 0, pos;
    ncclResult_t res;

    BR_CHECK(br_calloc(&list, (size_t)comm->nranks, "topology sharing"));
    pos = topo_share_list(comm->tc, list, &n);
    if (pos < 0 || n < 2) {
        res = topo_build(comm, &topo, &source);
    } else if (pos == 0) {
        res = topo_share_send(comm, list, n, &topo, &source);
    } else {
        res = topo_share_recv(comm, list, n, pos, &topo, &source);
    }
    free(list);
    if (res == ncclSuccess) {
        br_topo_log_summary(topo, source, comm->rank);
        comm->topo = topo;
    }
    return res;
}
