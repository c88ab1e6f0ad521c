/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loading libfabric and choosing what to run on. libfabric is dlopen'd (the plugin itself
 * is dlopen'd by NCCL or Braid, and a missing libfabric should fail init with a readable
 * message, not make the plugin unloadable). fi_getinfo is asked for reliable tagged
 * endpoints (FI_EP_RDM + FI_TAGGED); one provider is chosen by preference and user
 * filters, and each of its distinct domains becomes a device.
 *
 * State: one process-wide table, filled once under netofi_fabric_lock and read-only after.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "netofi.h"

#include "param_lite.h"

#define NETOFI_STR_PARAM(getter, key, doc)                                                         \
    static const char *getter(void)                                                                \
    {                                                                                              \
        return br_lite_param_str(key);                                                             \
    }
#define BR_LITE_PARAM(getter, key, def, doc) BR_LITE_PARAM_DEFINE(getter, key, def, doc)
#include "netofi_params.def"
#undef BR_LITE_PARAM
#undef NETOFI_STR_PARAM

/* Oldest libfabric whose fi_info layout (with nic) and semantics the plugin relies on. */
#define NETOFI_FI_MIN_VERSION FI_VERSION(1, 10)
#define NETOFI_MSG_MAX 1536

netofi_fi_t netofi_fi;

static pthread_mutex_t netofi_fabric_lock = PTHREAD_MUTEX_INITIALIZER;
static void *netofi_dl;  /* libfabric, never closed: providers may keep threads */
static int netofi_ready; /* devices found; written under the lock, read with acquire */
static int netofi_ndev;
static netofi_dev_t netofi_devs[NETOFI_MAX_DEVS];
static char netofi_prov[64];
static uint32_t netofi_prov_hash_value;

/* Preference among providers the user did not rank: hardware first, then TCP-based ones.
 * Providers not listed rank after these; shm (intra-host only) is used only when named. */
static const char *const netofi_pref[] = {"efa",  "cxi", "opx", "psm3",    "verbs",
                                          "psm2", "tcp", "net", "sockets", "udp"};
#define NETOFI_NPREF ((int)(sizeof(netofi_pref) / sizeof(netofi_pref[0])))

/* A bounded message builder for the diagnostics below. */
typedef struct {
    char buf[NETOFI_MSG_MAX];
    size_t len;
} netofi_msg_t;

static void msg_add(netofi_msg_t *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void msg_add(netofi_msg_t *m, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (m->len >= sizeof(m->buf) - 1) {
        return;
    }
    va_start(ap, fmt);
    n = vsnprintf(m->buf + m->len, sizeof(m->buf) - m->len, fmt, ap);
    va_end(ap);
    if (n > 0) {
        m->len += (size_t)n;
        if (m->len > sizeof(m->buf) - 1) {
            m->len = sizeof(m->buf) - 1;
        }
    }
}

uint32_t netofi_hash(const void *data, size_t len)
{
    const uint8_t *p = data;
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < len; i++) {
        h = (h ^ p[i]) * 16777619u;
    }
    return h;
}

static ncclResult_t dl_sym(const char *name, const char *version, void **fn_p)
{
    /* Pin the symbol versions a normal link against libfabric 1.x records, so a future
     * library with new default versions still gives us the structure layouts we know. */
    void *fn = dlvsym(netofi_dl, name, version);

    if (fn == NULL) {
        BR_WARN(NCCL_INIT | NCCL_NET, "net-ofi: libfabric lacks %s@%s: %s", name, version,
                dlerror());
        return ncclSystemError;
    }
    *fn_p = fn;
    return ncclSuccess;
}

