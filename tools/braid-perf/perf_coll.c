/* SPDX-License-Identifier: Apache-2.0 */
/*
 * braid-perf collectives: names, nccl-tests' size and bandwidth conventions, the call
 * itself, and for each collective what every rank feeds in and must get back.
 *
 * Sizes follow nccl-tests: for allgather, reducescatter and alltoall the size column is
 * the whole buffer (count x nranks x type size) and count is the per-rank count handed to
 * NCCL; for the others both describe one rank's buffer. busbw = algbw x a factor that
 * makes the figure comparable with the link bandwidth whatever the rank count.
 */
#include "perf.h"

#include <ctype.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const struct perf_coll_info infos[PERF_NUM_COLLS] = {
    [PERF_ALLREDUCE] = {"allreduce", "all_reduce_perf", "all_reduce", 1, 0, 0, 1},
    [PERF_ALLGATHER] = {"allgather", "all_gather_perf", "all_gather", 0, 0, 1, 1},
    [PERF_REDUCESCATTER] = {"reducescatter", "reduce_scatter_perf", "reduce_scatter", 1, 0, 1, 1},
    [PERF_BROADCAST] = {"broadcast", "broadcast_perf", "bcast", 0, 1, 0, 1},
    [PERF_REDUCE] = {"reduce", "reduce_perf", "reduce", 1, 1, 0, 1},
    [PERF_ALLTOALL] = {"alltoall", "alltoall_perf", "all_to_all", 0, 0, 1, 0},
    [PERF_SENDRECV] = {"sendrecv", "sendrecv_perf", "send_recv", 0, 0, 0, 0},
    [PERF_ALLTOALLV] = {"alltoallv", "alltoallv_perf", "all_to_all_v", 0, 0, 1, 0},
    [PERF_ALLTOALL_P2P] = {"alltoall_p2p", "alltoall_p2p_perf", "all_to_all_p2p", 0, 0, 1, 0},
    [PERF_ALLGATHERV] = {"allgatherv", "allgatherv_perf", "all_gather_v", 0, 0, 1, 1},
    [PERF_ALLGATHER_P2P] = {"allgather_p2p", "allgather_p2p_perf", "all_gather_p2p", 0, 0, 1, 1},
};

/* The collective whose data layout and results a variant shares (v-collectives with equal
 * counts and their grouped send/recv forms move exactly alltoall's or allgather's data). */
static perf_coll_t layout_of(perf_coll_t coll)
{
    switch (coll) {
    case PERF_ALLTOALLV:
    case PERF_ALLTOALL_P2P: return PERF_ALLTOALL;
    case PERF_ALLGATHERV:
    case PERF_ALLGATHER_P2P: return PERF_ALLGATHER;
    default: return coll;
    }
}

const struct perf_coll_info *perf_coll_info(perf_coll_t coll)
{
    return &infos[coll];
}

/* Compares ignoring case and treating '-' as '_'. */
static int name_eq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        char ca = *a == '-' ? '_' : (char)tolower((unsigned char)*a);
        char cb = *b == '-' ? '_' : (char)tolower((unsigned char)*b);
        if (ca != cb) {
            return 0;
        }
    }
    return *a == *b;
}

int perf_coll_lookup(const char *name, perf_coll_t *coll_p)
{
    char buf[64];
    size_t len = strlen(name);
    /* "all_reduce_perf_mpi" and "braid-perf-mpi"-style suffixes name the same test. */
    if (len >= 4 && len < sizeof(buf) && name_eq(name + len - 4, "_mpi")) {
        memcpy(buf, name, len - 4);
        buf[len - 4] = '\0';
        name = buf;
    }
    for (int c = 0; c < PERF_NUM_COLLS; c++) {
        if (name_eq(name, infos[c].name) || name_eq(name, infos[c].binary) ||
            name_eq(name, infos[c].alias)) {
            *coll_p = (perf_coll_t)c;
            return 0;
        }
    }
    return -1;
}

double perf_coll_busbw_factor(perf_coll_t coll, int nranks)
{
    switch (layout_of(coll)) {
    case PERF_ALLREDUCE: return 2.0 * (nranks - 1) / nranks;
    case PERF_ALLGATHER:
    case PERF_REDUCESCATTER:
    case PERF_ALLTOALL: return (double)(nranks - 1) / nranks;
    default: return 1.0; /* broadcast, reduce, sendrecv */
    }
}

