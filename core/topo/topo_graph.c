/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The graph itself: nodes in one growing array (so links and paths name nodes by index),
 * links between them, the numbering of each type once the graph is complete, and the
 * read-only queries of topo.h. Also the two textual formats every part shares: PCI bus
 * ids and CPU sets. Building is single-threaded; a finished graph is read-only.
 */
#include <ctype.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo_int.h"
#include "util.h"

static const char *const type_str[BR_TOPO_NTYPES] = {"GPU", "PCI", "NVS", "CPU", "NIC", "NET"};
static const char *const path_str[] = {"LOC", "NVL", "NVB", "C2C", "PIX", "PXB",
                                       "P2C", "PXN", "PHB", "SYS", "NET", "DIS"};

const char *br_topo_path_str(int path_type)
{
    if (path_type < 0 || path_type > BR_TOPO_PATH_DIS) {
        return "?";
    }
    return path_str[path_type];
}

const char *br_topo_type_str(br_topo_type_t type)
{
    return (unsigned)type < BR_TOPO_NTYPES ? type_str[type] : "?";
}

ncclResult_t br_topo_alloc(br_topo_t **topo_p)
{
    return br_calloc(topo_p, 1, "topology");
}

void br_topo_free(br_topo_t *topo)
{
    if (topo == NULL) {
        return;
    }
    for (int n = 0; n < topo->nnodes; n++) {
        br_topo_node_t *node = &topo->nodes[n];
        free(node->links);
        free(node->cpu.set);
        free(node->gpu.nvlinks);
        free(node->pcilinks);
    }
    for (int t = 0; t < BR_TOPO_NTYPES; t++) {
        free(topo->by_type[t]);
        free(topo->paths[t]);
    }
    free(topo->nodes);
    free(topo);
}

ncclResult_t br_topo_node_add(br_topo_t *topo, br_topo_type_t type, int parent, int *n_p)
{
    if (topo->nnodes == topo->cap) {
        int cap = topo->cap ? 2 * topo->cap : 32;
        br_topo_node_t *nodes = realloc(topo->nodes, (size_t)cap * sizeof(*nodes));
        if (nodes == NULL) {
            BR_WARN(NCCL_ALLOC, "out of memory adding topology node %d", topo->nnodes);
            return ncclSystemError;
        }
        topo->nodes = nodes;
        topo->cap = cap;
    }
    br_topo_node_t *node = &topo->nodes[topo->nnodes];
    memset(node, 0, sizeof(*node));
    node->type = type;
    node->index = topo->count[type]++;
    node->parent = parent;
    node->busnum = -1;
    node->cpu.numaid = node->cpu.familyid = node->cpu.modelid = -1;
    node->gpu.dev = node->gpu.sm = node->gpu.rank = -1;
    node->net.dev = -1;
    *n_p = topo->nnodes++;
    return ncclSuccess;
}

ncclResult_t br_topo_link_add(br_topo_t *topo, int a, int b, int type, float bw)
{
    br_topo_node_t *node = &topo->nodes[a];
    for (int l = 0; l < node->nlinks; l++) {
        /* NCCL adds up links of one type to one peer (NVLinks counted one by one). */
        if (node->links[l].peer == b && node->links[l].type == type) {
            node->links[l].bw += bw;
            return ncclSuccess;
        }
    }
    if (node->nlinks == node->cap_links) {
        int cap = node->cap_links ? 2 * node->cap_links : 4;
        br_topo_link_t *links = realloc(node->links, (size_t)cap * sizeof(*links));
        if (links == NULL) {
            BR_WARN(NCCL_ALLOC, "out of memory adding a topology link");
            return ncclSystemError;
        }
        node->links = links;
        node->cap_links = cap;
    }
    node->links[node->nlinks++] = (br_topo_link_t){.type = type, .bw = bw, .peer = b};
    return ncclSuccess;
}

ncclResult_t br_topo_connect(br_topo_t *topo, int a, int b, int type, float bw)
{
    BR_CHECK(br_topo_link_add(topo, a, b, type, bw));
    return br_topo_link_add(topo, b, a, type, bw);
}

ncclResult_t br_topo_index_build(br_topo_t *topo)
{
    for (int t = 0; t < BR_TOPO_NTYPES; t++) {
        free(topo->by_type[t]);
        topo->by_type[t] = NULL;
        if (topo->count[t] > 0) {
            BR_CHECK(br_calloc(&topo->by_type[t], (size_t)topo->count[t], "topology index"));
        }
    }
    for (int n = 0; n < topo->nnodes; n++) {
        topo->by_type[topo->nodes[n].type][topo->nodes[n].index] = n;
    }
    return ncclSuccess;
}

