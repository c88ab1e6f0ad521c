/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bootstrap's queues of messages that arrived before anyone asked for them, one per
 * peer in arrival order: the receive thread appends, waiters take the oldest of a (kind,
 * tag), and connection setup looks at messages in place without taking them (peek, the
 * count, dropping the ones it answered). bootstrap_p2p.c moves the messages.
 */
#include <stdlib.h>
#include <string.h>

#include "bootstrap_int.h"

/* Append a message to a peer's unexpected queue and wake the waiters. */
void br_boot_queue_push(br_bootstrap_t *boot, int peer, br_boot_msg_t *msg)
{
    br_boot_rank_t *p = &boot->peers[peer];

    msg->next = NULL;
    pthread_mutex_lock(&boot->lock);
    if (p->tail != NULL) {
        p->tail->next = msg;
    } else {
        p->head = msg;
    }
    p->tail = msg;
    atomic_fetch_add_explicit(&boot->queued, 1, memory_order_relaxed);
    pthread_cond_broadcast(&boot->cond);
    pthread_mutex_unlock(&boot->lock);
}

/* Unlink m (after prev, NULL: the head) from a peer's queue. boot->lock held. */
static void queue_unlink(br_bootstrap_t *boot, br_boot_rank_t *p, br_boot_msg_t *prev,
                         br_boot_msg_t *m)
{
    if (prev != NULL) {
        prev->next = m->next;
    } else {
        p->head = m->next;
    }
    if (p->tail == m) {
        p->tail = prev;
    }
    atomic_fetch_sub_explicit(&boot->queued, 1, memory_order_relaxed);
}

/* Unlink the oldest message of (kind, tag) from a peer's queue; NULL when none. Called
 * with boot->lock held. */
br_boot_msg_t *br_boot_queue_take(br_bootstrap_t *boot, br_boot_rank_t *p, uint32_t kind, int tag)
{
    br_boot_msg_t *prev = NULL;

    for (br_boot_msg_t *m = p->head; m != NULL; prev = m, m = m->next) {
        if (m->kind == kind && m->tag == tag) {
            queue_unlink(boot, p, prev, m);
            return m;
        }
    }
    return NULL;
}

void br_boot_queues_free(br_bootstrap_t *boot)
{
    for (int r = 0; r < boot->nranks; r++) {
        br_boot_msg_t *m = boot->peers[r].head;
        while (m != NULL) {
            br_boot_msg_t *next = m->next;
            free(m);
            m = next;
        }
        boot->peers[r].head = boot->peers[r].tail = NULL;
        atomic_store_explicit(&boot->queued, 0, memory_order_relaxed);
        free(boot->peers[r].wait_msg);
        free(boot->peers[r].recover_msg);
        boot->peers[r].wait_msg = boot->peers[r].recover_msg = NULL;
        boot->peers[r].wait = NULL;
        boot->peers[r].recover = NULL;
    }
}

int br_bootstrap_peek(br_bootstrap_t *boot, int peer, int tag, int nth, void *data, size_t size)
{
    int found = 0;
    if (peer < 0 || peer >= boot->nranks) {
        return 0;
    }
    pthread_mutex_lock(&boot->lock);
    for (const br_boot_msg_t *m = boot->peers[peer].head; m != NULL; m = m->next) {
        if (m->kind == BR_BOOT_MSG_USER && m->tag == tag && nth-- == 0) {
            found = m->size == size;
            if (found && size > 0) {
                memcpy(data, m->data, size);
            }
            break;
        }
    }
    pthread_mutex_unlock(&boot->lock);
    return found;
}

int br_bootstrap_queued(br_bootstrap_t *boot)
{
    return atomic_load_explicit(&boot->queued, memory_order_relaxed);
}

void br_bootstrap_drop_if(br_bootstrap_t *boot, int peer, int tag,
                          int (*stale)(void *arg, const void *data, size_t size), void *arg)
{
    if (peer < 0 || peer >= boot->nranks) {
        return;
    }
    pthread_mutex_lock(&boot->lock);
    br_boot_rank_t *p = &boot->peers[peer];
    br_boot_msg_t *prev = NULL, *m = p->head;
    while (m != NULL) {
        br_boot_msg_t *next = m->next;
        if (m->kind == BR_BOOT_MSG_USER && m->tag == tag &&
            (stale == NULL || stale(arg, m->data, m->size))) {
            queue_unlink(boot, p, prev, m);
            free(m);
        } else {
            prev = m;
        }
        m = next;
    }
    pthread_mutex_unlock(&boot->lock);
}

void br_bootstrap_drop(br_bootstrap_t *boot, int peer, int tag)
{
    br_bootstrap_drop_if(boot, peer, tag, NULL, NULL);
}

