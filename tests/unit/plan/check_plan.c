/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "plan": every schedule of core/plan (Ring for every collective, Tree for
 * AllReduce, Broadcast and Reduce, RingOneShot for AllReduce) run in memory, without
 * transports, by the simulator of plan_sim.c (what makes a case fail is said there), and
 * the shapes plan_sched.h documents checked link by link. Cases run one after the other in
 * the test's process; every failure is printed and the test fails with the first.
 *
 * The matrix (rank counts x host layouts x collective and algorithm as loop tests; roots,
 * counts, slot sizes, in and out of place, 1 to 4 channels, data types and reductions, three
 * step orders inside) runs every variant of a cheap case and a rotating sample of the costly
 * ones; BRAID_PLAN_FULL=1 runs all of them. Sanitizer builds sample harder, the cheap cases
 * too.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan_sim.h"

#define MAX_REPORTS 20 /* failures printed per loop test */

#ifdef BR_PLAN_TEST_SANITIZED
#define STEP_BUDGET 4e3 /* simulated steps per group of variants before sampling */
/* Variants per group however cheap: a case's setup and checks cost about n x count element
 * visits whatever its steps, and at 16 to 64 ranks the cheap groups' many cases took most of
 * the sanitized run. Two variants in turn are one in place and one out of place, and across
 * a loop test's groups every channel count and step order still runs. */
#define MAX_TAKE 2
#define SANITIZED 1
#else
#define STEP_BUDGET 2.5e4
#define MAX_TAKE (2 * MAXCH)
#define SANITIZED 0
#endif

/* ---- the matrix ---- */

static const int rank_counts[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 31, 32, 33, 64};
#define NRANKCOUNTS ((int)(sizeof(rank_counts) / sizeof(rank_counts[0])))

enum { L_ONE, L_OWN, L_PAIRS, L_RR3, NLAYOUTS };
static const char *const layout_names[NLAYOUTS] = {"one host", "a host each", "two per host",
                                                   "round-robin over 3 hosts"};

static void layout_hosts(int layout, int n, uint64_t *hosts)
{
    for (int r = 0; r < n; r++) {
        hosts[r] = layout == L_ONE ? 0 : layout == L_OWN ? (uint64_t)r
                   : layout == L_PAIRS ? (uint64_t)(r / 2) : (uint64_t)(r % 3);
    }
}

static const struct {
    br_func_t func;
    int algo;
} combos[] = {
    {BR_FUNC_ALLREDUCE, BR_ALGO_RING}, {BR_FUNC_ALLREDUCE, BR_ALGO_TREE},
    {BR_FUNC_ALLREDUCE, BR_ALGO_RING_ONESHOT}, {BR_FUNC_BROADCAST, BR_ALGO_RING},
    {BR_FUNC_BROADCAST, BR_ALGO_TREE}, {BR_FUNC_REDUCE, BR_ALGO_RING},
    {BR_FUNC_REDUCE, BR_ALGO_TREE}, {BR_FUNC_ALLGATHER, BR_ALGO_RING},
    {BR_FUNC_REDUCESCATTER, BR_ALGO_RING},
};
#define NCOMBOS ((int)(sizeof(combos) / sizeof(combos[0])))

static const size_t counts[] = {0, 1, 7, 64, 1000, 4097};
static const size_t chunk_sizes[] = {4, 64, 1024};
#define NCOUNTS ((int)(sizeof(counts) / sizeof(counts[0])))
#define NCHUNKS ((int)(sizeof(chunk_sizes) / sizeof(chunk_sizes[0])))

/* Data types and reductions, in turn (max only on uint64, average only on uint32). */
static const struct {
    ncclDataType_t type;
    ncclRedOp_t red;
} dtypes[] = {{ncclInt32, ncclSum}, {ncclUint32, ncclAvg}, {ncclUint64, ncclSum},
              {ncclInt32, ncclSum}, {ncclUint64, ncclMax}};
