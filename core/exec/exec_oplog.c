/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The operation log of a communicator: a ring of its last n operations (BRAID_DUMP_OPS),
 * each record found again by its ticket (1 + its index among the logged operations), so
 * an update for an operation whose slot a newer one took is dropped. Writers are the
 * threads that make calls on the communicator (the group when a call is accepted, the
 * executor as it runs, waits and finishes); the reader is whoever dumps the state (the
 * dump thread, a user thread, the bootstrap thread answering another rank). One mutex
 * per log, held for a few stores, keeps every record whole for the reader.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "exec_int.h"
#include "util.h"

struct br_oplog {
    pthread_mutex_t lock;
    int cap;
    uint64_t issued; /* tickets handed out */
    br_oplog_rec_t *recs;
};

const char *br_oplog_state_name(br_oplog_state_t state)
{
    static const char *const names[] = {"queued", "running", "waiting", "done", "failed"};
    return (unsigned)state < sizeof(names) / sizeof(names[0]) ? names[state] : "unknown";
}

ncclResult_t br_exec_oplog_open(br_exec_comm_t *ec, int n)
{
    br_oplog_t *log = NULL;

    if (n <= 0 || ec->oplog != NULL) {
        return ncclSuccess;
    }
    BR_CHECK(br_calloc(&log, 1, "operation log"));
    if (br_calloc(&log->recs, (size_t)n, "operation log") != ncclSuccess) {
        free(log);
        return ncclSystemError;
    }
    pthread_mutex_init(&log->lock, NULL);
    log->cap = n;
    ec->oplog = log;
    return ncclSuccess;
}

void br_exec_oplog_close(br_exec_comm_t *ec)
{
    if (ec->oplog == NULL) {
        return;
    }
    pthread_mutex_destroy(&ec->oplog->lock);
    free(ec->oplog->recs);
    free(ec->oplog);
    ec->oplog = NULL;
}

/* The record of ticket, or NULL when a newer operation took its slot. Called locked. */
static br_oplog_rec_t *rec_find(br_oplog_t *log, uint64_t ticket)
{
    br_oplog_rec_t *r = &log->recs[(ticket - 1) % (uint64_t)log->cap];
    return r->ticket == ticket ? r : NULL;
}

void br_exec_oplog_add(br_exec_comm_t *ec, br_op_t *op)
{
    br_oplog_t *log = ec->oplog;

    op->log_ticket = 0;
    if (log == NULL) {
        return;
    }
    pthread_mutex_lock(&log->lock);
    uint64_t t = ++log->issued;
    br_oplog_rec_t *r = &log->recs[(t - 1) % (uint64_t)log->cap];
    memset(r, 0, sizeof(*r));
    r->ticket = t;
    r->func = op->func;
    r->count = op->count;
    r->type = op->type;
    r->red = op->redop.kind;
    r->root = op->root;
    r->peer = op->peer;
    r->seq = op->seq;
    r->algo = op->algo;
    r->proto = op->proto;
    r->state = BR_OPLOG_QUEUED;
    r->queued_ns = br_time_ns();
    r->wait_peer = -1;
    pthread_mutex_unlock(&log->lock);
    op->log_ticket = t;
}

/* End a record in state st (DONE or FAILED) unless it has ended already. Called locked. */
static void rec_end(br_oplog_rec_t *r, br_oplog_state_t st)
{
    if (r->state != BR_OPLOG_DONE && r->state != BR_OPLOG_FAILED) {
        r->state = st;
        r->end_ns = br_time_ns();
        r->items = 0;
    }
}

void br_exec_oplog_settle(br_exec_comm_t *ec, const br_op_t *op)
{
    br_oplog_t *log = ec->oplog;
    if (log == NULL || op->log_ticket == 0) {
        return;
    }
    pthread_mutex_lock(&log->lock);
    br_oplog_rec_t *r = rec_find(log, op->log_ticket);
    if (r != NULL) {
        rec_end(r, BR_OPLOG_FAILED);
    }
    pthread_mutex_unlock(&log->lock);
}

void br_exec_oplog_connecting(br_exec_comm_t *ec, const int *recv_peers, const int *send_peers)
{
    br_oplog_t *log = ec->oplog;
    if (log == NULL) {
        return;
    }
    uint64_t now = br_time_ns();
    pthread_mutex_lock(&log->lock);
    for (int i = 0; i < log->cap; i++) {
        br_oplog_rec_t *r = &log->recs[i];
        const int *peers = r->func == BR_FUNC_SEND ? send_peers : recv_peers;
        if (r->ticket == 0 || r->state != BR_OPLOG_QUEUED ||
            (r->func != BR_FUNC_SEND && r->func != BR_FUNC_RECV) || r->peer < 0 ||
            r->peer >= ec->nranks || peers[r->peer] < 0) {
            continue;
        }
        r->state = BR_OPLOG_WAITING;
        r->wait_ns = now;
        r->wait_peer = r->peer;
        r->wait_what = "a connection with";
    }
    pthread_mutex_unlock(&log->lock);
}

int br_exec_oplog_snapshot(br_exec_comm_t *ec, br_oplog_rec_t *out, int max)
{
    br_oplog_t *log = ec->oplog;
    int n = 0;
    if (log == NULL) {
        return 0;
    }
    pthread_mutex_lock(&log->lock);
    uint64_t first = log->issued > (uint64_t)log->cap ? log->issued - (uint64_t)log->cap + 1 : 1;
    for (uint64_t t = first; t <= log->issued && n < max; t++) {
        const br_oplog_rec_t *r = rec_find(log, t);
        if (r != NULL) {
            out[n++] = *r;
        }
    }
    pthread_mutex_unlock(&log->lock);
    return n;
}

/* ---- The executor's updates (exec_int.h) ---- */

void br_oplog_note(br_exec_comm_t *ec, uint64_t ticket, br_oplog_event_t ev, int peer,
                   const char *what, uint64_t since)
{
    br_oplog_t *log = ec->oplog;
    if (log == NULL || ticket == 0) {
        return;
    }
    pthread_mutex_lock(&log->lock);
    br_oplog_rec_t *r = rec_find(log, ticket);
    if (r == NULL || r->state == BR_OPLOG_DONE || r->state == BR_OPLOG_FAILED) {
        pthread_mutex_unlock(&log->lock);
        return;
    }
    switch (ev) {
    case BR_OPLOG_EV_ITEM:
        /* The executor has it (queued: the group is ending; waiting: it was connecting). */
        r->items++;
        r->state = BR_OPLOG_RUNNING;
        r->wait_peer = -1;
        r->wait_what = NULL;
        break;
    case BR_OPLOG_EV_RUN:
        r->state = BR_OPLOG_RUNNING;
        r->wait_peer = -1;
        r->wait_what = NULL;
        break;
    case BR_OPLOG_EV_WAIT:
        /* A wait that goes on keeps its start; only whom it waits for may change. */
        if (r->state != BR_OPLOG_WAITING) {
            r->state = BR_OPLOG_WAITING;
            r->wait_ns = since;
        }
        r->wait_peer = peer;
        r->wait_what = what;
        break;
    case BR_OPLOG_EV_ITEM_DONE:
        if (--r->items <= 0) {
            rec_end(r, BR_OPLOG_DONE);
        }
        break;
    case BR_OPLOG_EV_DONE: rec_end(r, BR_OPLOG_DONE); break;
    }
    pthread_mutex_unlock(&log->lock);
}
