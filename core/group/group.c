/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Group state lives in thread-local storage: the nesting depth and the queued calls.
 * At the outermost ncclGroupEnd the queue is executed in three phases: communicator
 * creation (parallel threads when several), p2p connection setup per communicator
 * (parallel threads when several), then one executor batch with every operation.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "group_int.h"
#include "util.h"

static _Thread_local int depth;
static _Thread_local ncclResult_t group_error;
static _Thread_local char group_error_msg[512]; /* what the call that set it logged */
static _Thread_local gcall_t *calls;
static _Thread_local int ncalls, calls_cap;

/* The profiler's GroupApi event of each communicator the open group has operations of,
 * with the event mask snapshot taken when it started. */
typedef struct {
    ncclComm_t comm;
    void *handle;
    int mask;
} gprof_t;
static _Thread_local gprof_t *gprofs;
static _Thread_local int ngprofs, gprofs_cap;

int br_group_depth(void)
{
    return depth;
}

void br_group_note_error(ncclResult_t res)
{
    if (depth > 0 && res != ncclSuccess && group_error == ncclSuccess) {
        group_error = res;
        snprintf(group_error_msg, sizeof(group_error_msg), "%s", br_log_last_error());
    }
}

ncclResult_t br_group_start(void)
{
    depth++;
    return ncclSuccess;
}

static ncclResult_t push(const gcall_t *c)
{
    if (ncalls == calls_cap) {
        int cap = calls_cap ? 2 * calls_cap : 32;
        gcall_t *nc = realloc(calls, (size_t)cap * sizeof(*nc));
        if (nc == NULL) {
            BR_WARN(NCCL_ALLOC, "out of memory queueing a group call");
            return ncclSystemError;
        }
        calls = nc;
        calls_cap = cap;
    }
    calls[ncalls++] = *c;
    if (c->comm != NULL) {
        br_comm_hold_queued(c->comm); /* the caller holds it; the queue now does too */
    }
    return ncclSuccess;
}

/* The queue is running: its holds now count as a thread inside a call. */
static void dequeue_all(gcall_t *cs, int n)
{
    for (int i = 0; i < n; i++) {
        if (cs[i].comm != NULL) {
            br_comm_dequeue(cs[i].comm);
        }
    }
}

/* Drop the queue's references: the last may free a communicator released meanwhile. An
 * operation that did not finish by now failed (the operation log says so). */
static void unhold_all(gcall_t *cs, int n)
{
    for (int i = 0; i < n; i++) {
        if (cs[i].kind == G_OP) {
            br_exec_oplog_settle(cs[i].comm->ec, &cs[i].op);
        }
        if (cs[i].kind == G_OP) {
            free(cs[i].op.v); /* a v-collective's counts: the call has ended */
        }
        if (cs[i].comm != NULL) {
            br_comm_unhold(cs[i].comm);
        }
    }
}

void br_group_run_parallel(int n, void *(*fn)(void *), void *args, size_t arg_size)
{
    pthread_t *th = n > 1 ? calloc((size_t)n, sizeof(*th)) : NULL;
    char *started = n > 1 ? calloc((size_t)n, 1) : NULL;
    for (int i = 0; i < n; i++) {
        void *a = (char *)args + (size_t)i * arg_size;
        if (th != NULL && started != NULL && pthread_create(&th[i], NULL, fn, a) == 0) {
            started[i] = 1;
        } else {
            fn(a);
        }
    }
    for (int i = 0; i < n && th != NULL && started != NULL; i++) {
        if (started[i]) {
            pthread_join(th[i], NULL);
        }
    }
    free(th);
    free(started);
}

static void *create_one(void *arg)
{
    gcall_t *c = arg;
    const ncclConfig_t *cfg = c->has_config ? &c->config : NULL;
    br_comm_set_stage_runner(br_group_run_host);
    br_comm_set_init_device(c->device);
    if (c->kind == G_INIT) {
        c->res = br_comm_init(c->out, c->nranks, &c->id, c->rank, cfg);
    } else {
        br_log_set_rank(c->comm->rank);
        c->res = br_comm_split(c->comm, c->color, c->key, c->out, cfg);
    }
    br_comm_set_init_device(BR_COMM_DEVICE_CURRENT);
    return NULL;
}

