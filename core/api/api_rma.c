/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL 2.29-2.32's one-sided calls (ncclPutSignal, ncclSignal, ncclWaitSignal) and
 * ncclSetEncryption. Exported so that programs built against NCCL 2.32 load; the one-sided
 * calls and TLS are refused with an error naming the call until implemented. Turning
 * encryption off (NCCL_ENCRYPTION_MODE_NONE), the default, succeeds.
 */
#include <string.h>

#include "api.h"
#include "util.h"

BR_API(ncclResult_t, ncclPutSignal,
       (const void *localbuff, size_t count, ncclDataType_t datatype, int peer,
        ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
        ncclComm_t comm, cudaStream_t stream))
{
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclPutSignal"));
    (void)localbuff, (void)count, (void)datatype, (void)peer, (void)peerWin;
    (void)peerWinOffset, (void)sigIdx, (void)ctx, (void)flags, (void)stream;
    return br_api_refuse(comm, "ncclPutSignal", "one-sided communication");
}

BR_API(ncclResult_t, ncclSignal,
       (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream))
{
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclSignal"));
    (void)peer, (void)sigIdx, (void)ctx, (void)flags, (void)stream;
    return br_api_refuse(comm, "ncclSignal", "one-sided communication");
}

BR_API(ncclResult_t, ncclWaitSignal,
       (int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm, cudaStream_t stream))
{
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclWaitSignal"));
    (void)nDesc, (void)signalDescs, (void)stream;
    return br_api_refuse(comm, "ncclWaitSignal", "one-sided communication");
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
    case NCCL_ENCRYPTION_MODE_NONE: return ncclSuccess;
    case NCCL_ENCRYPTION_MODE_PSK:
        if (c.psk == NULL || strlen(c.psk) < 32) {
            BR_WARN(NCCL_INIT, "ncclSetEncryption: NCCL_ENCRYPTION_MODE_PSK needs a key of at "
                               "least 32 bytes in psk");
            return ncclInvalidArgument;
        }
        return br_api_refuse(NULL, "ncclSetEncryption", "TLS on Braid's own connections");
    default:
        BR_WARN(NCCL_INIT,
                "ncclSetEncryption: unknown mode %d (NCCL_ENCRYPTION_MODE_NONE or "
                "NCCL_ENCRYPTION_MODE_PSK)",
                c.mode);
        return ncclInvalidArgument;
    }
}
