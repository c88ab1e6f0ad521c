/* SPDX-License-Identifier: Apache-2.0 */
/*
 * braid-sim: plan a cluster that is not here. From topology files (NCCL's XML schema) for
 * M nodes, the same or mixed, it places N ranks (one per GPU, or per NUMA node without
 * GPUs), builds the communicator's rings, trees and channels exactly as init does
 * (core/graph), and prints, without moving data, the cost model's predicted time and bus
 * bandwidth per collective and size in nccl-tests' table shape, with the algorithm and
 * protocol chosen and what a tuner plugin (NCCL_TUNER_PLUGIN) changed. Single-threaded.
 * --model braid (the default) predicts what Braid's executors run (core/plan); --model nccl
 * what NVIDIA's NCCL would run and reach (NVLS, NVLSTree, CollNet, PAT: sim_nccl.c).
 *
 *   braid-sim -t tests/topo/dgx-h100.xml -n 64 -c allreduce -b 8 -e 8G -f 4
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "graph.h"
#include "plan.h"
#include "plugin.h"
#include "sim_nccl.h"
#include "topo.h"
#include "util.h"

#define SIM_MAX_FILES 16

typedef struct {
    const char *files[SIM_MAX_FILES];
    int nfiles, nnodes, ppn; /* ppn 0: one rank per GPU (else per NUMA node) */
    int funcs[BR_NUM_COLL_FUNCS], nfuncs;
    size_t minb, maxb;
    double factor;
    int show_rings, ll128;
    int nccl;         /* --model nccl: what NVIDIA's NCCL would run (sim_nccl.c) */
    int nccl_version; /* --nccl-version 2.x: x, the release whose constants it uses */
    const char *dump;
} sim_opts_t;

static const char *const func_names[BR_NUM_COLL_FUNCS] = {"broadcast", "reduce", "allgather",
                                                          "reducescatter", "allreduce"};

/*
 * Argument parsing. Every value is read whole: a number with trailing text, out of range or
 * missing is refused with a message naming the option and the value (exit status 2), as an
 * unknown collective name is, rather than becoming 0 or AllReduce.
 */

/* A decimal integer in [lo, hi]. */
static int parse_int(int opt, const char *s, int lo, int hi, int *v_p)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi) {
        fprintf(stderr, "braid-sim: -%c %s: not an integer from %d to %d\n", opt, s, lo, hi);
        return -1;
    }
    *v_p = (int)v;
    return 0;
}

/* A size as nccl-tests reads one: bytes, with an optional K, M or G suffix (binary units). */
static int parse_size(int opt, const char *s, size_t *v_p)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end), unit = 1.0;
    if (end != s) {
        switch (*end) {
        case 'K':
        case 'k': unit = 1024.0, end++; break;
        case 'M':
        case 'm': unit = 1024.0 * 1024.0, end++; break;
        case 'G':
        case 'g': unit = 1024.0 * 1024.0 * 1024.0, end++; break;
        default: break;
        }
    }
    /* !(v >= 0) also refuses NaN; the upper bound keeps size * factor within size_t. */
    if (end == s || *end != '\0' || errno != 0 || !(v >= 0.0) ||
        v * unit > (double)(SIZE_MAX / 4)) {
        fprintf(stderr, "braid-sim: -%c %s: not a size (bytes, with an optional K, M or G)\n", opt,
                s);
        return -1;
    }
    *v_p = (size_t)(v * unit);
    return 0;
}

/* nccl-tests' step factor, which braid-sim also takes as a fraction: above 1 and finite. */
static int parse_factor(const char *s, double *v_p)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !(v > 1.0) || v > 1e6) {
        fprintf(stderr, "braid-sim: -f %s: not a step factor (a number above 1)\n", s);
        return -1;
    }
    *v_p = v;
    return 0;
}

/* Comma-separated collective names, or "all"; each collective is listed once, in the order
 * first named. */
