/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Choosing. The model (plan_model.c) fills a cost table for every (algorithm, protocol)
 * implemented for the call and allowed by NCCL_ALGO / NCCL_PROTO (-1 elsewhere); a tuner
 * plugin then sees NCCL's 7 x 3 part of it and may lower entries (0 forces a choice) and
 * set the channel count. A tuner choice that is not available is logged and ignored,
 * never silently obeyed. The smallest entry wins (ties: the lower algorithm id, then
 * protocol), as in NCCL; Braid's own algorithms compete at their model cost, so a tuner
 * that forces an NCCL algorithm beats them. Single-threaded per communicator.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "plan_int.h"

_Static_assert(sizeof(br_tune_constants_t) == 1152, "tuner constants must match NCCL's layout");

static const char *const func_keys[BR_NUM_COLL_FUNCS] = {"broadcast", "reduce", "allgather",
                                                         "reducescatter", "allreduce"};

static int name_index(const char *tok, int is_algo)
{
    int n = is_algo ? BR_NUM_ALGOS : BR_NUM_PROTOS;
    for (int i = 0; i < n; i++) {
        if (strcasecmp(tok, is_algo ? br_algo_name(i) : br_proto_name(i)) == 0) {
            return i;
        }
    }
    return -1;
}

/* One list ("ring,tree" or "^tree") as a mask over algorithms or protocols. */
static ncclResult_t apply_list(const char *var, const char *list, int is_algo, char *mask)
{
    int neg = list[0] == '^', n = is_algo ? BR_NUM_ALGOS : BR_NUM_PROTOS;
    char buf[256], *save = NULL;
    char sel[BR_NUM_ALGOS] = {0};

    snprintf(buf, sizeof(buf), "%s", list + neg);
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*tok)) {
            tok++;
        }
        int i = name_index(tok, is_algo);
        if (i < 0) {
            BR_WARN(NCCL_TUNING | NCCL_ENV, "%s: unknown name '%s' in '%s'", var, tok, list);
            return ncclInvalidUsage;
        }
        sel[i] = 1;
    }
    for (int i = 0; i < n; i++) {
        mask[i] = neg ? !sel[i] : sel[i];
    }
    return ncclSuccess;
}

/* NCCL_ALGO / NCCL_PROTO: "list" for every function, or "func:list;func:list". */
static ncclResult_t parse_selection(const char *var, const char *value, int is_algo, br_plan_t *p)
{
    char buf[512], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", value);
    for (char *part = strtok_r(buf, ";", &save); part != NULL; part = strtok_r(NULL, ";", &save)) {
        char *colon = strchr(part, ':');
        int f0 = 0, f1 = BR_NUM_COLL_FUNCS - 1;
        const char *list = part;
        if (colon != NULL) {
            *colon = '\0';
            int f = -1;
            for (int i = 0; i < BR_NUM_COLL_FUNCS; i++) {
                f = strcasecmp(part, func_keys[i]) == 0 ? i : f;
            }
            if (f < 0) {
                BR_WARN(NCCL_TUNING | NCCL_ENV, "%s: unknown collective '%s' in '%s'", var, part,
                        value);
                return ncclInvalidUsage;
            }
            f0 = f1 = f;
            list = colon + 1;
        }
        char mask[BR_NUM_ALGOS];
        BR_CHECK(apply_list(var, list, is_algo, mask));
        for (int f = f0; f <= f1; f++) {
            for (int a = 0; a < BR_NUM_ALGOS; a++) {
                for (int pr = 0; pr < BR_NUM_PROTOS; pr++) {
                    p->enabled[f][a][pr] &= is_algo ? mask[a] : mask[pr];
                }
            }
        }
    }
    return ncclSuccess;
}

/* The host executor's constants, measured on the development machine (2 cores;
 * docs/performance.md has the runs): a hop costs a few microseconds of bookkeeping and
 * scheduling between threads or processes of a host, and about 5 over loopback TCP, times
 * the ranks per core (hop_us()); a tree hop costs 0.6 of a ring hop (tree_us()). LL saves nothing
 * measurable on the host (the line handoff it saves is small next to the rest of a step) and moves
 * bytes at 0.4 of Simple's rate, so it is taken only where Simple is not allowed; its slightly
 * higher latency breaks ties towards Simple. */
