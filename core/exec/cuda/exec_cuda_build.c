/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What one launch of the CUDA executor runs: the work items of a unit of deposits. The
 * collectives of every rank (a unit that holds collectives holds every rank's next
 * deposit) become one SCHED work item per rank and channel, from plan's layout and
 * schedule (core/plan), on the clique's FIFOs; a block per (rank, channel) walks its items
 * in call order. Sends and receives among the unit's deposits are matched in order per
 * pair and become copies, run by the receiver's device: every rank of a clique is a
 * thread of this process, so the receiver's kernel reads the sender's buffer in place.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_cuda_int.h"
#include "util.h"

static ncclResult_t add_block(br_cuda_build_t *b, int rank, int ch)
{
    if (b->nblocks == b->cap_blocks) {
        int n = b->cap_blocks ? 2 * b->cap_blocks : 64;
        br_dev_block_t *p = realloc(b->blocks, (size_t)n * sizeof(*p));
        if (p == NULL) {
            return ncclSystemError;
        }
        b->blocks = p;
        b->cap_blocks = n;
    }
    br_dev_block_t *blk = &b->blocks[b->nblocks++];
    blk->first = (uint32_t)b->nworks;
    blk->nworks = 0;
    blk->rank = rank;
    blk->channel = ch;
    return ncclSuccess;
}

static ncclResult_t add_work(br_cuda_build_t *b, const br_dev_work_t *w)
{
    if (b->nworks == b->cap_works) {
        int n = b->cap_works ? 2 * b->cap_works : 128;
        br_dev_work_t *p = realloc(b->works, (size_t)n * sizeof(*p));
        if (p == NULL) {
            return ncclSystemError;
        }
        b->works = p;
        b->cap_works = n;
    }
    b->works[b->nworks++] = *w;
    b->blocks[b->nblocks - 1].nworks++;
    return ncclSuccess;
}

/* Payload bytes of one step under proto. */
static size_t step_payload(const br_clique_t *cl, int proto)
{
    size_t slot = cl->slot_bytes;
    if (proto == BR_PROTO_LL) {
        /* LL steps stay small: latency, not bandwidth, is what LL is for. */
        size_t s = slot / BR_DEV_LL_LINE * BR_DEV_LL_DATA;
        return s < 16384 ? s : 16384;
    }
    if (proto == BR_PROTO_LL128) {
        return slot / BR_DEV_LL128_LINE * BR_DEV_LL128_DATA;
    }
    return slot;
}

static void fill_conns(const br_clique_t *cl, br_cu_ptr_t conn_d, br_dev_work_t *w, int c, int r)
{
    const int *ring = br_graph_ring(cl->graph, c), *pos = br_graph_ring_pos(cl->graph, c);
    const br_tree_node_t *t = br_graph_tree(cl->graph, c, r);
    int n = cl->nranks;
    int recv[BR_DEV_MAX_PEERS], send[BR_DEV_MAX_PEERS], nr = 0, ns = 0;
    br_dev_conn_t *base = (br_dev_conn_t *)(uintptr_t)conn_d;

    recv[nr++] = ring[(pos[r] + n - 1) % n];
    send[ns++] = ring[(pos[r] + 1) % n];
    if (t->up >= 0) {
        recv[nr++] = t->up;
        send[ns++] = t->up;
    }
    for (int i = 0; i < t->ndown; i++) {
        recv[nr++] = t->down[i];
        send[ns++] = t->down[i];
    }
    w->nrecv_peers = w->nsend_peers = 0;
    for (int i = 0; i < nr; i++) {
        int dup = 0;
        for (int j = 0; j < w->nrecv_peers; j++) {
            dup |= w->recv_peer[j] == recv[i];
        }
        int idx = br_cuda_conn_index(cl, c, recv[i], r);
        if (!dup && idx >= 0) {
            w->recv_peer[w->nrecv_peers] = recv[i];
            w->recv_conn[w->nrecv_peers++] = base + idx;
        }
    }
    for (int i = 0; i < ns; i++) {
        int dup = 0;
        for (int j = 0; j < w->nsend_peers; j++) {
            dup |= w->send_peer[j] == send[i];
        }
        int idx = br_cuda_conn_index(cl, c, r, send[i]);
        if (!dup && idx >= 0) {
            w->send_peer[w->nsend_peers] = send[i];
            w->send_conn[w->nsend_peers++] = base + idx;
        }
    }
}

static void fill_redop(br_dev_work_t *w, const br_op_t *op)
{
    w->type = (uint32_t)op->type;
    w->red = (uint32_t)op->redop.kind;
    w->scalar_f = op->redop.scalar_f;
    w->scalar_i = op->redop.scalar_i;
    w->scalar_dev = op->redop.scalar_dev;
    w->divisor = op->redop.divisor;
    w->seq = op->seq + 1;
}

/* Do two ranks' calls describe the same collective? */
static int same_coll(const br_op_t *a, const br_op_t *b)
{
    return a->func == b->func && a->count == b->count && a->type == b->type &&
           a->redop.kind == b->redop.kind && a->root == b->root && a->algo == b->algo &&
           a->proto == b->proto && a->nchannels == b->nchannels && a->seq == b->seq;
}

