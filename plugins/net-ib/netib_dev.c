/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net-ib devices: every ACTIVE port of every verbs device that NCCL_IB_HCA lets through,
 * with its GID (RoCE: chosen as NCCL does), protection domain, handshake address,
 * properties, registration cache and asynchronous events.
 *
 * The device table is built once per process under pthread_once and never changes after;
 * per-device mutable state (cache, port and fatal flags) is under the device's mutex.
 * Asynchronous events are read without blocking by whichever thread makes progress, so
 * no thread of ours outlives the plugin's unload.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "netib.h"
#include "netib_util.h"
#include "param_lite.h"

#include "common/check.h"

/* The parameter getters declared in netib.h: strings are read on each call, integers once. */
#define NETIB_STR_PARAM(getter, key, doc)                                                          \
    const char *getter(void)                                                                       \
    {                                                                                              \
        return br_lite_param_str(key);                                                             \
    }
#define BR_LITE_PARAM(getter, key, def, doc)                                                       \
    int64_t getter(void)                                                                           \
    {                                                                                              \
        static int64_t cached_;                                                                    \
        static int loaded_;                                                                        \
        if (!__atomic_load_n(&loaded_, __ATOMIC_ACQUIRE)) {                                        \
            cached_ = br_lite_param_int(key, def);                                                 \
            __atomic_store_n(&loaded_, 1, __ATOMIC_RELEASE);                                       \
        }                                                                                          \
        return cached_;                                                                            \
    }
#include "netib_params.def"
#undef BR_LITE_PARAM
#undef NETIB_STR_PARAM

static netib_dev_t netib_devs[NETIB_MAX_DEVS];
static int netib_ndevs;
static ncclResult_t netib_init_res;
static pthread_mutex_t netib_init_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t netib_init_pid; /* the process that built the table; 0 before */

long netib_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

const char *netib_dev_label(const netib_dev_t *d, char *buf, size_t len)
{
    snprintf(buf, len, "%.63s:%d", d->name, d->port);
    return buf;
}

void netib_addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s->sin_addr, ip, sizeof(ip));
        snprintf(buf, len, "%s:%u", ip, ntohs(s->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof(ip));
        snprintf(buf, len, "[%s]:%u", ip, ntohs(s->sin6_port));
    } else {
        snprintf(buf, len, "(family %d)", sa->sa_family);
    }
}

static const char *link_layer_str(int ll)
{
    return ll == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB";
}

/* The GID of a RoCE port: NCCL_IB_GID_INDEX, or the first of the wanted RoCE version and
 * address family (netib_gid_choose). Fills d->gid_index and d->gid. */
