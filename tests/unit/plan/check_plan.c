/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "plan": every schedule of core/plan (Ring for every collective, Tree for
 * AllReduce, Broadcast and Reduce, RingOneShot for AllReduce) run in memory, without
 * transports, by a simulator written from plan_sched.h's contract alone: each rank and
 * channel walks its streams step by step, a step runs only when every receive FIFO it
 * names holds a slot and every send FIFO has room (8 slots), and the primitives move and
 * combine real data. Results are compared with a reference computed here, for 1 to 64
 * ranks, 1 to 4 channels, several host layouts, every root kind, in and out of place, and
 * slot sizes that cut the data into many chunks. A schedule that deadlocks, talks to a
 * peer that is not its neighbour, or leaves data in a FIFO fails the case.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "plan.h"

#define MAXR 64
#define GUARD 64
#define GUARD_BYTE 0xa5

/* One FIFO between two ranks of one channel: a queue of up to 8 slots. */
typedef struct {
    unsigned char *data[8];
    size_t bytes[8];
    int head, count;
} fifo_t;

typedef struct {
    int nranks, nch;
    const br_graph_t *g;
    fifo_t *fifo; /* [nch][from][to] */
    char err[512];
} sim_t;

typedef struct {
    br_sched_t s;
    br_plan_layout_t lay;
    size_t base[2], chunk[2];
    int j[2], nsteps[2];
    int active;
} chan_t;

typedef struct {
    br_op_t op;
    unsigned char *send_mem, *recv_mem; /* guard | data | guard */
    unsigned char *sendbuff, *recvbuff;
    size_t send_bytes, recv_bytes;
    unsigned char *scratch; /* RingOneShot */
    chan_t ch[4];
} rank_t;

static fifo_t *fifo_of(sim_t *sim, int c, int from, int to)
{
    return &sim->fifo[((size_t)c * (size_t)sim->nranks + (size_t)from) * (size_t)sim->nranks +
                      (size_t)to];
}

/* Is peer a neighbour of this rank in channel c's ring or tree? */
static int is_link(const sim_t *sim, int c, int me, int peer)
{
    const int *ring = br_graph_ring(sim->g, c), *pos = br_graph_ring_pos(sim->g, c);
    int n = sim->nranks, p = pos[me];
    const br_tree_node_t *t = br_graph_tree(sim->g, c, me);
    if (peer == ring[(p + 1) % n] || peer == ring[(p + n - 1) % n] || peer == t->up) {
        return 1;
    }
    for (int k = 0; k < t->ndown; k++) {
        if (t->down[k] == peer) {
            return 1;
        }
    }
    return 0;
}

/* dst[i] = a[i] (+) b[i] over count elements of the op's type (int32 sum or uint64 max). */
static void combine(unsigned char *dst, const unsigned char *a, const unsigned char *b, size_t count,
                    const br_op_t *op)
{
    for (size_t i = 0; i < count; i++) {
        if (op->type == ncclInt32) {
            int32_t x, y;
            memcpy(&x, a + 4 * i, 4);
            memcpy(&y, b + 4 * i, 4);
            x = (int32_t)((uint32_t)x + (uint32_t)y);
            memcpy(dst + 4 * i, &x, 4);
        } else {
            uint64_t x, y;
            memcpy(&x, a + 8 * i, 8);
            memcpy(&y, b + 8 * i, 8);
            x = x > y ? x : y;
            memcpy(dst + 8 * i, &x, 8);
        }
    }
}

