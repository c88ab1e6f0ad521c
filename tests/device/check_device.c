/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "device": the CUDA kernels' interpreter (core/device/dev_prims.h) run on the
 * host, one thread per block (dev_emu.c), over every schedule plan makes for the device:
 * Ring AllReduce, Broadcast, Reduce, AllGather and ReduceScatter, Tree AllReduce,
 * Broadcast and Reduce; 2, 3, 4 and 8 ranks on one, two-per or one-per host (trees with
 * up to three children); Simple, LL and LL128; sizes 0, 1, odd and several FIFOs' worth
 * (slots reused); in and out of place, aligned and not; two work items in a row on the
 * same connections and two launches in a row (step numbers carried over). Results must
 * equal, bit for bit, the host executor's arithmetic folded in the schedule's order (on
 * random bits), and, for every type and op, brt_data's exact references. Also: COPY and
 * LOCAL items, a mismatched call (BR_DEV_MISMATCH naming the peer), the abort flag and the
 * timeout ending a wait, and a work item the kernels do not know.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brt_data.h"
#include "dev_emu.h"
#include "dev_prims.h"
#include "exec_reduce.h"

#define GUARD 64
#define GUARD_BYTE 0xa5

/* One collective case. */
typedef struct {
    br_func_t func;
    int algo, proto;
    ncclDataType_t type;
    int op;         /* BRT_SUM .. BRT_PREMULSUM */
    int dev_scalar; /* PreMulSum's scalar from "device" memory */
    int brt;        /* inputs from brt_data, checked against its exact reference too */
    int n, nch, layout;
    size_t count;
    int root, inplace, shift;
    size_t slot_bytes;
    int nops;            /* work items per block, run in a row */
    int nlaunch;         /* launches in a row on the same connections */
    uint64_t start_step; /* connections' first step number */
    int threads;         /* threads per block (0: 1) */
} ccase_t;

/* One operation's buffers. */
typedef struct {
    unsigned char *sbase[EMU_MAXR], *rbase[EMU_MAXR];
    const char *send[EMU_MAXR];
    char *recv[EMU_MAXR];
    unsigned char *in_copy[EMU_MAXR]; /* the inputs as they were */
    size_t in_bytes, out_bytes;
    br_op_t op;
    unsigned char scalar[8];
} opbuf_t;

static void layout_hosts(int layout, int n, uint64_t *hosts)
{
    for (int r = 0; r < n; r++) {
        hosts[r] = layout == 0 ? 0 : layout == 1 ? (uint64_t)r : (uint64_t)(r / 2);
    }
}

static int is_reduction(br_func_t f)
{
    return f == BR_FUNC_ALLREDUCE || f == BR_FUNC_REDUCESCATTER || f == BR_FUNC_REDUCE;
}

static void describe(const ccase_t *k, char *msg, size_t len)
{
    snprintf(msg, len,
             "%s/%s/%s n=%d nch=%d layout=%d %s %s%s count=%zu root=%d %s shift=%d slot=%zu "
             "ops=%d launches=%d start_step=%llu threads=%d",
             br_func_name(k->func), br_algo_name(k->algo), br_proto_name(k->proto), k->n, k->nch,
             k->layout, brt_type_info(k->type)->name, brt_op_name(k->op),
             k->dev_scalar ? "(device scalar)" : "", k->count, k->root,
             k->inplace ? "in-place" : "out-of-place", k->shift, k->slot_bytes, k->nops, k->nlaunch,
             (unsigned long long)k->start_step, k->threads > 0 ? k->threads : 1);
}