static void constants_default(br_tune_constants_t *k, br_plan_host_t *h)
{
    /* [hw][proto]: NVLINK (threads), PCI (processes of a host), NET. */
    static const double hop[3][BR_NUM_PROTOS] = {
        {1.05, 0.0, 1.0}, {2.05, 0.0, 2.0}, {5.1, 0.0, 5.0}};
    memset(k, 0, sizeof(*k));
    for (int a = 0; a < BR_NCCL_NUM_ALGOS; a++) {
        for (int pr = 0; pr < BR_NUM_PROTOS; pr++) {
            /* A tree's two streams cost a little more to start: on a tie, the ring. */
            k->base_latencies[a][pr] =
                (pr == BR_PROTO_LL ? 2.05 : 2.0) + (a == BR_ALGO_TREE ? 0.5 : 0.0);
            for (int hw = 0; hw < 3; hw++) {
                k->hw_latencies[hw][a][pr] = hop[hw][pr];
            }
        }
    }
    h->arena_base = 0.5;
    h->arena_peer = 0.2;
    h->direct_base = 2.0;
    h->direct_peer = 2.0;
    h->intra_gbps = 4.0;
    h->inproc_gbps = 8.0;
    h->arena_gbps = 40.0;
    h->direct_gbps = 12.0;
    h->fold_gbps = 16.0;
    h->ll_efficiency = 0.4;
    h->tree_hop = 0.6;
}

/* One rank's links to the root of its tree, -1 while not yet counted. */
typedef struct {
    int intra, inter;
} tree_links_t;

/* Count the links from rank r to the root of tree c: climb to the root or to the first
 * rank already counted, then count back down, each rank from its parent. */
static void tree_links(const br_graph_t *g, int c, int r, tree_links_t *links, int *stack)
{
    int top = 0, x = r;
    /* top < nranks only guards against a cycle, which no graph has. */
    while (links[x].intra < 0 && br_graph_tree(g, c, x)->up >= 0 && top < g->nranks) {
        stack[top++] = x;
        x = br_graph_tree(g, c, x)->up;
    }
    if (links[x].intra < 0) {
        links[x].intra = links[x].inter = 0; /* the root */
    }
    while (top > 0) {
        int y = stack[--top], up = br_graph_tree(g, c, y)->up;
        int same = g->node_of[y] == g->node_of[up];
        links[y].intra = links[up].intra + same;
        links[y].inter = links[up].inter + !same;
    }
}

/*
 * Links of each kind on the deepest root-to-leaf path of the trees in use. Each rank's
 * counts are its parent's plus one link, each computed once: O(n) per tree. Walking every
 * rank's whole path to the root was O(n x depth), and a host's tree is a chain, so at 1024
 * ranks on one host every rank took half a million steps in init (issue 40).
 */
static ncclResult_t tree_shape(br_plan_t *p)
{
    const br_graph_t *g = p->graph;
    int trees = g->nchannels > 1 ? 2 : 1;
    tree_links_t *links = NULL;
    int *stack = NULL;
    ncclResult_t res = ncclSuccess;

    BR_CHECK(br_calloc(&links, (size_t)g->nranks, "plan tree shape"));
    BR_CHECK_GOTO(br_calloc(&stack, (size_t)g->nranks, "plan tree shape"), res, out);
    p->tree_intra = p->tree_inter = p->tree_fan = 0;
    for (int c = 0; c < trees; c++) {
        for (int r = 0; r < g->nranks; r++) {
            links[r].intra = links[r].inter = -1;
        }
        for (int r = 0; r < g->nranks; r++) {
            tree_links(g, c, r, links, stack);
            /* The first deepest path in (tree, rank) order, as before. */
            if (links[r].intra + links[r].inter > p->tree_intra + p->tree_inter) {
                p->tree_intra = links[r].intra;
                p->tree_inter = links[r].inter;
            }
            int fan = br_graph_tree(g, c, r)->ndown;
            p->tree_fan = fan > p->tree_fan ? fan : p->tree_fan;
        }
    }
out:
    free(stack);
    free(links);
    return res;
}