void br_cuda_op_describe(char *buf, size_t len, const br_op_t *op)
{
    if (op->func == BR_FUNC_SEND || op->func == BR_FUNC_RECV) {
        snprintf(buf, len, "%s %s rank %d (%zu bytes)", br_func_name(op->func),
                 op->func == BR_FUNC_SEND ? "to" : "from", op->peer, br_op_bytes(op));
        return;
    }
    snprintf(buf, len, "%s #%llu (count %zu, %s, %s, root %d)", br_func_name(op->func),
             (unsigned long long)op->seq, op->count, br_type_name(op->type),
             br_red_kind_name(op->redop.kind), op->root);
}

/* The i-th collective of a deposit, or NULL. */
static const br_op_t *nth_coll(const br_cuda_dep_t *d, int i)
{
    for (int j = 0; j < d->nops; j++) {
        if (br_func_is_collective(d->ops[j].func) && i-- == 0) {
            return &d->ops[j];
        }
    }
    return NULL;
}

static ncclResult_t build_colls(br_clique_t *cl, br_cu_ptr_t conn_d, br_cuda_build_t *per_dev,
                                char *msg, size_t len)
{
    int n = cl->nranks, ncoll = 0;
    char a[192], b[192];

    while (nth_coll(br_cuda_head(cl, 0), ncoll) != NULL) {
        ncoll++;
    }
    /* Every rank must have the same collectives in the same order. */
    for (int r = 1; r < n; r++) {
        for (int i = 0; i <= ncoll; i++) {
            const br_op_t *ref = nth_coll(br_cuda_head(cl, 0), i);
            const br_op_t *op = nth_coll(br_cuda_head(cl, r), i);
            if (ref == NULL && op == NULL) {
                break;
            }
            if (ref == NULL || op == NULL) {
                br_cuda_op_describe(a, sizeof(a), ref != NULL ? ref : op);
                snprintf(msg, len,
                         "mismatched calls: rank %d called %s; rank %d has no such call in the "
                         "same group",
                         ref != NULL ? 0 : r, a, ref != NULL ? r : 0);
                return ncclInvalidUsage;
            }
            if (!same_coll(ref, op)) {
                br_cuda_op_describe(a, sizeof(a), ref);
                br_cuda_op_describe(b, sizeof(b), op);
                snprintf(msg, len, "mismatched calls: rank 0 called %s where rank %d called %s", a,
                         r, b);
                return ncclInvalidUsage;
            }
        }
    }
    for (int r = 0; r < n; r++) {
        br_cuda_build_t *bd = &per_dev[cl->rank_dev[r]];
        for (int c = 0; c < cl->nch; c++) {
            int opened = 0;
            for (int i = 0; i < ncoll; i++) {
                br_op_t o = *nth_coll(br_cuda_head(cl, r), i);
                br_plan_layout_t lay;
                br_dev_work_t w;
                /* The executor may hold fewer channels than plan allowed: every rank cuts
                 * the data alike, here, for all of them. */
                if (o.nchannels > cl->nch) {
                    o.nchannels = cl->nch;
                }
                if (c >= o.nchannels || o.count == 0) {
                    continue;
                }
                if (n == 1) { /* no ring, no tree: the rank's own part, once */
                    if (c > 0) {
                        continue;
                    }
                    memset(&w, 0, sizeof(w));
                    w.kind = BR_DEV_WORK_LOCAL;
                    fill_redop(&w, &o);
                    w.src = o.sendbuff;
                    w.dst = o.recvbuff;
                    w.bytes = br_op_bytes(&o);
                    w.count = o.count;
                    w.reduce = br_func_is_reduction(o.func);
                    if (!opened) {
                        BR_CHECK(add_block(bd, r, c));
                        opened = 1;
                    }
                    BR_CHECK(add_work(bd, &w));
                    continue;
                }
                o.chunk_bytes = step_payload(cl, o.proto);
                br_plan_layout(&o, n, c, &lay);
                if (lay.lo >= lay.hi) {
                    continue;
                }
                memset(&w, 0, sizeof(w));
                w.kind = BR_DEV_WORK_SCHED;
                w.proto = (uint32_t)o.proto;
                fill_redop(&w, &o);
                br_plan_sched(cl->graph, &o, c, r, &w.sched);
                w.esize = lay.esize;
                w.units = lay.units;
                w.lo = lay.lo;
                w.hi = lay.hi;
                w.slice = lay.slice;
                w.ring_rank = (const int32_t *)(uintptr_t)(cl->ring_d +
                                                           (size_t)c * (size_t)n * sizeof(int32_t));
                w.send = o.sendbuff;
                w.recv = o.recvbuff;
                fill_conns(cl, conn_d, &w, c, r);
                if (!opened) {
                    BR_CHECK(add_block(bd, r, c));
                    bd->nwaiting++;
                    opened = 1;
                }
                BR_CHECK(add_work(bd, &w));
            }
        }
    }
    return ncclSuccess;
}

