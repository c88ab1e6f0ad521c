/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The reducer of the software collnet plugin: started by rank 0's plugin at connect
 * (fork, then exec of this program) with the listening socket every rank's handle points
 * to. It accepts one connection per rank, then repeats: read one request from every rank,
 * check that they agree (kind, count, type, op, number, window), and answer each rank:
 * AllReduce combines the inputs exactly (integer or double arithmetic in rank order,
 * rounded once to the type). AllGather and ReduceScatter work on a window of the
 * concatenation of every rank's block, as NCCL's proxy passes it: AllGather puts each
 * rank's bytes of the window in their place and sends every rank the whole window;
 * ReduceScatter combines every element of the window the same way and sends each rank
 * the part of the window that is its own block (nothing when the window misses it). It exits when a
 * rank closes its connection (the communicator is destroyed) or dies. Usage: collnet-reducer
 * LISTEN_FD NRANKS.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collnet_wire.h"

/* nccl.h's type and op numbers (the plugin ABI's). */
enum { T_I8, T_U8, T_I32, T_U32, T_I64, T_U64, T_F16, T_F32, T_F64, T_BF16 };
enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN };

/* ---- Arithmetic ---- */

static double half_to_double(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* Round to nearest even, through float's encoding (a double holding an exact result
 * rounds the same via float when it fits float, which every test value does). */
static uint16_t half_from_double(double d)
{
    float f = (float)d;
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, a = x & 0x7fffffff;
    if (a >= 0x7f800000) {
        return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000 ? 0x200 : 0));
    }
    if (a >= 0x477ff000) { /* rounds to 65520 or more */
        return (uint16_t)(sign | 0x7c00);
    }
    if (a < 0x38800000) { /* subnormal half: multiples of 2^-24 */
        float q = (float)fabs((double)f) * 16777216.0f;
        return (uint16_t)(sign | (uint32_t)nearbyintf(q));
    }
    uint32_t r = a + 0xfff + ((a >> 13) & 1); /* round to nearest even at bit 13 */
    return (uint16_t)(sign | ((r - 0x38000000) >> 13));
}

