/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An NCCL 2.32 program: it calls every function NCCL 2.31 and 2.32 added to nccl.h, on one
 * rank with host buffers, and checks what each gives. It includes only <nccl.h>: built
 * against NVIDIA's own 2.32 header (link_nv232.sh, where NVIDIA's sources are here) it
 * shows that a program compiled for NVIDIA's NCCL runs on Braid; built against Braid's it
 * runs in every CI job.
 *
 *   link_nv232    (exit 0: every call did what NCCL documents)
 */
#include <nccl.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "link_nv232: ");                                                       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, " (%s)\n", ncclGetLastError(NULL));                                    \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define OK(call) CHECK((call) == ncclSuccess, "%s failed", #call)

static int collectives(ncclComm_t comm)
{
    float a[64], b[64];
    ncclCollConfig_t cfg = NCCL_COLLCONFIG_INITIALIZER;

    cfg.algSelection = "RING";
    cfg.userProfilerTag = 7;
    for (int i = 0; i < 64; i++) {
        a[i] = (float)i;
    }
    OK(ncclAllReduceConfig(a, b, 64, ncclFloat, ncclSum, comm, NULL, &cfg));
    CHECK(b[63] == 63.0f, "AllReduce gave %g", (double)b[63]);
    OK(ncclBroadcastConfig(a, b, 64, ncclFloat, 0, comm, NULL, &cfg));
    OK(ncclReduceConfig(a, b, 64, ncclFloat, ncclMax, 0, comm, NULL, &cfg));
    OK(ncclAllGatherConfig(a, b, 64, ncclFloat, comm, NULL, &cfg));
    OK(ncclReduceScatterConfig(a, b, 64, ncclFloat, ncclSum, comm, NULL, &cfg));
    cfg.forceAlgSelection = 0; /* sends and receives: nothing to select */
    OK(ncclAlltoAllConfig(a, b, 64, ncclFloat, comm, NULL, &cfg));
    OK(ncclGatherConfig(a, b, 64, ncclFloat, 0, comm, NULL, &cfg));
    OK(ncclScatterConfig(a, b, 64, ncclFloat, 0, comm, NULL, &cfg));
    CHECK(b[5] == 5.0f, "Scatter gave %g", (double)b[5]);
    return 0;
}

static int params(void)
{
    ncclParamHandle_t h;
    int8_t i8;
    int16_t i16;
    int32_t i32;
    int64_t i64;
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    const char *s, **keys;
    char raw[16];
    int len, n;

    OK(ncclParamBind(&h, "NCCL_SHM_DISABLE"));
    OK(ncclParamGetI8(h, &i8));
    OK(ncclParamGetI16(h, &i16));
    OK(ncclParamGetI32(h, &i32));
    OK(ncclParamGetI64(h, &i64));
    OK(ncclParamGetU8(h, &u8));
    OK(ncclParamGetU16(h, &u16));
    OK(ncclParamGetU32(h, &u32));
    OK(ncclParamGetU64(h, &u64));
    CHECK(i8 == 0 && i64 == 0 && u64 == 0, "NCCL_SHM_DISABLE is %lld", (long long)i64);
    OK(ncclParamGetStr(h, &s));
    OK(ncclParamGet(h, raw, (int)sizeof(raw), &len));
    OK(ncclParamGetParameter("NCCL_SHM_DISABLE", &s, &len));
    CHECK(strcmp(s, "0") == 0, "NCCL_SHM_DISABLE reads '%s'", s);
    OK(ncclParamGetAllParameterKeys(&keys, &n));
    CHECK(n > 0, "no parameter keys");
    ncclParamDumpAll();
    return 0;
}

static int membership(ncclComm_t comm)
{
    ncclUniqueId id;
    uint64_t v = 1;
    float w[16] = {0}, x = 3.0f;
    ncclWindow_t win;
    void *user = NULL;
    ncclWaitSignalDesc_t d = {2, 0, 0, 0};
    ncclEncryptionConfig_t enc = NCCL_ENCRYPTION_CONFIG_INITIALIZER;

    OK(ncclCommGetUniqueId(comm, &id));
    OK(ncclCommMemStats(comm, ncclStatGpuMemTotal, &v));
    OK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
    OK(ncclCommResume(comm));
    OK(ncclCommWindowRegister(comm, w, sizeof(w), &win, NCCL_WIN_DEFAULT));
    OK(ncclWinGetUserPtr(comm, win, &user));
    CHECK(user == (void *)w, "ncclWinGetUserPtr gave %p, not %p", user, (void *)w);
    OK(ncclPutSignal(&x, 1, ncclFloat, 0, win, 8, 0, 0, 0, comm, NULL));
    OK(ncclSignal(0, 0, 0, 0, comm, NULL));
    OK(ncclWaitSignal(1, &d, comm, NULL));
    CHECK(w[2] == 3.0f, "the put left %g", (double)w[2]);
    OK(ncclCommWindowDeregister(comm, win));
    OK(ncclSetEncryption(&enc));
    /* A grow with no new rank to meet: refused before anything waits. */
    ncclComm_t grown;
    CHECK(ncclCommGrow(comm, 1, &id, -1, &grown, NULL) == ncclInvalidArgument,
          "a grow to as many ranks was not refused");
    CHECK(ncclTimeout == 8 && ncclNumResults == 9, "ncclTimeout %d", (int)ncclTimeout);
    return 0;
}

int main(void)
{
    ncclUniqueId id;
    ncclComm_t comm;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    int version = 0;

    OK(ncclGetVersion(&version));
    CHECK(version >= NCCL_VERSION(2, 32, 0), "ncclGetVersion says %d", version);
    OK(ncclGetUniqueId(&id));
    config.commName = "link_nv232";
    OK(ncclCommInitRankConfig(&comm, 1, id, 0, &config));
    int bad = collectives(comm) || params() || membership(comm);
    OK(ncclCommDestroy(comm));
    if (!bad) {
        printf("link_nv232: every NCCL 2.31/2.32 function ran against library version %d\n",
               version);
    }
    return bad;
}
