/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The process's topology: built once (NCCL_TOPO_FILE, else detection) under a mutex by
 * the first communicator init that asks, or adopted from the XML another process of the
 * host detected (br_topo_system_adopt: one detection per host, comm_init.c sends it),
 * kept until exit and shared read-only by every communicator; written to
 * NCCL_TOPO_DUMP_FILE once; and the "Topology:" INFO summary each rank prints at init.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo_int.h"
#include "util.h"

static pthread_mutex_t system_lock = PTHREAD_MUTEX_INITIALIZER;
static int system_built;       /* a topology was loaded or detection was tried */
static int system_dumped;      /* NCCL_TOPO_DUMP_FILE written (or tried) */
static br_topo_t *system_topo; /* NULL when detection failed */
static const char *system_source;
static char adopted_source[64]; /* "detected by rank N", for an adopted topology */

/* Build the topology; called with system_lock held, until it succeeds. */
static ncclResult_t system_build(const br_topo_nic_info_t *nics, int nnics)
{
    const char *file = BR_PARAM_STR(TOPO_FILE);
    uint64_t t0 = br_time_ns();
    if (file != NULL) {
        if (br_topo_load(file, &system_topo) != ncclSuccess) {
            BR_WARN(NCCL_INIT | NCCL_GRAPH, "NCCL_TOPO_FILE %s cannot be used (%s)", file,
                    br_log_last_error());
            return ncclInvalidUsage;
        }
        system_source = "file";
    } else {
        if (br_topo_detect(nics, nnics, &system_topo) != ncclSuccess) {
            BR_INFO(NCCL_INIT | NCCL_GRAPH,
                    "topology detection failed (%s); going on without "
                    "a topology",
                    br_log_last_error());
            system_topo = NULL;
        }
        system_source = "detected";
    }
    system_built = 1;
    BR_INFO(NCCL_GRAPH, "topology %s%s%s in %.1f ms", system_source, file ? " from " : "",
            file ? file : "", (double)(br_time_ns() - t0) * 1e-6);
    return ncclSuccess;
}

/* Write NCCL_TOPO_DUMP_FILE if this is the rank that writes it; called with system_lock. */
static void dump_once(int rank)
{
    const char *dump = BR_PARAM_STR(TOPO_DUMP_FILE);
    if (system_topo == NULL || dump == NULL || system_dumped ||
        rank != (int)BR_PARAM_INT(TOPO_DUMP_FILE_RANK)) {
        return;
    }
    system_dumped = 1;
    if (br_topo_dump(system_topo, dump) == ncclSuccess) {
        BR_INFO(NCCL_INIT | NCCL_GRAPH | NCCL_ENV,
                "rank %d wrote the topology to %s "
                "(NCCL_TOPO_DUMP_FILE)",
                rank, dump);
    }
}

ncclResult_t br_topo_system_get(const br_topo_nic_info_t *nics, int nnics, int rank,
                                const br_topo_t **topo_p, const char **source_p)
{
    ncclResult_t res = ncclSuccess;
    pthread_mutex_lock(&system_lock);
    if (!system_built) {
        res = system_build(nics, nnics);
    }
    if (res == ncclSuccess) {
        dump_once(rank);
    }
    pthread_mutex_unlock(&system_lock);
    *topo_p = res == ncclSuccess ? system_topo : NULL;
    if (source_p != NULL) {
        *source_p = system_source;
    }
    return res;
}

ncclResult_t br_topo_system_adopt(const char *text, size_t len, int from, int rank,
                                  const br_topo_t **topo_p, const char **source_p)
{
    ncclResult_t res = ncclSuccess;
    pthread_mutex_lock(&system_lock);
    if (!system_built) {
        char name[64];
        br_topo_t *topo = NULL;
        snprintf(name, sizeof(name), "the topology rank %d detected", from);
        /* The sender wrote it with br_topo_write: a parse failure is a bug, not user input,
         * but it is still reported and init goes on without a topology, as when detection
         * fails. */
        if (text != NULL && br_topo_parse(text, len, name, &topo) != ncclSuccess) {
            BR_INFO(NCCL_INIT | NCCL_GRAPH, "rank %d: %s does not parse (%s); going on without",
                    rank, name, br_log_last_error());
            topo = NULL;
        }
        snprintf(adopted_source, sizeof(adopted_source), "detected by rank %d", from);
        system_topo = topo;
        system_source = adopted_source;
        system_built = 1;
    }
    dump_once(rank);
    pthread_mutex_unlock(&system_lock);
    *topo_p = system_topo;
    if (source_p != NULL) {
        *source_p = system_source;
    }
    return res;
}