static ncclResult_t run_creations(gcall_t *cs, int n)
{
    gcall_t *list = NULL;
    int k = 0;
    ncclResult_t res = ncclSuccess;

    BR_CHECK(br_calloc(&list, (size_t)(n > 0 ? n : 1), "group"));
    for (int i = 0; i < n; i++) {
        if (cs[i].kind != G_OP) {
            list[k++] = cs[i];
        }
    }
    br_group_run_parallel(k, create_one, list, sizeof(*list));
    for (int i = 0; i < k; i++) {
        if (list[i].res != ncclSuccess && res == ncclSuccess) {
            res = list[i].res;
        }
    }
    free(list);
    return res;
}

/* Distinct communicators of the queued operations, in first-use order. */
static int op_comms(gcall_t *cs, int n, ncclComm_t *out)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        if (cs[i].kind != G_OP) {
            continue;
        }
        for (int j = 0; j < k; j++) {
            seen |= out[j] == cs[i].comm;
        }
        if (!seen) {
            out[k++] = cs[i].comm;
        }
    }
    return k;
}

/* Sends to self are matched, in order, with receives from self of the same comm. */
static ncclResult_t pair_self(br_exec_batch_t *b, gcall_t *cs, int n, ncclComm_t comm)
{
    int ri = 0;
    for (int si = 0; si < n; si++) {
        const br_op_t *s = &cs[si].op;
        if (cs[si].kind != G_OP || cs[si].comm != comm || s->func != BR_FUNC_SEND ||
            s->peer != comm->rank || s->on_device) {
            continue;
        }
        while (ri < n && (cs[ri].kind != G_OP || cs[ri].comm != comm || cs[ri].op.on_device ||
                          cs[ri].op.func != BR_FUNC_RECV || cs[ri].op.peer != comm->rank)) {
            ri++;
        }
        if (ri == n) {
            BR_WARN(NCCL_P2P,
                    "rank %d: ncclSend to itself has no matching ncclRecv from itself "
                    "in the same group",
                    comm->rank);
            return ncclInvalidUsage;
        }
        const br_op_t *r = &cs[ri++].op;
        size_t sb = s->count * br_type_size(s->type), rb = r->count * br_type_size(r->type);
        if (sb != rb) {
            BR_WARN(NCCL_P2P,
                    "rank %d: ncclSend to itself of %zu bytes does not match the "
                    "ncclRecv from itself of %zu bytes",
                    comm->rank, sb, rb);
            return ncclInvalidUsage;
        }
        BR_CHECK(br_exec_host.enqueue_copy(b, comm->ec, s->sendbuff, r->recvbuff, sb));
    }
    for (; ri < n; ri++) {
        if (cs[ri].kind == G_OP && cs[ri].comm == comm && cs[ri].op.func == BR_FUNC_RECV &&
            cs[ri].op.peer == comm->rank && !cs[ri].op.on_device) {
            BR_WARN(NCCL_P2P,
                    "rank %d: ncclRecv from itself has no matching ncclSend to itself "
                    "in the same group",
                    comm->rank);
            return ncclInvalidUsage;
        }
    }
    return ncclSuccess;
}

static int by_hash(const void *a, const void *b)
{
    uint64_t x = (*(const ncclComm_t *)a)->comm_hash, y = (*(const ncclComm_t *)b)->comm_hash;
    return x < y ? -1 : x > y;
}

/* Every communicator's device operations of the group, deposited with the CUDA executor in
 * call order (one deposit per communicator), then the streams' waits: two ranks of the
 * group on one stream must both have arrived before that stream waits. Operations on
 * streams being captured into a CUDA graph go to the executor's capture path together. */
