/* SPDX-License-Identifier: Apache-2.0 */
/* The simulator of tests/unit/plan (plan_sim.h): data, steps, FIFOs, audit, reference. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_sim.h"

#define NSLOTS 8 /* NCCL_STEPS */
#define GUARD 64
#define GUARD_BYTE 0xa5


static const char *const order_names[NORDERS] = {"greedy", "reverse", "random"};

/* What filled a slot: the sender's rank, stream, step and iteration, and the ring position
 * of its data. */
typedef struct {
    int rank, stream, step, chunk;
    size_t base;
} tag_t;

/* One direction of one link on one channel. */
typedef struct {
    unsigned char *data; /* NSLOTS x the slot capacity */
    size_t bytes[NSLOTS];
    tag_t tag[NSLOTS];
    int head, count;
    uint64_t sent, received;
} fifo_t;

typedef struct {
    size_t base, chunk;
    int j, nsteps;
    uint64_t iters;
} stream_t;

typedef struct {
    br_sched_t s;
    br_plan_layout_t lay;
    stream_t st[2];
    int active;
} chan_t;

/* A region with GUARD bytes either side. */
typedef struct {
    unsigned char *mem;
    size_t bytes;
} region_t;

typedef struct {
    br_op_t op;
    region_t a, b, scratch; /* a: output (and input in place), b: input out of place */
    unsigned char *sendbuff, *recvbuff, *outbase; /* outbase: where the schedule writes */
    size_t in_units, out_units;                   /* extents in layout units */
    uint8_t *writes;                              /* per output unit: times written */
    chan_t ch[MAXCH];
} rank_t;

typedef struct {
    const case_t *k;
    const br_graph_t *g;
    int n, nch, track;
    size_t esize, cap; /* bytes per unit; most bytes one slot may carry */
    fifo_t **fifo;     /* [nch][from][to], made on first use */
    unsigned char *tmp;
    rank_t *ranks;
    uint64_t rng;
    char err[2048];
} sim_t;

/* ---- data: inputs, the arithmetic and the reference ---- */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int is_reduction(const case_t *k)
{
    return br_func_is_reduction(k->func);
}

static uint64_t type_mask(const case_t *k)
{
    return br_type_size(k->type) == 4 ? 0xffffffffull : ~0ull;
}

/* Rank r's input element i. Averages take values in [2^16, 2^20): no uint32 overflow over
 * 64 ranks, and a lost or doubled contribution moves the result. */
static uint64_t input_value(const case_t *k, int r, size_t i)
{
    uint64_t h = mix64(((uint64_t)(r + 1) << 48) ^ (uint64_t)i);
    if (k->red == ncclAvg && is_reduction(k)) {
        return (1u << 16) + h % (15u << 16);
    }
    return h & type_mask(k);
}

static uint64_t combine1(const case_t *k, uint64_t a, uint64_t b)
{
    if (k->red == ncclMax) {
        return a > b ? a : b;
    }
    return (a + b) & type_mask(k);
}

static uint64_t post1(const case_t *k, int n, uint64_t v)
{
    return k->red == ncclAvg ? v / (uint64_t)n : v;
}

static uint64_t load(const unsigned char *p, size_t es)
{
    uint32_t v32;
    uint64_t v64;
    if (es == 4) {
        memcpy(&v32, p, 4);
        return v32;
    }
    memcpy(&v64, p, 8);
    return v64;
}

static void store(unsigned char *p, size_t es, uint64_t v)
{
    uint32_t v32 = (uint32_t)v;
    if (es == 4) {
        memcpy(p, &v32, 4);
    } else {
        memcpy(p, &v, 8);
    }
}

/* dst[i] = dst[i] (+) src[i] over len elements. */
static void fold(const case_t *k, unsigned char *dst, const unsigned char *src, size_t len)
{
    size_t es = br_type_size(k->type);
    for (size_t i = 0; i < len; i++) {
        store(dst + i * es, es, combine1(k, load(dst + i * es, es), load(src + i * es, es)));
    }
}

static void post(const case_t *k, int n, unsigned char *dst, size_t len)
{
    size_t es = br_type_size(k->type);
    for (size_t i = 0; k->red == ncclAvg && i < len; i++) {
        store(dst + i * es, es, post1(k, n, load(dst + i * es, es)));
    }
}

/* The reduction of element i over all ranks, in rank order. */
static uint64_t reduced_value(const case_t *k, int n, size_t i)
{
    uint64_t acc = input_value(k, 0, i);
    for (int r = 1; r < n; r++) {
        acc = combine1(k, acc, input_value(k, r, i));
    }
    return post1(k, n, acc);
}

/* Elements of a rank's input and output for the call. */
static void buf_elems(const case_t *k, int n, size_t *send_p, size_t *recv_p)
{
    *send_p = k->func == BR_FUNC_REDUCESCATTER ? k->count * (size_t)n : k->count;
    *recv_p = k->func == BR_FUNC_ALLGATHER ? k->count * (size_t)n : k->count;
}

/* ---- the simulator ---- */

