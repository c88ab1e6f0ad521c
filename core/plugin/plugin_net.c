/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Net plugin loading: the candidate libraries (NCCL_NET_PLUGIN's entries, else
 * libnccl-net.so, then Braid's own socket plugin unless the user named a plugin), the
 * newest-first symbol probe over a {version, symbol, adapter} table, the NCCL_NET name
 * match, init, and the devices in use (every device the plugin reports that Braid can
 * drive and NCCL_IB_HCA selects). A request the user made
 * (a plugin or a network) never falls back silently: it fails with one WARN that lists
 * every candidate tried and why it was rejected.
 *
 * Threading: opens and closes are serialized by net_lock (held across plugin init, as
 * NCCL holds its own net lock); the library table has its own lock.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "br_tls.h"
#include "check.h"
#include "param.h"
#include "plugin_int.h"
#include "util.h"
#include "util_socket.h"

typedef struct {
    int version;
    const char *symbol;
    const br_net_adapter_t *adapter;
} net_probe_t;

/* Probe order: newest first; the first symbol found wins. */
static const net_probe_t net_probes[] = {
    {12, "ncclNetPlugin_v12", &br_net_adapter_v12}, {11, "ncclNetPlugin_v11", &br_net_adapter_v11},
    {10, "ncclNetPlugin_v10", &br_net_adapter_v10}, {9, "ncclNetPlugin_v9", &br_net_adapter_v9},
    {8, "ncclNetPlugin_v8", &br_net_adapter_v8},
};
#define NET_NPROBES (sizeof(net_probes) / sizeof(net_probes[0]))

/* Versions NCCL still loads but Braid does not: named in the rejection reason. */
static const char *const net_too_old[] = {"ncclNetPlugin_v7", "ncclNetPlugin_v6",
                                          "ncclNetPlugin_v5", "ncclNetPlugin_v4"};

static pthread_mutex_t net_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- Helpers shared by the adapters ---- */

/* A NetPlugin event handed to the net plugin as its eHandle: stop and update calls carry
 * only that, so it remembers its profiler. */
typedef struct {
    br_profiler_t *prof;
    void *handle;
} net_prof_event_t;

static ncclResult_t net_prof_start(void **eHandle, void *pHandle, int64_t pluginId, void *extData)
{
    br_net_phandle_t *ph = pHandle;
    ncclProfilerEventDescr_v6_t d;
    net_prof_event_t *ev;
    void *h = NULL;

    *eHandle = NULL;
    if (ph == NULL || ph->prof == NULL || ph->step == NULL ||
        (br_plugin_profiler_mask() & ncclProfileNetPlugin) == 0) {
        return ncclSuccess; /* not recorded: the plugin gets a NULL handle */
    }
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileNetPlugin;
    d.parentObj = ph->step;
    d.rank = ph->rank;
    d.netPlugin.id = pluginId;
    d.netPlugin.data = extData;
    ev = malloc(sizeof(*ev));
    if (ev == NULL) {
        return ncclSuccess; /* profiling is best effort */
    }
    if (br_plugin_profiler_start_event(ph->prof, &d, &h) != ncclSuccess || h == NULL) {
        free(ev);
        return ncclSuccess;
    }
    ev->prof = ph->prof;
    ev->handle = h;
    *eHandle = ev;
    return ncclSuccess;
}

ncclResult_t br_net_prof_callback(void **eHandle, int type, void *pHandle, int64_t pluginId,
                                  void *extData)
{
    net_prof_event_t *ev;
    ncclProfilerEventStateArgs_v6_t args;

    if (eHandle == NULL) {
        return ncclSuccess;
    }
    if (type == ncclProfilerNetEventStart) {
        return net_prof_start(eHandle, pHandle, pluginId, extData);
    }
    ev = *eHandle;
    if (ev == NULL) {
        return ncclSuccess; /* an event that was not recorded */
    }
    if (type == ncclProfilerNetEventUpdate || type == ncclProfilerNetEventUpdateAndStop) {
        memset(&args, 0, sizeof(args));
        args.netPlugin.data = extData;
        (void)br_plugin_profiler_record_event_state(ev->prof, ev->handle,
                                                    ncclProfilerNetPluginUpdate, &args);
    }
    if (type == ncclProfilerNetEventStop || type == ncclProfilerNetEventUpdateAndStop) {
        (void)br_plugin_profiler_stop_event(ev->prof, ev->handle);
        free(ev);
        *eHandle = NULL;
    }
    return ncclSuccess;
}

ncclResult_t br_net_shared_init(br_net_state_t *st, ncclResult_t (*call)(const void *exported))
{
    ncclResult_t res = ncclSuccess;

    /* Plugins up to v10 have one process-wide init: run it while no comm holds the
     * library, later comms only count (NCCL's refcount emulation). */
    br_plugin_lib_lock();
    if (st->lib->net_init_refs == 0) {
        res = call(st->exported);
    }
    if (res == ncclSuccess) {
        st->lib->net_init_refs++;
    }
    br_plugin_lib_unlock();
    return res;
}

void br_net_shared_fini(br_net_state_t *st)
{
    br_plugin_lib_lock();
    st->lib->net_init_refs--;
    br_plugin_lib_unlock();
}

void br_net_props_defaults(ncclNetProperties_v12_t *props, int dev)
{
    memset(props, 0, sizeof(*props));
    props->netDeviceType = NCCL_NET_DEVICE_HOST;
    props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    props->vProps.ndevs = 1;
    props->vProps.devs[0] = dev;
    props->maxP2pBytes = (size_t)1 << 30;  /* MAX_NET_SIZE */
    props->maxCollBytes = (size_t)1 << 29; /* MAX_COLLNET_SIZE */
    props->maxMultiRequestSize = 1;
    props->railId = NCCL_NET_ID_UNDEF;
    props->planeId = NCCL_NET_ID_UNDEF;
}

const char *br_net_first_missing(const br_net_member_t *members)
{
    for (const br_net_member_t *m = members; m->name != NULL; m++) {
        if (m->present == NULL) {
            return m->name;
        }
    }
    return NULL;
}

/* ---- Opening one library ---- */

/* What a walk over the candidates knows. */
typedef struct {
    const br_net_request_t *req;
    br_plugin_report_t rep;
    int strict; /* the user named a plugin or a network: no silent fallback */
} net_walk_t;

/* Log a rejected candidate: INFO when the user's request makes the final error speak
 * for it (or when it is merely absent), WARN when a fallback follows a real failure. */
static void net_log_skip(const net_walk_t *w, int failure, const char *what, const char *why)
{
    if (failure && !w->strict) {
        BR_WARN(NCCL_INIT | NCCL_NET, "NET/Plugin: %s: %s; trying the next candidate", what, why);
    } else {
        BR_INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: skipping %s: %s", what, why);
    }
}

/* Record a rejected candidate in the report and log it. */
static void net_skip(net_walk_t *w, int failure, const char *what, const char *why)
{
    br_plugin_report_add(&w->rep, what, "%s", why);
    net_log_skip(w, failure, what, why);
}

/* Names that did not load: their "name (reason)" entries join the report as they are. */
static void net_skip_unloaded(net_walk_t *w, int failure, const char *what,
                              const br_plugin_report_t *tried)
{
    size_t room = sizeof(w->rep.text) - w->rep.len;
    int n =
        snprintf(w->rep.text + w->rep.len, room, "%s%s", w->rep.count > 0 ? ", " : "", tried->text);
    w->rep.len += n > 0 && (size_t)n < room ? (size_t)n : room - 1;
    w->rep.count += tried->count;
    net_log_skip(w, failure, what, tried->text);
}

/* The newest supported symbol in lib, or NULL with the reason in why. */
static const net_probe_t *net_probe(br_plugin_lib_t *lib, const void **sym_p, char *why,
                                    size_t why_len)
{
    for (size_t i = 0; i < NET_NPROBES; i++) {
        void *sym = br_plugin_lib_sym(lib, net_probes[i].symbol);
        if (sym != NULL) {
            *sym_p = sym;
            return &net_probes[i];
        }
    }
    for (size_t i = 0; i < sizeof(net_too_old) / sizeof(net_too_old[0]); i++) {
        if (br_plugin_lib_sym(lib, net_too_old[i]) != NULL) {
            snprintf(why, why_len, "exports only %s; Braid loads ncclNetPlugin_v8 to _v12",
                     net_too_old[i]);
            return NULL;
        }
    }
    snprintf(why, why_len, "no ncclNetPlugin_v12 .. _v8 symbol");
    return NULL;
}

/* Does a device match an NCCL_IB_HCA-style list? NCCL's syntax: comma-separated entries
 * `name` or `name:port`; a leading `^` excludes what matches instead, a leading `=` (after
 * `^` if both) makes names match exactly instead of by prefix; an entry without a port
 * matches every port. */
static int dev_matches(const char *list, const char *name, int port)
{
    int exclude = 0, exact = 0, found = 0;
    const char *p = list;

    if (*p == '^') {
        exclude = 1;
        p++;
    }
    if (*p == '=') {
        exact = 1;
        p++;
    }
    while (*p != '\0' && !found) {
        size_t n = strcspn(p, ",");
        size_t nlen = strcspn(p, ":,");
        int want_port = -1;
        if (nlen < n) {
            want_port = atoi(p + nlen + 1);
        }
        if (nlen > 0) {
            int name_ok = exact ? strlen(name) == nlen && strncmp(name, p, nlen) == 0
                                : strncmp(name, p, nlen) == 0;
            found = name_ok && (want_port < 0 || want_port == port);
        }
        p += n;
        if (*p == ',') {
            p++;
        }
    }
    return exclude ? !found : found;
}

/* Why device d (with props) cannot be used, or NULL when it can. */
static const char *dev_unusable(const ncclNetProperties_v12_t *props, const char *filter, char *why,
                                size_t why_len)
{
    const char *name = props->name != NULL ? props->name : "";
    if (props->netDeviceType != NCCL_NET_DEVICE_HOST) {
        snprintf(why, why_len, "needs device-side code (netDeviceType %d)",
                 (int)props->netDeviceType);
        return why;
    }
    if (props->maxP2pBytes == 0 || props->maxP2pBytes > NCCL_MAX_NET_SIZE_BYTES) {
        snprintf(why, why_len, "reports maxP2pBytes %zu, outside (0, 2^40]", props->maxP2pBytes);
        return why;
    }
    if (filter != NULL && !dev_matches(filter, name, props->port)) {
        snprintf(why, why_len, "not selected by NCCL_IB_HCA=%s", filter);
        return why;
    }
    return NULL;
}

/* Every device the plugin reports, checked for what Braid can drive and filtered by
 * NCCL_IB_HCA; those left are the communicator's devices. */
static ncclResult_t net_pick_device(br_net_t *net, char *why, size_t why_len)
{
    const char *filter = BR_PARAM_STR(IB_HCA);
    size_t len = 0;
    ncclResult_t res;

    res = net->ops->devices(net, &net->ndev);
    if (res != ncclSuccess) {
        snprintf(why, why_len, "devices() failed: %s", br_plugin_result_str(res));
        return ncclSystemError;
    }
    if (net->ndev <= 0) {
        snprintf(why, why_len, "reports %d devices", net->ndev);
        return ncclSystemError;
    }
    net->nused = 0;
    why[0] = '\0';
    for (int d = 0; d < net->ndev && net->nused < BR_NET_MAX_DEVS; d++) {
        ncclNetProperties_v12_t props;
        char reason[160];
        const char *bad = reason;
        res = net->ops->get_properties(net, d, &props);
        if (res != ncclSuccess) {
            snprintf(reason, sizeof(reason), "getProperties failed: %s", br_plugin_result_str(res));
        } else {
            bad = dev_unusable(&props, filter, reason, sizeof(reason));
        }
        const char *name = res == ncclSuccess && props.name != NULL ? props.name : "?";
        if (bad != NULL) {
            BR_INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: %s device %d (%s) not used: %s", net->name,
                    d, name, bad);
            int n = snprintf(why + len, why_len - len, "%sdevice %d (%s) %s", len ? "; " : "", d,
                             name, bad);
            len += n > 0 && (size_t)n < why_len - len ? (size_t)n : 0;
            continue;
        }
        if (net->nused == 0) {
            net->dev = d;
            net->props = props;
        }
        net->used[net->nused] = d;
        snprintf(net->used_name[net->nused], sizeof(net->used_name[0]), "%s", name);
        net->nused++;
        BR_INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: %s device %d (%s, port %d, %d Mbps) in use",
                net->name, d, name, props.port, props.speed);
    }
    if (net->nused == 0) {
        return ncclSystemError; /* why lists every device and its reason */
    }
    if (net->ndev > BR_NET_MAX_DEVS) {
        BR_INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: %s reports %d devices; the first %d are used",
                net->name, net->ndev, BR_NET_MAX_DEVS);
    }
    return ncclSuccess;
}

