/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Init consistency: before a communicator goes live its ranks compare what must be the
 * same everywhere: the library's version, the net and tuner plugins they loaded (name
 * and ABI version), and the parameters that shape the wire and the choices (FIFO and
 * step sizes, channels, the transports allowed, NCCL_ALGO / NCCL_PROTO, the in-place read
 * window, the Tree chunk, how reductions fold: BRAID_DETERMINISTIC, BRAID_ACCUMULATE).
 * Every rank gets every rank's record in one allgather and reaches the same verdict, so
 * they all fail init together, with one message naming each value and the ranks that
 * have it. A different profiler is only worth a warning. The records travel only when
 * digests of them, allgathered first, differ.
 * Parameters the ranks already reconcile (BRAID_RING_PIPELINE and BRAID_ONESHOT_BYTES:
 * the smallest wins) and local ones (logging, waiting) are not compared.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "util.h"

#ifndef BRAID_VERSION_STR
#define BRAID_VERSION_STR "unknown"
#endif

#define CHECK_TEXT 64

/* The parameters that must agree, and what a disagreement breaks. */
static const struct {
    br_param_id_t id;
    const char *why;
} must_agree[] = {
    {BR_PARAM_ID_BUFFSIZE, "FIFO sizes"},
    {BR_PARAM_ID_LL_BUFFSIZE, "LL FIFO sizes"},
    {BR_PARAM_ID_P2P_NET_CHUNKSIZE, "send/recv step sizes"},
    {BR_PARAM_ID_MIN_NCHANNELS, "the channels a call is split into"},
    {BR_PARAM_ID_MAX_NCHANNELS, "the channels a call is split into"},
    {BR_PARAM_ID_NCHANNELS, "the channels a call is split into"},
    {BR_PARAM_ID_TREE_CHUNK, "Tree slot sizes"},
    {BR_PARAM_ID_CMA_BYTES, "which calls are read in place"},
    {BR_PARAM_ID_CMA_MAX_BYTES, "which calls are read in place"},
    {BR_PARAM_ID_ALGO, "the algorithm each call takes"},
    {BR_PARAM_ID_PROTO, "the protocol each call takes"},
    {BR_PARAM_ID_P2P_DISABLE, "the transport between ranks"},
    {BR_PARAM_ID_SHM_DISABLE, "the transport between ranks"},
    {BR_PARAM_ID_NET, "the network"},
    {BR_PARAM_ID_FAILOVER, "whether receivers acknowledge network data (transport failover)"},
    {BR_PARAM_ID_DETERMINISTIC, "how reductions combine the ranks' inputs (owner fold or not)"},
    {BR_PARAM_ID_ACCUMULATE, "how reductions combine the ranks' inputs (owner fold or not)"},
};
#define NCHECK ((int)(sizeof(must_agree) / sizeof(must_agree[0])))

/* What one rank tells the others. */
typedef struct {
    char version[32];
    char net[CHECK_TEXT]; /* "name (v12)" or "" when this rank loaded no net plugin */
    char tuner[CHECK_TEXT];
    char profiler[CHECK_TEXT];
    char param[NCHECK][CHECK_TEXT];
} check_rec_t;

static void plugin_text(char *buf, const char *name, int version)
{
    /* Names are at most 63 bytes; a long one loses its tail, never the version. */
    snprintf(buf, CHECK_TEXT, "%.48s (v%d)", name, version);
}

static void rec_fill(ncclComm_t comm, check_rec_t *r)
{
    int nrows;
    const br_param_row_t *rows = br_param_table(&nrows);

    memset(r, 0, sizeof(*r));
    snprintf(r->version, sizeof(r->version), "%s (NCCL API %d)", BRAID_VERSION_STR,
             NCCL_VERSION_CODE);
    if (comm->tc->net != NULL) {
        plugin_text(r->net, comm->tc->net->name, comm->tc->net->version);
    }
    snprintf(r->tuner, sizeof(r->tuner), "none");
    if (comm->tuner != NULL) {
        plugin_text(r->tuner, comm->tuner->name, comm->tuner->version);
    }
    snprintf(r->profiler, sizeof(r->profiler), "none");
    if (comm->ec->prof != NULL) {
        plugin_text(r->profiler, comm->ec->prof->name, comm->ec->prof->version);
    }
    for (int i = 0; i < NCHECK; i++) {
        const char *t = (int)must_agree[i].id < nrows ? rows[must_agree[i].id].text : NULL;
        snprintf(r->param[i], CHECK_TEXT, "%s", t != NULL && t[0] != '\0' ? t : "(unset)");
    }
}

/* The field at byte offset `off` of every record (a text of CHECK_TEXT bytes or less). */
static const char *field(const check_rec_t *all, int r, size_t off)
{
    return (const char *)&all[r] + off;
}

/* Do the ranks disagree on the field? Then describe who has what in buf ("4194304 on
 * ranks 0, 2; 1048576 on rank 1"). Ranks with an empty text are left out (a rank that
 * loaded no net plugin has nothing to disagree about). */