static ncclResult_t pick_gid(netib_dev_t *d, int gid_tbl_len)
{
    netib_gid_entry_t *e = calloc((size_t)gid_tbl_len, sizeof(*e));
    const char *fam_s = netib_param_addr_family();
    int family = (fam_s != NULL && strcmp(fam_s, "AF_INET6") == 0) ? AF_INET6 : AF_INET;
    int forced = (int)netib_param_gid_index(), pick;

    if (e == NULL) {
        BR_WARN(NCCL_INIT | NCCL_NET, "NET/IB : out of memory reading the GIDs of %s", d->name);
        return ncclSystemError;
    }
    if (fam_s != NULL && strcmp(fam_s, "AF_INET") != 0 && strcmp(fam_s, "AF_INET6") != 0) {
        BR_WARN(NCCL_INIT | NCCL_ENV,
                "NET/IB : NCCL_IB_ADDR_FAMILY '%s' is neither AF_INET nor "
                "AF_INET6; using AF_INET",
                fam_s);
    }
    for (int i = 0; i < gid_tbl_len; i++) {
        struct ibv_gid_entry ge;
        if (ibv_query_gid_ex(d->ctx, (uint32_t)d->port, (uint32_t)i, &ge, 0) != 0) {
            continue; /* an empty slot (ENODATA) */
        }
        e[i].valid = 1;
        e[i].index = i;
        e[i].type = ge.gid_type == IBV_GID_TYPE_ROCE_V2   ? NETIB_GID_ROCE_V2
                    : ge.gid_type == IBV_GID_TYPE_ROCE_V1 ? NETIB_GID_ROCE_V1
                                                          : NETIB_GID_IB;
        memcpy(e[i].raw, ge.gid.raw, 16);
    }
    pick = netib_gid_choose(e, gid_tbl_len, forced, (int)netib_param_roce_version(), family);
    if (pick < 0) {
        if (forced >= 0) {
            BR_WARN(NCCL_INIT | NCCL_NET, "NET/IB : %s:%d has no GID at NCCL_IB_GID_INDEX %d",
                    d->name, d->port, forced);
        } else {
            BR_WARN(NCCL_INIT | NCCL_NET,
                    "NET/IB : %s:%d has no RoCE GID (is its netdev up "
                    "with an address?)",
                    d->name, d->port);
        }
        free(e);
        return ncclSystemError;
    }
    d->gid_index = e[pick].index;
    memcpy(d->gid.raw, e[pick].raw, 16);
    if (forced < 0 && (e[pick].type != ((int)netib_param_roce_version() == 1 ? NETIB_GID_ROCE_V1
                                                                             : NETIB_GID_ROCE_V2) ||
                       (family == AF_INET) != netib_gid_is_ipv4(e[pick].raw))) {
        BR_INFO(NCCL_INIT | NCCL_NET,
                "NET/IB : %s:%d has no RoCE v%d GID of family %s; using "
                "GID index %d",
                d->name, d->port, (int)netib_param_roce_version(),
                family == AF_INET ? "AF_INET" : "AF_INET6", d->gid_index);
    }
    free(e);
    return ncclSuccess;
}

/* Does an interface name pass NCCL_SOCKET_IFNAME (prefixes, ^ excludes, = exact)? */
static int ifname_ok(const char *name)
{
    netib_hca_list_t l;
    const char *spec = netib_param_socket_ifname();

    if (spec == NULL) {
        return strcmp(name, "lo") != 0 && strncmp(name, "docker", 6) != 0;
    }
    if (netib_hca_parse(spec, &l) != 0) {
        return 0;
    }
    return netib_hca_match(&l, name, -1);
}

/* The handshake address: the RoCE GID's own IP address, else the first interface that
 * NCCL_SOCKET_IFNAME allows, else the loopback. */
static void pick_oob_addr(netib_dev_t *d)
{
    struct ifaddrs *ifa = NULL;

    memset(&d->oob, 0, sizeof(d->oob));
    if (d->link_layer == IBV_LINK_LAYER_ETHERNET && netib_gid_is_ipv4(d->gid.raw)) {
        struct sockaddr_in *s = (struct sockaddr_in *)&d->oob;
        s->sin_family = AF_INET;
        memcpy(&s->sin_addr, d->gid.raw + 12, 4);
        return;
    }
    if (d->link_layer == IBV_LINK_LAYER_ETHERNET && d->gid.raw[0] != 0xfe) {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&d->oob;
        s->sin6_family = AF_INET6;
        memcpy(&s->sin6_addr, d->gid.raw, 16);
        return;
    }
    if (getifaddrs(&ifa) == 0) {
        for (struct ifaddrs *i = ifa; i != NULL; i = i->ifa_next) {
            if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
                !(i->ifa_flags & IFF_UP) || !ifname_ok(i->ifa_name)) {
                continue;
            }
            memcpy(&d->oob, i->ifa_addr, sizeof(struct sockaddr_in));
            freeifaddrs(ifa);
            return;
        }
        freeifaddrs(ifa);
    }
    struct sockaddr_in *s = (struct sockaddr_in *)&d->oob;
    s->sin_family = AF_INET;
    s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

/* GPUDirect RDMA: NCCL_PTR_CUDA when a peer-memory module is loaded; dma-buf when the
 * driver takes dma-buf registrations and an NVIDIA GPU driver is present. */