#define NDTYPES ((int)(sizeof(dtypes) / sizeof(dtypes[0])))

/* Is the environment variable set to something other than 0? */
static int env_on(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' && v[0] != '0';
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Loop test i: rank count, host layout, collective and algorithm; inside, every root, count,
 * slot size, placement and channel count (sampled where costly). */
START_TEST(test_schedules)
{
    int combo = _i % NCOMBOS, layout = (_i / NCOMBOS) % NLAYOUTS;
    int n = rank_counts[_i / NCOMBOS / NLAYOUTS], full = env_on("BRAID_PLAN_FULL");
    br_func_t func = combos[combo].func;
    int algo = combos[combo].algo, oneshot = algo == BR_ALGO_RING_ONESHOT;
    int rooted = func == BR_FUNC_BROADCAST || func == BR_FUNC_REDUCE;
    int roots[3] = {0, n - 1, n / 2}, nroots = rooted ? 3 : 1;
    int nvariants = oneshot ? 2 : 2 * MAXCH, group = 0, ncases = 0, nfail = 0;
    uint64_t hosts[MAXR];
    br_graph_t *g[MAXCH + 1] = {NULL};
    char msg[3072], first[3072] = "";
    double t0 = now_s(), steps = 0;

    layout_hosts(layout, n, hosts);
    for (int nch = 1; nch <= MAXCH; nch++) {
        ck_assert_int_eq(br_graph_build(n, hosts, nch, &g[nch]), ncclSuccess);
    }
    for (int ri = 0; ri < nroots; ri++) {
        if ((ri == 1 && roots[1] == roots[0]) || (ri == 2 && (roots[2] == roots[0] || roots[2] == roots[1]))) {
            continue;
        }
        for (int ci = 0; ci < NCOUNTS; ci++) {
            for (int si = 0; si < NCHUNKS && (si == 0 || counts[ci] > 0); si++, group++) {
                int d = (group + _i) % NDTYPES;
                case_t k = {func, algo, dtypes[d].type, dtypes[d].red, counts[ci], chunk_sizes[si],
                            roots[ri], 0, 1, 0, layout_names[layout]};
                if (!br_func_is_reduction(func) && k.type == ncclUint32) {
                    k.type = ncclInt32;
                }
                k.nch = oneshot ? 1 : MAXCH;
                double est = plan_sim_est_steps(&k, n);
                /* Every variant of a cheap group; a rotating few of a costly one. */
                int take = full || est * nvariants <= STEP_BUDGET ? nvariants
                           : est <= STEP_BUDGET / 2 ? (int)(STEP_BUDGET / est) : est <= 4 * STEP_BUDGET;
                take = full || take < MAX_TAKE ? take : MAX_TAKE;
                for (int t = 0; t < take; t++) {
                    int v = (group * 3 + t) % nvariants;
                    k.inplace = v % 2;
                    k.nch = oneshot ? 1 : 1 + v / 2;
                    k.order = (group + t) % NORDERS;
                    ncases++;
                    steps += plan_sim_est_steps(&k, n);
                    if (plan_sim_run_case(&k, g[k.nch], msg, sizeof(msg)) != 0) {
                        if (nfail++ < MAX_REPORTS) {
                            fprintf(stderr, "check_plan: FAIL %s\n", msg);
                        }
                        if (first[0] == '\0') {
                            snprintf(first, sizeof(first), "%s", msg);
                        }
                    }
                }
            }
        }
    }
    for (int nch = 1; nch <= MAXCH; nch++) {
        br_graph_free(g[nch]);
    }
    if (env_on("BRAID_PLAN_VERBOSE")) {
        fprintf(stderr, "check_plan: %s %s, %d ranks (%s): %d cases, ~%.3g steps, %.2f s\n",
                br_func_name(func), br_algo_name(algo), n, layout_names[layout], ncases, steps,
                now_s() - t0);
    }
    ck_assert_msg(nfail == 0, "%d of %d cases failed; the first: %s", nfail, ncases, first);
    ck_assert_int_gt(ncases, 0);
}
END_TEST

/* ---- the shapes plan_sched.h documents ---- */

static uint64_t bit(int i)
{
    return (uint64_t)1 << i;
}

static uint64_t all_bits(int n)
{
    return n == 64 ? ~0ull : bit(n) - 1;
}

/* Ring, per rank and channel: steps per iteration, peers, which chunks each step moves and
 * which steps write the output or complete a reduction. */
static void check_ring_shape(const br_graph_t *g, int c, int r, br_func_t func, int root)
{
    int n = g->nranks, pos = br_graph_ring_pos(g, c)[r];
    const int *ring = br_graph_ring(g, c);
    br_op_t op = {.func = func, .count = 1000, .type = ncclInt32, .root = root,
                  .algo = BR_ALGO_RING, .nchannels = 1, .chunk_bytes = 64};
    br_sched_t s;
    br_step_t st;
    uint64_t head = 0, tail = 0, copies = 0;
    int want = func == BR_FUNC_ALLREDUCE ? 2 * n - 1
               : func == BR_FUNC_ALLGATHER || func == BR_FUNC_REDUCESCATTER ? n : 1;

    br_plan_sched(g, &op, c, r, &s);
    ck_assert_int_eq(br_sched_nstreams(&s), 1);
    ck_assert_int_eq(br_sched_nsteps(&s, 0), want);
    for (int j = 0; j < want; j++) {
        br_sched_step(&s, 0, j, &st);
        ck_assert_int_le(st.nrecv, 1);
        ck_assert_int_le(st.nsend, 1);
        ck_assert(st.nrecv == 0 || st.recv[0] == ring[(pos + n - 1) % n]);
        ck_assert(st.nsend == 0 || st.send[0] == ring[(pos + 1) % n]);
        ck_assert_int_eq(st.after, 0);
        ck_assert(st.chunk >= 0 && st.chunk < n);
        /* AllReduce: steps 0..n-1 reduce-scatter every chunk, n-1..2n-2 gather every one. */
        head |= j < n ? bit(st.chunk) : 0;
        tail |= j >= want - n ? bit(st.chunk) : 0;
        copies += (st.prim & (BR_PRIM_COPY | BR_PRIM_LOCAL)) != 0;
        if ((st.prim & BR_PRIM_POST) && func != BR_FUNC_REDUCE) {
            ck_assert_int_eq(st.chunk, pos); /* the rank completes its own chunk */
        }
    }
    br_sched_step(&s, 0, 0, &st);
    int first_recv = st.nrecv;
    br_sched_step(&s, 0, want - 1, &st);
    if (func == BR_FUNC_ALLREDUCE || func == BR_FUNC_ALLGATHER || func == BR_FUNC_REDUCESCATTER) {
        ck_assert_uint_eq(head, all_bits(n));
        ck_assert_uint_eq(tail, all_bits(n));
        ck_assert_int_eq(first_recv, 0); /* an iteration starts by sending */
        ck_assert_int_eq(st.nsend, 0);   /* and ends by receiving */
        ck_assert_uint_eq(copies, func == BR_FUNC_REDUCESCATTER ? 1 : (uint64_t)n);
    } else {
        int rel = (pos - br_graph_ring_pos(g, c)[root] + n) % n;
        /* Broadcast: the root only sends, its predecessor only receives; Reduce: the root
         * only receives, its successor only sends. */
        int src = func == BR_FUNC_BROADCAST ? 0 : 1, sink = func == BR_FUNC_BROADCAST ? n - 1 : 0;
        ck_assert_int_eq(st.nrecv == 0, rel == src);
        ck_assert_int_eq(st.nsend == 0, rel == sink);
        ck_assert_uint_eq(copies, func == BR_FUNC_BROADCAST || r == root);
    }
}

/* Does the step name exactly these peers (any order)? */
static int same_peers(const int32_t *peers, int npeers, const int *want, int nwant)
{
    int m = 0;
    for (int i = 0; i < nwant; i++) {
        for (int q = 0; want[i] >= 0 && q < npeers; q++) {
            m += peers[q] == want[i];
        }
    }
    return m == npeers && npeers == nwant;
}

/* Tree, per rank and channel: AllReduce up and down its links; how many ranks work in each
 * stream of a Broadcast or Reduce from `root`. */
static void check_tree_shape(const br_graph_t *g, int c, int root)
{
    int n = g->nranks, level = 0, busy[2][2] = {{0, 0}, {0, 0}};
    br_op_t op = {.func = BR_FUNC_ALLREDUCE, .count = 1000, .type = ncclInt32, .root = root,
                  .algo = BR_ALGO_TREE, .nchannels = 1, .chunk_bytes = 64};
    br_sched_t s;
    br_step_t st;

    for (int x = br_graph_tree(g, c, root)->up; x >= 0; x = br_graph_tree(g, c, x)->up) {
        level++;
    }
    for (int r = 0; r < n; r++) {
        const br_tree_node_t *t = br_graph_tree(g, c, r);
        op.func = BR_FUNC_ALLREDUCE;
        br_plan_sched(g, &op, c, r, &s);
        ck_assert_int_eq(br_sched_nstreams(&s), 2);
        ck_assert_int_eq(br_sched_nsteps(&s, 0), 1);
        ck_assert_int_eq(br_sched_nsteps(&s, 1), 1);
        br_sched_step(&s, 0, 0, &st);
        ck_assert(same_peers(st.recv, st.nrecv, t->down, t->ndown));
        ck_assert(same_peers(st.send, st.nsend, &t->up, t->up >= 0));
        ck_assert_int_eq((st.prim & BR_PRIM_POST) != 0, t->up < 0);
        br_sched_step(&s, 1, 0, &st);
        ck_assert(same_peers(st.recv, st.nrecv, &t->up, t->up >= 0));
        ck_assert(same_peers(st.send, st.nsend, t->down, t->ndown));
        ck_assert_int_eq(st.after, t->up < 0); /* the root sends what stream 0 wrote */
        for (int f = 0; f < 2; f++) {
            op.func = f == 0 ? BR_FUNC_BROADCAST : BR_FUNC_REDUCE;
            br_plan_sched(g, &op, c, r, &s);
            busy[f][0] += br_sched_nsteps(&s, 0) > 0;
            busy[f][1] += br_sched_nsteps(&s, 1) > 0;
        }
    }
    /* Broadcast climbs from the root to the top (level + 1 ranks, none when the root is the
     * top); Reduce works up everywhere, then down the path from the top to the root. */
    ck_assert_int_eq(busy[0][0], level > 0 ? level + 1 : 0);
    ck_assert_int_eq(busy[1][0], n);
    ck_assert_int_eq(busy[1][1], level);
}

START_TEST(test_shapes)
{
    int n = rank_counts[_i / NLAYOUTS];
    uint64_t hosts[MAXR];
    br_graph_t *g = NULL;
    static const br_func_t funcs[] = {BR_FUNC_ALLREDUCE, BR_FUNC_ALLGATHER,
                                      BR_FUNC_REDUCESCATTER, BR_FUNC_BROADCAST, BR_FUNC_REDUCE};

    if (n < 2) {
        return;
    }
    layout_hosts(_i % NLAYOUTS, n, hosts);
    ck_assert_int_eq(br_graph_build(n, hosts, MAXCH, &g), ncclSuccess);
    for (int c = 0; c < MAXCH; c++) {
        int roots[3] = {0, n / 2, n - 1};
        for (int ri = 0; ri < 3; ri++) {
            check_tree_shape(g, c, roots[ri]);
            for (int r = 0; r < n; r++) {
                for (size_t f = 0; f < sizeof(funcs) / sizeof(funcs[0]); f++) {
                    /* Sanitizer builds: the unrooted collectives (whose shape must not
                     * depend on the root) from one root per channel, in turn. */
                    int rooted = funcs[f] == BR_FUNC_BROADCAST || funcs[f] == BR_FUNC_REDUCE;
                    if (rooted || !SANITIZED || ri == c % 3) {
                        check_ring_shape(g, c, r, funcs[f], roots[ri]);
                    }
                }
            }
        }
    }
    br_graph_free(g);
}
END_TEST

/* Channel shares: contiguous, covering, cut on 64-unit boundaries. */
START_TEST(test_channel_range)
{
    static const size_t units[] = {0, 1, 63, 64, 65, 127, 1000, 4097, 1 << 20, (1 << 20) + 3};
    for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
        for (int nch = 1; nch <= BR_MAX_CHANNELS; nch++) {
            size_t at = 0, lo, hi;
            for (int c = 0; c < nch; c++) {
                br_plan_channel_range(units[u], nch, c, &lo, &hi);
                ck_assert(lo <= hi && hi <= units[u]);
                ck_assert(lo == at || lo == hi);
                ck_assert(hi == units[u] || hi % 64 == 0);
                at = hi > at ? hi : at;
            }
            ck_assert_uint_eq(at, units[u]);
        }
    }
}
END_TEST

