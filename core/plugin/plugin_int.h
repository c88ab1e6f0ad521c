/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin module internals: the process-wide table of loaded libraries, name resolution
 * shared by every plugin kind, the "what was tried" report behind the loaders' error
 * messages, and the net adapter interface that plugin_net_vN.c implement.
 */
#ifndef BR_PLUGIN_INT_H_
#define BR_PLUGIN_INT_H_

#include <stdarg.h>
#include <stddef.h>

#include "plugin.h"
#include "plugin_api/collnet/collnet.h"

/* ---- Loaded libraries ---- */

/* One dlopen'd library. Entries are shared by every load of the same file (keyed by the
 * dlopen handle) and refcounted; `net_init_refs` emulates the process-wide init of net
 * plugins up to v10. All fields but `dl` and `path` are guarded by br_plugin_lib_lock. */
typedef struct br_plugin_lib {
    void *dl;          /* dlopen handle (the main program for STATIC_PLUGIN) */
    char path[512];    /* resolved path, for logs */
    int refs;          /* references held by loaders */
    int pinned;        /* never dlclose (NCCL_NET_PLUGIN_REF_COUNT) */
    int net_init_refs; /* comms holding an emulated (<= v10) net init */
    int collnet_init_refs; /* the same for the library's collnet table */
    struct br_plugin_lib *next;
} br_plugin_lib_t;

/* What a loader tried, in order, and why each candidate was rejected. */
typedef struct {
    char text[1400];
    size_t len;
    int count;
} br_plugin_report_t;

/* A plugin's own reason for a failed init: what it logged at WARN during the call, found
 * as this thread's last error when that differs from `before` (the text saved just
 * before the call). Writes ": <reason>" into out, or "" when the plugin said nothing. */
void br_plugin_init_reason(const char *before, char *out, size_t len);

