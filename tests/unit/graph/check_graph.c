/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "graph": the rings and trees of core/graph for 1 to 64 ranks, 1 to 4
 * channels and several host layouts. Every ring holds every rank once per channel with
 * the ranks of a host adjacent; every tree spans all ranks from one root with consistent
 * parent/child links, chains inside hosts (binary trees where the hosts' links are the
 * network) and NCCL's double binary tree across them; the
 * helpers agree with a brute-force search; the XML dump names every rank of every
 * channel; bad arguments are refused.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph.h"

enum { L_ONE_HOST, L_OWN_HOST, L_TWO_PER_HOST, L_ROUND_ROBIN2, L_ROUND_ROBIN3, L_UNEVEN, L_COUNT };

static const char *const layout_names[L_COUNT] = {"one host",           "a host each",
                                                  "two per host",       "round-robin over 2",
                                                  "round-robin over 3", "uneven 3,1,2"};

static const int rank_counts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17, 31, 32, 33, 63, 64};
#define NCOUNTS ((int)(sizeof(rank_counts) / sizeof(rank_counts[0])))

static void hosts_fill(int layout, int n, uint64_t *h)
{
    static const int uneven[] = {0, 0, 0, 1, 2, 2};
    for (int r = 0; r < n; r++) {
        switch (layout) {
        case L_ONE_HOST: h[r] = 7; break;
        case L_OWN_HOST: h[r] = 1000 + (uint64_t)r; break;
        case L_TWO_PER_HOST: h[r] = (uint64_t)(r / 2); break;
        case L_ROUND_ROBIN2: h[r] = (uint64_t)(r % 2); break;
        case L_ROUND_ROBIN3: h[r] = (uint64_t)(r % 3); break;
        default: h[r] = (uint64_t)(uneven[r % 6] + 3 * (r / 6)); break;
        }
    }
}

static br_graph_t *build(int layout, int n, int nch)
{
    uint64_t h[64];
    br_graph_t *g = NULL;
    hosts_fill(layout, n, h);
    ck_assert_int_eq(br_graph_build(n, h, nch, &g), ncclSuccess);
    ck_assert_ptr_nonnull(g);
    return g;
}

/* The same where the links inside hosts are the network: binary trees inside hosts. */
static br_graph_t *build_net(int layout, int n, int nch)
{
    uint64_t h[64];
    br_topo_place_t pl[64];
    br_graph_opts_t o = {.host_channels = nch, .min_channels = 1, .max_channels = 64,
                         .intra_net = 1};
    br_graph_t *g = NULL;
    hosts_fill(layout, n, h);
    memset(pl, 0, sizeof(pl));
    for (int r = 0; r < n; r++) {
        pl[r].host = h[r];
        pl[r].gpu = pl[r].gpu_dev = pl[r].cpu = -1;
        pl[r].net = pl[r].net_dev = pl[r].intra_type = -1;
        pl[r].net_path = BR_TOPO_PATH_DIS;
    }
    ck_assert_int_eq(br_graph_build_places(n, pl, &o, &g), ncclSuccess);
    ck_assert_int_eq(g->intra_net, 1);
    return g;
}

static void check_rings(const br_graph_t *g, const uint64_t *h, const char *what)
{
    int n = g->nranks;
    for (int c = 0; c < g->nchannels; c++) {
        const int *ring = br_graph_ring(g, c), *pos = br_graph_ring_pos(g, c);
        int seen[64] = {0}, runs = 0;
        for (int p = 0; p < n; p++) {
            ck_assert_msg(ring[p] >= 0 && ring[p] < n && !seen[ring[p]],
                          "%s: channel %d position %d holds %d twice or out of range", what, c, p,
                          ring[p]);
            seen[ring[p]] = 1;
            ck_assert_msg(pos[ring[p]] == p, "%s: ring_pos is not the inverse", what);
            runs += p == 0 || h[ring[p]] != h[ring[p - 1]];
        }
        ck_assert_msg(runs == g->nnodes,
                      "%s: channel %d: the ranks of a host are not adjacent "
                      "(%d runs for %d hosts)",
                      what, c, runs, g->nnodes);
    }
}