/* ---- CollNet in the cost model ---- */

/* A plan for 4 ranks, two on each of two hosts, with a collnet that reduces float32 and
 * int32 with sum, prod, max and min when `collnet` is set, and has iallgather /
 * ireducescatter when ag / rs are set (1 MiB staging). */
static br_plan_t *collnet_plan_ex(int collnet, int ag, int rs, br_graph_t **g_p)
{
    uint64_t hosts[4] = {0, 0, 1, 1};
    br_plan_comm_t pc;
    br_plan_t *p = NULL;

    ck_assert_int_eq(br_graph_build(4, hosts, 2, g_p), ncclSuccess);
    memset(&pc, 0, sizeof(pc));
    pc.rank = 0;
    pc.nranks = 4;
    pc.nnodes = 2;
    pc.local_ranks = 2;
    pc.nchannels = 2;
    pc.intra_hw = BR_HW_PCI;
    pc.net_gbps = 1.25;
    pc.step_bytes = 512 * 1024;
    pc.ll_bytes = 16 * 1024;
    pc.pipeline = 4;
    pc.ring_net = 1;
    pc.oneshot_bytes = 65536;
    pc.share = 1.0;
    pc.collnet = collnet;
    pc.collnet_red[ncclFloat32] = pc.collnet_red[ncclInt32] = 0xf;
    pc.collnet_ag = ag;
    pc.collnet_rs = rs;
    ck_assert_int_eq(br_plan_create(&pc, *g_p, &p), ncclSuccess);
    return p;
}