static fifo_t *fifo_get(sim_t *sim, int c, int from, int to)
{
    size_t n = (size_t)sim->n, at = ((size_t)c * n + (size_t)from) * n + (size_t)to;
    if (sim->fifo[at] == NULL) {
        sim->fifo[at] = calloc(1, sizeof(fifo_t));
        sim->fifo[at]->data = malloc(NSLOTS * sim->cap);
    }
    return sim->fifo[at];
}

static void prim_str(uint32_t p, char *buf, size_t len)
{
    static const char *const names[] = {"RECV", "REDUCE", "COPY", "SEND", "POST", "LOCAL",
                                        "FROM_OUTPUT"};
    size_t at = 0;
    buf[0] = '\0';
    for (int b = 0; b < 7; b++) {
        if ((p & (1u << b)) && at < len) {
            at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? "|" : "", names[b]);
        }
    }
    if (p >> 7 && at < len) {
        snprintf(buf + at, len - at, "%s0x%x", at ? "|" : "", p >> 7 << 7);
    }
}

/* Is peer the ring neighbour (prev for a receive, next for a send) of `me` on channel c, or
 * one of its tree links for a Tree schedule? */
static int is_link(const sim_t *sim, int c, int me, int peer, int send)
{
    int n = sim->n, p = br_graph_ring_pos(sim->g, c)[me];
    const int *ring = br_graph_ring(sim->g, c);
    const br_tree_node_t *t = br_graph_tree(sim->g, c, me);
    if (sim->k->algo != BR_ALGO_TREE) {
        return peer == ring[send ? (p + 1) % n : (p + n - 1) % n];
    }
    if (peer >= 0 && peer == t->up) {
        return 1;
    }
    for (int i = 0; i < t->ndown; i++) {
        if (peer >= 0 && t->down[i] == peer) {
            return 1;
        }
    }
    return 0;
}

/* The contract of one step: known flags that fit together, peers that are links. */
static int step_check(sim_t *sim, int r, int c, const br_step_t *st)
{
    uint32_t p = st->prim;
    const char *bad = NULL;
    int red = is_reduction(sim->k) && sim->k->algo != BR_ALGO_RING_ONESHOT;

    if (p == 0 || (p & ~0x7fu)) {
        bad = "no primitive, or an unknown flag";
    } else if (!(p & BR_PRIM_RECV) != (st->nrecv == 0) || !(p & BR_PRIM_SEND) != (st->nsend == 0)) {
        bad = "RECV/SEND flags disagree with the peer counts";
    } else if (st->nrecv > BR_MAX_TREE_ARITY || st->nsend > BR_MAX_TREE_ARITY) {
        bad = "too many peers";
    } else if (((p & BR_PRIM_REDUCE) && !(p & BR_PRIM_RECV)) || (st->nrecv > 1 && !(p & BR_PRIM_REDUCE))) {
        bad = "REDUCE without RECV, or several receives not reduced";
    } else if (((p & (BR_PRIM_REDUCE | BR_PRIM_POST)) && !red) || ((p & BR_PRIM_POST) && !(p & BR_PRIM_REDUCE))) {
        bad = "REDUCE/POST outside a reduction, or POST without REDUCE";
    } else if ((p & (BR_PRIM_LOCAL | BR_PRIM_FROM_OUTPUT)) && (p & BR_PRIM_RECV)) {
        bad = "LOCAL or FROM_OUTPUT with RECV";
    } else if ((p & BR_PRIM_LOCAL) && (red || (p & BR_PRIM_FROM_OUTPUT))) {
        bad = "LOCAL in a reduction or with FROM_OUTPUT";
    } else if (st->after && sim->k->algo != BR_ALGO_TREE) {
        bad = "`after` outside a Tree";
    }
    for (int i = 0; bad == NULL && i < st->nrecv + st->nsend; i++) {
        int send = i >= st->nrecv, peer = send ? st->send[i - st->nrecv] : st->recv[i];
        for (int q = send ? st->nrecv : 0; q < i; q++) {
            if ((q < st->nrecv ? st->recv[q] : st->send[q - st->nrecv]) == peer) {
                bad = "a peer named twice";
            }
        }
        if (peer == r || !is_link(sim, c, r, peer, send)) {
            snprintf(sim->err, sizeof(sim->err), "%s rank %d, which is not its %s", send ? "sends to" : "receives from", peer,
                     sim->k->algo == BR_ALGO_TREE ? "tree link" : send ? "ring successor" : "ring predecessor");
            return -1;
        }
    }
    if (bad != NULL) {
        snprintf(sim->err, sizeof(sim->err), "%s", bad);
        return -1;
    }
    return 0;
}

/* Where a stream of rank r stands, for messages. */
static void stream_where(const sim_t *sim, int r, int c, char *buf, size_t len)
{
    const chan_t *ch = &sim->ranks[r].ch[c];
    size_t at = (size_t)snprintf(buf, len, "rank %d:", r);
    for (int s = 0; s < 2 && at < len; s++) {
        const stream_t *sp = &ch->st[s];
        if (sp->nsteps == 0 || !ch->active) {
            at += (size_t)snprintf(buf + at, len - at, " stream %d idle", s);
        } else if (sp->base >= ch->lay.hi) {
            at += (size_t)snprintf(buf + at, len - at, " stream %d done", s);
        } else {
            at += (size_t)snprintf(buf + at, len - at, " stream %d step %d at unit %zu", s, sp->j,
                                   sp->base);
        }
    }
}

