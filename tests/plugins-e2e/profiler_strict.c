/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A profiler v6 plugin that checks what the core hands it against NCCL's event tree:
 *   GroupApi                     parent NULL
 *   CollApi / P2pApi / KernelLaunch  parent a GroupApi handle that has not stopped
 *   Group (legacy)               parent NULL (as NCCL, issue 36)
 *   Coll                         parent a CollApi handle of the same function; parentGroup
 *                                a Group handle that has not stopped when the mask has Group
 *   P2p                          parent a P2pApi handle of the same function; ditto
 *   ProxyOp                      parent a Coll or P2p handle
 *   KernelCh                     parent a Coll or P2p handle
 *   ProxyStep                    parent a ProxyOp handle
 *   NetPlugin                    parent a ProxyStep handle
 *   ProxyCtrl                    parent NULL
 * and that an event is emitted only when its bit or a descendant's is in the mask
 * (BRAID_TEST_PROF_MASK, decimal or 0x hex), that every stop and state names a handle it
 * issued and not yet stopped, and that every event stopped before finalize. Every
 * violation is printed to stderr as "profcheck: FAIL ..."; finalize appends one line per
 * communicator, "profcheck rank R: N events (per type ...), F failures", to the file
 * BRAID_TEST_PROF_OUT. Handles stay valid until finalize (a stopped API event is still a
 * parent, as in NCCL).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin_api/profiler/profiler_v6.h"

#define NTYPES 15
#define MAGIC 0x70726f66636b6576ULL

typedef struct ctx ctx_t;

typedef struct ev {
    uint64_t magic;
    ctx_t *ctx;
    uint64_t type;
    struct ev *parent;
    char func[32];
    int stopped;
    int nsteps;   /* ProxyOp: the steps it announced */
    int children; /* ProxyOp: ProxyStep events under it, and of those still open */
    int open_children;
    struct ev *next; /* every event of the context */
} ev_t;

struct ctx {
    int rank;
    pthread_mutex_t lock;
    ev_t *events;
    long count[NTYPES];
    long failures;
};

static int mask_env = -1;

static int type_index(uint64_t t)
{
    for (int i = 0; i < NTYPES; i++) {
        if (t == (uint64_t)1 << i) {
            return i;
        }
    }
    return -1;
}

/* Bits of an event type and of every type below it in the tree. */
static uint64_t below(uint64_t t)
{
    const uint64_t net = ncclProfileProxyOp | ncclProfileProxyStep | ncclProfileNetPlugin |
                         ncclProfileKernelCh;
    switch (t) {
    case ncclProfileGroupApi:
        return ncclProfileGroupApi | ncclProfileCollApi | ncclProfileP2pApi |
               ncclProfileKernelLaunch | ncclProfileGroup | ncclProfileColl | ncclProfileP2p | net;
    case ncclProfileCollApi: return ncclProfileCollApi | ncclProfileColl | net;
    case ncclProfileP2pApi: return ncclProfileP2pApi | ncclProfileP2p | net;
    case ncclProfileColl: return ncclProfileColl | net;
    case ncclProfileP2p: return ncclProfileP2p | net;
    case ncclProfileProxyOp: return net & ~(uint64_t)ncclProfileKernelCh;
    case ncclProfileProxyStep: return ncclProfileProxyStep | ncclProfileNetPlugin;
    default: return t;
    }
}

static void fail(ctx_t *c, const char *fmt, const char *a, const char *b)
{
    c->failures++;
    fprintf(stderr, "profcheck: FAIL rank %d: ", c->rank);
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
}

static const char *tname(uint64_t t)
{
    static const char *const names[NTYPES] = {
        "Group", "Coll", "P2p", "ProxyOp", "ProxyStep", "ProxyCtrl", "KernelCh", "NetPlugin",
        "GroupApi", "CollApi", "P2pApi", "KernelLaunch", "CeColl", "CeSync", "CeBatch"};
    int i = type_index(t);
    return i >= 0 ? names[i] : "unknown";
}

/* Is p a handle this context issued? Called with the lock. */
static ev_t *own(ctx_t *c, const void *p)
{
    for (ev_t *e = c->events; e != NULL; e = e->next) {
        if (e == p) {
            return e;
        }
    }
    return NULL;
}