static ncclResult_t submit_device(gcall_t *cs, int n, ncclComm_t *const in_order, int ncomms)
{
    ncclComm_t *comms = NULL;
    br_op_t *ops = NULL;
    const br_op_t **first = NULL;
    br_exec_comm_t **ecs = NULL;
    int *nops = NULL, ndev = 0, capturing = 0, k = 0;
    uint64_t *ticket = NULL;
    ncclResult_t res = ncclSuccess;

    for (int i = 0; i < n; i++) {
        ndev += cs[i].kind == G_OP && cs[i].op.on_device;
    }
    if (ndev == 0) {
        return ncclSuccess;
    }
    if (br_calloc(&comms, (size_t)ncomms, "group") != ncclSuccess ||
        br_calloc(&ops, (size_t)ndev, "group") != ncclSuccess ||
        br_calloc(&first, (size_t)ncomms, "group") != ncclSuccess ||
        br_calloc(&ecs, (size_t)ncomms, "group") != ncclSuccess ||
        br_calloc(&nops, (size_t)ncomms, "group") != ncclSuccess ||
        br_calloc(&ticket, (size_t)ncomms, "group") != ncclSuccess) {
        res = ncclSystemError;
        goto out;
    }
    /* Each communicator's operations, contiguous and in call order; communicators in the
     * order of their hashes, the same on every rank whatever order each called them in
     * (calls between processes enqueue their barriers at once, in that order). */
    int m = 0;
    memcpy(comms, in_order, (size_t)ncomms * sizeof(*comms));
    qsort(comms, (size_t)ncomms, sizeof(*comms), by_hash);
    for (int c = 0; c < ncomms; c++) {
        int start = k;
        for (int i = 0; i < n; i++) {
            if (cs[i].kind == G_OP && cs[i].comm == comms[c] && cs[i].op.on_device) {
                ops[k++] = cs[i].op;
            }
        }
        if (k > start) {
            first[m] = &ops[start];
            nops[m] = k - start;
            ecs[m] = comms[c]->ec;
            capturing |= br_exec_cuda_capturing(ops[start].stream);
            m++;
        }
    }
    if (capturing) {
        res = br_exec_cuda_capture(ecs, first, nops, m);
        goto out;
    }
    int deposited = 0;
    for (int c = 0; c < m && res == ncclSuccess; c++) {
        res = br_exec_cuda_deposit(ecs[c], first[c], nops[c], &ticket[c]);
        deposited += res == ncclSuccess;
    }
    for (int c = 0; c < deposited; c++) {
        ncclResult_t w = br_exec_cuda_wait(ecs[c], ticket[c], first[c][0].stream);
        res = res == ncclSuccess ? w : res;
    }
out:
    free(comms);
    free(ops);
    free(first);
    free(ecs);
    free(nops);
    free(ticket);
    return res;
}

ncclResult_t br_group_run_batch(gcall_t *cs, int n)
{
    ncclComm_t *comms = NULL;
    br_exec_batch_t batch;
    ncclResult_t res = ncclSuccess;
    int ncomms;

    memset(&batch, 0, sizeof(batch));
    BR_CHECK(br_calloc(&comms, (size_t)(n > 0 ? n : 1), "group"));
    ncomms = op_comms(cs, n, comms);
    if (ncomms == 0) {
        goto out;
    }
    for (int c = 0; c < ncomms; c++) {
        if (comms[c]->ec->error != ncclSuccess) {
            BR_WARN(NCCL_COLL, "rank %d: communicator already failed: %s", comms[c]->rank,
                    comms[c]->ec->error_msg);
            res = comms[c]->ec->error;
            goto out;
        }
    }
    /* Device calls first: they are only queued on their streams, and one of the group's
     * host calls may wait for a peer that waits for them. */
    BR_CHECK_GOTO(submit_device(cs, n, comms, ncomms), res, out);
    /* The group's host calls run after its device calls on communicators that stage them
     * (only a caller's group holds both: a stager's holds host calls only). */
    for (int i = 0; i < n; i++) {
        if (cs[i].kind == G_OP && cs[i].op.on_device && cs[i].comm->ec->stage != NULL) {
            br_exec_cuda_stage_quiesce(cs[i].comm->ec);
        }
    }
    BR_CHECK_GOTO(br_group_connect(cs, n, comms, ncomms), res, out);
    for (int c = 0; c < ncomms; c++) {
        BR_CHECK_GOTO(pair_self(&batch, cs, n, comms[c]), res, out);
    }
    for (int i = 0; i < n; i++) {
        const br_op_t *op = &cs[i].op;
        if (cs[i].kind != G_OP || op->on_device || br_group_is_fold(&cs[i]) ||
            ((op->func == BR_FUNC_SEND || op->func == BR_FUNC_RECV) &&
             op->peer == cs[i].comm->rank)) {
            continue;
        }
        BR_CHECK_GOTO(br_exec_host.enqueue(&batch, cs[i].comm->ec, op), res, out);
    }
    res = br_exec_host.run(&batch);
out:
    br_exec_host.free(&batch);
    free(comms);
    return res;
}

