/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Setting up, issuing and verifying one collective test case on one rank, and running
 * lists of them (see brt_coll.h). Buffer placement follows NCCL's definitions of
 * in-place: AllGather sendbuff == recvbuff + rank * count, ReduceScatter recvbuff ==
 * sendbuff + rank * count, Gather (root) sendbuff == recvbuff + root * count, Scatter
 * (root) recvbuff == sendbuff + root * count, and sendbuff == recvbuff for the others.
 * Reductions get inputs from brt_data.h; data movement gets bytes keyed by (seed,
 * source rank, destination rank), so a block that lands in the wrong place is caught.
 */
#include "brt_coll.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD BRT_GUARD
#define POISON 0xcd
#define HUGE_COUNT ((size_t)1048576 + 3)
#define MAX_FAILS 8

static const char *const func_names[BRT_NFUNCS] = {
    "AllReduce",     "Broadcast", "Bcast",  "Reduce",  "AllGather",
    "ReduceScatter", "AlltoAll",  "Gather", "Scatter", "SendRecv"};

const char *brt_func_name(brt_func_t f)
{
    return (int)f >= 0 && f < BRT_NFUNCS ? func_names[f] : "?";
}

int brt_func_reduces(brt_func_t f)
{
    return f == BRT_ALLREDUCE || f == BRT_REDUCE || f == BRT_REDUCESCATTER;
}

static int func_has_inplace(brt_func_t f)
{
    return f != BRT_ALLTOALL && f != BRT_SENDRECV && f != BRT_BCAST;
}

static int func_has_root(brt_func_t f)
{
    return f == BRT_BROADCAST || f == BRT_BCAST || f == BRT_REDUCE || f == BRT_GATHER ||
           f == BRT_SCATTER;
}

void brt_case_name(const brt_case_t *c, int nranks, char *buf, size_t len)
{
    char where[48] = "";
    if (func_has_root(c->func)) {
        snprintf(where, sizeof(where), " root %d", c->root);
    } else if (c->func == BRT_SENDRECV) {
        if (c->root == BRT_SHIFT_ALL) {
            snprintf(where, sizeof(where), " all pairs");
        } else {
            snprintf(where, sizeof(where), " shift %d", c->root);
        }
    }
    snprintf(buf, len, "%s %s%s%s count %zu %s%s (%d ranks, seed %u%s)", brt_func_name(c->func),
             brt_type_info(c->type)->name, brt_func_reduces(c->func) ? " " : "",
             brt_func_reduces(c->func) ? brt_op_name(c->op) : "", c->count,
             c->inplace && func_has_inplace(c->func) ? "in-place" : "out-of-place", where, nranks,
             c->seed, c->null_unused ? ", NULL unused buffers" : "");
}

/* ---- buffers with guards ---- */

static unsigned char *mem_alloc(size_t bytes)
{
    unsigned char *m = malloc(bytes + 2 * GUARD);
    if (m == NULL) {
        return NULL;
    }
    for (int i = 0; i < GUARD; i++) {
        m[i] = (unsigned char)(0xa5 ^ i);
        m[GUARD + bytes + (size_t)i] = (unsigned char)(0x5a ^ i);
    }
    memset(m + GUARD, POISON, bytes);
    return m;
}

static int mem_guards_ok(const unsigned char *m, size_t bytes, const char *which, char *err,
                         size_t errlen)
{
    if (m == NULL) {
        return 1;
    }
    for (int i = 0; i < GUARD; i++) {
        if (m[i] != (unsigned char)(0xa5 ^ i)) {
            snprintf(err, errlen, "%s written %d bytes before its start", which, GUARD - i);
            return 0;
        }
    }
    for (int i = GUARD - 1; i >= 0; i--) {
        if (m[GUARD + bytes + (size_t)i] != (unsigned char)(0x5a ^ i)) {
            snprintf(err, errlen, "%s (%zu bytes) written %d bytes past its end", which, bytes,
                     i + 1);
            return 0;
        }
    }
    return 1;
}

/* Payload address of an allocation (NULL stays NULL). */
static unsigned char *payload(unsigned char *m)
{
    return m == NULL ? NULL : m + GUARD;
}

/* Bytes each pair exchanges in a send/recv case: distinct per pair, zero for count 0. */
static size_t pair_count(const brt_case_t *c, int src, int dst)
{
    return c->count == 0 ? 0 : c->count + (size_t)((src * 3 + dst * 5) % 7);
}

static int sendrecv_peer(const brt_case_t *c, int n, int r, int send)
{
    int s = c->root % n;
    return send ? (r + s) % n : (r - s + n) % n;
}

