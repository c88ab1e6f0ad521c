/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host executor's interpreter of plan's schedules (core/plan/plan_sched.h): a Ring or
 * Tree collective on one channel is a work item with one or two streams of steps, and
 * each step is one primitive on one FIFO slot per peer: wait until every receive slot is
 * filled and every send slot is free, combine receive / reduce / copy / send as the step
 * says, then release the received slots and publish the sent ones. Nothing here decides
 * what runs; the protocol (Simple or LL, core/common/fifo.h) only changes how a slot is
 * waited for, read and written.
 *
 * User buffers over the network (issue 19): a Simple Ring Broadcast, AllGather or
 * AllReduce of at least the connection's BRAID_NET_USERBUF_BYTES moves its final data
 * without the FIFO copies on net connections: a step that receives data only to store it
 * in the output has the proxy receive it there (the steps are announced when the work is
 * queued, br_work_sched_expect), and a step that sends data as it is in the input or the
 * output has the proxy send it from there (proxy_userbuf.c). Partial sums still go
 * through the slots. On a ring the sender of a step sends final data exactly when its
 * receiver stores it, so both ends frame each message alike (no descriptor on a
 * user-buffer message; the receiver checks its size). Each end first exchanges one FIFO
 * step with the call's descriptor, so mismatched calls are still caught.
 */
#include <stdlib.h>
#include <string.h>

#include "exec_int.h"
#include "util.h"

/* Bytes of the data of a step as it sits in the slot. */
static size_t wire_bytes(int proto, size_t bytes)
{
    return proto == BR_PROTO_LL ? br_ll_wire_bytes(bytes) : bytes;
}

/* Does w move data from and into user buffers on connection c? Both ends decide alike:
 * the same call, and the threshold they agreed on at setup. */
static int ub_conn(const br_work_t *w, const br_conn_t *c)
{
    return w->ub && c != NULL && c->net != NULL &&
           br_proxy_userbuf_takes(c->net, br_op_bytes(&w->op));
}

/* Bytes of w's output: the user buffer its received steps land in. */
static size_t ub_out_bytes(const br_work_t *w)
{
    size_t b = br_op_bytes(&w->op);
    return w->op.func == BR_FUNC_ALLGATHER ? b * (size_t)w->sched.nranks : b;
}

/* A step that receives data only to store it in the output. */
static int ub_recv_prim(uint32_t p)
{
    return (p & BR_PRIM_RECV) && (p & BR_PRIM_COPY) && !(p & BR_PRIM_REDUCE);
}

/* A step that sends data as it stands in the input or the output (step_compute): not a
 * partial sum built in the slot, nor a received slot passed on. */
static int ub_send_prim(const br_work_t *w, uint32_t p)
{
    if (!(p & BR_PRIM_SEND)) {
        return 0;
    }
    if (p & (BR_PRIM_REDUCE | BR_PRIM_RECV)) {
        return (p & BR_PRIM_COPY) != 0;
    }
    return !br_func_is_reduction((br_func_t)w->sched.func) || (p & BR_PRIM_FROM_OUTPUT);
}

int br_work_sched_init(br_work_t *w, const br_exec_comm_t *ec, int c, char *scratch)
{
    w->kind = BR_WORK_SCHED;
    w->ch = c;
    w->scratch = scratch;
    w->ub = w->op.algo == BR_ALGO_RING && w->op.proto == BR_PROTO_SIMPLE && scratch == NULL &&
            w->op.recvbuff != NULL &&
            (w->op.func == BR_FUNC_BROADCAST || w->op.func == BR_FUNC_ALLGATHER ||
             w->op.func == BR_FUNC_ALLREDUCE);
    w->ub_hdr = 0;
    w->ub_sc = NULL;
    w->ub_send_end = 0;
    br_plan_layout(&w->op, ec->nranks, c, &w->lay);
    br_plan_sched(ec->graph, &w->op, c, ec->rank, &w->sched);
    for (int s = 0; s < 2; s++) {
        w->st[s].base = w->lay.lo;
        w->st[s].chunk = 0;
        w->st[s].j = 0;
        w->st[s].nsteps = s < br_sched_nstreams(&w->sched) ? br_sched_nsteps(&w->sched, s) : 0;
    }
    return w->lay.lo < w->lay.hi;
}

