/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host emulation of device launches (dev_emu.h): connections, work items from the real
 * plan, one thread per block running the kernels' interpreter, and the references.
 */
#include "dev_emu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dev_prims.h"
#include "exec_reduce.h"
/* After dev_prims.h: fifo.h redefining BR_STEPS with another value than the kernels' fails
 * the build (-Werror). */
#include "fifo.h"
#include "plan.h"

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (p == NULL) {
        abort();
    }
    return p;
}

void emu_fabric_init(emu_fabric_t *f, int n, int nch, const uint64_t *host, size_t slot_bytes)
{
    memset(f, 0, sizeof(*f));
    f->n = n;
    f->nch = nch;
    f->slot_bytes = slot_bytes;
    if (br_graph_build(n, host, nch, &f->g) != ncclSuccess) {
        abort();
    }
}

void emu_fabric_free(emu_fabric_t *f)
{
    for (int c = 0; c < EMU_MAXCH; c++) {
        for (int a = 0; a < EMU_MAXR; a++) {
            for (int b = 0; b < EMU_MAXR; b++) {
                br_dev_conn_t *k = f->conn[c][a][b];
                if (k != NULL) {
                    free(k->buf);
                    free(k->tail);
                    free(k->head);
                    free(k->desc);
                    free(k);
                }
            }
        }
    }
    br_graph_free(f->g);
    memset(f, 0, sizeof(*f));
}

/* The connection sender -> receiver of channel c, made on first use: zeroed slots (no
 * line carries a flag yet), counters and step numbers at f->start_step. */
static br_dev_conn_t *fabric_conn(emu_fabric_t *f, int c, int sender, int receiver)
{
    br_dev_conn_t **k = &f->conn[c][sender][receiver];
    if (*k == NULL) {
        br_dev_conn_t *x = (br_dev_conn_t *)xcalloc(1, sizeof(*x));
        x->slot_bytes = f->slot_bytes;
        x->buf = (char *)aligned_alloc(128, BR_STEPS * f->slot_bytes);
        if (x->buf == NULL) {
            abort();
        }
        memset(x->buf, 0, BR_STEPS * f->slot_bytes);
        x->tail = (uint64_t *)xcalloc(8, sizeof(uint64_t));
        x->head = (uint64_t *)xcalloc(8, sizeof(uint64_t));
        x->desc = (uint64_t *)xcalloc(2 * BR_STEPS, sizeof(uint64_t));
        x->send_step = x->recv_step = *x->tail = *x->head = f->start_step;
        *k = x;
    }
    return *k;
}

static int add_peer(int32_t *list, int32_t *n, int peer)
{
    for (int k = 0; k < *n; k++) {
        if (list[k] == peer) {
            return k;
        }
    }
    list[*n] = peer;
    return (*n)++;
}

int emu_work_fill(emu_fabric_t *f, const br_op_t *op, int r, int c, const void *send, void *recv,
                  br_dev_work_t *w)
{
    br_plan_layout_t lay;
    memset(w, 0, sizeof(*w));
    w->kind = BR_DEV_WORK_SCHED;
    w->proto = (uint32_t)op->proto;
    w->type = (uint32_t)op->type;
    w->red = (uint32_t)op->redop.kind;
    w->scalar_f = op->redop.scalar_f;
    w->scalar_i = op->redop.scalar_i;
    w->divisor = op->redop.divisor;
    w->seq = op->seq + 1;
    br_plan_layout(op, f->n, c, &lay);
    br_plan_sched(f->g, op, c, r, &w->sched);
    w->esize = lay.esize;
    w->units = lay.units;
    w->lo = lay.lo;
    w->hi = lay.hi;
    w->slice = lay.slice;
    w->ring_rank = br_graph_ring(f->g, c);
    w->send = (const char *)send;
    w->recv = (char *)recv;
    for (int s = 0; s < br_sched_nstreams(&w->sched); s++) {
        for (int j = 0; j < br_sched_nsteps(&w->sched, s); j++) {
            br_step_t st;
            br_sched_step(&w->sched, s, j, &st);
            for (int i = 0; i < st.nrecv; i++) {
                int k = add_peer(w->recv_peer, &w->nrecv_peers, st.recv[i]);
                w->recv_conn[k] = fabric_conn(f, c, st.recv[i], r);
            }
            for (int i = 0; i < st.nsend; i++) {
                int k = add_peer(w->send_peer, &w->nsend_peers, st.send[i]);
                w->send_conn[k] = fabric_conn(f, c, r, st.send[i]);
            }
        }
    }
    return lay.lo < lay.hi;
}

