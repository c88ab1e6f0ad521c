/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "mp_det": deterministic reductions and fp32 accumulation (issue 38).
 *
 *   check_mp_det --mode proc|threads|initall --ranks 3,4 [--env] [--timeout s]
 *
 * TCase "bits": AllReduce, ReduceScatter and Reduce (in and out of place) of float32,
 * float64, bfloat16 and float16, sum and average, at counts below, at and above the rank
 * count and the FIFO, each asked to be deterministic (the per-call option, or with --env
 * BRAID_DETERMINISTIC=1 from the environment) under every algorithm, protocol and channel
 * count selection of `sels` (with --env, three of them). Every result must have the bits
 * of the test's own fold of the ranks' inputs in rank order 0..n-1 with each step rounded
 * to the type (computed here in double with the encoders of brt_fp.h, not by the library),
 * so all selections, ranks, layouts and transports of every CTest entry agree bit for bit. The
 * inputs mix large values of both signs with small ones, so the order of a sum changes its bits:
 * without the option, float32 AllReduce on 3 or more ranks must differ from the rank-order fold
 * somewhere (else the check above would prove nothing).
 *
 * TCase "mixed": the program's sends and receives and a deterministic AllReduce in one
 * group, before and after it, round after round: both arrive right (the owner fold's
 * messages share the p2p connections, numbered apart).
 *
 * TCase "acc32": long sums (one term per rank) of bf16, fp16, fp8 e4m3 and fp8 e5m2
 * inputs whose exact sum fits fp32: with BRAID_OPT_ACCUMULATE_FP32 every element must be
 * the exact sum (fp64) rounded once to the type, that is an error of at most half an ulp;
 * the default path, which rounds every partial sum, is measured against the same
 * reference and must be worse somewhere. Both errors are printed.
 */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"
#include "brt_check.h"
#include "brt_data.h"
#include "brt_fp.h"
#include "brt_launch.h"


static struct {
    int mode;
    int ranks[BRT_MAX_RANKS];
    int nranks_list;
    int env; /* determinism from BRAID_DETERMINISTIC, not the per-call option */
    double timeout;
} cfg;

/* One algorithm / protocol / channel selection (forceAlgSelection 0: one a call cannot
 * run is set aside, so every selection runs on every layout). */
typedef struct {
    const char *algos, *protos;
    int nch;
} sel_t;

static const sel_t sels[] = {
    {NULL, NULL, 0},          {"Ring", "Simple", 1},
    {"Ring", "LL", 2},        {"Ring", "Simple", 4},
    {"Tree", "Simple", 1},    {"Tree", "LL", 3},
    {"OneShot", NULL, 0},     {"DirectRead", NULL, 0},
    {"RingOneShot", NULL, 0}, {"CollNetDirect", NULL, 0},
};
#define NSELS ((int)(sizeof(sels) / sizeof(sels[0])))

static const size_t counts[] = {1, 5, 1003, 70001};
#define NCOUNTS ((int)(sizeof(counts) / sizeof(counts[0])))

/* ---- values of each type as doubles ---- */

/* x rounded to the type (to nearest, ties to even). */
static double rnd(ncclDataType_t t, double x)
{
    switch (t) {
    case ncclFloat32: return (double)(float)x;
    case ncclBfloat16: return brt_bf16_to_double(brt_bf16_from_double(x));
    case ncclFloat16: return brt_fp16_to_double(brt_fp16_from_double(x));
    case ncclFloat8e4m3: return brt_e4m3_to_double(brt_e4m3_from_double(x));
    case ncclFloat8e5m2: return brt_e5m2_to_double(brt_e5m2_from_double(x));
    default: return x;
    }
}

/* 32 well-mixed bits of x. */
static uint32_t mix(uint32_t x)
{
    return (uint32_t)(brt_mix64(x) >> 32);
}

/* Input element i of rank r for the "bits" case: large values of both signs next to small
 * ones, so that every order of a sum rounds differently. */
static double bits_in(ncclDataType_t t, int r, size_t i)
{
    uint32_t m = mix((uint32_t)(r * 7919) ^ (uint32_t)i * 2654435761u);
    double big = t == ncclFloat16 ? 2000.0 : 3.0e6;
    double mant = 1.0 + (double)(m >> 8 & 1023) / 1024.0;
    double v = (m & 3) == 0 ? big * mant : (m & 3) == 1 ? -big * mant : mant / 3.0;
    return rnd(t, v);
}

