/* SPDX-License-Identifier: Apache-2.0 */
/*
 * topo's private declarations: the node and topology structs, the small XML tree that
 * files and detection are read into (topo_xml.c), and the steps that turn such a tree
 * into a graph (topo_load.c) and compute its paths (topo_paths.c).
 */
#ifndef BR_TOPO_INT_H_
#define BR_TOPO_INT_H_

#include <stdint.h>

#include "topo.h"
#include "topo_xml.h"

#define BR_TOPO_STR 32

/* One <nvlink> of a GPU, kept as written so that a dump gives it back. */
typedef struct {
    char target[BR_TOPO_STR]; /* bus id of the far end */
    int count;                /* links */
    char tclass[BR_TOPO_STR]; /* PCI class of the far end */
} br_topo_nvlink_t;

/* The <pci> attributes of a PCI device (GPU, switch, NIC), as written. */
typedef struct {
    char cls[BR_TOPO_STR], vendor[BR_TOPO_STR], device[BR_TOPO_STR];
    char subsys_vendor[BR_TOPO_STR], subsys_device[BR_TOPO_STR];
    char link_speed[BR_TOPO_STR];
    char link_width[BR_TOPO_STR];
    float bw; /* link width x lane rate, GB/s */
} br_topo_pci_attr_t;

/* NCCL's CPU codes (src/include/graph.h); 0 is unknown. */
enum { BR_TOPO_ARCH_X86 = 1, BR_TOPO_ARCH_POWER = 2, BR_TOPO_ARCH_ARM = 3 };
enum { BR_TOPO_VENDOR_INTEL = 1, BR_TOPO_VENDOR_AMD = 2, BR_TOPO_VENDOR_ZHAOXIN = 3 };
enum {
    BR_TOPO_MODEL_INTEL_BDW = 1,
    BR_TOPO_MODEL_INTEL_SKL = 2,
    BR_TOPO_MODEL_INTEL_SRP = 3,
    BR_TOPO_MODEL_INTEL_ERP = 4,
};
#define BR_TOPO_MODEL_YONGFENG 1 /* Zhaoxin */

typedef struct {
    int numaid;
    char arch[BR_TOPO_STR], vendor[BR_TOPO_STR];
    int familyid, modelid;            /* -1 when absent */
    int arch_id, vendor_id, model_id; /* BR_TOPO_ARCH_*, _VENDOR_*, _MODEL_* */
    uint64_t *set;                    /* CPU set, bit c of word c / 64 */
    int words;
} br_topo_cpu_attr_t;

typedef struct {
    int dev, sm, rank, gdr;
    int nnvlinks;
    br_topo_nvlink_t *nvlinks;
    int c2c_bw, c2c_count; /* <c2c> (count 0: none) */
} br_topo_gpu_attr_t;

typedef struct {
    char name[64];
    int dev, speed, port, maxconn, gdr, coll;
    float latency;
    int latency_set; /* the file gave a latency attribute */
    uint64_t guid;
} br_topo_net_attr_t;

struct br_topo_node {
    br_topo_type_t type;
    int index;               /* within its type */
    int parent;              /* node above it in the tree (CPU, PCI or NIC), -1 for none */
    char busid[BR_TOPO_STR]; /* PCI devices only */
    int64_t busnum;          /* busid as a number (NCCL's busIdToInt64), -1 for none */
    br_topo_pci_attr_t pci;  /* PCI devices only */
    br_topo_cpu_attr_t cpu;
    br_topo_gpu_attr_t gpu;
    br_topo_net_attr_t net;
    int npcilinks; /* PCI switches: <pcilink> targets */
    char (*pcilinks)[BR_TOPO_STR];
    int nlinks, cap_links;
    br_topo_link_t *links;
};

struct br_topo {
    int nnodes, cap;
    br_topo_node_t *nodes;
    int count[BR_TOPO_NTYPES];
    int *by_type[BR_TOPO_NTYPES];          /* node index of the i-th node of a type */
    br_topo_path_t *paths[BR_TOPO_NTYPES]; /* [n * count[t] + i]: node n to node i of type t */
    char host_hash[BR_TOPO_STR];           /* <cpu host_hash> to write */
};

/* ---- XML (topo_xml.c): topo_xml.h ---- */

/* ---- building the graph (topo_graph.c) ---- */

ncclResult_t br_topo_alloc(br_topo_t **topo_p);
/* Append a node; *n_p gets its index. Pointers to nodes move when nodes are added. */
ncclResult_t br_topo_node_add(br_topo_t *topo, br_topo_type_t type, int parent, int *n_p);
/* A one-way link a -> b; a second one of the same type adds its bandwidth (NVLinks). */
ncclResult_t br_topo_link_add(br_topo_t *topo, int a, int b, int type, float bw);
/* Both ways. */
ncclResult_t br_topo_connect(br_topo_t *topo, int a, int b, int type, float bw);
/* Number the nodes of each type (by_type). */
ncclResult_t br_topo_index_build(br_topo_t *topo);
/* Number the nodes of each type, then compute the paths. */
ncclResult_t br_topo_finish(br_topo_t *topo);
/* NCCL's busIdToInt64: the hex digits of a bus id, ':' and '.' skipped. */
int64_t br_topo_busnum(const char *busid);
/* Parse a CPU set in NCCL's (and sysfs cpumap's) format: 32-bit hex words separated by
 * commas, the most significant first. Returns 0 on success. */
int br_topo_cpuset_parse(const char *text, uint64_t **set_p, int *words_p);
/* Format a CPU set the same way into buf (empty set: "0"). */
void br_topo_cpuset_format(const uint64_t *set, int words, char *buf, size_t len);

/* ---- from an XML tree (topo_load.c), paths (topo_paths.c) ---- */

/* Build the graph of a <system> tree; errors name file and line. The tree may be changed
 * (switches flattened). */
ncclResult_t br_topo_from_xml(br_xml_t *root, const char *file, br_topo_t **topo_p);
/* NCCL's NVLink bandwidth per link for a compute capability (sm 90: 20.6 GB/s). */
float br_topo_nvlink_bw(int sm);
/* NCCL's PCIe bandwidth for a link_speed and link_width: width x lane rate / 80 GB/s. */
float br_topo_pci_bw(const char *link_speed, const char *link_width);
ncclResult_t br_topo_paths_compute(br_topo_t *topo);

/* ---- detection (topo_detect.c, topo_nvml.c) ---- */

/* Add the GPUs NVML reports to the <system> tree: for each, its <pci> element found or
 * made with place(busid) and a <gpu> with its <nvlink>s. No NVML: nothing, success. */
typedef br_xml_t *(*br_topo_place_fn_t)(void *ctx, const char *busid);
ncclResult_t br_topo_nvml_add_gpus(br_topo_place_fn_t place, void *ctx);

#endif /* BR_TOPO_INT_H_ */
