/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "graph_topo": graphs built from the reference topologies of tests/topo
 * (dgx-h100, pcie-4gpu, cpu-2socket, this-machine) for 1 to 64 nodes, ranks placed as
 * braid-sim places them (one per GPU, else one per NUMA node). Every ring holds every rank
 * exactly once per channel; every tree spans all ranks from one root with consistent
 * parent/child links; rings follow the fastest links (GPUs under one PCI switch are ring
 * neighbours; on the 8-NIC node each channel's ring enters and leaves the node by one NIC
 * that is PIX to the GPUs at both ends; sockets stay together); a dumped graph loads back
 * (NCCL_GRAPH_FILE) to the same rings and trees, and so does a dumped and reloaded
 * topology; a graph file written by hand in NCCL's schema loads and is followed.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph.h"
#include "topo.h"

static const char *const topo_files[] = {"dgx-h100.xml", "pcie-4gpu.xml", "cpu-2socket.xml",
                                         "this-machine.xml"};
#define NTOPOS 4
static const int node_counts[] = {1, 2, 3, 5, 8, 16, 64};
#define NNODES ((int)(sizeof(node_counts) / sizeof(node_counts[0])))

static br_topo_t *load(const char *name)
{
    char path[512];
    br_topo_t *t = NULL;
    snprintf(path, sizeof(path), "%s/%s", TOPO_DIR, name);
    ck_assert_msg(br_topo_load(path, &t) == ncclSuccess, "%s does not load", path);
    return t;
}

/* Ranks of `nodes` nodes of topology t, placed as braid-sim places them. */
static br_topo_place_t *place(const br_topo_t *t, int nodes, int *n_p)
{
    int g = br_topo_count(t, BR_TOPO_GPU), c = br_topo_count(t, BR_TOPO_CPU);
    int ppn = g > 0 ? g : c, n = ppn * nodes;
    br_topo_place_t *pl = calloc((size_t)n, sizeof(*pl));
    ck_assert_ptr_nonnull(pl);
    for (int r = 0; r < n; r++) {
        int l = r % ppn;
        pl[r].host = 100 + (uint64_t)(r / ppn);
        br_topo_place(t, l < g ? l : -1, l % c, l < g ? br_topo_gpu_spread(t, l) : l / c, &pl[r],
                      NULL, 0);
    }
    *n_p = n;
    return pl;
}

static br_graph_t *build(const br_topo_place_t *pl, int n, const char *file)
{
    br_graph_opts_t o = {.host_channels = 2, .min_channels = 1, .max_channels = 64, .file = file};
    br_graph_t *g = NULL;
    ck_assert_int_eq(br_graph_build_places(n, pl, &o, &g), ncclSuccess);
    return g;
}

static void check_rings_trees(const br_graph_t *g, const char *what)
{
    int n = g->nranks;
    char *seen = calloc((size_t)n, 1);
    ck_assert_ptr_nonnull(seen);
    for (int c = 0; c < g->nchannels; c++) {
        const int *ring = br_graph_ring(g, c), *pos = br_graph_ring_pos(g, c);
        memset(seen, 0, (size_t)n);
        for (int p = 0; p < n; p++) {
            ck_assert_msg(ring[p] >= 0 && ring[p] < n && !seen[ring[p]],
                          "%s: channel %d: rank %d twice or out of range", what, c, ring[p]);
            seen[ring[p]] = 1;
            ck_assert_int_eq(pos[ring[p]], p);
        }
        int roots = 0;
        for (int r = 0; r < n; r++) {
            const br_tree_node_t *t = br_graph_tree(g, c, r);
            roots += t->up < 0;
            if (t->up >= 0) {
                const br_tree_node_t *u = br_graph_tree(g, c, t->up);
                int found = 0;
                for (int k = 0; k < u->ndown; k++) {
                    found |= u->down[k] == r;
                }
                ck_assert_msg(found, "%s: channel %d: rank %d's parent %d does not list it", what,
                              c, r, t->up);
            }
            for (int k = 0; k < t->ndown; k++) {
                ck_assert_msg(br_graph_tree(g, c, t->down[k])->up == r,
                              "%s: channel %d: child %d of %d has another parent", what, c,
                              t->down[k], r);
            }
            /* Every rank reaches the root within n links (no cycle). */
            int x = r, steps = 0;
            while (br_graph_tree(g, c, x)->up >= 0 && steps <= n) {
                x = br_graph_tree(g, c, x)->up;
                steps++;
            }
            ck_assert_msg(steps <= n && x == g->tree_root[c],
                          "%s: channel %d: rank %d does not "
                          "reach the root",
                          what, c, r);
        }
        ck_assert_int_eq(roots, 1);
    }
    free(seen);
}

