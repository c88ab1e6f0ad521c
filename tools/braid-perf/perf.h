/* SPDX-License-Identifier: Apache-2.0 */
/*
 * braid-perf: an nccl-tests-compatible benchmark for Braid (and for any libnccl.so.2).
 * This header is shared by the tool's files: the options, the collective table, the data
 * generator and checker, the cross-rank synchronisation (shared memory or MPI) and the
 * buffer allocator (host, or CUDA device memory when built with CUDA).
 *
 * Ranks: processes (forked with -N, or MPI ranks) x threads per process (-t). Each rank
 * runs perf_rank_main() in its own thread and only rank 0 prints.
 */
#ifndef BRAID_PERF_H_
#define BRAID_PERF_H_

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#define PERF_MAX_TYPES 16
#define PERF_MAX_OPS 8
#define PERF_SLOT_BYTES 256 /* per-rank slot in the sync area: a line or 32 doubles */
#define PERF_MAX_REDUCE (PERF_SLOT_BYTES / (int)sizeof(double))

/* The collectives braid-perf measures. */
typedef enum {
    PERF_ALLREDUCE,
    PERF_ALLGATHER,
    PERF_REDUCESCATTER,
    PERF_BROADCAST,
    PERF_REDUCE,
    PERF_ALLTOALL,
    PERF_SENDRECV,
    /* Braid's v-collectives (braid.h; equal counts, so the data is alltoall's and
     * allgather's), and the same exchanges as grouped ncclSend/ncclRecv to compare with. */
    PERF_ALLTOALLV,
    PERF_ALLTOALL_P2P,
    PERF_ALLGATHERV,
    PERF_ALLGATHER_P2P,
    PERF_NUM_COLLS
} perf_coll_t;

/* Static facts about one collective (perf_coll.c). */
struct perf_coll_info {
    const char *name;   /* canonical name for -C */
    const char *binary; /* nccl-tests binary name, also accepted as argv[0] */
    const char *alias;  /* a second accepted spelling */
    int has_op;         /* takes a reduction operator */
    int has_root;       /* takes a root */
    int total_size;     /* size column is the whole buffer: count x nranks x typesize */
    int check_in_place; /* in-place results are defined (alltoall and sendrecv: no) */
};

/* Options, as parsed from the command line; identical on every rank. */
struct perf_opts {
    perf_coll_t coll;
    size_t min_bytes, max_bytes;
    double step_factor; /* > 1: multiplicative step (-f) */
    size_t step_bytes;  /* additive step (-i), used when step_factor <= 1 */
    int iters, warmup, agg, check;
    int types[PERF_MAX_TYPES], ntypes;
    int ops[PERF_MAX_OPS], nops;
    int root;
    int avg_mode;  /* -a: 0 rank 0, 1 average, 2 minimum, 3 maximum over ranks */
    int nprocs;    /* -N: processes to fork (standalone mode) */
    int nthreads;  /* -t: ranks as threads in each process */
    int hosts;     /* -H: forked processes spread over this many simulated hosts (0: off) */
    int device;    /* --mem device: buffers in CUDA device memory */
    int memalloc;  /* --mem ncclmem: host buffers from ncclMemAlloc (peers may map them) */
    int places;    /* --place: bit 0 out-of-place, bit 1 in-place (default both) */
    int timeout_s; /* -T: whole-run limit, 0 = none */
    const char *json_path;
};

/* What one rank knows about its place in the job. */
struct perf_rank {
    int rank, nranks;
    int local; /* index in the sync area */
    int gpu;   /* CUDA device of this rank (device mode) */
    ncclComm_t comm;
    struct perf_sync *sync;
    const struct perf_opts *opts;
};

/* Per-type description used by the generator and the checker (perf_data.c). */
struct perf_type {
    ncclDataType_t nccl;
    const char *name;
    size_t size;
    int is_float, is_signed;
    double exact_max; /* every integer in [-exact_max, exact_max] is exact in the type */
};