/* Offset (elements) of peer p's block in a rank's all-pairs buffer. */
static size_t pair_offset(const brt_case_t *c, int n, int r, int p, int send)
{
    size_t off = 0;
    for (int q = 0; q < p; q++) {
        off += send ? pair_count(c, r, q) : pair_count(c, q, r);
    }
    (void)n;
    return off;
}

/* ---- set up ---- */

static int alloc_both(brt_buf_t *b, size_t send_bytes, size_t recv_bytes, int want_send,
                      int want_recv)
{
    b->send_bytes = send_bytes;
    b->recv_bytes = recv_bytes;
    b->send_mem = want_send ? mem_alloc(send_bytes) : NULL;
    b->recv_mem = want_recv ? mem_alloc(recv_bytes) : NULL;
    return (want_send && b->send_mem == NULL) || (want_recv && b->recv_mem == NULL);
}

/* Lay out buffers for c on rank b->rank and fill the inputs. */
static int layout(const brt_case_t *c, brt_buf_t *b)
{
    const size_t ts = brt_type_info(c->type)->size;
    const int n = b->nranks, r = b->rank, R = c->root;
    const size_t cnt = c->count, cb = cnt * ts;
    const int ip = c->inplace && func_has_inplace(c->func);
    const int nul = c->null_unused;
    unsigned char *s, *d;

    switch (c->func) {
    case BRT_ALLREDUCE:
    case BRT_REDUCE:
        if (c->func == BRT_REDUCE && r != R && !ip) {
            if (alloc_both(b, cb, cb, 1, !nul)) {
                return 1;
            }
        } else if (alloc_both(b, cb, cb, !ip, 1)) {
            return 1;
        }
        s = payload(ip ? b->recv_mem : b->send_mem);
        brt_fill_inputs(c->type, c->op, c->seed, n, r, s, 0, cnt);
        b->sendbuff = s;
        b->recvbuff = payload(b->recv_mem);
        return 0;
    case BRT_BROADCAST:
    case BRT_BCAST:
        if (alloc_both(b, cb, cb, r == R ? !ip && c->func == BRT_BROADCAST : !ip && !nul, 1)) {
            return 1;
        }
        d = payload(b->recv_mem);
        s = c->func == BRT_BCAST || ip ? d : payload(b->send_mem);
        if (r == R) {
            brt_fill_bytes(c->seed, R, -1, s, 0, cb);
        }
        b->sendbuff = s;
        b->recvbuff = d;
        return 0;
    case BRT_ALLGATHER:
        if (alloc_both(b, cb, cb * (size_t)n, !ip, 1)) {
            return 1;
        }
        s = ip ? payload(b->recv_mem) + (size_t)r * cb : payload(b->send_mem);
        brt_fill_bytes(c->seed, r, -1, s, 0, cb);
        b->sendbuff = s;
        b->recvbuff = payload(b->recv_mem);
        return 0;
    case BRT_REDUCESCATTER:
        if (alloc_both(b, cb * (size_t)n, cb, 1, !ip)) {
            return 1;
        }
        s = payload(b->send_mem);
        brt_fill_inputs(c->type, c->op, c->seed, n, r, s, 0, cnt * (size_t)n);
        b->sendbuff = s;
        b->recvbuff = ip ? s + (size_t)r * cb : payload(b->recv_mem);
        return 0;
    case BRT_ALLTOALL:
        if (alloc_both(b, cb * (size_t)n, cb * (size_t)n, 1, 1)) {
            return 1;
        }
        for (int p = 0; p < n; p++) {
            brt_fill_bytes(c->seed, r, p, payload(b->send_mem) + (size_t)p * cb, 0, cb);
        }
        b->sendbuff = payload(b->send_mem);
        b->recvbuff = payload(b->recv_mem);
        return 0;
    case BRT_GATHER:
        if (r == R) {
            if (alloc_both(b, cb, cb * (size_t)n, !ip, 1)) {
                return 1;
            }
            s = ip ? payload(b->recv_mem) + (size_t)R * cb : payload(b->send_mem);
        } else {
            if (alloc_both(b, cb, cb * (size_t)n, 1, !nul)) {
                return 1;
            }
            s = payload(b->send_mem);
        }
        brt_fill_bytes(c->seed, r, -1, s, 0, cb);
        b->sendbuff = s;
        b->recvbuff = payload(b->recv_mem);
        return 0;
    case BRT_SCATTER:
        if (alloc_both(b, cb * (size_t)n, cb, r == R || !nul, !(ip && r == R))) {
            return 1;
        }
        if (r == R) {
            for (int p = 0; p < n; p++) {
                brt_fill_bytes(c->seed, R, p, payload(b->send_mem) + (size_t)p * cb, 0, cb);
            }
        }
        b->sendbuff = payload(b->send_mem);
        b->recvbuff = ip && r == R ? payload(b->send_mem) + (size_t)R * cb : payload(b->recv_mem);
        return 0;
    case BRT_SENDRECV:
    default: {
        size_t sb = 0, rb = 0;
        if (c->root == BRT_SHIFT_ALL) {
            sb = pair_offset(c, n, r, n, 1) * ts;
            rb = pair_offset(c, n, r, n, 0) * ts;
        } else {
            sb = pair_count(c, r, sendrecv_peer(c, n, r, 1)) * ts;
            rb = pair_count(c, sendrecv_peer(c, n, r, 0), r) * ts;
        }
        if (alloc_both(b, sb, rb, 1, 1)) {
            return 1;
        }
        for (int p = 0; p < n; p++) {
            if (c->root == BRT_SHIFT_ALL) {
                brt_fill_bytes(c->seed, r, p,
                               payload(b->send_mem) + pair_offset(c, n, r, p, 1) * ts, 0,
                               pair_count(c, r, p) * ts);
            } else if (p == sendrecv_peer(c, n, r, 1)) {
                brt_fill_bytes(c->seed, r, p, payload(b->send_mem), 0, sb);
            }
        }
        b->sendbuff = payload(b->send_mem);
        b->recvbuff = payload(b->recv_mem);
        return 0;
    }
    }
}