static void check_tree_links(const br_graph_t *g, int c, const char *what)
{
    int n = g->nranks, roots = 0;
    for (int r = 0; r < n; r++) {
        const br_tree_node_t *t = br_graph_tree(g, c, r);
        ck_assert_msg(t->ndown >= 0 && t->ndown <= BR_MAX_TREE_ARITY, "%s: ndown %d", what,
                      t->ndown);
        for (int k = t->ndown; k < BR_MAX_TREE_ARITY; k++) {
            ck_assert_msg(t->down[k] == -1, "%s: rank %d down[%d] unused but %d", what, r, k,
                          t->down[k]);
        }
        for (int k = 0; k < t->ndown; k++) {
            int d = t->down[k];
            ck_assert_msg(d >= 0 && d < n && d != r && br_graph_tree(g, c, d)->up == r,
                          "%s: channel %d: rank %d lists child %d whose parent is not %d", what, c,
                          r, d, r);
        }
        if (t->up < 0) {
            roots++;
            ck_assert_msg(g->tree_root[c] == r, "%s: root %d but tree_root %d", what, r,
                          g->tree_root[c]);
            continue;
        }
        const br_tree_node_t *u = br_graph_tree(g, c, t->up);
        int listed = 0;
        for (int k = 0; k < u->ndown; k++) {
            listed += u->down[k] == r;
        }
        ck_assert_msg(listed == 1, "%s: channel %d: rank %d's parent %d lists it %d times", what, c,
                      r, t->up, listed);
        /* Inside a host, a rank hangs from its predecessor in the host (a chain), or
         * anywhere in the host (binary trees: check_host_trees). */
        if (g->node_of[t->up] == g->node_of[r] && !g->intra_net) {
            int pred = -1;
            for (int q = 0; q < r; q++) {
                pred = g->node_of[q] == g->node_of[r] ? q : pred;
            }
            ck_assert_msg(t->up == pred, "%s: rank %d's parent %d is not its predecessor %d", what,
                          r, t->up, pred);
        } else if (g->node_of[t->up] != g->node_of[r]) {
            ck_assert_msg(g->node_head[g->node_of[r]] == r &&
                              g->node_head[g->node_of[t->up]] == t->up,
                          "%s: link %d->%d across hosts not between heads", what, r, t->up);
        }
    }
    ck_assert_msg(roots == 1, "%s: channel %d has %d roots", what, c, roots);
    for (int r = 0; r < n; r++) { /* every rank reaches the root without a cycle */
        int x = r, hops = 0;
        while (br_graph_tree(g, c, x)->up >= 0 && hops <= n) {
            x = br_graph_tree(g, c, x)->up;
            hops++;
        }
        ck_assert_msg(x == g->tree_root[c] && hops <= n, "%s: rank %d does not reach the root",
                      what, r);
    }
}

/* Binary trees inside hosts (intra_net): in each host the ranks below the head hang from
 * ranks of the same host, at most two children each (the head one, besides its children
 * across hosts), in order (each subtree holds a contiguous run of the host's positions on
 * the ring, its root's left children before it and right ones after), and the host's
 * depth is ceil(log2 size), where a chain's is size - 1. */
static void check_host_trees(const br_graph_t *g, int c, const char *what)
{
    const int *pos = br_graph_ring_pos(g, c);
    for (int node = 0; node < g->nnodes; node++) {
        int head = g->node_head[node], size = g->node_size[node], depth = 0, want = 0;
        while ((1 << want) < size) {
            want++;
        }
        for (int r = 0; r < g->nranks; r++) {
            if (g->node_of[r] != node) {
                continue;
            }
            const br_tree_node_t *t = br_graph_tree(g, c, r);
            int in = 0, lo = pos[r], hi = pos[r], level = 0;
            for (int k = 0; k < t->ndown; k++) {
                in += g->node_of[t->down[k]] == node;
            }
            ck_assert_msg(in <= (r == head ? 1 : 2), "%s: rank %d has %d children in its host",
                          what, r, in);
            /* The subtree's positions: a contiguous run around r. */
            int members = 0;
            for (int q = 0; q < g->nranks; q++) {
                int x = q;
                while (x >= 0 && x != r && g->node_of[x] == node) {
                    x = br_graph_tree(g, c, x)->up;
                }
                if (x == r) {
                    members++;
                    lo = pos[q] < lo ? pos[q] : lo;
                    hi = pos[q] > hi ? pos[q] : hi;
                }
            }
            ck_assert_msg(hi - lo + 1 == members, "%s: rank %d's subtree is not contiguous",
                          what, r);
            for (int x = r; x != head; x = br_graph_tree(g, c, x)->up) {
                ck_assert_msg(g->node_of[br_graph_tree(g, c, x)->up] == node,
                              "%s: rank %d leaves its host before its head", what, r);
                level++;
            }
            depth = level > depth ? level : depth;
        }
        ck_assert_msg(depth == want, "%s: host %d of %d ranks is %d deep, want %d", what, node,
                      size, depth, want);
    }
}