static ncclResult_t pc_init(void **context, uint64_t commId, int *mask, const char *commName,
                            int nNodes, int nranks, int rank, ncclDebugLogger_t logfn)
{
    (void)commId, (void)commName, (void)nNodes, (void)nranks, (void)logfn;
    ctx_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return ncclSystemError;
    }
    if (mask_env < 0) {
        const char *m = getenv("BRAID_TEST_PROF_MASK");
        mask_env = m != NULL ? (int)strtol(m, NULL, 0) : 0;
    }
    *mask = mask_env;
    c->rank = rank;
    pthread_mutex_init(&c->lock, NULL);
    *context = c;
    return ncclSuccess;
}

static void check_parent(ctx_t *c, const ev_t *e, const ev_t *p, const void *raw)
{
    uint64_t want = 0;
    int optional = 0;

    switch (e->type) {
    case ncclProfileGroupApi:
    case ncclProfileGroup:
    case ncclProfileProxyCtrl:
        if (raw != NULL) {
            fail(c, "%s event with a parent (%s)", tname(e->type), p ? tname(p->type) : "unknown");
        }
        return;
    case ncclProfileCollApi:
    case ncclProfileP2pApi:
    case ncclProfileKernelLaunch: want = ncclProfileGroupApi; break;
    case ncclProfileColl: want = ncclProfileCollApi; break;
    case ncclProfileP2p: want = ncclProfileP2pApi; break;
    case ncclProfileProxyOp:
    case ncclProfileKernelCh: want = ncclProfileColl | ncclProfileP2p; break;
    case ncclProfileProxyStep: want = ncclProfileProxyOp; break;
    case ncclProfileNetPlugin: want = ncclProfileProxyStep; break;
    default: return;
    }
    if (raw == NULL) {
        if (!optional) {
            fail(c, "%s event without a parent%s", tname(e->type), "");
        }
        return;
    }
    if (p == NULL) {
        fail(c, "%s event whose parent is not a handle this profiler issued%s", tname(e->type),
             "");
        return;
    }
    if ((p->type & want) == 0) {
        fail(c, "%s event whose parent is a %s event", tname(e->type), tname(p->type));
        return;
    }
    if (p->type == ncclProfileGroupApi && p->stopped) {
        fail(c, "%s event under a GroupApi event that already stopped%s", tname(e->type), "");
    }
    if ((e->type == ncclProfileColl || e->type == ncclProfileP2p) && strcmp(e->func, p->func) != 0) {
        fail(c, "event of %s under the API event of %s", e->func, p->func);
    }
}

static ncclResult_t pc_start(void *context, void **handle, ncclProfilerEventDescr_v6_t *d)
{
    ctx_t *c = context;
    ev_t *e = calloc(1, sizeof(*e));

    *handle = NULL;
    if (e == NULL) {
        return ncclSuccess; /* dropped */
    }
    e->magic = MAGIC;
    e->ctx = c;
    e->type = d->type;
    const char *func = d->type == ncclProfileCollApi ? d->collApi.func
                       : d->type == ncclProfileP2pApi ? d->p2pApi.func
                       : d->type == ncclProfileColl   ? d->coll.func
                       : d->type == ncclProfileP2p    ? d->p2p.func
                                                      : "";
    snprintf(e->func, sizeof(e->func), "%s", func != NULL ? func : "(null)");
    pthread_mutex_lock(&c->lock);
    int ti = type_index(d->type);
    if (ti < 0) {
        fail(c, "event of unknown type %s%s", tname(d->type), "");
    } else {
        c->count[ti]++;
    }
    if (d->type != ncclProfileProxyCtrl && ((uint64_t)mask_env & below(d->type)) == 0) {
        char m[32];
        snprintf(m, sizeof(m), "0x%x", mask_env);
        fail(c, "%s event although the mask (%s) has neither it nor anything below it",
             tname(d->type), m);
    }
    e->parent = own(c, d->parentObj);
    check_parent(c, e, e->parent, d->parentObj);
    if (d->type == ncclProfileProxyOp) {
        e->nsteps = d->proxyOp.nSteps;
        if (d->proxyOp.nSteps <= 0 || d->proxyOp.chunkSize <= 0) {
            fail(c, "ProxyOp event with no steps or no chunk size%s%s", "", "");
        }
    }
    if (d->type == ncclProfileProxyStep && e->parent != NULL &&
        e->parent->type == ncclProfileProxyOp) {
        if (e->parent->stopped) {
            fail(c, "ProxyStep event under a ProxyOp that already stopped%s%s", "", "");
        }
        e->parent->children++;
        e->parent->open_children++;
    }
    if ((d->type == ncclProfileColl || d->type == ncclProfileP2p) &&
        (mask_env & ncclProfileGroup) != 0) {
        void *pg = d->type == ncclProfileColl ? d->coll.parentGroup : d->p2p.parentGroup;
        ev_t *g = own(c, pg);
        if (g == NULL || g->type != ncclProfileGroup) {
            fail(c, "%s event whose parentGroup is not a Group event%s", tname(d->type), "");
        } else if (g->stopped) {
            fail(c, "%s event under a Group event that already stopped%s", tname(d->type), "");
        }
    }
    e->next = c->events;
    c->events = e;
    pthread_mutex_unlock(&c->lock);
    *handle = e;
    return ncclSuccess;
}