int brt_case_setup(const brt_case_t *c, brt_buf_t *b, char *err, size_t errlen)
{
    b->send_mem = b->recv_mem = NULL;
    b->sendbuff = b->recvbuff = NULL;
    b->op_created = 0;
    b->ncop = (ncclRedOp_t)c->op;
    if (layout(c, b) != 0) {
        snprintf(err, errlen, "out of memory for the buffers");
        brt_case_teardown(b);
        return 1;
    }
    if (c->count == 0 && c->null_unused) {
        b->sendbuff = b->recvbuff = NULL; /* nothing to read or write: NULL is valid */
    }
    if (brt_func_reduces(c->func) && c->op == BRT_PREMULSUM) {
        unsigned char scalar[8];
        brt_premul_scalar(c->type, scalar);
        ncclResult_t res =
            ncclRedOpCreatePreMulSum(&b->ncop, scalar, c->type, ncclScalarHostImmediate, b->comm);
        /* HostImmediate: the value is read at creation, so changing it now must not matter. */
        memset(scalar, 0x7f, sizeof(scalar));
        if (res != ncclSuccess) {
            snprintf(err, errlen, "ncclRedOpCreatePreMulSum returned %d (%s): %s", (int)res,
                     ncclGetErrorString(res), ncclGetLastError(b->comm));
            brt_case_teardown(b);
            return 1;
        }
        b->op_created = 1;
    }
    return 0;
}

/* ---- issue ---- */

static ncclResult_t issue_sendrecv(const brt_case_t *c, brt_buf_t *b)
{
    const size_t ts = brt_type_info(c->type)->size;
    const int n = b->nranks, r = b->rank;
    const int recv_first = (int)(c->seed & 1);
    ncclResult_t res = ncclGroupStart(), end;
    unsigned char *sb = b->sendbuff, *rb = b->recvbuff;

    for (int p = 0; p < n && res == ncclSuccess; p++) {
        int sp, rp;
        size_t soff = 0, roff = 0;
        if (c->root == BRT_SHIFT_ALL) {
            sp = rp = p;
            soff = pair_offset(c, n, r, p, 1) * ts;
            roff = pair_offset(c, n, r, p, 0) * ts;
        } else {
            if (p > 0) {
                break;
            }
            sp = sendrecv_peer(c, n, r, 1);
            rp = sendrecv_peer(c, n, r, 0);
        }
        for (int k = 0; k < 2 && res == ncclSuccess; k++) {
            if ((k == 0) == (recv_first == 0)) {
                res = ncclSend(sb ? sb + soff : NULL, pair_count(c, r, sp), c->type, sp, b->comm,
                               b->stream);
            } else {
                res = ncclRecv(rb ? rb + roff : NULL, pair_count(c, rp, r), c->type, rp, b->comm,
                               b->stream);
            }
        }
    }
    end = ncclGroupEnd();
    return res != ncclSuccess ? res : end;
}

