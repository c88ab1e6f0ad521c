/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The v-collectives of braid.h (braidAllGatherV, braidReduceScatterV, braidAlltoAllV):
 * every rank computes every rank's counts and inputs from the case's seed, makes the
 * call, and checks its output element by element against a reference computed here,
 * that the gaps between blocks (non-packed displacements) and the bytes around the buffers
 * are untouched, and that out-of-place inputs are unchanged. Counts are uneven, zeros
 * included (a rank with nothing to send, a pair with nothing to exchange, a whole call
 * of zeros), some larger than a FIFO step; packed (NULL) and gapped displacements; the
 * in-place variants of AllGatherV and ReduceScatterV. Rank layouts: processes (shared
 * memory, the network plugin by environment, or simulated hosts with --hosts H: shared
 * memory within a host, the network between them, no node arena), threads with
 * ncclCommInitRank, and one thread driving every rank of ncclCommInitAll in a group.
 *
 * The "mismatch" TCase has four processes (four threads with --mode threads) where rank 2
 * disagrees about one count (or calls another collective): every rank returns within the
 * deadline, the rank that receives the wrong count reports it naming both ranks, and no
 * rank's output is written outside the blocks its own counts give. A rank in AllReduce while the
 * others are in AlltoAllV is seen at once over shared memory (the probes of exec_work.c
 * read the other path's slots); over the network nothing arrives on a path no call is
 * receiving on, so there BRAID_TIMEOUT (set by the ctest entries) ends it, the waiting
 * rank naming the peer it waits for. The "args" TCase checks the argument errors on one
 * rank.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <braid.h>
#include <nccl.h>

#include "brt_check.h"
#include "brt_launch.h"

enum { V_AG, V_RS, V_A2A, V_NFUNCS };

static const char *const vnames[] = {"AllGatherV", "ReduceScatterV", "AlltoAllV"};

static struct {
    int mode;
    int ranks[BRT_MAX_RANKS];
    int nranks_list;
    double timeout;
    int hosts; /* simulated hosts (proc mode: NCCL_HOSTID per rank), 0: the real one */
} cfg;

typedef struct {
    int func;
    ncclDataType_t type;
    ncclRedOp_t op;
    size_t scale; /* counts are below this */
    int zero_all; /* every count 0 */
    int packed;   /* NULL displacement arrays */
    int inplace;  /* AllGatherV / ReduceScatterV in place */
    uint32_t seed;
} vcase_t;

#define GUARD 64
#define GAP 3 /* elements between blocks when not packed */
#define ERR_LEN 8192

static uint32_t mix(uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t h = a * 0x9e3779b1u ^ (b + 0x7f4a7c15u) * 0x85ebca6bu ^ (c + 1u) * 0xc2b2ae35u;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    return h ^ (h >> 13);
}

/* Elements from rank p to rank q (AlltoAllV), or of rank p's block (the others: q unused). */
static size_t vcount(const vcase_t *c, int p, int q)
{
    if (c->zero_all) {
        return 0;
    }
    uint32_t h = mix(c->seed, (uint32_t)p, c->func == V_A2A ? (uint32_t)q : 0u);
    return h % 4 == 0 ? 0 : h % c->scale;
}

/* Element i of what rank r contributes for rank q (exact in every tested type). */
static double val(const vcase_t *c, int r, int q, size_t i)
{
    return (double)(mix(c->seed + 7u, (uint32_t)(r * 64 + q), (uint32_t)i) % 23u);
}

static size_t tsize(ncclDataType_t t)
{
    return t == ncclFloat64 ? 8 : t == ncclUint8 ? 1 : 4;
}

static void put(void *buf, ncclDataType_t t, size_t i, double v)
{
    switch (t) {
    case ncclFloat32: ((float *)buf)[i] = (float)v; break;
    case ncclFloat64: ((double *)buf)[i] = v; break;
    case ncclUint8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    default: ((int32_t *)buf)[i] = (int32_t)v; break;
    }
}

static double get(const void *buf, ncclDataType_t t, size_t i)
{
    switch (t) {
    case ncclFloat32: return ((const float *)buf)[i];
    case ncclFloat64: return ((const double *)buf)[i];
    case ncclUint8: return ((const uint8_t *)buf)[i];
    default: return ((const int32_t *)buf)[i];
    }
}

/* The reduction of every rank's element i of block q. */
static double reduced(const vcase_t *c, int n, int q, size_t i)
{
    double acc = val(c, 0, q, i);
    for (int r = 1; r < n; r++) {
        double x = val(c, r, q, i);
        switch (c->op) {
        case ncclMax: acc = x > acc ? x : acc; break;
        case ncclMin: acc = x < acc ? x : acc; break;
        default: acc += x; break;
        }
    }
    if (c->op == ncclAvg) {
        acc = (double)((int64_t)acc / n); /* integer average: the sum divided, truncated */
    }
    return acc;
}

/* One rank's view of a case: counts and displacements in elements. */
typedef struct {
    size_t sc[BRT_MAX_RANKS], sd[BRT_MAX_RANKS], rc[BRT_MAX_RANKS], rd[BRT_MAX_RANKS];
    size_t send_elems, recv_elems;
} layout_t;

static void layout(const vcase_t *c, int n, int me, layout_t *l)
{
    size_t s = 0, r = 0;
    for (int p = 0; p < n; p++) {
        switch (c->func) {
        case V_AG: l->sc[p] = vcount(c, me, 0), l->rc[p] = vcount(c, p, 0); break;
        case V_RS: l->sc[p] = vcount(c, p, 0), l->rc[p] = vcount(c, me, 0); break;
        default: l->sc[p] = vcount(c, me, p), l->rc[p] = vcount(c, p, me); break;
        }
        size_t gap = c->packed ? 0 : GAP;
        l->sd[p] = s + gap;
        s += gap + l->sc[p];
        l->rd[p] = r + gap;
        r += gap + l->rc[p];
    }
    l->send_elems = c->func == V_AG ? l->sc[0] : s;
    l->recv_elems = c->func == V_RS ? l->rc[0] : r;
    if (c->func == V_AG) {
        memset(l->sd, 0, sizeof(l->sd));
    } else if (c->func == V_RS) {
        memset(l->rd, 0, sizeof(l->rd));
    }
}

/* A rank's buffers for one case: guard | payload | guard, filled with 0xa5 first. */
typedef struct {
    unsigned char *smem, *rmem;
    size_t sbytes, rbytes;
    void *sendbuff, *recvbuff;
    layout_t l;
} vbuf_t;

static int vbuf_setup(const vcase_t *c, int n, int me, vbuf_t *b)
{
    size_t ts = tsize(c->type);
    layout(c, n, me, &b->l);
    b->sbytes = b->l.send_elems * ts;
    b->rbytes = b->l.recv_elems * ts;
    b->smem = malloc(b->sbytes + 2 * GUARD);
    b->rmem = malloc(b->rbytes + 2 * GUARD);
    if (b->smem == NULL || b->rmem == NULL) {
        return -1;
    }
    memset(b->smem, 0xa5, b->sbytes + 2 * GUARD);
    memset(b->rmem, 0xa5, b->rbytes + 2 * GUARD);
    b->sendbuff = b->smem + GUARD;
    b->recvbuff = b->rmem + GUARD;
    if (c->inplace && c->func == V_AG) {
        b->sendbuff = (char *)b->recvbuff + b->l.rd[me] * ts;
    } else if (c->inplace && c->func == V_RS) {
        b->recvbuff = (char *)b->sendbuff + b->l.sd[me] * ts;
    }
    for (int q = 0; q < n; q++) {
        for (size_t i = 0; i < b->l.sc[q] && (c->func != V_AG || q == 0); i++) {
            put(b->sendbuff, c->type, b->l.sd[q] + i, val(c, me, c->func == V_AG ? 0 : q, i));
        }
    }
    return 0;
}

static void vbuf_free(vbuf_t *b)
{
    free(b->smem);
    free(b->rmem);
}

static ncclResult_t vcall(const vcase_t *c, const vbuf_t *b, ncclComm_t comm, int me)
{
    const size_t *sd = c->packed ? NULL : b->l.sd, *rd = c->packed ? NULL : b->l.rd;
    switch (c->func) {
    case V_AG:
        return braidAllGatherV(b->sendbuff, b->l.sc[0], b->recvbuff, b->l.rc, rd, c->type, comm,
                               NULL);
    case V_RS:
        return braidReduceScatterV(b->sendbuff, b->recvbuff, b->l.sc, sd, c->type, c->op, comm,
                                   NULL);
    default:
        (void)me;
        return braidAlltoAllV(b->sendbuff, b->l.sc, sd, b->recvbuff, b->l.rc, rd, c->type, comm,
                              NULL);
    }
}

/* Is every byte of mem[from, to) still 0xa5? Returns the first that is not, or -1. */
static long untouched(const unsigned char *mem, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        if (mem[i] != 0xa5) {
            return (long)i;
        }
    }
    return -1;
}