static ncclResult_t pc_stop(void *handle)
{
    ev_t *e = handle;
    if (e == NULL || e->magic != MAGIC) {
        fprintf(stderr, "profcheck: FAIL stop of a handle this profiler did not issue\n");
        return ncclSuccess;
    }
    pthread_mutex_lock(&e->ctx->lock);
    if (e->stopped) {
        fail(e->ctx, "%s event stopped twice%s", tname(e->type), "");
    }
    e->stopped = 1;
    if (e->type == ncclProfileProxyStep && e->parent != NULL &&
        e->parent->type == ncclProfileProxyOp) {
        e->parent->open_children--;
    }
    /* A ProxyOp ends when all its steps have: it had every step it announced (when steps
     * are profiled), and none of them is still open. */
    if (e->type == ncclProfileProxyOp && (mask_env & ncclProfileProxyStep) != 0) {
        char a[64], b[32];
        if (e->children != e->nsteps) {
            snprintf(a, sizeof(a), "%d steps", e->children);
            snprintf(b, sizeof(b), "%d", e->nsteps);
            fail(e->ctx, "ProxyOp stopped after %s although it announced %s", a, b);
        } else if (e->open_children != 0) {
            fail(e->ctx, "ProxyOp stopped while some of its ProxyStep events were open%s%s", "",
                 "");
        }
    }
    pthread_mutex_unlock(&e->ctx->lock);
    return ncclSuccess;
}

static ncclResult_t pc_state(void *handle, ncclProfilerEventState_v6_t s,
                             ncclProfilerEventStateArgs_v6_t *a)
{
    ev_t *e = handle;
    (void)s, (void)a;
    if (e == NULL || e->magic != MAGIC) {
        fprintf(stderr, "profcheck: FAIL state of a handle this profiler did not issue\n");
        return ncclSuccess;
    }
    pthread_mutex_lock(&e->ctx->lock);
    if (e->stopped) {
        fail(e->ctx, "state recorded on a %s event that already stopped%s", tname(e->type), "");
    }
    pthread_mutex_unlock(&e->ctx->lock);
    return ncclSuccess;
}

static ncclResult_t pc_finalize(void *context)
{
    ctx_t *c = context;
    char line[512];
    size_t at = 0;
    long total = 0;

    for (ev_t *e = c->events; e != NULL; e = e->next) {
        if (!e->stopped) {
            fail(c, "%s event never stopped%s", tname(e->type), "");
        }
    }
    for (int i = 0; i < NTYPES; i++) {
        total += c->count[i];
    }
    at += (size_t)snprintf(line + at, sizeof(line) - at, "profcheck rank %d: %ld events (", c->rank,
                           total);
    for (int i = 0; i < NTYPES && at < sizeof(line); i++) {
        if (c->count[i] > 0) {
            at += (size_t)snprintf(line + at, sizeof(line) - at, " %s %ld",
                                   tname((uint64_t)1 << i), c->count[i]);
        }
    }
    if (at < sizeof(line)) {
        snprintf(line + at, sizeof(line) - at, " ), %ld failures\n", c->failures);
    }
    const char *out = getenv("BRAID_TEST_PROF_OUT");
    FILE *f = out != NULL ? fopen(out, "a") : NULL;
    if (f != NULL) {
        fputs(line, f);
        fclose(f);
    } else {
        fputs(line, stderr);
    }
    while (c->events != NULL) {
        ev_t *e = c->events;
        c->events = e->next;
        e->magic = 0;
        free(e);
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
    return ncclSuccess;
}

__attribute__((visibility("default"))) const ncclProfiler_v6_t ncclProfiler_v6 = {
    "profcheck", pc_init, pc_start, pc_stop, pc_state, pc_finalize};