/* The iterations of w's stream s: the same chunking from the same start as stream_step. */
static uint64_t sched_iters(const br_work_t *w)
{
    uint64_t iters = 0;
    for (size_t base = w->lay.lo; base < w->lay.hi; iters++) {
        base +=
            br_sched_advance(&w->sched, br_sched_chunk(&w->sched, base, w->lay.hi, w->lay.slice));
    }
    return iters;
}

/* A Ring's receives on a user-buffer connection, in the order it takes them: the
 * sender's descriptor step, then each step into the output or (partial sums) a slot. */
static ncclResult_t ub_announce(const br_exec_comm_t *ec, const br_work_t *w, br_conn_t *rc,
                                uint64_t iters)
{
    int nsteps = w->st[0].nsteps, nrecv = 0;
    br_userbuf_step_t *steps = NULL;
    uint64_t n = 1;

    for (int j = 0; j < nsteps; j++) {
        br_step_t st;
        br_sched_step(&w->sched, 0, j, &st);
        nrecv += st.nrecv > 0;
    }
    BR_CHECK(br_calloc(&steps, 1 + iters * (uint64_t)nrecv, "user-buffer receive steps"));
    for (size_t base = w->lay.lo; base < w->lay.hi;) {
        size_t chunk = br_sched_chunk(&w->sched, base, w->lay.hi, w->lay.slice);
        for (int j = 0; j < nsteps; j++) {
            br_step_t st;
            size_t in_off, out_off, len;
            br_sched_step(&w->sched, 0, j, &st);
            if (st.nrecv == 0) {
                continue;
            }
            if (ub_recv_prim(st.prim)) {
                br_sched_place(&w->sched, &st, base, chunk, w->lay.hi, w->lay.units,
                               br_graph_ring(ec->graph, w->ch), &in_off, &out_off, &len);
                steps[n].ptr = (char *)w->op.recvbuff + out_off * w->lay.esize;
                steps[n].bytes = len * w->lay.esize;
            }
            n++;
        }
        base += br_sched_advance(&w->sched, chunk);
    }
    br_slot_desc_t d = br_desc_make(&w->op, 0);
    ncclResult_t res = br_proxy_userbuf_recv_steps(ec->tc->proxy, rc->net, steps, n, &d,
                                                   w->op.recvbuff, ub_out_bytes(w));
    free(steps);
    return res;
}

ncclResult_t br_work_sched_expect(const br_exec_comm_t *ec, const br_work_t *w)
{
    for (int s = 0; s < 2; s++) {
        if (w->st[s].nsteps == 0) {
            continue;
        }
        uint64_t iters = sched_iters(w);
        br_conn_t *announced = NULL;
        for (int j = 0; j < w->st[s].nsteps; j++) {
            br_step_t st;
            br_sched_step(&w->sched, s, j, &st);
            for (int i = 0; i < st.nrecv; i++) {
                br_conn_t *rc = br_exec_chan_recv(ec, w->ch, st.recv[i]);
                if (!ub_conn(w, rc)) {
                    br_conn_expect(rc, iters);
                } else if (rc != announced) { /* a ring receives from one peer */
                    BR_CHECK(ub_announce(ec, w, rc, iters));
                    announced = rc;
                }
            }
        }
    }
    return ncclSuccess;
}

/* A step's connections, readiness and data. */
typedef struct {
    br_conn_t *rc[BR_MAX_TREE_ARITY], *sc[BR_MAX_TREE_ARITY];
    const char *rdata[BR_MAX_TREE_ARITY]; /* received data, plain */
    size_t bytes;                         /* payload bytes of the step */
} step_io_t;

