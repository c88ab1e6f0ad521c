/* SPDX-License-Identifier: Apache-2.0 */
/*
 * api: every nccl* entry point. User input is checked here and only here; a bad call
 * returns ncclInvalidArgument or ncclInvalidUsage with a WARN (the ncclGetLastError
 * text) naming the rank, the host, the function and what was wrong.
 */
#ifndef BR_API_H_
#define BR_API_H_

#include "group.h"

/* Define pnccl<Name> and export nccl<Name> as its weak alias, both visible. */
#define BR_API(ret, name, args)                                                                    \
    extern __typeof__(p##name) name __attribute__((weak, alias("p" #name), visibility("default")));\
    __attribute__((visibility("default"))) ret p##name args

/* Start of every entry point: per-thread log rank and a fresh last-error slot. */
void br_api_enter(ncclComm_t comm);

/* A live communicator, or ncclInvalidArgument with a message naming fn. */
ncclResult_t br_api_check_comm(ncclComm_t comm, const char *fn);

/* The same, and held for the call (br_comm_unhold when done): a call that may block holds
 * its comm, so another thread's ncclCommAbort cannot free it underneath. */
ncclResult_t br_api_hold_comm(ncclComm_t comm, const char *fn);

/* Copy a caller's ncclConfig_t of any NCCL 2.x layout (in->size bytes of it) over the
 * defaults after checking its size/magic/version handshake; NULL gives the defaults. */
ncclResult_t br_api_config_import(const char *fn, const ncclConfig_t *in, ncclConfig_t *out);

/* The number of window win (registered on comm) for a one-sided call of `bytes` at
 * offset into peer's copy of it, checked against peer's size (api_coll.c). */
ncclResult_t br_api_win_lookup(ncclComm_t comm, ncclWindow_t win, const char *fn, int peer,
                               uint64_t offset, size_t bytes, uint32_t *seq_p);

/* Refuse a call Braid does not implement: a WARN naming the function, the rank (when comm
 * is a live communicator) and the host, and ncclInvalidUsage. `what` says what is missing. */
ncclResult_t br_api_refuse(ncclComm_t comm, const char *fn, const char *what);

/* Check a call's ncclCollConfig_t (NULL: none) and set op's own selection, channel bounds
 * and profiler tag from it (api_collcfg.c). has_algos: the call has algorithms to select
 * (collectives; not AlltoAll, Gather, Scatter). Fails with a WARN naming rank and call. */
/* The checks every call gets (communicator, type, reduction when redop is not NULL,
 * which executor the buffers go to) for a v-collective, whose counts api_collv.c checks;
 * fills op with count 0 and no counts. */
ncclResult_t br_api_v_check(ncclComm_t comm, const char *fn, br_func_t func, const void *sendbuff,
                            void *recvbuff, ncclDataType_t type, const ncclRedOp_t *redop,
                            cudaStream_t stream, br_op_t *op);

ncclResult_t br_api_collcfg_apply(ncclComm_t comm, const char *fn, int has_algos,
                                  const ncclCollConfig_t *in, br_op_t *op);

/* NCCL 2.28's device API (nccl_device.h, not nccl.h): programs built against NCCL import
 * its two host entry points (PyTorch 2.11's libtorch_cuda does, and fails to load where
 * they are missing). Braid exports them and refuses them with a clear error. */
struct ncclDevComm;
struct ncclDevCommRequirements;
ncclResult_t pncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements *reqs,
                                struct ncclDevComm *out);
ncclResult_t pncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm *devComm);

/* The rest of the device API's host side (NCCL 2.29-2.32's nccl_device/core.h):
 * ncclCommQueryProperties answers (no device API, no multimem, no GIN; one-sided calls on
 * host windows); the device pointers of a window are refused. */
struct ncclCommProperties;
/* NCCL's ncclMultimemHandle_t, passed by value: one pointer. */
typedef struct {
    void *mcBasePtr;
} br_multimem_handle_t;
ncclResult_t pncclCommQueryProperties(ncclComm_t comm, struct ncclCommProperties *props);
ncclResult_t pncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void **outPtr);
ncclResult_t pncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset,
                                           br_multimem_handle_t multimem, void **outPtr);
ncclResult_t pncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank,
                                      void **outPtr);
ncclResult_t pncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void **outPtr);

/* The device API's teams and resource requirements (nccl_device/core.h, lsa_barrier.h,
 * gin_barrier.h, ll_a2a.h, NCCL 2.29-2.32; api_comm.c). A team is nRanks ranks, this one
 * at `rank`, `stride` apart in the communicator; NCCL's ncclTeam_t has this layout and is
 * passed and returned by value. Braid has no load/store-accessible peers (no device API):
 * its LSA team is the rank alone, its rail team the whole communicator. */
typedef struct {
    int nRanks, rank, stride;
} br_team_t;
struct ncclLsaBarrierHandle;
struct ncclGinBarrierHandle;
struct ncclLLA2AHandle;
struct ncclDevResourceRequirements;
br_team_t pncclTeamWorld(ncclComm_t comm);
br_team_t pncclTeamLsa(ncclComm_t comm);
br_team_t pncclTeamRail(ncclComm_t comm);
int pncclTeamRankToWorld(ncclComm_t comm, br_team_t team, int rank);
int pncclTeamRankToLsa(ncclComm_t comm, br_team_t team, int rank);
int pncclLLA2ACalcSlots(int maxElts, int maxEltSize);
ncclResult_t pncclLLA2ACreateRequirement(int nBlocks, int nSlots, struct ncclLLA2AHandle *outHandle,
                                         struct ncclDevResourceRequirements *outReq);
ncclResult_t pncclLsaBarrierCreateRequirement(br_team_t team, int nBarriers,
                                              struct ncclLsaBarrierHandle *outHandle,
                                              struct ncclDevResourceRequirements *outReq);
ncclResult_t pncclGinBarrierCreateRequirement(ncclComm_t comm, br_team_t team, int nBarriers,
                                              struct ncclGinBarrierHandle *outHandle,
                                              struct ncclDevResourceRequirements *outReq);

#endif /* BR_API_H_ */
