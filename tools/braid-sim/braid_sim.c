/* SPDX-License-Identifier: Apache-2.0 */
/*
 * braid-sim: plan a cluster that is not here. From topology files (NCCL's XML schema) for
 * M nodes, the same or mixed, it places N ranks (one per GPU, or per NUMA node without
 * GPUs), builds the communicator's rings, trees and channels exactly as init does
 * (core/graph), and prints, without moving data, the cost model's predicted time and bus
 * bandwidth per collective and size in nccl-tests' table shape, with the algorithm and
 * protocol chosen and what a tuner plugin (NCCL_TUNER_PLUGIN) changed. Single-threaded.
 *
 *   braid-sim -t tests/topo/dgx-h100.xml -n 64 -c allreduce -b 8 -e 8G -f 4
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "graph.h"
#include "plan.h"
#include "plugin.h"
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
    const char *dump;
} sim_opts_t;

static const char *const func_names[BR_NUM_COLL_FUNCS] = {"broadcast", "reduce", "allgather",
                                                          "reducescatter", "allreduce"};

static size_t parse_size(const char *s)
{
    char *end = NULL;
    double v = strtod(s, &end);
    switch (end != NULL ? *end : '\0') {
    case 'K':
    case 'k': v *= 1024.0; break;
    case 'M':
    case 'm': v *= 1024.0 * 1024.0; break;
    case 'G':
    case 'g': v *= 1024.0 * 1024.0 * 1024.0; break;
    default: break;
    }
    return (size_t)v;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: braid-sim -t topo.xml[,topo2.xml...] [-n nodes] [-p ranks per node]\n"
            "                 [-c allreduce,allgather,...|all] [-b minbytes] [-e maxbytes]\n"
            "                 [-f factor] [-r] [-L] [-d graph.xml]\n"
            "  -t  topology files; node i takes file i %% count (mixed clusters)\n"
            "  -n  nodes (1)            -p  ranks per node (default: its GPUs, else NUMA nodes)\n"
            "  -c  collectives (allreduce)  -b/-e/-f  sizes as nccl-tests (8, 128M, 2)\n"
            "  -r  print every channel's ring and tree  -L  allow LL128 (the executor has it)\n"
            "  -d  write node 0's graphs (NCCL_GRAPH_DUMP_FILE format)\n"
            "  NCCL_TUNER_PLUGIN, NCCL_ALGO, NCCL_PROTO, NCCL_MIN/MAX_NCHANNELS and\n"
            "  NCCL_GRAPH_FILE apply as at init.\n");
}

static int parse_args(int argc, char **argv, sim_opts_t *o)
{
    int c;
    memset(o, 0, sizeof(*o));
    o->nnodes = 1;
    o->minb = 8;
    o->maxb = (size_t)128 << 20;
    o->factor = 2.0;
    while ((c = getopt(argc, argv, "t:n:p:c:b:e:f:rLd:h")) != -1) {
        switch (c) {
        case 't':
            for (char *tok = strtok(optarg, ","); tok && o->nfiles < SIM_MAX_FILES;
                 tok = strtok(NULL, ",")) {
                o->files[o->nfiles++] = tok;
            }
            break;
        case 'n': o->nnodes = atoi(optarg); break;
        case 'p': o->ppn = atoi(optarg); break;
        case 'c':
            for (char *tok = strtok(optarg, ","); tok; tok = strtok(NULL, ",")) {
                for (int f = 0; f < BR_NUM_COLL_FUNCS; f++) {
                    if (strcasecmp(tok, "all") == 0 || strcasecmp(tok, func_names[f]) == 0) {
                        o->funcs[o->nfuncs++ % BR_NUM_COLL_FUNCS] = f;
                    }
                }
            }
            break;
        case 'b': o->minb = parse_size(optarg); break;
        case 'e': o->maxb = parse_size(optarg); break;
        case 'f': o->factor = atof(optarg); break;
        case 'r': o->show_rings = 1; break;
        case 'L': o->ll128 = 1; break;
        case 'd': o->dump = optarg; break;
        default: usage(); return -1;
        }
    }
    if (o->nfuncs == 0) {
        o->funcs[o->nfuncs++] = BR_FUNC_ALLREDUCE;
    }
    o->nfuncs = o->nfuncs > BR_NUM_COLL_FUNCS ? BR_NUM_COLL_FUNCS : o->nfuncs;
    if (o->nfiles == 0 || o->nnodes < 1 || o->factor <= 1.0 || o->minb > o->maxb) {
        usage();
        return -1;
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

static ncclResult_t print_table(br_plan_t *plan, const sim_opts_t *o, int n, int tuned)
{
    for (int k = 0; k < o->nfuncs; k++) {
        int f = o->funcs[k], per_rank = f == BR_FUNC_ALLGATHER || f == BR_FUNC_REDUCESCATTER;
        printf("#\n# %s, float, sum%s\n", func_names[f],
               tuned ? "; model = the choice without the tuner" : "");
        printf("#%12s %12s %6s %6s %5s %10s %8s %8s  %-16s %3s%s\n", "size(B)", "count", "type",
               "redop", "root", "time(us)", "algbw", "busbw", "algo/proto", "nch",
               tuned ? "  model" : "");
        for (size_t size = o->minb; size <= o->maxb; size = (size_t)((double)size * o->factor)) {
            size_t count = size / 4 / (per_rank ? (size_t)n : 1);
            size_t bytes = count * 4; /* br_op_bytes: per rank for AllGather/ReduceScatter */
            int a, pr, nch, ma, mpr, mnch;
            float us, mus;
            if (count == 0) {
                continue;
            }
            ncclResult_t res = br_plan_predict(plan, f, bytes, 1, &a, &pr, &nch, &us);
            if (res != ncclSuccess) {
                printf("%13zu %12zu  nothing can run it (NCCL_ALGO/NCCL_PROTO)\n", size, count);
                continue;
            }
            double t = us > 0.0f ? us : 0.001, total = (double)count * 4 * (per_rank ? n : 1);
            double algbw = total / (t * 1e3);
            char ap[32];
            snprintf(ap, sizeof(ap), "%s/%s", br_algo_name(a), br_proto_name(pr));
            printf("%13zu %12zu %6s %6s %5d %10.2f %8.2f %8.2f  %-16s %3d", size, count, "float",
                   "sum", f <= BR_FUNC_REDUCE ? 0 : -1, t, algbw, algbw * bus_factor(f, n), ap,
                   nch);
            if (tuned &&
                br_plan_predict(plan, f, bytes, 0, &ma, &mpr, &mnch, &mus) == ncclSuccess) {
                printf("  %s/%s %.2f us%s", br_algo_name(ma), br_proto_name(mpr), (double)mus,
                       ma != a || mpr != pr || mnch != nch ? " (tuner changed it)" : "");
            }
            printf("\n");
            if (size == o->maxb || (size_t)((double)size * o->factor) == size) {
                break;
            }
        }
    }
    return ncclSuccess;
}

static ncclResult_t plan_and_print(const sim_opts_t *o, const br_graph_t *g)
{
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
        res = print_table(plan, o, g->nranks, tuner != NULL);
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
    if (plan_and_print(&o, g) != ncclSuccess) {
        fprintf(stderr, "braid-sim: %s\n", br_log_last_error());
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