/* Is the slot of rc's next step there? On memory links LL lines are trusted by their
 * flags (the first one makes the descriptor visible, so a mismatched size is reported
 * rather than waited for); elsewhere the counter says so. */
static int recv_ready(br_exec_queue_t *q, const br_work_t *w, br_conn_t *rc, size_t bytes, int *err)
{
    if (w->op.proto != BR_PROTO_LL || rc->ll == NULL) {
        if (br_fifo_filled(rc->ctrl, rc->step)) {
            return 1;
        }
        br_conn_need(rc);
        return 0;
    }
    uint64_t *lines = br_conn_ll_slot(rc, rc->step);
    size_t n = br_ll_lines(bytes);
    if (!br_ll_line_ready(lines, 0, rc->step)) {
        return 0;
    }
    const br_slot_desc_t *d = &rc->ctrl->slot[rc->step % BR_STEPS];
    if (br_desc_check(q->ec, w, rc->peer, d, br_ll_wire_bytes(bytes)) != 0) {
        *err = 1;
        return 0;
    }
    return n == 1 || br_ll_line_ready(lines, n - 1, rc->step);
}

/* A user-buffer work item's first step on each of its connections: send, or take and
 * check, the call's descriptor. Returns 1 done, 0 blocked, -1 error. */
static int ub_headers(br_exec_queue_t *q, br_work_t *w, const br_step_t *st)
{
    br_exec_comm_t *ec = q->ec;

    if (st->nsend > 0 && !(w->ub_hdr & 1)) {
        br_conn_t *sc = br_exec_chan_send(ec, w->ch, st->send[0]);
        if (ub_conn(w, sc) && br_work_desc_send(q, w, sc) == 0) {
            return 0;
        }
        w->ub_hdr |= 1;
    }
    if (st->nrecv > 0 && !(w->ub_hdr & 2)) {
        br_conn_t *rc = br_exec_chan_recv(ec, w->ch, st->recv[0]);
        int r = ub_conn(w, rc) ? br_work_desc_recv(q, w, rc) : 1;
        if (r <= 0) {
            return r;
        }
        w->ub_hdr |= 2;
    }
    return 1;
}

/* Wait for every peer of the step. Returns 1 ready, 0 blocked, -1 error. */
static int step_ready(br_exec_queue_t *q, br_work_t *w, const br_step_t *st, step_io_t *io)
{
    br_exec_comm_t *ec = q->ec;
    int err = 0;
    for (int i = 0; i < st->nrecv; i++) {
        io->rc[i] = br_exec_chan_recv(ec, w->ch, st->recv[i]);
        if (!recv_ready(q, w, io->rc[i], io->bytes, &err)) {
            q->wait_peer = io->rc[i]->peer;
            q->wait_what = "data from";
            return err ? -1 : 0;
        }
    }
    for (int i = 0; i < st->nsend; i++) {
        io->sc[i] = br_exec_chan_send(ec, w->ch, st->send[i]);
        if (!br_fifo_free(io->sc[i]->ctrl, io->sc[i]->step)) {
            q->wait_peer = io->sc[i]->peer;
            q->wait_what = "free FIFO space at";
            return 0;
        }
    }
    return 1;
}

/* Check and take the received data: Simple slots are read where they are (data the
 * proxy received into the output already is there); LL lines are unpacked (their flags
 * checked) into the comm's scratch. */