ncclResult_t brt_case_issue(const brt_case_t *c, brt_buf_t *b)
{
    switch (c->func) {
    case BRT_ALLREDUCE:
        return ncclAllReduce(b->sendbuff, b->recvbuff, c->count, c->type, b->ncop, b->comm, b->stream);
    case BRT_BROADCAST:
        return ncclBroadcast(b->sendbuff, b->recvbuff, c->count, c->type, c->root, b->comm, b->stream);
    case BRT_BCAST: return ncclBcast(b->recvbuff, c->count, c->type, c->root, b->comm, b->stream);
    case BRT_REDUCE:
        return ncclReduce(b->sendbuff, b->recvbuff, c->count, c->type, b->ncop, c->root, b->comm,
                          b->stream);
    case BRT_ALLGATHER:
        return ncclAllGather(b->sendbuff, b->recvbuff, c->count, c->type, b->comm, b->stream);
    case BRT_REDUCESCATTER:
        return ncclReduceScatter(b->sendbuff, b->recvbuff, c->count, c->type, b->ncop, b->comm,
                                 b->stream);
    case BRT_ALLTOALL:
        return ncclAlltoAll(b->sendbuff, b->recvbuff, c->count, c->type, b->comm, b->stream);
    case BRT_GATHER:
        return ncclGather(b->sendbuff, b->recvbuff, c->count, c->type, c->root, b->comm, b->stream);
    case BRT_SCATTER:
        return ncclScatter(b->sendbuff, b->recvbuff, c->count, c->type, c->root, b->comm, b->stream);
    default: return issue_sendrecv(c, b);
    }
}

/* ---- verify ---- */

/* Are count reduction inputs of rank r (from element first) still in buf? */
static int inputs_unchanged(const brt_case_t *c, int n, int r, const void *buf, size_t first,
                            size_t count, char *err, size_t errlen)
{
    const size_t ts = brt_type_info(c->type)->size;
    unsigned char *want = malloc(count * ts + 1);
    int ok;
    if (want == NULL) {
        snprintf(err, errlen, "out of memory checking the send buffer");
        return 0;
    }
    brt_fill_inputs(c->type, c->op, c->seed, n, r, want, first, count);
    ok = memcmp(want, buf, count * ts) == 0;
    if (!ok) {
        size_t j = 0;
        while (memcmp(want + j * ts, (const unsigned char *)buf + j * ts, ts) == 0) {
            j++;
        }
        snprintf(err, errlen, "out-of-place sendbuff was modified (element %zu first)", j);
    }
    free(want);
    return ok;
}

static int verify_reduce_family(const brt_case_t *c, brt_buf_t *b, char *err, size_t errlen)
{
    const int n = b->nranks, r = b->rank;
    const size_t cnt = c->count;
    const int ip = c->inplace;
    char why[640];

    if (c->func == BRT_REDUCESCATTER) {
        if (brt_check_reduced(c->type, c->op, c->seed, n, b->recvbuff, (size_t)r * cnt, cnt, why,
                              sizeof(why))) {
            snprintf(err, errlen, "recvbuff: %s", why);
            return 1;
        }
        /* In place, the other blocks of sendbuff are NCCL's scratch: only ours counts. */
        if (!ip && !inputs_unchanged(c, n, r, b->sendbuff, 0, cnt * (size_t)n, err, errlen)) {
            return 1;
        }
        return 0;
    }
    if (c->func == BRT_ALLREDUCE || r == c->root) {
        if (brt_check_reduced(c->type, c->op, c->seed, n, b->recvbuff, 0, cnt, why, sizeof(why))) {
            snprintf(err, errlen, "recvbuff: %s", why);
            return 1;
        }
    }
    if (!ip && !inputs_unchanged(c, n, r, b->sendbuff, 0, cnt, err, errlen)) {
        return 1;
    }
    return 0;
}

static int check_block(uint32_t seed, int src, int dst, const unsigned char *p, size_t nbytes,
                       const char *what, int idx, char *err, size_t errlen)
{
    char why[256];
    if (brt_check_bytes(seed, src, dst, p, 0, nbytes, why, sizeof(why))) {
        if (idx >= 0) {
            snprintf(err, errlen, "%s block %d (from rank %d): %s", what, idx, src, why);
        } else {
            snprintf(err, errlen, "%s: %s", what, why);
        }
        return 1;
    }
    return 0;
}