/* sim->err = where the step is, then `what` (which may be sim->err itself). */
static void fail_step(sim_t *sim, int r, int c, int si, const br_step_t *st, const char *what)
{
    char p[96], head[256];
    const stream_t *sp = &sim->ranks[r].ch[c].st[si];
    prim_str(st->prim, p, sizeof(p));
    int hl = snprintf(head, sizeof(head), "rank %d channel %d stream %d step %d (%s) at unit %zu: ",
                      r, c, si, sp->j, p, sp->base);
    size_t at = hl < (int)sizeof(head) ? (size_t)hl : sizeof(head) - 1;
    size_t wl = strlen(what);
    wl = wl < sizeof(sim->err) - at - 1 ? wl : sizeof(sim->err) - at - 1;
    memmove(sim->err + at, what, wl);
    memcpy(sim->err, head, at);
    sim->err[at + wl] = '\0';
}

/* Take a slot from every receive peer, checking its size and the step that filled it. */
static int step_take(sim_t *sim, int r, int c, int si, const br_step_t *st, size_t bytes,
                     const unsigned char **recv)
{
    const stream_t *sp = &sim->ranks[r].ch[c].st[si];
    for (int i = 0; i < st->nrecv; i++) {
        fifo_t *f = fifo_get(sim, c, st->recv[i], r);
        const tag_t *t = &f->tag[f->head];
        char what[512];
        if (f->bytes[f->head] != bytes || t->base != sp->base ||
            (sim->k->algo != BR_ALGO_TREE && t->chunk != st->chunk)) {
            snprintf(what, sizeof(what), "expects %zu bytes of chunk %d of the iteration at unit %zu "
                     "from rank %d, got %zu bytes of chunk %d at unit %zu (its stream %d step %d)",
                     bytes, st->chunk, sp->base, st->recv[i], f->bytes[f->head], t->chunk, t->base,
                     t->stream, t->step);
            fail_step(sim, r, c, si, st, what);
            return -1;
        }
        recv[i] = f->data + (size_t)f->head * sim->cap;
    }
    return 0;
}

/* The first of the n bytes at p that is not v, or n. (All equal is answered by memcmp of
 * the bytes against themselves one further on, not a loop of byte compares: sanitizers
 * check a call's range once instead of every byte; only a failure walks the bytes.) */
static size_t first_other(const uint8_t *p, size_t n, uint8_t v)
{
    size_t i = 0;
    if (n == 0 || (p[0] == v && memcmp(p, p + 1, n - 1) == 0)) {
        return n;
    }
    while (p[i] == v) {
        i++;
    }
    return i;
}

/* Record writes of output units [off, off + len); FROM_OUTPUT reads require earlier writes. */
static int note_output(sim_t *sim, int r, size_t off, size_t len, int read)
{
    uint8_t *w = sim->ranks[r].writes;
    if (!sim->track) {
        return 0;
    }
    if (read) {
        const uint8_t *z = memchr(w + off, 0, len);
        if (z != NULL) {
            snprintf(sim->err, sizeof(sim->err), "sends output unit %zu before writing it",
                     (size_t)(z - w));
            return -1;
        }
        return 0;
    }
    size_t u = first_other(w + off, len, 0);
    if (u < len) {
        snprintf(sim->err, sizeof(sim->err), "writes output unit %zu a second time", off + u);
        return -1;
    }
    memset(w + off, 1, len);
    return 0;
}

/* The step's data (in sim->tmp) and its writes to the output. */
static int step_compute(sim_t *sim, int r, const br_step_t *st, const unsigned char **recv,
                        const unsigned char *in, unsigned char *out, size_t out_off, size_t len)
{
    const case_t *k = sim->k;
    size_t bytes = len * sim->esize;
    uint32_t p = st->prim;

    if (p & BR_PRIM_REDUCE) {
        memcpy(sim->tmp, in, bytes);
        for (int i = 0; i < st->nrecv; i++) {
            fold(k, sim->tmp, recv[i], len);
        }
        if (p & BR_PRIM_POST) {
            post(k, sim->n, sim->tmp, len);
        }
    } else if (p & BR_PRIM_RECV) {
        memcpy(sim->tmp, recv[0], bytes);
    } else if (p & BR_PRIM_FROM_OUTPUT) {
        if (note_output(sim, r, out_off, len, 1) != 0) {
            return -1;
        }
        memcpy(sim->tmp, out, bytes);
    } else {
        memcpy(sim->tmp, in, bytes);
        if (p & BR_PRIM_LOCAL) {
            if (note_output(sim, r, out_off, len, 0) != 0) {
                return -1;
            }
            memmove(out, in, bytes);
        }
    }
    if (p & BR_PRIM_COPY) {
        if (note_output(sim, r, out_off, len, 0) != 0) {
            return -1;
        }
        memcpy(out, sim->tmp, bytes);
    }
    return 0;
}