ncclResult_t br_topo_finish(br_topo_t *topo)
{
    BR_CHECK(br_topo_index_build(topo));
    return br_topo_paths_compute(topo);
}

int64_t br_topo_busnum(const char *busid)
{
    int64_t v = 0;
    int digits = 0;
    for (const char *c = busid; c != NULL && *c != '\0' && digits < 16; c++) {
        if (*c == ':' || *c == '.') {
            continue;
        }
        if (!isxdigit((unsigned char)*c)) {
            break;
        }
        v = v * 16 +
            (isdigit((unsigned char)*c) ? *c - '0' : tolower((unsigned char)*c) - 'a' + 10);
        digits++;
    }
    return digits > 0 ? v : -1;
}

int br_topo_cpuset_parse(const char *text, uint64_t **set_p, int *words_p)
{
    int nchunks = 1;
    for (const char *c = text; *c != '\0'; c++) {
        nchunks += *c == ',';
    }
    int words = (nchunks + 1) / 2;
    uint64_t *set = calloc((size_t)words, sizeof(*set));
    if (set == NULL) {
        return -1;
    }
    /* Chunks are 32-bit words, the most significant first: chunk k (from the end) is
     * word k of the set, bits 32*(k%2) and up of a 64-bit word. */
    const char *s = text;
    for (int k = nchunks - 1; k >= 0; k--) {
        char *stop;
        const char *e = strchr(s, ',');
        size_t n = e != NULL ? (size_t)(e - s) : strlen(s);
        if (n == 0 || n > 8 || !isxdigit((unsigned char)*s)) {
            free(set);
            return -1;
        }
        unsigned long v = strtoul(s, &stop, 16);
        if ((size_t)(stop - s) != n) {
            free(set);
            return -1;
        }
        set[k / 2] |= (uint64_t)v << (32 * (k % 2));
        s += n + (e != NULL);
    }
    *set_p = set;
    *words_p = words;
    return 0;
}

void br_topo_cpuset_format(const uint64_t *set, int words, char *buf, size_t len)
{
    int top = -1;
    for (int k = 0; k < 2 * words; k++) {
        if ((set[k / 2] >> (32 * (k % 2))) & 0xffffffffu) {
            top = k;
        }
    }
    size_t at = 0;
    buf[0] = '\0';
    if (top < 0) {
        snprintf(buf, len, "0");
        return;
    }
    for (int k = top; k >= 0 && at < len; k--) {
        unsigned v = (unsigned)((set[k / 2] >> (32 * (k % 2))) & 0xffffffffu);
        int n = snprintf(buf + at, len - at, "%s%08x", k == top ? "" : ",", v);
        at += n > 0 ? (size_t)n : 0;
    }
}

/* ---- queries ---- */

int br_topo_count(const br_topo_t *topo, br_topo_type_t type)
{
    return (unsigned)type < BR_TOPO_NTYPES ? topo->count[type] : 0;
}

int br_topo_nnodes(const br_topo_t *topo)
{
    return topo->nnodes;
}

int br_topo_index(const br_topo_t *topo, br_topo_type_t type, int i)
{
    if ((unsigned)type >= BR_TOPO_NTYPES || i < 0 || i >= topo->count[type]) {
        return -1;
    }
    return topo->by_type[type][i];
}

const br_topo_node_t *br_topo_node_at(const br_topo_t *topo, int n)
{
    return n >= 0 && n < topo->nnodes ? &topo->nodes[n] : NULL;
}

const br_topo_node_t *br_topo_node(const br_topo_t *topo, br_topo_type_t type, int i)
{
    return br_topo_node_at(topo, br_topo_index(topo, type, i));
}

br_topo_type_t br_topo_node_type(const br_topo_node_t *node)
{
    return node->type;
}

int br_topo_node_rank_in_type(const br_topo_node_t *node)
{
    return node->index;
}

const char *br_topo_node_busid(const br_topo_node_t *node)
{
    return node->busid;
}

const char *br_topo_node_name(const br_topo_node_t *node, char *buf, size_t len)
{
    switch (node->type) {
    case BR_TOPO_CPU: snprintf(buf, len, "CPU/%d", node->cpu.numaid); break;
    case BR_TOPO_NET: snprintf(buf, len, "NET/%s", node->net.name); break;
    case BR_TOPO_NVS: snprintf(buf, len, "NVS/%d", node->index); break;
    default:
        snprintf(buf, len, "%s/%s", type_str[node->type],
                 node->busid[0] != '\0' ? node->busid : "virtual");
        break;
    }
    return buf;
}