ncclResult_t br_plan_create(const br_plan_comm_t *pc, const br_graph_t *graph, br_plan_t **plan_p)
{
    br_plan_t *p = NULL;
    const char *algo = BR_PARAM_STR(ALGO), *proto = BR_PARAM_STR(PROTO);
    ncclResult_t res = ncclSuccess;

    BR_CHECK(br_calloc(&p, 1, "plan"));
    p->pc = *pc;
    p->pc.share = pc->share < 1.0 ? 1.0 : pc->share;
    p->graph = graph;
    constants_default(&p->k, &p->h);
    if (pc->gpus) {
        br_plan_gpu_constants(&p->k); /* NCCL's tables; the host ones stay for CPU-only */
    }
    memset(p->enabled, 1, sizeof(p->enabled));
    if (proto != NULL && (res = parse_selection("NCCL_PROTO", proto, 0, p)) != ncclSuccess) {
        free(p);
        return res;
    }
    memcpy(p->proto_only, p->enabled, sizeof(p->proto_only));
    if (algo != NULL && (res = parse_selection("NCCL_ALGO", algo, 1, p)) != ncclSuccess) {
        free(p);
        return res;
    }
    if ((res = tree_shape(p)) != ncclSuccess) {
        free(p);
        return res;
    }
    *plan_p = p;
    return ncclSuccess;
}

br_tune_constants_t *br_plan_constants(br_plan_t *plan)
{
    return &plan->k;
}

void br_plan_set_tuner(br_plan_t *plan, br_tune_hook_t hook, void *ctx, const char *name)
{
    plan->hook = hook;
    plan->hook_ctx = ctx;
    snprintf(plan->hook_name, sizeof(plan->hook_name), "%s", name != NULL ? name : "tuner");
    memset(plan->last_valid, 0, sizeof(plan->last_valid));
}

void br_plan_free(br_plan_t *plan)
{
    free(plan);
}

/* The tuner's edits of NCCL's rows: choices of what is not available are dropped
 * (logged), the channel count is clamped. Returns nonzero when it changed anything. */
static int tuner_apply(br_plan_t *p, int func, size_t bytes, float *table, int *nch_p)
{
    float before[BR_NUM_ALGOS * BR_NUM_PROTOS];
    int tnch = 0, changed = 0;

    memcpy(before, table, sizeof(before));
    if (p->hook(p->hook_ctx, func, bytes, table, &tnch) != ncclSuccess) {
        return -1;
    }
    for (int i = 0; i < BR_NCCL_NUM_ALGOS * BR_NUM_PROTOS; i++) {
        int a = i / BR_NUM_PROTOS, pr = i % BR_NUM_PROTOS;
        const char *why = NULL;
        if (before[i] < 0 && table[i] >= 0) {
            BR_INFO(NCCL_TUNING,
                    "%s %zu bytes: tuner %s chose %s/%s, which is not available "
                    "(%s); ignored",
                    br_func_name(func), bytes, p->hook_name, br_algo_name(a), br_proto_name(pr),
                    br_plan_available(p, func, a, pr, bytes, &why)
                        ? "excluded by NCCL_ALGO/NCCL_PROTO"
                        : why);
            table[i] = -1.0f;
        }
        changed |= table[i] != before[i];
    }
    if (tnch < 0 || tnch > p->pc.nchannels) {
        BR_INFO(NCCL_TUNING,
                "%s %zu bytes: tuner %s asked for %d channels; the communicator "
                "has %d; clamped",
                br_func_name(func), bytes, p->hook_name, tnch, p->pc.nchannels);
        tnch = tnch < 0 ? 0 : p->pc.nchannels;
    }
    if (tnch > 0) {
        *nch_p = tnch;
        changed = 1;
    }
    return changed;
}

/* The whole decision for (func, bytes), with the tuner or by the model alone; -1 when
 * nothing can run it, -2 when the tuner failed. */