/* Try one opened library. On success *net_p holds it (and the library reference). */
/* A plugin that encrypts its own sockets (Braid's socket plugin exports
 * braidNetTlsConfigure) takes the process's TLS configuration (ncclSetEncryption), off
 * included, before its init; others open no TCP connection of Braid's own. */
static ncclResult_t net_tls_pass(br_plugin_lib_t *lib, char *why, size_t len)
{
    const br_socket_tls_t *tls = br_socket_tls();
    br_tls_plugin_fn_t fn = (br_tls_plugin_fn_t)br_plugin_lib_sym(lib, BR_TLS_PLUGIN_SYMBOL);
    br_tls_config_t cfg;

    if (fn == NULL) {
        return ncclSuccess;
    }
    memset(&cfg, 0, sizeof(cfg)); /* BR_TLS_OFF */
    if (tls != NULL && tls->config(&cfg, sizeof(cfg)) != 0) {
        snprintf(why, len, "internal error: no TLS configuration to hand over");
        return ncclInternalError;
    }
    int ret = fn(&cfg, sizeof(cfg), why, len);
    memset(&cfg, 0, sizeof(cfg));
    return ret == 0 ? ncclSuccess : ncclInvalidUsage;
}

static ncclResult_t net_try_lib(net_walk_t *w, br_plugin_lib_t *lib, br_net_t **net_p)
{
    const br_net_request_t *req = w->req;
    const net_probe_t *probe;
    const void *sym = NULL;
    br_net_state_t *st = NULL;
    br_net_t *net = NULL;
    const char *name;
    char why[320];
    ncclResult_t res;

    probe = net_probe(lib, &sym, why, sizeof(why));
    if (probe == NULL) {
        net_skip(w, 1, lib->path, why);
        return ncclSystemError;
    }
    /* The name is slot 0 of every version; the other members are read after init. */
    name = *(const char *const *)sym;
    if (name == NULL) {
        name = "";
    }
    if (req->net_name != NULL && strcasecmp(name, req->net_name) != 0) {
        snprintf(why, sizeof(why), "network \"%s\" is not the requested \"%s\"", name,
                 req->net_name);
        net_skip(w, 0, lib->path, why);
        return ncclSystemError;
    }
    if (br_calloc(&net, 1, "net plugin") != ncclSuccess ||
        br_calloc(&st, 1, "net plugin state") != ncclSuccess) {
        free(net);
        return ncclSystemError;
    }
    st->lib = lib;
    st->exported = sym;
    st->ops = *probe->adapter->ops;
    net->priv = st;
    net->ops = &st->ops;
    net->version = probe->version;
    snprintf(net->name, sizeof(net->name), "%s", name);
    snprintf(net->path, sizeof(net->path), "%.255s", lib->path);

    if (net_tls_pass(lib, why, sizeof(why)) != ncclSuccess) {
        net_skip(w, 1, lib->path, why);
        goto err_free;
    }
    char before[2048], reason[200]; /* the plugin's own reason, should init fail */
    snprintf(before, sizeof(before), "%s", br_log_last_error());
    res = probe->adapter->init(net, st, req, why, sizeof(why));
    if (res != ncclSuccess) {
        br_plugin_init_reason(before, reason, sizeof(reason));
        size_t len = strlen(why);
        snprintf(why + len, sizeof(why) - len, "%s", reason);
        net_skip(w, 1, lib->path, why);
        goto err_free;
    }
    st->inited = 1;
    if (!probe->adapter->has_irecv_consumed(st)) {
        st->ops.irecv_consumed = NULL;
    }
    res = net_pick_device(net, why, sizeof(why));
    if (res != ncclSuccess) {
        net_skip(w, 1, lib->path, why);
        goto err_fini;
    }
    BR_INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: loaded %s symbol %s (v%d), network %s, %d devices",
            lib->path, probe->symbol, probe->version, net->name, net->ndev);
    *net_p = net;
    return ncclSuccess;