int br_group_is_fold(const gcall_t *c)
{
    return c->kind == G_OP && !c->op.on_device && br_op_owner_fold(&c->op, c->comm->nranks);
}

/* The group's operations: everything but the owner folds in one batch, then those. */
static ncclResult_t run_ops(gcall_t *cs, int n)
{
    int folds = 0;
    for (int i = 0; i < n; i++) {
        folds += br_group_is_fold(&cs[i]);
    }
    ncclResult_t res = br_group_run_batch(cs, n);
    if (res == ncclSuccess && folds > 0) {
        res = br_group_fold_run(cs, n);
    }
    return res;
}

ncclResult_t br_group_run_host(void *comm_v, br_op_t *ops, int nops)
{
    ncclComm_t comm = comm_v;
    gcall_t *cs = NULL;
    ncclResult_t res = ncclSuccess;

    BR_CHECK(br_calloc(&cs, (size_t)nops, "group"));
    for (int i = 0; i < nops && res == ncclSuccess; i++) {
        br_op_t *op = &ops[i];
        if (br_func_is_collective(op->func) && !br_op_owner_fold(op, comm->nranks)) {
            res = br_plan_choose(comm->plan, op);
        }
        op->log_ticket = 0;
        if ((op->func != BR_FUNC_SEND && op->func != BR_FUNC_RECV) || op->peer != comm->rank) {
            br_exec_oplog_add(comm->ec, op);
        }
        cs[i].kind = G_OP;
        cs[i].comm = comm;
        cs[i].op = *op;
    }
    if (res == ncclSuccess) {
        res = run_ops(cs, nops);
    }
    for (int i = 0; i < nops; i++) {
        br_exec_oplog_settle(comm->ec, &cs[i].op);
    }
    free(cs);
    return res;
}

/* The open group's GroupApi event for comm, started on its first operation. */
static const gprof_t *group_prof(ncclComm_t comm)
{
    for (int i = 0; i < ngprofs; i++) {
        if (gprofs[i].comm == comm) {
            return &gprofs[i];
        }
    }
    if (ngprofs == gprofs_cap) {
        int cap = gprofs_cap ? 2 * gprofs_cap : 8;
        gprof_t *g = realloc(gprofs, (size_t)cap * sizeof(*g));
        if (g == NULL) {
            return NULL; /* not profiled, nothing else lost */
        }
        gprofs = g;
        gprofs_cap = cap;
    }
    gprof_t *g = &gprofs[ngprofs++];
    g->comm = comm;
    g->mask = br_exec_prof_mask(comm->ec);
    /* A stand-alone call is an implicit group of depth 1; inside ncclGroupStart, 2 and up. */
    g->handle = br_exec_prof_group_start(comm->ec, g->mask, depth + 1);
    return g;
}

/* The outermost ncclGroupEnd begins (GroupEndApiStart), or it ended (stop). Each group
 * event's comm is still held by the calls of the group. */
static void group_prof_end_api(void)
{
    for (int i = 0; i < ngprofs; i++) {
        br_exec_prof_group_end_api(gprofs[i].comm->ec, gprofs[i].handle);
    }
}

static void group_prof_stop(void)
{
    for (int i = 0; i < ngprofs; i++) {
        br_exec_prof_group_stop(gprofs[i].comm->ec, gprofs[i].handle);
    }
    /* Freed per group (only profiled groups have one): a thread that ends leaves nothing. */
    free(gprofs);
    gprofs = NULL;
    ngprofs = gprofs_cap = 0;
}

/* ncclGroupSimulateEnd: the group's collectives are planned as ncclGroupEnd would plan
 * them and their predicted times summed; nothing runs. The sequence numbers the queued
 * calls took are given back, so the next real group matches its peers as if the
 * simulated one had never been queued (the state dump lists them as not run). */