static int verify_move(const brt_case_t *c, brt_buf_t *b, char *err, size_t errlen)
{
    const size_t ts = brt_type_info(c->type)->size;
    const int n = b->nranks, r = b->rank, R = c->root;
    const size_t cb = c->count * ts;
    const int ip = c->inplace && func_has_inplace(c->func);
    const unsigned char *s = b->sendbuff, *d = b->recvbuff;

    if (cb == 0 && c->func != BRT_SENDRECV) {
        return 0;
    }
    switch (c->func) {
    case BRT_BROADCAST:
    case BRT_BCAST:
        if (check_block(c->seed, R, -1, d, cb, "recvbuff", -1, err, errlen)) {
            return 1;
        }
        return r == R && !ip && c->func == BRT_BROADCAST &&
               check_block(c->seed, R, -1, s, cb, "sendbuff (modified)", -1, err, errlen);
    case BRT_ALLGATHER:
        for (int p = 0; p < n; p++) {
            if (check_block(c->seed, p, -1, d + (size_t)p * cb, cb, "recvbuff", p, err, errlen)) {
                return 1;
            }
        }
        return !ip && check_block(c->seed, r, -1, s, cb, "sendbuff (modified)", -1, err, errlen);
    case BRT_ALLTOALL:
        for (int p = 0; p < n; p++) {
            if (check_block(c->seed, p, r, d + (size_t)p * cb, cb, "recvbuff", p, err, errlen) ||
                check_block(c->seed, r, p, s + (size_t)p * cb, cb, "sendbuff (modified)", p, err,
                            errlen)) {
                return 1;
            }
        }
        return 0;
    case BRT_GATHER:
        if (r == R) {
            for (int p = 0; p < n; p++) {
                if (check_block(c->seed, p, -1, d + (size_t)p * cb, cb, "recvbuff", p, err,
                                errlen)) {
                    return 1;
                }
            }
        }
        return !(ip && r == R) &&
               check_block(c->seed, r, -1, s, cb, "sendbuff (modified)", -1, err, errlen);
    case BRT_SCATTER:
        if (check_block(c->seed, R, r, d, cb, "recvbuff", -1, err, errlen)) {
            return 1;
        }
        if (r == R) {
            for (int p = 0; p < n; p++) {
                if (!(ip && p == R) && check_block(c->seed, R, p, s + (size_t)p * cb, cb,
                                                   "sendbuff (modified)", p, err, errlen)) {
                    return 1;
                }
            }
        }
        return 0;
    default: break;
    }
    /* Send/recv. */
    for (int p = 0; p < n; p++) {
        size_t soff, roff;
        int sp = p, rp = p;
        if (c->root == BRT_SHIFT_ALL) {
            soff = pair_offset(c, n, r, p, 1) * ts;
            roff = pair_offset(c, n, r, p, 0) * ts;
        } else {
            if (p > 0) {
                break;
            }
            sp = sendrecv_peer(c, n, r, 1);
            rp = sendrecv_peer(c, n, r, 0);
            soff = roff = 0;
        }
        if ((d != NULL && check_block(c->seed, rp, r, d + roff, pair_count(c, rp, r) * ts,
                                      "recvbuff from peer", rp, err, errlen)) ||
            (s != NULL && check_block(c->seed, r, sp, s + soff, pair_count(c, r, sp) * ts,
                                      "sendbuff (modified) to peer", sp, err, errlen))) {
            return 1;
        }
    }
    return 0;
}

int brt_case_verify(const brt_case_t *c, brt_buf_t *b, char *err, size_t errlen)
{
    int bad;
    if (brt_func_reduces(c->func)) {
        bad = c->count > 0 && verify_reduce_family(c, b, err, errlen);
    } else {
        bad = verify_move(c, b, err, errlen);
    }
    if (bad) {
        return 1;
    }
    if (!mem_guards_ok(b->send_mem, b->send_bytes, "send allocation", err, errlen) ||
        !mem_guards_ok(b->recv_mem, b->recv_bytes, "recv allocation", err, errlen)) {
        return 1;
    }
    return 0;
}

void brt_case_teardown(brt_buf_t *b)
{
    if (b->op_created) {
        ncclResult_t res = ncclRedOpDestroy(b->ncop, b->comm);
        if (res != ncclSuccess) {
            fprintf(stderr, "ncclRedOpDestroy returned %d: %s\n", (int)res,
                    ncclGetLastError(b->comm));
        }
        b->op_created = 0;
    }
    free(b->send_mem);
    free(b->recv_mem);
    b->send_mem = b->recv_mem = NULL;
}

/* ---- running lists ---- */

static size_t err_append(char *err, size_t errlen, size_t used, const char *line)
{
    if (used < errlen) {
        int k = snprintf(err + used, errlen - used, "%s%s", used ? "\n" : "", line);
        used = k < 0 ? used : used + (size_t)k;
    }
    return used;
}

