/* SPDX-License-Identifier: Apache-2.0 */
/*
 * topo: the machine's topology as a graph, in NCCL's terms. Nodes are CPUs (one per NUMA
 * node, with its CPU set), PCI switches, GPUs, NICs (PCI devices) with their network
 * ports (NET: one per net plugin device), and one NVSwitch fabric node. Links carry
 * NCCL's link types and bandwidths (GB/s); paths between every pair of GPUs, CPUs, NETs
 * and the NVSwitch carry NCCL's path types and the smallest bandwidth along them.
 *
 * A topology comes from detection (hwloc for NUMA nodes, CPU sets and the PCI tree, NVML
 * loaded with dlopen for GPUs and NVLinks, NICs from the caller) or from an XML file in
 * NCCL's schema (NCCL_TOPO_FILE), and can be written in that schema
 * (NCCL_TOPO_DUMP_FILE). docs/topology.md describes both.
 *
 * A br_topo_t is immutable once built: any thread may read it. br_topo_system_get builds
 * the process's topology once and keeps it until exit.
 */
#ifndef BR_TOPO_H_
#define BR_TOPO_H_

#include <stdint.h>
#include <stdio.h>

#include "nccl.h"

/* Node types, numbered as NCCL numbers them. */
typedef enum {
    BR_TOPO_GPU = 0,
    BR_TOPO_PCI = 1, /* a PCI switch (or any bridge-like device with devices below it) */
    BR_TOPO_NVS = 2, /* the NVSwitch fabric (one node, as in NCCL) */
    BR_TOPO_CPU = 3, /* a NUMA node and its host bridges */
    BR_TOPO_NIC = 4, /* a network card: a PCI device holding one or more NETs */
    BR_TOPO_NET = 5, /* one network device (port) of the net plugin */
} br_topo_type_t;
#define BR_TOPO_NTYPES 6

/* Link types (NCCL's LINK_*, equal to the path type they start). */
enum {
    BR_TOPO_LINK_LOC = 0,
    BR_TOPO_LINK_NVL = 1,
    BR_TOPO_LINK_C2C = 3,
    BR_TOPO_LINK_PCI = 4,
    BR_TOPO_LINK_SYS = 9,
    BR_TOPO_LINK_NET = 10,
};

/* Path types (NCCL's PATH_*), from closest to farthest. */
enum {
    BR_TOPO_PATH_LOC = 0,  /* the node itself */
    BR_TOPO_PATH_NVL = 1,  /* NVLink (directly or through the NVSwitch) */
    BR_TOPO_PATH_NVB = 2,  /* NVLink through one intermediate GPU */
    BR_TOPO_PATH_C2C = 3,  /* chip-to-chip link to the CPU */
    BR_TOPO_PATH_PIX = 4,  /* through at most one PCI switch */
    BR_TOPO_PATH_PXB = 5,  /* through several PCI switches, not the host bridge */
    BR_TOPO_PATH_P2C = 6,  /* GPU to NIC through C2C to the CPU, then PCI */
    BR_TOPO_PATH_PXN = 7,  /* GPU to NIC through another GPU (NVLink, then PCI) */
    BR_TOPO_PATH_PHB = 8,  /* through a host bridge (the CPU) */
    BR_TOPO_PATH_SYS = 9,  /* across CPUs (QPI/UPI, Infinity Fabric, ...) */
    BR_TOPO_PATH_NET = 10, /* through the network */
    BR_TOPO_PATH_DIS = 11, /* disconnected */
};

/* Bandwidths in GB/s (NCCL's constants, src/graph/topo.h). */
#define BR_TOPO_LOC_BW 5000.0f

typedef struct {
    int type; /* BR_TOPO_LINK_* */
    float bw; /* GB/s */
    int peer; /* node index (br_topo_node_at) at the other end */
} br_topo_link_t;

/* The path from one node to another. */
typedef struct {
    int type; /* BR_TOPO_PATH_* */
    float bw; /* smallest link bandwidth along it, GB/s (0 when disconnected) */
    int hops; /* links along it */
    int next; /* node after the first hop, -1 for none */
    int via;  /* for a path routed through a CPU or GPU on purpose (no P2P, no GPU Direct
               * RDMA, PXN): that node, else -1 */
} br_topo_path_t;

typedef struct br_topo_node br_topo_node_t; /* defined in topo_int.h */
typedef struct br_topo br_topo_t;

/* What detection needs to know of a NIC: a net plugin device's properties. */
typedef struct {
    const char *name;     /* device name, e.g. "mlx5_0" */
    const char *pci_path; /* sysfs path of the device, or NULL for a virtual one */
    int dev;              /* the plugin's device index */
    int speed;            /* Mb/s (<= 0: unknown, counted as 10 Gb/s as NCCL does) */
    int port;
    uint64_t guid;
    int latency; /* us */
    int max_comms;
    int gdr; /* GPU Direct RDMA possible (NCCL_PTR_CUDA) */
} br_topo_nic_info_t;

