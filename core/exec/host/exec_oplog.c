/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The operation log of a communicator: a ring of its last n operations (BRAID_DUMP_OPS),
 * each record found again by its ticket (1 + its index among the logged operations), so
 * an update for an operation whose slot a newer one took is dropped. Writers are the
 * threads that make calls on the communicator (the group when a call is accepted, the
 * executor as it runs, waits and finishes); the reader is whoever dumps the state (the
 * dump thread, a user thread, the bootstrap thread answering another rank).
 * Every record has its own sequence lock (a version, odd while a writer holds it), so a
 * call's few updates cost one uncontended compare-and-swap each and no shared lock; the
 * reader copies a record and keeps the copy only if the version was even and unchanged
 * around it. The writer stores each field it changes with a relaxed atomic store and the
 * reader loads the record's words with relaxed atomic loads, so the two sides never race
 * in the language's sense. Call times are the coarse clock (read every call).
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "exec_int.h"
#include "util.h"

#define REC_WORDS (sizeof(br_oplog_rec_t) / 8)
_Static_assert(sizeof(br_oplog_rec_t) % 8 == 0, "a record is copied as 64-bit words");

/* A record and the words the atomics move (a union: C11's way to see one as the other). */
typedef union {
    br_oplog_rec_t rec;
    uint64_t words[REC_WORDS];
} rec_words_t;

typedef struct {
    _Atomic uint64_t version; /* odd: a writer is changing the record */
    rec_words_t u;
} oplog_slot_t;

struct br_oplog {
    int cap;
    _Atomic uint64_t issued; /* tickets handed out */
    oplog_slot_t *slots;
};

static void words_load(const oplog_slot_t *s, rec_words_t *r)
{
    for (size_t i = 0; i < REC_WORDS; i++) {
        r->words[i] = __atomic_load_n(&s->u.words[i], __ATOMIC_RELAXED);
    }
}

/* Take slot s for writing (spins only while another writer holds it: two threads on one
 * record happen only when the ring wraps under them). The holder reads the record's
 * fields plainly (only readers run beside it) and stores them with SET. */
static void slot_lock(oplog_slot_t *s)
{
    uint64_t v = atomic_load_explicit(&s->version, memory_order_relaxed);
    while ((v & 1) != 0 ||
           !atomic_compare_exchange_weak_explicit(&s->version, &v, v + 1, memory_order_acquire,
                                                  memory_order_relaxed)) {
        if ((v & 1) != 0) {
            sched_yield();
            v = atomic_load_explicit(&s->version, memory_order_relaxed);
        }
    }
    /* Release fence: the odd version is visible before any field below changes (the
     * reader's acquire fence pairs with it). */
    atomic_thread_fence(memory_order_release);
}

/* A field store the reader may see half-way through a writer's update, never torn. */
#define SET(s, field, v) __atomic_store_n(&(s)->u.rec.field, (v), __ATOMIC_RELAXED)

static void slot_unlock(oplog_slot_t *s)
{
    /* Release: the fields are visible before the even version that says they are whole. */
    atomic_store_explicit(&s->version, atomic_load_explicit(&s->version, memory_order_relaxed) + 1,
                          memory_order_release);
}

/* A consistent copy of slot s (retries while a writer is in it). */
static void slot_read(oplog_slot_t *s, rec_words_t *r)
{
    for (unsigned tries = 0;; tries++) {
        uint64_t v1 = atomic_load_explicit(&s->version, memory_order_acquire);
        if ((v1 & 1) == 0) {
            words_load(s, r);
            /* Acquire fence: the words were read before the version is read again. */
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&s->version, memory_order_relaxed) == v1) {
                return;
            }
        }
        if (tries >= 64) {
            sched_yield(); /* the writer may have lost its core */
        }
    }
}

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
    if (br_calloc(&log->slots, (size_t)n, "operation log") != ncclSuccess) {
        free(log);
        return ncclSystemError;
    }
    log->cap = n;
    ec->oplog = log;
    return ncclSuccess;
}

void br_exec_oplog_close(br_exec_comm_t *ec)
{
    if (ec->oplog == NULL) {
        return;
    }
    free(ec->oplog->slots);
    free(ec->oplog);
    ec->oplog = NULL;
}

static oplog_slot_t *slot_of(br_oplog_t *log, uint64_t ticket)
{
    return &log->slots[(ticket - 1) % (uint64_t)log->cap];
}

void br_exec_oplog_add(br_exec_comm_t *ec, br_op_t *op)
{
    br_oplog_t *log = ec->oplog;

    op->log_ticket = 0;
    if (log == NULL) {
        return;
    }
    /* Relaxed: the ticket only has to be unique; the slot's lock orders the record. */
    uint64_t t = atomic_fetch_add_explicit(&log->issued, 1, memory_order_relaxed) + 1;
    oplog_slot_t *s = slot_of(log, t);
    slot_lock(s);
    SET(s, ticket, t);
    SET(s, func, op->func);
    SET(s, count, op->count);
    SET(s, type, op->type);
    SET(s, red, op->redop.kind);
    SET(s, root, op->root);
    SET(s, peer, op->peer);
    SET(s, seq, op->seq);
    SET(s, algo, op->algo);
    SET(s, proto, op->proto);
    SET(s, state, BR_OPLOG_QUEUED);
    SET(s, items, 0);
    SET(s, queued_ns, br_time_coarse_ns());
    SET(s, wait_ns, 0);
    SET(s, end_ns, 0);
    SET(s, wait_peer, -1);
    SET(s, wait_what, NULL);
    slot_unlock(s);
    op->log_ticket = t;
}