static float simulate_ops(gcall_t *cs, int n)
{
    float total = 0.0f;
    for (int i = n - 1; i >= 0; i--) {
        br_op_t *op = &cs[i].op;
        if (cs[i].kind != G_OP) {
            continue;
        }
        br_exec_comm_t *ec = cs[i].comm->ec;
        if (op->func == BR_FUNC_SEND || op->func == BR_FUNC_RECV) {
            if (op->func == BR_FUNC_SEND) {
                ec->send_seq[op->peer]--;
            } else {
                ec->recv_seq[op->peer]--;
            }
            /* Going backwards, a pattern's number is the last one taken when its first
             * operation from the end is reached: give it back once. */
            if (op->pattern_seq != 0 && op->pattern_seq == ec->coll_seq) {
                ec->coll_seq--;
            }
        } else {
            int a, p, nch;
            float us = 0.0f;
            ec->coll_seq--;
            if (br_func_is_collective(op->func) &&
                br_plan_predict(cs[i].comm->plan, (int)op->func, br_op_bytes(op), 1, &a, &p, &nch,
                                &us) == ncclSuccess) {
                total += us;
            }
        }
    }
    return total;
}

ncclResult_t br_group_simulate_end(float *us_p)
{
    if (depth == 0) {
        BR_WARN(NCCL_INIT, "ncclGroupSimulateEnd called without a matching ncclGroupStart");
        return ncclInvalidUsage;
    }
    if (depth > 1) {
        depth--;
        *us_p = 0.0f;
        return ncclSuccess;
    }
    depth = 0;
    gcall_t *cs = calls;
    int n = ncalls;
    calls = NULL;
    ncalls = calls_cap = 0;
    dequeue_all(cs, n);
    ncclResult_t res = group_error;
    group_error = ncclSuccess;
    group_prof_end_api();
    if (res == ncclSuccess) {
        res = run_creations(cs, n);
    }
    if (res == ncclSuccess) {
        *us_p = simulate_ops(cs, n);
    }
    group_prof_stop();
    unhold_all(cs, n);
    free(cs);
    return res;
}

ncclResult_t br_group_end(void)
{
    ncclResult_t res;
    gcall_t *cs;
    int n;

    if (depth == 0) {
        BR_WARN(NCCL_INIT, "ncclGroupEnd called without a matching ncclGroupStart");
        return ncclInvalidUsage;
    }
    if (--depth > 0) {
        return ncclSuccess;
    }
    /* Take the queue: what runs below may not queue into it. */
    cs = calls;
    n = ncalls;
    calls = NULL;
    ncalls = calls_cap = 0;
    dequeue_all(cs, n);
    if (group_error != ncclSuccess) {
        res = group_error;
        group_error = ncclSuccess;
        BR_WARN(NCCL_INIT,
                "ncclGroupEnd: a call inside the group failed (error %d: %s); the group's "
                "%d queued calls were not run",
                (int)res, group_error_msg, n);
        group_prof_end_api();
        group_prof_stop();
        unhold_all(cs, n);
        free(cs);
        return res;
    }
    group_prof_end_api();
    res = run_creations(cs, n);
    if (res == ncclSuccess) {
        res = run_ops(cs, n);
    }
    group_prof_stop();
    unhold_all(cs, n);
    free(cs);
    return res;
}

static ncclResult_t add_op(ncclComm_t comm, br_op_t *op);

ncclResult_t br_group_add_op(ncclComm_t comm, br_op_t *op)
{
    ncclResult_t res = add_op(comm, op);
    free(op->v); /* not queued (queued, the queue owns it and op->v is NULL) */
    op->v = NULL;
    return res;
}

uint64_t br_group_pattern_number(ncclComm_t comm)
{
    return comm->ec->coll_seq++;
}