static void case_name(const vcase_t *c, int n, char *buf, size_t len)
{
    snprintf(buf, len, "%s type %d op %d scale %zu%s%s%s seed %u, %d ranks", vnames[c->func],
             (int)c->type, (int)c->op, c->scale, c->zero_all ? " all-zero" : "",
             c->packed ? " packed" : " gapped", c->inplace ? " in-place" : "", c->seed, n);
}

/* Check rank me's output; 0 if right, else a line in err. */
static int verify(const vcase_t *c, const vbuf_t *b, int n, int me, char *err, size_t len)
{
    size_t ts = tsize(c->type);
    char name[160];
    case_name(c, n, name, sizeof(name));
    size_t at = 0; /* recv elements accounted for (blocks), for the gap check */
    for (int p = 0; p < n; p++) {
        size_t base = c->func == V_RS ? 0 : b->l.rd[p];
        for (size_t i = 0; i < b->l.rc[p] && (c->func != V_RS || p == 0); i++) {
            double want =
                c->func == V_RS ? reduced(c, n, me, i) : val(c, p, c->func == V_AG ? 0 : me, i);
            double got = get(b->recvbuff, c->type, base + i);
            if (got != want) {
                snprintf(err, len, "rank %d: %s: element %zu of block %d is %g, expected %g", me,
                         name, i, p, got, want);
                return 1;
            }
        }
        if (c->func != V_RS && !c->inplace) {
            long bad = untouched(b->recvbuff, at * ts, b->l.rd[p] * ts);
            if (bad >= 0) {
                snprintf(err, len, "rank %d: %s: the gap before block %d was written (byte %ld)",
                         me, name, p, bad);
                return 1;
            }
            at = b->l.rd[p] + b->l.rc[p];
        }
    }
    long g1 = untouched(b->rmem, 0, GUARD),
         g2 = untouched(b->rmem, GUARD + b->rbytes, 2 * GUARD + b->rbytes);
    long g3 = untouched(b->smem, 0, GUARD),
         g4 = untouched(b->smem, GUARD + b->sbytes, 2 * GUARD + b->sbytes);
    if (g1 >= 0 || g2 >= 0 || g3 >= 0 || g4 >= 0) {
        snprintf(err, len, "rank %d: %s: a guard around the buffers was written", me, name);
        return 1;
    }
    for (int q = 0; q < n && !c->inplace; q++) {
        for (size_t i = 0; i < b->l.sc[q] && (c->func != V_AG || q == 0); i++) {
            if (get(b->sendbuff, c->type, b->l.sd[q] + i) !=
                val(c, me, c->func == V_AG ? 0 : q, i)) {
                snprintf(err, len, "rank %d: %s: the input changed (block %d element %zu)", me,
                         name, q, i);
                return 1;
            }
        }
    }
    return 0;
}

