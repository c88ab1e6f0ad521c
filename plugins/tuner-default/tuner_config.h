/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tuner's configuration: a CSV file of rules in the format of NCCL's example tuner
 * (plugin-abi.md 2.6), one rule per line:
 *
 *   collective, minBytes, maxBytes, algorithm, protocol, channels, nNodes, nRanks
 *   [, numPipeOps [, regBuff]]
 *
 * -1 means "any" for nNodes, nRanks, numPipeOps and regBuff, and "keep the core's count"
 * for channels. Unlike NCCL's example, a line that does not parse is an error reported
 * with the file name and line number, never skipped.
 */
#ifndef TUNER_CONFIG_H_
#define TUNER_CONFIG_H_

#include <stddef.h>
#include <stdint.h>

#include "plugin_api/tuner/tuner_common.h"

/* Configuration file read when NCCL_TUNER_CONFIG_FILE is not set (as NCCL's example). */
#define TUNER_DEFAULT_CONFIG_FILE "nccl_tuner.conf"

/* One rule: when a collective matches, force (algo, proto) and maybe the channels. */
typedef struct {
    ncclFunc_t coll;    /* ncclFuncBroadcast .. ncclFuncAllReduce */
    uint64_t min_bytes; /* inclusive */
    uint64_t max_bytes; /* inclusive */
    int algo;           /* NCCL_ALGO_* */
    int proto;          /* NCCL_PROTO_* */
    int channels;       /* > 0, or -1: keep the core's count */
    int nnodes;         /* exact, or -1: any */
    int nranks;         /* exact, or -1: any */
    int pipe_ops;       /* exact, or -1: any */
    int reg_buff;       /* 0 or 1, or -1: any */
    int line;           /* where it came from, for logs */
} tuner_rule_t;

typedef struct {
    tuner_rule_t *rules;
    int nrules;
    char path[256]; /* the file read, or "" when none */
} tuner_config_t;

/*
 * Read the rules of `path`. A missing file is an error when `required` (the user named
 * it), otherwise an empty configuration. Any line that does not parse fails the whole
 * load with ncclInvalidUsage after a WARN naming the file, the line and the problem.
 * On success *cfg owns an array to release with tuner_config_free.
 */
ncclResult_t tuner_config_load(const char *path, int required, tuner_config_t *cfg);

/* Parse one line (already without its newline) into *rule. Returns 1 for a rule, 0 for
 * a blank or comment line, -1 for an error described in err. */
int tuner_config_parse_line(const char *text, tuner_rule_t *rule, char *err, size_t errlen);

void tuner_config_free(tuner_config_t *cfg);

/* Names used in the file and in logs. */
const char *tuner_coll_name(int coll);
const char *tuner_algo_name(int algo);
const char *tuner_proto_name(int proto);

#endif /* TUNER_CONFIG_H_ */
