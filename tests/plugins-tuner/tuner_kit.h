/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tuner conformance kit's view of a tuner plugin: whichever version the library
 * exports (v6 down to v2), seen through one set of calls with v6 cost-table semantics,
 * the way a core adapts it (plugin-abi.md 2.5). Also a logger that keeps what the plugin
 * logged, so tests can look for a file name and line number in a warning.
 */
#ifndef TUNER_KIT_H_
#define TUNER_KIT_H_

#include <stddef.h>
#include <stdint.h>

#include "plugin_api/tuner/tuner.h"

typedef struct {
    void *lib;
    int version;      /* 6..2 */
    const char *name; /* the table's name */
    const void *table;
} tuner_kit_t;

/* dlopen path (RTLD_NOW | RTLD_LOCAL) and find ncclTunerPlugin_v<version>, or the newest
 * of v6..v2 when version is 0. Returns 0, or -1 with a message in err. */
int tuner_kit_open(const char *path, int version, tuner_kit_t *kit, char *err, size_t errlen);
void tuner_kit_close(tuner_kit_t *kit);

/* Per-communicator calls, v6 semantics. constants may be NULL (the kit then passes its
 * own default-filled 1152-byte struct). */
ncclResult_t tuner_kit_init(tuner_kit_t *kit, uint64_t comm_id, size_t nranks, size_t nnodes,
                            void **ctx_p);
ncclResult_t tuner_kit_get_coll_info(tuner_kit_t *kit, void *ctx, ncclFunc_t coll, size_t nbytes,
                                     int pipe_ops,
                                     float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS],
                                     int reg_buff, int *nchannels);
ncclResult_t tuner_kit_finalize(tuner_kit_t *kit, void *ctx);

/* The logger handed to the plugin, and what it received since the last reset. */
void tuner_kit_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void tuner_kit_log_reset(void);
/* All WARN lines logged since the reset, newline-separated (static buffer). */
const char *tuner_kit_log_warnings(void);

#endif /* TUNER_KIT_H_ */