/* ---- launches ---- */

#define EMU_MAXTHR 4 /* threads per block */
#define EMU_MAXB (2 * EMU_MAXR * EMU_MAXCH)

static int emu_block_threads = 1;

void emu_set_block_threads(int nthr)
{
    if (nthr < 1 || nthr > EMU_MAXTHR) {
        abort();
    }
    emu_block_threads = nthr;
}

/* One block: its state and barrier, shared by its threads. */
typedef struct {
    br_dev_shared_t sh __attribute__((aligned(16)));
    pthread_barrier_t barrier;
} emu_block_t;

typedef struct {
    const br_dev_launch_t *L;
    emu_block_t *blk;
    int b, tid, nthr;
} block_arg_t;

static void *block_main(void *arg)
{
    const block_arg_t *a = (const block_arg_t *)arg;
    br_dev_emu_enter(a->tid, a->nthr, a->nthr > 1 ? &a->blk->barrier : NULL);
    br_dev_run_block_with(a->L, a->b, &a->blk->sh);
    return NULL;
}

uint32_t emu_launch(emu_launch_t *E, const br_dev_block_t *blocks, int nblocks,
                    const br_dev_work_t *works, uint64_t timeout_ns, uint64_t abort_after_ns)
{
    pthread_t th[EMU_MAXB * EMU_MAXTHR];
    block_arg_t args[EMU_MAXB * EMU_MAXTHR];
    emu_block_t *blk = calloc((size_t)EMU_MAXB, sizeof(*blk));
    const int nthr = emu_block_threads;

    memset(E, 0, sizeof(*E));
    E->report.rank = E->report.peer = -1;
    E->L.blocks = blocks;
    E->L.works = works;
    E->L.abort_flag = &E->abort_flag;
    E->L.wait_timeout_ns = timeout_ns;
    E->L.claim = &E->claim;
    E->L.stop = &E->stop;
    E->L.report = &E->report;
    if (blk == NULL || nblocks > EMU_MAXB) {
        abort();
    }
    for (int b = 0; b < nblocks; b++) {
        if (pthread_barrier_init(&blk[b].barrier, NULL, (unsigned)nthr) != 0) {
            abort();
        }
        for (int t = 0; t < nthr; t++) {
            block_arg_t *a = &args[b * nthr + t];
            a->L = &E->L;
            a->blk = &blk[b];
            a->b = b;
            a->tid = t;
            a->nthr = nthr;
            if (pthread_create(&th[b * nthr + t], NULL, block_main, a) != 0) {
                abort();
            }
        }
    }
    if (abort_after_ns > 0) {
        struct timespec ts = {(time_t)(abort_after_ns / 1000000000u),
                              (long)(abort_after_ns % 1000000000u)};
        nanosleep(&ts, NULL);
        __atomic_store_n(&E->abort_flag, 1u, __ATOMIC_SEQ_CST);
    }
    for (int b = 0; b < nblocks; b++) {
        for (int t = 0; t < nthr; t++) {
            pthread_join(th[b * nthr + t], NULL);
        }
        pthread_barrier_destroy(&blk[b].barrier);
    }
    free(blk);
    return E->report.status;
}

/* ---- references ---- */