/* Step j of stream si of rank r on channel c: 1 ran, 0 blocked, -1 error (sim->err). */
static int sim_step(sim_t *sim, int r, int c, int si)
{
    rank_t *rk = &sim->ranks[r];
    chan_t *ch = &rk->ch[c];
    stream_t *sp = &ch->st[si];
    const unsigned char *recv[BR_MAX_TREE_ARITY];
    size_t in_off, out_off, len;
    char what[256];
    br_step_t st;

    if (sp->j == 0) {
        sp->chunk = br_sched_chunk(&ch->s, sp->base, ch->lay.hi, ch->lay.slice);
    }
    br_sched_step(&ch->s, si, sp->j, &st);
    if (step_check(sim, r, c, &st) != 0) {
        fail_step(sim, r, c, si, &st, sim->err);
        return -1;
    }
    if (sp->chunk == 0 || sp->chunk > ch->lay.slice) {
        snprintf(what, sizeof(what), "chunk of %zu units, slice %zu", sp->chunk, ch->lay.slice);
        fail_step(sim, r, c, si, &st, what);
        return -1;
    }
    if (st.after && ch->st[0].nsteps > 0 && ch->st[0].base <= sp->base) {
        return 0;
    }
    for (int i = 0; i < st.nrecv; i++) {
        if (fifo_get(sim, c, st.recv[i], r)->count == 0) {
            return 0;
        }
    }
    for (int i = 0; i < st.nsend; i++) {
        if (fifo_get(sim, c, r, st.send[i])->count == NSLOTS) {
            return 0;
        }
    }
    br_sched_place(&ch->s, &st, sp->base, sp->chunk, ch->lay.hi, ch->lay.units,
                   br_graph_ring(sim->g, c), &in_off, &out_off, &len);
    size_t bytes = len * sim->esize;
    if (len > sp->chunk || bytes > sim->cap || in_off + len > rk->in_units ||
        out_off + len > rk->out_units) {
        snprintf(what, sizeof(what), "places %zu units at input %zu / output %zu (chunk %zu, "
                 "extents %zu / %zu units)", len, in_off, out_off, sp->chunk, rk->in_units,
                 rk->out_units);
        fail_step(sim, r, c, si, &st, what);
        return -1;
    }
    if (step_take(sim, r, c, si, &st, bytes, recv) != 0) {
        return -1;
    }
    unsigned char *out = rk->outbase + out_off * sim->esize;
    if (step_compute(sim, r, &st, recv, rk->sendbuff + in_off * sim->esize, out, out_off, len)) {
        fail_step(sim, r, c, si, &st, sim->err);
        return -1;
    }
    /* Release the received slots only now (the data sent may have been one of them). */
    for (int i = 0; i < st.nrecv; i++) {
        fifo_t *f = fifo_get(sim, c, st.recv[i], r);
        f->head = (f->head + 1) % NSLOTS;
        f->count--;
        f->received++;
    }
    for (int i = 0; i < st.nsend; i++) {
        fifo_t *f = fifo_get(sim, c, r, st.send[i]);
        int slot = (f->head + f->count) % NSLOTS;
        memcpy(f->data + (size_t)slot * sim->cap, sim->tmp, bytes);
        f->bytes[slot] = bytes;
        f->tag[slot] = (tag_t){r, si, sp->j, st.chunk, sp->base};
        f->count++;
        f->sent++;
    }
    if (++sp->j == sp->nsteps) {
        sp->j = 0;
        sp->base += br_sched_advance(&ch->s, sp->chunk);
        sp->iters++;
    }
    return 1;
}

static int stream_done(const chan_t *ch, int s)
{
    return !ch->active || ch->st[s].nsteps == 0 || ch->st[s].base >= ch->lay.hi;
}

/* What a blocked stream waits for. */
static void describe_wait(sim_t *sim, int r, int c, int si, char *buf, size_t len)
{
    chan_t *ch = &sim->ranks[r].ch[c];
    char p[96], peer[160];
    br_step_t st;
    size_t at;

    br_sched_step(&ch->s, si, ch->st[si].j, &st);
    prim_str(st.prim, p, sizeof(p));
    at = (size_t)snprintf(buf, len, "rank %d channel %d stream %d step %d (%s) at unit %zu of "
                          "[%zu, %zu) waits for", r, c, si, ch->st[si].j, p, ch->st[si].base,
                          ch->lay.lo, ch->lay.hi);
    if (st.after && ch->st[0].nsteps > 0 && ch->st[0].base <= ch->st[si].base) {
        snprintf(buf + at, len - at, " its stream 0 to finish that chunk (stream 0 at unit %zu)",
                 ch->st[0].base);
        return;
    }
    for (int i = 0; i < st.nrecv + st.nsend && at < len; i++) {
        int send = i >= st.nrecv, q = send ? st.send[i - st.nrecv] : st.recv[i];
        fifo_t *f = fifo_get(sim, c, send ? r : q, send ? q : r);
        if (send ? f->count == NSLOTS : f->count == 0) {
            stream_where(sim, q, c, peer, sizeof(peer));
            at += (size_t)snprintf(buf + at, len - at, " %s %d (%s);",
                                   send ? "a free slot at rank" : "data from rank", q, peer);
        }
    }
}