/* End the record in state st (DONE or FAILED) unless it has ended already. Locked. A
 * call done without the executor ever noting it running (a lone arena call that did not
 * wait, exec_engine.c, or one with nothing to move) is stamped with its start: no clock
 * read. */
static void rec_end(oplog_slot_t *s, br_oplog_state_t st)
{
    br_oplog_state_t was = s->u.rec.state;
    if (was != BR_OPLOG_DONE && was != BR_OPLOG_FAILED) {
        SET(s, state, st);
        SET(s, end_ns, st == BR_OPLOG_DONE && was == BR_OPLOG_QUEUED ? s->u.rec.queued_ns
                                                                      : br_time_coarse_ns());
        SET(s, items, 0);
    }
}

void br_exec_oplog_settle(br_exec_comm_t *ec, const br_op_t *op)
{
    br_oplog_t *log = ec->oplog;
    if (log == NULL || op->log_ticket == 0) {
        return;
    }
    oplog_slot_t *s = slot_of(log, op->log_ticket);
    slot_lock(s);
    if (s->u.rec.ticket == op->log_ticket) {
        rec_end(s, BR_OPLOG_FAILED);
    }
    slot_unlock(s);
}

void br_exec_oplog_connecting(br_exec_comm_t *ec, const int *recv_peers, const int *send_peers)
{
    br_oplog_t *log = ec->oplog;
    if (log == NULL) {
        return;
    }
    uint64_t now = br_time_ns();
    for (int i = 0; i < log->cap; i++) {
        oplog_slot_t *s = &log->slots[i];
        const br_oplog_rec_t *r = &s->u.rec;
        slot_lock(s);
        const int *peers = r->func == BR_FUNC_SEND ? send_peers : recv_peers;
        if (r->ticket != 0 && r->state == BR_OPLOG_QUEUED &&
            (r->func == BR_FUNC_SEND || r->func == BR_FUNC_RECV) && r->peer >= 0 &&
            r->peer < ec->nranks && peers[r->peer] >= 0) {
            SET(s, state, BR_OPLOG_WAITING);
            SET(s, wait_ns, now);
            SET(s, wait_peer, r->peer);
            SET(s, wait_what, "a connection with");
        }
        slot_unlock(s);
    }
}

int br_exec_oplog_snapshot(br_exec_comm_t *ec, br_oplog_rec_t *out, int max)
{
    br_oplog_t *log = ec->oplog;
    int n = 0;
    if (log == NULL) {
        return 0;
    }
    /* Acquire: pairs with nothing stronger than the slots' own versions; records of
     * tickets handed out after this load are left for the next dump. */
    uint64_t issued = atomic_load_explicit(&log->issued, memory_order_acquire);
    uint64_t first = issued > (uint64_t)log->cap ? issued - (uint64_t)log->cap + 1 : 1;
    for (uint64_t t = first; t <= issued && n < max; t++) {
        rec_words_t u;
        slot_read(slot_of(log, t), &u);
        if (u.rec.ticket == t) {
            out[n++] = u.rec;
        }
    }
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
    oplog_slot_t *s = slot_of(log, ticket);
    const br_oplog_rec_t *r = &s->u.rec;
    slot_lock(s);
    if (r->ticket != ticket || r->state == BR_OPLOG_DONE || r->state == BR_OPLOG_FAILED) {
        slot_unlock(s);
        return;
    }
    switch (ev) {
    case BR_OPLOG_EV_ITEM:
        /* The executor has it (queued: the group is ending; waiting: it was connecting). */
        SET(s, items, r->items + 1);
        /* fall through */
    case BR_OPLOG_EV_RUN:
        SET(s, state, BR_OPLOG_RUNNING);
        SET(s, wait_peer, -1);
        SET(s, wait_what, NULL);
        break;
    case BR_OPLOG_EV_WAIT:
        /* A wait that goes on keeps its start; only whom it waits for may change. */
        if (r->state != BR_OPLOG_WAITING) {
            SET(s, state, BR_OPLOG_WAITING);
            SET(s, wait_ns, since);
        }
        SET(s, wait_peer, peer);
        SET(s, wait_what, what);
        break;
    case BR_OPLOG_EV_ITEM_DONE:
        SET(s, items, r->items - 1);
        if (r->items <= 0) {
            rec_end(s, BR_OPLOG_DONE);
        }
        break;
    case BR_OPLOG_EV_DONE: rec_end(s, BR_OPLOG_DONE); break;
    }
    slot_unlock(s);
}