static ncclResult_t load_libfabric(void)
{
    const char *path = netofi_param_libfabric();
    uint32_t (*version_fn)(void) = NULL;
    uint32_t built = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
    void *dl;

    if (netofi_dl != NULL) {
        return ncclSuccess;
    }
    if (path == NULL) {
        path = "libfabric.so.1";
    }
    dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        BR_WARN(NCCL_INIT | NCCL_NET, "net-ofi: %s not found: %s", path, dlerror());
        return ncclSystemError;
    }
    netofi_dl = dl;
    if (dl_sym("fi_version", "FABRIC_1.0", (void **)&version_fn) != ncclSuccess ||
        dl_sym("fi_getinfo", "FABRIC_1.3", (void **)&netofi_fi.getinfo) != ncclSuccess ||
        dl_sym("fi_freeinfo", "FABRIC_1.3", (void **)&netofi_fi.freeinfo) != ncclSuccess ||
        dl_sym("fi_dupinfo", "FABRIC_1.3", (void **)&netofi_fi.dupinfo) != ncclSuccess ||
        dl_sym("fi_fabric", "FABRIC_1.1", (void **)&netofi_fi.fabric) != ncclSuccess ||
        dl_sym("fi_strerror", "FABRIC_1.0", (void **)&netofi_fi.strerror) != ncclSuccess ||
        dl_sym("fi_tostr", "FABRIC_1.0", (void **)&netofi_fi.tostr) != ncclSuccess) {
        goto err_close;
    }
    netofi_fi.runtime_version = version_fn();
    if (netofi_fi.runtime_version < NETOFI_FI_MIN_VERSION) {
        BR_WARN(NCCL_INIT | NCCL_NET, "net-ofi: %s is libfabric %u.%u; net-ofi needs 1.10 or later",
                path, FI_MAJOR(netofi_fi.runtime_version), FI_MINOR(netofi_fi.runtime_version));
        goto err_close;
    }
    /* Ask for the older of what we were built against and what is loaded. */
    netofi_fi.api_version = netofi_fi.runtime_version < built ? netofi_fi.runtime_version : built;
    BR_INFO(NCCL_INIT | NCCL_NET, "net-ofi: loaded %s (libfabric %u.%u, api %u.%u)", path,
            FI_MAJOR(netofi_fi.runtime_version), FI_MINOR(netofi_fi.runtime_version),
            FI_MAJOR(netofi_fi.api_version), FI_MINOR(netofi_fi.api_version));
    return ncclSuccess;

err_close:
    dlclose(dl);
    netofi_dl = NULL;
    return ncclSystemError;
}

/* Does the comma list `list` name provider `prov`? A token matches the whole provider
 * name ("tcp;ofi_rxm") or any of its ';' components ("tcp", "ofi_rxm"). Returns the
 * token's index, or -1. */
static int list_match(const char *list, const char *prov)
{
    int index = 0;

    while (list != NULL && *list != '\0') {
        size_t tlen = strcspn(list, ",");
        const char *p = prov;

        if (tlen > 0 && strncasecmp(list, prov, tlen) == 0 && prov[tlen] == '\0') {
            return index;
        }
        while (tlen > 0 && *p != '\0') {
            size_t clen = strcspn(p, ";");
            if (clen == tlen && strncasecmp(list, p, tlen) == 0) {
                return index;
            }
            p += clen + (p[clen] == ';');
        }
        list += tlen + (list[tlen] == ',');
        index++;
    }
    return -1;
}

static int is_intra_host(const char *prov)
{
    return strncasecmp(prov, "shm", 3) == 0 || strncasecmp(prov, "sm2", 3) == 0;
}

/*
 * Rank of provider prov (lower is better), or -1 with the reason in *why when the user's
 * filters or our defaults exclude it.
 */
static int provider_rank(const char *prov, const char **why_p)
{
    const char *want = netofi_param_provider();
    const char *fi_prov = br_lite_param_str("FI_PROVIDER");
    int r;

    if (list_match(netofi_param_exclude(), prov) >= 0) {
        *why_p = "NCCL_OFI_EXCLUDE_PROVIDERS";
        return -1;
    }
    if (want != NULL && want[0] == '^') {
        if (list_match(want + 1, prov) >= 0) {
            *why_p = "NCCL_OFI_PROVIDER";
            return -1;
        }
        want = NULL;
    }
    if (want != NULL) {
        r = list_match(want, prov);
        *why_p = "not in NCCL_OFI_PROVIDER";
        return r;
    }
    if (is_intra_host(prov) &&
        (fi_prov == NULL || fi_prov[0] == '^' || list_match(fi_prov, prov) < 0)) {
        *why_p = "intra-host only; name it in NCCL_OFI_PROVIDER or FI_PROVIDER to use it";
        return -1;
    }
    for (r = 0; r < NETOFI_NPREF; r++) {
        size_t n = strlen(netofi_pref[r]);
        if (strncasecmp(prov, netofi_pref[r], n) == 0 && (prov[n] == '\0' || prov[n] == ';')) {
            return r;
        }
    }
    return NETOFI_NPREF;
}

static int tag_bits_of(const struct fi_info *info)
{
    uint64_t fmt = info->ep_attr->mem_tag_format;

    /* Leading zero bits are ignored by the provider; 0 means it did not say (all 64). */
    return fmt == 0 ? 64 : 64 - __builtin_clzll(fmt);
}

static struct fi_info *make_hints(void)
{
    struct fi_info *hints = netofi_fi.dupinfo(NULL);