static int decide_with(br_plan_t *p, int func, size_t bytes, int use_tuner, br_plan_choice_t *out)
{
    float table[BR_NUM_ALGOS * BR_NUM_PROTOS];
    int nch = br_plan_nchannels(p, bytes), best = -1, runner = -1, by_tuner = 0;

    const br_op_t *cfg = p->op_cfg;
    if (cfg != NULL && cfg->call_max_ch > 0 && nch > cfg->call_max_ch) {
        nch = cfg->call_max_ch;
    }
    if (cfg != NULL && cfg->call_min_ch > nch) {
        nch = cfg->call_min_ch < p->pc.nchannels ? cfg->call_min_ch : p->pc.nchannels;
    }
    br_plan_model(p, func, bytes, nch, table);
    if (use_tuner && p->hook != NULL && (by_tuner = tuner_apply(p, func, bytes, table, &nch)) < 0) {
        return -2;
    }
    for (int i = 0; cfg != NULL && i < BR_NUM_ALGOS * BR_NUM_PROTOS; i++) {
        if (!br_op_allows(cfg, i / BR_NUM_PROTOS, i % BR_NUM_PROTOS)) {
            table[i] = -1.0f; /* the call's own selection excludes it */
        }
    }
    for (int i = 0; i < BR_NUM_ALGOS * BR_NUM_PROTOS; i++) {
        if (table[i] < 0) {
            continue;
        }
        if (best < 0 || table[i] < table[best]) {
            runner = best;
            best = i;
        } else if (runner < 0 || table[i] < table[runner]) {
            runner = i;
        }
    }
    if (best < 0) {
        return -1;
    }
    out->algo = best / BR_NUM_PROTOS;
    out->proto = best % BR_NUM_PROTOS;
    out->us = table[best];
    out->runner = runner;
    out->runner_us = runner >= 0 ? table[runner] : 0.0f;
    out->by_tuner = by_tuner;
    /* The one-shot paths run on one channel whatever the count. */
    out->nchannels = out->algo >= BR_ALGO_ONESHOT || out->algo == BR_ALGO_COLLNET_DIRECT ||
                             out->algo == BR_ALGO_COLLNET_CHAIN
                         ? 1
                         : nch;
    out->chunk_bytes = br_plan_chunk(p, func, out->algo, out->proto, bytes, out->nchannels);
    return 0;
}

ncclResult_t br_plan_predict(br_plan_t *p, int func, size_t bytes, int use_tuner, int *algo_p,
                             int *proto_p, int *nchannels_p, float *us_p)
{
    br_plan_choice_t c;
    float table[BR_NUM_ALGOS * BR_NUM_PROTOS];
    p->op_collnet = 0;
    int r = decide_with(p, func, bytes, use_tuner, &c);
    if (r < 0) {
        return r == -2 ? ncclInternalError : ncclInvalidUsage;
    }
    br_plan_model(p, func, bytes, c.nchannels, table);
    *algo_p = c.algo;
    *proto_p = c.proto;
    *nchannels_p = c.nchannels;
    *us_p = table[c.algo * BR_NUM_PROTOS + c.proto];
    return ncclSuccess;
}

static int decide(br_plan_t *p, int func, size_t bytes, br_plan_choice_t *out)
{
    return decide_with(p, func, bytes, 1, out);
}

static void describe(char *buf, size_t len, const br_plan_choice_t *c)
{
    int n = snprintf(buf, len, "%s/%s, %d channel%s (%.1f us", br_algo_name(c->algo),
                     br_proto_name(c->proto), c->nchannels, c->nchannels == 1 ? "" : "s", c->us);
    if (n > 0 && (size_t)n < len && c->runner >= 0) {
        snprintf(buf + n, len - (size_t)n, "; next %s/%s %.1f us)",
                 br_algo_name(c->runner / BR_NUM_PROTOS), br_proto_name(c->runner % BR_NUM_PROTOS),
                 c->runner_us);
    } else if (n > 0 && (size_t)n < len) {
        snprintf(buf + n, len - (size_t)n, "; the only one allowed)");
    }
}