static void report_deadlock(sim_t *sim)
{
    size_t at = (size_t)snprintf(sim->err, sizeof(sim->err), "deadlock:");
    int shown = 0;
    for (int r = 0; r < sim->n && shown < 4; r++) {
        for (int c = 0; c < sim->nch && shown < 4; c++) {
            for (int s = 0; s < 2 && shown < 4; s++) {
                char line[512];
                if (!stream_done(&sim->ranks[r].ch[c], s) && at < sizeof(sim->err)) {
                    describe_wait(sim, r, c, s, line, sizeof(line));
                    at += (size_t)snprintf(sim->err + at, sizeof(sim->err) - at, "\n    %s", line);
                    shown++;
                }
            }
        }
    }
}

static uint32_t rnd(sim_t *sim)
{
    sim->rng = sim->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(sim->rng >> 33);
}

/* Run every stream to its end in the case's order. A pass that moves nothing while some
 * stream is unfinished is a deadlock: every unfinished stream was tried in it. */
static int sim_run(sim_t *sim)
{
    int order = sim->k->order;
    for (;;) {
        int progress = 0, pending = 0, start = order == ORDER_RANDOM ? (int)(rnd(sim) % (uint32_t)sim->n) : 0;
        for (int v = 0; v < sim->n; v++) {
            int r = order == ORDER_REVERSE ? sim->n - 1 - v : (start + v) % sim->n;
            for (int c = 0; c < sim->nch; c++) {
                chan_t *ch = &sim->ranks[r].ch[c];
                int first = order == ORDER_REVERSE ? 1 : order == ORDER_RANDOM ? (int)(rnd(sim) & 1) : 0;
                for (int t = 0; t < 2; t++) {
                    int si = first ^ t, budget = order == ORDER_RANDOM ? 1 + (int)(rnd(sim) % 3) : -1;
                    while (budget-- != 0 && !stream_done(ch, si)) {
                        int ret = sim_step(sim, r, c, si);
                        if (ret < 0) {
                            return -1;
                        }
                        if (ret == 0) {
                            break;
                        }
                        progress = 1;
                    }
                    pending += !stream_done(ch, si);
                }
            }
        }
        if (!pending) {
            return 0;
        }
        if (!progress) {
            report_deadlock(sim);
            return -1;
        }
    }
}

/* ---- a case: buffers, the run, the audit of the FIFOs, the results ---- */

static void region_alloc(region_t *rg, size_t bytes)
{
    rg->bytes = bytes;
    rg->mem = malloc(bytes + 2 * GUARD);
    memset(rg->mem, GUARD_BYTE, bytes + 2 * GUARD);
}

static int region_guards_ok(const region_t *rg)
{
    for (size_t g = 0; rg->mem != NULL && g < GUARD; g++) {
        if (rg->mem[g] != GUARD_BYTE || rg->mem[GUARD + rg->bytes + g] != GUARD_BYTE) {
            return 0;
        }
    }
    return 1;
}

/* NCCL's buffers: in place, AllGather's input is the rank's block of its output and
 * ReduceScatter's output the rank's block of its input. */
static void rank_setup(sim_t *sim, int r)
{
    const case_t *k = sim->k;
    rank_t *rk = &sim->ranks[r];
    size_t es = br_type_size(k->type), se, re;
    int n = sim->n, oneshot = k->algo == BR_ALGO_RING_ONESHOT;

    buf_elems(k, n, &se, &re);
    size_t sb = se * es, rb = re * es;
    if (k->inplace) {
        region_alloc(&rk->a, sb > rb ? sb : rb);
        rk->sendbuff = rk->a.mem + GUARD + (k->func == BR_FUNC_ALLGATHER ? (size_t)r * sb : 0);
        rk->recvbuff = rk->a.mem + GUARD + (k->func == BR_FUNC_REDUCESCATTER ? (size_t)r * rb : 0);
    } else {
        region_alloc(&rk->a, rb);
        region_alloc(&rk->b, sb);
        rk->recvbuff = rk->a.mem + GUARD;
        rk->sendbuff = rk->b.mem + GUARD;
    }
    for (size_t i = 0; i < se; i++) {
        store(rk->sendbuff + i * es, es, input_value(k, r, i));
    }
    rk->outbase = rk->recvbuff;
    if (oneshot) {
        region_alloc(&rk->scratch, (size_t)n * sb);
        rk->outbase = rk->scratch.mem + GUARD;
    }
    rk->in_units = sim->esize == 1 ? sb : se;
    rk->out_units = oneshot ? (size_t)n * sb : sim->esize == 1 ? rb : re;
    rk->writes = sim->track ? calloc(rk->out_units + 1, 1) : NULL;

    br_op_t *op = &rk->op;
    memset(op, 0, sizeof(*op));
    op->func = k->func;
    op->count = k->count;
    op->type = k->type;
    br_redop_builtin(&op->redop, k->red, k->type, n);
    op->root = k->root;
    op->algo = k->algo;
    op->proto = BR_PROTO_SIMPLE;
    op->nchannels = sim->nch;
    op->chunk_bytes = k->chunk_bytes;
    op->sendbuff = rk->sendbuff;
    op->recvbuff = rk->recvbuff;
}

