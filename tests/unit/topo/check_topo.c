/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "topo": the topology graph of core/topo.
 *  - paths: the reference files of tests/topo (an 8-GPU NVSwitch node like a DGX H100, a
 *    PCIe-only 4-GPU node, a 2-socket CPU-only server, this machine) and small inline
 *    ones give NCCL's path types and bandwidths between chosen pairs (PIX, PXB, PHB, SYS,
 *    NVL, NVB, PXN, P2C, P2P routed through the CPU, Broadcom switches flattened).
 *  - roundtrip: every file, dumped and loaded again, gives the same graph and text.
 *  - errors: malformed files fail with ncclInvalidUsage and a message with file, line
 *    and cause.
 *  - detect: this machine's NUMA nodes and CPU sets, NICs with and without PCI device,
 *    GPUs from a fake NVML, none without NVML.
 *  - system: NCCL_TOPO_FILE, NCCL_TOPO_DUMP_FILE and the "Topology:" summary.
 * Tests that set environment variables run in their own process (Check's fork mode).
 */
#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "topo.h"
#include "util.h"

#ifndef TOPO_DIR
#error "TOPO_DIR (tests/topo) must be defined"
#endif

static br_topo_t *load(const char *name)
{
    char path[512];
    br_topo_t *t = NULL;
    snprintf(path, sizeof(path), "%s/%s", TOPO_DIR, name);
    ck_assert_msg(br_topo_load(path, &t) == ncclSuccess, "%s: %s", path, br_log_last_error());
    return t;
}

static br_topo_t *parse(const char *text)
{
    br_topo_t *t = NULL;
    ck_assert_msg(br_topo_parse(text, strlen(text), "inline.xml", &t) == ncclSuccess, "%s",
                  br_log_last_error());
    return t;
}

/* The index of a node named as in the tables: a GPU by bus id, a NET by name, a CPU by
 * NUMA id, the NVSwitch by "0". */
static int find(const br_topo_t *t, br_topo_type_t type, const char *id)
{
    for (int i = 0; i < br_topo_count(t, type); i++) {
        const br_topo_node_t *n = br_topo_node(t, type, i);
        if ((type == BR_TOPO_GPU && br_topo_find_gpu(t, id) == i) ||
            (type == BR_TOPO_NET && strcmp(br_topo_net_name(n), id) == 0) ||
            (type == BR_TOPO_CPU && br_topo_cpu_numaid(n) == atoi(id)) ||
            (type == BR_TOPO_NVS && atoi(id) == i)) {
            return i;
        }
    }
    ck_abort_msg("no %s %s", br_topo_type_str(type), id);
    return -1;
}

static const br_topo_path_t *path(const br_topo_t *t, br_topo_type_t t1, const char *a,
                                  br_topo_type_t t2, const char *b)
{
    const br_topo_path_t *p = br_topo_path(t, t1, find(t, t1, a), t2, find(t, t2, b));
    ck_assert_ptr_nonnull(p);
    return p;
}

#define G BR_TOPO_GPU
#define N BR_TOPO_NET
#define C BR_TOPO_CPU
#define S BR_TOPO_NVS

typedef struct {
    const char *file;
    br_topo_type_t t1;
    const char *a;
    br_topo_type_t t2;
    const char *b;
    int type;
    float bw;
} path_case_t;

static const path_case_t path_cases[] = {
    /* DGX H100: NVLink everywhere through the NVSwitch (18 links x 20.6 GB/s). */
    {"dgx-h100.xml", G, "0000:17:00.0", G, "0000:19:00.0", BR_TOPO_PATH_NVL, 370.8f},
    {"dgx-h100.xml", G, "0000:17:00.0", G, "0000:be:00.0", BR_TOPO_PATH_NVL, 370.8f},
    {"dgx-h100.xml", G, "0000:17:00.0", S, "0", BR_TOPO_PATH_NVL, 370.8f},
    {"dgx-h100.xml", G, "0000:17:00.0", G, "0000:17:00.0", BR_TOPO_PATH_LOC, 5000.0f},
    /* A GPU and the NICs under its switch: PIX at PCIe Gen5 x16 (48 GB/s < 400 Gb/s). */
    {"dgx-h100.xml", G, "0000:17:00.0", N, "mlx5_0", BR_TOPO_PATH_PIX, 48.0f},
    {"dgx-h100.xml", G, "0000:19:00.0", N, "mlx5_1", BR_TOPO_PATH_PIX, 48.0f},
    /* Other NICs: through the GPU next to them over NVLink (PXN), not the CPUs. */
    {"dgx-h100.xml", G, "0000:17:00.0", N, "mlx5_2", BR_TOPO_PATH_PXN, 48.0f},
    {"dgx-h100.xml", G, "0000:17:00.0", N, "mlx5_7", BR_TOPO_PATH_PXN, 48.0f},
    /* NIC to GPU keeps the PCI path: the host bridge, or across sockets (SPR UPI 22). */
    {"dgx-h100.xml", N, "mlx5_2", G, "0000:17:00.0", BR_TOPO_PATH_PHB, 48.0f},
    {"dgx-h100.xml", N, "mlx5_7", G, "0000:17:00.0", BR_TOPO_PATH_SYS, 22.0f},
    {"dgx-h100.xml", N, "mlx5_0", N, "mlx5_1", BR_TOPO_PATH_PIX, 48.0f},
    {"dgx-h100.xml", N, "mlx5_0", N, "mlx5_4", BR_TOPO_PATH_SYS, 22.0f},
    {"dgx-h100.xml", G, "0000:17:00.0", C, "0", BR_TOPO_PATH_PHB, 48.0f},
    {"dgx-h100.xml", G, "0000:17:00.0", C, "1", BR_TOPO_PATH_SYS, 22.0f},
    {"dgx-h100.xml", C, "0", C, "1", BR_TOPO_PATH_SYS, 22.0f},
    /* PCIe only, Gen4 x16 = 24 GB/s, NICs 100 Gb/s = 12.5 GB/s. */
    {"pcie-4gpu.xml", G, "0000:18:00.0", G, "0000:19:00.0", BR_TOPO_PATH_PIX, 24.0f},
    {"pcie-4gpu.xml", G, "0000:1c:00.0", G, "0000:1d:00.0", BR_TOPO_PATH_PIX, 24.0f},
    {"pcie-4gpu.xml", G, "0000:18:00.0", G, "0000:1c:00.0", BR_TOPO_PATH_PXB, 24.0f},
    {"pcie-4gpu.xml", G, "0000:18:00.0", N, "mlx5_0", BR_TOPO_PATH_PIX, 12.5f},
    {"pcie-4gpu.xml", G, "0000:1c:00.0", N, "mlx5_0", BR_TOPO_PATH_PXB, 12.5f},
    {"pcie-4gpu.xml", G, "0000:18:00.0", N, "mlx5_1", BR_TOPO_PATH_PHB, 12.5f},
    {"pcie-4gpu.xml", G, "0000:18:00.0", C, "0", BR_TOPO_PATH_PHB, 24.0f},
    {"pcie-4gpu.xml", N, "mlx5_0", N, "mlx5_1", BR_TOPO_PATH_PHB, 12.5f},
    /* Two AMD sockets (Infinity Fabric 16 GB/s), NICs 200 Gb/s on Gen4 x16 (24 GB/s). */
    {"cpu-2socket.xml", N, "mlx5_0", C, "0", BR_TOPO_PATH_PHB, 24.0f},
    {"cpu-2socket.xml", N, "mlx5_0", C, "1", BR_TOPO_PATH_SYS, 16.0f},
    {"cpu-2socket.xml", N, "mlx5_0", N, "mlx5_1", BR_TOPO_PATH_SYS, 16.0f},
    {"cpu-2socket.xml", C, "0", C, "1", BR_TOPO_PATH_SYS, 16.0f},
    /* This machine: a virtio NIC (10 Gb/s) on the host bridge, no link attributes. */
    {"this-machine.xml", N, "eth0", C, "0", BR_TOPO_PATH_PHB, 1.25f},
};
#define NPATH_CASES ((int)(sizeof(path_cases) / sizeof(path_cases[0])))

START_TEST(test_topo_reference_paths)
{
    const path_case_t *c = &path_cases[_i];
    br_topo_t *t = load(c->file);
    const br_topo_path_t *p = path(t, c->t1, c->a, c->t2, c->b);
    ck_assert_msg(p->type == c->type && fabsf(p->bw - c->bw) < 0.01f,
                  "%s: %s %s -> %s %s is %s %.2f GB/s, expected %s %.2f", c->file,
                  br_topo_type_str(c->t1), c->a, br_topo_type_str(c->t2), c->b,
                  br_topo_path_str(p->type), (double)p->bw, br_topo_path_str(c->type),
                  (double)c->bw);
    br_topo_free(t);
}
END_TEST

START_TEST(test_topo_reference_counts)
{
    static const struct {
        const char *file;
        int cpu, pci, gpu, nic, net, nvs;
    } files[] = {
        {"dgx-h100.xml", 2, 4, 8, 8, 8, 1},
        {"pcie-4gpu.xml", 1, 2, 4, 2, 2, 0},
        {"cpu-2socket.xml", 2, 0, 0, 2, 2, 0},
        {"this-machine.xml", 1, 0, 0, 1, 1, 0},
    };
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        br_topo_t *t = load(files[f].file);
        ck_assert_int_eq(br_topo_count(t, BR_TOPO_CPU), files[f].cpu);
        ck_assert_int_eq(br_topo_count(t, BR_TOPO_PCI), files[f].pci);
        ck_assert_int_eq(br_topo_count(t, BR_TOPO_GPU), files[f].gpu);
        ck_assert_int_eq(br_topo_count(t, BR_TOPO_NIC), files[f].nic);
        ck_assert_int_eq(br_topo_count(t, BR_TOPO_NET), files[f].net);
        ck_assert_int_eq(br_topo_count(t, BR_TOPO_NVS), files[f].nvs);
        br_topo_free(t);
    }
    br_topo_t *t = load("dgx-h100.xml");
    const br_topo_node_t *cpu1 = br_topo_node(t, BR_TOPO_CPU, 1);
    ck_assert_int_eq(br_topo_cpu_weight(cpu1), 112);
    ck_assert(br_topo_cpu_has(cpu1, 56) && br_topo_cpu_has(cpu1, 223) && !br_topo_cpu_has(cpu1, 0));
    ck_assert_int_eq(br_topo_gpu_sm(br_topo_node(t, BR_TOPO_GPU, 3)), 90);
    ck_assert(fabsf(br_topo_net_bw(br_topo_node(t, BR_TOPO_NET, 0)) - 50.0f) < 0.01f);
    ck_assert_int_eq(br_topo_local_cpu(t, BR_TOPO_GPU, find(t, G, "0000:9c:00.0")), 1);
    /* The relay of a PXN path is the GPU that shares the NIC's switch. */
    const br_topo_path_t *p = path(t, G, "0000:17:00.0", N, "mlx5_2");
    ck_assert_int_eq(p->via, br_topo_index(t, BR_TOPO_GPU, find(t, G, "0000:3c:00.0")));
    br_topo_free(t);
}
END_TEST