static int disagree(const check_rec_t *all, int n, size_t off, char *buf, size_t len)
{
    int first = -1, differs = 0;
    char *done = calloc((size_t)n, 1);
    size_t at = 0;

    for (int r = 0; r < n; r++) {
        if (field(all, r, off)[0] == '\0') {
            continue;
        }
        if (first < 0) {
            first = r;
        } else if (strcmp(field(all, r, off), field(all, first, off)) != 0) {
            differs = 1;
        }
    }
    buf[0] = '\0';
    if (!differs || done == NULL) {
        free(done);
        return differs;
    }
    for (int r = 0; r < n && at < len; r++) {
        if (done[r] || field(all, r, off)[0] == '\0') {
            continue;
        }
        int count = 0;
        for (int k = r; k < n; k++) {
            count += strcmp(field(all, k, off), field(all, r, off)) == 0;
        }
        at += (size_t)snprintf(buf + at, len - at, "%s\"%s\" on rank%s", at ? "; " : "",
                               field(all, r, off), count > 1 ? "s" : "");
        int listed = 0;
        for (int k = r; k < n && at < len; k++) {
            if (strcmp(field(all, k, off), field(all, r, off)) != 0) {
                continue;
            }
            done[k] = 1;
            if (listed < 8) {
                at += (size_t)snprintf(buf + at, len - at, "%s %d", listed ? "," : "", k);
            } else if (listed == 8) {
                at += (size_t)snprintf(buf + at, len - at, ", ...");
            }
            listed++;
        }
    }
    free(done);
    return 1;
}

/* A compared field: where it is in the record, what it is, what a difference breaks. */
typedef struct {
    size_t off;
    const char *what, *why;
} field_t;

/*
 * Are all ranks' records the same, byte for byte? An allgather of two 64-bit digests of
 * each answers it with 16 bytes per rank where the records take 1184: the records were
 * 1.2 MB per rank and 1.2 GB through the bootstrap's sockets among 1024 ranks, with as
 * many freshly zeroed pages, the bulk of init's system time (issue 40). Every rank sees
 * the same digests, so all of them take the same path after it.
 */
static ncclResult_t records_agree(ncclComm_t comm, const check_rec_t *mine, int *agree_p)
{
    uint64_t(*all)[2] = NULL;
    int agree = 1;

    BR_CHECK(br_calloc(&all, (size_t)comm->nranks, "init consistency digests"));
    all[comm->rank][0] = br_hash_bytes(mine, sizeof(*mine), 0);
    all[comm->rank][1] = br_hash_bytes(mine, sizeof(*mine), 0x5a5a5a5a5a5a5a5aull);
    ncclResult_t res = br_bootstrap_allgather(comm->tc->boot, all, sizeof(*all));
    for (int r = 1; r < comm->nranks && res == ncclSuccess; r++) {
        agree &= all[r][0] == all[0][0] && all[r][1] == all[0][1];
    }
    free(all);
    if (res == ncclSuccess) {
        *agree_p = agree;
    }
    return res;
}

ncclResult_t br_comm_check_consistency(ncclComm_t comm)
{
    int n = comm->nranks, agree = 0;
    check_rec_t *all = NULL, mine;
    ncclResult_t res;
    char who[1024], msg[1500];

    rec_fill(comm, &mine); /* zeroed first: equal settings give equal bytes */
    BR_CHECK(records_agree(comm, &mine, &agree));
    if (agree) {
        return ncclSuccess; /* then no field differs, the profiler's neither */
    }
    /* Something differs: every rank's record, to name who has what. */
    BR_CHECK(br_calloc(&all, (size_t)n, "init consistency records"));
    all[comm->rank] = mine;
    res = br_bootstrap_allgather(comm->tc->boot, all, sizeof(*all));
    if (res != ncclSuccess) {
        free(all);
        return res;
    }
    field_t fields[3 + NCHECK];
    int nf = 0, nrows;
    const br_param_row_t *rows = br_param_table(&nrows);
    fields[nf++] = (field_t){offsetof(check_rec_t, version), "the library version",
                             "the wire formats may differ"};
    fields[nf++] = (field_t){offsetof(check_rec_t, net), "the net plugin",
                             "the ranks cannot talk to each other"};
    fields[nf++] = (field_t){offsetof(check_rec_t, tuner), "the tuner plugin",
                             "the ranks would choose algorithms differently"};
    for (int i = 0; i < NCHECK; i++) {
        fields[nf++] = (field_t){offsetof(check_rec_t, param) + (size_t)i * CHECK_TEXT,
                                 rows[must_agree[i].id].key, must_agree[i].why};
    }
    res = ncclSuccess;
    for (int f = 0; f < nf && res == ncclSuccess; f++) {
        if (disagree(all, n, fields[f].off, who, sizeof(who))) {
            snprintf(msg, sizeof(msg),
                     "rank %d (host %s): init: the ranks disagree on %s (%s): %s; set it the "
                     "same on every rank",
                     comm->rank, br_host_name(), fields[f].what, fields[f].why, who);
            BR_WARN(NCCL_INIT, "%s", msg);
            res = ncclInvalidUsage;
        }
    }
    if (res != ncclSuccess) {
        /* Every rank reaches this verdict; meet before failing, or a rank that finished
         * the ring allgather first would, by failing init (which tells the others), cut
         * off those still waiting for their last record. */
        (void)br_bootstrap_barrier(comm->tc->boot);
    }
    if (res == ncclSuccess && comm->rank == 0 &&
        disagree(all, n, offsetof(check_rec_t, profiler), who, sizeof(who))) {
        BR_WARN(NCCL_INIT,
                "the ranks loaded different profiler plugins (harmless, but their "
                "profiles will not match): %s",
                who);
    }
    free(all);
    return res;
}