err_fini:
    (void)probe->adapter->fini(net, st);
err_free:
    free(st);
    free(net);
    return ncclSystemError;
}

/* Resolve, open and try one selector entry (NULL or "": the default libnccl-net.so). */
static ncclResult_t net_try_entry(net_walk_t *w, const char *value, int pin, br_net_t **net_p)
{
    br_plugin_report_t tried = {.len = 0, .count = 0};
    br_plugin_lib_t *lib = NULL;
    int not_found = 0;

    if (br_plugin_lib_resolve("libnccl-net", value, pin, &tried, &lib, &not_found) != ncclSuccess) {
        /* Absent default library: normal (INFO), as in NCCL. */
        net_skip_unloaded(w, !not_found, value != NULL && value[0] ? value : "libnccl-net.so",
                          &tried);
        return ncclSystemError;
    }
    if (net_try_lib(w, lib, net_p) != ncclSuccess) {
        br_plugin_lib_close(lib);
        return ncclSystemError;
    }
    return ncclSuccess;
}

/* Braid's own socket plugin, the internal fallback. */
static ncclResult_t net_try_internal(net_walk_t *w, br_net_t **net_p)
{
    char path[600];
    br_plugin_report_t tried = {.len = 0, .count = 0};
    br_plugin_lib_t *lib = NULL;
    int not_found = 0;

    snprintf(path, sizeof(path), "%s/libnccl-net-socket.so", br_plugin_dir());
    /* Pinned: like NCCL's internal plugins it stays loaded, so communicators created one
     * after another do not reload it each time. */
    if (br_plugin_lib_resolve("libnccl-net", path, 1, &tried, &lib, &not_found) != ncclSuccess) {
        net_skip_unloaded(w, 1, "internal socket plugin", &tried);
        return ncclSystemError;
    }
    if (net_try_lib(w, lib, net_p) != ncclSuccess) {
        br_plugin_lib_close(lib);
        return ncclSystemError;
    }
    return ncclSuccess;
}