size_t perf_coll_count(perf_coll_t coll, size_t bytes, size_t tsize, int nranks)
{
    return infos[coll].total_size ? bytes / tsize / (size_t)nranks : bytes / tsize;
}

void perf_coll_elems(perf_coll_t coll, size_t count, int nranks, size_t *send_elems_p,
                     size_t *recv_elems_p)
{
    size_t n = (size_t)nranks;
    coll = layout_of(coll);
    *send_elems_p = coll == PERF_REDUCESCATTER || coll == PERF_ALLTOALL ? count * n : count;
    *recv_elems_p = coll == PERF_ALLGATHER || coll == PERF_ALLTOALL ? count * n : count;
}

void perf_coll_buffers(perf_coll_t coll, const struct perf_rank *r, size_t count, size_t tsize,
                       int in_place, char *send, char *recv, void **send_p, void **recv_p)
{
    size_t mine = (size_t)r->rank * count * tsize;
    coll = layout_of(coll);
    *send_p = send;
    *recv_p = recv;
    if (!in_place) {
        return;
    }
    /* In place, the larger buffer holds both; a rank's slice sits at its rank's offset. */
    *send_p = coll == PERF_ALLGATHER ? recv + mine : recv;
    *recv_p = coll == PERF_REDUCESCATTER ? recv + mine : recv;
}

typedef ncclResult_t (*alltoall_fn)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                                    cudaStream_t);
typedef ncclResult_t (*alltoallv_fn)(const void *, const size_t *, const size_t *, void *,
                                     const size_t *, const size_t *, ncclDataType_t, ncclComm_t,
                                     cudaStream_t);
typedef ncclResult_t (*allgatherv_fn)(const void *, size_t, void *, const size_t *,
                                      const size_t *, ncclDataType_t, ncclComm_t, cudaStream_t);

/* A function of the library looked up at run time, so that the binary still starts on a
 * libnccl without it (ncclAlltoAll is new in NCCL 2.28; braid* are Braid's own). */
struct lazy_sym {
    const char *name;
    void *fn;
    int looked;
};

static void *lazy(struct lazy_sym *s)
{
    if (!__atomic_load_n(&s->looked, __ATOMIC_ACQUIRE)) {
        s->fn = dlsym(RTLD_DEFAULT, s->name);
        __atomic_store_n(&s->looked, 1, __ATOMIC_RELEASE); /* publishes fn to other threads */
    }
    return s->fn;
}

static struct lazy_sym sym_alltoall = {"ncclAlltoAll", NULL, 0};
static struct lazy_sym sym_alltoallv = {"braidAlltoAllV", NULL, 0};
static struct lazy_sym sym_allgatherv = {"braidAllGatherV", NULL, 0};

/* The alltoall (to = all) or allgather (to = 0: this rank's block to everyone) exchange as
 * one group of sends and receives, as programs do without a collective for it. */
static ncclResult_t exchange_p2p(const struct perf_rank *r, const char *send, char *recv,
                                 size_t count, ncclDataType_t type, int all, cudaStream_t stream)
{
    size_t bytes = count * perf_type_get(type)->size;
    ncclResult_t res = ncclGroupStart();
    for (int p = 0; p < r->nranks && res == ncclSuccess; p++) {
        res = ncclSend(send + (all ? (size_t)p * bytes : 0), count, type, p, r->comm, stream);
        if (res == ncclSuccess) {
            res = ncclRecv(recv + (size_t)p * bytes, count, type, p, r->comm, stream);
        }
    }
    ncclResult_t end = ncclGroupEnd();
    return res != ncclSuccess ? res : end;
}

/* A v-collective with count elements per rank (pair), blocks packed. */
static ncclResult_t launch_v(perf_coll_t coll, const struct perf_rank *r, const void *send,
                             void *recv, size_t count, ncclDataType_t type, cudaStream_t stream)
{
    void *fn = lazy(coll == PERF_ALLTOALLV ? &sym_alltoallv : &sym_allgatherv);
    size_t *counts = malloc((size_t)r->nranks * sizeof(*counts));
    ncclResult_t res = ncclInvalidUsage;
    if (fn == NULL || counts == NULL) {
        free(counts);
        return fn == NULL ? ncclInvalidUsage : ncclSystemError; /* not Braid: said by main */
    }
    for (int p = 0; p < r->nranks; p++) {
        counts[p] = count;
    }
    if (coll == PERF_ALLTOALLV) {
        alltoallv_fn f;
        memcpy(&f, &fn, sizeof(f)); /* ISO C has no object-to-function pointer cast */
        res = f(send, counts, NULL, recv, counts, NULL, type, r->comm, stream);
    } else {
        allgatherv_fn f;
        memcpy(&f, &fn, sizeof(f));
        res = f(send, count, recv, counts, NULL, type, r->comm, stream);
    }
    free(counts);
    return res;
}

