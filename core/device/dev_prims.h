/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernels' interpreter: what one block does with its list of work items
 * (br_dev_run_block). A SCHED item walks plan's schedule (core/plan/plan_sched.h) for its
 * channel share [lo, hi): iterations of chunks, each the steps of one or two streams
 * (Tree: 0 up, 1 down), one FIFO slot per peer per step. A COPY item copies bytes.
 *
 * The block moves in lockstep. Thread 0 alone keeps the walk (streams, step numbers) and
 * polls the FIFOs until a step of some stream can run (every received slot filled, every
 * send slot free; a Tree block tries both streams, so neither blocks the other); it plans
 * the step and writes what the data path needs (br_dev_step_t) to the block's shared state
 * (br_dev_shared_t, in shared memory). After a barrier every thread runs the step's data
 * path (dev_proto.h) on its pieces; after another, thread 0 frees the received slots,
 * publishes the sent ones and moves the walk on. Nothing of the walk lives in the other
 * threads' registers or stack: the arrays indexed by peer would be local memory, and the
 * registers they need would keep a second block off the SM.
 *
 * What a step computes follows the host executor's interpreter (core/exec/host/exec_sched.c):
 * a REDUCE folds the local input first, then the received partial results, the last with
 * the final division (POST); a reduction's first contributor sends its input scaled for
 * PreMulSum; LOCAL copies input to output; FROM_OUTPUT sends what the output holds; the
 * data sent is the data the step produced.
 *
 * Counters and descriptors: the sender writes the slot's descriptor {seq, bytes}, its data,
 * then (thread 0, after the barrier) tail with release semantics; the receiver acquires
 * tail (Simple) or sees the first line's flag and fences (LL, LL128), then checks the
 * descriptor, reads, and releases head after the barrier.
 */
#ifndef BR_DEVICE_DEV_PRIMS_H_
#define BR_DEVICE_DEV_PRIMS_H_

#include "dev_proto.h"

/* What thread 0's poll found. */
#define BR_DEV_PICK_DONE (-1)
#define BR_DEV_PICK_FAIL (-2)

typedef struct {
    size_t base, chunk; /* iteration start and chunk (units) */
    int j, nsteps;      /* next step, steps per iteration (0: none) */
} br_dev_stream_t;

/* A SCHED item's walk: the same in every thread of the block. */
typedef struct {
    const br_dev_launch_t *L;
    const br_dev_block_t *B;
    const br_dev_work_t *w;
    br_dev_red_t R;
    int reduction;
    br_dev_stream_t st[2];
    uint64_t rstep[BR_DEV_MAX_PEERS], sstep[BR_DEV_MAX_PEERS];
} br_dev_walk_t;

/* One step of a stream, placed. */
typedef struct {
    br_step_t st;
    size_t in_off, out_off, len;
    uint64_t bytes;
    int rk[BR_MAX_TREE_ARITY], sk[BR_MAX_TREE_ARITY]; /* peer indices into the work item */
} br_dev_plan_t;

/* A block's state: shared memory under CUDA (br_dev_run_block), the caller's in the host
 * build. w is written by every thread (br_dev_work_load); L, X, P, S and pick by thread 0
 * only, between barriers; bad by any thread that gives up a wait. Whatever a function
 * takes the address of lives here, not in a thread's local memory. */
typedef struct {
    br_dev_work_t w;   /* the work item being run, copied from descriptor memory */
    br_dev_launch_t L; /* the launch (a kernel parameter, whose address is not taken) */
    br_dev_walk_t X;
    br_dev_plan_t P;
    br_dev_step_t S;
    int pick; /* what thread 0's poll found: a stream, PICK_DONE or PICK_FAIL */
    int bad;  /* a thread gave up waiting: the block stops */
} br_dev_shared_t;

BR_DEV_HD int br_dev_is_reduction(int func)
{
    return func == BR_FUNC_ALLREDUCE || func == BR_FUNC_REDUCESCATTER || func == BR_FUNC_REDUCE;
}

BR_DEV_HD char *br_dev_slot(const br_dev_conn_t *c, uint64_t step)
{
    return c->buf + (step % BR_STEPS) * c->slot_bytes;
}

/* Index of peer rank `peer` in a list, or -1. */
BR_DEV_HD int br_dev_peer_index(const int32_t *list, int n, int peer)
{
    for (int k = 0; k < n; k++) {
        if (list[k] == peer) {
            return k;
        }
    }
    return -1;
}