/* One step of stream s of rank r on channel c: 1 ran, 0 blocked, -1 error (sim->err). */
static int sim_step(sim_t *sim, rank_t *rk, int r, int c, int s)
{
    chan_t *ch = &rk->ch[c];
    br_step_t st;
    size_t in_off, out_off, len;
    unsigned char *recv[BR_MAX_TREE_ARITY] = {NULL};

    if (ch->chunk[s] == 0) {
        ch->chunk[s] = br_sched_chunk(&ch->s, ch->base[s], ch->lay.hi, ch->lay.slice);
    }
    br_sched_step(&ch->s, s, ch->j[s], &st);
    if (st.after && ch->nsteps[0] > 0 && ch->base[0] <= ch->base[s]) {
        return 0;
    }
    br_sched_place(&ch->s, &st, ch->base[s], ch->chunk[s], ch->lay.hi, ch->lay.units,
                   br_graph_ring(sim->g, c), &in_off, &out_off, &len);
    size_t bytes = len * ch->lay.esize;
    for (int i = 0; i < st.nrecv; i++) {
        if (!is_link(sim, c, r, st.recv[i])) {
            snprintf(sim->err, sizeof(sim->err), "rank %d channel %d receives from %d, not a link",
                     r, c, st.recv[i]);
            return -1;
        }
        if (fifo_of(sim, c, st.recv[i], r)->count == 0) {
            return 0;
        }
    }
    for (int i = 0; i < st.nsend; i++) {
        if (!is_link(sim, c, r, st.send[i]) || st.send[i] == r) {
            snprintf(sim->err, sizeof(sim->err), "rank %d channel %d sends to %d, not a link", r, c,
                     st.send[i]);
            return -1;
        }
        if (fifo_of(sim, c, r, st.send[i])->count == 8) {
            return 0;
        }
    }
    for (int i = 0; i < st.nrecv; i++) {
        fifo_t *f = fifo_of(sim, c, st.recv[i], r);
        if (f->bytes[f->head] != bytes) {
            snprintf(sim->err, sizeof(sim->err), "rank %d channel %d step %d: %zu bytes from %d, "
                     "expected %zu", r, c, ch->j[s], f->bytes[f->head], st.recv[i], bytes);
            return -1;
        }
        recv[i] = f->data[f->head];
        f->data[f->head] = NULL;
        f->head = (f->head + 1) % 8;
        f->count--;
    }
    const br_op_t *op = &rk->op;
    unsigned char *in = rk->sendbuff != NULL ? rk->sendbuff + in_off * ch->lay.esize : NULL;
    unsigned char *outbase = rk->scratch != NULL ? rk->scratch : rk->recvbuff;
    unsigned char *out = outbase != NULL ? outbase + out_off * ch->lay.esize : NULL;
    unsigned char *data = malloc(bytes + 1);
    uint32_t p = st.prim;

    if (p & BR_PRIM_REDUCE) {
        memcpy(data, in, bytes);
        for (int i = 0; i < st.nrecv; i++) {
            combine(data, data, recv[i], len, op);
        }
    } else if (p & BR_PRIM_RECV) {
        memcpy(data, recv[0], bytes);
    } else if (p & BR_PRIM_FROM_OUTPUT) {
        memcpy(data, out, bytes);
    } else {
        if ((p & BR_PRIM_LOCAL) && out != in) {
            memmove(out, in, bytes);
        }
        memcpy(data, in, bytes);
    }
    if ((p & BR_PRIM_COPY) && bytes > 0) {
        memcpy(out, data, bytes);
    }
    for (int i = 0; i < st.nsend; i++) {
        fifo_t *f = fifo_of(sim, c, r, st.send[i]);
        int slot = (f->head + f->count) % 8;
        f->data[slot] = malloc(bytes + 1);
        memcpy(f->data[slot], data, bytes);
        f->bytes[slot] = bytes;
        f->count++;
    }
    for (int i = 0; i < st.nrecv; i++) {
        free(recv[i]);
    }
    free(data);
    if (++ch->j[s] == ch->nsteps[s]) {
        ch->j[s] = 0;
        ch->base[s] += br_sched_advance(&ch->s, ch->chunk[s]);
        ch->chunk[s] = 0;
    }
    return 1;
}

static int stream_done(const chan_t *ch, int s)
{
    return ch->nsteps[s] == 0 || ch->base[s] >= ch->lay.hi;
}