/* The cases: each function with several types, ops, scales and placements. */
static int cases_build(vcase_t *out, int max)
{
    static const ncclDataType_t types[] = {ncclFloat32, ncclInt32, ncclFloat64, ncclUint8};
    static const ncclRedOp_t ops[] = {ncclSum, ncclMax, ncclMin, ncclAvg};
    static const size_t scales[] = {1, 7, 300, 40000};
    int k = 0;
    for (int f = 0; f < V_NFUNCS; f++) {
        for (int i = 0; i < 8 && k < max; i++) {
            vcase_t c = {.func = f, .seed = (uint32_t)(f * 100 + i + 1)};
            c.type = types[i % 4];
            c.op = f == V_RS ? ops[(i / 2) % 4] : ncclSum;
            if (c.op == ncclAvg) {
                c.type = ncclInt32; /* an exact integer average */
            }
            if (f == V_RS && c.type == ncclUint8) {
                c.type = ncclFloat32; /* sums of 8 ranks' values may not fit */
            }
            c.scale = scales[i % 4];
            c.packed = i % 3 == 0;
            c.inplace = f != V_A2A && i % 4 == 1;
            out[k++] = c;
        }
        vcase_t z = {.func = f, .type = ncclFloat32, .op = ncclSum, .scale = 1, .zero_all = 1};
        out[k++] = z;
    }
    return k;
}