/* Is the work item something this interpreter can run? (Every thread decides alike.) */
BR_DEV_HD int br_dev_sched_valid(const br_dev_work_t *w)
{
    const br_sched_t *s = &w->sched;
    if (w->proto > BR_PROTO_SIMPLE || (s->algo != BR_ALGO_RING && s->algo != BR_ALGO_TREE) ||
        w->nrecv_peers < 0 || w->nrecv_peers > BR_DEV_MAX_PEERS || w->nsend_peers < 0 ||
        w->nsend_peers > BR_DEV_MAX_PEERS || w->esize == 0 || w->slice == 0 || s->nranks < 1 ||
        s->func > BR_FUNC_ALLREDUCE) {
        return 0;
    }
    if (br_dev_is_reduction(s->func) &&
        (br_dev_type_size(w->type) != w->esize || w->red > BR_RED_SUMPOSTDIV ||
         (w->red == BR_RED_SUMPOSTDIV && w->divisor == 0))) {
        return 0;
    }
    /* Every slot must hold the largest step. */
    for (int k = 0; k < w->nrecv_peers + w->nsend_peers; k++) {
        const br_dev_conn_t *c =
            k < w->nrecv_peers ? w->recv_conn[k] : w->send_conn[k - w->nrecv_peers];
        if (c == NULL || c->slot_bytes % BR_DEV_LL128_LINE != 0 ||
            w->slice * w->esize > br_dev_slot_payload(c, (int)w->proto)) {
            return 0;
        }
    }
    return 1;
}

BR_DEV_HD void br_dev_red_init(br_dev_red_t *R, const br_dev_work_t *w)
{
    R->type = w->type;
    R->kind = w->red;
    R->si = w->scalar_i;
    R->sd = w->scalar_f;
    R->div = w->divisor;
    if (w->red == BR_RED_PREMULSUM && w->scalar_dev != NULL) {
        /* ncclScalarDevice: one element of the type, read when the work runs. */
        const unsigned char *p = (const unsigned char *)w->scalar_dev;
        uint64_t bits = 0;
        for (uint32_t i = 0; i < br_dev_type_size(w->type); i++) {
            bits |= (uint64_t)p[i] << (8 * i);
        }
        br_dev_red_scalar_bits(R, bits);
    }
    R->sf = br_dev_red_narrow_scalar(w->type, R->sd);
}

/* Step j of stream s: the schedule's step, where its data is, which connections. Returns
 * 0, or -1 when the schedule names a peer the work item has no connection for. */
BR_DEV_HD int br_dev_plan_step(const br_dev_walk_t *X, int s, br_dev_plan_t *P)
{
    const br_dev_work_t *w = X->w;
    const br_dev_stream_t *sp = &X->st[s];
    br_sched_step(&w->sched, s, sp->j, &P->st);
    br_sched_place(&w->sched, &P->st, sp->base, sp->chunk, w->hi, w->units,
                   (const int *)w->ring_rank, &P->in_off, &P->out_off, &P->len);
    P->bytes = (uint64_t)P->len * w->esize;
    for (int i = 0; i < P->st.nrecv; i++) {
        P->rk[i] = br_dev_peer_index(w->recv_peer, w->nrecv_peers, P->st.recv[i]);
        if (P->rk[i] < 0) {
            return -1;
        }
    }
    for (int i = 0; i < P->st.nsend; i++) {
        P->sk[i] = br_dev_peer_index(w->send_peer, w->nsend_peers, P->st.send[i]);
        if (P->sk[i] < 0) {
            return -1;
        }
    }
    return 0;
}

/* Thread 0: can the planned step run now? 1 yes, 0 not yet (*peer, *step: what it waits
 * for), -1 failed (reported). */