static void probe_gpu(netib_dev_t *d, const char *label)
{
    int peermem = access("/sys/kernel/mm/memory_peers/nv_mem/version", F_OK) == 0 ||
                  access("/sys/module/nvidia_peermem/version", F_OK) == 0 ||
                  access("/sys/module/nv_peer_mem/version", F_OK) == 0;
    int gpu = access("/proc/driver/nvidia/version", F_OK) == 0;
    int dmabuf_drv = 0;
    struct ibv_mr *mr;

    /* A dma-buf registration of fd -1 fails with EBADF where the driver implements it and
     * with EOPNOTSUPP / EPROTONOSUPPORT where it does not. */
    errno = 0;
    mr = ibv_reg_dmabuf_mr(d->pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE);
    if (mr != NULL) {
        ibv_dereg_mr(mr);
    } else {
        dmabuf_drv = errno != EOPNOTSUPP && errno != EPROTONOSUPPORT && errno != ENOSYS;
    }
    d->dmabuf = gpu && dmabuf_drv;
    d->ptr_support = NCCL_PTR_HOST;
    if ((gpu && peermem) || d->dmabuf) {
        d->ptr_support |= NCCL_PTR_CUDA;
    }
    if (d->dmabuf) {
        d->ptr_support |= NCCL_PTR_DMABUF;
    }
    BR_INFO(NCCL_INIT | NCCL_NET,
            "NET/IB : %s: GPUDirect RDMA %s (GPU driver %s, peer memory "
            "module %s, dma-buf registration %s)",
            label, (d->ptr_support & NCCL_PTR_CUDA) ? "on" : "off: NCCL_PTR_CUDA not offered",
            gpu ? "present" : "absent", peermem ? "loaded" : "absent",
            dmabuf_drv ? "supported by the device" : "not supported by the device");
}

/* Set up one ACTIVE port as netib_devs[netib_ndevs]. ctx is shared by a device's ports. */
static ncclResult_t add_port(struct ibv_context *ctx, const char *name,
                             const struct ibv_device_attr *da, int port,
                             const struct ibv_port_attr *pa, uint64_t guid)
{
    netib_dev_t *d = &netib_devs[netib_ndevs];
    char path[PATH_MAX], label[NETIB_NAME_LEN + 8];
    ncclResult_t res = ncclSuccess;

    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof(d->name), "%s", name);
    d->port = port;
    d->ctx = ctx;
    d->link_layer = pa->link_layer == IBV_LINK_LAYER_ETHERNET ? IBV_LINK_LAYER_ETHERNET
                                                              : IBV_LINK_LAYER_INFINIBAND;
    d->lid = pa->lid;
    d->mtu = pa->active_mtu;
    d->guid = guid;
    d->max_qp = da->max_qp;
    d->gid_index = -1;
    d->speed_mbps = netib_port_speed_mbps(pa->active_speed, pa->active_width);
    netib_dev_label(d, label, sizeof(label));
    if (d->speed_mbps == 0) {
        BR_INFO(NCCL_INIT | NCCL_NET,
                "NET/IB : %s: unknown speed code %d width %d; reporting "
                "10 Gb/s",
                label, pa->active_speed, pa->active_width);
        d->speed_mbps = 10000;
    }
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device", name);
    d->pci_path = realpath(path, NULL); /* NULL for soft devices (rxe) */
    d->pd = ibv_alloc_pd(ctx);
    if (d->pd == NULL) {
        BR_WARN(NCCL_INIT | NCCL_NET, "NET/IB : %s: ibv_alloc_pd failed: %s", label,
                strerror(errno));
        res = ncclSystemError;
        goto err_free_path;
    }
    if (d->link_layer == IBV_LINK_LAYER_ETHERNET) {
        BR_CHECK_GOTO(pick_gid(d, pa->gid_tbl_len), res, err_free_pd);
    } else if (netib_param_gid_index() >= 0) {
        d->gid_index = (int)netib_param_gid_index(); /* IB with a GRH */
        if (ibv_query_gid(ctx, (uint8_t)port, d->gid_index, &d->gid) != 0) {
            BR_WARN(NCCL_INIT | NCCL_NET, "NET/IB : %s: no GID at NCCL_IB_GID_INDEX %d", label,
                    d->gid_index);
            res = ncclSystemError;
            goto err_free_pd;
        }
    }
    d->mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (netib_param_relaxed_ordering() != 0) {
        d->mr_access |= IBV_ACCESS_RELAXED_ORDERING; /* optional: ignored where unsupported */
    }
    pick_oob_addr(d);
    probe_gpu(d, label);
    pthread_mutex_init(&d->lock, NULL);
    {
        char gid[INET6_ADDRSTRLEN] = "-", oob[NETIB_ADDR_STRLEN];
        if (d->gid_index >= 0) {
            inet_ntop(AF_INET6, d->gid.raw, gid, sizeof(gid));
        }
        netib_addr_str((struct sockaddr *)&d->oob, oob, sizeof(oob));
        BR_INFO(NCCL_INIT | NCCL_NET,
                "NET/IB : [%d] %s %s, %d Mbps, MTU %d, LID %#x, GID "
                "index %d %s, handshake on %s, pci %s",
                netib_ndevs, label, link_layer_str(d->link_layer), d->speed_mbps, 128 << d->mtu,
                d->lid, d->gid_index, gid, oob, d->pci_path ? d->pci_path : "none");
    }
    netib_ndevs++;
    return ncclSuccess;

