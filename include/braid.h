/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Braid's extensions to the NCCL API, under a `braid` prefix. A program that uses them
 * links against libbraid.so or libnccl.so.2 built by Braid; nccl.h itself stays NCCL's.
 * Compiles as C99 and as C++.
 */
#ifndef BRAID_H_
#define BRAID_H_

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Write a JSON dump of every live communicator of this process: its recent operations
 * (sequence number, function, count, type, reduction, root or peer, state, how long it
 * has waited and for which rank, on what), and the same for every other rank of it,
 * asked live over the bootstrap connections (a rank that does not answer within
 * BRAID_DUMP_TIMEOUT seconds is written as "unreachable: <reason>"). docs/user-guide.md
 * shows an example and how to read it.
 *
 * path: a file (written whole: a reader sees the previous file or the new one), "-" for
 * stderr, or NULL for the pattern in BRAID_DUMP (%h host, %p pid, %t seconds since 1970,
 * %n this process's dump number, %% a percent sign). With no live communicator the list
 * is empty. Returns ncclInvalidArgument when path is NULL and BRAID_DUMP is unset,
 * ncclSystemError when the file cannot be written.
 *
 * Any thread may call it at any time, also while other threads are blocked in calls or
 * abort communicators; it blocks for at most about BRAID_DUMP_TIMEOUT seconds per
 * communicator. Added in Braid 0.1.
 */
ncclResult_t braidDumpState(const char *path);
ncclResult_t pbraidDumpState(const char *path);

/*
 * Braid's per-call options: entries of the vendor extension list of an ncclCollConfig_t
 * (config.ext, a chain of ncclConfigExt_t) whose key.vendorId is BRAID_VENDOR_ID. NVIDIA's
 * NCCL ignores them, so a program can set them whichever library it runs on; Braid ignores
 * the entries of other vendors. Every rank must pass the same options for a call. An entry
 * with Braid's vendor id and an optionId Braid does not know, a value it cannot parse, or
 * the same key twice is refused (ncclInvalidArgument) naming the call.
 *
 *   BRAID_OPT_PROTO           val.s: the protocols the call may use, as NCCL_PROTO takes
 *                             them ("Simple", "LL,Simple", "^LL"); with algSelection it
 *                             narrows the choice the plan makes for this one call, and
 *                             forceAlgSelection says whether a choice that cannot run is
 *                             an error (1, the default) or ignored. Added in Braid 0.2.
 *   BRAID_OPT_DETERMINISTIC   val.i 1: an AllReduce, Reduce or ReduceScatter of a float
 *                             type gives the same bits on every rank and every run, whatever
 *                             the algorithm, protocol, channels, chunk size, transport or
 *                             timing (each rank folds its slice of every input in rank
 *                             order); 0: the default path, even with BRAID_DETERMINISTIC=1.
 *                             Other values are refused. Added in Braid 0.2.
 *   BRAID_OPT_ACCUMULATE_FP32 val.i 1: an AllReduce, Reduce or ReduceScatter of fp16, bf16,
 *                             fp8 e4m3 or fp8 e5m2 keeps its sums in fp32 and rounds once
 *                             at the end (on the deterministic path); 0: every partial sum
 *                             rounded to the type, even with BRAID_ACCUMULATE=fp32. Other
 *                             values are refused. Added in Braid 0.2.
 *
 * Option ids are never reused; a new option takes the next number.
 */
#define BRAID_VENDOR_ID 0x627264 /* "brd" */
#define BRAID_OPT_PROTO 1
#define BRAID_OPT_DETERMINISTIC 2
#define BRAID_OPT_ACCUMULATE_FP32 3

/*
 * Collectives with a count per rank (v-collectives). NCCL has none in its public header;
 * programs build them from grouped ncclSend/ncclRecv. These are single collectives with
 * NCCL's conventions otherwise: every rank of comm calls them in the same order as its
 * other collectives, they go into groups (ncclGroupStart/End) like any collective, run on
 * stream, and a bad argument returns ncclInvalidArgument with the reason in
 * ncclGetLastError(). Counts and displacements are in elements of datatype; a NULL
 * displacement array means the blocks are packed in rank order (block p starts at the
 * sum of the counts before it). Counts may be 0. The arrays are read during the call
 * only. Ranks that disagree about a count (rank r's recvcounts[k] against what rank k
 * sends to r) get ncclInvalidUsage naming both ranks and the entries, not corrupt data.
 * Host memory runs a pairwise exchange (each pair of ranks exchanges its blocks directly,
 * in an order that spreads the receivers), except AllGatherV with 3 ranks or more all on
 * one host, which goes through the node arena (each block copied in once, read by every
 * rank); device memory runs the same exchange as the CUDA executor's Broadcasts, Reduces
 * or Sends and Receives. docs/user-guide.md has examples. Added in Braid 0.3.
 *
 * braidAllGatherV: rank p's sendcount elements land at recvbuff + rdispls[p] on every
 *   rank; recvcounts[p] is rank p's sendcount (recvcounts[rank] must equal sendcount).
 *   In place when sendbuff == recvbuff + rdispls[rank].
 * braidReduceScatterV: rank k receives in recvbuff the reduction (op) over every rank of
 *   block k of its sendbuff, recvcounts[k] elements at sendbuff + sdispls[k]. Every rank
 *   passes the same recvcounts. The reduction folds the ranks' blocks in rank order, so
 *   the result does not depend on timing (BRAID_ACCUMULATE=fp32 keeps fp16, bf16 and fp8
 *   sums in fp32). In place when recvbuff == sendbuff + sdispls[rank].
 * braidAlltoAllV: sendcounts[p] elements at sendbuff + sdispls[p] go to rank p, which
 *   receives them as its recvcounts[rank] elements at recvbuff + rdispls[rank]. Not in
 *   place (sendbuff == recvbuff is refused).
 */
ncclResult_t braidAllGatherV(const void *sendbuff, size_t sendcount, void *recvbuff,
                             const size_t *recvcounts, const size_t *rdispls,
                             ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pbraidAllGatherV(const void *sendbuff, size_t sendcount, void *recvbuff,
                              const size_t *recvcounts, const size_t *rdispls,
                              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t braidReduceScatterV(const void *sendbuff, void *recvbuff, const size_t *recvcounts,
                                 const size_t *sdispls, ncclDataType_t datatype, ncclRedOp_t op,
                                 ncclComm_t comm, cudaStream_t stream);
ncclResult_t pbraidReduceScatterV(const void *sendbuff, void *recvbuff, const size_t *recvcounts,
                                  const size_t *sdispls, ncclDataType_t datatype, ncclRedOp_t op,
                                  ncclComm_t comm, cudaStream_t stream);
ncclResult_t braidAlltoAllV(const void *sendbuff, const size_t *sendcounts, const size_t *sdispls,
                            void *recvbuff, const size_t *recvcounts, const size_t *rdispls,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pbraidAlltoAllV(const void *sendbuff, const size_t *sendcounts, const size_t *sdispls,
                             void *recvbuff, const size_t *recvcounts, const size_t *rdispls,
                             ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* BRAID_H_ */