#define MAX_CASES 40

/* Run every case on comms (nlocal of them, ranks first_rank.., driven by this thread:
 * several in one group). Returns 0, 1 on a wrong result, 2 when a call failed. */
static int run_cases(ncclComm_t *comms, int nlocal, int first_rank, int n, brt_rank_ctx_t *ctx,
                     char *err, size_t len)
{
    vcase_t cases[MAX_CASES];
    int ncases = cases_build(cases, MAX_CASES), ret = 0;
    vbuf_t *bufs = calloc((size_t)nlocal, sizeof(*bufs));
    if (bufs == NULL) {
        snprintf(err, len, "out of memory");
        return 1;
    }
    for (int k = 0; k < ncases && ret == 0; k++) {
        char name[160];
        case_name(&cases[k], n, name, sizeof(name));
        brt_doing(ctx, "%s", name);
        for (int l = 0; l < nlocal; l++) {
            if (vbuf_setup(&cases[k], n, first_rank + l, &bufs[l]) != 0) {
                snprintf(err, len, "out of memory");
                ret = 1;
            }
        }
        ncclResult_t res = ncclSuccess;
        if (ret == 0 && nlocal > 1) {
            ncclGroupStart();
        }
        for (int l = 0; l < nlocal && ret == 0; l++) {
            ncclResult_t r = vcall(&cases[k], &bufs[l], comms[l], first_rank + l);
            res = res == ncclSuccess ? r : res;
        }
        if (ret == 0 && nlocal > 1) {
            ncclResult_t r = ncclGroupEnd();
            res = res == ncclSuccess ? r : res;
        }
        if (ret == 0 && res != ncclSuccess) {
            snprintf(err, len, "%s returned %d: %s", name, (int)res, ncclGetLastError(comms[0]));
            ret = 2;
        }
        for (int l = 0; l < nlocal && ret == 0; l++) {
            ret = verify(&cases[k], &bufs[l], n, first_rank + l, err, len);
        }
        for (int l = 0; l < nlocal; l++) {
            vbuf_free(&bufs[l]);
        }
    }
    free(bufs);
    return ret;
}

static int finish(ncclComm_t comm, int bad, brt_rank_ctx_t *ctx)
{
    if (bad == 2) {
        ncclCommAbort(comm);
        return 1;
    }
    if (ncclCommFinalize(comm) != ncclSuccess || ncclCommDestroy(comm) != ncclSuccess) {
        brt_fail(ctx, "ncclCommFinalize/Destroy failed: %s", ncclGetLastError(NULL));
        return 1;
    }
    return bad;
}

static int rank_body(brt_rank_ctx_t *ctx)
{
    ncclComm_t comm = NULL;
    char err[ERR_LEN];
    if (cfg.hosts > 0) { /* ranks of different hosts talk through the net plugin */
        char host[32];
        snprintf(host, sizeof(host), "brt-host-%d", ctx->rank % cfg.hosts);
        setenv("NCCL_HOSTID", host, 1);
    }
    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    int bad = run_cases(&comm, 1, ctx->rank, ctx->nranks, ctx, err, sizeof(err));
    if (bad) {
        brt_fail(ctx, "%s", err);
    }
    return finish(comm, bad, ctx);
}