err_free_pd:
    ibv_dealloc_pd(d->pd);
err_free_path:
    free(d->pci_path);
    memset(d, 0, sizeof(*d));
    return res;
}

static const char *port_state_str(enum ibv_port_state s)
{
    return ibv_port_state_str(s);
}

/* The ports of one device that pass NCCL_IB_HCA and are ACTIVE. Returns the number added. */
static int scan_device(struct ibv_device *dev, const netib_hca_list_t *hca, char *seen,
                       size_t seen_len)
{
    const char *name = ibv_get_device_name(dev);
    struct ibv_context *ctx = ibv_open_device(dev);
    struct ibv_device_attr da;
    int added = 0;

    if (ctx == NULL) {
        BR_WARN(NCCL_INIT | NCCL_NET, "NET/IB : cannot open %s: %s", name, strerror(errno));
        return 0;
    }
    if (ibv_query_device(ctx, &da) != 0) {
        BR_WARN(NCCL_INIT | NCCL_NET, "NET/IB : ibv_query_device(%s) failed: %s", name,
                strerror(errno));
        ibv_close_device(ctx);
        return 0;
    }
    for (int port = 1; port <= da.phys_port_cnt && netib_ndevs < NETIB_MAX_DEVS; port++) {
        struct ibv_port_attr pa;
        size_t used = strlen(seen);
        if (ibv_query_port(ctx, (uint8_t)port, &pa) != 0) {
            BR_WARN(NCCL_INIT | NCCL_NET, "NET/IB : ibv_query_port(%s, %d) failed: %s", name, port,
                    strerror(errno));
            continue;
        }
        snprintf(seen + used, seen_len - used, "%s%s:%d (%s)", used ? ", " : "", name, port,
                 port_state_str(pa.state));
        if (!netib_hca_match(hca, name, port)) {
            BR_INFO(NCCL_INIT | NCCL_NET, "NET/IB : %s:%d left out by NCCL_IB_HCA", name, port);
            continue;
        }
        if (pa.state != IBV_PORT_ACTIVE) {
            if (hca->n > 0 && !hca->exclude) {
                BR_WARN(NCCL_INIT | NCCL_NET,
                        "NET/IB : %s:%d named by NCCL_IB_HCA is %s, not "
                        "ACTIVE; not using it",
                        name, port, port_state_str(pa.state));
            } else {
                BR_INFO(NCCL_INIT | NCCL_NET, "NET/IB : %s:%d is %s, not ACTIVE; not using it",
                        name, port, port_state_str(pa.state));
            }
            continue;
        }
        if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND &&
            pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
            BR_INFO(NCCL_INIT | NCCL_NET, "NET/IB : %s:%d has link layer %d; not using it", name,
                    port, pa.link_layer);
            continue;
        }
        if (add_port(ctx, name, &da, port, &pa, be64toh(ibv_get_device_guid(dev))) == ncclSuccess) {
            added++;
        }
    }
    if (added == 0) {
        ibv_close_device(ctx);
    }
    return added;
}