/* Input element i of rank r for the "acc32" case: magnitudes in [1/8, 8), both signs,
 * every bit the type has; n of them sum exactly in fp32 (at most 21 significant bits). */
static double acc_in(ncclDataType_t t, int r, size_t i)
{
    uint32_t m = mix((uint32_t)(r * 104729) ^ (uint32_t)i * 40503u);
    double v = ldexp(1.0 + (double)(m >> 8 & 0xffff) / 65536.0, (int)(m >> 4 & 7) - 3);
    return rnd(t, (m & 1) ? -v : v);
}

/* The scalar of ncclAvg as the library uses it: 1/n, double -> float -> the type. */
static double avg_scalar(ncclDataType_t t, int n)
{
    double s = 1.0 / n;
    return t == ncclFloat64 ? s : rnd(t, (double)(float)s);
}

/* Element i of the rank-order fold with every step rounded to the type. */
static double fold_ref(ncclDataType_t t, ncclRedOp_t op, int n, size_t i)
{
    double s = avg_scalar(t, n);
    double acc = op == ncclAvg ? rnd(t, bits_in(t, 0, i) * s) : bits_in(t, 0, i);
    for (int r = 1; r < n; r++) {
        double v = op == ncclAvg ? rnd(t, bits_in(t, r, i) * s) : bits_in(t, r, i);
        acc = rnd(t, acc + v);
    }
    return acc;
}

/* ---- running calls on one or several local communicators ---- */

typedef struct {
    ncclComm_t *comms;
    int nlocal, first, nranks; /* comms[j] is rank first + j */
    brt_rank_ctx_t *ctx;
    char *err;
    size_t errlen, used;
} env_t;