BR_DEV_HD int br_dev_step_ready(const br_dev_walk_t *X, int s, const br_dev_plan_t *P,
                                int32_t *peer, uint64_t *step)
{
    const br_dev_work_t *w = X->w;
    if (P->st.after && X->st[0].nsteps > 0 && X->st[0].base <= X->st[s].base) {
        *peer = -1; /* stream 0 has not finished this chunk here yet */
        *step = 0;
        return 0;
    }
    for (int i = 0; i < P->st.nrecv; i++) {
        const br_dev_conn_t *c = w->recv_conn[P->rk[i]];
        uint64_t n = X->rstep[P->rk[i]], flag = br_dev_ll_flag(n);
        const char *slot = br_dev_slot(c, n);
        int filled;
        if (w->proto == BR_PROTO_SIMPLE) {
            filled = br_dev_ld_acquire(c->tail) > n; /* acquire: the slot and descriptor */
        } else if (w->proto == BR_PROTO_LL) {
            br_dev_v2_t v = br_dev_ld_volatile16(slot);
            filled = (v.lo >> 32) == flag && (v.hi >> 32) == flag;
        } else {
            /* LL128: the line's flag word, its last 8 bytes */
            filled = br_dev_ld_word((const uint64_t *)(slot + 120)) == flag;
        }
        if (!filled) {
            *peer = P->st.recv[i];
            *step = n;
            return 0;
        }
        if (w->proto != BR_PROTO_SIMPLE) {
            /* Acquire: the writer fenced between the descriptor and this line. */
            br_dev_fence();
        }
        const uint64_t *d = c->desc + 2 * (n % BR_STEPS);
        if (br_dev_ld_word(d) != w->seq || br_dev_ld_word(d + 1) != P->bytes) {
            br_dev_fail(X->L, BR_DEV_MISMATCH, X->B->rank, P->st.recv[i], n);
            return -1;
        }
    }
    for (int i = 0; i < P->st.nsend; i++) {
        const br_dev_conn_t *c = w->send_conn[P->sk[i]];
        uint64_t n = X->sstep[P->sk[i]];
        /* Acquire: the receiver finished reading the slot before it freed it. */
        if (br_dev_ld_acquire(c->head) + BR_STEPS <= n) {
            *peer = P->st.send[i];
            *step = n;
            return 0;
        }
    }
    return 1;
}

/* Thread 0: poll until a step of some stream can run, planned in *P. Returns the stream,
 * or PICK_DONE when every stream is finished, or PICK_FAIL. */
BR_DEV_HD int br_dev_pick(const br_dev_walk_t *X, br_dev_plan_t *P)
{
    br_dev_wait_t W;
    br_dev_wait_init(&W, X->L, X->B->rank);
    for (;;) {
        int active = 0, r = 0;
        int32_t wpeer = -1, peer;
        uint64_t wstep = 0, step;
        for (int s = 0; s < 2; s++) {
            const br_dev_stream_t *sp = &X->st[s];
            if (sp->nsteps == 0 || sp->base >= X->w->hi) {
                continue;
            }
            active = 1;
            if (br_dev_plan_step(X, s, P) != 0) {
                br_dev_fail(X->L, BR_DEV_BADWORK, X->B->rank, -1, 0);
                return BR_DEV_PICK_FAIL;
            }
            r = br_dev_step_ready(X, s, P, &peer, &step);
            if (r != 0) {
                return r > 0 ? s : BR_DEV_PICK_FAIL;
            }
            /* Report what stream 0 waits for: stream 1 waits on it in the end. */
            if (wpeer < 0) {
                wpeer = peer;
                wstep = step;
            }
        }
        if (!active) {
            return BR_DEV_PICK_DONE;
        }
        if (br_dev_wait_tick(&W, wpeer, wstep)) {
            return BR_DEV_PICK_FAIL;
        }
    }
}

/* The step's data path: what it computes, from where, to where. Returns -1 when the work
 * item lacks a buffer the step needs. */