    if (hints == NULL) {
        return NULL;
    }
    hints->caps = FI_TAGGED | FI_SEND | FI_RECV;
    /* Every request embeds a struct fi_context2 first, so both context modes work. */
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    /* Registrations are only used locally (no RMA), so keys and virtual addressing cost
     * nothing; MMU_NOTIFY and HMEM are not supported. */
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                  FI_MR_ENDPOINT | FI_MR_RAW;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    /* Sends may arrive before their receive is posted: the provider must queue them. */
    hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
    return hints;
}

/* fi_getinfo offered nothing for our hints: say what each provider lacks. */
static void diagnose_no_match(void)
{
    struct fi_info *all = NULL, *i, *j;
    const char *fi_prov = br_lite_param_str("FI_PROVIDER");
    netofi_msg_t m = {.len = 0};
    int rc = netofi_fi.getinfo(netofi_fi.api_version, NULL, NULL, 0, NULL, &all);

    if (rc != 0 || all == NULL) {
        BR_WARN(
            NCCL_INIT | NCCL_NET, "net-ofi: libfabric offers no provider at all (%s%s)",
            fi_prov ? "FI_PROVIDER=" : "fi_getinfo: ", fi_prov ? fi_prov : netofi_fi.strerror(-rc));
        return;
    }
    for (i = all; i != NULL; i = i->next) {
        const char *name = i->fabric_attr->prov_name;
        int rdm = 0, tagged = 0;

        for (j = all; j != i; j = j->next) {
            if (strcmp(j->fabric_attr->prov_name, name) == 0) {
                break;
            }
        }
        if (j != i) {
            continue; /* reported with its first entry */
        }
        for (j = i; j != NULL; j = j->next) {
            if (strcmp(j->fabric_attr->prov_name, name) == 0 && j->ep_attr->type == FI_EP_RDM) {
                rdm = 1;
                tagged |= (j->caps & FI_TAGGED) != 0;
            }
        }
        msg_add(&m, "%s%s (%s)", m.len ? ", " : "", name,
                !rdm      ? "lacks FI_EP_RDM"
                : !tagged ? "lacks FI_TAGGED on FI_EP_RDM"
                          : "needs a mode, mr_mode or threading net-ofi does not support");
    }
    netofi_fi.freeinfo(all);
    BR_WARN(NCCL_INIT | NCCL_NET,
            "net-ofi: no libfabric provider offers FI_EP_RDM endpoints with FI_TAGGED; "
            "offered: %s",
            m.buf);
}

/* Pick the best-ranked provider of list; NULL (logged) when every one is excluded. */
static const struct fi_info *choose_provider(const struct fi_info *list)
{
    const struct fi_info *best = NULL, *i, *j;
    int best_rank = INT_MAX;
    netofi_msg_t offered = {.len = 0}, excluded = {.len = 0};

    for (i = list; i != NULL; i = i->next) {
        const char *name = i->fabric_attr->prov_name;
        const char *why = NULL;
        int rank;

        for (j = list; j != i && strcmp(j->fabric_attr->prov_name, name) != 0; j = j->next) {
        }
        if (j == i) {
            msg_add(&offered, "%s%s", offered.len ? ", " : "", name);
        }
        rank = provider_rank(name, &why);
        if (rank >= 0 && tag_bits_of(i) < NETOFI_MIN_TAG_BITS) {
            rank = -1;
            why = "fewer than 40 tag bits in mem_tag_format";
        }
        if (rank < 0) {
            if (j == i) {
                msg_add(&excluded, "%s%s (%s)", excluded.len ? ", " : "", name, why);
            }
            continue;
        }
        if (rank < best_rank) {
            best_rank = rank;
            best = i;
        }
    }
    if (best == NULL) {
        const char *want = netofi_param_provider();
        BR_WARN(NCCL_INIT | NCCL_NET,
                "net-ofi: no usable libfabric provider%s%s; fi_getinfo offered: %s; "
                "excluded: %s",
                want ? " for NCCL_OFI_PROVIDER=" : "", want ? want : "", offered.buf,
                excluded.len ? excluded.buf : "none");
    } else if (excluded.len) {
        BR_INFO(NCCL_INIT | NCCL_NET, "net-ofi: offered %s; excluded %s", offered.buf,
                excluded.buf);
    }
    return best;
}

static char *pci_path_of(const struct fi_info *info)
{
    const struct fid_nic *nic = info->nic;
    char path[PATH_MAX];

    if (nic == NULL || nic->bus_attr == NULL || nic->bus_attr->bus_type != FI_BUS_PCI) {
        return NULL;
    }
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%04x:%02x:%02x.%x",
             nic->bus_attr->attr.pci.domain_id, nic->bus_attr->attr.pci.bus_id,
             nic->bus_attr->attr.pci.device_id, nic->bus_attr->attr.pci.function_id);
    return realpath(path, NULL);
}