static void dev_init_once(void)
{
    struct ibv_device **list;
    netib_hca_list_t hca;
    const char *spec = netib_param_hca();
    char seen[1024] = "";
    int n = 0;

    netib_init_res = ncclSuccess;
    if (netib_param_disable()) {
        BR_INFO(NCCL_INIT | NCCL_NET, "NET/IB : disabled by NCCL_IB_DISABLE");
        return;
    }
    if (netib_hca_parse(spec, &hca) != 0) {
        BR_WARN(NCCL_INIT | NCCL_ENV,
                "NET/IB : NCCL_IB_HCA '%s' is malformed (expected "
                "[^][=]name[:port],...)",
                spec);
        netib_init_res = ncclInvalidUsage;
        return;
    }
    list = ibv_get_device_list(&n);
    if (list == NULL || n == 0) {
        BR_INFO(NCCL_INIT | NCCL_NET, "NET/IB : No device found.%s",
                list == NULL ? " (ibv_get_device_list failed)" : "");
        if (list != NULL) {
            ibv_free_device_list(list);
        }
        return;
    }
    for (int i = 0; i < n && netib_ndevs < NETIB_MAX_DEVS; i++) {
        scan_device(list[i], &hca, seen, sizeof(seen));
    }
    ibv_free_device_list(list);
    if (netib_ndevs == 0) {
        if (spec != NULL) {
            BR_WARN(NCCL_INIT | NCCL_NET,
                    "NET/IB : no usable port left by NCCL_IB_HCA '%s' "
                    "among %s",
                    spec, seen);
        } else {
            BR_WARN(NCCL_INIT | NCCL_NET, "NET/IB : no ACTIVE port among %s", seen);
        }
    }
}

/* A forked child cannot use its parent's verbs contexts (the kernel refuses commands on
 * a uverbs file opened under other credentials, EACCES), so a child that initialises the
 * plugin builds its own table; the parent's objects are left alone, not freed. */
ncclResult_t netib_dev_init(void)
{
    ncclResult_t res;

    pthread_mutex_lock(&netib_init_lock);
    if (netib_init_pid != getpid()) {
        if (netib_init_pid != 0) {
            BR_INFO(NCCL_INIT | NCCL_NET,
                    "NET/IB : process %d was forked from %d; finding the "
                    "devices again",
                    (int)getpid(), (int)netib_init_pid);
        }
        netib_ndevs = 0;
        memset(netib_devs, 0, sizeof(netib_devs));
        dev_init_once();
        netib_init_pid = getpid();
    }
    res = netib_init_res;
    pthread_mutex_unlock(&netib_init_lock);
    return res;
}

int netib_dev_count(void)
{
    return netib_ndevs;
}

netib_dev_t *netib_dev_get(int dev)
{
    return (dev >= 0 && dev < netib_ndevs) ? &netib_devs[dev] : NULL;
}

ncclResult_t netib_dev_properties(int dev, ncclNetProperties_v12_t *props)
{
    netib_dev_t *d = netib_dev_get(dev);

    if (d == NULL) {
        BR_WARN(NCCL_NET, "NET/IB : device %d does not exist (%d devices)", dev, netib_ndevs);
        return ncclInvalidUsage;
    }
    memset(props, 0, sizeof(*props));
    props->name = d->name;
    props->pciPath = d->pci_path;
    props->guid = d->guid;
    props->ptrSupport = d->ptr_support;
    props->regIsGlobal = 1; /* the per-device registration cache */
    props->forceFlush = 0;
    props->speed = d->speed_mbps;
    props->port = d->port;
    props->latency = 0;
    props->maxComms = d->max_qp;
    props->maxRecvs = NETIB_MAX_RECVS;
    props->netDeviceType = NCCL_NET_DEVICE_HOST;
    props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    props->vProps.ndevs = 1;
    props->vProps.devs[0] = dev;
    props->maxP2pBytes = NETIB_MAX_MSG;
    props->maxCollBytes = NETIB_MAX_MSG;
    props->maxMultiRequestSize = 1;
    props->railId = -1;
    props->planeId = -1;
    return ncclSuccess;
}