/* Layouts and schedules of rank r, checked against what plan.h documents. */
static int rank_plan(sim_t *sim, int r)
{
    const case_t *k = sim->k;
    rank_t *rk = &sim->ranks[r];
    size_t units = sim->esize == 1 ? k->count * br_type_size(k->type) : k->count, prev_hi = 0;

    for (int c = 0; c < sim->nch; c++) {
        chan_t *ch = &rk->ch[c];
        br_plan_layout(&rk->op, sim->n, c, &ch->lay);
        br_plan_sched(sim->g, &rk->op, c, r, &ch->s);
        const br_plan_layout_t *l = &ch->lay;
        int contiguous = l->lo == prev_hi || (l->lo == l->hi && l->lo == units);
        if (l->esize != sim->esize || l->units != units || l->slice == 0 ||
            l->slice * l->esize > sim->cap || l->lo > l->hi || l->hi > units || !contiguous) {
            snprintf(sim->err, sizeof(sim->err), "rank %d channel %d: layout esize %zu units %zu "
                     "[%zu, %zu) slice %zu (want esize %zu, units %zu, from %zu)", r, c, l->esize,
                     l->units, l->lo, l->hi, l->slice, sim->esize, units, prev_hi);
            return -1;
        }
        prev_hi = l->hi > prev_hi ? l->hi : prev_hi;
        ch->active = l->lo < l->hi;
        for (int s = 0; s < 2; s++) {
            ch->st[s].base = l->lo;
            ch->st[s].nsteps = s < br_sched_nstreams(&ch->s) ? br_sched_nsteps(&ch->s, s) : 0;
            if (sim->n == 1 && ch->st[s].nsteps != 0) {
                snprintf(sim->err, sizeof(sim->err), "one rank, yet stream %d has steps", s);
                return -1;
            }
        }
    }
    if (prev_hi != units) {
        snprintf(sim->err, sizeof(sim->err), "the channels cover [0, %zu) of %zu units", prev_hi,
                 units);
        return -1;
    }
    return 0;
}

static int tree_level(const br_graph_t *g, int c, int r)
{
    int level = 0;
    for (int x = br_graph_tree(g, c, r)->up; x >= 0; x = br_graph_tree(g, c, x)->up) {
        level++;
    }
    return level;
}

/* Slots one iteration moves on channel c, and on the ring link from position p to p + 1. */
static uint64_t slots_per_iter(const sim_t *sim, int c, int p)
{
    const case_t *k = sim->k;
    uint64_t n = (uint64_t)sim->n;
    int root_pos = br_graph_ring_pos(sim->g, c)[k->root], all = p < 0;

    if (k->algo == BR_ALGO_TREE) {
        switch (k->func) {
        case BR_FUNC_ALLREDUCE: return 2 * (n - 1);
        case BR_FUNC_BROADCAST: return n - 1;
        default: return n - 1 + (uint64_t)tree_level(sim->g, c, k->root);
        }
    }
    switch (k->algo == BR_ALGO_RING_ONESHOT ? BR_FUNC_ALLGATHER : k->func) {
    case BR_FUNC_ALLREDUCE: return (all ? n : 1) * (2 * n - 2);
    case BR_FUNC_ALLGATHER:
    case BR_FUNC_REDUCESCATTER: return (all ? n : 1) * (n - 1);
    case BR_FUNC_BROADCAST: return all ? n - 1 : (p + 1) % (int)n != root_pos;
    default: return all ? n - 1 : p != root_pos;
    }
}

/* After the run: every FIFO empty, as many iterations as the channel's share needs on
 * every rank, and the slot counts the algorithm implies. */
static int sim_audit(sim_t *sim)
{
    int n = sim->n;
    for (int c = 0; c < sim->nch; c++) {
        const br_plan_layout_t *l = &sim->ranks[0].ch[c].lay;
        uint64_t span = (uint64_t)(l->hi - l->lo), sl = l->slice, total = 0;
        int ring_ar = sim->k->algo == BR_ALGO_RING && sim->k->func == BR_FUNC_ALLREDUCE;
        uint64_t iters = ring_ar ? (span + sl * (uint64_t)n - 1) / (sl * (uint64_t)n)
                                 : (span + sl - 1) / sl;
        for (int r = 0; r < n; r++) {
            for (int s = 0; s < 2; s++) {
                const stream_t *sp = &sim->ranks[r].ch[c].st[s];
                if (sp->nsteps > 0 && sp->iters != iters) {
                    snprintf(sim->err, sizeof(sim->err), "rank %d channel %d stream %d ran %" PRIu64
                             " iterations, want %" PRIu64, r, c, s, sp->iters, iters);
                    return -1;
                }
            }
            for (int q = 0; q < n; q++) {
                fifo_t *f = sim->fifo[((size_t)c * (size_t)n + (size_t)r) * (size_t)n + (size_t)q];
                if (f == NULL) {
                    continue;
                }
                if (f->count != 0 || f->sent != f->received) {
                    const tag_t *t = &f->tag[f->head];
                    snprintf(sim->err, sizeof(sim->err), "channel %d: %d slot(s) from rank %d to "
                             "rank %d left at the end (%" PRIu64 " sent, %" PRIu64 " received; "
                             "first from its stream %d step %d at unit %zu)", c, f->count, r, q,
                             f->sent, f->received, t->stream, t->step, t->base);
                    return -1;
                }
                total += f->sent;
                int p = br_graph_ring_pos(sim->g, c)[r];
                if (sim->k->algo != BR_ALGO_TREE && f->sent != iters * slots_per_iter(sim, c, p)) {
                    snprintf(sim->err, sizeof(sim->err), "channel %d: ring link %d -> %d carried "
                             "%" PRIu64 " slots, want %" PRIu64, c, r, q, f->sent,
                             iters * slots_per_iter(sim, c, p));
                    return -1;
                }
            }
        }
        if (total != iters * slots_per_iter(sim, c, -1)) {
            snprintf(sim->err, sizeof(sim->err), "channel %d carried %" PRIu64 " slots in %" PRIu64
                     " iterations, want %" PRIu64 " per iteration", c, total, iters,
                     slots_per_iter(sim, c, -1));
            return -1;
        }
    }
    return 0;
}