/* Two ranks of a node adjacent in the node's chain of search channel s? */
static int adjacent(const br_graph_t *g, int s, int node, int a, int b)
{
    int order[64];
    br_graph_node_order(g, s, node, order);
    for (int i = 0; i + 1 < g->node_size[node]; i++) {
        if ((order[i] == a && order[i + 1] == b) || (order[i] == b && order[i + 1] == a)) {
            return 1;
        }
    }
    return 0;
}

/* The fastest links, per reference topology. */
static void check_fast_links(const br_topo_t *t, const br_graph_t *g, int topo, const char *what)
{
    for (int s = 0; s < g->nsearch; s++) {
        for (int node = 0; node < g->nnodes; node++) {
            int first = node * g->node_size[node]; /* nodes hold equal rank counts */
            int order[64];
            br_graph_node_order(g, s, node, order);
            if (topo == 1) { /* pcie-4gpu: GPUs 0,1 share a switch, as do 2,3 */
                ck_assert_msg(adjacent(g, s, node, first, first + 1) &&
                                  adjacent(g, s, node, first + 2, first + 3),
                              "%s: search channel %d node %d: GPUs of one switch apart", what, s,
                              node);
            } else if (topo == 2) { /* cpu-2socket: one rank per socket, in socket order */
                ck_assert_int_eq(order[0], first);
            } else if (topo == 0 && g->nnodes > 1) {
                /* DGX: the ring enters and leaves by one NIC, PIX to both end GPUs. */
                const int *net = g->net + ((size_t)s * g->nnodes + node) * 2;
                int last = g->node_size[node] - 1; /* the file's NET dev i is NET i */
                ck_assert_msg(net[0] >= 0 && net[0] == net[1],
                              "%s: channel %d node %d: NIC in %d "
                              "out %d",
                              what, s, node, net[0], net[1]);
                for (int e = 0; e < 2; e++) {
                    int gpu = g->place[order[e ? last : 0]].gpu;
                    const br_topo_path_t *p =
                        br_topo_path(t, BR_TOPO_GPU, gpu, BR_TOPO_NET, net[0]);
                    ck_assert_msg(p != NULL && p->type == BR_TOPO_PATH_PIX,
                                  "%s: channel %d node %d: GPU %d at an end is %s from NIC %d",
                                  what, s, node, gpu, p ? br_topo_path_str(p->type) : "?", net[0]);
                }
            }
        }
    }
    if (topo == 0 && g->nnodes > 1) {
        /* Multi-rail: the 8 NICs of a node each carry a search channel. */
        int used = 0;
        for (int s = 0; s < g->nsearch; s++) {
            used |= 1 << g->net[(size_t)s * g->nnodes * 2];
        }
        ck_assert_int_eq(used, 0xff);
    }
}

static void check_same(const br_graph_t *a, const br_graph_t *b, const char *what)
{
    ck_assert_msg(a->nchannels == b->nchannels && a->nsearch == b->nsearch,
                  "%s: %d/%d channels, then %d/%d", what, a->nchannels, a->nsearch, b->nchannels,
                  b->nsearch);
    size_t cells = (size_t)a->nchannels * (size_t)a->nranks;
    ck_assert_msg(memcmp(a->ring, b->ring, cells * sizeof(int)) == 0, "%s: rings differ", what);
    for (size_t i = 0; i < cells; i++) {
        ck_assert_int_eq(a->tree[i].up, b->tree[i].up);
        ck_assert_int_eq(a->tree[i].ndown, b->tree[i].ndown);
    }
    ck_assert_int_eq(memcmp(a->net, b->net, (size_t)a->nsearch * a->nnodes * 2 * sizeof(int)), 0);
}

/* Loop i: topology i / NNODES on node_counts[i % NNODES] nodes. */
START_TEST(test_reference)
{
    int topo = _i / NNODES, nodes = node_counts[_i % NNODES], n;
    char what[128], path[] = "/tmp/check_graph_topo_XXXXXX";
    snprintf(what, sizeof(what), "%s x %d", topo_files[topo], nodes);
    br_topo_t *t = load(topo_files[topo]);
    br_topo_place_t *pl = place(t, nodes, &n);
    br_graph_t *g = build(pl, n, NULL);
    ck_assert_int_eq(g->nnodes, nodes);
    check_rings_trees(g, what);
    check_fast_links(t, g, topo, what);

    /* The dump loads back to the same graph. */
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(br_graph_dump(g, path), ncclSuccess);
    br_graph_t *again = build(pl, n, path);
    check_same(g, again, what);
    br_graph_free(again);

    /* So does a dumped and reloaded topology. */
    ck_assert_int_eq(br_topo_dump(t, path), ncclSuccess);
    br_topo_t *t2 = NULL;
    ck_assert_int_eq(br_topo_load(path, &t2), ncclSuccess);
    int n2;
    br_topo_place_t *pl2 = place(t2, nodes, &n2);
    ck_assert_int_eq(n2, n);
    br_graph_t *g2 = build(pl2, n2, NULL);
    check_same(g, g2, what);
    br_graph_free(g2);
    free(pl2);
    br_topo_free(t2);
    unlink(path);

    br_graph_free(g);
    free(pl);
    br_topo_free(t);
}
END_TEST