BR_DEV_HD int br_dev_step_build(const br_dev_walk_t *X, const br_dev_plan_t *P, br_dev_step_t *S)
{
    const br_dev_work_t *w = X->w;
    uint32_t p = P->st.prim;
    const char *in = w->send != NULL ? w->send + P->in_off * w->esize : NULL;
    char *out = w->recv != NULL ? w->recv + P->out_off * w->esize : NULL;
    int kind = (int)X->R.kind, partial;
    S->sum = 0;

    S->nr = P->st.nrecv;
    S->ns = P->st.nsend;
    S->bytes = P->bytes;
    S->R = &X->R;
    S->in = in;
    S->from = NULL;
    S->out = NULL;
    S->src = BR_DEV_SRC_RECV;
    S->pre = 0;
    for (int i = 0; i < S->nr; i++) {
        const br_dev_conn_t *c = w->recv_conn[P->rk[i]];
        uint64_t n = X->rstep[P->rk[i]];
        S->rb[i] = br_dev_slot(c, n);
        S->rflag[i] = br_dev_ll_flag(n);
        S->rpeer[i] = P->st.recv[i];
        S->rstep[i] = n;
    }
    for (int i = 0; i < S->ns; i++) {
        const br_dev_conn_t *c = w->send_conn[P->sk[i]];
        uint64_t n = X->sstep[P->sk[i]];
        S->sb[i] = br_dev_slot(c, n);
        S->sflag[i] = br_dev_ll_flag(n);
    }
    if (p & BR_PRIM_REDUCE) {
        /* fn[0] combines the first received operand with the (pre-multiplied) input; the
         * others combine partial results: a plain sum for PreMulSum and the integer average,
         * whose division comes with the last operand of the final step. */
        S->mode = BR_DEV_MODE_REDUCE;
        partial = kind == BR_RED_PREMULSUM || kind == BR_RED_SUMPOSTDIV ? BR_DEV_F_SUM : kind;
        for (int i = 0; i < S->nr; i++) {
            int last_post = i == S->nr - 1 && (p & BR_PRIM_POST) && kind == BR_RED_SUMPOSTDIV;
            S->fn[i] = last_post                            ? BR_DEV_F_SUMPOSTDIV
                       : i == 0 && kind == BR_RED_PREMULSUM ? BR_DEV_F_PREMULSUM
                                                            : partial;
        }
        S->sum = kind == BR_RED_SUM ? br_dev_sum_type(w->type) : 0;
        S->out = (p & BR_PRIM_COPY) ? out : NULL;
        return in == NULL || S->nr == 0 || ((p & BR_PRIM_COPY) && out == NULL) ? -1 : 0;
    }
    if (p & BR_PRIM_RECV) {
        S->mode = BR_DEV_MODE_MOVE;
        S->out = (p & BR_PRIM_COPY) ? out : NULL;
        return (p & BR_PRIM_COPY) && out == NULL ? -1 : 0;
    }
    if (p & BR_PRIM_FROM_OUTPUT) {
        S->mode = BR_DEV_MODE_MOVE;
        S->src = BR_DEV_SRC_OUT;
        S->from = out;
        return out == NULL ? -1 : 0;
    }
    if (X->reduction && (p & BR_PRIM_SEND)) {
        S->mode = BR_DEV_MODE_FIRST;
        S->pre = kind == BR_RED_PREMULSUM;
        return in == NULL ? -1 : 0;
    }
    /* LOCAL and/or SEND from the input. */
    S->mode = BR_DEV_MODE_MOVE;
    S->src = BR_DEV_SRC_IN;
    S->from = in;
    if (in == NULL) {
        return -1;
    }
    if (((p & BR_PRIM_LOCAL) && out != in) || (p & BR_PRIM_COPY)) {
        S->out = out;
        return out == NULL ? -1 : 0;
    }
    return 0;
}

/* Are the user buffers a step reads and writes 16-byte aligned? (Slots always are.) */
BR_DEV_HD int br_dev_step_aligned(const br_dev_step_t *S)
{
    uintptr_t a = (uintptr_t)S->in | (uintptr_t)S->from | (uintptr_t)S->out;
    return (a & 15u) == 0;
}

/* Thread 0: the step's descriptors, and which send slots are used for the first time in
 * an epoch (LL, LL128: the block clears them before any line is written). */
BR_DEV_HD void br_dev_send_plan(const br_dev_walk_t *X, const br_dev_plan_t *P, br_dev_step_t *S)
{
    const br_dev_work_t *w = X->w;
    S->proto = (int)w->proto;
    S->clear = 0;
    for (int i = 0; i < S->ns; i++) {
        const br_dev_conn_t *c = w->send_conn[P->sk[i]];
        uint64_t n = X->sstep[P->sk[i]];
        S->sdesc[i] = c->desc + 2 * (n % BR_STEPS);
        S->sslot[i] = c->slot_bytes;
        if (w->proto != BR_PROTO_SIMPLE && (n & BR_DEV_EPOCH_MASK) < BR_STEPS) {
            S->clear |= 1 << i;
        }
    }
    S->seq = w->seq;
}

/* Every thread, before the data: the slots to clear are cleared, then (thread 0) the
 * descriptors are written and, for LL and LL128, fenced before line 0, which thread 0
 * writes: the fence also orders the other threads' clearing, seen through the barrier. */
