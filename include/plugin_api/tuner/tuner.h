/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every tuner plugin ABI version Braid knows, the numbering constants (tuner_common.h:
 * ncclFunc_t, NCCL_ALGO_*, NCCL_PROTO_*, NCCL_NUM_*, NCCL_ALGO_PROTO_IGNORE), and the
 * unversioned names of the newest version.
 */
#ifndef BRAID_PLUGIN_API_TUNER_H_
#define BRAID_PLUGIN_API_TUNER_H_

#include "tuner_common.h"
#include "tuner_v2.h"
#include "tuner_v3.h"
#include "tuner_v4.h"
#include "tuner_v5.h"
#include "tuner_v6.h"
#include "tuner_v7.h"

typedef ncclTuner_v7_t ncclTuner_t;
typedef ncclNvlDomainInfo_v7_t ncclNvlDomainInfo_t;
typedef ncclTunerConstants_v7_t ncclTunerConstants_t;

/* Symbol name of the newest tuner table. */
#define NCCL_TUNER_PLUGIN_SYMBOL "ncclTunerPlugin_v7"

#endif /* BRAID_PLUGIN_API_TUNER_H_ */