/* child_toward, level and depth against a brute-force walk. */
static void check_helpers(const br_graph_t *g, int c, const char *what)
{
    int n = g->nranks, depth = 0;
    for (int r = 0; r < n; r++) {
        int level = 0;
        for (int x = r; br_graph_tree(g, c, x)->up >= 0; x = br_graph_tree(g, c, x)->up) {
            level++;
        }
        ck_assert_int_eq(br_graph_tree_level(g, c, r), level);
        depth = level > depth ? level : depth;
        for (int t = 0; t < n; t++) {
            int want = -1;
            for (int x = t, prev = -1; x >= 0; prev = x, x = br_graph_tree(g, c, x)->up) {
                if (x == r) {
                    want = prev;
                    break;
                }
            }
            ck_assert_msg(br_graph_tree_child_toward(g, c, r, t) == want,
                          "%s: child_toward(%d, %d) = %d, want %d", what, r, t,
                          br_graph_tree_child_toward(g, c, r, t), want);
        }
    }
    ck_assert_int_eq(br_graph_tree_depth(g, c), depth);
}

/* Every layout and count, 1 to 4 channels; then with the links inside hosts being the
 * network (binary trees inside hosts), 1 and 2 channels. */
START_TEST(test_rings_and_trees)
{
    int layout = _i % L_COUNT, n = rank_counts[_i / L_COUNT];
    uint64_t h[64];
    char what[128];

    hosts_fill(layout, n, h);
    for (int net = 0; net <= 1; net++) {
        for (int nch = 1; nch <= (net ? 2 : 4); nch++) {
            br_graph_t *g = net ? build_net(layout, n, nch) : build(layout, n, nch);
            snprintf(what, sizeof(what), "%d ranks, %s, %d channels%s", n, layout_names[layout],
                     nch, net ? ", net in hosts" : "");
            ck_assert_int_eq(g->nranks, n);
            ck_assert_int_eq(g->nchannels, nch);
            check_rings(g, h, what);
            for (int c = 0; c < nch; c++) {
                check_tree_links(g, c, what);
                if (net) {
                    check_host_trees(g, c, what);
                }
                if (n <= 33) {
                    check_helpers(g, c, what);
                }
            }
            br_graph_free(g);
        }
    }
}
END_TEST

/* Children (across nodes) of node i in tree t, with one rank per node. */
static int node_children(const br_graph_t *g, int c, int r)
{
    return br_graph_tree(g, c, r)->ndown;
}

START_TEST(test_double_tree)
{
    for (int n = 2; n <= 64; n++) {
        br_graph_t *g = build(L_OWN_HOST, n, 2);
        int both = 0, both_rank = -1;
        ck_assert_int_eq(g->nnodes, n);
        ck_assert_int_eq(g->tree_root[0], 0);
        ck_assert_int_eq(br_graph_tree(g, 0, 0)->ndown, 1);
        for (int r = 0; r < n; r++) {
            if (node_children(g, 0, r) > 0 && node_children(g, 1, r) > 0) {
                both++;
                both_rank = r;
            }
        }
        /* Two binary trees need n + 1 interior nodes when n is odd: exactly one node is
         * interior in both then (node 0, tree 0's root), none when n is even. */
        ck_assert_msg(both == (n % 2), "%d nodes: %d are interior in both trees", n, both);
        ck_assert_msg(n % 2 == 0 || both_rank == 0, "%d nodes: node %d interior in both", n,
                      both_rank);
        br_graph_free(g);
    }
}
END_TEST