/* Run every rank's channels to the end. Returns 0, or -1 with sim->err. */
static int sim_run(sim_t *sim, rank_t *ranks)
{
    for (;;) {
        int progress = 0, pending = 0;
        for (int r = 0; r < sim->nranks; r++) {
            for (int c = 0; c < sim->nch; c++) {
                chan_t *ch = &ranks[r].ch[c];
                for (int s = 0; ch->active && s < 2; s++) {
                    while (!stream_done(ch, s)) {
                        int ret = sim_step(sim, &ranks[r], r, c, s);
                        if (ret < 0) {
                            return -1;
                        }
                        if (ret == 0) {
                            break;
                        }
                        progress = 1;
                    }
                    pending += !stream_done(ch, s);
                }
            }
        }
        if (!pending) {
            return 0;
        }
        if (!progress) {
            for (int r = 0; r < sim->nranks; r++) {
                for (int c = 0; c < sim->nch; c++) {
                    chan_t *ch = &ranks[r].ch[c];
                    for (int s = 0; ch->active && s < 2; s++) {
                        if (!stream_done(ch, s)) {
                            br_step_t st;
                            br_sched_step(&ch->s, s, ch->j[s], &st);
                            snprintf(sim->err, sizeof(sim->err),
                                     "deadlock: rank %d channel %d stream %d step %d (prim 0x%x, "
                                     "recv from %d, send to %d) at unit %zu of [%zu, %zu)",
                                     r, c, s, ch->j[s], st.prim, st.recv[0], st.send[0],
                                     ch->base[s], ch->lay.lo, ch->lay.hi);
                            return -1;
                        }
                    }
                }
            }
        }
    }
}

/* A case: collective, algorithm, size, layout of the data. */
typedef struct {
    br_func_t func;
    int algo;
    ncclDataType_t type;
    size_t count;
    size_t chunk_bytes;
    int root, inplace, nch;
} case_t;

static int32_t in_i32(int r, size_t i)
{
    return (int32_t)((i * 2654435761u + (size_t)r * 40503u) % 2001) - 1000;
}

static uint64_t in_u64(int r, size_t i)
{
    return (uint64_t)(i * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)r * 0xc2b2ae3d27d4eb4full);
}

/* Rank r's input element i of the call, written into dst. */
static void input_elem(const case_t *k, int r, size_t i, unsigned char *dst)
{
    if (k->type == ncclInt32) {
        int32_t v = in_i32(r, i);
        memcpy(dst, &v, 4);
    } else {
        uint64_t v = in_u64(r, i);
        memcpy(dst, &v, 8);
    }
}

static void reduced_elem(const case_t *k, int n, size_t i, unsigned char *dst)
{
    if (k->type == ncclInt32) {
        uint32_t sum = 0;
        for (int r = 0; r < n; r++) {
            sum += (uint32_t)in_i32(r, i);
        }
        memcpy(dst, &sum, 4);
    } else {
        uint64_t m = 0;
        for (int r = 0; r < n; r++) {
            m = in_u64(r, i) > m ? in_u64(r, i) : m;
        }
        memcpy(dst, &m, 8);
    }
}

/* Sizes of a rank's buffers (in elements) for the call. */
static void buf_elems(const case_t *k, int n, size_t *send_p, size_t *recv_p)
{
    switch (k->func) {
    case BR_FUNC_ALLGATHER: *send_p = k->count; *recv_p = k->count * (size_t)n; break;
    case BR_FUNC_REDUCESCATTER: *send_p = k->count * (size_t)n; *recv_p = k->count; break;
    default: *send_p = *recv_p = k->count; break;
    }
}