static int step_receive(br_exec_queue_t *q, br_work_t *w, const br_step_t *st, step_io_t *io,
                        char *out)
{
    br_exec_comm_t *ec = q->ec;
    int ll = w->op.proto == BR_PROTO_LL;
    for (int i = 0; i < st->nrecv; i++) {
        br_conn_t *rc = io->rc[i];
        /* On memory links the LL descriptor was checked when its first line came. */
        if (!(ll && rc->ll != NULL) &&
            br_desc_check(ec, w, rc->peer, &rc->ctrl->slot[rc->step % BR_STEPS],
                          wire_bytes(w->op.proto, io->bytes)) != 0) {
            return -1;
        }
        if (!ll) {
            io->rdata[i] =
                ub_conn(w, rc) && ub_recv_prim(st->prim) ? out : br_conn_slot(rc, rc->step);
            continue;
        }
        char *dst = ec->ll_scratch + (size_t)(i + 1) * ec->ll_scratch_each;
        long bad = br_ll_unpack(dst, br_conn_ll_slot(rc, rc->step), io->bytes, rc->step);
        if (bad >= 0) {
            br_exec_fail(ec, ncclInternalError,
                         "rank %d: %s #%llu: LL line %ld of step %llu from rank %d carries the "
                         "wrong flag (corrupted FIFO?)",
                         ec->rank, br_func_name(w->op.func), (unsigned long long)w->op.seq, bad,
                         (unsigned long long)rc->step, rc->peer);
            return -1;
        }
        io->rdata[i] = dst;
    }
    return 0;
}

/*
 * dst = post(pre(in) (+) r0 (+) r1 ...): the local input is combined first (its scale
 * applied once, and an in-place dst that aliases it is read before it is written), then
 * the other partial results, which are already scaled; the final step (integer Avg's
 * division) comes with the last operand.
 */
static void fold(void *dst, const char *const *recv, int nrecv, const void *in, size_t count,
                 const br_redop_t *op, int post)
{
    br_redop_t partial = br_redop_partial(op);
    for (int i = 0; i < nrecv; i++) {
        int last = i == nrecv - 1;
        if (i == 0) {
            br_reduce(dst, recv[0], in, count, op, last && post ? BR_REDUCE_POST : 0);
        } else if (last && post && op->kind == BR_RED_SUMPOSTDIV) {
            br_reduce(dst, recv[i], dst, count, op, BR_REDUCE_POST);
        } else {
            br_reduce(dst, recv[i], dst, count, &partial, 0);
        }
    }
}

/* Where the step's outgoing data is built: the first send slot (Simple), the output when
 * the step writes it anyway, or the scratch (LL, whose lines are packed from it). */
static char *send_stage(const br_exec_comm_t *ec, const br_work_t *w, const step_io_t *io,
                        char *out, uint32_t prim)
{
    if (prim & BR_PRIM_COPY) {
        return out;
    }
    if (w->op.proto == BR_PROTO_LL) {
        return ec->ll_scratch;
    }
    return br_conn_slot(io->sc[0], io->sc[0]->step);
}

/* The step's arithmetic and copies; returns the data to send (NULL when none). */
static const char *step_compute(const br_exec_comm_t *ec, const br_work_t *w, const br_step_t *st,
                                const step_io_t *io, const char *in, char *out, size_t len)
{
    const br_op_t *op = &w->op;
    uint32_t p = st->prim;
    size_t bytes = len * w->lay.esize;
    const char *data;

    if (p & BR_PRIM_REDUCE) {
        char *dst = send_stage(ec, w, io, out, p);
        fold(dst, io->rdata, st->nrecv, in, len, &op->redop, (p & BR_PRIM_POST) != 0);
        return dst;
    }
    if (p & BR_PRIM_RECV) {
        data = io->rdata[0];
    } else if (p & BR_PRIM_FROM_OUTPUT) {
        data = out;
    } else if (br_func_is_reduction((br_func_t)w->sched.func) && (p & BR_PRIM_SEND)) {
        /* The first contributor of a reduction sends its input scaled (PreMulSum). */
        char *dst = send_stage(ec, w, io, out, 0);
        br_reduce(dst, NULL, in, len, &op->redop, 0);
        return dst;
    } else if (op->algo == BR_ALGO_RING_ONESHOT && op->redop.kind == BR_RED_PREMULSUM &&
               (p & BR_PRIM_LOCAL)) {
        /* RingOneShot gathers the inputs into its scratch (never the input) to fold them
         * there: each rank's input enters the gather scaled by its own PreMulSum scalar. */
        /* Its gather moves bytes (lay.esize 1): the piece is bytes / type size elements. */
        br_reduce(out, NULL, in, bytes / br_type_size(op->type), &op->redop, 0);
        data = out;
    } else {
        if ((p & BR_PRIM_LOCAL) && out != in) {
            memcpy(out, in, bytes);
        }
        data = in;
    }
    if ((p & BR_PRIM_COPY) && data != out) {
        memcpy(out, data, bytes);
    }
    return data;
}

