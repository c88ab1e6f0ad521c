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

#ifdef __cplusplus
}
#endif

#endif /* BRAID_H_ */