static void rank_setup(const case_t *k, int n, int r, rank_t *rk)
{
    size_t es = br_type_size(k->type), se, re;
    buf_elems(k, n, &se, &re);
    rk->send_bytes = se * es;
    rk->recv_bytes = re * es;
    rk->recv_mem = malloc(rk->recv_bytes + 2 * GUARD);
    memset(rk->recv_mem, GUARD_BYTE, rk->recv_bytes + 2 * GUARD);
    rk->recvbuff = rk->recv_mem + GUARD;
    if (k->inplace) {
        /* NCCL's in-place layouts: AllGather's input is the rank's block of the output,
         * ReduceScatter's output the rank's block of the input. */
        rk->send_mem = NULL;
        if (k->func == BR_FUNC_REDUCESCATTER) {
            rk->recv_mem = realloc(rk->recv_mem, rk->send_bytes + 2 * GUARD);
            memset(rk->recv_mem, GUARD_BYTE, rk->send_bytes + 2 * GUARD);
            rk->sendbuff = rk->recv_mem + GUARD;
            rk->recvbuff = rk->sendbuff + (size_t)r * rk->recv_bytes;
        } else if (k->func == BR_FUNC_ALLGATHER) {
            rk->sendbuff = rk->recvbuff + (size_t)r * rk->send_bytes;
        } else {
            rk->sendbuff = rk->recvbuff;
        }
    } else {
        rk->send_mem = malloc(rk->send_bytes + 2 * GUARD);
        memset(rk->send_mem, GUARD_BYTE, rk->send_bytes + 2 * GUARD);
        rk->sendbuff = rk->send_mem + GUARD;
    }
    for (size_t i = 0; i < se; i++) {
        input_elem(k, r, i, rk->sendbuff + i * es);
    }
    memset(&rk->op, 0, sizeof(rk->op));
    rk->op.func = k->func;
    rk->op.count = k->count;
    rk->op.type = k->type;
    br_redop_builtin(&rk->op.redop, k->type == ncclInt32 ? ncclSum : ncclMax, k->type, n);
    rk->op.root = k->root;
    rk->op.algo = k->algo;
    rk->op.proto = BR_PROTO_SIMPLE;
    rk->op.nchannels = k->algo == BR_ALGO_RING_ONESHOT ? 1 : k->nch;
    rk->op.chunk_bytes = k->chunk_bytes;
    rk->op.sendbuff = rk->sendbuff;
    rk->op.recvbuff = rk->recvbuff;
    rk->scratch = k->algo == BR_ALGO_RING_ONESHOT ? calloc((size_t)n, rk->send_bytes + 1) : NULL;
}

/* Check rank r's output (and guards, and an unchanged input). Returns 0 or writes err. */
static int rank_verify(const case_t *k, int n, int r, const rank_t *rk, char *err, size_t len)
{
    size_t es = br_type_size(k->type), se, re;
    unsigned char want[8], got[8];
    buf_elems(k, n, &se, &re);
    size_t total = k->inplace && k->func == BR_FUNC_REDUCESCATTER ? rk->send_bytes : rk->recv_bytes;
    for (size_t g = 0; g < GUARD; g++) {
        if (rk->recv_mem[g] != GUARD_BYTE || rk->recv_mem[GUARD + total + g] != GUARD_BYTE) {
            snprintf(err, len, "rank %d: a guard byte around the output changed", r);
            return 1;
        }
    }
    int writes = k->func != BR_FUNC_REDUCE || r == k->root;
    for (size_t i = 0; i < re && writes; i++) {
        switch (k->func) {
        case BR_FUNC_ALLGATHER: input_elem(k, (int)(i / k->count), i % k->count, want); break;
        case BR_FUNC_BROADCAST: input_elem(k, k->root, i, want); break;
        case BR_FUNC_REDUCESCATTER: reduced_elem(k, n, (size_t)r * k->count + i, want); break;
        default: reduced_elem(k, n, i, want); break;
        }
        memcpy(got, rk->recvbuff + i * es, es);
        if (memcmp(want, got, es) != 0) {
            snprintf(err, len, "rank %d: output element %zu of %zu is wrong", r, i, re);
            return 1;
        }
    }
    /* Inputs stay as they were (out of place; in place where the output does not cover
     * them: a Reduce's non-roots). */
    int input_kept = !k->inplace || (k->func == BR_FUNC_REDUCE && r != k->root);
    for (size_t i = 0; i < se && input_kept; i++) {
        input_elem(k, r, i, want);
        if (memcmp(want, rk->sendbuff + i * es, es) != 0) {
            snprintf(err, len, "rank %d: input element %zu changed", r, i);
            return 1;
        }
    }
    if (!writes && !k->inplace) {
        for (size_t b = 0; b < rk->recv_bytes; b++) {
            if (rk->recvbuff[b] != GUARD_BYTE) {
                snprintf(err, len, "rank %d: a Reduce non-root's output was written", r);
                return 1;
            }
        }
    }
    return 0;
}