static br_plan_t *collnet_plan(int collnet, br_graph_t **g_p)
{
    return collnet_plan_ex(collnet, 0, 0, g_p);
}

static br_op_t collnet_op(br_func_t func, ncclDataType_t type, ncclRedOp_t red, size_t count)
{
    br_op_t op;
    memset(&op, 0, sizeof(op));
    op.func = func;
    op.type = type;
    op.count = count;
    br_redop_builtin(&op.redop, red, type, 4);
    return op;
}

/* ---- Large Broadcast and AllGather on one host (issue 19) ---- */

/* n ranks of one host with a node arena of 64 KiB buffers, `share` ranks per core. */
static br_plan_t *arena_plan(int n, double share, br_graph_t **g_p)
{
    uint64_t hosts[8] = {0};
    br_plan_comm_t pc;
    br_plan_t *p = NULL;

    ck_assert_int_eq(br_graph_build(n, hosts, 2, g_p), ncclSuccess);
    memset(&pc, 0, sizeof(pc));
    pc.nranks = n;
    pc.nnodes = 1;
    pc.local_ranks = n;
    pc.nchannels = 2;
    pc.intra_hw = BR_HW_PCI;
    pc.net_gbps = 1.25;
    pc.step_bytes = 512 * 1024;
    pc.ll_bytes = 16 * 1024;
    pc.pipeline = 4;
    pc.oneshot_bytes = 65536;
    pc.arena_bytes = 65536;
    pc.share = share;
    ck_assert_int_eq(br_plan_create(&pc, *g_p, &p), ncclSuccess);
    return p;
}