/* RingOneShot's last part: each rank folds the gathered inputs in rank order. */
static void gather_fold(sim_t *sim, rank_t *rk)
{
    size_t bytes = sim->k->count * br_type_size(sim->k->type);
    const unsigned char *scratch = rk->scratch.mem + GUARD;
    memcpy(rk->recvbuff, scratch, bytes);
    for (int r = 1; r < sim->n; r++) {
        fold(sim->k, rk->recvbuff, scratch + (size_t)r * bytes, sim->k->count);
    }
    post(sim->k, sim->n, rk->recvbuff, sim->k->count);
}

/* Rank r's output element i as it should be. */
static uint64_t want_value(const sim_t *sim, const uint64_t *ref, int r, size_t i)
{
    const case_t *k = sim->k;
    switch (k->func) {
    case BR_FUNC_BROADCAST: return input_value(k, k->root, i);
    case BR_FUNC_ALLGATHER: return input_value(k, (int)(i / k->count), i % k->count);
    case BR_FUNC_REDUCESCATTER: return ref[(size_t)r * k->count + i];
    default: return ref[i];
    }
}

/* Rank r's output, guards, input and write counts. */
static int rank_verify(sim_t *sim, const uint64_t *ref, int r)
{
    const case_t *k = sim->k;
    const rank_t *rk = &sim->ranks[r];
    size_t es = br_type_size(k->type), se, re, nbad = 0, first = 0, last = 0;
    uint64_t got = 0, want = 0;
    int writes = k->func != BR_FUNC_REDUCE || r == k->root;

    buf_elems(k, sim->n, &se, &re);
    if (!region_guards_ok(&rk->a) || !region_guards_ok(&rk->b) || !region_guards_ok(&rk->scratch)) {
        snprintf(sim->err, sizeof(sim->err), "rank %d: a guard byte around a buffer changed", r);
        return -1;
    }
    for (size_t i = 0; writes && i < re; i++) {
        uint64_t w = want_value(sim, ref, r, i), g = load(rk->recvbuff + i * es, es);
        if (g != w && nbad++ == 0) {
            first = i;
            got = g;
            want = w;
        }
        last = g != w ? i : last;
    }
    if (nbad > 0) {
        snprintf(sim->err, sizeof(sim->err), "rank %d: output element %zu of %zu is 0x%" PRIx64
                 ", want 0x%" PRIx64 " (%zu wrong, the last at %zu)", r, first, re, got, want,
                 nbad, last);
        return -1;
    }
    /* Inputs stay as they were wherever the output does not cover them. */
    for (size_t i = 0; i < se; i++) {
        int covered = k->inplace && writes && (k->func != BR_FUNC_REDUCESCATTER ||
                                                i / k->count == (size_t)r);
        if (!covered && load(rk->sendbuff + i * es, es) != input_value(k, r, i)) {
            snprintf(sim->err, sizeof(sim->err), "rank %d: input element %zu of %zu changed", r,
                     i, se);
            return -1;
        }
    }
    size_t b = !writes && !k->inplace ? first_other(rk->recvbuff, re * es, GUARD_BYTE) : re * es;
    if (b < re * es) {
        snprintf(sim->err, sizeof(sim->err), "rank %d: byte %zu of a Reduce non-root's output "
                 "was written", r, b);
        return -1;
    }
    uint8_t once = writes || k->algo == BR_ALGO_RING_ONESHOT;
    size_t u = sim->track && sim->n > 1 ? first_other(rk->writes, rk->out_units, once)
                                        : rk->out_units;
    if (u < rk->out_units) {
        snprintf(sim->err, sizeof(sim->err), "rank %d: output unit %zu of %zu written %d times, "
                 "want %d", r, u, rk->out_units, rk->writes[u], once);
        return -1;
    }
    return 0;
}

/* The reduction of every element a rank may need (ReduceScatter: all blocks). */
static uint64_t *reference(const case_t *k, int n)
{
    size_t m = k->func == BR_FUNC_REDUCESCATTER ? k->count * (size_t)n : k->count;
    uint64_t *ref = malloc((m + 1) * sizeof(*ref));
    for (size_t i = 0; is_reduction(k) && i < m; i++) {
        ref[i] = reduced_value(k, n, i);
    }
    return ref;
}