/* RingOneShot's last step: each rank folds the gathered inputs. */
static void gather_fold(const case_t *k, int n, rank_t *rk)
{
    size_t es = br_type_size(k->type), bytes = k->count * es;
    memcpy(rk->recvbuff, rk->scratch, bytes);
    for (int r = 1; r < n; r++) {
        combine(rk->recvbuff, rk->recvbuff, rk->scratch + (size_t)r * bytes, k->count, &rk->op);
    }
}

static void case_name(const case_t *k, int n, const char *layout, char *buf, size_t len)
{
    snprintf(buf, len, "%s %s %s count %zu chunk %zu root %d %s, %d ranks (%s), %d channels",
             br_func_name(k->func), br_algo_name(k->algo), br_type_name(k->type), k->count,
             k->chunk_bytes, k->root, k->inplace ? "in place" : "out of place", n, layout, k->nch);
}

/* Run one case; returns 0 or 1 with msg. */
static int run_case(const case_t *k, const br_graph_t *g, const char *layout, char *msg,
                    size_t len)
{
    int n = g->nranks;
    rank_t *ranks = calloc((size_t)n, sizeof(*ranks));
    sim_t sim = {.nranks = n, .nch = k->algo == BR_ALGO_RING_ONESHOT ? 1 : k->nch, .g = g};
    char what[256], err[512] = "";
    int bad = 0;

    sim.fifo = calloc((size_t)sim.nch * (size_t)n * (size_t)n, sizeof(fifo_t));
    for (int r = 0; r < n; r++) {
        rank_setup(k, n, r, &ranks[r]);
        for (int c = 0; c < sim.nch && n > 1; c++) {
            chan_t *ch = &ranks[r].ch[c];
            br_plan_layout(&ranks[r].op, n, c, &ch->lay);
            br_plan_sched(g, &ranks[r].op, c, r, &ch->s);
            ch->active = ch->lay.lo < ch->lay.hi;
            for (int s = 0; s < 2; s++) {
                ch->base[s] = ch->lay.lo;
                ch->nsteps[s] = s < br_sched_nstreams(&ch->s) ? br_sched_nsteps(&ch->s, s) : 0;
            }
        }
    }
    if (n > 1 && sim_run(&sim, ranks) != 0) {
        snprintf(err, sizeof(err), "%s", sim.err);
        bad = 1;
    }
    for (size_t f = 0; !bad && f < (size_t)sim.nch * (size_t)n * (size_t)n; f++) {
        if (sim.fifo[f].count != 0) {
            snprintf(err, sizeof(err), "a FIFO still holds %d slots at the end", sim.fifo[f].count);
            bad = 1;
        }
    }
    for (int r = 0; r < n; r++) {
        if (!bad && n == 1) { /* a local copy, as the executor does */
            if (ranks[r].recvbuff != ranks[r].sendbuff) {
                memcpy(ranks[r].recvbuff, ranks[r].sendbuff, ranks[r].recv_bytes);
            }
        } else if (!bad && k->algo == BR_ALGO_RING_ONESHOT) {
            gather_fold(k, n, &ranks[r]);
        }
        if (!bad) {
            bad = rank_verify(k, n, r, &ranks[r], err, sizeof(err));
        }
    }
    if (bad) {
        case_name(k, n, layout, what, sizeof(what));
        snprintf(msg, len, "%s: %s", what, err);
    }
    for (int r = 0; r < n; r++) {
        free(ranks[r].send_mem);
        free(ranks[r].recv_mem);
        free(ranks[r].scratch);
    }
    for (size_t f = 0; f < (size_t)sim.nch * (size_t)n * (size_t)n; f++) {
        for (int s = 0; s < 8; s++) {
            free(sim.fifo[f].data[s]);
        }
    }
    free(sim.fifo);
    free(ranks);
    return bad;
}