/* A Grace Hopper-like node: a GPU with C2C to the CPU and a NIC on a CPU root port. */
static const char gh200[] =
    "<system version=\"1\">\n"
    " <cpu numaid=\"0\" affinity=\"ffffffff,ffffffff\" arch=\"arm64\">\n"
    "  <pci busid=\"0009:01:00.0\" class=\"0x030200\" link_speed=\"32.0 GT/s PCIe\" "
    "link_width=\"16\">\n"
    "   <gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"1\"><c2c bw=\"45000\" count=\"10\"/></gpu>\n"
    "  </pci>\n"
    "  <pci busid=\"0000:01:00.0\" class=\"0x020700\" link_speed=\"32.0 GT/s PCIe\" "
    "link_width=\"16\">\n"
    "   <nic><net name=\"mlx5_0\" dev=\"0\" speed=\"400000\" gdr=\"1\"/></nic>\n"
    "  </pci>\n"
    " </cpu>\n"
    "</system>\n";

/* Three GPUs in a line of NVLinks: A-B, B-C. */
static const char nvb_line[] =
    "<system version=\"1\"><cpu numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\">\n"
    " <pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" "
    "link_width=\"16\">\n"
    "  <gpu dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"0\"><nvlink target=\"0000:02:00.0\" count=\"4\" "
    "tclass=\"0x030200\"/></gpu></pci>\n"
    " <pci busid=\"0000:02:00.0\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" "
    "link_width=\"16\">\n"
    "  <gpu dev=\"1\" sm=\"80\" rank=\"1\" gdr=\"0\"><nvlink target=\"0000:01:00.0\" count=\"4\" "
    "tclass=\"0x030200\"/>\n"
    "   <nvlink target=\"0000:03:00.0\" count=\"2\" tclass=\"0x030200\"/></gpu></pci>\n"
    " <pci busid=\"0000:03:00.0\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" "
    "link_width=\"16\">\n"
    "  <gpu dev=\"2\" sm=\"80\" rank=\"2\" gdr=\"0\"><nvlink target=\"0000:02:00.0\" count=\"2\" "
    "tclass=\"0x030200\"/></gpu></pci>\n"
    "</cpu></system>\n";