ncclResult_t br_topo_to_text(const br_topo_t *topo, char **text_p, size_t *len_p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL) {
        BR_WARN(NCCL_INIT | NCCL_GRAPH, "cannot write the topology to memory: %s", strerror(errno));
        return ncclSystemError;
    }
    ncclResult_t res = br_topo_write(topo, f);
    if (fclose(f) != 0 && res == ncclSuccess) {
        BR_WARN(NCCL_INIT | NCCL_GRAPH, "cannot write the topology to memory: %s", strerror(errno));
        res = ncclSystemError;
    }
    if (res != ncclSuccess) {
        free(text);
        return res;
    }
    *text_p = text;
    *len_p = len;
    return ncclSuccess;
}

/* One object's line: its path from the process's CPU. */
static void log_object(const br_topo_t *topo, br_topo_type_t t, int i, int cpu, int rank)
{
    const br_topo_node_t *node = br_topo_node(topo, t, i);
    const br_topo_path_t *p = br_topo_path(topo, t, i, BR_TOPO_CPU, cpu);
    char what[160];
    if (t == BR_TOPO_GPU) {
        snprintf(what, sizeof(what), "GPU %d (%s, sm %d)", i, node->busid, node->gpu.sm);
    } else {
        const br_topo_node_t *nic = br_topo_node_at(topo, node->parent);
        snprintf(what, sizeof(what), "NIC %d %s (%s, %.1f GB/s)", i, node->net.name,
                 nic != NULL && nic->busid[0] != '\0' ? nic->busid : "virtual",
                 (double)br_topo_net_bw(node));
    }
    BR_INFO(NCCL_INIT | NCCL_GRAPH, "Topology: rank %d: %s is %s from CPU %d, %.1f GB/s, %d hops",
            rank, what, br_topo_path_str(p->type), br_topo_node(topo, BR_TOPO_CPU, cpu)->cpu.numaid,
            (double)p->bw, p->hops);
}

void br_topo_log_summary(const br_topo_t *topo, const char *source, int rank)
{
    if (topo == NULL) {
        BR_INFO(NCCL_INIT | NCCL_GRAPH, "Topology: rank %d: none (%s)", rank,
                source != NULL ? source : "not built");
        return;
    }
    int cpu = br_topo_process_cpu(topo), guessed = cpu < 0;
    if (guessed) {
        cpu = 0; /* a file of another machine: none of its CPUs holds ours */
    }
    char set[128] = "";
    if (topo->count[BR_TOPO_CPU] > 0) {
        const br_topo_node_t *c = br_topo_node(topo, BR_TOPO_CPU, cpu);
        snprintf(set, sizeof(set), "; this process on CPU %d (%d cores%s)", c->cpu.numaid,
                 br_topo_cpu_weight(c), guessed ? ", assumed: none holds its cores" : "");
    }
    BR_INFO(NCCL_INIT | NCCL_GRAPH,
            "Topology: rank %d: %s, %d CPU%s, %d PCI switch%s, %d GPU%s, %d NIC%s, %d NVSwitch "
            "fabric%s%s",
            rank, source, topo->count[BR_TOPO_CPU], topo->count[BR_TOPO_CPU] == 1 ? "" : "s",
            topo->count[BR_TOPO_PCI], topo->count[BR_TOPO_PCI] == 1 ? "" : "es",
            topo->count[BR_TOPO_GPU], topo->count[BR_TOPO_GPU] == 1 ? "" : "s",
            topo->count[BR_TOPO_NET], topo->count[BR_TOPO_NET] == 1 ? "" : "s",
            topo->count[BR_TOPO_NVS], topo->count[BR_TOPO_NVS] == 1 ? "" : "s", set);
    if (topo->count[BR_TOPO_CPU] == 0) {
        return;
    }
    for (int g = 0; g < topo->count[BR_TOPO_GPU]; g++) {
        log_object(topo, BR_TOPO_GPU, g, cpu, rank);
    }
    for (int n = 0; n < topo->count[BR_TOPO_NET]; n++) {
        log_object(topo, BR_TOPO_NET, n, cpu, rank);
    }
}