typedef struct {
    const br_redop_t *op;
    br_redop_t partial;
    const unsigned char *const *in; /* per rank, already at the element's offset */
    size_t esize;
} fold_t;

/* dst = the host executor's fold of received partial results kids[0..nk) into the input of
 * rank r (core/exec/host/exec_sched.c, fold()), post: the reduction ends here. */
static void fold_into(const fold_t *F, void *dst, unsigned char kids[][8], int nk, int r, int post)
{
    if (nk == 0) { /* a first contributor: its input, pre-multiplied */
        br_reduce(dst, NULL, F->in[r], 1, F->op, 0);
        return;
    }
    br_reduce(dst, kids[0], F->in[r], 1, F->op, nk == 1 && post ? BR_REDUCE_POST : 0);
    for (int i = 1; i < nk; i++) {
        if (i == nk - 1 && post && F->op->kind == BR_RED_SUMPOSTDIV) {
            br_reduce(dst, kids[i], dst, 1, F->op, BR_REDUCE_POST);
        } else {
            br_reduce(dst, kids[i], dst, 1, &F->partial, 0);
        }
    }
}

/* A ring chain: from position `last + 1` round to `last`, which completes the reduction. */
static void chain(const fold_t *F, const int *ring, int n, int last, void *dst)
{
    unsigned char acc[1][8];
    fold_into(F, acc[0], NULL, 0, ring[(last + 1) % n], 0);
    for (int k = 2; k <= n; k++) {
        fold_into(F, acc[0], acc, 1, ring[(last + k) % n], k == n);
    }
    memcpy(dst, acc[0], F->esize);
}

/* Tree: the value node sends up (or, at the tree's root, the result). */
static void tree_val(const fold_t *F, const br_graph_t *g, int c, int node, void *dst)
{
    const br_tree_node_t *t = br_graph_tree(g, c, node);
    unsigned char kids[BR_MAX_TREE_ARITY][8];
    int nk = 0;
    for (int i = 0; i < t->ndown; i++) {
        if (t->down[i] >= 0) {
            tree_val(F, g, c, t->down[i], kids[nk++]);
        }
    }
    fold_into(F, dst, kids, nk, node, t->up < 0);
}

void emu_reference(emu_fabric_t *f, const br_op_t *op, int c, const void *const *in, int owner,
                   void *dst)
{
    br_plan_layout_t lay;
    br_sched_t s;
    const unsigned char *at[EMU_MAXR];
    fold_t F;
    const int *ring = br_graph_ring(f->g, c), *pos = br_graph_ring_pos(f->g, c);
    int n = f->n;

    br_plan_layout(op, n, c, &lay);
    br_plan_sched(f->g, op, c, owner, &s);
    F.op = &op->redop;
    F.partial = br_redop_partial(&op->redop);
    F.in = at;
    F.esize = lay.esize;
    for (size_t base = lay.lo; base < lay.hi;) {
        size_t chunk = br_sched_chunk(&s, base, lay.hi, lay.slice);
        for (size_t e = base; e < base + br_sched_advance(&s, chunk) && e < lay.hi; e++) {
            size_t in_e = e, out_e = e;
            int last = 0;
            if (op->func == BR_FUNC_REDUCESCATTER) {
                in_e = (size_t)owner * lay.units + e;
                last = pos[owner];
            } else if (op->func == BR_FUNC_REDUCE) {
                last = pos[op->root];
            } else if (s.algo == BR_ALGO_RING) { /* AllReduce: the chunk's ring position */
                last = (int)((e - base) / chunk);
            }
            for (int r = 0; r < n; r++) {
                at[r] = (const unsigned char *)in[r] + in_e * lay.esize;
            }
            unsigned char *d = (unsigned char *)dst + out_e * lay.esize;
            if (s.algo == BR_ALGO_TREE) {
                tree_val(&F, f->g, c, f->g->tree_root[c], d);
            } else {
                chain(&F, ring, n, last, d);
            }
        }
        base += br_sched_advance(&s, chunk);
    }
}