/* Detect this machine: NUMA nodes and the PCI tree with hwloc, GPUs with NVML when it
 * loads, and the nics given. Fails (with a WARN) only when hwloc cannot load a topology
 * or memory runs out. */
ncclResult_t br_topo_detect(const br_topo_nic_info_t *nics, int nnics, br_topo_t **topo_p);

/* Load an XML file in NCCL's schema. A malformed file fails with ncclInvalidUsage and a
 * WARN naming the file, the line and what is wrong. */
ncclResult_t br_topo_load(const char *path, br_topo_t **topo_p);
/* The same from text in memory; name stands for the file in messages. */
ncclResult_t br_topo_parse(const char *text, size_t len, const char *name, br_topo_t **topo_p);

/* Write the topology in NCCL's schema, to a file or a stream. */
ncclResult_t br_topo_dump(const br_topo_t *topo, const char *path);
ncclResult_t br_topo_write(const br_topo_t *topo, FILE *f);

void br_topo_free(br_topo_t *topo);

/* Nodes: by type (index 0..count-1 within the type) or by node index (0..nnodes-1, the
 * numbering of links and paths). */
int br_topo_count(const br_topo_t *topo, br_topo_type_t type);
int br_topo_nnodes(const br_topo_t *topo);
int br_topo_index(const br_topo_t *topo, br_topo_type_t type, int i);
const br_topo_node_t *br_topo_node_at(const br_topo_t *topo, int n);
const br_topo_node_t *br_topo_node(const br_topo_t *topo, br_topo_type_t type, int i);
br_topo_type_t br_topo_node_type(const br_topo_node_t *node);
/* Position of the node within its type. */
int br_topo_node_rank_in_type(const br_topo_node_t *node);
/* PCI bus id ("0000:17:00.0"), "" for nodes without one (CPUs, NVS, NETs, virtual NICs). */
const char *br_topo_node_busid(const br_topo_node_t *node);
/* A short name for messages: "GPU/0000:17:00.0", "NET/mlx5_0", "CPU/1", "NVS/0". */
const char *br_topo_node_name(const br_topo_node_t *node, char *buf, size_t len);
int br_topo_node_nlinks(const br_topo_node_t *node);
const br_topo_link_t *br_topo_node_link(const br_topo_node_t *node, int l);

/* GPU, CPU and NET details (-1 / NULL when the node has another type). */
int br_topo_gpu_dev(const br_topo_node_t *node);
int br_topo_gpu_sm(const br_topo_node_t *node);
int br_topo_gpu_rank(const br_topo_node_t *node);
int br_topo_cpu_numaid(const br_topo_node_t *node);
/* Is cpu (an OS CPU number) in the CPU node's set? */
int br_topo_cpu_has(const br_topo_node_t *node, int cpu);
/* Number of CPUs in the CPU node's set. */
int br_topo_cpu_weight(const br_topo_node_t *node);
const char *br_topo_net_name(const br_topo_node_t *node);
float br_topo_net_bw(const br_topo_node_t *node);
/* The NIC's latency attribute (us; 0, NCCL's default, when the file has none: *set_p 0) and
 * its coll attribute (1: in-network reduction such as SHARP; 0 when absent). */
float br_topo_net_latency(const br_topo_node_t *node, int *set_p);
int br_topo_net_coll(const br_topo_node_t *node);

/* The path from node i1 of type t1 to node i2 of type t2; types GPU, CPU, NET and NVS
 * (NULL for others or indexes out of range). */
const br_topo_path_t *br_topo_path(const br_topo_t *topo, br_topo_type_t t1, int i1,
                                   br_topo_type_t t2, int i2);

/* Index (among GPUs, resp. NETs) of the node with this bus id, resp. name; -1 if none. */
int br_topo_find_gpu(const br_topo_t *topo, const char *busid);
int br_topo_find_net(const br_topo_t *topo, const char *name);
/* The CPU (index) closest to node i of type t (NCCL's choice: best bandwidth, then path
 * type, then fewest hops), -1 if none. */
int br_topo_local_cpu(const br_topo_t *topo, br_topo_type_t t, int i);
/* The CPU (index) holding the most of this process's allowed CPUs; -1 when none holds
 * any (a topology file of another machine). */
int br_topo_process_cpu(const br_topo_t *topo);

/*
 * Where one rank sits in its node's topology and what it uses there: the facts the graph
 * needs, in a plain struct that ranks allgather so that every rank builds the same rings
 * and trees (core/graph). Filled by br_topo_place; `host` is the caller's.
 */