BR_DEV_HD void br_dev_send_prepare(const br_dev_step_t *S)
{
    if (S->clear != 0) {
        br_dev_v2_t zero;
        zero.lo = zero.hi = 0;
        for (int i = 0; i < S->ns; i++) {
            if (!(S->clear & (1 << i))) {
                continue;
            }
            for (uint64_t o = 16u * (uint64_t)BR_DEV_TID; o < S->sslot[i];
                 o += 16u * (uint64_t)BR_DEV_NTHR) {
                br_dev_st_volatile16(S->sb[i] + o, zero);
            }
        }
        BR_DEV_SYNC(); /* every thread's clearing before anyone's lines */
    }
    if (BR_DEV_TID == 0 && S->ns > 0) {
        for (int i = 0; i < S->ns; i++) {
            br_dev_st_word(S->sdesc[i], S->seq);
            br_dev_st_word(S->sdesc[i] + 1, S->bytes);
        }
        if (S->proto != BR_PROTO_SIMPLE) {
            br_dev_fence();
        }
    }
}

/* Thread 0: poll until a step of some stream can run, then plan it into the block's state
 * (P, S). Returns the stream, PICK_DONE or PICK_FAIL (reported). Out of line on the GPU:
 * the planning's registers are not live in the data path's. */
BR_DEV_NOINLINE int br_dev_next(br_dev_shared_t *sh)
{
    const br_dev_walk_t *X = &sh->X;
    int s = br_dev_pick(X, &sh->P);
    if (s < 0) {
        return s;
    }
    if (br_dev_step_build(X, &sh->P, &sh->S) != 0) {
        br_dev_fail(X->L, BR_DEV_BADWORK, X->B->rank, -1, 0);
        return BR_DEV_PICK_FAIL;
    }
    br_dev_send_plan(X, &sh->P, &sh->S);
    sh->S.aligned = br_dev_step_aligned(&sh->S);
    sh->S.bad = &sh->bad;
    sh->S.one_gpu = (int)X->L->one_gpu;
    return s;
}

/* Thread 0, after the step's data: the received slots freed, the sent ones published,
 * the walk moved on. */
BR_DEV_HD void br_dev_step_done(br_dev_walk_t *X, const br_dev_plan_t *P, int s)
{
    const br_dev_work_t *w = X->w;
    for (int i = 0; i < P->st.nrecv; i++) {
        br_dev_st_release(w->recv_conn[P->rk[i]]->head, ++X->rstep[P->rk[i]]);
    }
    for (int i = 0; i < P->st.nsend; i++) {
        br_dev_st_release(w->send_conn[P->sk[i]]->tail, ++X->sstep[P->sk[i]]);
    }
    br_dev_stream_t *sp = &X->st[s];
    if (++sp->j == sp->nsteps) {
        sp->j = 0;
        sp->base += br_sched_advance(&w->sched, sp->chunk);
        sp->chunk = sp->base < w->hi ? br_sched_chunk(&w->sched, sp->base, w->hi, w->slice) : 0;
    }
}

/* Every thread: the data of the step thread 0 planned. Returns 0, or -1 when the block
 * must stop. */
BR_DEV_HD int br_dev_step_run(br_dev_shared_t *sh)
{
    const br_dev_step_t *S = &sh->S;
    br_dev_wait_t W;
    br_dev_wait_init(&W, sh->X.L, sh->X.B->rank);
    br_dev_send_prepare(S);
    if (S->proto == BR_PROTO_SIMPLE) {
        br_dev_data_simple(S);
    } else if (S->proto == BR_PROTO_LL) {
        br_dev_data_ll(S, &W);
    } else {
        br_dev_data_ll128(S, &W);
    }
    /* Every thread's reads of the received slots and writes of the sent ones (and of the
     * output) come before thread 0's counter updates; nobody reads S after this barrier
     * (thread 0 plans the next step into it). */
    BR_DEV_SYNC();
    return *(volatile int *)&sh->bad ? -1 : 0;
}

/* Thread 0: the walk of work item sh->w, from the step numbers its connections hold. */
BR_DEV_HD void br_dev_walk_init(br_dev_shared_t *sh, const br_dev_launch_t *L,
                                const br_dev_block_t *B)
{
    br_dev_walk_t *X = &sh->X;
    const br_dev_work_t *w = &sh->w;
    X->L = L;
    X->B = B;
    X->w = w;
    X->reduction = br_dev_is_reduction(w->sched.func);
    br_dev_red_init(&X->R, w);
    for (int s = 0; s < 2; s++) {
        X->st[s].base = w->lo;
        X->st[s].j = 0;
        X->st[s].nsteps = s < br_sched_nstreams(&w->sched) ? br_sched_nsteps(&w->sched, s) : 0;
        X->st[s].chunk = w->lo < w->hi ? br_sched_chunk(&w->sched, w->lo, w->hi, w->slice) : 0;
    }
    for (int k = 0; k < w->nrecv_peers; k++) {
        X->rstep[k] = w->recv_conn[k]->recv_step;
    }
    for (int k = 0; k < w->nsend_peers; k++) {
        X->sstep[k] = w->send_conn[k]->send_step;
    }
}