static int parse_funcs(char *arg, sim_opts_t *o)
{
    int any = 0;
    for (char *tok = strtok(arg, ","); tok; tok = strtok(NULL, ","), any = 1) {
        int all = strcasecmp(tok, "all") == 0, known = all;
        for (int f = 0; f < BR_NUM_COLL_FUNCS; f++) {
            if (!all && strcasecmp(tok, func_names[f]) != 0) {
                continue;
            }
            known = 1;
            int seen = 0;
            for (int k = 0; k < o->nfuncs; k++) {
                seen |= o->funcs[k] == f;
            }
            if (!seen) {
                o->funcs[o->nfuncs++] = f;
            }
        }
        if (!known) {
            fprintf(stderr,
                    "braid-sim: -c %s: unknown collective; valid names: broadcast, reduce, "
                    "allgather, reducescatter, allreduce, all\n",
                    tok);
            return -1;
        }
    }
    if (!any) {
        fprintf(stderr, "braid-sim: -c needs a collective name\n");
        return -1;
    }
    return 0;
}

static int parse_files(char *arg, sim_opts_t *o)
{
    for (char *tok = strtok(arg, ","); tok; tok = strtok(NULL, ",")) {
        if (o->nfiles == SIM_MAX_FILES) {
            fprintf(stderr, "braid-sim: -t: more than %d topology files\n", SIM_MAX_FILES);
            return -1;
        }
        o->files[o->nfiles++] = tok;
    }
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: braid-sim -t topo.xml[,topo2.xml...] [-n nodes] [-p ranks per node]\n"
            "                 [-c allreduce,allgather,...|all] [-b minbytes] [-e maxbytes]\n"
            "                 [-f factor] [-r] [-L] [-d graph.xml] [--model braid|nccl]\n"
            "                 [--nccl-version 2.x]\n"
            "  -t  topology files; node i takes file i %% count (mixed clusters)\n"
            "  -n  nodes (1)            -p  ranks per node (default: its GPUs, else NUMA nodes)\n"
            "  -c  collectives: broadcast, reduce, allgather, reducescatter, allreduce or all\n"
            "      (allreduce)\n"
            "  -b/-e/-f  sizes as nccl-tests (8, 128M, 2); -b 0 prints a row for 0 bytes, then\n"
            "      goes on from 4 bytes (one float)\n"
            "  -r  print every channel's ring and tree  -L  allow LL128 (the executor has it)\n"
            "  -d  write node 0's graphs (NCCL_GRAPH_DUMP_FILE format)\n"
            "  --model braid (default): what Braid's executors run (Ring, Tree; LL128 with -L)\n"
            "  --model nccl: what NVIDIA's NCCL would run (NVLS, NVLSTree, CollNet, PAT where the\n"
            "      topology allows, LL128 by NCCL's rule); NCCL_ALGO/NCCL_PROTO select among them\n"
            "  --nccl-version 2.x: the NCCL release whose tuning constants --model nccl uses\n"
            "      (2.19 to 2.30; default 2.30)\n"
            "  NCCL_TUNER_PLUGIN, NCCL_ALGO, NCCL_PROTO, NCCL_MIN/MAX_NCHANNELS and\n"
            "  NCCL_GRAPH_FILE apply as at init.\n");
}

static int parse_opt(int c, char *arg, sim_opts_t *o)
{
    switch (c) {
    case 't': return parse_files(arg, o);
    case 'n': return parse_int(c, arg, 1, 1 << 16, &o->nnodes);
    case 'p': return parse_int(c, arg, 1, 1 << 12, &o->ppn);
    case 'c': return parse_funcs(arg, o);
    case 'b': return parse_size(c, arg, &o->minb);
    case 'e': return parse_size(c, arg, &o->maxb);
    case 'f': return parse_factor(arg, &o->factor);
    case 'r': o->show_rings = 1; return 0;
    case 'L': o->ll128 = 1; return 0;
    case 'd': o->dump = arg; return 0;
    case 'm':
        if (strcmp(arg, "nccl") != 0 && strcmp(arg, "braid") != 0) {
            fprintf(stderr, "braid-sim: --model %s: not a model; valid: braid, nccl\n", arg);
            return -1;
        }
        o->nccl = strcmp(arg, "nccl") == 0;
        return 0;
    case 'V': return sim_nccl_version_parse(arg, &o->nccl_version);
    case 'h': usage(); return -1;
    default: /* getopt has named the option */ usage(); return -1;
    }
}

