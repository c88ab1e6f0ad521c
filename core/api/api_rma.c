/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL 2.29-2.32's one-sided calls on host windows (ncclPutSignal, ncclSignal,
 * ncclWaitSignal: arguments checked here, carried by comm_rma.c), and ncclSetEncryption:
 * turning encryption off (NCCL_ENCRYPTION_MODE_NONE), the default, succeeds; TLS is
 * refused with an error naming the call until implemented.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "api.h"
#include "util.h"
#include "util_cuda.h"

/* Arguments every one-sided call checks: the peer, the signal and the flags. */
static ncclResult_t check_signal(ncclComm_t comm, const char *fn, int peer, int sig_idx, int ctx,
                                 unsigned int flags)
{
    if (peer < 0 || peer >= comm->nranks || sig_idx < 0 || ctx < 0 || flags != 0) {
        BR_WARN(NCCL_P2P,
                "%s: rank %d (host %s): invalid peer %d (nranks %d), sigIdx %d, ctx %d "
                "or flags 0x%x (reserved, 0)",
                fn, comm->rank, br_host_name(), peer, comm->nranks, sig_idx, ctx, flags);
        return ncclInvalidArgument;
    }
    if (atomic_load_explicit(&comm->suspended, memory_order_relaxed)) { /* as api_coll.c */
        BR_WARN(NCCL_P2P, "%s: rank %d: the communicator is suspended (ncclCommSuspend)", fn,
                comm->rank);
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclPutSignal,
       (const void *localbuff, size_t count, ncclDataType_t datatype, int peer,
        ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
        ncclComm_t comm, cudaStream_t stream))
{
    const char *fn = "ncclPutSignal";
    uint32_t seq;
    int dev;

    (void)stream; /* host memory: done when the call returns */
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, fn));
    BR_CHECK(check_signal(comm, fn, peer, sigIdx, ctx, flags));
    if ((int)datatype < 0 || (int)datatype >= (int)ncclNumTypes ||
        (count > 0 && localbuff == NULL) || count > SIZE_MAX / 8) {
        BR_WARN(NCCL_P2P, "%s: rank %d: invalid datatype %d, or localbuff NULL with count %zu", fn,
                comm->rank, (int)datatype, count);
        return ncclInvalidArgument;
    }
    size_t bytes = count * br_type_size(datatype);
    if (bytes > 0 && br_cuda_ptr_kind(localbuff, &dev) == BR_MEM_DEVICE) {
        return br_api_refuse(comm, fn, "one-sided communication from device memory");
    }
    BR_CHECK(br_api_win_lookup(comm, peerWin, fn, peer, peerWinOffset, bytes, &seq));
    return br_comm_rma_put(comm, peer, seq, peerWinOffset, localbuff, bytes, sigIdx, ctx);
}

BR_API(ncclResult_t, ncclSignal,
       (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream))
{
    (void)stream;
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclSignal"));
    BR_CHECK(check_signal(comm, "ncclSignal", peer, sigIdx, ctx, flags));
    return br_comm_rma_put(comm, peer, UINT32_MAX, 0, NULL, 0, sigIdx, ctx);
}

BR_API(ncclResult_t, ncclWaitSignal,
       (int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm, cudaStream_t stream))
{
    const char *fn = "ncclWaitSignal";
    (void)stream;
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, fn));
    if (nDesc < 0 || (nDesc > 0 && signalDescs == NULL)) {
        BR_WARN(NCCL_P2P, "%s: rank %d: nDesc %d with signalDescs %p", fn, comm->rank, nDesc,
                (void *)signalDescs);
        return ncclInvalidArgument;
    }
    for (int i = 0; i < nDesc; i++) {
        const ncclWaitSignalDesc_t *d = &signalDescs[i];
        BR_CHECK(check_signal(comm, fn, d->peer, d->sigIdx, d->ctx, 0));
        if (d->opCnt < 0) {
            BR_WARN(NCCL_P2P, "%s: rank %d: signalDescs[%d].opCnt is %d", fn, comm->rank, i,
                    d->opCnt);
            return ncclInvalidArgument;
        }
    }
    BR_CHECK(br_api_hold_comm(comm, fn));
    ncclResult_t res = ncclSuccess;
    for (int i = 0; i < nDesc && res == ncclSuccess; i++) {
        const ncclWaitSignalDesc_t *d = &signalDescs[i];
        res = br_comm_rma_wait(comm, d->peer, d->sigIdx, d->ctx, d->opCnt);
    }
    br_comm_unhold(comm);
    return res;
}

BR_API(ncclResult_t, ncclSetEncryption, (const ncclEncryptionConfig_t *config))
{
    ncclEncryptionConfig_t c = NCCL_ENCRYPTION_CONFIG_INITIALIZER;

    br_api_enter(NULL);
    if (config != NULL) {
        if (config->magic != NCCL_API_MAGIC ||
            config->size < offsetof(ncclEncryptionConfig_t, mode)) {
            BR_WARN(NCCL_INIT,
                    "ncclSetEncryption: config was not initialised with "
                    "NCCL_ENCRYPTION_CONFIG_INITIALIZER (magic 0x%x, size %zu)",
                    config->magic, config->size);
            return ncclInvalidArgument;
        }
        memcpy(&c, config, config->size < sizeof(c) ? config->size : sizeof(c));
    }
    switch (c.mode) {
    case NCCL_ENCRYPTION_MODE_NONE: return br_comm_tls_set(0, NULL);
    case NCCL_ENCRYPTION_MODE_PSK:
        if (c.psk == NULL || strlen(c.psk) < 32) {
            BR_WARN(NCCL_INIT, "ncclSetEncryption: NCCL_ENCRYPTION_MODE_PSK needs a key of at "
                               "least 32 bytes in psk");
            return ncclInvalidArgument;
        }
        /* Connections made from now on: call it before ncclGetUniqueId and init. */
        return br_comm_tls_set(1, c.psk);
    default:
        BR_WARN(NCCL_INIT,
                "ncclSetEncryption: unknown mode %d (NCCL_ENCRYPTION_MODE_NONE or "
                "NCCL_ENCRYPTION_MODE_PSK)",
                c.mode);
        return ncclInvalidArgument;
    }
}