static double bf16_to_double(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t bf16_from_double(double d)
{
    float f = (float)d;
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) {
        return (uint16_t)((x >> 16) | 0x40);
    }
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static double load_f(int t, const char *p)
{
    uint16_t h;
    float f;
    double d;
    switch (t) {
    case T_F16: memcpy(&h, p, 2); return half_to_double(h);
    case T_BF16: memcpy(&h, p, 2); return bf16_to_double(h);
    case T_F32: memcpy(&f, p, 4); return f;
    default: memcpy(&d, p, 8); return d;
    }
}

static void store_f(int t, char *p, double v)
{
    uint16_t h;
    float f = (float)v;
    switch (t) {
    case T_F16:
        h = half_from_double(v);
        memcpy(p, &h, 2);
        break;
    case T_BF16:
        h = bf16_from_double(v);
        memcpy(p, &h, 2);
        break;
    case T_F32: memcpy(p, &f, 4); break;
    default: memcpy(p, &v, 8); break;
    }
}

static int64_t load_i(int t, const char *p)
{
    int8_t i8;
    uint8_t u8;
    int32_t i32;
    uint32_t u32;
    int64_t i64;
    switch (t) {
    case T_I8: memcpy(&i8, p, 1); return i8;
    case T_U8: memcpy(&u8, p, 1); return u8;
    case T_I32: memcpy(&i32, p, 4); return i32;
    case T_U32: memcpy(&u32, p, 4); return u32;
    default: memcpy(&i64, p, 8); return i64;
    }
}

static int is_float(int t)
{
    return t == T_F16 || t == T_F32 || t == T_F64 || t == T_BF16;
}

static int is_unsigned(int t)
{
    return t == T_U8 || t == T_U32 || t == T_U64;
}

/* out[i] = op over in[0..n-1][i], rank order. Integers wrap as the type does. */
static void reduce_all(int t, int op, char *const *in, int n, char *out, size_t count)
{
    size_t es = cn_type_size(t);
    for (size_t i = 0; i < count; i++) {
        if (is_float(t)) {
            double acc = load_f(t, in[0] + i * es);
            for (int r = 1; r < n; r++) {
                double v = load_f(t, in[r] + i * es);
                acc = op == OP_SUM    ? acc + v
                      : op == OP_PROD ? acc * v
                      : op == OP_MAX  ? (v > acc ? v : acc)
                                      : (v < acc ? v : acc);
            }
            store_f(t, out + i * es, acc);
            continue;
        }
        uint64_t acc = (uint64_t)load_i(t, in[0] + i * es);
        for (int r = 1; r < n; r++) {
            uint64_t v = (uint64_t)load_i(t, in[r] + i * es);
            int gt = is_unsigned(t) ? v > acc : (int64_t)v > (int64_t)acc;
            int lt = is_unsigned(t) ? v < acc : (int64_t)v < (int64_t)acc;
            acc = op == OP_SUM    ? acc + v
                  : op == OP_PROD ? acc * v
                  : op == OP_MAX  ? (gt ? v : acc)
                                  : (lt ? v : acc);
        }
        memcpy(out + i * es, &acc, es); /* little-endian: the low bytes */
    }
}

/* ---- The reducer process ---- */

typedef struct {
    int fd;
    cn_hdr_t h;
    char *data;
    size_t cap, got; /* bytes of header + data received for the current request */
} cn_peer_t;

/* Read what is there for peer p (of rank `rank`); 1 when its whole request arrived, -1 on
 * EOF/error. */
static int reducer_read(cn_peer_t *p, int rank)
{
    for (;;) {
        size_t need = sizeof(cn_hdr_t);
        if (p->got >= need) {
            need += cn_data_bytes(&p->h, rank, 0);
        }
        if (p->got == need && p->got >= sizeof(cn_hdr_t)) {
            return 1;
        }
        char *dst;
        if (p->got < sizeof(cn_hdr_t)) {
            dst = (char *)&p->h + p->got;
            need = sizeof(cn_hdr_t);
        } else {
            size_t bytes = cn_data_bytes(&p->h, rank, 0);
            if (bytes > p->cap) {
                char *nd = realloc(p->data, bytes);
                if (nd == NULL) {
                    return -1;
                }
                p->data = nd;
                p->cap = bytes;
            }
            dst = p->data + (p->got - sizeof(cn_hdr_t));
        }
        ssize_t n = recv(p->fd, dst, need - p->got, 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return 0;
        }
        if (n <= 0) {
            return -1;
        }
        p->got += (size_t)n;
        if (p->got == sizeof(cn_hdr_t) && p->h.magic != CN_MAGIC) {
            return -1;
        }
    }
}

/* Every rank's request k arrived: check, reduce, reply. */
static int reducer_answer(cn_peer_t *peers, int n, char **in, char **out_p, size_t *out_cap)
{
    cn_hdr_t r = peers[0].h;
    /* The result: the reduced input, the window gathered, or the window reduced. */
    size_t bytes = (size_t)r.count * cn_type_size(r.type), off = 0;

    r.status = 0;
    for (int i = 1; i < n; i++) {
        const cn_hdr_t *h = &peers[i].h;
        if (h->count != r.count || h->type != r.type || h->op != r.op || h->seq != r.seq ||
            h->kind != r.kind || h->bytes_per_rank != r.bytes_per_rank ||
            h->window_off != r.window_off) {
            r.status = i; /* rank i disagrees with rank 0 */
        }
    }
    if (r.status == 0 && bytes > *out_cap) {
        char *no = realloc(*out_p, bytes);
        if (no == NULL) {
            return -1;
        }
        *out_p = no;
        *out_cap = bytes;
    }
    if (r.status == 0 && r.kind == CN_ALLGATHER) { /* each rank's bytes where they belong */
        for (int i = 0; i < n; i++) {
            size_t len = cn_own_bytes(&r, i, &off);
            if (len > 0) { /* a rank whose block the window misses sent nothing */
                memcpy(*out_p + off, peers[i].data, len);
            }
        }
    } else if (r.status == 0) {
        for (int i = 0; i < n; i++) {
            in[i] = peers[i].data;
        }
        reduce_all(r.type, r.op, in, n, *out_p, r.count);
    }
    for (int i = 0; i < n; i++) {
        cn_hdr_t mine = r;
        size_t len = cn_data_bytes(&r, i, 1);
        off = 0;
        if (r.kind == CN_REDUCESCATTER) { /* the window's part that is rank i's block */
            (void)cn_own_bytes(&r, i, &off);
        }
        if (r.status != 0) {
            mine.count = peers[i].h.count; /* what the rank sent, for its message */
        }
        if (cn_write_all(peers[i].fd, &mine, sizeof(mine)) != 0 ||
            (r.status == 0 && cn_write_all(peers[i].fd, *out_p + off, len) != 0)) {
            return -1;
        }
        peers[i].got = 0;
    }
    return r.status == 0 ? 0 : -1;
}

static void reducer_main(int lfd, int n)
{
    cn_peer_t *peers = calloc((size_t)n, sizeof(*peers));
    char **in = calloc((size_t)n, sizeof(*in));
    struct pollfd *pf = calloc((size_t)n, sizeof(*pf));
    char *out = NULL;
    size_t out_cap = 0;

    if (peers == NULL || in == NULL || pf == NULL) {
        exit(1);
    }
    for (int i = 0; i < n; i++) {
        int32_t rank = -1;
        struct pollfd lp = {.fd = lfd, .events = POLLIN};
        if (poll(&lp, 1, 60000) <= 0) {
            exit(1); /* a rank never came: its init failed, nobody needs us */
        }
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0 || recv(fd, &rank, sizeof(rank), MSG_WAITALL) != (ssize_t)sizeof(rank) ||
            rank < 0 || rank >= n || peers[rank].fd > 0) {
            exit(1);
        }
        peers[rank].fd = fd;
    }
    close(lfd);
    for (;;) {
        int complete = 0;
        for (int i = 0; i < n; i++) {
            pf[i].fd = peers[i].fd;
            pf[i].events = POLLIN;
        }
        if (poll(pf, (nfds_t)n, 1000) < 0 && errno != EINTR) {
            exit(1);
        }
        for (int i = 0; i < n; i++) {
            int r = reducer_read(&peers[i], i);
            if (r < 0) {
                exit(0); /* a rank closed (closeColl) or died: the communicator is over */
            }
            complete += r;
        }
        if (complete == n && reducer_answer(peers, n, in, &out, &out_cap) != 0) {
            exit(0); /* the ranks were told; nothing sensible follows */
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        return 2;
    }
    int lfd = atoi(argv[1]), n = atoi(argv[2]);
    if (lfd < 0 || n <= 0) {
        return 2;
    }
    reducer_main(lfd, n);
    return 0;
}