static int parse_args(int argc, char **argv, sim_opts_t *o)
{
    static const struct option longopts[] = {{"model", required_argument, NULL, 'm'},
                                             {"nccl-version", required_argument, NULL, 'V'},
                                             {NULL, 0, NULL, 0}};
    int c;
    memset(o, 0, sizeof(*o));
    o->nnodes = 1;
    o->minb = 8;
    o->maxb = (size_t)128 << 20;
    o->factor = 2.0;
    while ((c = getopt_long(argc, argv, "t:n:p:c:b:e:f:rLd:h", longopts, NULL)) != -1) {
        if (parse_opt(c, optarg, o) != 0) {
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "braid-sim: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (o->nfiles == 0) {
        fprintf(stderr, "braid-sim: -t names no topology file\n");
        usage();
        return -1;
    }
    if (o->minb > o->maxb) {
        fprintf(stderr, "braid-sim: -b %zu is above -e %zu\n", o->minb, o->maxb);
        return -1;
    }
    if (o->nccl_version != 0 && !o->nccl) {
        fprintf(stderr, "braid-sim: --nccl-version applies to --model nccl only\n");
        return -1;
    }
    if (o->nccl_version == 0) {
        o->nccl_version = SIM_NCCL_VERSION_MAX;
    }
    if (o->nfuncs == 0) {
        o->funcs[o->nfuncs++] = BR_FUNC_ALLREDUCE;
    }
    return 0;
}

/* Place every rank of every node: rank r of node i on GPU r (or NUMA node r % count). */
static ncclResult_t place_all(const sim_opts_t *o, br_topo_t **topos, br_topo_place_t **places_p,
                              int *nranks_p)
{
    int total = 0;
    for (int i = 0; i < o->nnodes; i++) {
        const br_topo_t *t = topos[i % o->nfiles];
        int g = br_topo_count(t, BR_TOPO_GPU), c = br_topo_count(t, BR_TOPO_CPU);
        total += o->ppn > 0 ? o->ppn : (g > 0 ? g : (c > 0 ? c : 1));
    }
    br_topo_place_t *pl = NULL;
    BR_CHECK(br_calloc(&pl, (size_t)total, "sim places"));
    for (int i = 0, r = 0; i < o->nnodes; i++) {
        const br_topo_t *t = topos[i % o->nfiles];
        int g = br_topo_count(t, BR_TOPO_GPU), c = br_topo_count(t, BR_TOPO_CPU);
        int ppn = o->ppn > 0 ? o->ppn : (g > 0 ? g : (c > 0 ? c : 1));
        for (int l = 0; l < ppn; l++, r++) {
            int gpu = l < g ? l : -1, cpu = c > 0 ? l % c : -1;
            int spread = gpu >= 0 ? br_topo_gpu_spread(t, gpu) : (c > 0 ? l / c : l);
            pl[r].host = (uint64_t)i + 1;
            br_topo_place(t, gpu, cpu, spread, &pl[r], NULL, 0);
        }
    }
    *places_p = pl;
    *nranks_p = total;
    return ncclSuccess;
}

static void print_graph(const br_graph_t *g, int all)
{
    printf("# %d ranks on %d nodes: %d channels (%d searched), %.1f/%.1f GB/s per searched "
           "channel, paths %s/%s, %s\n",
           g->nranks, g->nnodes, g->nchannels, g->nsearch, (double)g->bw_intra, (double)g->bw_inter,
           br_topo_path_str(g->type_intra), br_topo_path_str(g->type_inter),
           g->gpus ? "GPUs (NCCL's model)" : "no GPUs (host model)");
    int *order = malloc((size_t)g->node_size[0] * sizeof(int));
    for (int s = 0; order != NULL && s < g->nsearch; s++) {
        const int *net = g->net + (size_t)s * (size_t)g->nnodes * 2;
        br_graph_node_order(g, s, 0, order);
        printf("#  search %2d, node 0:", s);
        if (net[0] >= 0) {
            printf(" NET/%d", net[0]);
        }
        for (int i = 0; i < g->node_size[0]; i++) {
            printf(" %s/%d", g->place[order[i]].gpu >= 0 ? "GPU" : "CPU", order[i]);
        }
        if (net[1] >= 0) {
            printf(" NET/%d", net[1]);
        }
        printf("\n");
    }
    free(order);
    printf("#  tree depth: %d (channel 0), %d (channel 1)\n", br_graph_tree_depth(g, 0),
           br_graph_tree_depth(g, g->nchannels > 1 ? 1 : 0));
    for (int c = 0; all && c < g->nchannels; c++) {
        printf("#  ring %02d:", c);
        for (int p = 0; p < g->nranks; p++) {
            printf(" %d", br_graph_ring(g, c)[p]);
        }
        printf("\n#  tree %02d:", c);
        for (int r = 0; r < g->nranks; r++) {
            const br_tree_node_t *t = br_graph_tree(g, c, r);
            printf(" %d/%d/%d->%d->%d", t->down[0], t->down[1], t->down[2], r, t->up);
        }
        printf("\n");
    }
}

/* nccl-tests' bus bandwidth factor. */
static double bus_factor(int func, int n)
{
    switch (func) {
    case BR_FUNC_ALLREDUCE: return 2.0 * (n - 1) / n;
    case BR_FUNC_ALLGATHER:
    case BR_FUNC_REDUCESCATTER: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

/*
 * The size after `size`. nccl-tests multiplies by the factor, and from -b 0 would multiply 0
 * for ever: braid-sim prints the 0-byte row, then goes on at one float (4 bytes), the first
 * size that carries data. A factor too small to move a small size on moves it by a byte, so
 * every table ends.
 */
static size_t next_size(size_t size, double factor)
{
    if (size == 0) {
        return sizeof(float);
    }
    double next = (double)size * factor;
    if (next >= (double)(SIZE_MAX / 2)) {
        return SIZE_MAX / 2; /* above any -e parse_size takes: the table ends */
    }
    return (size_t)next > size ? (size_t)next : size + 1;
}

/* One row's choice: Braid's plan (nm NULL) or NCCL's model. */
static ncclResult_t predict(br_plan_t *plan, const sim_nccl_t *nm, int f, size_t bytes, char *ap,
                            size_t len, int *nch, float *us)
{
    int a, pr;
    if (nm != NULL) {
        double t;
        if (sim_nccl_predict(nm, f, bytes, &a, &pr, nch, &t) != 0) {
            return ncclInvalidUsage;
        }
        *us = (float)t;
        snprintf(ap, len, "%s/%s", sim_nccl_algo_name(a), br_proto_name(pr));
        return ncclSuccess;
    }
    ncclResult_t res = br_plan_predict(plan, f, bytes, 1, &a, &pr, nch, us);
    if (res == ncclSuccess) {
        snprintf(ap, len, "%s/%s", br_algo_name(a), br_proto_name(pr));
    }
    return res;
}

static ncclResult_t print_table(br_plan_t *plan, const sim_nccl_t *nm, const sim_opts_t *o, int n,
                                int tuned)
{
    for (int k = 0; k < o->nfuncs; k++) {
        int f = o->funcs[k], per_rank = f == BR_FUNC_ALLGATHER || f == BR_FUNC_REDUCESCATTER;
        printf("#\n# %s, float, sum%s\n", func_names[f],
               tuned ? "; model = the choice without the tuner" : "");
        printf("#%12s %12s %6s %6s %5s %10s %8s %8s  %-16s %3s%s\n", "size(B)", "count", "type",
               "redop", "root", "time(us)", "algbw", "busbw", "algo/proto", "nch",
               tuned ? "  model" : "");
        for (size_t size = o->minb; size <= o->maxb; size = next_size(size, o->factor)) {
            size_t count = size / 4 / (per_rank ? (size_t)n : 1);
            size_t bytes = count * 4; /* br_op_bytes: per rank for AllGather/ReduceScatter */
            int nch, ma, mpr, mnch;
            float us, mus;
            if (size == 0) {
                /* NCCL returns from a call of count 0 at once, launching nothing. */
                printf("%13d %12d %6s %6s %5d %10.2f %8.2f %8.2f  %-16s %3d\n", 0, 0, "float",
                       "sum", f <= BR_FUNC_REDUCE ? 0 : -1, 0.0, 0.0, 0.0, "none", 0);
                continue;
            }
            if (count == 0) {
                continue; /* less than a float per rank */
            }
            char ap[32];
            ncclResult_t res = predict(plan, nm, f, bytes, ap, sizeof(ap), &nch, &us);
            if (res != ncclSuccess) {
                printf("%13zu %12zu  nothing can run it (NCCL_ALGO/NCCL_PROTO)\n", size, count);
                continue;
            }
            double t = us > 0.0f ? us : 0.001, total = (double)count * 4 * (per_rank ? n : 1);
            double algbw = total / (t * 1e3);
            printf("%13zu %12zu %6s %6s %5d %10.2f %8.2f %8.2f  %-16s %3d", size, count, "float",
                   "sum", f <= BR_FUNC_REDUCE ? 0 : -1, t, algbw, algbw * bus_factor(f, n), ap,
                   nch);
            if (tuned &&
                br_plan_predict(plan, f, bytes, 0, &ma, &mpr, &mnch, &mus) == ncclSuccess) {
                char mp[32];
                snprintf(mp, sizeof(mp), "%s/%s", br_algo_name(ma), br_proto_name(mpr));
                printf("  %s %.2f us%s", mp, (double)mus,
                       strcmp(mp, ap) != 0 || mnch != nch ? " (tuner changed it)" : "");
            }
            printf("\n");
        }
    }
    return ncclSuccess;
}

/* --model nccl: NCCL's own table (sim_nccl.c), no plan and no tuner. */
static ncclResult_t nccl_print(const sim_opts_t *o, const br_graph_t *g, const br_topo_t *topo0)
{
    sim_nccl_t nm;
    if (sim_nccl_init(&nm, g, topo0, o->nccl_version) != 0) {
        return ncclInvalidUsage;
    }
    printf("# model nccl: what NVIDIA's NCCL would choose and reach (its tuning model; Braid's\n"
           "#   executors run Ring and Tree only); %s\n",
           nm.why);
    return print_table(NULL, &nm, o, g->nranks, 0);
}

static ncclResult_t plan_and_print(const sim_opts_t *o, const br_graph_t *g, const br_topo_t *topo0)
{
    if (o->nccl) {
        return nccl_print(o, g, topo0);
    }
    printf("# model braid: what Braid's executors run (Ring, Tree; LL128 %s)\n",
           o->ll128 ? "allowed by -L" : "off without -L");
    br_plan_comm_t pc;
    br_plan_t *plan = NULL;
    br_tuner_t *tuner = NULL;
    memset(&pc, 0, sizeof(pc));
    pc.nranks = g->nranks;
    pc.nnodes = g->nnodes;
    for (int i = 0; i < g->nnodes; i++) {
        pc.local_ranks = g->node_size[i] > pc.local_ranks ? g->node_size[i] : pc.local_ranks;
    }
    pc.nchannels = g->nchannels;
    pc.intra_hw = g->type_intra <= BR_TOPO_PATH_NVL ? BR_HW_NVLINK : BR_HW_PCI;
    pc.net_gbps = g->bw_inter > 0.0f ? g->bw_inter : 1.25;
    pc.step_bytes = (size_t)(4 << 20) / 8; /* NCCL_BUFFSIZE over NCCL_STEPS */
    pc.ll_bytes = (size_t)(512 << 10) / 8 / 2;
    pc.pipeline = 1;
    pc.ring_net = g->nnodes > 1;
    pc.oneshot_bytes = 0;
    pc.share = 1.0;
    pc.gpus = g->gpus;
    pc.sm = g->sm;
    pc.cpu_vendor = g->cpu_vendor;
    pc.graph_nch = g->nsearch;
    pc.bw_intra = g->bw_intra;
    pc.bw_inter = g->bw_inter;
    pc.ll128 = o->ll128;
    BR_CHECK(br_plan_create(&pc, g, &plan));
    br_tuner_request_t treq;
    memset(&treq, 0, sizeof(treq));
    treq.plugin = BR_PARAM_STR(TUNER_PLUGIN);
    treq.comm_hash = 0x6272616964ULL;
    treq.nranks = (size_t)g->nranks;
    treq.nnodes = (size_t)g->nnodes;
    treq.nvl_domains = g->nnodes;
    treq.min_ranks_per_nvl = treq.max_ranks_per_nvl = 1;
    treq.constants = br_plan_constants(plan);
    ncclResult_t res = br_plugin_tuner_open(&treq, &tuner);
    if (res == ncclSuccess) {
        if (tuner != NULL) {
            br_plan_set_tuner(plan, br_plugin_tuner_hook, tuner, tuner->name);
            printf("# tuner %s (v%d) from %s\n", tuner->name, tuner->version, tuner->path);
        }
        res = print_table(plan, NULL, o, g->nranks, tuner != NULL);
    }
    if (tuner != NULL) {
        br_plugin_tuner_close(tuner);
    }
    br_plan_free(plan);
    return res;
}

int main(int argc, char **argv)
{
    sim_opts_t o;
    br_topo_t *topos[SIM_MAX_FILES] = {NULL};
    br_topo_place_t *places = NULL;
    br_graph_t *g = NULL;
    int nranks = 0, rc = 1;

    if (parse_args(argc, argv, &o) != 0) {
        return 2;
    }
    uint64_t t0 = br_time_ns();
    for (int i = 0; i < o.nfiles; i++) {
        if (br_topo_load(o.files[i], &topos[i]) != ncclSuccess) {
            fprintf(stderr, "braid-sim: %s: %s\n", o.files[i], br_log_last_error());
            goto out;
        }
    }
    br_graph_opts_t go = {.host_channels = (int)BR_PARAM_INT(NCHANNELS),
                          .min_channels = (int)BR_PARAM_INT(MIN_NCHANNELS),
                          .max_channels = (int)BR_PARAM_INT(MAX_NCHANNELS),
                          .file = BR_PARAM_STR(GRAPH_FILE)};
    if (place_all(&o, topos, &places, &nranks) != ncclSuccess ||
        br_graph_build_places(nranks, places, &go, &g) != ncclSuccess) {
        fprintf(stderr, "braid-sim: %s\n", br_log_last_error());
        goto out;
    }
    double plan_ms = (double)(br_time_ns() - t0) * 1e-6;
    printf("# braid-sim: %d node%s (%s%s), %d ranks; topology and graph in %.1f ms\n", o.nnodes,
           o.nnodes == 1 ? "" : "s", o.files[0], o.nfiles > 1 ? ", ..." : "", nranks, plan_ms);
    print_graph(g, o.show_rings);
    br_graph_log(g, 0); /* the init transcript, at NCCL_DEBUG=INFO */
    if (o.dump != NULL && br_graph_dump(g, o.dump) != ncclSuccess) {
        goto out;
    }
    if (plan_and_print(&o, g, topos[0]) != ncclSuccess) {
        if (!o.nccl) {
            fprintf(stderr, "braid-sim: %s\n", br_log_last_error());
        }
        goto out;
    }
    printf("# planned in %.1f ms\n", (double)(br_time_ns() - t0) * 1e-6);
    rc = 0;
out:
    br_graph_free(g);
    free(places);
    for (int i = 0; i < o.nfiles; i++) {
        br_topo_free(topos[i]);
    }
    return rc;
}
