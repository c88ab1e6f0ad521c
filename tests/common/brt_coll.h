/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Collective test cases: one case is a collective (or a send/recv pattern) with a type,
 * an op, a count, a root, a placement and a seed. Every rank sets up its own buffers
 * with guard bytes around them, issues the NCCL call(s), and verifies its output
 * against the reference of brt_data.h, that out-of-place inputs are unchanged and that
 * the guards are intact. brt_cases_run drives a list of cases over one communicator per
 * calling thread, or over several (the single-thread ncclCommInitAll pattern: one
 * ncclGroupStart/End around every rank's call).
 */
#ifndef BRT_COLL_H_
#define BRT_COLL_H_

#include <stddef.h>
#include <stdint.h>

#include <nccl.h>

#include "brt_data.h"
#include "brt_launch.h"

typedef enum {
    BRT_ALLREDUCE,
    BRT_BROADCAST,
    BRT_BCAST,
    BRT_REDUCE,
    BRT_ALLGATHER,
    BRT_REDUCESCATTER,
    BRT_ALLTOALL,
    BRT_GATHER,
    BRT_SCATTER,
    BRT_SENDRECV,
    BRT_NFUNCS
} brt_func_t;

/* For BRT_SENDRECV, root is a ring shift (send to rank + shift), or this: every rank
 * sends to and receives from every rank, itself included, with a count per pair. */
#define BRT_SHIFT_ALL (-1)

typedef struct {
    brt_func_t func;
    ncclDataType_t type;
    int op;          /* BRT_SUM..BRT_PREMULSUM for reductions */
    size_t count;    /* NCCL's count argument (per rank block for AllGather & co.) */
    int root;        /* root, or the send/recv shift */
    int inplace;     /* NCCL's in-place placement for this collective */
    int null_unused; /* pass NULL for buffers this rank does not use */
    uint32_t seed;
} brt_case_t;

/* One rank's buffers and op for one case. */
typedef struct {
    ncclComm_t comm;
    int rank;
    int nranks;
    unsigned char *send_mem; /* guard | payload | guard */
    unsigned char *recv_mem;
    size_t send_bytes; /* payload sizes */
    size_t recv_bytes;
    void *sendbuff; /* what the NCCL call gets */
    void *recvbuff;
    ncclRedOp_t ncop;
    int op_created;
    cudaStream_t stream; /* the calls' stream (NULL: the default stream; host buffers) */
} brt_buf_t;

/* Bytes of guard on each side of a payload (send_mem and recv_mem hold
 * BRT_GUARD + payload + BRT_GUARD bytes). */
#define BRT_GUARD 64

const char *brt_func_name(brt_func_t f);
int brt_func_reduces(brt_func_t f);
/* "AllReduce float16 premulsum count 7 in-place root 2 ranks 4 seed 9". */
void brt_case_name(const brt_case_t *c, int nranks, char *buf, size_t len);

/* Allocate and fill rank b->rank's buffers (b->comm, rank, nranks set by the caller);
 * PreMulSum creates the op. Returns 0, or 1 with err. */
int brt_case_setup(const brt_case_t *c, brt_buf_t *b, char *err, size_t errlen);
/* The NCCL call(s) of this rank. */
ncclResult_t brt_case_issue(const brt_case_t *c, brt_buf_t *b);
/* Check outputs, unchanged inputs and guards. Returns 0, or 1 with err. */
int brt_case_verify(const brt_case_t *c, brt_buf_t *b, char *err, size_t errlen);
/* Destroy the op and free the buffers. */
void brt_case_teardown(brt_buf_t *b);

/*
 * Run cases on comms[0..nlocal-1] (one per local rank). nlocal > 1 puts every rank's
 * call of a case in one group. Wrong results are described (the first 8) and the run goes
 * on, so every rank still makes the same calls; an error returned by NCCL stops it.
 * Progress goes to ctx->report when ctx is not NULL. Returns 0 when all passed, 1 when
 * results were wrong, 2 when a call failed (the communicator may be unusable); err says
 * what happened.
 */
int brt_cases_run(ncclComm_t *comms, int nlocal, const brt_case_t *cases, size_t ncases,
                  brt_rank_ctx_t *ctx, char *err, size_t errlen);

/*
 * Every case of the list in ONE group: set up all of them on every local comm, then
 * ncclGroupStart, every call, ncclGroupEnd, then verify. Returns like brt_cases_run.
 */
int brt_group_run(ncclComm_t *comms, int nlocal, const brt_case_t *cases, size_t ncases, char *err,
                  size_t errlen);

typedef enum {
    BRT_MATRIX_FULL, /* every collective x type x op x {0, 1, 7, 4097} x placement */
    BRT_MATRIX_THIN, /* every collective x type, ops and sizes rotating */
    BRT_MATRIX_BIG,  /* counts above a small NCCL_BUFFSIZE, every type, ops rotating */
    BRT_MATRIX_HUGE  /* 1M+3 elements, a few (type, op) pairs per collective */
} brt_matrix_t;

/* Build a case list (malloc'd in *out) for nranks; identical on every rank. */
size_t brt_cases_build(brt_matrix_t m, int nranks, brt_case_t **out);

/* NCCL_BUFFSIZE as the library will read it (default 4 MiB). */
size_t brt_buffsize(void);

#endif /* BRT_COLL_H_ */