/* Above an arena buffer, Broadcast and AllGather go through the arena in chunks where the
 * copy counts favour it (4 ranks), and the other collectives never do. */
START_TEST(test_arena_chunked)
{
    static const size_t sizes[] = {65537, 1 << 20, 16 << 20, (size_t)256 << 20};
    br_graph_t *g = NULL;
    br_plan_t *p = arena_plan(4, 2.0, &g);

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        br_op_t op = collnet_op(BR_FUNC_BROADCAST, ncclUint8, ncclSum, sizes[i]);
        ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
        ck_assert_msg(op.algo == BR_ALGO_ONESHOT, "Broadcast of %zu: algo %d", sizes[i], op.algo);
        op = collnet_op(BR_FUNC_ALLGATHER, ncclUint8, ncclSum, sizes[i]);
        ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
        ck_assert_msg(op.algo == BR_ALGO_ONESHOT, "AllGather of %zu: algo %d", sizes[i], op.algo);
        op = collnet_op(BR_FUNC_ALLREDUCE, ncclFloat32, ncclSum, sizes[i]); /* 4x the bytes */
        ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
        ck_assert_int_ne(op.algo, BR_ALGO_ONESHOT);
        op = collnet_op(BR_FUNC_REDUCE, ncclFloat32, ncclSum, sizes[i]);
        ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
        ck_assert_int_ne(op.algo, BR_ALGO_ONESHOT);
    }
    br_plan_free(p);
    br_graph_free(g);
}
END_TEST