/* Two GPUs on root ports of an Intel CPU: beyond NCCL's P2P level (PXB). */
static const char two_root_ports[] =
    "<system version=\"1\"><cpu numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\" "
    "familyid=\"6\" modelid=\"85\">\n"
    " <pci busid=\"0000:3b:00.0\" class=\"0x030200\" link_speed=\"8.0 GT/s PCIe\" "
    "link_width=\"16\"><gpu dev=\"0\" sm=\"70\" rank=\"0\" gdr=\"1\"/></pci>\n"
    " <pci busid=\"0000:5e:00.0\" class=\"0x030200\" link_speed=\"8 GT/s\" link_width=\"\"><gpu "
    "dev=\"1\" sm=\"70\" rank=\"1\" gdr=\"1\"/></pci>\n"
    " <pci busid=\"0000:86:00.0\" class=\"0x020700\" link_speed=\"8.0 GT/s PCIe\" "
    "link_width=\"8\"><nic><net name=\"mlx5_0\" dev=\"0\" speed=\"100000\" "
    "gdr=\"1\"/></nic></pci>\n"
    "</cpu></system>\n";

/* A Broadcom Gen5 switch seen as a switch (subsystem 0x0xxx) with two sub-switches of the
 * same chip (0x1xxx): NCCL flattens them, so GPU and NIC share one switch. */
static const char bcm[] =
    "<system version=\"1\"><cpu numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\">\n"
    " <pci busid=\"0000:10:00.0\" class=\"0x060400\" vendor=\"0x1000\" device=\"0xc030\" "
    "subsystem_vendor=\"0x1000\" subsystem_device=\"0x0001\" link_speed=\"32.0 GT/s PCIe\" "
    "link_width=\"16\">\n"
    "  <pci busid=\"0000:11:00.0\" class=\"0x060400\" vendor=\"0x1000\" device=\"0xc030\" "
    "subsystem_vendor=\"0x1000\" subsystem_device=\"0x1001\" link_speed=\"32.0 GT/s PCIe\" "
    "link_width=\"16\">\n"
    "   <pci busid=\"0000:12:00.0\" class=\"0x030200\" link_speed=\"32.0 GT/s PCIe\" "
    "link_width=\"16\"><gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"1\"/></pci>\n"
    "  </pci>\n"
    "  <pci busid=\"0000:13:00.0\" class=\"0x060400\" vendor=\"0x1000\" device=\"0xc030\" "
    "subsystem_vendor=\"0x1000\" subsystem_device=\"0x1001\" link_speed=\"32.0 GT/s PCIe\" "
    "link_width=\"16\">\n"
    "   <pci busid=\"0000:14:00.0\" class=\"0x020700\" link_speed=\"32.0 GT/s PCIe\" "
    "link_width=\"16\"><nic><net name=\"mlx5_0\" dev=\"0\" speed=\"400000\" "
    "gdr=\"1\"/></nic></pci>\n"
    "  </pci>\n"
    " </pci>\n"
    "</cpu></system>\n";