/* Fill a device from its fi_info (taking ownership of info). */
static void dev_setup(netofi_dev_t *d, struct fi_info *info)
{
    uint64_t mr_mode = info->domain_attr->mr_mode;
    int64_t cap = netofi_param_max_msg_size();
    uint64_t chunks;

    d->info = info;
    d->name = info->domain_attr->name;
    d->pci_path = pci_path_of(info);
    /* 0 means the provider did not say; 1 GiB is what NCCL assumes for such plugins. */
    d->max_msg = info->ep_attr->max_msg_size ? info->ep_attr->max_msg_size : (size_t)1 << 30;
    if (cap > 0) {
        size_t c = cap < 4096 ? 4096 : (size_t)cap;
        d->max_msg = c < d->max_msg ? c : d->max_msg;
    }
    d->tag_bits = tag_bits_of(info);
    d->ctrl_bit = 1ULL << (d->tag_bits - 1);
    d->chunk_bits = d->tag_bits - 1 - NETOFI_ID_BITS - NETOFI_SEQ_BITS;
    /* A message takes floor(size / max_msg) + 1 chunks, numbered in chunk_bits. */
    chunks = d->chunk_bits >= 40 ? 1ULL << 40 : 1ULL << d->chunk_bits;
    d->max_bytes = d->max_msg > SIZE_MAX / (chunks - 1) ? SIZE_MAX : d->max_msg * (chunks - 1);
    d->speed_mbps = 10000;
    if (info->nic != NULL && info->nic->link_attr != NULL && info->nic->link_attr->speed > 0) {
        d->speed_mbps = (int)(info->nic->link_attr->speed / 1000000);
    }
    d->mr_local = (mr_mode & FI_MR_LOCAL) != 0 || netofi_param_mr_local() != 0;
    d->mr_endpoint = (mr_mode & FI_MR_ENDPOINT) != 0;
    d->mr_prov_key = (mr_mode & FI_MR_PROV_KEY) != 0;
}

static void log_devices(void)
{
    const netofi_dev_t *d0 = &netofi_devs[0];
    netofi_msg_t names = {.len = 0};
    char *mr = netofi_fi.tostr(&d0->info->domain_attr->mr_mode, FI_TYPE_MR_MODE);

    for (int i = 0; i < netofi_ndev; i++) {
        msg_add(&names, "%s%s", i ? " " : "", netofi_devs[i].name);
    }
    BR_INFO(NCCL_INIT | NCCL_NET,
            "net-ofi: provider %s, %d device(s): %s; mr_mode [%s]%s; host memory only "
            "(FI_HMEM not used)",
            netofi_prov, netofi_ndev, names.buf, mr && *mr ? mr : "none",
            d0->mr_local && !(d0->info->domain_attr->mr_mode & FI_MR_LOCAL)
                ? " (registration forced by NCCL_OFI_MR_LOCAL)"
                : "");
    for (int i = 0; i < netofi_ndev; i++) {
        const netofi_dev_t *d = &netofi_devs[i];
        BR_INFO(NCCL_INIT | NCCL_NET,
                "net-ofi: dev %d %s fabric %s: max_msg_size %zu, %d tag bits, %d Mbps, pci %s", i,
                d->name, d->info->fabric_attr->name, d->max_msg, d->tag_bits, d->speed_mbps,
                d->pci_path ? d->pci_path : "none");
    }
}

/* Keep the first entry per domain name of the chosen provider as a device. */
static ncclResult_t collect_devices(const struct fi_info *list, const char *prov)
{
    for (const struct fi_info *i = list; i != NULL; i = i->next) {
        const char *dom = i->domain_attr->name;
        struct fi_info *dup;
        int seen = 0;

        if (strcmp(i->fabric_attr->prov_name, prov) != 0 || dom == NULL) {
            continue;
        }
        for (int d = 0; d < netofi_ndev; d++) {
            seen |= strcmp(netofi_devs[d].name, dom) == 0;
        }
        if (seen) {
            continue;
        }
        if (netofi_ndev == NETOFI_MAX_DEVS) {
            BR_INFO(NCCL_INIT | NCCL_NET, "net-ofi: using only the first %d domains",
                    NETOFI_MAX_DEVS);
            break;
        }
        dup = netofi_fi.dupinfo(i);
        if (dup == NULL) {
            BR_WARN(NCCL_INIT | NCCL_NET, "net-ofi: fi_dupinfo failed (out of memory)");
            return ncclSystemError;
        }
        dev_setup(&netofi_devs[netofi_ndev++], dup);
    }
    return ncclSuccess;
}