int brt_cases_run(ncclComm_t *comms, int nlocal, const brt_case_t *cases, size_t ncases,
                  brt_rank_ctx_t *ctx, char *err, size_t errlen)
{
    brt_buf_t bufs[BRT_MAX_RANKS];
    char name[192], why[1024], line[1400];
    size_t used = 0;
    int fails = 0, n = 0, stop = 0;

    err[0] = '\0';
    for (int i = 0; i < nlocal; i++) {
        memset(&bufs[i], 0, sizeof(bufs[i]));
        bufs[i].comm = comms[i];
        if (ncclCommCount(comms[i], &bufs[i].nranks) != ncclSuccess ||
            ncclCommUserRank(comms[i], &bufs[i].rank) != ncclSuccess) {
            snprintf(err, errlen, "ncclCommCount/UserRank failed: %s", ncclGetLastError(comms[i]));
            return 1;
        }
        n = bufs[i].nranks;
    }
    const int timing = getenv("BRT_TIMING") != NULL; /* per-case times on stderr */
    for (size_t k = 0; k < ncases && !stop; k++) {
        const brt_case_t *c = &cases[k];
        ncclResult_t res = ncclSuccess, end = ncclSuccess;
        int failed_at = -1, set = 0;
        double t0 = brt_now(), t1 = t0, t2 = t0;

        brt_case_name(c, n, name, sizeof(name));
        if (ctx != NULL) {
            brt_doing(ctx, "case %zu of %zu: %s", k + 1, ncases, name);
        }
        for (; set < nlocal; set++) {
            if (brt_case_setup(c, &bufs[set], why, sizeof(why)) != 0) {
                snprintf(line, sizeof(line), "rank %d: %s: setup: %s", bufs[set].rank, name, why);
                used = err_append(err, errlen, used, line);
                stop = 1;
                break;
            }
        }
        if (set == nlocal) {
            t1 = brt_now();
            if (nlocal > 1) {
                res = ncclGroupStart();
            }
            for (int i = 0; i < nlocal && res == ncclSuccess; i++) {
                res = brt_case_issue(c, &bufs[i]);
                failed_at = res != ncclSuccess ? i : -1;
            }
            if (nlocal > 1) {
                end = ncclGroupEnd();
                if (res == ncclSuccess && end != ncclSuccess) {
                    res = end;
                    failed_at = nlocal > 1 ? -2 : 0;
                }
            }
            if (res != ncclSuccess) {
                ncclComm_t ec = failed_at >= 0 ? bufs[failed_at].comm : bufs[0].comm;
                snprintf(line, sizeof(line), "rank %d: %s: %s returned %d (%s): %s",
                         failed_at >= 0 ? bufs[failed_at].rank : -1, name,
                         failed_at == -2 ? "ncclGroupEnd" : "the call", (int)res,
                         ncclGetErrorString(res), ncclGetLastError(ec));
                used = err_append(err, errlen, used, line);
                if (ctx != NULL) {
                    ctx->report->result = res;
                }
                stop = 1;
            }
            t2 = brt_now();
            for (int i = 0; i < nlocal && res == ncclSuccess; i++) {
                if (brt_case_verify(c, &bufs[i], why, sizeof(why)) != 0 && fails++ < MAX_FAILS) {
                    snprintf(line, sizeof(line), "rank %d: %s: %s", bufs[i].rank, name, why);
                    used = err_append(err, errlen, used, line);
                }
            }
        }
        for (int i = 0; i < set; i++) {
            brt_case_teardown(&bufs[i]);
        }
        if (timing) {
            fprintf(stderr, "[rank %d] %s: setup %.1f ms, call %.1f ms, verify %.1f ms\n",
                    bufs[0].rank, name, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (brt_now() - t2) * 1e3);
        }
    }
    if (fails > MAX_FAILS) {
        snprintf(line, sizeof(line), "... and %d more wrong results", fails - MAX_FAILS);
        used = err_append(err, errlen, used, line);
    }
    return stop ? 2 : fails > 0;
}

