/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The data path of one step inside a block: every thread takes pieces of the step's data
 * (16 bytes under Simple, one 16-byte line of 8 data bytes under LL, one 128-byte line of
 * 120 data bytes under LL128), reads the received operands from the FIFO slots, the local
 * operand from the rank's input (or output), combines them (dev_reduce.h), and writes the
 * result to the output and to every send slot in the protocol's framing (dev_work.h).
 *
 * Ordering, per protocol (PTX memory model; the host build maps the same calls to C11
 * atomics):
 *  - Simple: slots are plain memory; the counters carry the ordering (dev_prims.h).
 *  - LL: a line is one 16-byte store {data0, flag, data1, flag}, read by one 16-byte load;
 *    a reader spins on its own lines until both flags are the step's.
 *  - LL128: a writer stores the 7 data pieces of a line and word 14, fences, then stores
 *    the flag word (the line's last 8 bytes); a reader spins on the flag word, fences, then
 *    reads the others, word 14 included (fence-to-fence synchronisation through the flag:
 *    nothing is read from the store that carries the flag, so no 16-byte atomicity is
 *    assumed). A thread takes BR_DEV_LL128_BATCH lines at a time and fences once for all
 *    of them, each way. The fences are GPU-scope when every rank of the launch is on one
 *    GPU.
 */
#ifndef BR_DEVICE_DEV_PROTO_H_
#define BR_DEVICE_DEV_PROTO_H_

#include "dev_reduce.h"
#include "dev_work.h"

#ifndef BR_STEPS
#define BR_STEPS 8 /* slots per connection: core/common/fifo.h's value (NCCL_STEPS) */
#endif

/* LL/LL128 flags are unique within an epoch of 2^30 steps; the first use of a slot in an
 * epoch clears it, so no line left from the previous epoch carries a current flag. */
#define BR_DEV_EPOCH_MASK ((1ull << 30) - 1)

/* How often (in polls) a spinning thread looks at the abort flag, the clique's stop word and
 * the clock: reads of host-mapped memory are slow. */
#define BR_DEV_CHECK_EVERY 64

/* What a step computes. */
#define BR_DEV_MODE_REDUCE 0 /* fold the received operands into the local input */
#define BR_DEV_MODE_FIRST 1  /* a reduction's first contribution: the input, pre-multiplied */
#define BR_DEV_MODE_MOVE 2   /* pass data on unchanged */

/* Where MOVE data comes from. */
#define BR_DEV_SRC_RECV 0
#define BR_DEV_SRC_IN 1
#define BR_DEV_SRC_OUT 2

/* One thread's wait: who it waits for, since when; it gives up on abort, timeout or a
 * failure another block already reported. */
typedef struct {
    const br_dev_launch_t *L;
    int32_t rank;
    uint32_t polls;
    uint64_t start;
} br_dev_wait_t;

/* Report a failure: the first one of this device's launch claims the device's word and
 * writes the device's report (status last; the host reads it once status says it is
 * there), and every failing block raises the clique's stop word, so that blocks on every
 * device give up. Blocks of other devices may report at the same time, each into its own
 * device's report: the host picks one (exec_cuda.c). */
BR_DEV_HD void br_dev_fail(const br_dev_launch_t *L, uint32_t code, int32_t rank, int32_t peer,
                           uint64_t step)
{
    if (br_dev_claim_status(L->claim, code)) {
        volatile br_dev_report_t *R = L->report;
        R->rank = rank;
        R->peer = peer;
        R->step = step;
        R->time_ns = br_dev_now_ns();
        br_dev_fence(); /* the report before the status that says it is there */
        R->status = code;
    }
    *L->stop = 1u;
    br_dev_fence();
}

BR_DEV_HD void br_dev_wait_init(br_dev_wait_t *W, const br_dev_launch_t *L, int32_t rank)
{
    W->L = L;
    W->rank = rank;
    W->polls = 0;
    W->start = 0;
}

/* One unsuccessful poll for (peer, step). Returns 0 to keep waiting, 1 to give up (the
 * failure is reported, or another block's already was). */
BR_DEV_HD int br_dev_wait_tick(br_dev_wait_t *W, int32_t peer, uint64_t step)
{
    const br_dev_launch_t *L = W->L;
    if (++W->polls % BR_DEV_CHECK_EVERY == 0) {
        if (*L->stop != 0) {
            return 1; /* a block (of any device) failed: its peers would wait for ever */
        }
        if (L->abort_flag != NULL && *L->abort_flag != 0) {
            br_dev_fail(L, BR_DEV_ABORTED, W->rank, peer, step);
            return 1;
        }
        uint64_t now = br_dev_now_ns();
        if (W->start == 0) {
            W->start = now;
        } else if (L->wait_timeout_ns != 0 && now - W->start > L->wait_timeout_ns) {
            br_dev_fail(L, BR_DEV_TIMEOUT, W->rank, peer, step);
            return 1;
        }
    }
    BR_DEV_YIELD();
    return 0;
}

/* One step's data path, as every thread of the block sees it. */
typedef struct {
    int mode, src;
    int nr, ns;                        /* received operands, send slots */
    const char *rb[BR_MAX_TREE_ARITY]; /* received slots */
    char *sb[BR_MAX_TREE_ARITY];       /* send slots */
    uint32_t rflag[BR_MAX_TREE_ARITY]; /* LL/LL128 flags of the received steps */
    uint32_t sflag[BR_MAX_TREE_ARITY]; /* ... and of the sent ones */
    uint64_t *sdesc[BR_MAX_TREE_ARITY]; /* the sent steps' descriptors {seq, bytes} */
    uint64_t sslot[BR_MAX_TREE_ARITY];  /* bytes of each send slot */
    uint64_t seq;                       /* the call's sequence number */
    int clear;                          /* bit i: send slot i is cleared first */
    int proto;
    int32_t rpeer[BR_MAX_TREE_ARITY];  /* for reports */
    uint64_t rstep[BR_MAX_TREE_ARITY];
    const char *in;   /* local operand (REDUCE, FIRST, SRC_IN) */
    char *out;        /* output, or NULL: not written */
    const char *from; /* MOVE from SRC_IN / SRC_OUT: where */
    uint64_t bytes;
    int fn[BR_MAX_TREE_ARITY]; /* REDUCE: word function per received operand */
    int pre;                   /* FIRST: pre-multiply */
    const br_dev_red_t *R;
    volatile int *bad; /* block-wide: a thread gave up waiting */
    int one_gpu;       /* LL128: GPU-scope fences (every peer on this GPU) */
    int sum;           /* REDUCE of sums folded inline: the type (br_dev_sum_type), or 0 */
    int aligned;       /* in, from and out (those not NULL) are 16-byte aligned */
} br_dev_step_t;

/* ---- user memory: any alignment, partial pieces at the end ---- */

BR_DEV_HD br_dev_v2_t br_dev_ld_any(const char *p, uint32_t nb)
{
    br_dev_v2_t v;
    uintptr_t a = (uintptr_t)p;
    if (nb == 16 && (a & 15) == 0) {
        return br_dev_ld16(p);
    }
    if (nb == 16 && (a & 7) == 0) {
        v.lo = br_dev_ld8(p);
        v.hi = br_dev_ld8(p + 8);
        return v;
    }
    v.lo = v.hi = 0;
    for (uint32_t i = 0; i < nb; i++) {
        uint64_t c = (unsigned char)p[i];
        if (i < 8) {
            v.lo |= c << (8 * i);
        } else {
            v.hi |= c << (8 * (i - 8));
        }
    }
    return v;
}

BR_DEV_HD void br_dev_st_any(char *p, br_dev_v2_t v, uint32_t nb)
{
    uintptr_t a = (uintptr_t)p;
    if (nb == 16 && (a & 15) == 0) {
        br_dev_st16(p, v);
        return;
    }
    if (nb == 16 && (a & 7) == 0) {
        br_dev_st8(p, v.lo);
        br_dev_st8(p + 8, v.hi);
        return;
    }
    for (uint32_t i = 0; i < nb; i++) {
        p[i] = (char)(i < 8 ? v.lo >> (8 * i) : v.hi >> (8 * (i - 8)));
    }
}

/* ---- the arithmetic of one piece (nw words of it) ---- */

/* The types whose sums a step folds inline, without the out-of-line switch over types
 * and operations (br_dev_piece_op): the common gradients' types. 0 for the others. */
BR_DEV_HD int br_dev_sum_type(uint32_t type)
{
    return type == ncclFloat32 || type == ncclBfloat16 || type == ncclFloat16 ? (int)type : 0;
}

/* a + b, lane by lane, for the nw words of a piece of a br_dev_sum_type: the same bits as
 * br_dev_piece_op's sum (its word functions, with the type and the operation known). */
BR_DEV_HD br_dev_v2_t br_dev_sum_add(int type, br_dev_v2_t a, br_dev_v2_t b, int nw)
{
    br_dev_v2_t v;
    if (type == ncclFloat32) {
        v.lo = br_dev_word_f32(NULL, BR_DEV_F_SUM, a.lo, b.lo);
        v.hi = nw > 1 ? br_dev_word_f32(NULL, BR_DEV_F_SUM, a.hi, b.hi) : 0;
    } else if (type == ncclBfloat16) {
        v.lo = br_dev_word_bf16(NULL, BR_DEV_F_SUM, a.lo, b.lo);
        v.hi = nw > 1 ? br_dev_word_bf16(NULL, BR_DEV_F_SUM, a.hi, b.hi) : 0;
    } else {
        v.lo = br_dev_word_f16(NULL, BR_DEV_F_SUM, a.lo, b.lo);
        v.hi = nw > 1 ? br_dev_word_f16(NULL, BR_DEV_F_SUM, a.hi, b.hi) : 0;
    }
    return v;
}

/* Can a step's pieces be folded without a call (br_dev_piece_op)? Moves, a first
 * contribution that is not scaled, and the inline sums: what the common collectives on
 * the common types do. A call keeps every value live across it in saved registers. */
BR_DEV_HD int br_dev_fold_is_inline(const br_dev_step_t *S)
{
    return S->mode == BR_DEV_MODE_MOVE || (S->mode == BR_DEV_MODE_FIRST && !S->pre) ||
           (S->mode == BR_DEV_MODE_REDUCE && S->sum != 0);
}

/* The fold of a step for which br_dev_fold_is_inline() holds. */
BR_DEV_HD br_dev_v2_t br_dev_fold_inline(const br_dev_step_t *S, br_dev_v2_t r0, br_dev_v2_t r1,
                                         br_dev_v2_t r2, br_dev_v2_t x, int nw)
{
    if (S->mode == BR_DEV_MODE_REDUCE) {
        br_dev_v2_t v = br_dev_sum_add(S->sum, r0, x, nw);
        if (S->nr > 1) {
            v = br_dev_sum_add(S->sum, r1, v, nw);
        }
        if (S->nr > 2) {
            v = br_dev_sum_add(S->sum, r2, v, nw);
        }
        return v;
    }
    return S->mode == BR_DEV_MODE_MOVE && S->src == BR_DEV_SRC_RECV ? r0 : x;
}

/* The fold of any step: the received operands r0..r2 (S->nr of them) with the local
 * operand x, nw words of a piece. */
BR_DEV_HD br_dev_v2_t br_dev_fold(const br_dev_step_t *S, br_dev_v2_t r0, br_dev_v2_t r1,
                                  br_dev_v2_t r2, br_dev_v2_t x, int nw)
{
    if (br_dev_fold_is_inline(S)) {
        return br_dev_fold_inline(S, r0, r1, r2, x, nw);
    }
    if (S->mode == BR_DEV_MODE_REDUCE) {
        /* The local input first (recv (+) pre(in)), then the other partial results, each
         * folded as recv (+) accumulated; the last one brings the final division. */
        br_dev_v2_t v = br_dev_piece_op(S->R, S->fn[0], r0, x, nw);
        if (S->nr > 1) {
            v = br_dev_piece_op(S->R, S->fn[1], r1, v, nw);
        }
        if (S->nr > 2) {
            v = br_dev_piece_op(S->R, S->fn[2], r2, v, nw);
        }
        return v;
    }
    return br_dev_piece_op(S->R, BR_DEV_F_PRE1, x, x, nw); /* FIRST, pre-multiplied */
}

/* The local operand of a piece at byte offset off (nb bytes), if the step has one. */
BR_DEV_HD br_dev_v2_t br_dev_local(const br_dev_step_t *S, uint64_t off, uint32_t nb)
{
    br_dev_v2_t x;
    if (S->mode != BR_DEV_MODE_MOVE) {
        return br_dev_ld_any(S->in + off, nb);
    }
    if (S->src != BR_DEV_SRC_RECV) {
        return br_dev_ld_any(S->from + off, nb);
    }
    x.lo = x.hi = 0;
    return x;
}

BR_DEV_HD uint32_t br_dev_piece_bytes(uint64_t bytes, uint64_t off, uint32_t most)
{
    return off >= bytes ? 0 : bytes - off < most ? (uint32_t)(bytes - off) : most;
}

/* ---- Simple ---- */

/* Pieces one thread keeps in flight: enough independent 16-byte loads per thread to cover
 * memory latency with one block per SM. */
#define BR_DEV_UNROLL 4

/* One piece at byte offset off: operands in, result out. */
BR_DEV_HD void br_dev_simple_piece(const br_dev_step_t *S, uint64_t off, int fast)
{
    br_dev_v2_t zero;
    zero.lo = zero.hi = 0;
    uint32_t nb = br_dev_piece_bytes(S->bytes, off, 16);
    /* Slots are 16-byte aligned and hold whole pieces. */
    br_dev_v2_t r0 = S->nr > 0 ? br_dev_ld16(S->rb[0] + off) : zero;
    br_dev_v2_t r1 = S->nr > 1 ? br_dev_ld16(S->rb[1] + off) : zero;
    br_dev_v2_t r2 = S->nr > 2 ? br_dev_ld16(S->rb[2] + off) : zero;
    br_dev_v2_t x = br_dev_local(S, off, nb);
    br_dev_v2_t v = fast ? br_dev_fold_inline(S, r0, r1, r2, x, 2) : br_dev_fold(S, r0, r1, r2, x, 2);
    if (S->out != NULL) {
        br_dev_st_any(S->out + off, v, nb);
    }
    for (int i = 0; i < S->ns; i++) {
        br_dev_st16(S->sb[i] + off, v);
    }
}

/* The data path of a Simple step; fast: its fold needs no call (br_dev_fold_is_inline). */
BR_DEV_HD void br_dev_simple_run(const br_dev_step_t *S, int fast)
{
    const uint64_t nthr = (uint64_t)BR_DEV_NTHR, tid = (uint64_t)BR_DEV_TID;
    const uint64_t group = 16u * BR_DEV_UNROLL * nthr; /* bytes of one round of the block */
    uint64_t done = 0;
    br_dev_v2_t zero;
    zero.lo = zero.hi = 0;
    /* Whole rounds: every thread loads all its pieces' operands, then folds and stores, so
     * that BR_DEV_UNROLL loads per operand are outstanding at once: steps of one received
     * operand at most, on aligned buffers, whose fold needs no call (anything more would
     * cost registers). */
    if (fast && S->nr <= 1 && S->aligned) {
        const char *rb0 = S->nr > 0 ? S->rb[0] : NULL;
        const char *loc = S->mode != BR_DEV_MODE_MOVE ? S->in
                          : S->src != BR_DEV_SRC_RECV ? S->from
                                                      : NULL;
        char *out = S->out;
        const uint64_t stride = 16u * nthr;
        for (; done + group <= S->bytes; done += group) {
            const uint64_t at = done + 16u * tid;
            br_dev_v2_t r0[BR_DEV_UNROLL], x[BR_DEV_UNROLL];
            BR_DEV_PRAGMA_UNROLL
            for (int k = 0; k < BR_DEV_UNROLL; k++) {
                r0[k] = rb0 != NULL ? br_dev_ld16(rb0 + at + (uint64_t)k * stride) : zero;
                x[k] = loc != NULL ? br_dev_ld16(loc + at + (uint64_t)k * stride) : zero;
            }
            BR_DEV_PRAGMA_UNROLL
            for (int k = 0; k < BR_DEV_UNROLL; k++) {
                br_dev_v2_t v = br_dev_fold_inline(S, r0[k], zero, zero, x[k], 2);
                if (out != NULL) {
                    br_dev_st16(out + at + (uint64_t)k * stride, v);
                }
                for (int i = 0; i < S->ns; i++) {
                    br_dev_st16(S->sb[i] + at + (uint64_t)k * stride, v);
                }
            }
        }
    }
    /* The rest, one piece at a time. */
    for (uint64_t off = done + 16u * tid; off < S->bytes; off += 16u * nthr) {
        br_dev_simple_piece(S, off, fast);
    }
}

/* Out of line on the GPU, in two builds (as LL128's): the registers of the data path are
 * its own, not added to those of thread 0's planning, and the fast build saves nothing
 * around a call. */
BR_DEV_NOINLINE void br_dev_data_simple_fast(const br_dev_step_t *S)
{
    br_dev_simple_run(S, 1);
}

BR_DEV_NOINLINE void br_dev_data_simple_any(const br_dev_step_t *S)
{
    br_dev_simple_run(S, 0);
}

BR_DEV_HD void br_dev_data_simple(const br_dev_step_t *S)
{
    if (br_dev_fold_is_inline(S)) {
        br_dev_data_simple_fast(S);
    } else {
        br_dev_data_simple_any(S);
    }
}

/* ---- LL ---- */

/* Line l of received operand i: its 8 data bytes, once both flags are the step's. */
BR_DEV_HD uint64_t br_dev_ll_take(const br_dev_step_t *S, br_dev_wait_t *W, int i, uint64_t l)
{
    const char *p = S->rb[i] + l * BR_DEV_LL_LINE;
    uint64_t flag = S->rflag[i];
    for (;;) {
        br_dev_v2_t v = br_dev_ld_volatile16(p);
        if ((v.lo >> 32) == flag && (v.hi >> 32) == flag) {
            return (v.lo & 0xffffffffull) | (v.hi << 32);
        }
        if (*S->bad || br_dev_wait_tick(W, S->rpeer[i], S->rstep[i])) {
            *S->bad = 1;
            return 0;
        }
    }
}

BR_DEV_NOINLINE void br_dev_data_ll(const br_dev_step_t *S, br_dev_wait_t *W)
{
    /* A step of 0 bytes still sends line 0, the one its receiver polls. */
    uint64_t n = S->bytes == 0 ? 1 : (S->bytes + BR_DEV_LL_DATA - 1) / BR_DEV_LL_DATA;
    br_dev_v2_t zero;
    zero.lo = zero.hi = 0;
    for (uint64_t l = (uint64_t)BR_DEV_TID; l < n; l += (uint64_t)BR_DEV_NTHR) {
        uint64_t off = l * BR_DEV_LL_DATA;
        uint32_t nb = br_dev_piece_bytes(S->bytes, off, BR_DEV_LL_DATA);
        br_dev_v2_t r0 = zero, r1 = zero, r2 = zero, v = zero;
        if (nb > 0) {
            r0.lo = S->nr > 0 ? br_dev_ll_take(S, W, 0, l) : 0;
            r1.lo = S->nr > 1 ? br_dev_ll_take(S, W, 1, l) : 0;
            r2.lo = S->nr > 2 ? br_dev_ll_take(S, W, 2, l) : 0;
            v = br_dev_fold(S, r0, r1, r2, br_dev_local(S, off, nb), 1);
            if (S->out != NULL) {
                br_dev_st_any(S->out + off, v, nb);
            }
        }
        for (int i = 0; i < S->ns; i++) {
            /* {data0, flag, data1, flag} in one 16-byte store: never seen half written. */
            br_dev_v2_t line;
            line.lo = (v.lo & 0xffffffffull) | ((uint64_t)S->sflag[i] << 32);
            line.hi = (v.lo >> 32) | ((uint64_t)S->sflag[i] << 32);
            br_dev_st_volatile16(S->sb[i] + l * BR_DEV_LL_LINE, line);
        }
    }
}

/* ---- LL128 ---- */

/* Wait for line l of received operand i: until its flag word (the line's last 8 bytes)
 * is the step's. Returns 1 when it is, 0 when the wait gave up. */
BR_DEV_HD int br_dev_ll128_wait(const br_dev_step_t *S, br_dev_wait_t *W, int i, uint64_t l)
{
    const uint64_t *flag = (const uint64_t *)(S->rb[i] + l * BR_DEV_LL128_LINE + 120);
    for (;;) {
        if (br_dev_ld_word(flag) == S->rflag[i]) {
            return 1;
        }
        if (*S->bad || br_dev_wait_tick(W, S->rpeer[i], S->rstep[i])) {
            *S->bad = 1;
            return 0;
        }
    }
}

/* Word 14 of line l of received operand i (its last data bytes), read after the fence. */
BR_DEV_HD br_dev_v2_t br_dev_ll128_word14(const br_dev_step_t *S, int i, uint64_t line)
{
    br_dev_v2_t t;
    t.lo = br_dev_ld_word((const uint64_t *)(S->rb[i] + line + 112));
    t.hi = 0;
    return t;
}

/* The fence of LL128 (acquire after the flags, release before them): GPU scope when every
 * rank of the launch is on this GPU. */
BR_DEV_HD void br_dev_ll128_fence(const br_dev_step_t *S)
{
    if (S->one_gpu) {
        br_dev_fence_gpu();
    } else {
        br_dev_fence();
    }
}

/* Line `line` (its byte offset in the slots) of data bytes [base, ...): fold the received
 * lines (whose flags were seen and fenced) with the local operand, write the output and
 * the sent lines' data and word 14, not their flags. */
BR_DEV_HD void br_dev_ll128_line(const br_dev_step_t *S, uint64_t base, uint64_t line, int fast)
{
    br_dev_v2_t zero, t0, t1, t2, v;
    zero.lo = zero.hi = 0;
    t0 = t1 = t2 = v = zero;
    if (S->nr > 0 && base < S->bytes) {
        t0 = br_dev_ll128_word14(S, 0, line);
        t1 = S->nr > 1 ? br_dev_ll128_word14(S, 1, line) : zero;
        t2 = S->nr > 2 ? br_dev_ll128_word14(S, 2, line) : zero;
    }
    for (uint32_t k = 0; k < 8; k++) {
        uint64_t off = base + 16u * k;
        uint32_t nb = br_dev_piece_bytes(S->bytes, off, k < 7 ? 16u : 8u);
        if (nb == 0) {
            v = zero;
            break;
        }
        br_dev_v2_t r0 = t0, r1 = t1, r2 = t2;
        if (k < 7) {
            const uint64_t o = line + 16u * k;
            r0 = S->nr > 0 ? br_dev_ld_volatile16(S->rb[0] + o) : zero;
            r1 = S->nr > 1 ? br_dev_ld_volatile16(S->rb[1] + o) : zero;
            r2 = S->nr > 2 ? br_dev_ld_volatile16(S->rb[2] + o) : zero;
        }
        br_dev_v2_t x = br_dev_local(S, off, nb);
        v = fast ? br_dev_fold_inline(S, r0, r1, r2, x, k < 7 ? 2 : 1)
                 : br_dev_fold(S, r0, r1, r2, x, k < 7 ? 2 : 1);
        if (S->out != NULL) {
            br_dev_st_any(S->out + off, v, nb);
        }
        if (k < 7) {
            for (int i = 0; i < S->ns; i++) {
                br_dev_st16(S->sb[i] + line + 16u * k, v);
            }
        }
    }
    /* Word 14: the line's last data bytes (zero when the line is cut short). */
    for (int i = 0; i < S->ns; i++) {
        br_dev_st_word((uint64_t *)(S->sb[i] + line + 112), v.lo);
    }
}

/* Lines a thread takes at a time: it waits for all their flags, fences once, runs them,
 * fences once and writes their flags, so a fence is paid per BR_DEV_LL128_BATCH lines. */
#define BR_DEV_LL128_BATCH 4

BR_DEV_HD void br_dev_ll128_run(const br_dev_step_t *S, br_dev_wait_t *W, int fast)
{
    const uint64_t nthr = (uint64_t)BR_DEV_NTHR;
    uint64_t n = S->bytes == 0 ? 1 : (S->bytes + BR_DEV_LL128_DATA - 1) / BR_DEV_LL128_DATA;
    for (uint64_t first = (uint64_t)BR_DEV_TID; first < n; first += BR_DEV_LL128_BATCH * nthr) {
        /* The batch: lines first, first + nthr, ... below n. */
        uint64_t end = first + BR_DEV_LL128_BATCH * nthr;
        end = end < n ? end : n;
        /* Acquire: once the flags are seen, what the writers stored before their fences is. */
        if (S->nr > 0 && first * BR_DEV_LL128_DATA < S->bytes) {
            for (uint64_t l = first; l < end && l * BR_DEV_LL128_DATA < S->bytes; l += nthr) {
                for (int i = 0; i < S->nr; i++) {
                    if (!br_dev_ll128_wait(S, W, i, l)) {
                        return; /* given up: the block stops (S->bad) */
                    }
                }
            }
            br_dev_ll128_fence(S);
        }
        for (uint64_t l = first; l < end; l += nthr) {
            br_dev_ll128_line(S, l * BR_DEV_LL128_DATA, l * BR_DEV_LL128_LINE, fast);
        }
        if (S->ns > 0) {
            /* Release: the batch's data pieces and words 14 before the flag words that
             * publish them. A line cut short sends its flag (with zero data) all the same. */
            br_dev_ll128_fence(S);
            for (uint64_t l = first; l < end; l += nthr) {
                for (int i = 0; i < S->ns; i++) {
                    br_dev_st_word((uint64_t *)(S->sb[i] + l * BR_DEV_LL128_LINE + 120),
                                   S->sflag[i]);
                }
            }
        }
    }
}

/* The data path of an LL128 step, in two builds: folds without a call (fast: nothing of
 * a batch is saved around a call), and any fold. */
BR_DEV_NOINLINE void br_dev_data_ll128_fast(const br_dev_step_t *S, br_dev_wait_t *W)
{
    br_dev_ll128_run(S, W, 1);
}

BR_DEV_NOINLINE void br_dev_data_ll128_any(const br_dev_step_t *S, br_dev_wait_t *W)
{
    br_dev_ll128_run(S, W, 0);
}

BR_DEV_HD void br_dev_data_ll128(const br_dev_step_t *S, br_dev_wait_t *W)
{
    if (br_dev_fold_is_inline(S)) {
        br_dev_data_ll128_fast(S, W);
    } else {
        br_dev_data_ll128_any(S, W);
    }
}

#endif /* BR_DEVICE_DEV_PROTO_H_ */