/* Walk NCCL_NET_PLUGIN's comma-separated entries (at most 14, as NCCL). */
static ncclResult_t net_try_list(net_walk_t *w, const char *list, int pin, br_net_t **net_p)
{
    char buf[1024];
    char *save = NULL;
    int n = 0;

    snprintf(buf, sizeof(buf), "%s", list);
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL && n < 14;
         tok = strtok_r(NULL, ",", &save), n++) {
        while (*tok == ' ') {
            tok++;
        }
        if (*tok == '\0') {
            continue;
        }
        if (net_try_entry(w, tok, pin, net_p) == ncclSuccess) {
            return ncclSuccess;
        }
    }
    return ncclSystemError;
}

ncclResult_t br_plugin_net_open(const br_net_request_t *req, br_net_t **net_p)
{
    const char *plugin = req->plugin;
    int named = plugin != NULL && plugin[0] != '\0' && strcasecmp(plugin, "none") != 0;
    int none = plugin != NULL && strcasecmp(plugin, "none") == 0;
    int pin = BR_PARAM_INT(NET_PLUGIN_REF_COUNT) > 0;
    net_walk_t w;
    ncclResult_t res = ncclSystemError;

    memset(&w, 0, sizeof(w));
    w.req = req;
    w.strict = named || (req->net_name != NULL && req->net_name[0] != '\0');
    pthread_mutex_lock(&net_lock);
    if (named) {
        res = net_try_list(&w, plugin, pin, net_p);
    } else {
        if (!none) {
            res = net_try_entry(&w, NULL, pin, net_p);
        }
        if (res != ncclSuccess) {
            res = net_try_internal(&w, net_p);
        }
    }
    pthread_mutex_unlock(&net_lock);
    if (res == ncclSuccess) {
        return ncclSuccess;
    }
    if (named && req->net_name != NULL) {
        BR_WARN(NCCL_INIT | NCCL_NET,
                "NCCL_NET_PLUGIN=%s with network %s: tried %s; no fallback because the plugin "
                "was named",
                plugin, req->net_name, w.rep.text);
    } else if (named) {
        BR_WARN(NCCL_INIT | NCCL_NET,
                "NCCL_NET_PLUGIN=%s: tried %s; no fallback because the plugin was named", plugin,
                w.rep.text);
    } else if (w.strict) {
        BR_WARN(NCCL_INIT | NCCL_NET,
                "network %s (NCCL_NET or ncclConfig_t.netName): tried %s; no fallback because "
                "the network was named",
                req->net_name, w.rep.text);
    } else {
        BR_WARN(NCCL_INIT | NCCL_NET, "no usable net plugin%s: tried %s",
                none ? " (NCCL_NET_PLUGIN=none)" : "", w.rep.text);
    }
    return ncclInvalidUsage;
}