/* A SCHED item (sh->w). Returns 0, or -1 when the block must stop. */
BR_DEV_HD int br_dev_sched(const br_dev_launch_t *L, const br_dev_block_t *B, br_dev_shared_t *sh)
{
    const br_dev_work_t *w = &sh->w;
    if (!br_dev_sched_valid(w)) { /* every thread decides alike */
        if (BR_DEV_TID == 0) {
            br_dev_fail(L, BR_DEV_BADWORK, B->rank, -1, 0);
        }
        return -1;
    }
    if (BR_DEV_TID == 0) {
        br_dev_walk_init(sh, L, B);
    }
    for (;;) {
        int s = 0;
        if (BR_DEV_TID == 0) {
            s = br_dev_next(sh);
            *(volatile int *)&sh->pick = s;
        }
        /* Everyone reads the pick (and S) before thread 0 writes the next one: every step
         * below passes at least one more barrier. */
        BR_DEV_SYNC();
        s = *(volatile int *)&sh->pick;
        if (s == BR_DEV_PICK_FAIL) {
            return -1;
        }
        if (s == BR_DEV_PICK_DONE) {
            break;
        }
        if (br_dev_step_run(sh) != 0) {
            return -1;
        }
        if (BR_DEV_TID == 0) {
            br_dev_step_done(&sh->X, &sh->P, s);
        }
    }
    /* Step numbers persist in the connections, for the next item and the next launch. */
    if (BR_DEV_TID == 0) {
        for (int k = 0; k < w->nrecv_peers; k++) {
            w->recv_conn[k]->recv_step = sh->X.rstep[k];
        }
        for (int k = 0; k < w->nsend_peers; k++) {
            w->send_conn[k]->send_step = sh->X.sstep[k];
        }
    }
    BR_DEV_SYNC();
    return 0;
}

/* Thread 0: the step of a COPY item (this block's bytes from src to dst): a MOVE from the
 * input to the output through the Simple data path, no FIFO. */
BR_DEV_HD void br_dev_copy_plan(const br_dev_work_t *w, br_dev_step_t *S)
{
    S->mode = BR_DEV_MODE_MOVE;
    S->src = BR_DEV_SRC_IN;
    S->nr = S->ns = 0;
    S->in = S->from = w->src;
    S->out = w->dst;
    S->bytes = w->src == w->dst ? 0 : w->bytes;
    S->pre = 0;
    S->R = NULL;
    S->bad = NULL;
    S->one_gpu = 0;
    S->sum = 0;
    S->aligned = br_dev_step_aligned(S);
}

/* A LOCAL item, a one-rank collective: dst = post(pre(src)), as a reduction of one rank
 * ends (PreMulSum scales, integer Avg divides), else a copy. Every thread; R is thread 0's,
 * made before the barrier that precedes this. */
BR_DEV_HD void br_dev_run_local(const br_dev_work_t *w, const br_dev_red_t *R, int fn)
{
    br_dev_v2_t zero;
    zero.lo = zero.hi = 0;
    uint64_t n = (w->bytes + 15) / 16;
    for (uint64_t p = (uint64_t)BR_DEV_TID; p < n; p += (uint64_t)BR_DEV_NTHR) {
        uint64_t off = p * 16;
        uint32_t nb = br_dev_piece_bytes(w->bytes, off, 16);
        br_dev_v2_t v =
            br_dev_piece_op(R, fn, br_dev_ld_any(w->src + off, nb), zero, nb > 8 ? 2 : 1);
        br_dev_st_any(w->dst + off, v, nb);
    }
}

/* What a LOCAL item applies: BR_DEV_F_PRE1, BR_DEV_F_SUMPOSTDIV, or -1 (a copy). */
BR_DEV_HD int br_dev_local_fn(const br_dev_work_t *w)
{
    if (w->reduce && w->red == BR_RED_PREMULSUM) {
        return BR_DEV_F_PRE1;
    }
    if (w->reduce && w->red == BR_RED_SUMPOSTDIV && w->divisor > 1) {
        return BR_DEV_F_SUMPOSTDIV;
    }
    return -1;
}