static void no_algorithm(const br_plan_t *p, int func, size_t bytes)
{
    const char *algo = BR_PARAM_STR(ALGO), *proto = BR_PARAM_STR(PROTO);
    char why_not[512] = "";
    size_t at = 0;

    /* Why each allowed (algorithm, protocol) cannot take this call. */
    for (int a = 0; a < BR_NUM_ALGOS; a++) {
        for (int pr = 0; pr < BR_NUM_PROTOS && at < sizeof(why_not); pr++) {
            const char *why = NULL;
            int nccl_only = a < BR_NCCL_NUM_ALGOS && a != BR_ALGO_RING && a != BR_ALGO_TREE &&
                            a != BR_ALGO_COLLNET_DIRECT && a != BR_ALGO_COLLNET_CHAIN;
            if (!p->enabled[func][a][pr] || pr == BR_PROTO_LL128 || nccl_only ||
                br_plan_available(p, func, a, pr, bytes, &why)) {
                continue;
            }
            int n = snprintf(why_not + at, sizeof(why_not) - at, "; %s/%s %s", br_algo_name(a),
                             br_proto_name(pr), why);
            at += n > 0 ? (size_t)n : 0;
        }
    }
    BR_WARN(NCCL_TUNING,
            "rank %d (host %s): no algorithm/protocol available for %s of %zu bytes: NCCL_ALGO "
            "is '%s' and NCCL_PROTO is '%s'%s",
            p->pc.rank, br_host_name(), br_func_name(func), bytes, algo ? algo : "",
            proto ? proto : "", at > 0 ? why_not : " (they leave nothing Braid implements for it)");
}

/* A call whose own configuration (ncclCollConfig_t) allows nothing that can run it. */
static void call_refused(const br_plan_t *p, const br_op_t *op, size_t bytes)
{
    char algos[160] = "", protos[64] = "";
    size_t at = 0;
    for (int a = 0; a < BR_NUM_ALGOS; a++) {
        if (op->call_algos >> a & 1u) {
            int n =
                snprintf(algos + at, sizeof(algos) - at, "%s%s", at ? "," : "", br_algo_name(a));
            at += n > 0 && (size_t)n < sizeof(algos) - at ? (size_t)n : 0;
        }
    }
    at = 0;
    for (int pr = 0; pr < BR_NUM_PROTOS; pr++) {
        if (op->call_protos >> pr & 1u) {
            int n = snprintf(protos + at, sizeof(protos) - at, "%s%s", at ? "," : "",
                             br_proto_name(pr));
            at += n > 0 && (size_t)n < sizeof(protos) - at ? (size_t)n : 0;
        }
    }
    BR_WARN(NCCL_TUNING,
            "rank %d (host %s): %s of %zu bytes: its ncclCollConfig_t allows algorithms '%s' and "
            "protocols '%s', and none of them can run this call here (with NCCL_ALGO '%s', "
            "NCCL_PROTO '%s'); set forceAlgSelection to 0 to let Braid choose instead",
            p->pc.rank, br_host_name(), br_func_name(op->func), bytes, algos[0] ? algos : "any",
            protos[0] ? protos : "any", BR_PARAM_STR(ALGO) ? BR_PARAM_STR(ALGO) : "",
            BR_PARAM_STR(PROTO) ? BR_PARAM_STR(PROTO) : "");
}

/* A tuner decides per call: log its decision once per power-of-two size class, next to
 * what the model alone would have taken. */
static void log_tuner_choice(br_plan_t *p, int func, size_t bytes, const br_plan_choice_t *c)
{
    br_plan_choice_t m;
    char model[200];
    int cls = 0;
    while (cls < 63 && ((size_t)1 << (cls + 1)) <= bytes) {
        cls++;
    }
    if (p->tuner_logged[func] & (1ull << cls)) {
        return;
    }
    p->tuner_logged[func] |= 1ull << cls;
    if (decide_with(p, func, bytes, 0, &m) == 0) {
        describe(model, sizeof(model), &m);
    } else {
        snprintf(model, sizeof(model), "nothing");
    }
    BR_INFO(NCCL_TUNING, "%s %zu bytes -> %s/%s, %d channel%s (%s; the model alone: %s)",
            br_func_name(func), bytes, br_algo_name(c->algo), br_proto_name(c->proto), c->nchannels,
            c->nchannels == 1 ? "" : "s",
            c->by_tuner ? "set by the tuner" : "the tuner left the model's table as it was", model);
}

