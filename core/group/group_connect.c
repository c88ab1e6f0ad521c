/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A group's p2p connections, made before its host calls run: which connections its
 * sends, receives, v-collectives and Gather/Scatter/AlltoAll patterns need that do not
 * exist yet, one setup job per communicator (in parallel where one thread drives several
 * ranks), and the calls each connection is for, so that ranks that make different calls
 * fail naming both calls instead of waiting out BRAID_BOOTSTRAP_TIMEOUT for connections
 * their peers never make (br_conn_purpose_t).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "group_int.h"
#include "util.h"

typedef struct {
    ncclComm_t comm;
    char *need_send, *need_recv;
    br_slot_desc_t *recv_call, *send_call, *calls; /* br_p2p_calls_t's arrays */
    br_p2p_calls_t pc;
    int needed; /* a connection is missing */
    ncclResult_t res;
} connect_job_t;

static void *connect_one(void *arg)
{
    connect_job_t *j = arg;
    br_log_set_rank(j->comm->rank);
    j->res = br_comm_connect_p2p(j->comm, j->need_send, j->need_recv, &j->pc);
    if (j->res != ncclSuccess) {
        /* Fail the communicator with this thread's message and tell the other ranks now, as
         * a failed operation does: where one thread drives several ranks, theirs wait in
         * this same round of setup for this one. */
        br_exec_fail(j->comm->ec, j->res, "rank %d: p2p connection setup failed: %s",
                     j->comm->rank, br_log_last_error());
        br_bootstrap_abort_notify(j->comm->tc->boot, j->comm->ec->error_msg);
    }
    return NULL;
}

/* Flag a missing connection with peer p for a job, with the call that needs it. */
static int need_conn(connect_job_t *j, int p, int send, int recv, const br_slot_desc_t *call)
{
    const br_exec_comm_t *ec = j->comm->ec;
    int needed = 0;
    if (send && ec->p2p_send[p] == NULL && !j->need_send[p]) {
        j->need_send[p] = needed = 1;
        j->send_call[p] = *call;
    }
    if (recv && ec->p2p_recv[p] == NULL && !j->need_recv[p]) {
        j->need_recv[p] = needed = 1;
        j->recv_call[p] = *call;
    }
    return needed;
}

/* What a job's communicator needs from the queued operations: the missing connections,
 * the call each receive end is for, and the calls that have a number. Returns nonzero
 * when a connection is missing. */
static int job_needs(connect_job_t *j, const gcall_t *cs, int n)
{
    ncclComm_t comm = j->comm;
    int needed = 0;

    for (int i = 0; i < n; i++) {
        const br_op_t *op = &cs[i].op;
        if (cs[i].kind != G_OP || cs[i].comm != comm || op->on_device) {
            continue; /* device p2p runs inside the CUDA executor's launch */
        }
        br_slot_desc_t call = br_exec_call_desc(op);
        /* A pattern's operations are queued together: one entry per call. */
        if (call.seq != 0 && (j->pc.ncalls == 0 || j->calls[j->pc.ncalls - 1].seq != call.seq)) {
            j->calls[j->pc.ncalls++] = call;
        }
        if (op->peer == comm->rank || (op->count == 0 && !br_func_is_v(op->func))) {
            continue;
        }
        if (br_func_is_v(op->func)) {
            /* Every pair exchanges at least a descriptor, zero counts included. */
            for (int p = 0; p < comm->nranks; p++) {
                needed |= p != comm->rank && need_conn(j, p, 1, 1, &call);
            }
        } else if (op->func == BR_FUNC_SEND || op->func == BR_FUNC_RECV) {
            int send = op->func == BR_FUNC_SEND;
            needed |= need_conn(j, op->peer, send, !send, &call);
        }
    }
    return needed;
}

static void job_free(connect_job_t *j)
{
    free(j->need_send);
    free(j->need_recv);
    free(j->recv_call);
    free(j->send_call);
    free(j->calls);
    memset(j, 0, sizeof(*j));
}

/* Fail every communicator of jobs[0..n) with comm_hash `hash` (its ranks driven by this
 * group) with msg, and tell their peers elsewhere. */
static void fail_ranks(connect_job_t *jobs, int n, uint64_t hash, const char *msg)
{
    for (int i = 0; i < n; i++) {
        ncclComm_t comm = jobs[i].comm;
        if (comm->comm_hash == hash) {
            jobs[i].res = ncclInvalidUsage;
            br_exec_fail(comm->ec, ncclInvalidUsage, "%s", msg);
            br_bootstrap_abort_notify(comm->tc->boot, comm->ec->error_msg);
        }
    }
}

