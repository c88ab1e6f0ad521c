/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The contract between the CUDA executor (core/exec/cuda/exec_cuda.c, host C) and the kernels
 * (core/device/, CUDA C): what one launch carries. The host fills these structs in pinned
 * or device memory; the kernel reads them. Plain data only (no C++, no host-only types), so
 * both compilers agree on the layout; every pointer in them is a device-accessible address.
 *
 * A launch runs one group's device work for every rank of a clique that lives on one GPU
 * (ranks that are threads of this process): one CUDA block per (rank, channel) that has
 * work, each walking its list of work items in order. Because every rank's blocks are in
 * the same launch, and the grid is sized so that all of its blocks are resident at once,
 * a block that waits for a peer's block waits for something that is running.
 *
 * Connections between ranks are FIFOs of BR_STEPS slots in device memory (the receiver's),
 * with two counters as in core/common/fifo.h: `tail` (steps the sender filled) and `head`
 * (steps the receiver freed). Step numbers persist across launches in br_dev_conn_t, so
 * LL and LL128 flags stay unique. Three protocols frame a slot:
 *   Simple: the payload as it is; published by tail (release), read after tail (acquire).
 *   LL:     16-byte lines {data0, flag, data1, flag} (8 data bytes a line), each line
 *           written by one 16-byte store; the flag is br_dev_ll_flag(step).
 *   LL128:  128-byte lines of 120 data bytes and an 8-byte flag in the last 8 bytes,
 *           as NCCL frames them; the flag is br_dev_ll_flag(step) (zero-extended).
 * LL and LL128 readers poll the flags and need no tail; senders still advance tail after
 * the lines, so counters stay meaningful for every protocol.
 */
#ifndef BR_DEVICE_DEV_WORK_H_
#define BR_DEVICE_DEV_WORK_H_

#include <stddef.h>
#include <stdint.h>

#include "coll.h"
#include "plan_sched.h"

#define BR_DEV_NTHREADS 512                      /* threads per block */
#define BR_DEV_LL_LINE 16u                       /* LL: bytes of one line */
#define BR_DEV_LL_DATA 8u                        /* LL: data bytes per line */
#define BR_DEV_LL128_LINE 128u                   /* LL128: bytes of one line */
#define BR_DEV_LL128_DATA 120u                   /* LL128: data bytes per line */
#define BR_DEV_MAX_PEERS (2 + BR_MAX_TREE_ARITY) /* connections of one block, each way */

/* Error codes a kernel reports (br_dev_report_t.status). */
#define BR_DEV_OK 0
#define BR_DEV_ABORTED 1  /* the abort flag was raised while waiting */
#define BR_DEV_TIMEOUT 2  /* a wait exceeded wait_timeout_ns (peer not progressing) */
#define BR_DEV_MISMATCH 3 /* a slot's descriptor disagrees with the step (mismatched calls) */
#define BR_DEV_BADWORK 4  /* a work item the kernel does not understand */

/* The flag of LL/LL128 lines of `step`: never 0 (a cleared line). */
#ifdef __CUDACC__
#define BR_DEV_FN static inline __host__ __device__
#else
#define BR_DEV_FN static inline
#endif

BR_DEV_FN uint32_t br_dev_ll_flag(uint64_t step)
{
    return 1u + (uint32_t)(step & ((1ull << 30) - 1));
}

/* One directed connection (sender rank -> receiver rank, one channel). Lives in device
 * memory; the sender's block owns send_step, the receiver's block owns recv_step. */
typedef struct {
    char *buf;           /* BR_STEPS slots of slot_bytes, in the receiver's GPU memory */
    uint64_t slot_bytes; /* bytes of one slot (a multiple of 128) */
    uint64_t *tail;      /* steps filled (written by the sender) */
    uint64_t *head;      /* steps freed (written by the receiver) */
    uint64_t send_step;  /* the sender's next step */
    uint64_t recv_step;  /* the receiver's next step */
    uint64_t *desc;      /* BR_STEPS x 2 words: per slot {seq, bytes} as sent, checked by
                          * the receiver (mismatched calls across ranks) */
} br_dev_conn_t;

/* Payload bytes one slot carries under each protocol. */
BR_DEV_FN uint64_t br_dev_slot_payload(const br_dev_conn_t *c, int proto)
{
    if (proto == BR_PROTO_LL) {
        return c->slot_bytes / BR_DEV_LL_LINE * BR_DEV_LL_DATA;
    }
    if (proto == BR_PROTO_LL128) {
        return c->slot_bytes / BR_DEV_LL128_LINE * BR_DEV_LL128_DATA;
    }
    return c->slot_bytes;
}

/* Kinds of work item. */
#define BR_DEV_WORK_SCHED 1 /* one channel of a Ring/Tree collective: plan's schedule */
#define BR_DEV_WORK_COPY 2  /* bytes from src to dst (matched send/recv, local copy) */
#define BR_DEV_WORK_LOCAL                                                                          \
    3 /* a one-rank collective: dst = post(pre(src)) over `count`                                  \
       * elements of `type` for a reduction (red, scalars), else a copy                            \
       * of `bytes` */

/* One work item of one block. */
typedef struct {
    uint32_t kind;
    uint32_t proto;         /* BR_PROTO_* (SCHED) */
    uint32_t type;          /* ncclDataType_t */
    uint32_t red;           /* br_red_kind_t */
    double scalar_f;        /* PREMULSUM scalar (floating types) */
    uint64_t scalar_i;      /* ... as integer bit pattern (integer types) */
    const void *scalar_dev; /* PREMULSUM scalar in device memory (ncclScalarDevice), or
                             * NULL: then scalar_f / scalar_i hold it */
    uint64_t divisor;       /* SUMPOSTDIV */
    uint64_t seq;           /* the collective's sequence number + 1 (slot descriptors) */

    /* SCHED: who this rank is on the channel, and how the data is cut. */
    br_sched_t sched;
    uint64_t esize, units, lo, hi, slice; /* br_plan_layout_t */
    const int32_t *ring_rank;             /* rank at each ring position of the channel (nranks) */
    const char *send;                     /* the rank's input (may be NULL where it reads none) */
    char *recv;                           /* the rank's output (may be NULL where it writes none) */
    /* Connections of the step's peers: peer rank -> connection. */
    int32_t nrecv_peers, nsend_peers;
    int32_t recv_peer[BR_DEV_MAX_PEERS];
    int32_t send_peer[BR_DEV_MAX_PEERS];
    br_dev_conn_t *recv_conn[BR_DEV_MAX_PEERS];
    br_dev_conn_t *send_conn[BR_DEV_MAX_PEERS];

    /* COPY: this block's share of a copy; LOCAL: the whole call. */
    const char *src;
    char *dst;
    uint64_t bytes;
    uint64_t count;  /* LOCAL reduction: elements */
    uint32_t reduce; /* LOCAL: nonzero for a reduction */
} br_dev_work_t;

/* What block b of a launch does. */
typedef struct {
    uint32_t first;  /* index of its first work item in br_dev_launch_t.works */
    uint32_t nworks; /* how many, run in order */
    int32_t rank;    /* for error reports */
    int32_t channel;
} br_dev_block_t;

/* One device's failure report, in host-mapped memory, filled by the one block of that device
 * that took the device's claim: status (BR_DEV_*) last, after the rest. Every device of a
 * clique has its own (a claim shared by several GPUs would not be atomic: docs/cuda.md);
 * the host keeps the one that failed first (time_ns, then the lowest device index). */
typedef struct {
    uint32_t status;
    int32_t rank; /* rank whose block failed */
    int32_t peer; /* the peer it waited for or disagreed with (-1: none) */
    uint32_t pad;
    uint64_t step;    /* the step */
    uint64_t time_ns; /* %globaltimer when it failed */
} br_dev_report_t;

/* One launch. */
typedef struct {
    const br_dev_block_t *blocks; /* gridDim.x entries */
    const br_dev_work_t *works;
    volatile uint32_t *abort_flag; /* host-mapped; nonzero: give up waiting */
    uint64_t wait_timeout_ns;      /* a wait longer than this fails (0: never) */
    /* In the memory of the device this launch runs on, 0 until one of its blocks fails: the
     * first failure of the device claims it with a GPU-scope compare-and-swap, which is
     * atomic because every block that takes it runs on that device. */
    uint32_t *claim;
    /* Host-mapped, shared by the launches of every device of the clique: nonzero once a
     * block of any of them failed (every failing block stores 1; no atomic needed), so
     * that the others stop waiting. */
    volatile uint32_t *stop;
    volatile br_dev_report_t *report; /* host-mapped: this device's report */
    uint32_t one_gpu; /* every block of every rank on this GPU: LL128 fences at GPU scope */
} br_dev_launch_t;

/*
 * The second kernel (BR_DEV_REDUCE_KERNEL_NAME), for ranks in several processes
 * (exec_cuda_stage.c): dst[0] (and dst[1] when not NULL) = the reduction of nsrc buffers
 * of `bytes` each, as a collective of nsrc ranks ends it (PreMulSum scales each source,
 * integer Avg divides the sum). It waits for nothing: the streams order it after the
 * sources are complete. Passed by value; grid-stride over every block of the launch.
 */
#define BR_DEV_REDUCE_MAX_SRC 16
typedef struct {
    const char *src[BR_DEV_REDUCE_MAX_SRC];
    char *dst[2];
    uint64_t bytes;
    uint32_t nsrc;
    uint32_t type; /* ncclDataType_t */
    uint32_t red;  /* br_red_kind_t */
    double scalar_f;
    uint64_t scalar_i;
    const void *scalar_dev; /* PreMulSum scalar in device memory, or NULL */
    uint64_t divisor;
} br_dev_reduce_t;

#endif /* BR_DEVICE_DEV_WORK_H_ */
