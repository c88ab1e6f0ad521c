/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net_kit: dlopen a net plugin, find its newest table (v12, v11, v10) and adapt every
 * call to one surface. The logger given to init prints to stderr and keeps the WARN lines
 * for assertions.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "net_kit.h"

static struct {
    void *lib;
    int version;
    const char *symbol;
    const ncclNet_v12_t *v12;
    const ncclNet_v11_t *v11;
    const ncclNet_v10_t *v10;
    void *ctx;
    int verbose;
    int nwarn;
    char warn[8192];
} kit;

/* Call a member whose parameters are the same in every version. */
#define KIT_CALL(member, ...)                                                                      \
    (kit.version == 12   ? kit.v12->member(__VA_ARGS__)                                            \
     : kit.version == 11 ? kit.v11->member(__VA_ARGS__)                                            \
                         : kit.v10->member(__VA_ARGS__))

static void kit_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                       const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    (void)flags;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (level == NCCL_LOG_WARN) {
        size_t used = strlen(kit.warn);
        kit.nwarn++;
        snprintf(kit.warn + used, sizeof(kit.warn) - used, "%s\n", msg);
    }
    if (level == NCCL_LOG_WARN || kit.verbose) {
        fprintf(stderr, "[plugin %s] %s:%d %s\n", level == NCCL_LOG_WARN ? "WARN" : "INFO", file,
                line, msg);
    }
}

int kit_load(const char *path, int version, char *err, size_t errlen)
{
    static const struct {
        int version;
        const char *symbol;
    } probe[] = {{12, "ncclNetPlugin_v12"}, {11, "ncclNetPlugin_v11"}, {10, "ncclNetPlugin_v10"}};
    void *sym = NULL;

    kit.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (kit.lib == NULL) {
        snprintf(err, errlen, "dlopen %s: %s", path, dlerror());
        return -1;
    }
    for (size_t i = 0; i < sizeof(probe) / sizeof(probe[0]) && sym == NULL; i++) {
        if (version != 0 && version != probe[i].version) {
            continue;
        }
        sym = dlsym(kit.lib, probe[i].symbol);
        kit.version = probe[i].version;
        kit.symbol = probe[i].symbol;
    }
    if (sym == NULL) {
        snprintf(err, errlen, "%s exports no %s", path,
                 version ? "symbol of the version asked for" : "ncclNetPlugin_v12/v11/v10");
        return -1;
    }
    kit.v12 = kit.version == 12 ? sym : NULL;
    kit.v11 = kit.version == 11 ? sym : NULL;
    kit.v10 = kit.version == 10 ? sym : NULL;
    return 0;
}

int kit_version(void)
{
    return kit.version;
}

const char *kit_symbol(void)
{
    return kit.symbol;
}

const char *kit_name(void)
{
    switch (kit.version) {
    case 12: return kit.v12->name;
    case 11: return kit.v11->name;
    default: return kit.v10->name;
    }
}

ncclResult_t kit_init(void)
{
    ncclNetCommConfig_v12_t c12 = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    ncclNetCommConfig_v11_t c11 = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};

    kit.ctx = NULL;
    switch (kit.version) {
    case 12: return kit.v12->init(&kit.ctx, 0x1234, &c12, kit_logger, NULL);
    case 11: return kit.v11->init(&kit.ctx, 0x1234, &c11, kit_logger, NULL);
    default: return kit.v10->init(kit_logger, NULL);
    }
}

void kit_fini(void)
{
    if (kit.version == 12 && kit.ctx != NULL) {
        kit.v12->finalize(kit.ctx);
    } else if (kit.version == 11 && kit.ctx != NULL) {
        kit.v11->finalize(kit.ctx);
    }
    kit.ctx = NULL;
}

int kit_warn_count(void)
{
    return kit.nwarn;
}

const char *kit_warn_text(void)
{
    return kit.warn;
}

void kit_warn_reset(void)
{
    kit.nwarn = 0;
    kit.warn[0] = '\0';
}

void kit_set_verbose(int verbose)
{
    kit.verbose = verbose;
}

ncclResult_t kit_devices(int *ndev)
{
    return KIT_CALL(devices, ndev);
}