typedef struct {
    uint64_t host;      /* host identity (equal on one node), set by the caller */
    int32_t gpu;        /* GPU index in the node's topology, -1 without a GPU */
    int32_t gpu_dev;    /* that GPU's <gpu dev>, -1 without */
    int32_t cpu;        /* CPU (NUMA node) index the rank is placed on, -1 none */
    int32_t order;      /* position of its GPU (else its CPU) in a depth-first walk of the
                         * node's PCI tree: devices under one switch get adjacent positions */
    int32_t net;        /* NET index the rank uses, -1 none */
    int32_t net_dev;    /* that NET's <net dev> */
    int32_t net_path;   /* path type from the rank's GPU (or CPU) to it */
    uint64_t net_near;  /* NETs (bit i: NET i < 64) as close to the rank as the chosen one */
    float net_bw;       /* the chosen NET's bandwidth, GB/s */
    float gpu_bw;       /* the rank's GPU: NVLink bandwidth out of it, else its PCI link */
    float intra_bw;     /* the node's slowest GPU-to-GPU path bandwidth, 0 with < 2 GPUs */
    int32_t intra_type; /* the node's farthest GPU-to-GPU path type, -1 with < 2 GPUs */
    int32_t ngpus, nnets;
    int32_t sm;         /* the GPU's compute capability, 0 without */
    int32_t cpu_vendor; /* NCCL's codes: 1 Intel, 2 AMD, 3 Zhaoxin, 0 other */
} br_topo_place_t;

/*
 * Place a rank: on GPU `gpu` (index, -1 for none) or else on CPU `cpu` (index, -1: the
 * one holding this process's cores, else the first). The NET is chosen by affinity: the
 * ones with the best path type (then bandwidth) from the GPU, else from the CPU; among
 * equals, `spread` (the rank's position among the GPUs, or the ranks of its CPU, with
 * the same choice) picks one so that neighbours use different NICs. `why` (may be NULL)
 * gets a sentence for the INFO line. No NETs: net -1.
 */
void br_topo_place(const br_topo_t *topo, int gpu, int cpu, int spread, br_topo_place_t *place,
                   char *why, size_t why_len);

/* Ranks on the GPUs of a node: the position among GPUs with the same closest NETs, the
 * `spread` br_topo_place wants for GPU g. */
int br_topo_gpu_spread(const br_topo_t *topo, int g);

/* NCCL's names: "LOC", "NVL", ... "DIS" and "GPU", "PCI", ... "NET". */
const char *br_topo_path_str(int path_type);
const char *br_topo_type_str(br_topo_type_t type);

/*
 * The process's topology, built on the first successful call (later calls return the
 * same one): loaded from NCCL_TOPO_FILE, else detected with the nics given. The call
 * made with rank equal to NCCL_TOPO_DUMP_FILE_RANK also writes it to NCCL_TOPO_DUMP_FILE
 * (once per process; a failure to write is logged, not returned). ncclInvalidUsage only
 * when NCCL_TOPO_FILE is set and cannot be loaded (nothing is kept: the next call tries
 * again and logs the cause again); otherwise success, with *topo_p NULL when detection
 * failed (an INFO says why). *source_p (may be NULL) gets "file" or "detected".
 * Thread-safe.
 */
ncclResult_t br_topo_system_get(const br_topo_nic_info_t *nics, int nnics, int rank,
                                const br_topo_t **topo_p, const char **source_p);

/*
 * Make the topology in `text` (len bytes of XML that rank `from`, another process of this
 * host, detected and wrote with br_topo_to_text) the process's topology, unless the
 * process has one already (then that one is kept). NULL text: the sender's detection
 * failed, and so the process goes on without a topology. Writes NCCL_TOPO_DUMP_FILE as
 * br_topo_system_get does. *source_p (may be NULL) gets "detected by rank N". Always
 * succeeds (a text that does not parse is logged at INFO and treated as NULL).
 * Thread-safe.
 */
ncclResult_t br_topo_system_adopt(const char *text, size_t len, int from, int rank,
                                  const br_topo_t **topo_p, const char **source_p);

/* The topology as XML in NCCL's schema, in a malloc'd buffer (*text_p, *len_p bytes, not
 * NUL-terminated) the caller frees. */
ncclResult_t br_topo_to_text(const br_topo_t *topo, char **text_p, size_t *len_p);

/* Log the "Topology:" INFO summary for `rank`: counts, then each GPU and NET with its
 * path type and bandwidth to the process's CPU. */
void br_topo_log_summary(const br_topo_t *topo, const char *source, int rank);

#endif /* BR_TOPO_H_ */