/* Ranks of one communicator that this group drives (ncclCommInitAll's, say) in different
 * calls of one number: the connections one waits for, the other would never make, and
 * neither call could start. Returns the index of a job it failed, or -1. */
static int cross_check(connect_job_t *jobs, int n)
{
    char msg[600], a_s[200], b_s[200];

    for (int a = 0; a < n; a++) {
        for (int b = a + 1; b < n; b++) {
            /* Two ranks of one communicator: the same id, not the same rank. */
            if (jobs[a].comm->comm_hash != jobs[b].comm->comm_hash ||
                jobs[a].comm->rank == jobs[b].comm->rank) {
                continue;
            }
            for (int i = 0; i < jobs[a].pc.ncalls; i++) {
                for (int k = 0; k < jobs[b].pc.ncalls; k++) {
                    const br_slot_desc_t *ca = &jobs[a].calls[i], *cb = &jobs[b].calls[k];
                    if (ca->seq != cb->seq || !br_exec_call_differs(ca, cb)) {
                        continue;
                    }
                    br_desc_describe(a_s, sizeof(a_s), ca);
                    br_desc_describe(b_s, sizeof(b_s), cb);
                    snprintf(msg, sizeof(msg),
                             "rank %d (host %s): mismatched calls: rank %d is in %s but rank %d "
                             "is in %s",
                             jobs[a].comm->rank, br_host_name(), jobs[a].comm->rank, a_s,
                             jobs[b].comm->rank, b_s);
                    BR_WARN(NCCL_P2P, "%s", msg);
                    fail_ranks(jobs, n, jobs[a].comm->comm_hash, msg);
                    return a;
                }
            }
        }
    }
    return -1;
}

ncclResult_t br_group_connect(gcall_t *cs, int n, ncclComm_t *comms, int ncomms)
{
    connect_job_t *jobs = NULL;
    int njobs = 0;
    ncclResult_t res = ncclSuccess;

    BR_CHECK(br_calloc(&jobs, (size_t)ncomms, "group"));
    for (int c = 0; c < ncomms; c++) {
        connect_job_t *j = &jobs[c];
        size_t nr = (size_t)comms[c]->nranks;
        j->comm = comms[c];
        BR_CHECK_GOTO(br_calloc(&j->need_send, nr, "group"), res, out);
        BR_CHECK_GOTO(br_calloc(&j->need_recv, nr, "group"), res, out);
        BR_CHECK_GOTO(br_calloc(&j->recv_call, nr, "group"), res, out);
        BR_CHECK_GOTO(br_calloc(&j->send_call, nr, "group"), res, out);
        BR_CHECK_GOTO(br_calloc(&j->calls, (size_t)(n > 0 ? n : 1), "group"), res, out);
        j->pc.recv_call = j->recv_call;
        j->pc.send_call = j->send_call;
        j->pc.calls = j->calls;
        j->needed = job_needs(j, cs, n);
        if (j->pc.ncalls > 0) {
            /* Wants peers sent while they waited for calls before these are answered. */
            br_transport_asks_prune(j->comm->tc, BR_TRANSPORT_TAG_P2P, j->calls[0].seq);
        }
    }
    /* The jobs with connections to make go first, to run in parallel. */
    for (int c = 0; c < ncomms; c++) {
        if (jobs[c].needed) {
            connect_job_t t = jobs[njobs];
            jobs[njobs++] = jobs[c];
            jobs[c] = t;
        }
    }
    /* Calls that make no connection cannot wait for one: look only when some will. */
    int failed = njobs > 0 && ncomms > 1 ? cross_check(jobs, ncomms) : -1;
    if (failed >= 0) {
        res = ncclInvalidUsage;
        br_log_set_last_error(jobs[failed].comm->ec->error_msg);
        goto out;
    }
    br_group_run_parallel(njobs, connect_one, jobs, sizeof(*jobs));
    for (int i = 0; i < njobs; i++) {
        if (jobs[i].res != ncclSuccess && res == ncclSuccess) {
            res = jobs[i].res;
            br_log_set_last_error(jobs[i].comm->ec->error_msg); /* set by connect_one */
        }
    }
out:
    for (int i = 0; i < ncomms; i++) {
        job_free(&jobs[i]);
    }
    free(jobs);
    return res;
}