static void note(env_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(env_t *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (e->used + 2 < e->errlen) {
        int k = vsnprintf(e->err + e->used, e->errlen - e->used, fmt, ap);
        e->used += k > 0 ? (size_t)k : 0;
        e->used = e->used < e->errlen ? e->used : e->errlen - 1;
    }
    va_end(ap);
}

typedef enum { F_AR, F_AR_INPLACE, F_RS, F_REDUCE, F_RS_INPLACE, F_REDUCE_INPLACE } fn_t;
static const char *const fn_names[] = {
    "AllReduce", "AllReduce (in place)",     "ReduceScatter",
    "Reduce",    "ReduceScatter (in place)", "Reduce (in place)"};

static int is_rs(fn_t fn)
{
    return fn == F_RS || fn == F_RS_INPLACE;
}

/* Where rank r's output starts in its out buffer (an in-place ReduceScatter's is block r). */
static size_t out_off(fn_t fn, ncclDataType_t t, int r, size_t count)
{
    return fn == F_RS_INPLACE ? (size_t)r * count * brt_fp_size(t) : 0;
}

/* Per-call config: the selection, and the option (det or acc32) when asked for. */
typedef struct {
    ncclCollConfig_t c;
    ncclConfigExt_t proto, opt;
} callcfg_t;

static ncclCollConfig_t *callcfg(callcfg_t *cc, const sel_t *s, int option, int val)
{
    ncclCollConfig_t init = NCCL_COLLCONFIG_INITIALIZER;
    cc->c = init;
    cc->c.forceAlgSelection = 0;
    cc->c.algSelection = s->algos;
    if (s->nch > 0) {
        cc->c.minCTAs = cc->c.maxCTAs = s->nch;
    }
    memset(&cc->proto, 0, sizeof(cc->proto));
    memset(&cc->opt, 0, sizeof(cc->opt));
    if (s->protos != NULL) {
        cc->proto.key.vendorId = BRAID_VENDOR_ID;
        cc->proto.key.optionId = BRAID_OPT_PROTO;
        cc->proto.val.s = s->protos;
        cc->c.ext = &cc->proto;
    }
    if (option != 0) {
        cc->opt.key.vendorId = BRAID_VENDOR_ID;
        cc->opt.key.optionId = option;
        cc->opt.val.i = val;
        cc->opt.next = cc->c.ext;
        cc->c.ext = &cc->opt;
    }
    return &cc->c;
}

/* One call on every local communicator (grouped when there are several). bufs[j] holds
 * rank first + j's input, then its output. Returns 0, or 2 after a failed call. */
static int run_call(env_t *e, fn_t fn, ncclDataType_t t, ncclRedOp_t op, size_t count, void **in,
                    void **out, ncclCollConfig_t *c)
{
    ncclResult_t res = ncclSuccess, end;
    int root = e->nranks - 1;
    if (e->nlocal > 1) {
        ncclGroupStart();
    }
    for (int j = 0; j < e->nlocal && res == ncclSuccess; j++) {
        ncclComm_t comm = e->comms[j];
        switch (fn) {
        case F_AR: res = ncclAllReduceConfig(in[j], out[j], count, t, op, comm, NULL, c); break;
        case F_AR_INPLACE:
            res = ncclAllReduceConfig(out[j], out[j], count, t, op, comm, NULL, c);
            break;
        case F_RS: res = ncclReduceScatterConfig(in[j], out[j], count, t, op, comm, NULL, c); break;
        case F_RS_INPLACE:
            res = ncclReduceScatterConfig(out[j],
                                          (char *)out[j] + out_off(fn, t, e->first + j, count),
                                          count, t, op, comm, NULL, c);
            break;
        case F_REDUCE_INPLACE:
            res = ncclReduceConfig(out[j], out[j], count, t, op, root, comm, NULL, c);
            break;
        default: res = ncclReduceConfig(in[j], out[j], count, t, op, root, comm, NULL, c); break;
        }
    }
    end = e->nlocal > 1 ? ncclGroupEnd() : ncclSuccess;
    if (res != ncclSuccess || end != ncclSuccess) {
        note(e, "rank %d: %s of %zu %d (op %d) failed (%d/%d): %s\n", e->first, fn_names[fn], count,
             (int)t, (int)op, (int)res, (int)end, ncclGetLastError(e->comms[0]));
        return 2;
    }
    return 0;
}

/* Elements of rank r's output and where they start in the full reduction. */
static size_t out_span(fn_t fn, int n, int r, size_t count, size_t *at_p)
{
    *at_p = is_rs(fn) ? (size_t)r * count : 0;
    if ((fn == F_REDUCE || fn == F_REDUCE_INPLACE) && r != n - 1) {
        return 0;
    }
    return count;
}

/* Input and output buffers of every local rank (each NULL when not made). */
static void bufs_free(env_t *e, void **in, void **out)
{
    for (int j = 0; j < e->nlocal; j++) {
        free(in[j]);
        free(out[j]);
    }
}

static int bufs_alloc(env_t *e, void **in, void **out, size_t bytes)
{
    int bad = 0;
    for (int j = 0; j < e->nlocal; j++) {
        in[j] = malloc(bytes);
        out[j] = malloc(bytes);
        bad |= in[j] == NULL || out[j] == NULL;
    }
    if (bad) {
        note(e, "out of memory\n");
        bufs_free(e, in, out);
    }
    return bad;
}

/* ---- TCase "bits" ---- */

static const ncclDataType_t bits_types[] = {ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat16};

/* Fill the inputs (and, in place, the outputs) of the local ranks. */
static void fill(env_t *e, fn_t fn, ncclDataType_t t, size_t count, void **in, void **out,
                 double (*val)(ncclDataType_t, int, size_t))
{
    size_t nin = is_rs(fn) ? count * (size_t)e->nranks : count;
    for (int j = 0; j < e->nlocal; j++) {
        for (size_t i = 0; i < nin; i++) {
            brt_fp_put(t, in[j], i, val(t, e->first + j, i));
        }
        memset(out[j], 0x5a, nin * brt_fp_size(t));
        if (fn == F_AR_INPLACE || fn == F_RS_INPLACE || fn == F_REDUCE_INPLACE) {
            memcpy(out[j], in[j], nin * brt_fp_size(t));
        }
    }
}

/* Compare every local output with the reference bit for bit; returns elements that differ. */
static size_t compare(env_t *e, fn_t fn, ncclDataType_t t, ncclRedOp_t op, size_t count, void **out,
                      int report, const char *what)
{
    size_t bad = 0;
    unsigned char want[8];
    for (int j = 0; j < e->nlocal; j++) {
        int r = e->first + j;
        size_t at, span = out_span(fn, e->nranks, r, count, &at);
        const char *o = (const char *)out[j] + out_off(fn, t, r, count);
        for (size_t i = 0; i < span; i++) {
            double w = fold_ref(t, op, e->nranks, at + i);
            brt_fp_put(t, want, 0, w);
            if (memcmp(o + i * brt_fp_size(t), want, brt_fp_size(t)) != 0) {
                if (report && bad < 3) {
                    note(e,
                         "rank %d: %s %s type %d op %d count %zu: element %zu is %.17g, the "
                         "rank-order fold %.17g\n",
                         r, what, fn_names[fn], (int)t, (int)op, count, at + i, brt_fp_get(t, o, i), w);
                }
                bad++;
            }
        }
    }
    return bad;
}

static int bits_body(env_t *e)
{
    size_t maxc = counts[NCOUNTS - 1], bytes = maxc * (size_t)e->nranks * 8;
    void *in[BRT_MAX_RANKS], *out[BRT_MAX_RANKS];
    int bad = 0;
    size_t default_diff = 0;

    if (bufs_alloc(e, in, out, bytes) != 0) {
        return 2;
    }
    for (size_t ti = 0; ti < sizeof(bits_types) / sizeof(bits_types[0]) && bad < 2; ti++) {
        ncclDataType_t t = bits_types[ti];
        for (int fi = F_AR; fi <= F_REDUCE_INPLACE && bad < 2; fi++) {
            for (int oi = 0; oi < 2 && bad < 2; oi++) {
                ncclRedOp_t op = oi ? ncclAvg : ncclSum;
                for (int ci = 0; ci < NCOUNTS && bad < 2; ci++) {
                    size_t count = counts[ci];
                    if (count > 1003 && t != ncclFloat32) {
                        continue; /* one type above the FIFO size is enough */
                    }
                    for (int si = 0; si < NSELS && bad < 2; si++) {
                        callcfg_t cc;
                        if (cfg.env && si != 0 && si != 2 && si != 5) {
                            continue; /* --env: the variable's path, a few selections */
                        }
                        brt_doing(e->ctx, "%s type %d op %d count %zu selection %d", fn_names[fi],
                                  (int)t, (int)op, count, si);
                        fill(e, (fn_t)fi, t, count, in, out, bits_in);
                        ncclCollConfig_t *c =
                            callcfg(&cc, &sels[si], cfg.env ? 0 : BRAID_OPT_DETERMINISTIC, 1);
                        if ((bad = run_call(e, (fn_t)fi, t, op, count, in, out, c)) != 0) {
                            break;
                        }
                        if (compare(e, (fn_t)fi, t, op, count, out, 1, "deterministic") != 0) {
                            bad = 1;
                        }
                        if (cfg.env || t != ncclFloat32 || fi != F_AR || count < 1003) {
                            continue;
                        }
                        /* The same call on the default path: the inputs are worth testing
                         * only if the order of a sum changes its bits. */
                        fill(e, (fn_t)fi, t, count, in, out, bits_in);
                        c = callcfg(&cc, &sels[si], BRAID_OPT_DETERMINISTIC, 0);
                        if ((bad = run_call(e, (fn_t)fi, t, op, count, in, out, c)) != 0) {
                            break;
                        }
                        default_diff += compare(e, (fn_t)fi, t, op, count, out, 0, "default");
                    }
                }
            }
        }
    }
    if (bad == 0 && !cfg.env && e->nranks >= 3 && default_diff == 0) {
        note(e,
             "rank %d: the default path gave the rank-order fold's bits everywhere: the "
             "inputs do not show that order matters\n",
             e->first);
        bad = 1;
    }
    if (bad == 0 && !cfg.env && e->first == 0) {
        printf("mp_det: %d ranks: default-path float32 AllReduce elements that differ from the "
               "rank-order fold, over %d selections: %zu\n",
               e->nranks, NSELS, default_diff);
    }
    bufs_free(e, in, out);
    return bad;
}

/* ---- TCase "acc32" ---- */

static const ncclDataType_t acc_types[] = {ncclBfloat16, ncclFloat16, ncclFloat8e4m3,
                                           ncclFloat8e5m2};
#define ACC_COUNT 4099

/* The distance from x to the exact value w in units of the type's last place at w. */
static double ulps(ncclDataType_t t, double x, double w)
{
    int mbits = t == ncclBfloat16 ? 7 : t == ncclFloat16 ? 10 : t == ncclFloat8e4m3 ? 3 : 2;
    int emin = t == ncclBfloat16 ? -126 : t == ncclFloat16 ? -14 : t == ncclFloat8e4m3 ? -6 : -14;
    int e;
    frexp(w, &e);
    e = e - 1 < emin ? emin : e - 1;
    return fabs(x - w) / ldexp(1.0, e - mbits);
}

/* Max and mean error (ulps) of the local outputs against the exact sum (or average). */
static void acc_errors(env_t *e, fn_t fn, ncclDataType_t t, ncclRedOp_t op, void **out,
                       double *max_p, double *mean_p, size_t *wrong_p)
{
    double mx = 0.0, sum = 0.0;
    size_t k = 0, wrong = 0;
    for (int j = 0; j < e->nlocal; j++) {
        size_t at, span = out_span(fn, e->nranks, e->first + j, ACC_COUNT, &at);
        for (size_t i = 0; i < span; i++) {
            double exact = 0.0;
            for (int r = 0; r < e->nranks; r++) {
                exact += acc_in(t, r, at + i); /* exact: 21 significant bits at most */
            }
            if (op == ncclAvg) {
                exact /= e->nranks; /* power-of-two rank counts only: exact */
            }
            double got = brt_fp_get(t, out[j], i), u = ulps(t, got, exact);
            mx = u > mx ? u : mx;
            sum += u;
            k++;
            wrong += got != rnd(t, exact);
        }
    }
    *max_p = mx;
    *mean_p = k ? sum / (double)k : 0.0;
    *wrong_p = wrong;
}

static int acc_body(env_t *e)
{
    size_t bytes = (size_t)ACC_COUNT * (size_t)e->nranks * 2;
    void *in[BRT_MAX_RANKS], *out[BRT_MAX_RANKS];
    int bad = 0, pow2 = (e->nranks & (e->nranks - 1)) == 0;

    if (bufs_alloc(e, in, out, bytes) != 0) {
        return 2;
    }
    for (size_t ti = 0; ti < sizeof(acc_types) / sizeof(acc_types[0]) && bad < 2; ti++) {
        ncclDataType_t t = acc_types[ti];
        for (int fi = F_AR; fi <= F_REDUCE && bad < 2; fi++) {
            for (int oi = 0; oi < 1 + pow2 && bad < 2; oi++) {
                ncclRedOp_t op = oi ? ncclAvg : ncclSum;
                double mx32, mean32, mxd, meand;
                size_t wrong32, wrongd;
                callcfg_t cc;
                const sel_t *any = &sels[0];
                brt_doing(e->ctx, "acc32 %s type %d op %d", fn_names[fi], (int)t, (int)op);
                fill(e, (fn_t)fi, t, ACC_COUNT, in, out, acc_in);
                if ((bad = run_call(e, (fn_t)fi, t, op, ACC_COUNT, in, out,
                                    callcfg(&cc, any, BRAID_OPT_ACCUMULATE_FP32, 1))) != 0) {
                    break;
                }
                acc_errors(e, (fn_t)fi, t, op, out, &mx32, &mean32, &wrong32);
                fill(e, (fn_t)fi, t, ACC_COUNT, in, out, acc_in);
                if ((bad = run_call(e, (fn_t)fi, t, op, ACC_COUNT, in, out,
                                    callcfg(&cc, any, BRAID_OPT_ACCUMULATE_FP32, 0))) != 0) {
                    break;
                }
                acc_errors(e, (fn_t)fi, t, op, out, &mxd, &meand, &wrongd);
                if (e->first == 0 && fi == F_AR) {
                    printf("mp_acc32: %d ranks, %s %s of type %d: fp32 accumulation max %.3f "
                           "mean %.4f ulp (%zu not correctly rounded); per-step rounding max "
                           "%.3f mean %.4f ulp (%zu not correctly rounded)\n",
                           e->nranks, fn_names[fi], op == ncclAvg ? "avg" : "sum", (int)t, mx32,
                           mean32, wrong32, mxd, meand, wrongd);
                }
                if (wrong32 != 0 || mx32 > 0.5) {
                    note(e,
                         "rank %d: %s type %d op %d with fp32 accumulation: %zu elements not "
                         "the exact result rounded once (max error %.3f ulp)\n",
                         e->first, fn_names[fi], (int)t, (int)op, wrong32, mx32);
                    bad = 1;
                }
                if (e->nranks >= 4 && e->first == e->nranks - 1 && wrongd == 0) {
                    note(e,
                         "rank %d: %s type %d op %d: per-step rounding was exact everywhere; "
                         "the sums are not long enough to show the difference\n",
                         e->first, fn_names[fi], (int)t, (int)op);
                    bad = 1;
                }
            }
        }
    }
    bufs_free(e, in, out);
    return bad;
}

/* ---- TCase "mixed" ---- */

#define MIX_COUNT 1003
#define MIX_ROUNDS 3

/* One group per round, on every local rank: a Send to the next rank and a Receive from the
 * previous one (the program's own messages), a deterministic AllReduce, and another Send
 * and Receive, so the owner fold's messages share connections with the program's, before
 * and after them in call order. Both results must be right on every round. */
static int mixed_body(env_t *e)
{
    int n = e->nranks, bad = 0;
    size_t bytes = MIX_COUNT * sizeof(float);
    void *in[BRT_MAX_RANKS], *out[BRT_MAX_RANKS], *p2p[2 * BRT_MAX_RANKS];
    if (bufs_alloc(e, in, out, bytes) != 0) {
        return 2;
    }
    if (bufs_alloc(e, p2p, p2p + e->nlocal, 2 * bytes) != 0) {
        bufs_free(e, in, out);
        return 2;
    }
    for (int round = 0; round < MIX_ROUNDS && bad == 0; round++) {
        callcfg_t cc;
        ncclCollConfig_t *c = callcfg(&cc, &sels[0], BRAID_OPT_DETERMINISTIC, 1);
        fill(e, F_AR, ncclFloat32, MIX_COUNT, in, out, bits_in);
        ncclResult_t res = ncclGroupStart();
        for (int j = 0; j < e->nlocal && res == ncclSuccess; j++) {
            int r = e->first + j;
            float *send = p2p[e->nlocal + j], *recv = p2p[j];
            for (int i = 0; i < 2 * MIX_COUNT; i++) {
                send[i] = (float)(r * 100000 + round * 10000 + i);
            }
            ncclComm_t comm = e->comms[j];
            res = ncclSend(send, MIX_COUNT, ncclFloat32, (r + 1) % n, comm, NULL);
            res = res ? res : ncclRecv(recv, MIX_COUNT, ncclFloat32, (r + n - 1) % n, comm, NULL);
            res = res ? res
                      : ncclAllReduceConfig(in[j], out[j], MIX_COUNT, ncclFloat32, ncclSum, comm,
                                            NULL, c);
            res = res ? res
                      : ncclSend(send + MIX_COUNT, MIX_COUNT, ncclFloat32, (r + 1) % n, comm, NULL);
            res = res ? res
                      : ncclRecv(recv + MIX_COUNT, MIX_COUNT, ncclFloat32, (r + n - 1) % n, comm,
                                 NULL);
        }
        ncclResult_t end = ncclGroupEnd();
        if (res != ncclSuccess || end != ncclSuccess) {
            note(e, "rank %d: round %d failed (%d/%d): %s\n", e->first, round, (int)res, (int)end,
                 ncclGetLastError(e->comms[0]));
            bad = 2;
            break;
        }
        bad |= compare(e, F_AR, ncclFloat32, ncclSum, MIX_COUNT, out, 1, "mixed") != 0;
        for (int j = 0; j < e->nlocal; j++) {
            int from = (e->first + j + n - 1) % n;
            const float *recv = p2p[j];
            for (int i = 0; i < 2 * MIX_COUNT && !bad; i++) {
                if (recv[i] != (float)(from * 100000 + round * 10000 + i)) {
                    note(e, "rank %d: round %d: received element %d is %g\n", e->first + j, round,
                         i, (double)recv[i]);
                    bad = 1;
                }
            }
        }
    }
    bufs_free(e, in, out);
    bufs_free(e, p2p, p2p + e->nlocal);
    return bad;
}

/* ---- layouts ---- */

#define ERR_LEN 8192

static int (*body_fn)(env_t *e);

static int rank_body(brt_rank_ctx_t *ctx)
{
    ncclComm_t comm = NULL;
    char err[ERR_LEN];
    env_t e = {.comms = &comm,
               .nlocal = 1,
               .first = ctx->rank,
               .nranks = ctx->nranks,
               .ctx = ctx,
               .err = err,
               .errlen = sizeof(err),
               .used = 0};
    err[0] = '\0';
    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    int bad = body_fn(&e);
    if (bad) {
        brt_fail(ctx, "%s", err);
    }
    if (bad == 2) {
        ncclCommAbort(comm);
        return 1;
    }
    if (ncclCommDestroy(comm) != ncclSuccess) {
        brt_fail(ctx, "ncclCommDestroy: %s", ncclGetLastError(NULL));
        bad = 1;
    }
    return bad;
}

static void run_layout(int n, int (*fn)(env_t *e))
{
    double timeout = cfg.timeout * brt_time_scale();
    char out[4 * ERR_LEN];
    int bad = 0;

    body_fn = fn;
    out[0] = '\0';
    if (cfg.mode == BRT_MODE_PROC) {
        bad = brt_procs_run(n, rank_body, NULL, timeout, out, sizeof(out));
    } else if (cfg.mode == BRT_MODE_THREADS) {
        bad = brt_threads_run(n, rank_body, NULL, timeout, out, sizeof(out));
    } else {
        ncclComm_t comms[BRT_MAX_RANKS];
        brt_report_t rep;
        memset(&rep, 0, sizeof(rep));
        brt_watchdog_start(timeout, &rep);
        ck_assert_int_eq(ncclCommInitAll(comms, n, NULL), ncclSuccess);
        brt_rank_ctx_t ctx = {.rank = 0, .nranks = n, .report = &rep, .all = &rep};
        env_t e = {.comms = comms,
                   .nlocal = n,
                   .first = 0,
                   .nranks = n,
                   .ctx = &ctx,
                   .err = out,
                   .errlen = sizeof(out),
                   .used = 0};
        bad = fn(&e);
        for (int r = 0; r < n; r++) {
            if (bad == 2) {
                ncclCommAbort(comms[r]);
            } else {
                ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
            }
        }
        brt_watchdog_stop();
    }
    ck_assert_msg(!bad, "%d ranks:\n%s", n, brt_clip(out, 3000));
}

START_TEST(test_det_bits_every_selection)
{
    run_layout(cfg.ranks[_i], bits_body);
}
END_TEST

START_TEST(test_mixed_with_sends_in_one_group)
{
    run_layout(cfg.ranks[_i], mixed_body);
}
END_TEST

START_TEST(test_acc32_rounds_once)
{
    run_layout(cfg.ranks[_i], acc_body);
}
END_TEST

static int parse_args(int argc, char **argv)
{
    cfg.mode = BRT_MODE_PROC;
    cfg.timeout = 120;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (strcmp(k, "--env") == 0) {
            cfg.env = 1;
            continue;
        }
        i++;
        if (brt_layout_option(k, v, &cfg.mode, cfg.ranks, &cfg.nranks_list)) {
            continue;
        } else if (strcmp(k, "--timeout") == 0) {
            cfg.timeout = atof(v);
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
    Suite *s = suite_create("mp_det");
    TCase *tc = tcase_create("bits");
    tcase_set_timeout(tc, cfg.timeout * brt_time_scale() + 60);
    tcase_add_loop_test(tc, test_det_bits_every_selection, 0, cfg.nranks_list);
    suite_add_tcase(s, tc);
    tc = tcase_create("mixed");
    tcase_set_timeout(tc, cfg.timeout * brt_time_scale() + 60);
    tcase_add_loop_test(tc, test_mixed_with_sends_in_one_group, 0, cfg.nranks_list);
    suite_add_tcase(s, tc);
    tc = tcase_create("acc32");
    tcase_set_timeout(tc, cfg.timeout * brt_time_scale() + 60);
    tcase_add_loop_test(tc, test_acc32_rounds_once, 0, cfg.nranks_list);
    suite_add_tcase(s, tc);
    return brt_suite_run(s);
}