START_TEST(test_topo_special_paths)
{
    br_topo_t *t = parse(gh200);
    const br_topo_path_t *p = path(t, G, "0009:01:00.0", C, "0");
    ck_assert_int_eq(p->type, BR_TOPO_PATH_C2C);
    ck_assert(fabsf(p->bw - 450.0f) < 0.01f);
    ck_assert_int_eq(path(t, G, "0009:01:00.0", N, "mlx5_0")->type, BR_TOPO_PATH_P2C);
    br_topo_free(t);

    t = parse(nvb_line);
    ck_assert_int_eq(path(t, G, "0000:01:00.0", G, "0000:02:00.0")->type, BR_TOPO_PATH_NVL);
    p = path(t, G, "0000:01:00.0", G, "0000:03:00.0");
    ck_assert_int_eq(p->type, BR_TOPO_PATH_NVB);
    ck_assert(fabsf(p->bw - 40.0f) < 0.01f); /* 2 links x 20 GB/s (sm 80) */
    br_topo_free(t);

    t = parse(two_root_ports);
    p = path(t, G, "0000:3b:00.0", G, "0000:5e:00.0");
    ck_assert_int_eq(p->type, BR_TOPO_PATH_PHB);
    ck_assert_int_eq(p->via, br_topo_index(t, BR_TOPO_CPU, 0)); /* no P2P: through the CPU */
    ck_assert(fabsf(p->bw - 12.0f) < 0.01f); /* Gen3 x16; an empty width counts as x16 */
    /* An x8 Gen3 NIC (6 GB/s) on another root port: through the host bridge. */
    p = path(t, G, "0000:3b:00.0", N, "mlx5_0");
    ck_assert_int_eq(p->type, BR_TOPO_PATH_PHB);
    ck_assert(fabsf(p->bw - 6.0f) < 0.01f);
    br_topo_free(t);

    t = parse(bcm);
    ck_assert_int_eq(br_topo_count(t, BR_TOPO_PCI), 1);
    ck_assert_int_eq(path(t, G, "0000:12:00.0", N, "mlx5_0")->type, BR_TOPO_PATH_PIX);
    br_topo_free(t);
}
END_TEST

/* ---- round trip ---- */

static char *dump_text(const br_topo_t *t)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(br_topo_write(t, f), ncclSuccess);
    fclose(f);
    return buf;
}

static void assert_same(const br_topo_t *a, const br_topo_t *b, const char *what)
{
    ck_assert_int_eq(br_topo_nnodes(a), br_topo_nnodes(b));
    for (int n = 0; n < br_topo_nnodes(a); n++) {
        const br_topo_node_t *x = br_topo_node_at(a, n), *y = br_topo_node_at(b, n);
        ck_assert_msg(br_topo_node_type(x) == br_topo_node_type(y) &&
                          strcmp(br_topo_node_busid(x), br_topo_node_busid(y)) == 0 &&
                          br_topo_node_nlinks(x) == br_topo_node_nlinks(y),
                      "%s: node %d differs", what, n);
        for (int l = 0; l < br_topo_node_nlinks(x); l++) {
            const br_topo_link_t *u = br_topo_node_link(x, l), *v = br_topo_node_link(y, l);
            ck_assert_msg(u->type == v->type && u->peer == v->peer && u->bw == v->bw,
                          "%s: node %d link %d differs", what, n, l);
        }
    }
    static const br_topo_type_t types[] = {BR_TOPO_GPU, BR_TOPO_CPU, BR_TOPO_NET, BR_TOPO_NVS};
    for (int t1 = 0; t1 < 4; t1++) {
        for (int t2 = 0; t2 < 4; t2++) {
            for (int i = 0; i < br_topo_count(a, types[t1]); i++) {
                for (int j = 0; j < br_topo_count(a, types[t2]); j++) {
                    const br_topo_path_t *p = br_topo_path(a, types[t1], i, types[t2], j);
                    const br_topo_path_t *q = br_topo_path(b, types[t1], i, types[t2], j);
                    ck_assert_msg(p->type == q->type && p->bw == q->bw && p->hops == q->hops,
                                  "%s: path %s %d -> %s %d differs", what,
                                  br_topo_type_str(types[t1]), i, br_topo_type_str(types[t2]), j);
                }
            }
        }
    }
}

static void round_trip(br_topo_t *t, const char *what)
{
    char *text = dump_text(t);
    br_topo_t *u = NULL;
    ck_assert_msg(br_topo_parse(text, strlen(text), what, &u) == ncclSuccess, "%s: %s", what,
                  br_log_last_error());
    assert_same(t, u, what);
    char *again = dump_text(u);
    ck_assert_str_eq(text, again);
    free(text);
    free(again);
    br_topo_free(u);
}

static const char *const files[] = {"dgx-h100.xml", "pcie-4gpu.xml", "cpu-2socket.xml",
                                    "this-machine.xml"};

START_TEST(test_topo_round_trip)
{
    br_topo_t *t = load(files[_i]);
    round_trip(t, files[_i]);
    br_topo_free(t);
}
END_TEST

START_TEST(test_topo_round_trip_inline)
{
    const char *texts[] = {gh200, nvb_line, two_root_ports, bcm};
    for (int i = 0; i < 4; i++) {
        br_topo_t *t = parse(texts[i]);
        round_trip(t, "inline");
        br_topo_free(t);
    }
}
END_TEST

/* ---- malformed files ---- */

#define CPU_OK "<cpu numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\">"
#define PCI_GPU(b) "<pci busid=\"" b "\" class=\"0x0302\" link_speed=\"\" link_width=\"16\">"