static void run_initall(int n, double timeout)
{
    ncclComm_t comms[BRT_MAX_RANKS];
    brt_report_t rep;
    char err[ERR_LEN];

    memset(&rep, 0, sizeof(rep));
    brt_watchdog_start(timeout, &rep);
    ck_assert_int_eq(ncclCommInitAll(comms, n, NULL), ncclSuccess);
    brt_rank_ctx_t ctx = {.rank = 0, .nranks = n, .report = &rep, .all = &rep};
    int bad = run_cases(comms, n, 0, n, &ctx, err, sizeof(err));
    for (int r = 0; r < n; r++) {
        if (bad == 2) {
            ncclCommAbort(comms[r]);
        } else {
            ck_assert_int_eq(ncclCommFinalize(comms[r]), ncclSuccess);
            ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
        }
    }
    brt_watchdog_stop();
    ck_assert_msg(!bad, "%d ranks (ncclCommInitAll, one thread): %s", n, err);
}

START_TEST(test_v_matrix)
{
    int n = cfg.ranks[_i];
    double timeout = cfg.timeout * brt_time_scale();
    static char out[4 * ERR_LEN];
    int bad = 0;

    out[0] = '\0';
    switch (cfg.mode) {
    case BRT_MODE_PROC: bad = brt_procs_run(n, rank_body, NULL, timeout, out, sizeof(out)); break;
    case BRT_MODE_THREADS:
        bad = brt_threads_run(n, rank_body, NULL, timeout, out, sizeof(out));
        break;
    default: run_initall(n, timeout); break;
    }
    ck_assert_msg(!bad, "%d ranks: %s", n, brt_clip(out, 3000));
}
END_TEST

/* ---- Ranks that disagree ---- */

#define MM_RANKS 4
#define MM_ODD 2
#define MM_GUARD (-7.0f) /* what rbuf holds before the call */
#define MM_OVERRUN 1000  /* a report's result: the call wrote past the output */
enum { MM_A2A_COUNT, MM_AG_COUNT, MM_RS_COUNT, MM_FUNC, MM_NKINDS };
static const char *const mm_names[] = {"AlltoAllV count", "AllGatherV count",
                                       "ReduceScatterV count", "AlltoAllV against AllReduce"};

/* A mismatch run: which kind, and (ranks as threads) where each rank leaves a copy of
 * its report, which brt_threads_run frees. */
typedef struct {
    int kind;
    brt_report_t *copy;
} mm_arg_t;