/* With a collnet the model takes CollNetDirect for a small AllReduce across hosts, one
 * channel, and never for what the collnet cannot do. */
START_TEST(test_collnet_model)
{
    br_graph_t *g = NULL;
    br_plan_t *p = collnet_plan(1, &g);
    br_op_t op = collnet_op(BR_FUNC_ALLREDUCE, ncclFloat32, ncclSum, 256);

    ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
    ck_assert_int_eq(op.algo, BR_ALGO_COLLNET_DIRECT);
    ck_assert_int_eq(op.proto, BR_PROTO_SIMPLE);
    ck_assert_int_eq(op.nchannels, 1);
    /* Not reduced by the collnet: Avg (PreMulSum for floats), a type it lacks. */
    op = collnet_op(BR_FUNC_ALLREDUCE, ncclFloat32, ncclAvg, 256);
    ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
    ck_assert_int_ne(op.algo, BR_ALGO_COLLNET_DIRECT);
    ck_assert_int_ne(op.algo, BR_ALGO_COLLNET_CHAIN);
    op = collnet_op(BR_FUNC_ALLREDUCE, ncclFloat64, ncclSum, 256);
    ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
    ck_assert_int_ne(op.algo, BR_ALGO_COLLNET_DIRECT);
    /* The same size again, supported: the cached decision is not reused across that. */
    op = collnet_op(BR_FUNC_ALLREDUCE, ncclInt32, ncclMax, 512);
    ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
    ck_assert_int_eq(op.algo, BR_ALGO_COLLNET_DIRECT);
    /* Only AllReduce. */
    op = collnet_op(BR_FUNC_BROADCAST, ncclFloat32, ncclSum, 256);
    ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
    ck_assert_int_ne(op.algo, BR_ALGO_COLLNET_DIRECT);
    br_plan_free(p);
    br_graph_free(g);
    /* Without a collnet the same AllReduce goes elsewhere. */
    p = collnet_plan(0, &g);
    op = collnet_op(BR_FUNC_ALLREDUCE, ncclFloat32, ncclSum, 256);
    ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
    ck_assert_int_ne(op.algo, BR_ALGO_COLLNET_DIRECT);
    ck_assert_int_ne(op.algo, BR_ALGO_COLLNET_CHAIN);
    br_plan_free(p);
    br_graph_free(g);
}
END_TEST