static const struct {
    const char *text;
    const char *where; /* "inline.xml:LINE:" */
    const char *what;
} bad_cases[] = {
    {"", "inline.xml:1:", "no element"},
    {"  \n<!-- just a comment -->\n", "inline.xml:3:", "no element"},
    {"<system version=\"1\">\n" CPU_OK "\n</system>",
     "inline.xml:3:", "</system> closes <cpu> opened at line 2"},
    {"<system version=\"1\">\n  <cpu", "inline.xml:2:", "never ends"},
    {"<system version=\"1\">\n" CPU_OK "\n", "inline.xml:2:", "<cpu> is never closed"},
    {"<system version=1/>", "inline.xml:1:", "must be quoted"},
    {"<system version=\"1\" version=\"1\"/>", "inline.xml:1:", "attribute version appears twice"},
    {"<system version=\"1\">hello</system>", "inline.xml:1:", "unexpected text"},
    {"<system version=\"1\"/>\n<system version=\"1\"/>", "inline.xml:2:", "one root element only"},
    {"<!DOCTYPE system>\n<system version=\"1\"/>", "inline.xml:1:", "DOCTYPE"},
    {"<system version=\"1\">\n<!-- open comment\n</system>",
     "inline.xml:2:", "a comment never ends"},
    {"<system version=\"1\" name=\"a&b;\"/>", "inline.xml:1:", "unknown entity"},
    {"<system version=\"1\" name=\"a<b\"/>", "inline.xml:1:", "'<' in the value"},
    {"<graphs version=\"1\"/>", "inline.xml:1:", "the root element must be <system>"},
    {"<system version=\"2\"/>", "inline.xml:1:", "only version 1"},
    {"<system/>", "inline.xml:1:", "attribute version is missing"},
    {"<system version=\"1\">\n<cpu arch=\"x86_64\" vendor=\"AuthenticAMD\"/>\n</system>",
     "inline.xml:2:", "<cpu>: attribute numaid is missing"},
    {"<system version=\"1\">\n<cpu numaid=\"zero\" arch=\"x86_64\"/></system>",
     "inline.xml:2:", "numaid=\"zero\" is not an integer"},
    {"<system version=\"1\">\n<cpu numaid=\"0\" arch=\"x86_64\"/></system>",
     "inline.xml:2:", "attribute vendor is missing"},
    {"<system version=\"1\">\n<cpu numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\"/></system>",
     "inline.xml:2:", "attribute familyid is missing"},
    {"<system version=\"1\"><cpu numaid=\"0\" arch=\"arm64\" affinity=\"0-63\"/></system>",
     "inline.xml:1:", "affinity=\"0-63\" is not a CPU mask"},
    {"<system version=\"1\">" CPU_OK
     "\n<pci busid=\"0000:01:00.0\" class=\"0x060400\" link_speed=\"\"/>"
     "</cpu></system>",
     "inline.xml:2:", "attribute link_width is missing"},
    {"<system version=\"1\">" CPU_OK
     "\n" PCI_GPU("zz") "<gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"0\"/></pci>"
                        "</cpu></system>",
     "inline.xml:2:", "busid=\"zz\" is not a PCI bus id"},
    {"<system version=\"1\">" CPU_OK PCI_GPU(
         "0000:01:00.0") "\n<gpu dev=\"0\" rank=\"0\" gdr=\"0\"/></pci>"
                         "</cpu></system>",
     "inline.xml:2:", "<gpu>: attribute sm is missing"},
    {"<system version=\"1\">" CPU_OK
         PCI_GPU("0000:01:00.0") "<gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"0\"/></pci>\n" PCI_GPU(
             "0000:01:00.0") "<gpu dev=\"1\" sm=\"90\" rank=\"1\" gdr=\"0\"/></pci></cpu></system>",
     "inline.xml:2:", "names a second GPU"},
    {"<system version=\"1\">" CPU_OK PCI_GPU(
         "0000:01:00.0") "<gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"0\">\n"
                         "<nvlink target=\"0000:02:00.0\" count=\"2\"/></gpu></pci></cpu></system>",
     "inline.xml:2:", "<nvlink>: attribute tclass is missing"},
    {"<system version=\"1\">" CPU_OK
     "<nic><net name=\"a\" dev=\"0\"/>\n<net name=\"b\" dev=\"0\"/></nic>"
     "</cpu></system>",
     "inline.xml:2:", "names a second network device"},
    {"<system version=\"1\">" CPU_OK "\n<pci class=\"0x020000\" link_speed=\"\" link_width=\"16\">"
     "<nic><net name=\"a\" dev=\"0\"/></nic></pci></cpu></system>",
     "inline.xml:2:", "<pci>: attribute busid is missing"},
    {"<system version=\"1\">" CPU_OK
     "<nic><net name=\"a\" dev=\"0\" speed=\"fast\"/></nic></cpu></system>",
     "inline.xml:1:", "speed=\"fast\" is not an integer"},
    {"<system version=\"1\">" CPU_OK
     "<nic><net name=\"a\" dev=\"0\" latency=\"slow\"/></nic></cpu></system>",
     "inline.xml:1:", "latency=\"slow\" is not a number"},
    {"<system version=\"1\">" CPU_OK
     "<nic><net name=\"a\" dev=\"0\" coll=\"yes\"/></nic></cpu></system>",
     "inline.xml:1:", "coll=\"yes\" is not an integer"},
    {"<system version=\"1\">" CPU_OK PCI_GPU(
         "0000:01:00.0") "<gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"0\">\n<nvlink "
                         "target=\"0000:02:00.0\" count=\"2\" "
                         "tclass=\"0x030200\"/></gpu></pci>" PCI_GPU(
                             "0000:02:00.0") "<gpu dev=\"1\" sm=\"90\" rank=\"1\" "
                                             "gdr=\"0\"/></pci></cpu></system>",
     "inline.xml:2:", "which lists none back"},
    {"<system version=\"1\">\n" CPU_OK "</cpu>\n" CPU_OK "</cpu></system>",
     "inline.xml:3:", "numaid=\"0\" appears twice"},
};
#define NBAD ((int)(sizeof(bad_cases) / sizeof(bad_cases[0])))