/* Append "what (why...)" to the report. */
void br_plugin_report_add(br_plugin_report_t *rep, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* dlopen(name, RTLD_NOW | RTLD_LOCAL) (name NULL: the main program) and take a reference
 * in the table. On failure *not_found_p tells "no such file" from a library that exists
 * but failed to load, and why gets dlerror's text. */
ncclResult_t br_plugin_lib_open(const char *name, int pin, br_plugin_lib_t **lib_p,
                                int *not_found_p, char *why, size_t why_len);
/* Another reference on an open library. */
void br_plugin_lib_ref(br_plugin_lib_t *lib);
/* Drop a reference; the last one unloads the library unless it is pinned. */
void br_plugin_lib_close(br_plugin_lib_t *lib);
/* dlsym in the library. */
void *br_plugin_lib_sym(br_plugin_lib_t *lib, const char *symbol);
/* Guards the mutable fields of every br_plugin_lib_t. */
void br_plugin_lib_lock(void);
void br_plugin_lib_unlock(void);

/*
 * Resolve a selector value (NCCL_NET_PLUGIN, NCCL_TUNER_PLUGIN, ...) into a library per
 * plugin-abi.md 5.2, for the plugin kind `prefix` ("libnccl-net", "libnccl-tuner", ...):
 * value empty or NULL: "<prefix>.so"; otherwise the value verbatim, then, for a bare
 * name that is not "lib*.so", "<prefix>-<value>.so", then (Braid's addition, for a bare
 * value) the same two names in br_plugin_dir(). "STATIC_PLUGIN" opens the main program.
 * The first name that loads wins; each failed attempt is added to rep. *not_found_p is
 * 1 when no file of any tried name existed (as opposed to one that failed to load).
 */
ncclResult_t br_plugin_lib_resolve(const char *prefix, const char *value, int pin,
                                   br_plugin_report_t *rep, br_plugin_lib_t **lib_p,
                                   int *not_found_p);

/* A plugin kind searched like the tuner and profiler (plugin-abi.md 5.3). */
typedef struct {
    const char *tag;            /* log prefix, e.g. "TUNER/Plugin" */
    const char *env;            /* selector variable, e.g. "NCCL_TUNER_PLUGIN" */
    const char *prefix;         /* library prefix, e.g. "libnccl-tuner" */
    unsigned long subsys;       /* log subsystems */
    const char *const *symbols; /* symbols, newest first */
    int nsymbols;
} br_plugin_kind_t;

/*
 * Find the library of a plugin kind: the one `value` names (else "<prefix>.so"), then,
 * unless a plugin was named, `net_lib` (the net plugin's library, may be NULL). The first
 * library exporting one of kind->symbols wins: *lib_p holds a reference and *which_p
 * the symbol's index. Nothing found is success with *lib_p = NULL (INFO); "none" too. A
 * named plugin that cannot be loaded or exports no symbol is ncclInvalidUsage, with one
 * WARN listing what was tried.
 */
ncclResult_t br_plugin_find(const br_plugin_kind_t *kind, const char *value,
                            br_plugin_lib_t *net_lib, br_plugin_lib_t **lib_p, int *which_p);


/* ---- Net adapters ---- */

/* Loader and adapter state of one br_net_t (net->priv). */
typedef struct {
    br_plugin_lib_t *lib;
    const void *exported; /* the plugin's ncclNet_vN_t, as exported */
    void *ctx;            /* v11+: the plugin's per-comm context */
    int inited;           /* init succeeded; fini owes a finalize / refcount drop */
    union {
        ncclNetCommConfig_v12_t v12;
        ncclNetCommConfig_v11_t v11;
        ncclNetCommConfig_v10_t v10;
    } config; /* lives as long as the comm: plugins may keep the pointer */
    union {
        ncclNet_v12_t v12;
        ncclNet_v11_t v11;
        ncclNet_v10_t v10;
        ncclNet_v9_t v9;
        ncclNet_v8_t v8;
    } fn;             /* the plugin's table, copied after its init succeeded */
    br_net_ops_t ops; /* this load's ops: the adapter's, minus absent optionals */
} br_net_state_t;

/* One adapter per ABI version (plugin_net_vN.c). */
typedef struct {
    /* Template ops; the loader copies them into the state and clears optional members
     * the plugin lacks. */
    const br_net_ops_t *ops;
    /* Initialize the plugin for this comm (per comm for v11+, emulated for <= v10), copy
     * its table into st->fn and check its required members. On failure writes the reason
     * into why and leaves nothing to undo. */
    ncclResult_t (*init)(br_net_t *net, br_net_state_t *st, const br_net_request_t *req, char *why,
                         size_t why_len);
    /* Undo init. */
    ncclResult_t (*fini)(br_net_t *net, br_net_state_t *st);
    /* Whether the plugin provides the optional irecvConsumed. */
    int (*has_irecv_consumed)(const br_net_state_t *st);
} br_net_adapter_t;

extern const br_net_adapter_t br_net_adapter_v12;
extern const br_net_adapter_t br_net_adapter_v11;
extern const br_net_adapter_t br_net_adapter_v10;
extern const br_net_adapter_t br_net_adapter_v9;
extern const br_net_adapter_t br_net_adapter_v8;

static inline br_net_state_t *br_net_state(br_net_t *net)
{
    return (br_net_state_t *)net->priv;
}

/* The profiler callback handed to net plugins (v10+): turns their events into NetPlugin
 * events under the proxy step named by the br_net_phandle_t they were given. */
ncclResult_t br_net_prof_callback(void **eHandle, int type, void *pHandle, int64_t pluginId,
                                  void *extData);

/* The emulated process-wide init of <= v10 plugins: `call` runs only when no comm holds
 * the library's init; otherwise this only counts. */
ncclResult_t br_net_shared_init(br_net_state_t *st, ncclResult_t (*call)(const void *exported));
/* Drop one count of the emulated init (the plugin has no finalize to call). */
void br_net_shared_fini(br_net_state_t *st);

/* Set the v12 fields an older plugin does not report to NCCL's defaults (plugin-abi.md
 * 1.8): vProps {1, {dev}}, maxP2pBytes 1 GiB, maxCollBytes 512 MiB, forceFlush 0,
 * regIsGlobal 0, maxMultiRequestSize 1, railId = planeId = -1, host device. */
void br_net_props_defaults(ncclNetProperties_v12_t *props, int dev);

/* An older version's properties in the v12 layout, the fields it lacks defaulted (the net
 * adapters' conversions, shared with the collnet adapters, whose tables use the net
 * properties of their version). */
void br_net_props_v11(const ncclNetProperties_v11_t *p, int dev, ncclNetProperties_v12_t *props);
void br_net_props_v10(const ncclNetProperties_v10_t *p, int dev, ncclNetProperties_v12_t *props);
void br_net_props_v9(const ncclNetProperties_v9_t *p, int dev, ncclNetProperties_v12_t *props);
void br_net_props_v8(const ncclNetProperties_v8_t *p, int dev, ncclNetProperties_v12_t *props);

/* Name of the first NULL member among the required ones, or NULL. The members are given
 * as {name, pointer} pairs ending with a NULL name. */
typedef struct {
    const char *name;
    const void *present; /* non-NULL when the member is set */
} br_net_member_t;
const char *br_net_first_missing(const br_net_member_t *members);

#define BR_NET_MEMBER(t, m)                                                                        \
    {                                                                                              \
#m, (t)->m != NULL ? (const void *)(t) : NULL                                              \
    }

/* ---- CollNet adapters ---- */

/* Loader and adapter state of one br_collnet_t (cn->priv). */
typedef struct {
    br_plugin_lib_t *lib; /* a reference of its own on the net plugin's library */
    const void *exported; /* the plugin's ncclCollNet_vN_t, as exported */
    void *ctx;            /* v11+: the plugin's per-comm context */
    union {
        ncclCollNet_v12_t v12;
        ncclCollNet_v11_t v11;
        ncclCollNet_v10_t v10;
        ncclCollNet_v9_t v9;
        ncclCollNet_v8_t v8;
    } fn; /* the plugin's table, copied after its init succeeded */
} br_collnet_state_t;

/* One adapter per collnet ABI version (plugin_collnet_vN.c). */
typedef struct {
    const br_collnet_ops_t *ops;
    /* Init the table for this comm (per comm for v11+, emulated for <= v10), copy it into
     * st->fn and check its required members; on failure the reason goes to why, *lied_p
     * says whether it is the plugin's fault (a NULL member) rather than a refusal (init
     * failed), and nothing is left to undo. */
    ncclResult_t (*init)(br_collnet_t *cn, br_collnet_state_t *st, uint64_t comm_hash, char *why,
                         size_t why_len, int *lied_p);
    ncclResult_t (*fini)(br_collnet_t *cn, br_collnet_state_t *st);
    ncclResult_t (*devices)(br_collnet_t *cn, int *ndev);
} br_collnet_adapter_t;

extern const br_collnet_adapter_t br_collnet_adapter_v12;
extern const br_collnet_adapter_t br_collnet_adapter_v11;
extern const br_collnet_adapter_t br_collnet_adapter_v10;
extern const br_collnet_adapter_t br_collnet_adapter_v9;
extern const br_collnet_adapter_t br_collnet_adapter_v8;

static inline br_collnet_state_t *br_collnet_state(br_collnet_t *cn)
{
    return (br_collnet_state_t *)cn->priv;
}

/* The emulated process-wide collnet init of <= v10 plugins (as br_net_shared_init). */
ncclResult_t br_collnet_shared_init(br_collnet_state_t *st,
                                    ncclResult_t (*call)(const void *exported));
void br_collnet_shared_fini(br_collnet_state_t *st);

/* A v8 plugin's iallreduce count is an int: the count, range-checked (WARN naming the
 * plugin and the count; ncclInternalError when it does not fit). */
ncclResult_t br_collnet_narrow_count(const br_collnet_t *cn, size_t count, int *out);

/* Before an iallgather / ireducescatter: the member is there (else WARN, naming the plugin,
 * and ncclInternalError), the part count is in [1, BR_COLLNET_MAX_PARTS], and for a v8
 * plugin (narrow_sizes) every part's size fits its 32-bit SGE size. */
ncclResult_t br_collnet_check_parts(const br_collnet_t *cn, const char *call, int present,
                                    int nparts, const br_collnet_part_t *parts, int narrow_sizes);

#define BR_NET_MAX_RECVS 64 /* most buffers of one grouped irecv an adapter narrows */
#define BR_NET_V8_MAX_SIZE ((size_t)1 << 30)

#endif /* BR_PLUGIN_INT_H_ */