/* Known shapes, worked out by hand from the description in graph.h. */
START_TEST(test_known_shapes)
{
    /* 13 nodes, tree 0: 0 -> 8; 8 -> 4, 12; 4 -> 2, 6; 12 -> 10; 2 -> 1, 3; 6 -> 5, 7;
     * 10 -> 9, 11; leaves are the odd nodes. */
    static const int up13[13] = {-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8};
    /* 12 nodes, tree 1 mirrors tree 0 (node i plays 11 - i): tree 0 is 0 -> 8 -> 4, 10;
     * 4 -> 2, 6; 10 -> 9, 11; 2 -> 1, 3; 6 -> 5, 7; mirrored: 11 -> 3 -> 7, 1; 7 -> 9, 5;
     * 1 -> 2, 0; 9 -> 10, 8; 5 -> 6, 4. */
    static const int up12t1[12] = {1, 3, 1, 11, 5, 7, 5, 3, 9, 7, 9, -1};
    br_graph_t *g = build(L_OWN_HOST, 13, 1);
    for (int r = 0; r < 13; r++) {
        ck_assert_msg(br_graph_tree(g, 0, r)->up == up13[r],
                      "13 nodes: parent of %d is %d, want %d", r, br_graph_tree(g, 0, r)->up,
                      up13[r]);
    }
    br_graph_free(g);
    g = build(L_OWN_HOST, 12, 2);
    for (int r = 0; r < 12; r++) {
        ck_assert_msg(br_graph_tree(g, 1, r)->up == up12t1[r],
                      "12 nodes, tree 1: parent of %d is %d, want %d", r,
                      br_graph_tree(g, 1, r)->up, up12t1[r]);
    }
    br_graph_free(g);
    /* Hosts A B A B: ring 0 2 1 3; chains 0 -> 2 and 1 -> 3; heads 0 and 1 linked. */
    g = build(L_ROUND_ROBIN2, 4, 1);
    static const int ring[4] = {0, 2, 1, 3};
    for (int p = 0; p < 4; p++) {
        ck_assert_int_eq(br_graph_ring(g, 0)[p], ring[p]);
    }
    ck_assert_int_eq(br_graph_tree(g, 0, 2)->up, 0);
    ck_assert_int_eq(br_graph_tree(g, 0, 3)->up, 1);
    ck_assert_int_eq(br_graph_tree(g, 0, 1)->up, 0);
    ck_assert_int_eq(br_graph_tree(g, 0, 0)->ndown, 2);
    ck_assert_int_eq(br_graph_tree(g, 0, 0)->down[0], 2); /* the chain successor first */
    br_graph_free(g);
    /* 8 ranks of one host over the network: 0 -> 4; 4 -> 2, 6; 2 -> 1, 3; 6 -> 5, 7. */
    static const int up8[8] = {-1, 2, 4, 2, 0, 6, 4, 6};
    g = build_net(L_ONE_HOST, 8, 1);
    for (int r = 0; r < 8; r++) {
        ck_assert_int_eq(br_graph_tree(g, 0, r)->up, up8[r]);
    }
    br_graph_free(g);
    /* 8 ranks, round-robin over 2 hosts, over the network: ring 0 2 4 6 1 3 5 7; in each
     * host position 0 -> 2 -> 1, 3 (0 -> 4 -> 2, 6 and 1 -> 5 -> 3, 7); the heads' link
     * after the in-host child. */
    g = build_net(L_ROUND_ROBIN2, 8, 1);
    static const int up8rr[8] = {-1, 0, 4, 5, 0, 1, 4, 5};
    for (int r = 0; r < 8; r++) {
        ck_assert_int_eq(br_graph_tree(g, 0, r)->up, up8rr[r]);
    }
    ck_assert_int_eq(br_graph_tree(g, 0, 0)->ndown, 2);
    ck_assert_int_eq(br_graph_tree(g, 0, 0)->down[0], 4);
    ck_assert_int_eq(br_graph_tree(g, 0, 0)->down[1], 1);
    br_graph_free(g);
}
END_TEST

START_TEST(test_dump)
{
    char path[] = "/tmp/check_graph_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    br_graph_t *g = build(L_ROUND_ROBIN3, 7, 3);
    ck_assert_int_eq(br_graph_dump(g, path), ncclSuccess);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    int devs = 0, channels = 0, graphs = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        graphs += strstr(line, "<graph id=") != NULL;
        channels += strstr(line, "<channel>") != NULL;
        devs += strstr(line, "<cpu dev=") != NULL; /* no GPUs: ranks by position */
    }
    fclose(f);
    unlink(path);
    /* Node 0 of the round-robin layout holds ranks 0, 3, 6: 3 search channels, 2 graphs. */
    ck_assert_int_eq(graphs, 2);
    ck_assert_int_eq(channels, 2 * g->nsearch);
    ck_assert_int_eq(devs, 2 * g->nsearch * g->node_size[0]);
    ck_assert_int_eq(br_graph_dump(g, "/nonexistent/dir/graph.xml"), ncclSystemError);
    br_graph_log(g, 0); /* logs only; must not crash */
    br_graph_free(g);
}
END_TEST

START_TEST(test_bad_arguments)
{
    uint64_t h[4] = {0, 0, 0, 0};
    br_graph_t *g = NULL;
    ck_assert_int_eq(br_graph_build(0, h, 1, &g), ncclInvalidArgument);
    ck_assert_int_eq(br_graph_build(4, h, 0, &g), ncclInvalidArgument);
    ck_assert_int_eq(br_graph_build(4, h, BR_MAX_CHANNELS + 1, &g), ncclInvalidArgument);
    ck_assert_ptr_null(g);
    br_graph_free(NULL);
}
END_TEST

static Suite *graph_suite(void)
{
    Suite *s = suite_create("graph");
    TCase *tc = tcase_create("shapes");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_rings_and_trees, 0, NCOUNTS * L_COUNT);
    tcase_add_test(tc, test_double_tree);
    tcase_add_test(tc, test_known_shapes);
    tcase_add_test(tc, test_dump);
    tcase_add_test(tc, test_bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(graph_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