static int mm_body(brt_rank_ctx_t *ctx)
{
    const mm_arg_t *arg = ctx->arg;
    int kind = arg->kind, me = ctx->rank, odd = me == MM_ODD;
    ncclComm_t comm = NULL;
    size_t counts[MM_RANKS], rcounts[MM_RANKS];
    float sbuf[64] = {0}, rbuf[64];
    ncclResult_t res;

    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    for (int p = 0; p < MM_RANKS; p++) {
        /* AlltoAllV: f(from, to) = 3 + from + 2 to; the others: rank p's block is 3 + p. */
        counts[p] = kind == MM_A2A_COUNT || kind == MM_FUNC ? 3 + (size_t)me + 2 * (size_t)p
                                                            : 3 + (size_t)p;
        rcounts[p] = kind == MM_A2A_COUNT || kind == MM_FUNC ? 3 + (size_t)p + 2 * (size_t)me
                                                             : 3 + (size_t)p;
    }
    /* A first call every rank agrees on makes the p2p connections: a rank that then
     * runs another collective is seen on them (made on first use, they would wait for a
     * peer that never connects until BRAID_TIMEOUT). */
    brt_doing(ctx, "the agreed AlltoAllV before %s", mm_names[kind]);
    size_t agree_s[MM_RANKS], agree_r[MM_RANKS];
    for (int p = 0; p < MM_RANKS; p++) {
        agree_s[p] = 1 + (size_t)me + (size_t)p;
        agree_r[p] = 1 + (size_t)p + (size_t)me;
    }
    res = braidAlltoAllV(sbuf, agree_s, NULL, rbuf, agree_r, NULL, ncclFloat, comm, NULL);
    if (res != ncclSuccess) {
        brt_fail(ctx, "the agreed AlltoAllV returned %d: %s", (int)res, ncclGetLastError(comm));
        ncclCommAbort(comm);
        return 1;
    }
    brt_doing(ctx, "%s", mm_names[kind]);
    for (int i = 0; i < 64; i++) {
        rbuf[i] = MM_GUARD;
    }
    size_t rd[MM_RANKS], at = 0; /* the AlltoAllV's blocks with a gap of 2 after each */
    for (int p = 0; p < MM_RANKS; p++) {
        rd[p] = at;
        at += rcounts[p] + (kind == MM_A2A_COUNT ? 2 : 0);
    }
    switch (kind) {
    case MM_A2A_COUNT: /* rank 2 sends rank 1 one element more than rank 1 expects */
        counts[1] += odd;
        res = braidAlltoAllV(sbuf, counts, NULL, rbuf, rcounts, rd, ncclFloat, comm, NULL);
        break;
    case MM_AG_COUNT: /* rank 2 thinks rank 0 sends 2 elements fewer */
        rcounts[0] -= 2 * odd;
        res = braidAllGatherV(sbuf, rcounts[me], rbuf, rcounts, NULL, ncclFloat, comm, NULL);
        break;
    case MM_RS_COUNT: /* rank 2 thinks rank 3's block is longer */
        rcounts[3] += 4 * odd;
        res = braidReduceScatterV(sbuf, rbuf, rcounts, NULL, ncclFloat, ncclSum, comm, NULL);
        break;
    default:
        res = odd ? ncclAllReduce(sbuf, rbuf, 8, ncclFloat, ncclSum, comm, NULL)
                  : braidAlltoAllV(sbuf, counts, NULL, rbuf, rcounts, NULL, ncclFloat, comm, NULL);
        break;
    }
    /* The report slot carries the outcome to the parent (shared memory). */
    ctx->report->result = (int)res;
    snprintf(ctx->report->msg, sizeof(ctx->report->msg), "%s",
             res == ncclSuccess ? "" : ncclGetLastError(comm));
    /* Whatever the peers sent, nothing lands outside the blocks this rank's own arguments
     * give its output (a reader checks an owner's count before it copies). */
    char allowed[64] = {0};
    at = 0;
    for (int p = 0; p < MM_RANKS; p++) { /* rd again: the counts as the call had them */
        rd[p] = at;
        at += rcounts[p] + (kind == MM_A2A_COUNT ? 2 : 0);
    }
    for (int p = 0; p < MM_RANKS; p++) {
        size_t from = kind == MM_RS_COUNT ? 0 : rd[p];
        size_t len = kind == MM_RS_COUNT ? rcounts[me] : kind == MM_FUNC && odd ? 8 : rcounts[p];
        memset(allowed + from, 1, len);
    }
    for (int i = 0; i < 64; i++) {
        if (!allowed[i] && rbuf[i] != MM_GUARD) {
            ctx->report->result = MM_OVERRUN;
            snprintf(ctx->report->msg, sizeof(ctx->report->msg),
                     "rank %d: element %d of its output, outside every block its counts "
                     "give, was written",
                     me, i);
            break;
        }
    }
    if (arg->copy != NULL) {
        arg->copy[me].result = ctx->report->result;
        snprintf(arg->copy[me].msg, sizeof(arg->copy[me].msg), "%s", ctx->report->msg);
    }
    ncclCommAbort(comm);
    return 0;
}

/* Every rank returned; at least one names the mismatch (the rank that receives the wrong
 * count names the entries and both ranks), and none wrote outside its blocks. */
static void mm_check(int kind, const brt_report_t *reps)
{
    int named = 0, failed = 0;
    char all[4 * 620] = "";
    for (int r = 0; r < MM_RANKS; r++) {
        const brt_report_t *rep = &reps[r];
        snprintf(all + strlen(all), sizeof(all) - strlen(all), "\n rank %d: %d %.580s", r,
                 rep->result, rep->msg);
        ck_assert_msg(rep->result != MM_OVERRUN, "%s: %s", mm_names[kind], rep->msg);
        if (rep->result == ncclSuccess) {
            continue;
        }
        failed++;
        ck_assert_msg(rep->msg[0] != '\0', "%s: rank %d failed without a message", mm_names[kind],
                      r);
        if (brt_text_names_rank(rep->msg, MM_ODD) && brt_text_names_rank(rep->msg, r) &&
            (kind == MM_FUNC ? brt_text_has(rep->msg, "AllReduce")
                             : brt_text_has(rep->msg, "mismatched counts"))) {
            named++;
        }
    }
    ck_assert_msg(failed > 0 && named > 0, "%s: no rank named the mismatch:%s", mm_names[kind],
                  all);
}

