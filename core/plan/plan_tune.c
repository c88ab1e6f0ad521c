/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cost model. For every (algorithm, protocol) the core implements, a predicted time:
 * base latency + hops x per-hop latency of the slowest link + bytes on the wire / link
 * bandwidth x channels. Entries the core does not implement, or that NCCL_ALGO /
 * NCCL_PROTO exclude, stay -1. A tuner plugin then sees the table and may lower entries
 * (0 forces a choice) and set the channel count; a tuner choice that is not available is
 * logged and ignored, never silently obeyed. The smallest entry >= 0 wins (ties: lowest
 * algorithm, then protocol), as in NCCL.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "plan.h"
#include "util.h"

_Static_assert(sizeof(br_tune_constants_t) == 1152, "tuner constants must match NCCL's layout");

struct br_tune {
    br_tune_topo_t topo;
    br_tune_constants_t k;
    /* enabled[func][algo][proto] after NCCL_ALGO / NCCL_PROTO. */
    char enabled[BR_FUNC_ALLREDUCE + 1][BR_NUM_ALGOS][BR_NUM_PROTOS];
    br_tune_hook_t hook;
    void *hook_ctx;
    char hook_name[64];
    /* Without a tuner the model's answer depends on (func, bytes) only: the last answer
     * per function is kept, so a loop of equal calls computes it once. */
    size_t last_bytes[BR_FUNC_ALLREDUCE + 1];
    br_plan_choice_t last[BR_FUNC_ALLREDUCE + 1];
    char last_valid[BR_FUNC_ALLREDUCE + 1];
};

static const char *const algo_names[BR_NCCL_NUM_ALGOS] = {"Tree", "Ring", "CollNetDirect",
                                                      "CollNetChain", "NVLS", "NVLSTree",
                                                      "PAT"};
static const char *const proto_names[BR_NUM_PROTOS] = {"LL", "LL128", "Simple"};
static const char *const func_keys[BR_FUNC_ALLREDUCE + 1] = {
    "broadcast", "reduce", "allgather", "reducescatter", "allreduce"};

/* What the host executor implements: ring with the Simple protocol. */
static int implemented(int func, int algo, int proto)
{
    (void)func;
    return algo == BR_ALGO_RING && proto == BR_PROTO_SIMPLE;
}

static int name_index(const char *tok, const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        if (strcasecmp(tok, names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

/* Apply one list ("ring,tree" or "^tree") to mask[n] for the functions in fmask. */
static ncclResult_t apply_list(const char *var, const char *list, const char *const *names, int n,
                               char *mask, int nmask)
{
    int neg = list[0] == '^';
    char buf[256], *save = NULL;
    char sel[BR_NUM_ALGOS] = {0};

    snprintf(buf, sizeof(buf), "%s", list + neg);
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*tok)) {
            tok++;
        }
        int i = name_index(tok, names, n);
        if (i < 0) {
            BR_WARN(NCCL_TUNING | NCCL_ENV, "%s: unknown name '%s' in '%s'", var, tok, list);
            return ncclInvalidUsage;
        }
        sel[i] = 1;
    }
    for (int i = 0; i < nmask && i < n; i++) {
        mask[i] = neg ? !sel[i] : sel[i];
    }
    return ncclSuccess;
}

/* NCCL_ALGO / NCCL_PROTO: "list" for every function, or "func:list;func:list". */
static ncclResult_t parse_selection(const char *var, const char *value, int is_algo,
                                    br_tune_t *t)
{
    char buf[512], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", value);
    for (char *part = strtok_r(buf, ";", &save); part != NULL; part = strtok_r(NULL, ";", &save)) {
        char *colon = strchr(part, ':');
        int f0 = 0, f1 = BR_FUNC_ALLREDUCE;
        const char *list = part;
        if (colon != NULL) {
            *colon = '\0';
            int f = name_index(part, func_keys, BR_FUNC_ALLREDUCE + 1);
            if (f < 0) {
                BR_WARN(NCCL_TUNING | NCCL_ENV, "%s: unknown collective '%s' in '%s'", var, part,
                        value);
                return ncclInvalidUsage;
            }
            f0 = f1 = f;
            list = colon + 1;
        }
        for (int f = f0; f <= f1; f++) {
            char mask[BR_NUM_ALGOS];
            int n = is_algo ? BR_NUM_ALGOS : BR_NUM_PROTOS;
            BR_CHECK(apply_list(var, list, is_algo ? algo_names : proto_names, n, mask, n));
            for (int a = 0; a < BR_NUM_ALGOS; a++) {
                for (int p = 0; p < BR_NUM_PROTOS; p++) {
                    t->enabled[f][a][p] &= is_algo ? mask[a] : mask[p];
                }
            }
        }
    }
    return ncclSuccess;
}