/* Fill the send slots (or hand the proxy the user's bytes), then release the received
 * slots (only now: the data sent may be one of them), then publish the sent ones. */
static int step_post(br_exec_queue_t *q, br_work_t *w, const br_step_t *st, const step_io_t *io,
                     const char *data, const char *out)
{
    int ll = w->op.proto == BR_PROTO_LL;
    br_slot_desc_t d = br_desc_make(&w->op, wire_bytes(w->op.proto, io->bytes));

    for (int i = 0; i < st->nsend; i++) {
        br_conn_t *sc = io->sc[i];
        if (ub_conn(w, sc) && ub_send_prim(w, st->prim)) {
            /* From the output when the step wrote it: data may be a slot released below. */
            const char *src = (st->prim & BR_PRIM_COPY) ? out : data;
            const char *ob = w->op.recvbuff;
            int from_out = src >= ob && src < ob + ub_out_bytes(w);
            if (br_proxy_userbuf_send_step(q->ec->tc->proxy, sc->net, sc->step, src, io->bytes,
                                           w->op.seq + 1, from_out ? ob : w->op.sendbuff,
                                           from_out ? ub_out_bytes(w) : br_op_bytes(&w->op)) !=
                ncclSuccess) {
                br_exec_fail(q->ec, ncclSystemError,
                             "rank %d (host %s): cannot queue a send of %zu bytes to rank %d",
                             q->ec->rank, br_host_name(), io->bytes, sc->peer);
                return -1;
            }
            w->ub_sc = sc;
            w->ub_send_end = sc->step + 1;
            continue;
        }
        if (!ll) {
            char *slot = br_conn_slot(sc, sc->step);
            if (slot != data) {
                memcpy(slot, data, io->bytes);
            }
            continue;
        }
        uint64_t *lines = br_conn_ll_slot(sc, sc->step);
        if (sc->ll != NULL && br_ll_epoch_start(sc->step)) {
            for (size_t k = 0; k < sc->ll_bytes / BR_LL_LINE; k++) {
                lines[k] = 0; /* no reader looks at a slot we hold the credit for */
            }
        }
        /* The descriptor first: a reader that sees the first line reads it. */
        sc->ctrl->slot[sc->step % BR_STEPS] = d;
        br_ll_pack(lines, data, io->bytes, sc->step);
    }
    for (int i = 0; i < st->nrecv; i++) {
        br_fifo_post_recv(io->rc[i]->ctrl, io->rc[i]->step++);
    }
    for (int i = 0; i < st->nsend; i++) {
        br_conn_t *sc = io->sc[i];
        if (ll) {
            br_fifo_post_tail(sc->ctrl, sc->step++);
        } else {
            br_fifo_post_send(sc->ctrl, sc->step++, &d);
        }
    }
    return 0;
}

