/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One-sided operations on host windows (ncclPutSignal, ncclSignal, ncclWaitSignal) over
 * the communicator's bootstrap connections. A put is one header (window, offset, bytes,
 * signal) and its payload, sent out of band: the sender never waits for the target. The
 * target applies what arrived when it waits: it receives its peer's messages in order,
 * writes each payload into the window and only then counts its signal, so a wait that
 * returns has every byte of the puts it counted in place (NCCL's ordering promise).
 * Signals counted while waiting for another (signal, context) are kept for later waits.
 *
 * State (struct br_comm_rma, made on first use): the windows by sequence number (every
 * rank registers windows collectively, so the n-th window has number n on every rank),
 * and the counters of signals received but not yet waited for. `mu` guards both; `wait_mu`
 * lets one thread at a time receive, so that messages are applied in order.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "util.h"

#define BR_TAG_RMA 5 /* bootstrap tag; comm_channels.c uses 1 and 2, split 3, topo 4 */
#define RMA_MAGIC 0x726d6131u
#define RMA_NO_WINDOW UINT32_MAX /* a signal without data */

typedef struct {
    uint32_t magic;
    uint32_t win_seq; /* RMA_NO_WINDOW for ncclSignal */
    int32_t sig_idx, ctx;
    uint64_t offset, bytes;
} rma_hdr_t;

typedef struct {
    void *buff;
    size_t size;
    uint32_t seq;
} rma_win_t;

typedef struct {
    int peer, ctx, sig;
    int64_t count; /* arrived and not waited for yet */
} rma_count_t;

struct br_comm_rma {
    pthread_mutex_t mu;
    pthread_mutex_t wait_mu;
    rma_win_t *wins;
    int nwins, capw;
    uint32_t next_seq;
    rma_count_t *counts;
    int ncounts, capc;
};

static ncclResult_t rma_get(ncclComm_t comm, struct br_comm_rma **rma_p)
{
    pthread_mutex_lock(&comm->lock);
    if (comm->rma == NULL) {
        struct br_comm_rma *r = NULL;
        if (br_calloc(&r, 1, "one-sided state") != ncclSuccess) {
            pthread_mutex_unlock(&comm->lock);
            return ncclSystemError;
        }
        pthread_mutex_init(&r->mu, NULL);
        pthread_mutex_init(&r->wait_mu, NULL);
        comm->rma = r;
    }
    *rma_p = comm->rma;
    pthread_mutex_unlock(&comm->lock);
    return ncclSuccess;
}

ncclResult_t br_comm_win_add(ncclComm_t comm, void *buff, size_t size, uint32_t *seq_p)
{
    struct br_comm_rma *r;
    BR_CHECK(rma_get(comm, &r));
    pthread_mutex_lock(&r->mu);
    if (r->nwins == r->capw) {
        int cap = r->capw ? 2 * r->capw : 8;
        rma_win_t *w = realloc(r->wins, (size_t)cap * sizeof(*w));
        if (w == NULL) {
            pthread_mutex_unlock(&r->mu);
            BR_WARN(NCCL_ALLOC, "rank %d: out of memory for %d windows", comm->rank, cap);
            return ncclSystemError;
        }
        r->wins = w;
        r->capw = cap;
    }
    *seq_p = r->next_seq++;
    r->wins[r->nwins++] = (rma_win_t){buff, size, *seq_p};
    pthread_mutex_unlock(&r->mu);
    return ncclSuccess;
}

void br_comm_win_remove(ncclComm_t comm, uint32_t seq)
{
    struct br_comm_rma *r = comm->rma;
    if (r == NULL) {
        return;
    }
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->nwins; i++) {
        if (r->wins[i].seq == seq) {
            r->wins[i] = r->wins[--r->nwins];
            break;
        }
    }
    pthread_mutex_unlock(&r->mu);
}

ncclResult_t br_comm_rma_put(ncclComm_t comm, int peer, uint32_t win_seq, uint64_t offset,
                             const void *data, size_t bytes, int sig_idx, int ctx)
{
    rma_hdr_t h = {RMA_MAGIC, win_seq, sig_idx, ctx, offset, bytes};
    br_bootstrap_t *boot = comm->tc->boot;

    /* Header then payload, in order on (peer, tag); neither waits for the target. */
    BR_CHECK(br_bootstrap_send(boot, peer, BR_TAG_RMA, &h, sizeof(h)));
    if (bytes > 0) {
        BR_CHECK(br_bootstrap_send(boot, peer, BR_TAG_RMA, data, bytes));
    }
    return ncclSuccess;
}