static void constants_default(br_tune_constants_t *k)
{
    memset(k, 0, sizeof(*k));
    for (int a = 0; a < BR_NCCL_NUM_ALGOS; a++) {
        for (int p = 0; p < BR_NUM_PROTOS; p++) {
            /* Host executor: a call costs a few microseconds of bookkeeping; a hop costs a
             * cache-line handoff (in-process, shared memory) or a network message. */
            k->base_latencies[a][p] = 2.0;
            k->hw_latencies[BR_HW_NVLINK][a][p] = 0.3;
            k->hw_latencies[BR_HW_PCI][a][p] = 0.6;
            k->hw_latencies[BR_HW_NET][a][p] = 8.0;
        }
    }
}

ncclResult_t br_plan_tune_create(const br_tune_topo_t *topo, br_tune_t **tune_p)
{
    br_tune_t *t = NULL;
    const char *algo = BR_PARAM_STR(ALGO), *proto = BR_PARAM_STR(PROTO);
    ncclResult_t res;

    BR_CHECK(br_calloc(&t, 1, "tuning model"));
    t->topo = *topo;
    constants_default(&t->k);
    memset(t->enabled, 1, sizeof(t->enabled));
    if ((algo != NULL && (res = parse_selection("NCCL_ALGO", algo, 1, t)) != ncclSuccess) ||
        (proto != NULL && (res = parse_selection("NCCL_PROTO", proto, 0, t)) != ncclSuccess)) {
        free(t);
        return res;
    }
    for (int f = 0; f <= BR_FUNC_ALLREDUCE; f++) {
        int any = 0;
        for (int a = 0; a < BR_NUM_ALGOS; a++) {
            for (int p = 0; p < BR_NUM_PROTOS; p++) {
                any |= t->enabled[f][a][p] && implemented(f, a, p);
            }
        }
        if (!any) {
            BR_WARN(NCCL_TUNING | NCCL_ENV, "NCCL_ALGO=%s NCCL_PROTO=%s leave no algorithm Braid "
                    "implements for %s (it implements Ring/Simple)", algo ? algo : "",
                    proto ? proto : "", func_keys[f]);
            free(t);
            return ncclInvalidUsage;
        }
    }
    *tune_p = t;
    return ncclSuccess;
}

br_tune_constants_t *br_plan_tune_constants(br_tune_t *tune)
{
    return &tune->k;
}

void br_plan_tune_set_hook(br_tune_t *tune, br_tune_hook_t hook, void *ctx, const char *name)
{
    tune->hook = hook;
    tune->hook_ctx = ctx;
    snprintf(tune->hook_name, sizeof(tune->hook_name), "%s", name != NULL ? name : "tuner");
    memset(tune->last_valid, 0, sizeof(tune->last_valid));
}

void br_plan_tune_free(br_tune_t *tune)
{
    free(tune);
}

/* Bytes each rank sends per byte of the collective's size, for the ring. */
static double ring_traffic(int func, int n)
{
    switch (func) {
    case BR_FUNC_ALLREDUCE: return 2.0 * (n - 1) / n;
    case BR_FUNC_ALLGATHER:
    case BR_FUNC_REDUCESCATTER: return (double)(n - 1);
    default: return 1.0;
    }
}

static int ring_hops(int func, int n)
{
    return func == BR_FUNC_ALLREDUCE ? 2 * (n - 1) : n - 1;
}