/* One step of stream s; returns 1 done, 0 blocked, -1 error. */
static int stream_step(br_exec_queue_t *q, br_work_t *w, int s)
{
    br_stream_t *sp = &w->st[s];
    const br_op_t *op = &w->op;
    br_step_t st;
    step_io_t io;
    size_t in_off, out_off, len;

    if (sp->chunk == 0) {
        sp->chunk = br_sched_chunk(&w->sched, sp->base, w->lay.hi, w->lay.slice);
    }
    br_sched_step(&w->sched, s, sp->j, &st);
    if (st.after && w->st[0].nsteps > 0 && w->st[0].base <= sp->base) {
        return 0; /* stream 0 has not finished this chunk here yet (and says whom it waits for) */
    }
    br_sched_place(&w->sched, &st, sp->base, sp->chunk, w->lay.hi, w->lay.units,
                   br_graph_ring(q->ec->graph, w->ch), &in_off, &out_off, &len);
    io.bytes = len * w->lay.esize;
    int r = w->ub ? ub_headers(q, w, &st) : 1;
    if (r > 0) {
        r = step_ready(q, w, &st, &io);
    }
    if (r <= 0) {
        return r;
    }
    /* Ranks that do not read the input or write the output may pass NULL for them. */
    const char *in =
        op->sendbuff != NULL ? (const char *)op->sendbuff + in_off * w->lay.esize : NULL;
    char *outbase = w->scratch != NULL ? w->scratch : (char *)op->recvbuff;
    char *out = outbase != NULL ? outbase + out_off * w->lay.esize : NULL;
    if (step_receive(q, w, &st, &io, out) != 0) {
        return -1;
    }
    const char *data = step_compute(q->ec, w, &st, &io, in, out, len);
    if (step_post(q, w, &st, &io, data, out) != 0) {
        return -1;
    }
    if (++sp->j == sp->nsteps) {
        sp->j = 0;
        sp->base += br_sched_advance(&w->sched, sp->chunk);
        sp->chunk = 0;
    }
    return 1;
}

/* RingOneShot's end: every rank's input is in the scratch (a PREMULSUM's scaled by its
 * own rank's scalar, step_compute); fold them in rank order, so every rank computes
 * bit-identical results. */
static void gather_fold(br_work_t *w)
{
    const br_op_t *op = &w->op;
    const char *first = w->scratch;
    size_t stride = w->lay.units;
    br_redop_t sum = br_redop_prescaled(&op->redop);
    int n = w->sched.nranks;
    br_reduce(op->recvbuff, first, first + stride, op->count, &sum, n == 2 ? BR_REDUCE_POST : 0);
    for (int r = 2; r < n; r++) {
        br_reduce(op->recvbuff, op->recvbuff, first + (size_t)r * stride, op->count, &sum,
                  r == n - 1 ? BR_REDUCE_POST : 0);
    }
}

int br_work_sched(br_exec_queue_t *q, br_work_t *w, int *done_p)
{
    int moved = 0, progress = 1, up_peer = -1;
    const char *up_what = NULL;
    while (progress) {
        progress = 0;
        for (int s = 0; s < 2; s++) {
            br_stream_t *sp = &w->st[s];
            while (sp->nsteps > 0 && sp->base < w->lay.hi) {
                int r = stream_step(q, w, s);
                if (r < 0) {
                    return -1;
                }
                if (r == 0) {
                    if (s == 0) {
                        up_peer = q->wait_peer;
                        up_what = q->wait_what;
                    }
                    break;
                }
                moved++;
                progress = 1;
            }
        }
    }
    for (int s = 0; s < 2; s++) {
        if (w->st[s].nsteps > 0 && w->st[s].base < w->lay.hi) {
            /* Stream 1 (a tree's broadcast down) waits, in the end, on what stream 0 waits
             * for: that is the wait to report, and to follow from rank to rank. */
            if (s == 0 && up_peer >= 0) {
                q->wait_peer = up_peer;
                q->wait_what = up_what;
            }
            return moved;
        }
    }
    /* Acquire pairs with the proxy's release of head: it no longer reads our buffers
     * (and, with failover on, will not send them again). */
    if (w->ub_sc != NULL &&
        atomic_load_explicit(&w->ub_sc->ctrl->head, memory_order_acquire) < w->ub_send_end) {
        q->wait_peer = w->ub_sc->peer;
        q->wait_what = "the network to take the send buffer by";
        return moved;
    }
    if (w->ub_sc != NULL) {
        br_proxy_userbuf_release(q->ec->tc->proxy, w->ub_sc->net, w->op.seq + 1);
        w->ub_sc = NULL;
    }
    if (w->op.algo == BR_ALGO_RING_ONESHOT) {
        gather_fold(w);
    }
    *done_p = 1;
    return moved;
}