START_TEST(test_v_mismatch)
{
    mm_arg_t arg = {.kind = _i};
    brt_procs_t p;
    char err[ERR_LEN], out[ERR_LEN];
    double timeout = 60 * brt_time_scale();

    ck_assert_int_eq(brt_procs_start(&p, MM_RANKS, mm_body, &arg, err, sizeof(err)), 0);
    int bad = brt_procs_wait(&p, brt_now() + timeout, 0, out, sizeof(out), 1);
    ck_assert_msg(!bad, "%s: a rank hung or died: %s", mm_names[arg.kind], brt_clip(out, 2000));
    mm_check(arg.kind, p.reports);
    brt_procs_free(&p);
}
END_TEST

/* The same with ranks as threads of this process: AlltoAllV's readers copy straight from
 * the owners' buffers with memcpy there, so a count taken on trust would overrun them. */
START_TEST(test_v_mismatch_threads)
{
    static brt_report_t copy[MM_RANKS];
    mm_arg_t arg = {.kind = _i, .copy = copy};
    static char out[ERR_LEN];

    memset(copy, 0, sizeof(copy));
    int bad = brt_threads_run(MM_RANKS, mm_body, &arg, 60 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "%s: a rank hung or failed: %s", mm_names[arg.kind], brt_clip(out, 2000));
    mm_check(arg.kind, copy);
}
END_TEST

/* ---- Argument errors ---- */

START_TEST(test_v_args)
{
    ncclComm_t comm;
    size_t c1[1] = {4}, c0[1] = {0};
    float a[8] = {0}, b[8];

    ck_assert_int_eq(ncclCommInitAll(&comm, 1, NULL), ncclSuccess);
    ck_assert_int_eq(braidAllGatherV(a, 4, b, NULL, NULL, ncclFloat, comm, NULL),
                     ncclInvalidArgument);
    ck_assert(brt_text_has(ncclGetLastError(comm), "braidAllGatherV"));
    ck_assert(brt_text_has(ncclGetLastError(comm), "recvcounts is NULL"));
    ck_assert(brt_text_names_rank(ncclGetLastError(comm), 0));
    ck_assert_int_eq(braidAllGatherV(a, 3, b, c1, NULL, ncclFloat, comm, NULL),
                     ncclInvalidArgument);
    ck_assert(brt_text_has(ncclGetLastError(comm), "sendcount 3"));
    ck_assert_int_eq(braidAlltoAllV(a, c1, NULL, a, c1, NULL, ncclFloat, comm, NULL),
                     ncclInvalidArgument);
    ck_assert(brt_text_has(ncclGetLastError(comm), "in-place AlltoAllV"));
    ck_assert_int_eq(braidAlltoAllV(NULL, c1, NULL, b, c1, NULL, ncclFloat, comm, NULL),
                     ncclInvalidArgument);
    ck_assert(brt_text_has(ncclGetLastError(comm), "sendbuff is NULL"));
    ck_assert_int_eq(braidReduceScatterV(a, b, c1, NULL, (ncclDataType_t)99, ncclSum, comm, NULL),
                     ncclInvalidArgument);
    size_t huge[1] = {SIZE_MAX / 2};
    ck_assert_int_eq(braidReduceScatterV(a, b, huge, NULL, ncclFloat, ncclSum, comm, NULL),
                     ncclInvalidArgument);
    ck_assert(brt_text_has(ncclGetLastError(comm), "overflow"));
    /* Zero counts need no buffers at all. */
    ck_assert_int_eq(braidAlltoAllV(NULL, c0, NULL, NULL, c0, NULL, ncclFloat, comm, NULL),
                     ncclSuccess);
    /* A bad call inside a group fails the group. */
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(braidAllGatherV(a, 3, b, c1, NULL, ncclFloat, comm, NULL),
                     ncclInvalidArgument);
    ck_assert_int_ne(ncclGroupEnd(), ncclSuccess);
    /* And a good one still works after. */
    ck_assert_int_eq(braidReduceScatterV(a, b, c1, NULL, ncclFloat, ncclSum, comm, NULL),
                     ncclSuccess);
    ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* ---- fp32 sums (BRAID_ACCUMULATE) ---- */

/* bfloat16 bits of small values (exact: 8 bits of mantissa). */
static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return (uint16_t)(u >> 16);
}