static void model_fill(const br_tune_t *t, int func, size_t bytes, float *table, int nch)
{
    int n = t->topo.nranks;
    for (int a = 0; a < BR_NUM_ALGOS; a++) {
        for (int p = 0; p < BR_NUM_PROTOS; p++) {
            float *e = &table[a * BR_NUM_PROTOS + p];
            *e = -1.0f;
            if (!implemented(func, a, p) || !t->enabled[func][a][p]) {
                continue;
            }
            if (n == 1) {
                *e = 0.0f;
                continue;
            }
            double bw = t->topo.link_gbps * nch * 1e3; /* bytes per us */
            double us = t->k.base_latencies[a][p] +
                        ring_hops(func, n) * t->k.hw_latencies[t->topo.hw][a][p] +
                        (double)bytes * ring_traffic(func, n) / (bw > 0 ? bw : 1e3);
            *e = (float)us;
        }
    }
}

ncclResult_t br_plan_choose(br_tune_t *t, br_func_t func, size_t bytes, br_plan_choice_t *out)
{
    float table[BR_NUM_ALGOS * BR_NUM_PROTOS], before[BR_NUM_ALGOS * BR_NUM_PROTOS];
    int nch = br_plan_nchannels(bytes, t->topo.max_channels), tuner_nch = 0, best = -1;
    int cacheable = t->hook == NULL && (unsigned)func <= BR_FUNC_ALLREDUCE;

    if (cacheable && t->last_valid[func] && t->last_bytes[func] == bytes) {
        *out = t->last[func];
        return ncclSuccess;
    }
    model_fill(t, func, bytes, table, nch);
    if (t->hook != NULL) {
        memcpy(before, table, sizeof(table));
        ncclResult_t res = t->hook(t->hook_ctx, func, bytes, table, &tuner_nch);
        if (res != ncclSuccess) {
            BR_WARN(NCCL_TUNING, "tuner %s failed (error %d) for %s of %zu bytes", t->hook_name,
                    (int)res, br_func_name(func), bytes);
            return res;
        }
        for (int i = 0; i < BR_NUM_ALGOS * BR_NUM_PROTOS; i++) {
            if (before[i] < 0 && table[i] >= 0) {
                BR_INFO(NCCL_TUNING, "%s %zu bytes: tuner %s chose %s/%s, which is not available "
                        "(%s); ignored", br_func_name(func), bytes, t->hook_name,
                        br_algo_name(i / BR_NUM_PROTOS), br_proto_name(i % BR_NUM_PROTOS),
                        implemented(func, i / BR_NUM_PROTOS, i % BR_NUM_PROTOS)
                            ? "excluded by NCCL_ALGO/NCCL_PROTO"
                            : "not implemented by the host executor");
                table[i] = -1.0f;
            }
        }
        if (tuner_nch < 0 || tuner_nch > t->topo.max_channels) {
            BR_INFO(NCCL_TUNING, "%s %zu bytes: tuner %s asked for %d channels; the communicator "
                    "has %d; clamped", br_func_name(func), bytes, t->hook_name, tuner_nch,
                    t->topo.max_channels);
            tuner_nch = tuner_nch < 0 ? 0 : t->topo.max_channels;
        }
    }
    for (int i = 0; i < BR_NUM_ALGOS * BR_NUM_PROTOS; i++) {
        if (table[i] >= 0 && (best < 0 || table[i] < table[best])) {
            best = i;
        }
    }
    if (best < 0) {
        BR_WARN(NCCL_TUNING, "%s of %zu bytes: no algorithm left to run it", br_func_name(func),
                bytes);
        return ncclInvalidUsage;
    }
    out->algo = best / BR_NUM_PROTOS;
    out->proto = best % BR_NUM_PROTOS;
    out->nchannels = tuner_nch > 0 ? tuner_nch : nch;
    out->predicted_us = table[best];
    BR_INFO(NCCL_TUNING, "%s %zu bytes -> %s/%s, %d channel%s (%s: %.1f us%s)", br_func_name(func),
            bytes, br_algo_name(out->algo), br_proto_name(out->proto), out->nchannels,
            out->nchannels == 1 ? "" : "s", t->hook != NULL ? t->hook_name : "model",
            out->predicted_us, tuner_nch > 0 ? ", channels set by the tuner" : "");
    if (cacheable) {
        t->last[func] = *out;
        t->last_bytes[func] = bytes;
        t->last_valid[func] = 1;
    }
    return ncclSuccess;
}