static ncclResult_t find_devices(void)
{
    struct fi_info *hints = make_hints(), *list = NULL;
    const struct fi_info *best;
    ncclResult_t res = ncclSuccess;
    int rc;

    if (hints == NULL) {
        BR_WARN(NCCL_INIT | NCCL_NET, "net-ofi: fi_allocinfo failed (out of memory)");
        return ncclSystemError;
    }
    rc = netofi_fi.getinfo(netofi_fi.api_version, NULL, NULL, 0, hints, &list);
    netofi_fi.freeinfo(hints);
    if (rc == -FI_ENODATA) {
        diagnose_no_match();
        return ncclSystemError;
    }
    if (rc != 0) {
        BR_WARN(NCCL_INIT | NCCL_NET, "net-ofi: fi_getinfo failed: %s", netofi_fi.strerror(-rc));
        return ncclSystemError;
    }
    best = choose_provider(list);
    if (best == NULL) {
        res = ncclSystemError;
        goto out;
    }
    snprintf(netofi_prov, sizeof(netofi_prov), "%s", best->fabric_attr->prov_name);
    netofi_prov_hash_value = netofi_hash(netofi_prov, strlen(netofi_prov));
    res = collect_devices(list, netofi_prov);
    if (res == ncclSuccess) {
        log_devices();
    }
out:
    netofi_fi.freeinfo(list);
    return res;
}

ncclResult_t netofi_fabric_init(void)
{
    ncclResult_t res = ncclSuccess;

    if (__atomic_load_n(&netofi_ready, __ATOMIC_ACQUIRE)) {
        return ncclSuccess;
    }
    pthread_mutex_lock(&netofi_fabric_lock);
    if (!netofi_ready) {
        res = load_libfabric();
        if (res == ncclSuccess) {
            res = find_devices();
        }
        if (res != ncclSuccess) {
            /* Leave nothing half-built: a later init starts over. */
            for (int i = 0; i < netofi_ndev; i++) {
                netofi_fi.freeinfo(netofi_devs[i].info);
                free(netofi_devs[i].pci_path);
            }
            memset(netofi_devs, 0, sizeof(netofi_devs));
            netofi_ndev = 0;
        } else {
            /* Release: the device table is complete before anyone sees netofi_ready. */
            __atomic_store_n(&netofi_ready, 1, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&netofi_fabric_lock);
    return res;
}

int netofi_fabric_ndev(void)
{
    return __atomic_load_n(&netofi_ready, __ATOMIC_ACQUIRE) ? netofi_ndev : 0;
}

netofi_dev_t *netofi_fabric_dev(int dev)
{
    if (dev < 0 || dev >= netofi_fabric_ndev()) {
        BR_WARN(NCCL_NET, "net-ofi: device %d does not exist (%d devices)", dev,
                netofi_fabric_ndev());
        return NULL;
    }
    return &netofi_devs[dev];
}

const char *netofi_fabric_prov(void)
{
    return netofi_prov;
}

uint32_t netofi_fabric_prov_hash(void)
{
    return netofi_prov_hash_value;
}

ncclResult_t netofi_fabric_properties(int dev, ncclNetProperties_v12_t *props)
{
    const netofi_dev_t *d = netofi_fabric_dev(dev);
    size_t max = (size_t)NCCL_MAX_NET_SIZE_BYTES;

    if (d == NULL) {
        return ncclInternalError;
    }
    memset(props, 0, sizeof(*props));
    props->name = (char *)d->name;
    props->pciPath = d->pci_path;
    props->guid = ((uint64_t)netofi_hash(d->name, strlen(d->name)) << 32) | (uint32_t)dev;
    props->ptrSupport = NCCL_PTR_HOST;
    props->regIsGlobal = 0;
    props->forceFlush = 0;
    props->speed = d->speed_mbps;
    props->port = 0;
    props->latency = 0;
    props->maxComms = (1 << NETOFI_ID_BITS) - 1;
    props->maxRecvs = 1;
    props->netDeviceType = NCCL_NET_DEVICE_HOST;
    props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    props->vProps.ndevs = 1;
    props->vProps.devs[0] = dev;
    props->maxP2pBytes = d->max_msg < max ? d->max_msg : max;
    props->maxCollBytes = props->maxP2pBytes;
    props->maxMultiRequestSize = 1;
    props->railId = NCCL_NET_ID_UNDEF;
    props->planeId = NCCL_NET_ID_UNDEF;
    return ncclSuccess;
}