static const int rank_counts[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 31, 32, 33, 64};
#define NCOUNTS ((int)(sizeof(rank_counts) / sizeof(rank_counts[0])))
enum { L_ONE, L_OWN, L_PAIRS, L_RR3, NLAYOUTS };
static const char *const layouts[NLAYOUTS] = {"one host", "a host each", "two per host",
                                              "round-robin over 3 hosts"};

/* (count, chunk bytes): one element per slot, a few, a slot per channel share, many. */
static const size_t sizes[][2] = {{1, 4}, {7, 8}, {64, 64}, {1000, 64}, {4097, 1024}};
#define NSIZES ((int)(sizeof(sizes) / sizeof(sizes[0])))

START_TEST(test_schedules)
{
    int n = rank_counts[_i / NLAYOUTS], layout = _i % NLAYOUTS;
    uint64_t hosts[MAXR];
    br_graph_t *g[5] = {NULL};
    static const br_func_t funcs[] = {BR_FUNC_ALLREDUCE, BR_FUNC_BROADCAST, BR_FUNC_REDUCE,
                                      BR_FUNC_ALLGATHER, BR_FUNC_REDUCESCATTER};
    char msg[1024];
    int ncases = 0, idx = 0;

    for (int r = 0; r < n; r++) {
        hosts[r] = layout == L_ONE ? 0 : layout == L_OWN ? (uint64_t)r
                 : layout == L_PAIRS ? (uint64_t)(r / 2) : (uint64_t)(r % 3);
    }
    for (int nch = 1; nch <= 4; nch++) {
        ck_assert_int_eq(br_graph_build(n, hosts, nch, &g[nch]), ncclSuccess);
    }
    for (int f = 0; f < 5; f++) {
        for (int algo = 0; algo < BR_NUM_ALGOS; algo++) {
            int tree_ok = f < 3, ok = algo == BR_ALGO_RING || (algo == BR_ALGO_TREE && tree_ok) ||
                                      (algo == BR_ALGO_RING_ONESHOT && f == 0);
            if (!ok) {
                continue;
            }
            int roots[3] = {0, n - 1, n / 2}, nroots = funcs[f] == BR_FUNC_BROADCAST ||
                                                       funcs[f] == BR_FUNC_REDUCE ? 3 : 1;
            for (int ri = 0; ri < nroots; ri++) {
                for (int sz = 0; sz < NSIZES; sz++) {
                    for (int inplace = 0; inplace < 2; inplace++, idx++) {
                        case_t k = {funcs[f], algo, idx % 3 == 2 ? ncclUint64 : ncclInt32,
                                    sizes[sz][0], sizes[sz][1], roots[ri], inplace, 1 + idx % 4};
                        if (k.type == ncclUint64 && k.func != BR_FUNC_ALLREDUCE &&
                            k.func != BR_FUNC_REDUCE && k.func != BR_FUNC_REDUCESCATTER) {
                            k.type = ncclInt32; /* max matters only where data combines */
                        }
                        if (k.chunk_bytes < br_type_size(k.type)) {
                            k.chunk_bytes = br_type_size(k.type);
                        }
                        if (algo == BR_ALGO_RING_ONESHOT) {
                            k.chunk_bytes = k.count * br_type_size(k.type); /* one slot */
                        }
                        int bad = run_case(&k, g[k.nch], layouts[layout], msg, sizeof(msg));
                        ck_assert_msg(!bad, "%s", msg);
                        ncases++;
                    }
                }
            }
        }
    }
    for (int nch = 1; nch <= 4; nch++) {
        br_graph_free(g[nch]);
    }
    ck_assert_int_gt(ncases, 0);
}
END_TEST