static void sim_free(sim_t *sim)
{
    size_t nf = (size_t)sim->nch * (size_t)sim->n * (size_t)sim->n;
    for (int r = 0; sim->ranks != NULL && r < sim->n; r++) {
        free(sim->ranks[r].a.mem);
        free(sim->ranks[r].b.mem);
        free(sim->ranks[r].scratch.mem);
        free(sim->ranks[r].writes);
    }
    for (size_t f = 0; sim->fifo != NULL && f < nf; f++) {
        if (sim->fifo[f] != NULL) {
            free(sim->fifo[f]->data);
            free(sim->fifo[f]);
        }
    }
    free(sim->fifo);
    free(sim->ranks);
    free(sim->tmp);
}

/* The whole run of one case: 0, or -1 with sim->err. */
static int sim_case(sim_t *sim)
{
    const case_t *k = sim->k;
    int n = sim->n, ret = 0;
    uint64_t *ref = reference(k, n);

    for (int r = 0; r < n && ret == 0; r++) {
        rank_setup(sim, r);
        ret = rank_plan(sim, r);
    }
    if (ret == 0 && n > 1) {
        ret = sim_run(sim);
        ret = ret == 0 ? sim_audit(sim) : ret;
    }
    for (int r = 0; r < n && ret == 0; r++) {
        rank_t *rk = &sim->ranks[r];
        size_t se, re;
        buf_elems(k, n, &se, &re);
        if (n == 1 && k->count > 0 && rk->recvbuff != rk->sendbuff) {
            /* One rank: the executor copies, no schedule runs. */
            memcpy(rk->recvbuff, rk->sendbuff, re * br_type_size(k->type));
        } else if (n > 1 && k->count > 0 && k->algo == BR_ALGO_RING_ONESHOT) {
            gather_fold(sim, rk);
        }
        ret = rank_verify(sim, ref, r);
    }
    free(ref);
    return ret;
}

static void case_name(const case_t *k, int n, char *buf, size_t len)
{
    char red[16] = "", root[16] = "";
    if (is_reduction(k)) {
        snprintf(red, sizeof(red), " %s", k->red == ncclSum ? "sum" : k->red == ncclAvg ? "avg"
                                                                                        : "max");
    }
    if (k->func == BR_FUNC_BROADCAST || k->func == BR_FUNC_REDUCE) {
        snprintf(root, sizeof(root), " root %d", k->root);
    }
    snprintf(buf, len, "%s %s %s%s count %zu chunk %zu B%s, %s, %d ranks (%s), %d channel%s, "
             "%s order", br_func_name(k->func), br_algo_name(k->algo), br_type_name(k->type), red,
             k->count, k->chunk_bytes, root, k->inplace ? "in place" : "out of place", n,
             k->layout, k->nch, k->nch > 1 ? "s" : "", order_names[k->order]);
}

int plan_sim_run_case(const case_t *k, const br_graph_t *g, char *msg, size_t len)
{
    sim_t sim;
    int n = g->nranks;
    size_t se, re, es = br_type_size(k->type);

    memset(&sim, 0, sizeof(sim));
    sim.k = k;
    sim.g = g;
    sim.n = n;
    sim.nch = k->nch;
    sim.esize = is_reduction(k) && k->algo != BR_ALGO_RING_ONESHOT ? es : 1;
    sim.cap = k->chunk_bytes > sim.esize ? k->chunk_bytes : sim.esize;
    buf_elems(k, n, &se, &re);
    /* A write count per output unit, unless that would take more than 64 MiB. */
    sim.track = (double)n * (double)(k->algo == BR_ALGO_RING_ONESHOT ? se * (size_t)n : re) *
                    (double)(sim.esize == 1 ? es : 1) <= 64.0 * 1024 * 1024;
    sim.rng = mix64(k->count * 131 + k->chunk_bytes * 7 + (uint64_t)k->nch + (uint64_t)n * 977);
    sim.ranks = calloc((size_t)n, sizeof(rank_t));
    sim.fifo = calloc((size_t)sim.nch * (size_t)n * (size_t)n, sizeof(fifo_t *));
    sim.tmp = malloc(sim.cap);
    int bad = sim_case(&sim) != 0;
    if (bad) {
        char what[256];
        case_name(k, n, what, sizeof(what));
        snprintf(msg, len, "%s:\n  %s", what, sim.err);
    }
    sim_free(&sim);
    return bad;
}

double plan_sim_est_steps(const case_t *k, int n)
{
    size_t tsize = br_type_size(k->type);
    int moved = !is_reduction(k) || k->algo == BR_ALGO_RING_ONESHOT;
    double units = (double)k->count * (moved ? (double)tsize : 1.0);
    double slice = moved ? (double)k->chunk_bytes : (double)(k->chunk_bytes / tsize);
    double iters = units / (slice < 1 ? 1 : slice) + k->nch, dn = n;

    if (n == 1 || k->count == 0) {
        return 1;
    }
    if (k->algo == BR_ALGO_TREE) {
        return iters * 2 * dn;
    }
    switch (k->algo == BR_ALGO_RING_ONESHOT ? BR_FUNC_ALLGATHER : k->func) {
    case BR_FUNC_ALLREDUCE: return (iters + dn) * (2 * dn - 1);
    case BR_FUNC_ALLGATHER:
    case BR_FUNC_REDUCESCATTER: return iters * dn * dn;
    default: return iters * dn;
    }
}