static void op_setup(const ccase_t *k, uint64_t seq, opbuf_t *B)
{
    static const ncclRedOp_t reds[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
    br_op_t *op = &B->op;
    size_t ts = br_type_size(k->type);
    memset(op, 0, sizeof(*op));
    op->func = k->func;
    op->count = k->count;
    op->type = k->type;
    op->root = k->root;
    op->seq = seq;
    op->algo = k->algo;
    op->proto = k->proto;
    op->nchannels = k->nch;
    if (k->op == BRT_PREMULSUM) {
        brt_premul_scalar(k->type, B->scalar);
        br_redop_premulsum(&op->redop, k->type, B->scalar);
    } else {
        br_redop_builtin(&op->redop, reds[k->op], k->type, k->n);
    }
    br_dev_conn_t probe;
    probe.slot_bytes = k->slot_bytes;
    op->chunk_bytes = br_dev_slot_payload(&probe, k->proto) / 64 * 64;
    B->in_bytes = k->count * ts * (k->func == BR_FUNC_REDUCESCATTER ? (size_t)k->n : 1);
    B->out_bytes = k->count * ts * (k->func == BR_FUNC_ALLGATHER ? (size_t)k->n : 1);
}

/* Buffers with guards, inputs filled (seed), outputs poisoned. */
static void op_alloc(const ccase_t *k, opbuf_t *B, uint32_t seed)
{
    size_t ts = br_type_size(k->type);
    for (int r = 0; r < k->n; r++) {
        size_t sb = B->in_bytes + 2 * GUARD + 16, rb = B->out_bytes + 2 * GUARD + 16;
        B->sbase[r] = (unsigned char *)aligned_alloc(64, (sb + 63) / 64 * 64);
        B->rbase[r] = (unsigned char *)aligned_alloc(64, (rb + 63) / 64 * 64);
        ck_assert(B->sbase[r] != NULL && B->rbase[r] != NULL);
        memset(B->sbase[r], GUARD_BYTE, sb);
        memset(B->rbase[r], GUARD_BYTE, rb);
        char *s = (char *)B->sbase[r] + GUARD + k->shift;
        char *d = (char *)B->rbase[r] + GUARD + k->shift;
        if (k->brt && is_reduction(k->func)) {
            brt_fill_inputs(k->type, k->op, seed, k->n, r, s, 0, B->in_bytes / ts);
        } else {
            for (size_t i = 0; i < B->in_bytes; i++) {
                s[i] = (char)(brt_mix64(((uint64_t)seed << 40) ^ ((uint64_t)r << 32) ^ i) >> 24);
            }
        }
        if (k->inplace) {
            if (k->func == BR_FUNC_ALLGATHER) {
                memcpy(d + (size_t)r * B->in_bytes, s, B->in_bytes);
                s = d + (size_t)r * B->in_bytes;
            } else if (k->func == BR_FUNC_REDUCESCATTER) {
                d = s + (size_t)r * B->out_bytes;
            } else {
                d = s;
            }
        }
        B->send[r] = s;
        B->recv[r] = d;
        B->in_copy[r] = (unsigned char *)malloc(B->in_bytes + 1);
        memcpy(B->in_copy[r], s, B->in_bytes);
    }
}

static void op_free(const ccase_t *k, opbuf_t *B)
{
    for (int r = 0; r < k->n; r++) {
        free(B->sbase[r]);
        free(B->rbase[r]);
        free(B->in_copy[r]);
    }
}

static int guards_ok(const unsigned char *base, size_t lo, size_t hi, size_t total)
{
    for (size_t i = 0; i < total; i++) {
        if ((i < lo || i >= hi) && base[i] != GUARD_BYTE) {
            return 0;
        }
    }
    return 1;
}

/* Is the element at p (of type t) a NaN? */
static int is_nan(ncclDataType_t t, const unsigned char *p)
{
    uint64_t v = 0;
    memcpy(&v, p, br_type_size(t));
    switch (t) {
    case ncclFloat16: return (v & 0x7c00) == 0x7c00 && (v & 0x3ff) != 0;
    case ncclBfloat16: return (v & 0x7f80) == 0x7f80 && (v & 0x7f) != 0;
    case ncclFloat32: return (v & 0x7f800000) == 0x7f800000 && (v & 0x7fffff) != 0;
    case ncclFloat64:
        return (v & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (v & 0xfffffffffffffull);
    case ncclFloat8e4m3: return (v & 0x7f) == 0x7f;
    case ncclFloat8e5m2: return (v & 0x7c) == 0x7c && (v & 3) != 0;
    default: return 0;
    }
}

/*
 * The first byte where got and want differ, or -1. Elements of type t: two NaNs are equal
 * whatever their sign and payload (which NaN operand an addition returns is the compiler's
 * choice of operand order on the host, and GPUs return a canonical NaN).
 */
static int first_diff_typed(ncclDataType_t t, const void *got, const void *want, size_t n)
{
    const unsigned char *x = (const unsigned char *)got, *y = (const unsigned char *)want;
    size_t ts = br_type_size(t);
    for (size_t e = 0; e + ts <= n; e += ts) {
        if (memcmp(x + e, y + e, ts) != 0 && !(is_nan(t, x + e) && is_nan(t, y + e))) {
            for (size_t i = e;; i++) {
                if (x[i] != y[i]) {
                    return (int)i;
                }
            }
        }
    }
    return -1;
}

static int first_diff(const void *a, const void *b, size_t n)
{
    return first_diff_typed(ncclUint8, a, b, n);
}

/* Check one operation's results; 0 or 1 with msg. */
static int op_verify(const ccase_t *k, emu_fabric_t *f, opbuf_t *B, char *msg, size_t len)
{
    size_t ts = br_type_size(k->type), cb = k->count * ts;
    unsigned char *want = (unsigned char *)calloc(1, B->out_bytes + B->in_bytes + 16);
    const void *in[EMU_MAXR];
    int bad = -1, at = -1;
    char extra[200] = "";

    for (int r = 0; r < k->n; r++) {
        in[r] = B->in_copy[r];
    }
    for (int r = 0; r < k->n && bad < 0; r++) {
        int writes = 1;
        switch (k->func) {
        case BR_FUNC_ALLREDUCE:
            for (int c = 0; c < k->nch; c++) {
                emu_reference(f, &B->op, c, in, r, want);
            }
            break;
        case BR_FUNC_REDUCE:
            writes = r == k->root;
            for (int c = 0; c < k->nch && writes; c++) {
                emu_reference(f, &B->op, c, in, r, want);
            }
            break;
        case BR_FUNC_REDUCESCATTER:
            for (int c = 0; c < k->nch; c++) {
                emu_reference(f, &B->op, c, in, r, want);
            }
            break;
        case BR_FUNC_BROADCAST: memcpy(want, B->in_copy[k->root], cb); break;
        default:
            for (int q = 0; q < k->n; q++) {
                memcpy(want + (size_t)q * cb, B->in_copy[q], cb);
            }
            break;
        }
        if (writes) {
            at = is_reduction(k->func) ? first_diff_typed(k->type, B->recv[r], want, B->out_bytes)
                                       : first_diff(B->recv[r], want, B->out_bytes);
        } else if (k->inplace) {
            at = first_diff(B->recv[r], B->in_copy[r], B->out_bytes);
        } else {
            /* A rank that writes nothing leaves its output alone. */
            at = guards_ok(B->rbase[r], 0, 0, B->out_bytes + 2 * GUARD) ? -1 : 0;
        }
        if (at < 0 && k->brt && writes && is_reduction(k->func)) {
            size_t first = k->func == BR_FUNC_REDUCESCATTER ? (size_t)r * k->count : 0;
            if (brt_check_reduced(k->type, k->op, 1, k->n, B->recv[r], first, B->out_bytes / ts,
                                  extra, sizeof(extra)) != 0) {
                at = 0;
            }
        }
        if (at < 0 && !k->inplace && first_diff(B->send[r], B->in_copy[r], B->in_bytes) >= 0) {
            snprintf(extra, sizeof(extra), "input changed");
            at = 0;
        }
        if (at < 0 && !k->inplace) {
            size_t lo = GUARD + (size_t)k->shift;
            if (!guards_ok(B->rbase[r], lo, lo + (writes ? B->out_bytes : 0),
                           B->out_bytes + 2 * GUARD + 16)) {
                snprintf(extra, sizeof(extra), "output guard overwritten");
                at = 0;
            }
        }
        if (at >= 0) {
            bad = r;
        }
    }
    if (bad >= 0) {
        char d[400];
        describe(k, d, sizeof(d));
        snprintf(msg, len, "%s: rank %d byte %d differs (%02x, want %02x) %s", d, bad, at,
                 (unsigned char)B->recv[bad][at], want[at], extra);
    }
    free(want);
    return bad >= 0;
}

/* Run a collective case: 0, or 1 with what failed in msg. */
static int coll_case(const ccase_t *k, char *msg, size_t len)
{
    uint64_t hosts[EMU_MAXR];
    emu_fabric_t f;
    int fail = 0;

    layout_hosts(k->layout, k->n, hosts);
    emu_fabric_init(&f, k->n, k->nch, hosts, k->slot_bytes);
    f.start_step = k->start_step;
    for (int l = 0; l < k->nlaunch && !fail; l++) {
        opbuf_t B[2];
        br_dev_work_t works[2 * EMU_MAXR * EMU_MAXCH];
        br_dev_block_t blocks[EMU_MAXR * EMU_MAXCH];
        int nb = 0, nw = 0;
        emu_launch_t E;

        for (int o = 0; o < k->nops; o++) {
            op_setup(k, (uint64_t)(l * 2 + o) * 7, &B[o]);
            op_alloc(k, &B[o], (uint32_t)(l * 2 + o + 1));
        }
        for (int r = 0; r < k->n; r++) {
            for (int c = 0; c < k->nch; c++) {
                br_dev_block_t *b = &blocks[nb];
                b->first = (uint32_t)nw;
                b->nworks = 0;
                b->rank = r;
                b->channel = c;
                for (int o = 0; o < k->nops; o++) {
                    br_dev_work_t *w = &works[nw];
                    if (emu_work_fill(&f, &B[o].op, r, c, B[o].send[r], B[o].recv[r], w)) {
                        if (k->dev_scalar) {
                            w->scalar_dev = B[o].scalar;
                            w->scalar_f = 0; /* the device scalar must be the one used */
                            w->scalar_i = 0;
                        }
                        nw++;
                        b->nworks++;
                    }
                }
                nb += b->nworks > 0;
            }
        }
        emu_set_block_threads(k->threads > 0 ? k->threads : 1);
        uint32_t st = emu_launch(&E, blocks, nb, works, 20000000000ull, 0);
        emu_set_block_threads(1);
        if (st != BR_DEV_OK) {
            char d[400];
            describe(k, d, sizeof(d));
            snprintf(msg, len, "%s: launch %d failed: status %u rank %d peer %d step %llu", d, l,
                     st, E.report.rank, E.report.peer, (unsigned long long)E.report.step);
            fail = 1;
        }
        for (int o = 0; o < k->nops; o++) {
            if (!fail) {
                fail = op_verify(k, &f, &B[o], msg, len);
            }
            op_free(k, &B[o]);
        }
    }
    emu_fabric_free(&f);
    return fail;
}

/* ---- the collective matrix ---- */

static const struct {
    br_func_t func;
    int algo;
} combos[] = {
    {BR_FUNC_ALLREDUCE, BR_ALGO_RING}, {BR_FUNC_ALLREDUCE, BR_ALGO_TREE},
    {BR_FUNC_BROADCAST, BR_ALGO_RING}, {BR_FUNC_BROADCAST, BR_ALGO_TREE},
    {BR_FUNC_REDUCE, BR_ALGO_RING},    {BR_FUNC_REDUCE, BR_ALGO_TREE},
    {BR_FUNC_ALLGATHER, BR_ALGO_RING}, {BR_FUNC_REDUCESCATTER, BR_ALGO_RING},
};
#define NCOMBOS ((int)(sizeof(combos) / sizeof(combos[0])))

static const int rank_counts[] = {2, 3, 4, 8};
#define NRANKS ((int)(sizeof(rank_counts) / sizeof(rank_counts[0])))

/* Elements: none, one, odd, and several FIFOs (8 slots of 1 KiB) of 4-byte elements. */
static const size_t sizes[] = {0, 1, 37, 3001};
#define NSIZES ((int)(sizeof(sizes) / sizeof(sizes[0])))

/* Loop index i: one (collective, algorithm) x rank count; inside, every protocol and size,
 * with the other parameters rotated so each takes every value across the matrix. */
START_TEST(test_collectives)
{
    int combo = _i / NRANKS, n = rank_counts[_i % NRANKS], failures = 0, cases = 0;
    char msg[600] = "";
    for (int proto = 0; proto < BR_NUM_PROTOS; proto++) {
        for (int z = 0; z < NSIZES; z++) {
            int v = _i * 7 + proto * 5 + z;
            ccase_t k;
            memset(&k, 0, sizeof(k));
            k.func = combos[combo].func;
            k.algo = combos[combo].algo;
            k.proto = proto;
            k.n = n;
            k.nch = 1 + v % 2;
            k.layout = v % 3;
            k.count = sizes[z];
            k.root = (v * 5) % n;
            k.inplace = (v / 2) % 2;
            k.type = (v % 4 == 3) ? ncclFloat16 : (v % 4 == 2) ? ncclBfloat16 : ncclFloat32;
            k.op = is_reduction(k.func) ? v % 6 : BRT_SUM;
            k.shift = (v % 5 == 4) ? (int)br_type_size(k.type) : 0;
            k.slot_bytes = 1024;
            k.nops = 1 + (z == NSIZES - 1 || v % 3 == 0);
            k.nlaunch = 1 + (z == NSIZES - 1);
            /* Now and then across the end of an LL flag epoch (2^30 steps): flags wrap and
             * slots are cleared on their first use in the new epoch. */
            k.start_step = v % 4 == 1 ? (1ull << 30) - 5 : 0;
            /* Blocks of one thread, and of several that split the pieces and meet at the
             * block's barrier as a CUDA block's threads do. */
            k.threads = 1 + (v / 3) % 4;
            cases++;
            if (coll_case(&k, msg, sizeof(msg)) != 0) {
                fprintf(stderr, "FAIL %s\n", msg);
                failures++;
            }
        }
    }
    ck_assert_msg(failures == 0, "%d of %d cases failed; first: %s", failures, cases, msg);
}
END_TEST

/* Every type and op (PreMulSum with a host and a device scalar) on ring and tree
 * schedules, each protocol, on brt_data's inputs: exact and bit-identical to the host. */
START_TEST(test_types_ops)
{
    ncclDataType_t type = brt_type_at(_i);
    int failures = 0, cases = 0;
    char msg[600] = "";
    static const struct {
        br_func_t func;
        int algo, n, layout, proto;
    } shapes[] = {
        {BR_FUNC_ALLREDUCE, BR_ALGO_RING, 3, 0, BR_PROTO_SIMPLE},
        {BR_FUNC_ALLREDUCE, BR_ALGO_TREE, 5, 1, BR_PROTO_LL128},
        {BR_FUNC_REDUCESCATTER, BR_ALGO_RING, 4, 0, BR_PROTO_LL},
        {BR_FUNC_REDUCE, BR_ALGO_TREE, 4, 1, BR_PROTO_SIMPLE},
    };
    for (int op = 0; op <= BRT_NOPS; op++) {
        for (int s = 0; s < (int)(sizeof(shapes) / sizeof(shapes[0])); s++) {
            for (int brt = 0; brt < 2; brt++) {
                ccase_t k;
                memset(&k, 0, sizeof(k));
                k.func = shapes[s].func;
                k.algo = shapes[s].algo;
                k.proto = shapes[s].proto;
                k.n = shapes[s].n;
                k.layout = shapes[s].layout;
                k.nch = 1;
                k.type = type;
                /* op BRT_NOPS: PreMulSum with its scalar in device memory */
                k.op = op == BRT_NOPS ? BRT_PREMULSUM : op;
                k.dev_scalar = op == BRT_NOPS;
                k.brt = brt;
                k.count = 1001;
                k.root = 1;
                k.slot_bytes = 1024;
                k.nops = 1;
                k.nlaunch = 1;
                cases++;
                if (coll_case(&k, msg, sizeof(msg)) != 0) {
                    fprintf(stderr, "FAIL %s\n", msg);
                    failures++;
                }
            }
        }
    }
    ck_assert_msg(failures == 0, "%d of %d cases failed; first: %s", failures, cases, msg);
}
END_TEST

/* ---- COPY items ---- */

START_TEST(test_copy)
{
    static const size_t lens[] = {0, 1, 15, 16, 17, 1000, 65537};
    unsigned char *src = (unsigned char *)malloc(70000), *dst = (unsigned char *)malloc(70100);
    for (size_t i = 0; i < 70000; i++) {
        src[i] = (unsigned char)brt_mix64(i);
    }
    for (int l = 0; l < (int)(sizeof(lens) / sizeof(lens[0])); l++) {
        for (int so = 0; so < 3; so++) {
            for (int d0 = 0; d0 < 3; d0++) {
                int soff = so == 0 ? 0 : so == 1 ? 8 : 3, doff = d0 == 0 ? 0 : d0 == 1 ? 8 : 5;
                br_dev_work_t w[2];
                br_dev_block_t b[2];
                emu_launch_t E;
                size_t half = lens[l] / 2;
                memset(dst, GUARD_BYTE, 70100);
                memset(w, 0, sizeof(w));
                /* Two blocks, each its share, as the host cuts a copy. */
                for (int k = 0; k < 2; k++) {
                    w[k].kind = BR_DEV_WORK_COPY;
                    w[k].src = (const char *)src + soff + (k ? half : 0);
                    w[k].dst = (char *)dst + 64 + doff + (k ? half : 0);
                    w[k].bytes = k ? lens[l] - half : half;
                    b[k].first = (uint32_t)k;
                    b[k].nworks = 1;
                    b[k].rank = 0;
                    b[k].channel = k;
                }
                ck_assert_uint_eq(emu_launch(&E, b, 2, w, 0, 0), BR_DEV_OK);
                ck_assert_msg(memcmp(dst + 64 + doff, src + soff, lens[l]) == 0,
                              "copy of %zu bytes (offsets %d, %d) differs", lens[l], soff, doff);
                ck_assert(guards_ok(dst, 64 + (size_t)doff, 64 + (size_t)doff + lens[l], 70100));
            }
        }
    }
    free(src);
    free(dst);
}
END_TEST

/* A LOCAL item (a one-rank collective) of every type and reduction, at odd offsets:
 * post(pre(src)) as br_reduce computes it for one rank; an integer average divided by 3
 * too (a divisor only a LOCAL item built by hand has). */
START_TEST(test_local)
{
    ncclDataType_t type = brt_type_at(_i);
    size_t ts = br_type_size(type), count = 1001;
    unsigned char *src = (unsigned char *)malloc(count * ts + 16);
    unsigned char *dst = (unsigned char *)malloc(count * ts + 16);
    unsigned char *want = (unsigned char *)malloc(count * ts + 16);
    static const ncclRedOp_t reds[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
    for (size_t i = 0; i < count * ts + 16; i++) {
        src[i] = (unsigned char)(brt_mix64(i * 31 + (size_t)_i) >> 16);
    }
    for (int op = 0; op < 7; op++) {
        br_redop_t red;
        unsigned char scalar[8];
        if (op < 5) {
            br_redop_builtin(&red, reds[op], type, 1);
        } else if (op == 5) {
            brt_premul_scalar(type, scalar);
            br_redop_premulsum(&red, type, scalar);
        } else {
            br_redop_builtin(&red, ncclAvg, type, 3);
        }
        br_dev_work_t w;
        br_dev_block_t b = {0, 1, 0, 0};
        emu_launch_t E;
        memset(&w, 0, sizeof(w));
        w.kind = BR_DEV_WORK_LOCAL;
        w.type = (uint32_t)type;
        w.red = (uint32_t)red.kind;
        w.scalar_f = red.scalar_f;
        w.scalar_i = red.scalar_i;
        w.divisor = red.divisor;
        w.reduce = 1;
        w.count = count;
        w.bytes = count * ts;
        w.src = (const char *)src + ts;
        w.dst = (char *)dst + 2 * ts;
        memset(dst, GUARD_BYTE, count * ts + 16);
        br_reduce(want, NULL, w.src, count, &red, BR_REDUCE_POST);
        ck_assert_uint_eq(emu_launch(&E, &b, 1, &w, 0, 0), BR_DEV_OK);
        int at = first_diff_typed(type, w.dst, want, count * ts);
        ck_assert_msg(at < 0, "%s %s: byte %d differs", brt_type_info(type)->name,
                      br_red_kind_name(red.kind), at);
    }
    free(src);
    free(dst);
    free(want);
}
END_TEST

/* ---- failures ---- */

/* Build a Ring AllReduce of n ranks (Simple unless proto says otherwise) into works and
 * blocks; rank `skip` gets no block (a peer that never comes). */
static int build_allreduce(emu_fabric_t *f, opbuf_t *B, const ccase_t *k, int skip,
                           br_dev_work_t *works, br_dev_block_t *blocks)
{
    int nb = 0;
    op_setup(k, 41, B);
    op_alloc(k, B, 5);
    for (int r = 0; r < k->n; r++) {
        if (r == skip || !emu_work_fill(f, &B->op, r, 0, B->send[r], B->recv[r], &works[nb])) {
            continue;
        }
        blocks[nb].first = (uint32_t)nb;
        blocks[nb].nworks = 1;
        blocks[nb].rank = r;
        blocks[nb].channel = 0;
        nb++;
    }
    return nb;
}

static void failure_case(ccase_t *k, int proto)
{
    memset(k, 0, sizeof(*k));
    k->func = BR_FUNC_ALLREDUCE;
    k->algo = BR_ALGO_RING;
    k->proto = proto;
    k->type = ncclInt32;
    k->op = BRT_SUM;
    k->n = 3;
    k->nch = 1;
    k->count = 5000;
    k->slot_bytes = 1024;
    k->nops = k->nlaunch = 1;
}

/* One rank's work carries another call's sequence number: a receiver of its data, or the
 * rank itself receiving, reports BR_DEV_MISMATCH naming the other side; every block ends. */
START_TEST(test_mismatch)
{
    ccase_t k;
    emu_fabric_t f;
    opbuf_t B;
    br_dev_work_t works[EMU_MAXR];
    br_dev_block_t blocks[EMU_MAXR];
    emu_launch_t E;
    uint64_t hosts[EMU_MAXR] = {0};

    failure_case(&k, _i);
    emu_fabric_init(&f, k.n, 1, hosts, k.slot_bytes);
    int nb = build_allreduce(&f, &B, &k, -1, works, blocks);
    works[2].seq += 1; /* rank 2 thinks it is in another call */
    ck_assert_uint_eq(emu_launch(&E, blocks, nb, works, 10000000000ull, 0), BR_DEV_MISMATCH);
    const int *ring = br_graph_ring(f.g, 0), *pos = br_graph_ring_pos(f.g, 0);
    int prev2 = ring[(pos[2] + k.n - 1) % k.n];
    if (E.report.rank == 2) {
        ck_assert_int_eq(E.report.peer, prev2);
    } else {
        ck_assert_int_eq(E.report.peer, 2);
        ck_assert_int_eq(E.report.rank, ring[(pos[2] + 1) % k.n]);
    }
    op_free(&k, &B);
    emu_fabric_free(&f);
}
END_TEST

/* A peer that never runs: the abort flag (loop 0..2: protocol) or the timeout (3..5) ends
 * the wait, and the report names the rank waiting and the peer it waited for. */
START_TEST(test_abort_timeout)
{
    ccase_t k;
    emu_fabric_t f;
    opbuf_t B;
    br_dev_work_t works[EMU_MAXR];
    br_dev_block_t blocks[EMU_MAXR];
    emu_launch_t E;
    uint64_t hosts[EMU_MAXR] = {0};
    int timeout = _i >= BR_NUM_PROTOS;

    failure_case(&k, _i % BR_NUM_PROTOS);
    k.n = 2;
    emu_fabric_init(&f, k.n, 1, hosts, k.slot_bytes);
    int nb = build_allreduce(&f, &B, &k, 1, works, blocks); /* rank 1 never comes */
    ck_assert_int_eq(nb, 1);
    uint64_t t0 = br_dev_now_ns();
    uint32_t st = timeout ? emu_launch(&E, blocks, nb, works, 30000000ull, 0)
                          : emu_launch(&E, blocks, nb, works, 0, 30000000ull);
    uint64_t took = br_dev_now_ns() - t0;
    ck_assert_uint_eq(st, timeout ? BR_DEV_TIMEOUT : BR_DEV_ABORTED);
    ck_assert_int_eq(E.report.rank, 0);
    ck_assert_int_eq(E.report.peer, 1);
    ck_assert_msg(took >= 30000000ull && took < 5000000000ull, "ended after %llu ns",
                  (unsigned long long)took);
    op_free(&k, &B);
    emu_fabric_free(&f);
}
END_TEST

/* Work the kernels do not understand is reported, not run. */
START_TEST(test_badwork)
{
    br_dev_work_t w;
    br_dev_block_t b = {0, 1, 3, 0};
    emu_launch_t E;
    memset(&w, 0, sizeof(w));
    w.kind = 99;
    ck_assert_uint_eq(emu_launch(&E, &b, 1, &w, 0, 0), BR_DEV_BADWORK);
    ck_assert_int_eq(E.report.rank, 3);
}
END_TEST

/* ---- the conversions against brt_fp's and the host's, every fp16/bf16/fp8 value ---- */

/* Stride over the float bit patterns (primes, so every low bit pattern comes round). The
 * encoders are straight-line code with no buffer, so sanitizer builds take a sparser sweep
 * (every exponent still, and all the boundary neighbourhoods) and leave the dense one to
 * the Release run. */
#ifdef BR_DEVICE_TEST_SANITIZED
#define CONV_STRIDE 65521
#else
#define CONV_STRIDE 4093
#endif

START_TEST(test_conversions)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f16 = br_dev_f16_ld(h), bf = br_dev_bf16_ld(h);
        ck_assert_uint_eq(br_dev_f2u(f16), br_dev_f2u(br_half_to_float((uint16_t)h)));
        ck_assert_uint_eq(br_dev_f2u(bf), br_dev_f2u(br_bf16_to_float((uint16_t)h)));
    }
    for (uint32_t v = 0; v < 256; v++) {
        ck_assert_uint_eq(br_dev_f2u(br_dev_e4m3_ld(v)), br_dev_f2u(br_e4m3_to_float((uint8_t)v)));
        ck_assert_uint_eq(br_dev_f2u(br_dev_e5m2_ld(v)), br_dev_f2u(br_e5m2_to_float((uint8_t)v)));
    }
    /* Encoding: every float bit pattern in steps, plus neighbourhoods of the boundaries. */
    for (uint64_t u = 0; u < (1ull << 32); u += CONV_STRIDE) {
        float x = br_dev_u2f((uint32_t)u);
        ck_assert_uint_eq(br_dev_f16_st(x), br_float_to_half(x));
        ck_assert_uint_eq(br_dev_bf16_st(x), br_float_to_bf16(x));
        ck_assert_uint_eq(br_dev_e4m3_st(x), br_float_to_e4m3(x));
        ck_assert_uint_eq(br_dev_e5m2_st(x), br_float_to_e5m2(x));
    }
    static const uint32_t edges[] = {0x477ff000u, 0x38800000u, 0x3c800000u, 0x43e00000u,
                                     0x47600000u, 0x33000000u, 0x7f800000u, 0x0u};
    for (int e = 0; e < (int)(sizeof(edges) / sizeof(edges[0])); e++) {
        for (int64_t d = -4096; d <= 4096; d++) {
            for (uint32_t sgn = 0; sgn < 2; sgn++) {
                uint32_t u = (uint32_t)((int64_t)edges[e] + d) ^ (sgn << 31);
                float x = br_dev_u2f(u);
                ck_assert_uint_eq(br_dev_f16_st(x), br_float_to_half(x));
                ck_assert_uint_eq(br_dev_e4m3_st(x), br_float_to_e4m3(x));
                ck_assert_uint_eq(br_dev_e5m2_st(x), br_float_to_e5m2(x));
            }
        }
    }
}
END_TEST

static Suite *device_suite(void)
{
    Suite *s = suite_create("device");
    TCase *tc = tcase_create("collectives");
    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, test_collectives, 0, NCOMBOS * NRANKS);
    suite_add_tcase(s, tc);
    tc = tcase_create("types_ops");
    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, test_types_ops, 0, BRT_NTYPES);
    suite_add_tcase(s, tc);
    tc = tcase_create("copy");
    tcase_add_test(tc, test_copy);
    tcase_add_loop_test(tc, test_local, 0, BRT_NTYPES);
    suite_add_tcase(s, tc);
    tc = tcase_create("failures");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_mismatch, 0, BR_NUM_PROTOS);
    tcase_add_loop_test(tc, test_abort_timeout, 0, 2 * BR_NUM_PROTOS);
    tcase_add_test(tc, test_badwork);
    suite_add_tcase(s, tc);
    tc = tcase_create("conversions");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_conversions);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(device_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