/* A COPY or LOCAL item (every thread). */
BR_DEV_HD void br_dev_run_plain(br_dev_shared_t *sh)
{
    const br_dev_work_t *w = &sh->w;
    int fn = w->kind == BR_DEV_WORK_LOCAL ? br_dev_local_fn(w) : -1;
    if (BR_DEV_TID == 0) {
        if (fn < 0) {
            br_dev_copy_plan(w, &sh->S);
        } else {
            br_dev_red_init(&sh->X.R, w);
        }
    }
    BR_DEV_SYNC();
    if (fn < 0) {
        br_dev_data_simple(&sh->S);
    } else {
        br_dev_run_local(w, &sh->X.R, fn);
    }
    BR_DEV_SYNC();
}

/* R for a reduction of `type` and `red` with its scalars, as a work item would carry them. */
BR_DEV_HD void br_dev_red_of(br_dev_red_t *R, uint32_t type, uint32_t red, double scalar_f,
                             uint64_t scalar_i, const void *scalar_dev, uint64_t divisor)
{
    br_dev_work_t w;
    w.type = type;
    w.red = red;
    w.scalar_f = scalar_f;
    w.scalar_i = scalar_i;
    w.scalar_dev = scalar_dev;
    w.divisor = divisor;
    br_dev_red_init(R, &w);
}

/* The reduction of the nb bytes at `at` of nsrc sources, in source order, as a ring's steps
 * combine them: the first pre-multiplied (PreMulSum), each next one added (pre-multiplied),
 * the integer average divided with the last. The IPC path's reduce kernel and the direct
 * kernel fold this way. */
BR_DEV_HD br_dev_v2_t br_dev_fold_n(const br_dev_red_t *R, uint32_t red, const char *const *src,
                                    uint32_t nsrc, uint64_t at, uint32_t nb)
{
    int kind = (int)red;
    int mid = kind == BR_RED_PREMULSUM    ? BR_DEV_F_PREMULSUM
              : kind == BR_RED_SUMPOSTDIV ? BR_DEV_F_SUM
                                          : kind;
    int last = kind == BR_RED_SUMPOSTDIV ? BR_DEV_F_SUMPOSTDIV : mid;
    int words = nb > 8 ? 2 : 1;
    br_dev_v2_t v = br_dev_ld_any(src[0] + at, nb);
    if (kind == BR_RED_PREMULSUM) {
        v = br_dev_piece_op(R, BR_DEV_F_PRE1, v, v, words);
    }
    for (uint32_t k = 1; k < nsrc; k++) {
        v = br_dev_piece_op(R, k + 1 == nsrc ? last : mid, v, br_dev_ld_any(src[k] + at, nb),
                            words);
    }
    return v;
}

/* Does a reduction of `type` by `red` accumulate in fp32 when asked to (BRAID_ACCUMULATE):
 * sums, products and PreMulSum of the narrow floats, as the host's br_reduce_fold does. */
BR_DEV_HD int br_dev_acc32_applies(uint32_t type, uint32_t red)
{
    int narrow = type == ncclFloat16 || type == ncclBfloat16 || type == ncclFloat8e4m3 ||
                 type == ncclFloat8e5m2;
    return narrow && (red == BR_RED_SUM || red == BR_RED_PROD || red == BR_RED_PREMULSUM);
}

/* br_dev_fold_n in fp32 (br_dev_acc32_applies): every lane of every source decoded to
 * fp32, folded in source order (the first pre-multiplied for PreMulSum, by the scalar
 * rounded to the type), each operation rounded to fp32, and the result rounded to the type
 * once: the host's br_reduce_fold with acc32, bit for bit. */
BR_DEV_HD br_dev_v2_t br_dev_fold_n_acc32(const br_dev_red_t *R, uint32_t red,
                                          const char *const *src, uint32_t nsrc, uint64_t at,
                                          uint32_t nb)
{
    const uint32_t bits = 8u * br_dev_type_size(R->type), lanes = 128u / bits;
    const uint64_t mask = (1ull << bits) - 1ull;
    float acc[16];
    for (uint32_t k = 0; k < nsrc; k++) {
        br_dev_v2_t v = br_dev_ld_any(src[k] + at, nb);
        for (uint32_t l = 0; l < lanes; l++) {
            uint32_t sh = l * bits;
            uint64_t w = sh < 64 ? v.lo >> sh : v.hi >> (sh - 64);
            float x = br_dev_narrow_ld(R->type, (uint32_t)(w & mask));
            if (red == BR_RED_PREMULSUM) {
                x = BR_DEV_FMUL(x, R->sf);
            }
            acc[l] = k == 0                ? x
                     : red == BR_RED_PROD ? BR_DEV_FMUL(acc[l], x)
                                          : BR_DEV_FADD(acc[l], x);
        }
    }
    br_dev_v2_t out;
    out.lo = out.hi = 0;
    for (uint32_t l = 0; l < lanes; l++) {
        uint64_t e = (uint64_t)br_dev_narrow_st(R->type, acc[l]) & mask;
        uint32_t sh = l * bits;
        if (sh < 64) {
            out.lo |= e << sh;
        } else {
            out.hi |= e << (sh - 64);
        }
    }
    return out;
}