/* The step counts plan_sched.h documents, and the peers a step names. */
START_TEST(test_shapes)
{
    uint64_t hosts[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    br_graph_t *g = NULL;
    br_op_t op;
    br_sched_t s;
    br_step_t st;

    ck_assert_int_eq(br_graph_build(8, hosts, 2, &g), ncclSuccess);
    memset(&op, 0, sizeof(op));
    op.count = 100;
    op.type = ncclFloat32;
    op.algo = BR_ALGO_RING;
    static const struct {
        br_func_t f;
        int steps;
    } ring[] = {{BR_FUNC_ALLREDUCE, 15}, {BR_FUNC_ALLGATHER, 8}, {BR_FUNC_REDUCESCATTER, 8},
                {BR_FUNC_BROADCAST, 1}, {BR_FUNC_REDUCE, 1}};
    for (size_t i = 0; i < sizeof(ring) / sizeof(ring[0]); i++) {
        op.func = ring[i].f;
        br_plan_sched(g, &op, 0, 3, &s);
        ck_assert_int_eq(br_sched_nstreams(&s), 1);
        ck_assert_int_eq(br_sched_nsteps(&s, 0), ring[i].steps);
    }
    /* Ring AllReduce: step 0 sends, step n-1 completes the reduction (post) and step 2n-2
     * only receives; every receive is from the previous rank, every send to the next. */
    op.func = BR_FUNC_ALLREDUCE;
    br_plan_sched(g, &op, 0, 3, &s);
    br_sched_step(&s, 0, 0, &st);
    ck_assert_uint_eq(st.prim, BR_PRIM_SEND);
    ck_assert_int_eq(st.send[0], s.next);
    br_sched_step(&s, 0, 7, &st);
    ck_assert(st.prim & BR_PRIM_POST);
    ck_assert_int_eq(st.chunk, s.pos);
    br_sched_step(&s, 0, 14, &st);
    ck_assert_uint_eq(st.prim, BR_PRIM_RECV | BR_PRIM_COPY);
    ck_assert_int_eq(st.recv[0], s.prev);
    /* Tree AllReduce at the root (rank 0, one child): up completes, down sends after it. */
    op.algo = BR_ALGO_TREE;
    br_plan_sched(g, &op, 0, 0, &s);
    ck_assert_int_eq(br_sched_nstreams(&s), 2);
    br_sched_step(&s, 0, 0, &st);
    ck_assert_uint_eq(st.prim, BR_PRIM_RECV | BR_PRIM_REDUCE | BR_PRIM_COPY | BR_PRIM_POST);
    ck_assert_int_eq(st.nrecv, 1);
    br_sched_step(&s, 1, 0, &st);
    ck_assert_uint_eq(st.prim, BR_PRIM_SEND | BR_PRIM_FROM_OUTPUT);
    ck_assert_int_eq(st.after, 1);
    /* A leaf (odd node, tree 0): sends up, receives down. */
    br_plan_sched(g, &op, 0, 5, &s);
    br_sched_step(&s, 0, 0, &st);
    ck_assert_uint_eq(st.prim, BR_PRIM_SEND);
    ck_assert_int_eq(st.send[0], br_graph_tree(g, 0, 5)->up);
    br_sched_step(&s, 1, 0, &st);
    ck_assert_uint_eq(st.prim, BR_PRIM_RECV | BR_PRIM_COPY);
    /* Broadcast from a leaf: only the path to the tree's root climbs. */
    op.func = BR_FUNC_BROADCAST;
    op.root = 5;
    br_plan_sched(g, &op, 0, 5, &s);
    ck_assert_int_eq(br_sched_nsteps(&s, 0), 1);
    ck_assert_int_eq(br_sched_nsteps(&s, 1), 0);
    br_plan_sched(g, &op, 0, 1, &s); /* off the path: nothing up, receives down */
    ck_assert_int_eq(br_sched_nsteps(&s, 0), 0);
    ck_assert_int_eq(br_sched_nsteps(&s, 1), 1);
    br_graph_free(g);
}
END_TEST

static Suite *plan_suite(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("schedules");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_schedules, 0, NCOUNTS * NLAYOUTS);
    tcase_add_test(tc, test_shapes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(plan_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