/* One check: which values each rank contributes, at one check iteration. */
struct perf_gen {
    const struct perf_type *type;
    int op; /* ncclRedOp_t, or -1 for a collective without reduction */
    int nranks;
    uint64_t seed; /* per check iteration */
    double lo, hi; /* the range of the generated integers */
};

/* perf_coll.c */
const struct perf_coll_info *perf_coll_info(perf_coll_t coll);
int perf_coll_lookup(const char *name, perf_coll_t *coll_p);
double perf_coll_busbw_factor(perf_coll_t coll, int nranks);
size_t perf_coll_count(perf_coll_t coll, size_t bytes, size_t tsize, int nranks);
void perf_coll_elems(perf_coll_t coll, size_t count, int nranks, size_t *send_elems_p,
                     size_t *recv_elems_p);
void perf_coll_buffers(perf_coll_t coll, const struct perf_rank *r, size_t count, size_t tsize,
                       int in_place, char *send, char *recv, void **send_p, void **recv_p);
ncclResult_t perf_coll_launch(perf_coll_t coll, const struct perf_rank *r, const void *send,
                              void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                              cudaStream_t stream);
void perf_coll_fill(perf_coll_t coll, const struct perf_rank *r, const struct perf_gen *g,
                    size_t count, int in_place, char *send, char *recv);
size_t perf_coll_check(perf_coll_t coll, const struct perf_rank *r, const struct perf_gen *g,
                       size_t count, const char *recv);

/* perf_data.c */
const struct perf_type *perf_type_get(int nccl_type);
int perf_type_lookup(const char *name, int *type_p);
int perf_op_lookup(const char *name, int *op_p);
const char *perf_op_name(int op);
void perf_gen_init(struct perf_gen *g, const struct perf_type *t, int op, int nranks,
                   uint64_t seed);
double perf_gen_value(const struct perf_gen *g, int src, size_t idx);
double perf_gen_reduced(const struct perf_gen *g, size_t idx);
void perf_store(const struct perf_type *t, void *buf, size_t i, double v);
double perf_load(const struct perf_type *t, const void *buf, size_t i);
int perf_value_ok(const struct perf_gen *g, double expected, double got);

/* perf_sync.c: barrier, reductions and gathers across every rank of the job. */
enum { PERF_RED_SUM, PERF_RED_MIN, PERF_RED_MAX };
struct perf_sync *perf_sync_create(int nlocal, int shared_between_processes, int use_mpi);
void perf_sync_destroy(struct perf_sync *s);
void perf_sync_barrier(struct perf_sync *s, int local);
void perf_sync_reduce(struct perf_sync *s, int local, double *vals, const int *ops, int n);
void perf_sync_gather(struct perf_sync *s, int local, const char *line, char *all, int nranks);
int perf_sync_mpi_world(int *rank_p, int *size_p);
void perf_sync_mpi_bcast(void *buf, size_t len);
void perf_sync_mpi_finalize(int failed);

/* perf_mem.c: host or device buffers and the per-rank stream. */
int perf_mem_device_available(char *why, size_t len);
int perf_mem_select_device(int dev);
void perf_mem_describe(int device, int dev, char *buf, size_t len);
void *perf_mem_alloc(int device, size_t bytes);
void perf_mem_free(int device, void *p);
void perf_mem_to_dev(int device, void *dst, const void *host, size_t bytes, cudaStream_t s);
void perf_mem_to_host(int device, void *host, const void *src, size_t bytes);
cudaStream_t perf_mem_stream_create(int device);
void perf_mem_stream_destroy(int device, cudaStream_t s);
int perf_mem_stream_sync(int device, cudaStream_t s);

/* perf_run.c: one rank's whole benchmark; returns 0 if every result was right. */
int perf_rank_main(struct perf_rank *r);
void perf_fatal(const struct perf_rank *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

#endif /* BRAID_PERF_H_ */