int brt_group_run(ncclComm_t *comms, int nlocal, const brt_case_t *cases, size_t ncases, char *err,
                  size_t errlen)
{
    const size_t nb = (size_t)nlocal * ncases;
    brt_buf_t *bufs = calloc(nb ? nb : 1, sizeof(*bufs));
    char name[192], why[1024] = "", line[1400];
    size_t used = 0, set = 0;
    int ret = 0;
    ncclResult_t res = ncclSuccess, end;

    err[0] = '\0';
    if (bufs == NULL) {
        snprintf(err, errlen, "out of memory");
        return 2;
    }
    for (; set < nb; set++) {
        brt_buf_t *b = &bufs[set];
        b->comm = comms[set % (size_t)nlocal];
        if (ncclCommCount(b->comm, &b->nranks) != ncclSuccess ||
            ncclCommUserRank(b->comm, &b->rank) != ncclSuccess ||
            brt_case_setup(&cases[set / (size_t)nlocal], b, why, sizeof(why)) != 0) {
            snprintf(err, errlen, "setup of case %zu: %s", set / (size_t)nlocal, why);
            ret = 2;
            goto out;
        }
    }
    res = ncclGroupStart();
    for (size_t i = 0; i < nb && res == ncclSuccess; i++) {
        res = brt_case_issue(&cases[i / (size_t)nlocal], &bufs[i]);
        if (res != ncclSuccess) {
            brt_case_name(&cases[i / (size_t)nlocal], bufs[i].nranks, name, sizeof(name));
            snprintf(line, sizeof(line), "rank %d: in a group: %s returned %d (%s): %s",
                     bufs[i].rank, name, (int)res, ncclGetErrorString(res),
                     ncclGetLastError(bufs[i].comm));
            used = err_append(err, errlen, used, line);
        }
    }
    end = ncclGroupEnd();
    if (res == ncclSuccess && end != ncclSuccess) {
        snprintf(line, sizeof(line), "rank %d: ncclGroupEnd of %zu calls returned %d (%s): %s",
                 bufs[0].rank, nb, (int)end, ncclGetErrorString(end),
                 ncclGetLastError(bufs[0].comm));
        used = err_append(err, errlen, used, line);
        res = end;
    }
    if (res != ncclSuccess) {
        ret = 2;
        goto out;
    }
    for (size_t i = 0; i < nb; i++) {
        if (brt_case_verify(&cases[i / (size_t)nlocal], &bufs[i], why, sizeof(why)) != 0) {
            brt_case_name(&cases[i / (size_t)nlocal], bufs[i].nranks, name, sizeof(name));
            snprintf(line, sizeof(line), "rank %d: in a group of %zu calls: %s: %s", bufs[i].rank,
                     ncases, name, why);
            used = err_append(err, errlen, used, line);
            ret = 1;
        }
    }
out:
    for (size_t i = 0; i < set; i++) {
        brt_case_teardown(&bufs[i]);
    }
    free(bufs);
    return ret;
}

/* ---- case lists ---- */

size_t brt_buffsize(void)
{
    const char *v = getenv("NCCL_BUFFSIZE");
    char *end;
    unsigned long long x;
    if (v == NULL || *v == '\0') {
        return 4194304;
    }
    errno = 0;
    x = strtoull(v, &end, 0);
    if (errno != 0) {
        return 4194304;
    }
    switch (*end) {
    case 'k':
    case 'K': x <<= 10; break;
    case 'm':
    case 'M': x <<= 20; break;
    case 'g':
    case 'G': x <<= 30; break;
    default: break;
    }
    return (size_t)x;
}

typedef struct {
    brt_case_t *v;
    size_t n;
    size_t cap;
    int nranks;
} case_list_t;

static void add_case(case_list_t *l, brt_func_t f, ncclDataType_t t, int op, size_t count,
                     int inplace)
{
    brt_case_t *c;
    size_t k = l->n;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        brt_case_t *v = realloc(l->v, cap * sizeof(*v));
        if (v == NULL) {
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    c = &l->v[l->n++];
    memset(c, 0, sizeof(*c)); /* padding too: lists compare with memcmp */
    c->func = f;
    c->type = t;
    c->op = brt_func_reduces(f) ? op : BRT_SUM;
    c->count = count;
    c->inplace = func_has_inplace(f) ? inplace : 0;
    c->null_unused = (int)((k >> 1) & 1);
    c->seed = (uint32_t)(k * 2654435761u) ^ (uint32_t)l->nranks;
    /* Roots (and send/recv shifts, all pairs included) rotate over every rank. */
    if (f == BRT_SENDRECV) {
        c->root = (int)(k % (size_t)(l->nranks + 1)) - 1;
    } else {
        c->root = (int)(k % (size_t)l->nranks);
    }
}

/* Sanitizer builds (several times slower) take half of the full and big matrices, in turn,
 * keeping every collective with every size, element size, op and placement; Release runs
 * them whole. */
#ifdef BRT_SANITIZED
#define SAMPLED(k) ((k) % 2 == 0)
#else
#define SAMPLED(k) 1
#endif

static void build_full(case_list_t *l)
{
    static const size_t sizes[] = {0, 1, 7, 4097};
    for (int f = 0; f < BRT_NFUNCS; f++) {
        int nops = brt_func_reduces((brt_func_t)f) ? BRT_NOPS : 1;
        int nplace = func_has_inplace((brt_func_t)f) ? 2 : 1;
        for (int ti = 0; ti < BRT_NTYPES; ti++) {
            for (int op = 0; op < nops; op++) {
                for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
                    if (!SAMPLED((size_t)(f + ti + op) + s)) {
                        continue; /* two sizes of four, rotating */
                    }
                    for (int ip = 0; ip < nplace; ip++) {
                        add_case(l, (brt_func_t)f, brt_type_at(ti), op, sizes[s], ip);
                    }
                }
            }
        }
    }
}