/* Copy what v10 and v11 share into the v12 layout. */
#define KIT_PROPS_COMMON(dst, src)                                                                 \
    do {                                                                                           \
        (dst)->name = (src).name;                                                                  \
        (dst)->pciPath = (src).pciPath;                                                            \
        (dst)->guid = (src).guid;                                                                  \
        (dst)->ptrSupport = (src).ptrSupport;                                                      \
        (dst)->regIsGlobal = (src).regIsGlobal;                                                    \
        (dst)->forceFlush = (src).forceFlush;                                                      \
        (dst)->speed = (src).speed;                                                                \
        (dst)->port = (src).port;                                                                  \
        (dst)->latency = (src).latency;                                                            \
        (dst)->maxComms = (src).maxComms;                                                          \
        (dst)->maxRecvs = (src).maxRecvs;                                                          \
        (dst)->netDeviceType = (src).netDeviceType;                                                \
        (dst)->netDeviceVersion = (src).netDeviceVersion;                                          \
        (dst)->vProps.ndevs = (src).vProps.ndevs;                                                  \
        memcpy((dst)->vProps.devs, (src).vProps.devs, sizeof((src).vProps.devs));                  \
        (dst)->maxP2pBytes = (src).maxP2pBytes;                                                    \
        (dst)->maxCollBytes = (src).maxCollBytes;                                                  \
    } while (0)

ncclResult_t kit_properties(int dev, ncclNetProperties_v12_t *props)
{
    ncclNetProperties_v11_t p11;
    ncclNetProperties_v10_t p10;
    ncclResult_t res;

    memset(props, 0, sizeof(*props));
    props->maxMultiRequestSize = 1;
    props->railId = NCCL_NET_ID_UNDEF;
    props->planeId = NCCL_NET_ID_UNDEF;
    switch (kit.version) {
    case 12: return kit.v12->getProperties(dev, props);
    case 11:
        memset(&p11, 0, sizeof(p11));
        res = kit.v11->getProperties(dev, &p11);
        KIT_PROPS_COMMON(props, p11);
        props->maxMultiRequestSize = p11.maxMultiRequestSize;
        return res;
    default:
        memset(&p10, 0, sizeof(p10));
        res = kit.v10->getProperties(dev, &p10);
        KIT_PROPS_COMMON(props, p10);
        return res;
    }
}

ncclResult_t kit_listen(int dev, void *handle, void **listen_comm)
{
    switch (kit.version) {
    case 12: return kit.v12->listen(kit.ctx, dev, handle, listen_comm);
    case 11: return kit.v11->listen(kit.ctx, dev, handle, listen_comm);
    default: return kit.v10->listen(dev, handle, listen_comm);
    }
}

ncclResult_t kit_connect(int dev, void *handle, void **send_comm)
{
    ncclNetCommConfig_v10_t c10 = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};

    switch (kit.version) {
    case 12: return kit.v12->connect(kit.ctx, dev, handle, send_comm, NULL);
    case 11: return kit.v11->connect(kit.ctx, dev, handle, send_comm, NULL);
    default: return kit.v10->connect(dev, &c10, handle, send_comm, NULL);
    }
}

ncclResult_t kit_accept(void *listen_comm, void **recv_comm)
{
    return KIT_CALL(accept, listen_comm, recv_comm, NULL);
}

ncclResult_t kit_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
    return KIT_CALL(regMr, comm, data, size, type, mhandle);
}

ncclResult_t kit_dereg_mr(void *comm, void *mhandle)
{
    return KIT_CALL(deregMr, comm, mhandle);
}

ncclResult_t kit_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                       void **request)
{
    return KIT_CALL(isend, send_comm, data, size, tag, mhandle, NULL, request);
}

ncclResult_t kit_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                       void **mhandles, void **request)
{
    void *phandles[8] = {NULL};
    return KIT_CALL(irecv, recv_comm, n, data, sizes, tags, mhandles, phandles, request);
}

ncclResult_t kit_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                        void **request)
{
    return KIT_CALL(iflush, recv_comm, n, data, sizes, mhandles, request);
}

ncclResult_t kit_test(void *request, int *done, int *sizes)
{
    return KIT_CALL(test, request, done, sizes);
}

ncclResult_t kit_close_send(void *send_comm)
{
    return KIT_CALL(closeSend, send_comm);
}

ncclResult_t kit_close_recv(void *recv_comm)
{
    return KIT_CALL(closeRecv, recv_comm);
}

ncclResult_t kit_close_listen(void *listen_comm)
{
    return KIT_CALL(closeListen, listen_comm);
}

double kit_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