/* Can the collnet take this call? An AllGather when every rank's plugin has iallgather; an
 * AllReduce (or a ReduceScatter, with ireducescatter) of its type and a plain sum, prod, max
 * or min (Avg and PreMulSum never go to the plugin), when every rank's plugin said so. */
static int op_collnet(const br_plan_t *p, const br_op_t *op)
{
    int kind = (int)op->redop.kind;
    if (op->func == BR_FUNC_ALLGATHER) {
        return p->pc.collnet && p->pc.collnet_ag;
    }
    return p->pc.collnet &&
           (op->func == BR_FUNC_ALLREDUCE ||
            (op->func == BR_FUNC_REDUCESCATTER && p->pc.collnet_rs)) &&
           kind <= BR_RED_MIN && (int)op->type >= 0 && (int)op->type < ncclNumTypes &&
           (p->pc.collnet_red[op->type] >> kind & 1u);
}

/* An AllReduce the collnet cannot reduce runs on the other algorithms, said once per
 * (type, operation); when NCCL_ALGO allowed only CollNet for it, NCCL_ALGO is set aside
 * for this call (NCCL_PROTO still holds). Returns what decide returned. */
static int collnet_fallback(br_plan_t *p, const br_op_t *op, size_t bytes, br_plan_choice_t *c,
                            int r)
{
    int kind = (int)op->redop.kind, t = (int)op->type;
    int forced = r == -1 && (p->enabled[op->func][BR_ALGO_COLLNET_DIRECT][BR_PROTO_SIMPLE] ||
                             p->enabled[op->func][BR_ALGO_COLLNET_CHAIN][BR_PROTO_SIMPLE]);

    if (forced) {
        p->use_proto_only = 1;
        r = decide(p, (int)op->func, bytes, c);
        p->use_proto_only = 0;
    }
    if ((p->collnet_logged[t] >> (kind < 8 ? kind : 7) & 1u) == 0) {
        p->collnet_logged[t] |= (unsigned char)(1u << (kind < 8 ? kind : 7));
        BR_INFO(NCCL_TUNING | NCCL_COLL,
                "rank %d: the collnet does not reduce %s with %s; "
                "%s of that type and operation %s",
                p->pc.rank, br_type_name(op->type), br_red_kind_name(op->redop.kind),
                br_func_name(op->func),
                forced ? "runs on the model's choice although NCCL_ALGO allows only CollNet"
                       : "runs on the other algorithms");
    }
    return r;
}

ncclResult_t br_plan_choose(br_plan_t *p, br_op_t *op)
{
    int func = (int)op->func;
    size_t bytes = br_op_bytes(op);
    br_plan_choice_t c;

    p->op_collnet = op_collnet(p, op);
    /* A call with its own selection is decided alone: never from or into the cache. */
    int own =
        op->call_algos != 0 || op->call_protos != 0 || op->call_min_ch > 0 || op->call_max_ch > 0;
    if (!own && p->hook == NULL && p->last_valid[func] && p->last_bytes[func] == bytes &&
        p->last_collnet[func] == p->op_collnet) {
        c = p->last[func];
    } else {
        p->op_cfg = own ? op : NULL;
        int r = decide(p, func, bytes, &c);
        if (r == -1 && own && !op->call_force) {
            p->op_cfg = NULL; /* forceAlgSelection 0: as if the call selected nothing */
            r = decide(p, func, bytes, &c);
        } else if (r == -1 && own) {
            p->op_cfg = NULL;
            call_refused(p, op, bytes);
            return ncclInvalidUsage;
        }
        p->op_cfg = NULL;
        if (r != -2 && p->pc.collnet && !p->op_collnet &&
            (func == BR_FUNC_ALLREDUCE || (func == BR_FUNC_REDUCESCATTER && p->pc.collnet_rs))) {
            r = collnet_fallback(p, op, bytes, &c, r);
        }
        if (r == -2) {
            BR_WARN(NCCL_TUNING, "tuner %s failed for %s of %zu bytes", p->hook_name,
                    br_func_name(func), bytes);
            return ncclInternalError;
        }
        if (r < 0) {
            no_algorithm(p, func, bytes);
            return ncclInvalidUsage;
        }
        if (p->hook != NULL) {
            log_tuner_choice(p, func, bytes, &c);
        } else if (!own) {
            p->last[func] = c;
            p->last_bytes[func] = bytes;
            p->last_valid[func] = 1;
            p->last_collnet[func] = (char)p->op_collnet;
        }
    }
    op->algo = c.algo;
    op->proto = c.proto;
    op->nchannels = c.nchannels;
    op->chunk_bytes = c.chunk_bytes;
    return ncclSuccess;
}