static void build_thin(case_list_t *l)
{
    static const size_t sizes[] = {1, 7, 4097};
    for (int f = 0; f < BRT_NFUNCS; f++) {
        add_case(l, (brt_func_t)f, ncclFloat32, BRT_SUM, 0, 0);
        for (int ti = 0; ti < BRT_NTYPES; ti++) {
            add_case(l, (brt_func_t)f, brt_type_at(ti), (ti + f) % BRT_NOPS, sizes[(ti + f) % 3],
                     (ti >> 1) & 1);
        }
    }
}

/* Big: above NCCL_BUFFSIZE for every type when the FIFO is small. Huge: 1M+3 elements for
 * a few (type, op) pairs per collective, whatever the FIFO size. */
static void build_big(case_list_t *l, int with_huge)
{
    static const struct {
        brt_func_t f;
        ncclDataType_t t;
        int op;
    } huge[] = {
        {BRT_ALLREDUCE, ncclFloat32, BRT_SUM}, {BRT_ALLREDUCE, ncclBfloat16, BRT_AVG},
        {BRT_ALLREDUCE, ncclUint64, BRT_MAX},  {BRT_ALLREDUCE, ncclFloat8e4m3, BRT_PREMULSUM},
        {BRT_BROADCAST, ncclFloat64, BRT_SUM}, {BRT_BCAST, ncclInt8, BRT_SUM},
        {BRT_REDUCE, ncclInt32, BRT_PROD},     {BRT_REDUCE, ncclFloat16, BRT_MIN},
        {BRT_ALLGATHER, ncclUint8, BRT_SUM},   {BRT_REDUCESCATTER, ncclFloat8e5m2, BRT_SUM},
        {BRT_ALLTOALL, ncclUint8, BRT_SUM},    {BRT_GATHER, ncclInt8, BRT_SUM},
        {BRT_SCATTER, ncclUint8, BRT_SUM},     {BRT_SENDRECV, ncclInt32, BRT_SUM},
    };
    size_t bs = brt_buffsize();
    if (!with_huge) {
        /* Above the FIFO for every type when it is small; a default 4 MiB FIFO leaves
         * this to the huge list. */
        if (bs <= 512 * 1024) {
            for (int f = 0; f < BRT_NFUNCS; f++) {
                for (int ti = 0; ti < BRT_NTYPES; ti++) {
                    ncclDataType_t t = brt_type_at(ti);
                    size_t count = bs * 3 / 2 / brt_type_info(t)->size + 3;
                    if (!SAMPLED(ti + f)) {
                        continue; /* half the types, each element size still there */
                    }
#ifdef BRT_SANITIZED
                    /* Ops and placement rotate over the types kept. */
                    add_case(l, (brt_func_t)f, t, (ti + f) / 2 % BRT_NOPS, count, (ti >> 1) & 1);
#else
                    add_case(l, (brt_func_t)f, t, (ti + f) % BRT_NOPS, count, ti & 1);
#endif
                }
            }
        }
        return;
    }
    for (size_t k = 0; k < sizeof(huge) / sizeof(huge[0]); k++) {
        add_case(l, huge[k].f, huge[k].t, huge[k].op, HUGE_COUNT, (int)(k & 1));
    }
}

size_t brt_cases_build(brt_matrix_t m, int nranks, brt_case_t **out)
{
    case_list_t l = {.v = NULL, .n = 0, .cap = 0, .nranks = nranks};
    switch (m) {
    case BRT_MATRIX_FULL: build_full(&l); break;
    case BRT_MATRIX_THIN: build_thin(&l); break;
    case BRT_MATRIX_BIG: build_big(&l, 0); break;
    default: build_big(&l, 1); break;
    }
    *out = l.v;
    return l.n;
}