ncclResult_t netib_dev_check(netib_dev_t *d, const char *what)
{
    char label[NETIB_NAME_LEN + 8];
    struct ibv_port_attr pa;
    int down, fatal;

    netib_dev_poll_events(d);
    pthread_mutex_lock(&d->lock);
    down = d->port_down;
    fatal = d->fatal;
    pthread_mutex_unlock(&d->lock);
    netib_dev_label(d, label, sizeof(label));
    if (fatal) {
        BR_WARN(NCCL_NET, "NET/IB : %s: cannot %s: the device reported a fatal error", label, what);
        return ncclSystemError;
    }
    if (ibv_query_port(d->ctx, (uint8_t)d->port, &pa) != 0) {
        BR_WARN(NCCL_NET, "NET/IB : %s: cannot %s: ibv_query_port failed: %s", label, what,
                strerror(errno));
        return ncclSystemError;
    }
    if (down || pa.state != IBV_PORT_ACTIVE) {
        BR_WARN(NCCL_NET, "NET/IB : %s: cannot %s: port is %s", label, what,
                port_state_str(pa.state));
        return ncclSystemError;
    }
    return ncclSuccess;
}

/* One asynchronous event: log it and flag what it breaks. Called under d->lock. */
static void handle_event(netib_dev_t *d, const struct ibv_async_event *ev, const char *label)
{
    const char *what = ibv_event_type_str(ev->event_type);

    switch (ev->event_type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR: {
        netib_comm_t *c = ev->element.qp->qp_context;
        BR_WARN(NCCL_NET,
                "NET/IB : %s: asynchronous event '%s' on QP %#x (%s comm with peer "
                "%s)",
                label, what, ev->element.qp->qp_num, c ? (c->is_send ? "send" : "receive") : "no",
                c ? c->peer : "?");
        if (c != NULL) {
            netib_comm_fail(c, ncclRemoteError);
        }
        break;
    }
    case IBV_EVENT_CQ_ERR:
        BR_WARN(NCCL_NET, "NET/IB : %s: asynchronous event '%s'", label, what);
        break;
    case IBV_EVENT_PORT_ERR:
        if ((int)ev->element.port_num == d->port) {
            BR_WARN(NCCL_NET, "NET/IB : %s: asynchronous event '%s': the port went down", label,
                    what);
            d->port_down = 1;
        }
        break;
    case IBV_EVENT_PORT_ACTIVE:
        if ((int)ev->element.port_num == d->port) {
            BR_INFO(NCCL_NET, "NET/IB : %s: asynchronous event '%s'", label, what);
            d->port_down = 0;
        }
        break;
    case IBV_EVENT_DEVICE_FATAL:
        BR_WARN(NCCL_NET, "NET/IB : %s: asynchronous event '%s'", label, what);
        d->fatal = 1;
        break;
    default: BR_INFO(NCCL_NET, "NET/IB : %s: asynchronous event '%s'", label, what); break;
    }
}

/* Serialises the readers of every device's event queue; taken before any device lock. */
static pthread_mutex_t netib_event_lock = PTHREAD_MUTEX_INITIALIZER;

void netib_dev_poll_events(netib_dev_t *d)
{
    struct pollfd pfd = {.fd = d->ctx->async_fd, .events = POLLIN};
    char label[NETIB_NAME_LEN + 8];

    /* The ports of one device share its context and so its event queue: a port event goes
     * to the sibling entry of that port, every other event to d. */
    pthread_mutex_lock(&netib_event_lock);
    while (poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN)) {
        struct ibv_async_event ev;
        int fl = fcntl(d->ctx->async_fd, F_GETFL);
        if (fl >= 0 && !(fl & O_NONBLOCK)) {
            fcntl(d->ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
        }
        if (ibv_get_async_event(d->ctx, &ev) != 0) {
            break;
        }
        for (int i = 0; i < netib_ndevs; i++) {
            netib_dev_t *s = &netib_devs[i];
            int port_ev =
                ev.event_type == IBV_EVENT_PORT_ERR || ev.event_type == IBV_EVENT_PORT_ACTIVE;
            if (s->ctx != d->ctx || (port_ev && (int)ev.element.port_num != s->port) ||
                (!port_ev && s != d)) {
                continue;
            }
            pthread_mutex_lock(&s->lock);
            handle_event(s, &ev, netib_dev_label(s, label, sizeof(label)));
            pthread_mutex_unlock(&s->lock);
        }
        ibv_ack_async_event(&ev);
    }
    pthread_mutex_unlock(&netib_event_lock);
}