START_TEST(test_topo_malformed)
{
    br_topo_t *t = NULL;
    const char *text = bad_cases[_i].text;
    ck_assert_int_eq(br_topo_parse(text, strlen(text), "inline.xml", &t), ncclInvalidUsage);
    ck_assert_ptr_null(t);
    const char *err = br_log_last_error();
    ck_assert_msg(strstr(err, bad_cases[_i].where) != NULL &&
                      strstr(err, bad_cases[_i].what) != NULL,
                  "case %d: error \"%s\" lacks \"%s\" or \"%s\"", _i, err, bad_cases[_i].where,
                  bad_cases[_i].what);
}
END_TEST

/* What NCCL's tuning model reads of a NIC (braid-sim --model nccl): <net latency> in us, a
 * float (NCCL's graph latencyInter), and <net coll> (SHARP), each absent meaning NCCL's
 * default 0, told apart from a written 0; both survive a dump. */
START_TEST(test_topo_model_attributes)
{
    static const char text[] =
        "<system version=\"1\">" CPU_OK
        "<nic><net name=\"a\" dev=\"0\" speed=\"400000\" latency=\"2.5\" coll=\"1\"/>"
        "<net name=\"b\" dev=\"1\" speed=\"400000\"/>"
        "<net name=\"c\" dev=\"2\" speed=\"400000\" latency=\"0\" coll=\"0\"/></nic>"
        "</cpu></system>";
    static const struct {
        const char *name;
        float latency;
        int set, coll;
    } want[] = {{"a", 2.5f, 1, 1}, {"b", 0.0f, 0, 0}, {"c", 0.0f, 1, 0}};
    br_topo_t *t = parse(text);
    for (int i = 0; i < 3; i++) {
        const br_topo_node_t *n = br_topo_node(t, BR_TOPO_NET, find(t, BR_TOPO_NET, want[i].name));
        int set = -1;
        ck_assert_float_eq_tol(br_topo_net_latency(n, &set), want[i].latency, 1e-6);
        ck_assert_int_eq(set, want[i].set);
        ck_assert_int_eq(br_topo_net_coll(n), want[i].coll);
    }
    round_trip(t, "model attributes");
    br_topo_free(t);
}
END_TEST

START_TEST(test_topo_missing_file)
{
    br_topo_t *t = NULL;
    ck_assert_int_eq(br_topo_load("/nonexistent/topo.xml", &t), ncclInvalidUsage);
    ck_assert_ptr_nonnull(strstr(br_log_last_error(), "/nonexistent/topo.xml"));
}
END_TEST

/* Every prefix of a reference file, and the file with any one byte changed, loads or
 * fails cleanly (the sanitizer builds check the "cleanly"). */
START_TEST(test_topo_damaged_files)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", TOPO_DIR, files[_i]);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    static char text[65536];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    for (size_t cut = 0; cut <= len; cut += 7) {
        br_topo_t *t = NULL;
        ncclResult_t res = br_topo_parse(text, cut, "cut.xml", &t);
        ck_assert(res == ncclSuccess || res == ncclInvalidUsage);
        br_topo_free(t);
    }
    static const char bytes[] = {'<', '>', '"', '/', '=', ' ', 'x', '0', '\0', '&'};
    for (size_t at = 0; at < len; at += 11) {
        char saved = text[at];
        text[at] = bytes[at % sizeof(bytes)];
        br_topo_t *t = NULL;
        ncclResult_t res = br_topo_parse(text, len, "changed.xml", &t);
        ck_assert(res == ncclSuccess || res == ncclInvalidUsage);
        br_topo_free(t);
        text[at] = saved;
    }
}
END_TEST

/* Unknown elements and attributes (NCCL adds some with every release) are skipped. */
START_TEST(test_topo_tolerates_extensions)
{
    br_topo_t *t =
        parse("<?xml version=\"1.0\"?>\n<system version=\"1\" name=\"x\">\n"
              "<future/>\n" CPU_OK "<pci busid=\"0000:01:00.0\" class=\"0x030200\" "
              "link_speed=\"16 GT/s\" link_width=\"16\" keep=\"1\"><gpu dev=\"0\" sm=\"90\" "
              "rank=\"0\" gdr=\"1\" mlopart=\"-1\"><newlink/></gpu></pci>"
              "<pci busid=\"0000:02:00.0\" class=\"0x030200\" link_speed=\"\" "
              "link_width=\"16\"><gpu dev=\"1\"/></pci></cpu></system>");
    ck_assert_int_eq(br_topo_count(t, BR_TOPO_GPU), 1); /* the GPU without rank is left out */
    ck_assert(fabsf(path(t, G, "0000:01:00.0", C, "0")->bw - 24.0f) < 0.01f);
    br_topo_free(t);
}
END_TEST

/* ---- detection ---- */

static int numa_nodes(void)
{
    int n = 0;
    DIR *d = opendir("/sys/devices/system/node");
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        n += strncmp(e->d_name, "node", 4) == 0 && e->d_name[4] >= '0' && e->d_name[4] <= '9';
    }
    if (d != NULL) {
        closedir(d);
    }
    return n > 0 ? n : 1;
}