int br_topo_node_nlinks(const br_topo_node_t *node)
{
    return node->nlinks;
}

const br_topo_link_t *br_topo_node_link(const br_topo_node_t *node, int l)
{
    return l >= 0 && l < node->nlinks ? &node->links[l] : NULL;
}

int br_topo_gpu_dev(const br_topo_node_t *node)
{
    return node->type == BR_TOPO_GPU ? node->gpu.dev : -1;
}

int br_topo_gpu_sm(const br_topo_node_t *node)
{
    return node->type == BR_TOPO_GPU ? node->gpu.sm : -1;
}

int br_topo_gpu_rank(const br_topo_node_t *node)
{
    return node->type == BR_TOPO_GPU ? node->gpu.rank : -1;
}

int br_topo_cpu_numaid(const br_topo_node_t *node)
{
    return node->type == BR_TOPO_CPU ? node->cpu.numaid : -1;
}

int br_topo_cpu_has(const br_topo_node_t *node, int cpu)
{
    if (node->type != BR_TOPO_CPU || cpu < 0 || cpu / 64 >= node->cpu.words) {
        return 0;
    }
    return (int)((node->cpu.set[cpu / 64] >> (cpu % 64)) & 1);
}

int br_topo_cpu_weight(const br_topo_node_t *node)
{
    int n = 0;
    for (int w = 0; node->type == BR_TOPO_CPU && w < node->cpu.words; w++) {
        n += __builtin_popcountll(node->cpu.set[w]);
    }
    return n;
}

const char *br_topo_net_name(const br_topo_node_t *node)
{
    return node->type == BR_TOPO_NET ? node->net.name : NULL;
}

float br_topo_net_bw(const br_topo_node_t *node)
{
    int mbps = node->net.speed > 0 ? node->net.speed : 10000; /* NCCL: some NICs say -1 */
    return node->type == BR_TOPO_NET ? (float)mbps / 8000.0f : 0.0f;
}

float br_topo_net_latency(const br_topo_node_t *node, int *set_p)
{
    int net = node->type == BR_TOPO_NET;
    *set_p = net && node->net.latency_set;
    return net ? node->net.latency : 0.0f;
}

int br_topo_net_coll(const br_topo_node_t *node)
{
    return node->type == BR_TOPO_NET ? node->net.coll : 0;
}

const br_topo_path_t *br_topo_path(const br_topo_t *topo, br_topo_type_t t1, int i1,
                                   br_topo_type_t t2, int i2)
{
    int n = br_topo_index(topo, t1, i1);
    if (n < 0 || (unsigned)t2 >= BR_TOPO_NTYPES || topo->paths[t2] == NULL || i2 < 0 ||
        i2 >= topo->count[t2]) {
        return NULL;
    }
    return &topo->paths[t2][(size_t)n * (size_t)topo->count[t2] + (size_t)i2];
}

int br_topo_find_gpu(const br_topo_t *topo, const char *busid)
{
    int64_t want = br_topo_busnum(busid);
    for (int i = 0; i < topo->count[BR_TOPO_GPU]; i++) {
        if (topo->nodes[topo->by_type[BR_TOPO_GPU][i]].busnum == want) {
            return i;
        }
    }
    return -1;
}

int br_topo_find_net(const br_topo_t *topo, const char *name)
{
    for (int i = 0; i < topo->count[BR_TOPO_NET]; i++) {
        if (strcmp(topo->nodes[topo->by_type[BR_TOPO_NET][i]].net.name, name) == 0) {
            return i;
        }
    }
    return -1;
}

int br_topo_process_cpu(const br_topo_t *topo)
{
    cpu_set_t mask;
    int best = -1, best_n = 0;
    if (sched_getaffinity(0, sizeof(mask), &mask) != 0) {
        return -1;
    }
    for (int c = 0; c < topo->count[BR_TOPO_CPU]; c++) {
        const br_topo_node_t *cpu = br_topo_node(topo, BR_TOPO_CPU, c);
        int n = 0;
        for (int i = 0; i < CPU_SETSIZE; i++) {
            n += CPU_ISSET(i, &mask) && br_topo_cpu_has(cpu, i);
        }
        if (n > best_n) {
            best = c;
            best_n = n;
        }
    }
    return best;
}