/* Block b of nb of the reduce kernel: its 16-byte pieces of P's reduction (dev_work.h). */
BR_DEV_HD void br_dev_reduce_n(const br_dev_reduce_t *P, int b, int nb)
{
    br_dev_red_t R;
    br_dev_red_of(&R, P->type, P->red, P->scalar_f, P->scalar_i, P->scalar_dev, P->divisor);
    uint64_t n = (P->bytes + 15) / 16;
    uint64_t stride = (uint64_t)nb * (uint64_t)BR_DEV_NTHR;
    for (uint64_t p = (uint64_t)b * (uint64_t)BR_DEV_NTHR + (uint64_t)BR_DEV_TID; p < n;
         p += stride) {
        uint64_t off = p * 16;
        uint32_t nbytes = br_dev_piece_bytes(P->bytes, off, 16);
        br_dev_v2_t v = br_dev_fold_n(&R, P->red, P->src, P->nsrc, off, nbytes);
        br_dev_st_any(P->dst[0] + off, v, nbytes);
        if (P->dst[1] != NULL) {
            br_dev_st_any(P->dst[1] + off, v, nbytes);
        }
    }
}

/* The block's copy of work item `from` (in descriptor memory, which may be host-mapped):
 * every thread copies 16-byte words of it, so the item crosses PCIe once per block instead
 * of once per read (its fields are read on every poll of a wait). */
BR_DEV_HD void br_dev_work_load(br_dev_work_t *to, const br_dev_work_t *from)
{
    const br_dev_v2_t *s = (const br_dev_v2_t *)from;
    br_dev_v2_t *d = (br_dev_v2_t *)to;
    for (uint32_t k = (uint32_t)BR_DEV_TID; k < sizeof(br_dev_work_t) / 16;
         k += (uint32_t)BR_DEV_NTHR) {
        d[k] = s[k];
    }
    BR_DEV_SYNC();
}

/*
 * Block b of launch L runs its work items in order; it stops at the first failure (its own,
 * reported in L, or another block's). sh is the block's state, shared by its threads.
 */
BR_DEV_HD void br_dev_run_block_with(const br_dev_launch_t *launch, int b, br_dev_shared_t *sh)
{
    const br_dev_launch_t *L = &sh->L;
    if (BR_DEV_TID == 0) {
        sh->L = *launch;
        sh->bad = 0;
    }
    BR_DEV_SYNC();
    const br_dev_block_t *B = &L->blocks[b];
    for (uint32_t i = 0; i < B->nworks; i++) {
        BR_DEV_SYNC(); /* every thread is done with the previous item's copy */
        br_dev_work_load(&sh->w, &L->works[B->first + i]);
        const br_dev_work_t *w = &sh->w;
        if (w->kind == BR_DEV_WORK_COPY || w->kind == BR_DEV_WORK_LOCAL) {
            br_dev_run_plain(sh);
        } else if (w->kind == BR_DEV_WORK_SCHED) {
            if (br_dev_sched(L, B, sh) != 0) {
                return;
            }
        } else {
            if (BR_DEV_TID == 0) {
                br_dev_fail(L, BR_DEV_BADWORK, B->rank, -1, 0);
            }
            return;
        }
    }
}

#ifdef __CUDACC__
BR_DEV_HD void br_dev_run_block(const br_dev_launch_t *L, int b)
{
    __shared__ __align__(16) br_dev_shared_t sh;
    br_dev_run_block_with(L, b, &sh);
}
#else
/* A block of one thread (the emulated driver's launches). */
static inline void br_dev_run_block(const br_dev_launch_t *L, int b)
{
    br_dev_shared_t sh __attribute__((aligned(16)));
    br_dev_run_block_with(L, b, &sh);
}
#endif

#endif /* BR_DEVICE_DEV_PRIMS_H_ */