/* Four ranks in one thread, a bfloat16 ReduceScatterV sum: rank 0 gives 256, the others
 * 1 each. Rounded to bfloat16 at every step (spacing 2 above 256) each 1 is lost: 256.
 * Summed in fp32 and rounded once, 259 rounds to even: 260. _i: 0 default, 1 fp32. */
START_TEST(test_v_acc32)
{
    ncclComm_t comms[4];
    size_t counts[4] = {2, 0, 3, 1};
    uint16_t send[4][6], recv[4][3];

    if (_i == 1) {
        setenv("BRAID_ACCUMULATE", "fp32", 1); /* this forked test only: read at init */
    }
    ck_assert_int_eq(ncclCommInitAll(comms, 4, NULL), ncclSuccess);
    for (int r = 0; r < 4; r++) {
        for (int i = 0; i < 6; i++) {
            send[r][i] = bf16_of(r == 0 ? 256.0f : 1.0f);
        }
    }
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < 4; r++) {
        ck_assert_int_eq(braidReduceScatterV(send[r], recv[r], counts, NULL, ncclBfloat16, ncclSum,
                                             comms[r], NULL),
                         ncclSuccess);
    }
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    uint16_t want = bf16_of(_i == 1 ? 260.0f : 256.0f);
    for (int r = 0; r < 4; r++) {
        for (size_t i = 0; i < counts[r]; i++) {
            ck_assert_msg(recv[r][i] == want, "%s: rank %d element %zu: bits 0x%04x, want 0x%04x",
                          _i ? "fp32 sums" : "bfloat16 sums", r, i, recv[r][i], want);
        }
        ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
    }
}
END_TEST

static int parse_args(int argc, char **argv)
{
    cfg.mode = BRT_MODE_PROC;
    cfg.timeout = 120;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (brt_layout_option(k, v, &cfg.mode, cfg.ranks, &cfg.nranks_list)) {
            continue;
        } else if (strcmp(k, "--timeout") == 0) {
            cfg.timeout = atof(v);
        } else if (strcmp(k, "--hosts") == 0 && cfg.mode == BRT_MODE_PROC) {
            cfg.hosts = atoi(v);
        } else {
            fprintf(stderr, "unknown option %s\n", k);
            return -1;
        }
    }
    if (cfg.nranks_list == 0) {
        cfg.ranks[cfg.nranks_list++] = 3;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (parse_args(argc, argv) != 0) {
        return 2;
    }
    Suite *s = suite_create("mp_collv");
    TCase *tc = tcase_create("matrix");
    tcase_set_timeout(tc, cfg.timeout * brt_time_scale() + 60);
    tcase_add_loop_test(tc, test_v_matrix, 0, cfg.nranks_list);
    suite_add_tcase(s, tc);
    if (cfg.mode == BRT_MODE_THREADS) {
        TCase *mm = tcase_create("mismatch");
        tcase_set_timeout(mm, 120 * brt_time_scale());
        tcase_add_loop_test(mm, test_v_mismatch_threads, 0, MM_NKINDS);
        suite_add_tcase(s, mm);
    }
    if (cfg.mode == BRT_MODE_PROC) {
        TCase *mm = tcase_create("mismatch");
        tcase_set_timeout(mm, 120 * brt_time_scale());
        tcase_add_loop_test(mm, test_v_mismatch, 0, MM_NKINDS);
        suite_add_tcase(s, mm);
        TCase *args = tcase_create("args");
        tcase_add_test(args, test_v_args);
        tcase_add_loop_test(args, test_v_acc32, 0, 2);
        suite_add_tcase(s, args);
    }
    return brt_suite_run(s);
}