static int same_choice(const br_plan_choice_t *a, const br_plan_choice_t *b, int ra, int rb)
{
    return ra == rb && (ra < 0 || (a->algo == b->algo && a->proto == b->proto));
}

/* The first size in (lo, hi] whose decision differs from lo's (hi's differs). */
static size_t boundary(br_plan_t *p, int func, size_t lo, size_t hi)
{
    br_plan_choice_t a, m;
    int ra = decide(p, func, lo, &a);
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (same_choice(&a, &m, ra, decide(p, func, mid, &m))) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return hi;
}

static void size_str(char *buf, size_t len, size_t b)
{
    if (b >= (1u << 20) && b % (1u << 20) == 0) {
        snprintf(buf, len, "%zu MiB", b >> 20);
    } else if (b >= 1024 && b % 1024 == 0) {
        snprintf(buf, len, "%zu KiB", b >> 10);
    } else {
        snprintf(buf, len, "%zu B", b);
    }
}

/* One line per size range of func with the same decision, from 1 byte to 4 GiB. */
static void log_ranges(br_plan_t *p, int func)
{
    const size_t top = (size_t)1 << 32;
    size_t start = 1;
    while (start <= top) {
        br_plan_choice_t c, d;
        int rc = decide(p, func, start, &c);
        size_t end = start;
        /* Double until the decision changes, then find the exact boundary. */
        while (end < top && same_choice(&c, &d, rc, decide(p, func, end * 2, &d))) {
            end *= 2;
        }
        size_t next = end < top ? boundary(p, func, end, end * 2) : top + 1;
        char lo[32], hi[32], what[200];
        size_str(lo, sizeof(lo), start);
        size_str(hi, sizeof(hi), next - 1);
        if (rc < 0) {
            snprintf(what, sizeof(what), "nothing allowed can run it (NCCL_ALGO/NCCL_PROTO)");
        } else {
            describe(what, sizeof(what), &c);
        }
        br_plan_choice_t last;
        int rl = decide(p, func, next - 1, &last);
        char more[48] = "";
        if (rc >= 0 && rl >= 0 && last.nchannels != c.nchannels) {
            snprintf(more, sizeof(more), "; %d channels at %s", last.nchannels, hi);
        }
        BR_INFO(NCCL_TUNING, "%s %s - %s: %s%s", br_func_name(func), lo, hi, what, more);
        start = next;
    }
}

void br_plan_log_choices(br_plan_t *p)
{
    if (p->pc.rank != 0 || p->hook != NULL) {
        if (p->pc.rank == 0) {
            BR_INFO(NCCL_TUNING,
                    "tuner %s decides per call; its choices are logged as they "
                    "are made",
                    p->hook_name);
        }
        return;
    }
    BR_INFO(NCCL_TUNING,
            "cost model of %d ranks on %d host%s, tree depth %d in hosts + %d "
            "across (sizes are per rank%s):",
            p->pc.nranks, p->pc.nnodes, p->pc.nnodes == 1 ? "" : "s", p->tree_intra, p->tree_inter,
            p->pc.collnet ? "; AllReduce of a type and operation the collnet reduces" : "");
    p->op_collnet = p->pc.collnet;
    for (int f = 0; f < BR_NUM_COLL_FUNCS; f++) {
        log_ranges(p, f);
    }
}