ncclResult_t br_plugin_net_open_internal(const br_net_request_t *req, br_net_t **net_p)
{
    net_walk_t w;
    ncclResult_t res;

    memset(&w, 0, sizeof(w));
    w.req = req;
    w.strict = 1; /* asked for by name: say why it cannot be used */
    pthread_mutex_lock(&net_lock);
    res = net_try_internal(&w, net_p);
    pthread_mutex_unlock(&net_lock);
    if (res != ncclSuccess) {
        BR_WARN(NCCL_NET, "Braid's socket plugin cannot be used: tried %s", w.rep.text);
        return ncclSystemError;
    }
    return ncclSuccess;
}

void br_plugin_net_close(br_net_t *net)
{
    br_net_state_t *st;
    ncclResult_t res = ncclSuccess;

    if (net == NULL) {
        return;
    }
    st = br_net_state(net);
    pthread_mutex_lock(&net_lock);
    if (st->inited) {
        for (size_t i = 0; i < NET_NPROBES; i++) {
            if (net_probes[i].version == net->version) {
                BR_CLEANUP(net_probes[i].adapter->fini(net, st), res);
                break;
            }
        }
    }
    br_plugin_lib_close(st->lib);
    pthread_mutex_unlock(&net_lock);
    free(st);
    free(net);
}