/* A network interface with a device in sysfs, as a net plugin would report it. */
static int sysfs_nic(char *name, size_t nlen, char *path, size_t plen)
{
    DIR *d = opendir("/sys/class/net");
    struct dirent *e;
    int found = 0;
    while (d != NULL && !found && (e = readdir(d)) != NULL) {
        char link[600], real[4096];
        snprintf(link, sizeof(link), "/sys/class/net/%s/device", e->d_name);
        if (e->d_name[0] != '.' && realpath(link, real) != NULL && strstr(real, "/pci") != NULL) {
            snprintf(name, nlen, "%s", e->d_name);
            snprintf(path, plen, "%s", real);
            found = 1;
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    return found;
}

START_TEST(test_topo_detect_cpus)
{
    br_topo_t *t = NULL;
    setenv("BRAID_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    ck_assert_int_eq(br_topo_detect(NULL, 0, &t), ncclSuccess);
    ck_assert_int_eq(br_topo_count(t, BR_TOPO_CPU), numa_nodes());
    ck_assert_int_eq(br_topo_count(t, BR_TOPO_GPU), 0);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    for (int c = 0; c < br_topo_count(t, BR_TOPO_CPU); c++) {
        ck_assert_int_gt(br_topo_cpu_weight(br_topo_node(t, BR_TOPO_CPU, c)), 0);
    }
    cpu_set_t mask;
    ck_assert_int_eq(sched_getaffinity(0, sizeof(mask), &mask), 0);
    for (int i = 0; i < CPU_SETSIZE; i++) {
        int held = 0;
        for (int c = 0; c < br_topo_count(t, BR_TOPO_CPU) && CPU_ISSET(i, &mask); c++) {
            held |= br_topo_cpu_has(br_topo_node(t, BR_TOPO_CPU, c), i);
        }
        ck_assert_msg(held || !CPU_ISSET(i, &mask), "CPU %d is in no NUMA node", i);
    }
    ck_assert_int_ge(br_topo_process_cpu(t), 0);
    int total = 0;
    for (int c = 0; c < br_topo_count(t, BR_TOPO_CPU); c++) {
        total += br_topo_cpu_weight(br_topo_node(t, BR_TOPO_CPU, c));
    }
    ck_assert_int_ge(total, ncpu); /* every online CPU is in one NUMA node */
    round_trip(t, "detected");
    br_topo_free(t);
}
END_TEST

START_TEST(test_topo_detect_nics)
{
    char name[256], pci_path[4096];
    br_topo_nic_info_t nics[2] = {
        {.name = "virt0", .pci_path = NULL, .dev = 0, .speed = 0, .port = 1},
        {.name = name, .pci_path = pci_path, .dev = 1, .speed = 100000, .port = 1, .gdr = 1},
    };
    int n = sysfs_nic(name, sizeof(name), pci_path, sizeof(pci_path)) ? 2 : 1;
    br_topo_t *t = NULL;
    setenv("BRAID_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    ck_assert_int_eq(br_topo_detect(nics, n, &t), ncclSuccess);
    ck_assert_int_eq(br_topo_count(t, BR_TOPO_NET), n);
    /* The virtual NIC hangs from the first CPU; speed unknown counts as 10 Gb/s. */
    const br_topo_path_t *p = path(t, N, "virt0", C, "0");
    ck_assert_int_eq(p->type, BR_TOPO_PATH_PHB);
    ck_assert(fabsf(p->bw - 1.25f) < 0.01f);
    if (n == 2) {
        int i = find(t, N, name);
        const br_topo_node_t *nic =
            br_topo_node_at(t, br_topo_node_link(br_topo_node(t, N, i), 0)->peer);
        ck_assert_int_eq(br_topo_node_type(nic), BR_TOPO_NIC);
        ck_assert_ptr_nonnull(strstr(pci_path, br_topo_node_busid(nic))); /* its PCI function */
        int cpu = br_topo_local_cpu(t, BR_TOPO_NET, i);
        ck_assert_int_ge(cpu, 0);
        ck_assert_int_le(br_topo_path(t, N, i, C, cpu)->type, BR_TOPO_PATH_PHB);
    }
    round_trip(t, "detected with NICs");
    br_topo_free(t);
}
END_TEST

START_TEST(test_topo_detect_nvml)
{
    void *lib = dlopen(TESTNVML_PATH, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(lib != NULL, "%s", dlerror());
    void (*set)(int, int) = (void (*)(int, int))dlsym(lib, "test_nvml_set");
    ck_assert_ptr_nonnull(set);
    set(2, 4);
    setenv("BRAID_NVML_LIBRARY", TESTNVML_PATH, 1);
    br_topo_t *t = NULL;
    ck_assert_int_eq(br_topo_detect(NULL, 0, &t), ncclSuccess);
    ck_assert_int_eq(br_topo_count(t, BR_TOPO_GPU), 2);
    ck_assert_int_eq(br_topo_count(t, BR_TOPO_NVS), 1);
    ck_assert_int_eq(br_topo_gpu_sm(br_topo_node(t, BR_TOPO_GPU, 0)), 90);
    const br_topo_path_t *p = path(t, G, "0000:e1:00.0", G, "0000:e2:00.0");
    ck_assert_int_eq(p->type, BR_TOPO_PATH_NVL);
    ck_assert(fabsf(p->bw - 4 * 20.6f) < 0.01f);
    round_trip(t, "detected with GPUs");
    br_topo_free(t);
    dlclose(lib);
}
END_TEST

/* ---- the process's topology ---- */

START_TEST(test_topo_system_file_and_dump)
{
    char file[512], dump[64];
    snprintf(file, sizeof(file), "%s/pcie-4gpu.xml", TOPO_DIR);
    snprintf(dump, sizeof(dump), "/tmp/check_topo_dump.%d.xml", (int)getpid());
    setenv("NCCL_TOPO_FILE", file, 1);
    setenv("NCCL_TOPO_DUMP_FILE", dump, 1);
    setenv("NCCL_TOPO_DUMP_FILE_RANK", "1", 1);
    const br_topo_t *t = NULL, *again = NULL;
    const char *source = NULL;
    ck_assert_int_eq(br_topo_system_get(NULL, 0, 0, &t, &source), ncclSuccess);
    ck_assert_str_eq(source, "file");
    ck_assert_int_eq(br_topo_count(t, BR_TOPO_GPU), 4);
    ck_assert_int_ne(access(dump, F_OK), 0); /* rank 0 is not the dumping rank */
    ck_assert_int_eq(br_topo_system_get(NULL, 0, 1, &again, NULL), ncclSuccess);
    ck_assert_ptr_eq(t, again); /* built once */
    br_topo_t *u = NULL;
    ck_assert_int_eq(br_topo_load(dump, &u), ncclSuccess);
    assert_same(t, u, "dumped by rank 1");
    br_topo_free(u);
    unlink(dump);
}
END_TEST

/* A topology another process detected, received as text: the process adopts it (once,
 * equal to what was sent), and keeps it when more arrives. */
START_TEST(test_topo_system_adopt)
{
    br_topo_t *sent = load("dgx-h100.xml");
    char *text = NULL;
    size_t len = 0;
    const br_topo_t *t = NULL, *again = NULL;
    const char *source = NULL;

    ck_assert_int_eq(br_topo_to_text(sent, &text, &len), ncclSuccess);
    ck_assert_uint_gt(len, 0);
    ck_assert_int_eq(br_topo_system_adopt(text, len, 5, 7, &t, &source), ncclSuccess);
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(source, "detected by rank 5");
    assert_same(sent, t, "adopted");
    ck_assert_int_eq(br_topo_system_adopt(NULL, 0, 6, 8, &again, NULL), ncclSuccess);
    ck_assert_ptr_eq(t, again); /* kept */
    ck_assert_int_eq(br_topo_system_get(NULL, 0, 7, &again, NULL), ncclSuccess);
    ck_assert_ptr_eq(t, again); /* no detection after it */
    free(text);
    br_topo_free(sent);
}
END_TEST

/* The sender's detection failed: the process goes on without a topology. */
START_TEST(test_topo_system_adopt_none)
{
    const br_topo_t *t = (const br_topo_t *)1;
    ck_assert_int_eq(br_topo_system_adopt(NULL, 0, 0, 1, &t, NULL), ncclSuccess);
    ck_assert_ptr_null(t);
}
END_TEST

START_TEST(test_topo_system_bad_file)
{
    setenv("NCCL_TOPO_FILE", TOPO_DIR "/missing.xml", 1);
    const br_topo_t *t = (const br_topo_t *)1;
    for (int i = 0; i < 2; i++) { /* every init fails alike */
        ck_assert_int_eq(br_topo_system_get(NULL, 0, 0, &t, NULL), ncclInvalidUsage);
        ck_assert_ptr_null(t);
        ck_assert_ptr_nonnull(strstr(br_log_last_error(), "missing.xml"));
    }
}
END_TEST

START_TEST(test_topo_summary)
{
    char log[64], line[1024];
    snprintf(log, sizeof(log), "/tmp/check_topo_log.%d", (int)getpid());
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "INIT,GRAPH", 1);
    setenv("NCCL_DEBUG_FILE", log, 1);
    setenv("NCCL_TOPO_FILE", TOPO_DIR "/pcie-4gpu.xml", 1);
    const br_topo_t *t = NULL;
    const char *source = NULL;
    ck_assert_int_eq(br_topo_system_get(NULL, 0, 3, &t, &source), ncclSuccess);
    br_topo_log_summary(t, source, 3);
    FILE *f = fopen(log, "r");
    ck_assert_ptr_nonnull(f);
    int lines = 0, gpu1 = 0, nic1 = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, "Topology: rank 3: ") == NULL) {
            continue;
        }
        lines++;
        gpu1 |= strstr(line, "GPU 1 (0000:19:00.0, sm 89) is PHB from CPU 0, 24.0 GB/s") != NULL;
        nic1 |= strstr(line, "NIC 1 mlx5_1 (0000:5e:00.0, 12.5 GB/s) is PHB from CPU 0") != NULL;
    }
    fclose(f);
    unlink(log);
    ck_assert_int_eq(lines, 1 + 4 + 2); /* the counts, then each GPU and NIC */
    ck_assert(gpu1 && nic1);
}
END_TEST

static Suite *topo_suite(void)
{
    Suite *s = suite_create("topo");
    TCase *tc = tcase_create("paths");
    tcase_add_loop_test(tc, test_topo_reference_paths, 0, NPATH_CASES);
    tcase_add_test(tc, test_topo_reference_counts);
    tcase_add_test(tc, test_topo_special_paths);
    suite_add_tcase(s, tc);
    tc = tcase_create("roundtrip");
    tcase_add_loop_test(tc, test_topo_round_trip, 0, (int)(sizeof(files) / sizeof(files[0])));
    tcase_add_test(tc, test_topo_round_trip_inline);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_loop_test(tc, test_topo_malformed, 0, NBAD);
    tcase_add_test(tc, test_topo_model_attributes);
    tcase_add_test(tc, test_topo_missing_file);
    tcase_add_loop_test(tc, test_topo_damaged_files, 0, (int)(sizeof(files) / sizeof(files[0])));
    tcase_add_test(tc, test_topo_tolerates_extensions);
    suite_add_tcase(s, tc);
    tc = tcase_create("detect");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_topo_detect_cpus);
    tcase_add_test(tc, test_topo_detect_nics);
    tcase_add_test(tc, test_topo_detect_nvml);
    suite_add_tcase(s, tc);
    tc = tcase_create("system");
    tcase_add_test(tc, test_topo_system_file_and_dump);
    tcase_add_test(tc, test_topo_system_bad_file);
    tcase_add_test(tc, test_topo_system_adopt);
    tcase_add_test(tc, test_topo_system_adopt_none);
    tcase_add_test(tc, test_topo_summary);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(topo_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