ncclResult_t perf_coll_launch(perf_coll_t coll, const struct perf_rank *r, const void *send,
                              void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                              cudaStream_t stream)
{
    int root = r->opts->root, next = (r->rank + 1) % r->nranks;
    int prev = (r->rank + r->nranks - 1) % r->nranks;
    switch (coll) {
    case PERF_ALLREDUCE: return ncclAllReduce(send, recv, count, type, op, r->comm, stream);
    case PERF_ALLGATHER: return ncclAllGather(send, recv, count, type, r->comm, stream);
    case PERF_REDUCESCATTER: return ncclReduceScatter(send, recv, count, type, op, r->comm, stream);
    case PERF_BROADCAST: return ncclBroadcast(send, recv, count, type, root, r->comm, stream);
    case PERF_REDUCE: return ncclReduce(send, recv, count, type, op, root, r->comm, stream);
    case PERF_ALLTOALL:
        if (lazy(&sym_alltoall) != NULL) {
            alltoall_fn f;
            void *fn = lazy(&sym_alltoall);
            memcpy(&f, &fn, sizeof(f));
            return f(send, recv, count, type, r->comm, stream);
        }
        return exchange_p2p(r, send, recv, count, type, 1, stream);
    case PERF_ALLTOALL_P2P: return exchange_p2p(r, send, recv, count, type, 1, stream);
    case PERF_ALLGATHER_P2P: return exchange_p2p(r, send, recv, count, type, 0, stream);
    case PERF_ALLTOALLV:
    case PERF_ALLGATHERV: return launch_v(coll, r, send, recv, count, type, stream);
    case PERF_SENDRECV: {
        ncclResult_t res = ncclGroupStart(), end;
        if (res == ncclSuccess) {
            res = ncclSend(send, count, type, next, r->comm, stream);
        }
        if (res == ncclSuccess) {
            res = ncclRecv(recv, count, type, prev, r->comm, stream);
        }
        end = ncclGroupEnd();
        return res != ncclSuccess ? res : end;
    }
    default: return ncclInvalidArgument;
    }
}

/* Writes this rank's input for check iteration g into its send buffer (host memory). */
void perf_coll_fill(perf_coll_t coll, const struct perf_rank *r, const struct perf_gen *g,
                    size_t count, int in_place, char *send, char *recv)
{
    const struct perf_type *t = g->type;
    size_t elems, recv_elems;
    void *sendp, *recvp;
    perf_coll_elems(coll, count, r->nranks, &elems, &recv_elems);
    perf_coll_buffers(coll, r, count, t->size, in_place, send, recv, &sendp, &recvp);
    for (size_t i = 0; i < elems; i++) {
        perf_store(t, sendp, i, perf_gen_value(g, r->rank, i));
    }
}

size_t perf_coll_check(perf_coll_t coll, const struct perf_rank *r, const struct perf_gen *g,
                       size_t count, const char *recv)
{
    const struct perf_type *t = g->type;
    int n = r->nranks, me = r->rank, root = r->opts->root;
    size_t wrong = 0, total = infos[coll].total_size ? count * (size_t)n : count;
    coll = layout_of(coll);
    if (coll == PERF_REDUCE && me != root) {
        return 0; /* only the root's output is defined */
    }
    if (coll == PERF_REDUCESCATTER) {
        total = count;
    }
    for (size_t i = 0; i < total; i++) {
        size_t p = count ? i / count : 0, j = count ? i % count : 0;
        double want;
        switch (coll) {
        case PERF_ALLREDUCE:
        case PERF_REDUCE: want = perf_gen_reduced(g, i); break;
        case PERF_REDUCESCATTER: want = perf_gen_reduced(g, (size_t)me * count + i); break;
        case PERF_BROADCAST: want = perf_gen_value(g, root, i); break;
        case PERF_ALLGATHER: want = perf_gen_value(g, (int)p, j); break;
        case PERF_ALLTOALL: want = perf_gen_value(g, (int)p, (size_t)me * count + j); break;
        default: want = perf_gen_value(g, (me + n - 1) % n, i); break; /* sendrecv */
        }
        wrong += !perf_value_ok(g, want, perf_load(t, recv, i));
    }
    return wrong;
}