static ncclResult_t add_copy(br_cuda_build_t *b, const br_dev_work_t *w)
{
    if (b->ncopies == b->cap_copies) {
        int n = b->cap_copies ? 2 * b->cap_copies : 64;
        br_dev_work_t *p = realloc(b->copies, (size_t)n * sizeof(*p));
        if (p == NULL) {
            return ncclSystemError;
        }
        b->copies = p;
        b->cap_copies = n;
    }
    b->copies[b->ncopies++] = *w;
    return ncclSuccess;
}

/* The copies of a build, in contiguous runs over at most `most` blocks. */
static ncclResult_t place_copies(br_cuda_build_t *b, int most)
{
    int nb = b->ncopies < most ? b->ncopies : most;
    for (int k = 0, i = 0; k < nb; k++) {
        int end = (int)((long)b->ncopies * (k + 1) / nb);
        BR_CHECK(add_block(b, -1, -1));
        for (; i < end; i++) {
            BR_CHECK(add_work(b, &b->copies[i]));
        }
    }
    return ncclSuccess;
}

/* The next send of deposit s to `to` from index *i on, or NULL; the same for receives. */
static const br_op_t *next_p2p(const br_cuda_dep_t *d, br_func_t func, int peer, int *i)
{
    for (; *i < d->nops; (*i)++) {
        if (d->ops[*i].func == func && d->ops[*i].peer == peer) {
            return &d->ops[(*i)++];
        }
    }
    return NULL;
}

static ncclResult_t build_p2p(br_clique_t *cl, const char *in_unit, br_cuda_build_t *per_dev,
                              char *msg, size_t len)
{
    int n = cl->nranks;
    for (int s = 0; s < n; s++) {
        for (int d = 0; d < n; d++) {
            if (!in_unit[s] || !in_unit[d]) {
                continue;
            }
            const br_cuda_dep_t *ss = br_cuda_head(cl, s), *ds = br_cuda_head(cl, d);
            int si = 0, ri = 0;
            for (;;) {
                const br_op_t *so = next_p2p(ss, BR_FUNC_SEND, d, &si);
                const br_op_t *ro = next_p2p(ds, BR_FUNC_RECV, s, &ri);
                if (so == NULL && ro == NULL) {
                    break;
                }
                if (so == NULL || ro == NULL) {
                    snprintf(msg, len,
                             "mismatched calls: rank %d %s rank %d in a group where rank %d has "
                             "no matching %s",
                             so != NULL ? s : d, so != NULL ? "sends to" : "receives from",
                             so != NULL ? d : s, so != NULL ? d : s,
                             so != NULL ? "ncclRecv" : "ncclSend");
                    return ncclInvalidUsage;
                }
                size_t sb = br_op_bytes(so), rb = br_op_bytes(ro);
                if (sb != rb) {
                    snprintf(msg, len,
                             "mismatched calls: rank %d sends %zu bytes to rank %d, which "
                             "receives %zu bytes",
                             s, sb, d, rb);
                    return ncclInvalidUsage;
                }
                if (sb == 0) {
                    continue;
                }
                /* The receiver's device copies, in a few blocks for large messages. */
                br_cuda_build_t *b = &per_dev[cl->rank_dev[d]];
                int parts = sb >= (8u << 20) ? 4 : sb >= (1u << 20) ? 2 : 1;
                size_t each = (sb / (size_t)parts + 15) & ~(size_t)15;
                for (int p = 0; p < parts; p++) {
                    size_t off = (size_t)p * each;
                    br_dev_work_t w;
                    if (off >= sb) {
                        break;
                    }
                    memset(&w, 0, sizeof(w));
                    w.kind = BR_DEV_WORK_COPY;
                    w.src = (const char *)so->sendbuff + off;
                    w.dst = (char *)ro->recvbuff + off;
                    w.bytes = off + each > sb ? sb - off : each;
                    w.seq = ro->seq + 1;
                    BR_CHECK(add_copy(b, &w));
                }
            }
        }
    }
    return ncclSuccess;
}

ncclResult_t br_cuda_build(br_clique_t *cl, const char *in_unit, br_cu_ptr_t conn_d,
                           br_cuda_build_t *per_dev, char *msg, size_t len)
{
    int colls = 0;
    for (int r = 0; r < cl->nranks; r++) {
        colls |= in_unit[r] && br_cuda_head(cl, r)->has_coll;
    }
    if (colls) {
        ncclResult_t res = build_colls(cl, conn_d, per_dev, msg, len);
        if (res != ncclSuccess) {
            return res;
        }
    }
    BR_CHECK(build_p2p(cl, in_unit, per_dev, msg, len));
    for (int d = 0; d < cl->ndevs; d++) {
        BR_CHECK(place_copies(&per_dev[d], BR_CUDA_COPY_BLOCKS(cl->devs[d].capacity)));
    }
    return ncclSuccess;
}

void br_cuda_build_free(br_cuda_build_t *per_dev)
{
    for (int d = 0; d < BR_CUDA_MAX_DEVS; d++) {
        free(per_dev[d].blocks);
        free(per_dev[d].works);
        free(per_dev[d].copies);
        memset(&per_dev[d], 0, sizeof(per_dev[d]));
    }
}