static ncclResult_t add_op(ncclComm_t comm, br_op_t *op)
{
    gcall_t c;
    br_exec_comm_t *ec = comm->ec;

    if (!op->on_device && ec->stage != NULL) {
        /* Host calls run after the device calls made before them (their stager drives the
         * same connections). */
        br_exec_cuda_stage_quiesce(ec);
    }
    if (op->func == BR_FUNC_SEND) {
        op->seq = ec->send_seq[op->peer]++;
    } else if (op->func == BR_FUNC_RECV) {
        op->seq = ec->recv_seq[op->peer]++;
    } else if (br_func_is_v(op->func)) {
        op->seq = ec->coll_seq++; /* a collective's number; its schedule is fixed */
    } else if (op->on_device && ec->stage != NULL) {
        op->seq = ec->coll_seq++; /* planned for the host when its stager runs it */
    } else if (op->on_device) {
        BR_CHECK(br_plan_choose_device(comm->plan, op, br_exec_cuda_nchannels(ec)));
        op->seq = ec->coll_seq++;
    } else if (br_op_owner_fold(op, comm->nranks)) {
        /* No algorithm of its own: its phases are planned when they run (group_fold.c). */
        op->algo = op->proto = -1;
        op->seq = ec->coll_seq++;
    } else {
        BR_CHECK(br_plan_choose(comm->plan, op));
        op->seq = ec->coll_seq++;
    }
    op->log_ticket = 0; /* for the state dump; a send to self is a copy, not logged */
    /* Device calls finish on their streams, after the call: the log does not follow them. */
    if (!op->on_device &&
        ((op->func != BR_FUNC_SEND && op->func != BR_FUNC_RECV) || op->peer != comm->rank)) {
        br_exec_oplog_add(ec, op);
    }
    if (ec->prof != NULL) {
        const gprof_t *g = group_prof(comm);
        op->prof_mask = g != NULL ? g->mask : 0;
        br_exec_prof_api(ec, g != NULL ? g->handle : NULL, op);
    }
    if (depth == 0 && op->func != BR_FUNC_SEND && op->func != BR_FUNC_RECV &&
        !br_func_is_v(op->func) && (op->on_device || !br_op_owner_fold(op, comm->nranks))) {
        /* A lone collective: no group bookkeeping, no allocation (but its profiler events). */
        group_prof_end_api();
        ncclResult_t res = op->on_device ? br_exec_cuda_submit(ec, op, 1) : br_exec_run_solo(ec, op);
        group_prof_stop();
        return res;
    }
    memset(&c, 0, sizeof(c));
    c.kind = G_OP;
    c.comm = comm;
    c.op = *op;
    if (depth > 0) {
        BR_CHECK(push(&c));
        op->v = NULL; /* the queue's now */
        return ncclSuccess;
    }
    BR_CHECK(br_group_start());
    ncclResult_t res = push(&c);
    op->v = res == ncclSuccess ? NULL : op->v;
    ncclResult_t end = br_group_end();
    return res != ncclSuccess ? res : end;
}

static ncclResult_t add_creation(gcall_t *c, const ncclConfig_t *config)
{
    if (config != NULL) {
        c->config = *config;
        c->has_config = 1;
    }
    if (depth > 0) {
        return push(c);
    }
    create_one(c);
    return c->res;
}

ncclResult_t br_group_add_init(ncclComm_t *comm_p, int nranks, const ncclUniqueId *id, int rank,
                               const ncclConfig_t *config)
{
    return br_group_add_init_dev(comm_p, nranks, id, rank, config, br_comm_capture_device());
}

ncclResult_t br_group_add_init_dev(ncclComm_t *comm_p, int nranks, const ncclUniqueId *id,
                                   int rank, const ncclConfig_t *config, int device)
{
    gcall_t c;
    memset(&c, 0, sizeof(c));
    c.kind = G_INIT;
    c.device = device;
    c.out = comm_p;
    c.nranks = nranks;
    c.rank = rank;
    c.id = *id;
    return add_creation(&c, config);
}

ncclResult_t br_group_add_split(ncclComm_t parent, int color, int key, ncclComm_t *comm_p,
                                const ncclConfig_t *config)
{
    gcall_t c;
    memset(&c, 0, sizeof(c));
    c.kind = G_SPLIT;
    c.device = br_comm_capture_device();
    c.comm = parent;
    c.color = color;
    c.key = key;
    c.out = comm_p;
    return add_creation(&c, config);
}
