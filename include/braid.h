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
 *   BRAID_OPT_DETERMINISTIC   reserved: val.i 1 will ask for a result that does not depend
 *                             on timing or channel count. Refused today (ncclInvalidUsage).
 *   BRAID_OPT_ACCUMULATE_FP32 reserved: val.i 1 will ask that 16-bit and 8-bit floats be
 *                             reduced in 32-bit floats. Refused today (ncclInvalidUsage).
 *
 * Option ids are never reused; a new option takes the next number.
 */
#define BRAID_VENDOR_ID 0x627264 /* "brd" */
#define BRAID_OPT_PROTO 1
#define BRAID_OPT_DETERMINISTIC 2
#define BRAID_OPT_ACCUMULATE_FP32 3

#ifdef __cplusplus
}
#endif

#endif /* BRAID_H_ */