/* The channel counts NCCL's speed tables give (docs/topology.md). */
START_TEST(test_channel_counts)
{
    int n;
    br_topo_t *t = load("dgx-h100.xml");
    br_topo_place_t *pl = place(t, 1, &n);
    br_graph_t *g = build(pl, n, NULL);
    ck_assert_int_eq(g->nsearch, 12); /* 370.8 GB/s of NVLink at 60, doubled at 30 */
    ck_assert_int_eq(g->nchannels, 24);
    ck_assert(g->bw_intra == 30.0f);
    br_graph_free(g);
    free(pl);
    pl = place(t, 4, &n);
    g = build(pl, n, NULL);
    ck_assert_int_eq(g->nsearch, 8); /* 8 NICs at 48 of 50 GB/s */
    ck_assert_int_eq(g->nchannels, 16);
    br_graph_opts_t o = {.host_channels = 2, .min_channels = 1, .max_channels = 4, .file = NULL};
    br_graph_t *few = NULL;
    ck_assert_int_eq(br_graph_build_places(n, pl, &o, &few), ncclSuccess);
    ck_assert_int_eq(few->nchannels, 4); /* NCCL_MAX_NCHANNELS holds */
    check_rings_trees(few, "dgx x 4, 4 channels");
    br_graph_free(few);
    br_graph_free(g);
    free(pl);
    br_topo_free(t);
}
END_TEST

/* A graph file as NCCL writes it (hex devices, both NICs), reversed GPU order. */
START_TEST(test_nccl_schema)
{
    char path[] = "/tmp/check_graph_nccl_XXXXXX";
    int fd = mkstemp(path), n;
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "<graphs version=\"1\">\n"
               "  <graph id=\"0\" pattern=\"4\" crossnic=\"0\" nchannels=\"2\" speedintra=\"24\" "
               "speedinter=\"12\" latencyinter=\"0\" typeintra=\"PXB\" typeinter=\"PIX\" "
               "samechannels=\"0\">\n");
    for (int c = 0; c < 2; c++) {
        fprintf(f, "    <channel>\n      <net dev=\"%s\"/>\n", c ? "0x1" : "0");
        for (int gi = 3; gi >= 0; gi--) {
            fprintf(f, "      <gpu dev=\"%#x\"/>\n", (unsigned)gi);
        }
        fprintf(f, "      <net dev=\"%s\"/>\n    </channel>\n", c ? "0x1" : "0");
    }
    fprintf(f, "  </graph>\n  <graph id=\"1\" pattern=\"1\" crossnic=\"0\" nchannels=\"1\" "
               "speedintra=\"24\" speedinter=\"12\" latencyinter=\"0\" typeintra=\"PXB\" "
               "typeinter=\"PIX\" samechannels=\"1\">\n    <channel><net dev=\"0\"/><gpu "
               "dev=\"0\"/><net dev=\"0\"/></channel>\n  </graph>\n</graphs>\n");
    fclose(f);
    br_topo_t *t = load("pcie-4gpu.xml");
    br_topo_place_t *pl = place(t, 2, &n);
    br_graph_t *g = build(pl, n, path);
    ck_assert_int_eq(g->nsearch, 2);
    ck_assert_int_eq(g->nchannels, 4);
    ck_assert(g->bw_intra == 24.0f && g->bw_inter == 12.0f);
    ck_assert_int_eq(g->type_intra, BR_TOPO_PATH_PXB);
    for (int c = 0; c < g->nchannels; c++) {
        const int *ring = br_graph_ring(g, c);
        for (int p = 0; p < 8; p++) {
            ck_assert_int_eq(ring[p], (p / 4) * 4 + 3 - p % 4);
        }
    }
    ck_assert_int_eq(g->net[(size_t)1 * g->nnodes * 2], 1); /* channel 1 enters by NIC 1 */
    check_rings_trees(g, "NCCL's schema");
    br_graph_free(g);

    /* A file that does not fit the ranks is refused. */
    br_topo_place_t *three = place(t, 1, &n);
    br_graph_opts_t o = {.host_channels = 2, .min_channels = 1, .max_channels = 64, .file = path};
    ck_assert_int_eq(br_graph_build_places(3, three, &o, &g), ncclInvalidUsage);
    o.file = "/nonexistent/graph.xml";
    ck_assert_int_eq(br_graph_build_places(4, three, &o, &g), ncclInvalidUsage);
    free(three);
    unlink(path);
    free(pl);
    br_topo_free(t);
}
END_TEST

static Suite *graph_topo_suite(void)
{
    Suite *s = suite_create("graph_topo");
    TCase *tc = tcase_create("reference");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_reference, 0, NTOPOS * NNODES);
    tcase_add_test(tc, test_channel_counts);
    tcase_add_test(tc, test_nccl_schema);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(graph_topo_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