/* NCCL_ALGO=CollNetChain: taken when there is a collnet; without one the call fails with
 * ncclInvalidUsage; a type the collnet cannot reduce falls back (NCCL_ALGO set aside). */
START_TEST(test_collnet_forced)
{
    br_graph_t *g = NULL;
    br_plan_t *p;
    br_op_t op;

    setenv("NCCL_ALGO", "allreduce:CollNetChain", 1);
    p = collnet_plan(1, &g);
    op = collnet_op(BR_FUNC_ALLREDUCE, ncclFloat32, ncclProd, 1 << 20);
    ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
    ck_assert_int_eq(op.algo, BR_ALGO_COLLNET_CHAIN);
    op = collnet_op(BR_FUNC_ALLREDUCE, ncclFloat8e4m3, ncclSum, 100);
    ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
    ck_assert(op.algo == BR_ALGO_RING || op.algo == BR_ALGO_TREE ||
              op.algo == BR_ALGO_RING_ONESHOT);
    br_plan_free(p);
    br_graph_free(g);
    p = collnet_plan(0, &g);
    op = collnet_op(BR_FUNC_ALLREDUCE, ncclFloat32, ncclSum, 100);
    ck_assert_int_eq(br_plan_choose(p, &op), ncclInvalidUsage);
    br_plan_free(p);
    br_graph_free(g);
}
END_TEST

/* NCCL_ALGO forcing CollNetDirect for AllGather / ReduceScatter: taken when every rank's
 * plugin has the member; a ReduceScatter the collnet cannot reduce falls back; without the
 * member the call fails with ncclInvalidUsage. (Parameters are read once per process: one
 * NCCL_ALGO per test.) */
START_TEST(test_collnet_allgather_reducescatter)
{
    br_graph_t *g = NULL;
    br_plan_t *p;
    br_op_t op;

    setenv("NCCL_ALGO", "allgather:CollNetDirect;reducescatter:CollNetDirect", 1);
    p = collnet_plan_ex(1, 1, 1, &g);
    op = collnet_op(BR_FUNC_ALLGATHER, ncclFloat64, ncclSum, 1000);
    ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
    ck_assert_int_eq(op.algo, BR_ALGO_COLLNET_DIRECT);
    ck_assert_int_eq(op.proto, BR_PROTO_SIMPLE);
    op = collnet_op(BR_FUNC_REDUCESCATTER, ncclInt32, ncclMin, 1000);
    ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
    ck_assert_int_eq(op.algo, BR_ALGO_COLLNET_DIRECT);
    op = collnet_op(BR_FUNC_REDUCESCATTER, ncclFloat64, ncclSum, 1000); /* not reduced */
    ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
    ck_assert_int_ne(op.algo, BR_ALGO_COLLNET_DIRECT);
    br_plan_free(p);
    br_graph_free(g);

    p = collnet_plan_ex(1, 0, 0, &g);
    op = collnet_op(BR_FUNC_ALLGATHER, ncclFloat32, ncclSum, 1000);
    ck_assert_int_eq(br_plan_choose(p, &op), ncclInvalidUsage);
    op = collnet_op(BR_FUNC_REDUCESCATTER, ncclFloat32, ncclSum, 1000);
    ck_assert_int_eq(br_plan_choose(p, &op), ncclInvalidUsage);
    br_plan_free(p);
    br_graph_free(g);
}
END_TEST