/* The counter of (peer, ctx, sig), made when missing; NULL when out of memory. Under mu. */
static rma_count_t *counter(struct br_comm_rma *r, int peer, int ctx, int sig)
{
    for (int i = 0; i < r->ncounts; i++) {
        rma_count_t *c = &r->counts[i];
        if (c->peer == peer && c->ctx == ctx && c->sig == sig) {
            return c;
        }
    }
    if (r->ncounts == r->capc) {
        int cap = r->capc ? 2 * r->capc : 16;
        rma_count_t *c = realloc(r->counts, (size_t)cap * sizeof(*c));
        if (c == NULL) {
            return NULL;
        }
        r->counts = c;
        r->capc = cap;
    }
    r->counts[r->ncounts] = (rma_count_t){peer, ctx, sig, 0};
    return &r->counts[r->ncounts++];
}

/* Receive peer's next message: its payload into the window, then its signal counted. */
static ncclResult_t apply_next(ncclComm_t comm, struct br_comm_rma *r, int peer)
{
    rma_hdr_t h;
    char *dst = NULL;
    br_bootstrap_t *boot = comm->tc->boot;

    BR_CHECK(br_bootstrap_recv(boot, peer, BR_TAG_RMA, &h, sizeof(h)));
    if (h.magic != RMA_MAGIC) {
        BR_WARN(NCCL_P2P, "ncclWaitSignal: rank %d: a malformed one-sided message from rank %d",
                comm->rank, peer);
        return ncclInternalError;
    }
    if (h.bytes > 0) {
        pthread_mutex_lock(&r->mu);
        for (int i = 0; i < r->nwins; i++) {
            const rma_win_t *w = &r->wins[i];
            if (w->seq == h.win_seq && h.offset <= w->size && h.bytes <= w->size - h.offset) {
                dst = (char *)w->buff + h.offset;
            }
        }
        pthread_mutex_unlock(&r->mu);
        if (dst == NULL) {
            BR_WARN(NCCL_P2P,
                    "ncclWaitSignal: rank %d: rank %d put %llu bytes at offset %llu of "
                    "window %u, which this rank does not have registered or is smaller",
                    comm->rank, peer, (unsigned long long)h.bytes, (unsigned long long)h.offset,
                    h.win_seq);
            return ncclInvalidUsage;
        }
        BR_CHECK(br_bootstrap_recv(boot, peer, BR_TAG_RMA, dst, h.bytes));
    }
    pthread_mutex_lock(&r->mu);
    rma_count_t *c = counter(r, peer, h.ctx, h.sig_idx);
    if (c != NULL) {
        c->count++;
    }
    pthread_mutex_unlock(&r->mu);
    return c != NULL ? ncclSuccess : ncclSystemError;
}

ncclResult_t br_comm_rma_wait(ncclComm_t comm, int peer, int sig_idx, int ctx, int count)
{
    struct br_comm_rma *r;
    ncclResult_t res = ncclSuccess;

    BR_CHECK(rma_get(comm, &r));
    pthread_mutex_lock(&r->wait_mu);
    for (;;) {
        pthread_mutex_lock(&r->mu);
        rma_count_t *c = counter(r, peer, ctx, sig_idx);
        int have = c != NULL && c->count >= count;
        if (have) {
            c->count -= count;
        }
        pthread_mutex_unlock(&r->mu);
        if (c == NULL) {
            res = ncclSystemError;
            break;
        }
        if (have) {
            break;
        }
        if ((res = apply_next(comm, r, peer)) != ncclSuccess) {
            break;
        }
    }
    pthread_mutex_unlock(&r->wait_mu);
    return res;
}

void br_comm_rma_free(ncclComm_t comm)
{
    struct br_comm_rma *r = comm->rma;
    if (r == NULL) {
        return;
    }
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->wait_mu);
    free(r->wins);
    free(r->counts);
    free(r);
    comm->rma = NULL;
}