ncclResult_t netib_mr_get(netib_dev_t *d, void *data, size_t size, int cuda, netib_mr_t **mr_p)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t base = (uintptr_t)data & ~((uintptr_t)page - 1);
    size_t len = (((uintptr_t)data + size + (uintptr_t)page - 1) & ~((uintptr_t)page - 1)) - base;
    netib_mr_t *m;
    char label[NETIB_NAME_LEN + 8];

    pthread_mutex_lock(&d->lock);
    for (m = d->mrs; m != NULL; m = m->next) {
        if (m->base <= base && base + len <= m->base + m->len && m->cuda == cuda) {
            m->refs++;
            pthread_mutex_unlock(&d->lock);
            *mr_p = m;
            return ncclSuccess;
        }
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        pthread_mutex_unlock(&d->lock);
        BR_WARN(NCCL_NET, "NET/IB : out of memory for a registration");
        return ncclSystemError;
    }
    m->mr = ibv_reg_mr(d->pd, (void *)base, len, d->mr_access);
    if (m->mr == NULL) {
        int e = errno;
        pthread_mutex_unlock(&d->lock);
        BR_WARN(NCCL_NET, "NET/IB : %s: ibv_reg_mr of %zu bytes at %p failed: %s%s",
                netib_dev_label(d, label, sizeof(label)), len, (void *)base, strerror(e),
                e == ENOMEM ? " (raise the locked-memory limit, ulimit -l)" : "");
        free(m);
        return ncclSystemError;
    }
    m->dev = d;
    m->base = base;
    m->len = len;
    m->refs = 1;
    m->cuda = cuda;
    m->cached = 1;
    m->next = d->mrs;
    d->mrs = m;
    pthread_mutex_unlock(&d->lock);
    *mr_p = m;
    return ncclSuccess;
}

void netib_mr_put(netib_mr_t *m)
{
    netib_dev_t *d = m->dev;

    if (!m->cached) {
        ibv_dereg_mr(m->mr);
        free(m);
        return;
    }
    pthread_mutex_lock(&d->lock);
    if (--m->refs == 0) {
        for (netib_mr_t **p = &d->mrs; *p != NULL; p = &(*p)->next) {
            if (*p == m) {
                *p = m->next;
                break;
            }
        }
        if (ibv_dereg_mr(m->mr) != 0) {
            BR_INFO(NCCL_NET, "NET/IB : %s: ibv_dereg_mr failed: %s", d->name, strerror(errno));
        }
        free(m);
    }
    pthread_mutex_unlock(&d->lock);
}

ncclResult_t netib_mr_dmabuf(netib_dev_t *d, void *data, size_t size, uint64_t offset, int fd,
                             netib_mr_t **mr_p)
{
    netib_mr_t *m = calloc(1, sizeof(*m));
    char label[NETIB_NAME_LEN + 8];

    if (m == NULL) {
        BR_WARN(NCCL_NET, "NET/IB : out of memory for a registration");
        return ncclSystemError;
    }
    m->mr = ibv_reg_dmabuf_mr(d->pd, offset, size, (uint64_t)(uintptr_t)data, fd, d->mr_access);
    if (m->mr == NULL) {
        BR_WARN(NCCL_NET, "NET/IB : %s: ibv_reg_dmabuf_mr of %zu bytes (fd %d) failed: %s",
                netib_dev_label(d, label, sizeof(label)), size, fd, strerror(errno));
        free(m);
        return ncclSystemError;
    }
    m->dev = d;
    m->base = (uintptr_t)data;
    m->len = size;
    m->refs = 1;
    m->cuda = 1;
    *mr_p = m;
    return ncclSuccess;
}