/* CollNetChain runs AllReduce only: forcing it for AllGather fails. */
START_TEST(test_collnet_allgather_chain)
{
    br_graph_t *g = NULL;
    br_plan_t *p;
    br_op_t op;

    setenv("NCCL_ALGO", "allgather:CollNetChain", 1);
    p = collnet_plan_ex(1, 1, 1, &g);
    op = collnet_op(BR_FUNC_ALLGATHER, ncclFloat32, ncclSum, 1000);
    ck_assert_int_eq(br_plan_choose(p, &op), ncclInvalidUsage);
    br_plan_free(p);
    br_graph_free(g);
}
END_TEST

/* The algorithm the plan chooses for one call (which must succeed). */
static int chosen_algo(br_plan_t *p, br_func_t func, ncclDataType_t type, ncclRedOp_t red,
                       size_t count)
{
    br_op_t op = collnet_op(func, type, red, count);
    ck_assert_int_eq(br_plan_choose(p, &op), ncclSuccess);
    return op.algo;
}

/* Left to the model (no NCCL_ALGO, no other setting), a collnet with iallgather /
 * ireducescatter takes a small AllGather and ReduceScatter across hosts, as it takes a
 * small AllReduce, but not a ReduceScatter it cannot reduce; a collnet without the members
 * never takes them. */
START_TEST(test_collnet_agrs_model)
{
    br_graph_t *g = NULL;
    br_plan_t *p;

    unsetenv("NCCL_ALGO");
    p = collnet_plan_ex(1, 1, 1, &g);
    ck_assert_int_eq(chosen_algo(p, BR_FUNC_ALLGATHER, ncclFloat32, ncclSum, 64),
                     BR_ALGO_COLLNET_DIRECT);
    ck_assert_int_eq(chosen_algo(p, BR_FUNC_REDUCESCATTER, ncclFloat32, ncclSum, 64),
                     BR_ALGO_COLLNET_DIRECT);
    ck_assert_int_ne(chosen_algo(p, BR_FUNC_REDUCESCATTER, ncclFloat64, ncclSum, 64),
                     BR_ALGO_COLLNET_DIRECT); /* not reduced */
    br_plan_free(p);
    br_graph_free(g);

    p = collnet_plan_ex(1, 0, 0, &g);
    for (size_t count = 1; count <= ((size_t)1 << 22); count *= 8) {
        ck_assert_int_ne(chosen_algo(p, BR_FUNC_ALLGATHER, ncclFloat32, ncclSum, count),
                         BR_ALGO_COLLNET_DIRECT);
        ck_assert_int_ne(chosen_algo(p, BR_FUNC_REDUCESCATTER, ncclFloat32, ncclSum, count),
                         BR_ALGO_COLLNET_DIRECT);
    }
    br_plan_free(p);
    br_graph_free(g);
}
END_TEST

/* The schedules and shapes: in-memory simulations that free what they allocate and read
 * no environment of their own. */
static Suite *sched_suite(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("schedules");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_schedules, 0, NRANKCOUNTS * NLAYOUTS * NCOMBOS);
    suite_add_tcase(s, tc);
    tc = tcase_create("shapes");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_shapes, 0, NRANKCOUNTS * NLAYOUTS);
    tcase_add_test(tc, test_channel_range);
    suite_add_tcase(s, tc);
    return s;
}

/* Plans that read NCCL_ALGO, which the library reads once per process: one fork each. */
static Suite *collnet_suite(void)
{
    Suite *s = suite_create("plan (collnet)");
    TCase *tc = tcase_create("collnet");
    tcase_add_test(tc, test_arena_chunked);
    tcase_add_test(tc, test_collnet_model);
    tcase_add_test(tc, test_collnet_forced);
    tcase_add_test(tc, test_collnet_allgather_reducescatter);
    tcase_add_test(tc, test_collnet_allgather_chain);
    tcase_add_test(tc, test_collnet_agrs_model);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* The forked cases first, so the parent has read no parameter when they fork. Then
     * the 561 schedule and shape cases in this process: a fork per case cost more than
     * the cases themselves under the sanitizers (137 s against 96 s for the whole test). */
    SRunner *sr = srunner_create(collnet_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    sr = srunner_create(sched_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    failed += srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
