/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The proxy of one communicator: a list of net connections and the progress loop that
 * moves their slots through the net plugin. Send side: slots [done, posted) are in
 * flight, [posted, tail) are filled and waiting to be posted; a completed isend frees its
 * slot by advancing head. Receive side: irecvs are posted into free slots (posted < head
 * + BR_STEPS) for the receives the executor announced (posted < want); a completed one
 * publishes its slot by advancing tail. At close the sends are flushed and what is
 * outstanding is tested (bounded), so after operations that completed no request is left
 * when the plugin comm closes.
 * Requests complete in posting order on a connection (the ABI's ordering rule), so each
 * direction tests only its oldest request. With failover on, a send slot goes back to the
 * executor only once the receiver also confirmed it, and a failed transfer replaces the
 * connection instead of failing it (proxy_link.c).
 *
 * Threading: one thread per proxy. It is parked on a condition variable while an
 * executor is active (the executor progresses inline through br_proxy_progress(), so a
 * rank has one runnable thread), sleeps while nothing is pending, and runs only when an
 * executor left with sends still in flight. `lock` makes the two paths exclusive (the
 * executor only try-locks).
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proxy_int.h"
#include "util.h"
#include "util_socket.h"

/* A send connection failed for good: the first such failure is the proxy's error. */
void br_proxy_fail_send(br_proxy_t *proxy, br_net_conn_t *nc, ncclResult_t res, const char *what)
{
    int expected = ncclSuccess;

    nc->fo_state = BR_FO_DEAD;
    if (atomic_compare_exchange_strong(&proxy->error, &expected, (int)res)) {
        snprintf(proxy->error_msg, sizeof(proxy->error_msg),
                 "network %s to rank %d failed (net plugin %s, error %d) after %llu of %llu "
                 "steps: the peer process may have died or its network may be down",
                 what, nc->peer, nc->net->name, (int)res, (unsigned long long)nc->done,
                 (unsigned long long)nc->posted);
        BR_WARN(NCCL_NET | NCCL_PROXY, "rank %d: %s", proxy->rank, proxy->error_msg);
    }
}

/* A receive connection failed for good. A peer that finished and closed its end also ends
 * a receive still posted: remember it; the executor decides whether it still needed that
 * data. */
void br_proxy_fail_recv(br_proxy_t *proxy, br_net_conn_t *nc, ncclResult_t res, const char *what)
{
    nc->fo_state = BR_FO_DEAD;
    snprintf(nc->why, sizeof(nc->why),
             "network %s from rank %d failed (net plugin %s, error %d) after %llu steps: "
             "the peer process may have died or closed its communicator, or its network "
             "may be down",
             what, nc->peer, nc->net->name, (int)res, (unsigned long long)nc->done);
    atomic_store_explicit(&nc->failed, (int)res, memory_order_release);
    BR_INFO(NCCL_NET | NCCL_PROXY, "rank %d: %s", proxy->rank, nc->why);
}

/* ProxyStep events: one per network transfer, under the ProxyOp of the operation the
 * step belongs to. A send step starts when it is posted and stops when the plugin reports
 * it complete (SendWait in between). A receive is posted ahead of need, often before the
 * executor has reached the operation it belongs to; its event starts when both are known
 * (RecvWait), and at completion records RecvFlushWait (bytes received) and RecvGPUWait
 * (handed to the executor: there is no flush or GPU on the host) before it stops. */
static int steps_profiled(const br_proxy_t *proxy)
{
    return proxy->prof != NULL &&
           (br_plugin_profiler_mask() & (ncclProfileProxyStep | ncclProfileNetPlugin)) != 0;
}

/* The ProxyOp entry whose steps include `step`, or -1. */
static int op_of(const br_net_conn_t *nc, uint64_t step)
{
    for (int i = 0; i < BR_PROXY_OPS; i++) {
        if (nc->ops[i].ev != NULL && nc->ops[i].first <= step && step < nc->ops[i].end) {
            return i;
        }
    }
    return -1;
}

/* The ProxyStep event of `step`, started before the transfer is handed to the plugin (it
 * is the parent of the plugin's own NetPlugin events, through the phandle), once: a post
 * the plugin refused for now keeps it for the next try. */
static void step_begin(br_proxy_t *proxy, br_net_conn_t *nc, uint64_t step)
{
    ncclProfilerEventDescr_v6_t d;
    int slot = (int)(step % BR_STEPS), op;

    if (nc->ev[slot] != NULL) {
        return;
    }
    nc->ph[slot].step = NULL;
    if (!steps_profiled(proxy) || (op = op_of(nc, step)) < 0) {
        return;
    }
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileProxyStep;
    d.parentObj = nc->ops[op].ev;
    d.rank = proxy->rank;
    d.proxyStep.step = (int)(step % 0x7fffffff);
    if (br_plugin_profiler_start_event(proxy->prof, &d, &nc->ev[slot]) != ncclSuccess) {
        nc->ev[slot] = NULL;
        return;
    }
    nc->ph[slot].prof = proxy->prof;
    nc->ph[slot].step = nc->ev[slot];
    nc->ph[slot].rank = proxy->rank;
}

/* The plugin took the transfer: SendWait / RecvWait. */
static void step_posted(br_proxy_t *proxy, br_net_conn_t *nc, uint64_t step, size_t bytes)
{
    ncclProfilerEventStateArgs_v6_t args;
    void *ev = nc->ev[step % BR_STEPS];

    if (ev == NULL) {
        return;
    }
    memset(&args, 0, sizeof(args));
    args.proxyStep.transSize = bytes;
    (void)br_plugin_profiler_record_event_state(
        proxy->prof, ev, nc->is_send ? ncclProfilerProxyStepSendWait : ncclProfilerProxyStepRecvWait,
        &args);
}

static void step_start(br_proxy_t *proxy, br_net_conn_t *nc, uint64_t step, size_t bytes)
{
    step_begin(proxy, nc, step);
    step_posted(proxy, nc, step, bytes);
}

/* Step `step` completed (size: bytes received): its event stops, and the ProxyOp whose
 * last step it was. */
static void step_done(br_proxy_t *proxy, br_net_conn_t *nc, uint64_t step, size_t size)
{
    int slot = (int)(step % BR_STEPS);
    void *ev = nc->ev[slot];

    if (proxy->prof == NULL) {
        return; /* no events, no ProxyOps: nothing to look up per completed step */
    }
    if (ev != NULL) {
        if (!nc->is_send) {
            ncclProfilerEventStateArgs_v6_t args;
            memset(&args, 0, sizeof(args));
            args.proxyStep.transSize = size;
            (void)br_plugin_profiler_record_event_state(proxy->prof, ev,
                                                        ncclProfilerProxyStepRecvFlushWait, &args);
            (void)br_plugin_profiler_record_event_state(proxy->prof, ev,
                                                        ncclProfilerProxyStepRecvGPUWait, &args);
        }
        (void)br_plugin_profiler_stop_event(proxy->prof, ev);
        nc->ev[slot] = NULL;
        nc->ph[slot].step = NULL;
    }
    int op = op_of(nc, step);
    if (op >= 0 && step + 1 == nc->ops[op].end) {
        (void)br_plugin_profiler_stop_event(proxy->prof, nc->ops[op].ev);
        nc->ops[op].ev = NULL;
    }
}

void br_proxy_op_begin(br_proxy_t *proxy, br_net_conn_t *nc, void *ev, uint64_t first,
                       uint64_t nsteps)
{
    int slot = -1;

    pthread_mutex_lock(&proxy->lock);
    for (int i = 0; i < BR_PROXY_OPS && slot < 0; i++) {
        if (nc->ops[i].ev == NULL) {
            slot = i;
        }
    }
    if (slot < 0 || proxy->prof == NULL || nsteps == 0) {
        if (proxy->prof != NULL) {
            (void)br_plugin_profiler_stop_event(proxy->prof, ev);
        }
        pthread_mutex_unlock(&proxy->lock);
        return;
    }
    nc->ops[slot].ev = ev;
    nc->ops[slot].first = first;
    nc->ops[slot].end = first + nsteps;
    /* Receives posted before the operation was known get their events now; those that
     * even completed, all their states at once (their slots wait unread for the
     * executor, so their descriptors are still there). */
    for (uint64_t k = first; k < nc->posted && k < first + nsteps; k++) {
        if (nc->ev[k % BR_STEPS] == NULL) {
            step_start(proxy, nc, k, nc->step_size + sizeof(br_slot_desc_t));
            if (k < nc->done) {
                step_done(proxy, nc, k, (size_t)nc->ctrl->slot[k % BR_STEPS].bytes);
            }
        }
    }
    pthread_mutex_unlock(&proxy->lock);
}

/* At the end: events of steps and operations that never completed stop. */
static void events_stop(br_proxy_t *proxy, br_net_conn_t *nc)
{
    if (proxy->prof == NULL) {
        return;
    }
    for (int i = 0; i < BR_STEPS; i++) {
        if (nc->ev[i] != NULL) {
            (void)br_plugin_profiler_stop_event(proxy->prof, nc->ev[i]);
            nc->ev[i] = NULL;
        }
    }
    for (int i = 0; i < BR_PROXY_OPS; i++) {
        if (nc->ops[i].ev != NULL) {
            (void)br_plugin_profiler_stop_event(proxy->prof, nc->ops[i].ev);
            nc->ops[i].ev = NULL;
        }
    }
}

void br_proxy_set_profiler(br_proxy_t *proxy, br_profiler_t *prof)
{
    pthread_mutex_lock(&proxy->lock);
    /* Atomic: the proxy thread reads it for ProxyCtrl events without this lock. */
    __atomic_store_n(&proxy->prof, prof, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&proxy->lock);
}

/* Move one send connection; returns the number of state changes. */
static int progress_send(br_proxy_t *proxy, br_net_conn_t *nc)
{
    br_net_t *net = nc->net;
    int moved = 0;
    /* Acquire pairs with the executor's release of tail: the slot bytes are visible. */
    uint64_t tail = atomic_load_explicit(&nc->ctrl->tail, memory_order_acquire);

    while (nc->posted < tail) {
        int slot = (int)(nc->posted % BR_STEPS);
        void *req = NULL;
        char *data = nc->buf + (size_t)slot * nc->stride;
        size_t bytes = nc->ctrl->slot[slot].bytes;
        br_net_useg_t *us = nc->useg != NULL ? br_proxy_useg_of(nc, nc->posted) : NULL;
        ncclResult_t res;
        step_begin(proxy, nc, nc->posted);
        if (us != NULL) {
            res = br_proxy_useg_post(proxy, nc, us, nc->posted, &req);
        } else if (nc->posted < atomic_load_explicit(&nc->ctrl->head, memory_order_relaxed)) {
            /* Sent again after a failover, its slot long reused: from the keep ring. */
            if (!br_proxy_kept(nc, nc->posted)) {
                br_proxy_link_failed(proxy, nc, ncclInternalError,
                                     "send (a step to send again was neither in its slot nor kept)");
                return moved + 1;
            }
            int k = (int)(nc->posted % BR_NET_KEEP_STEPS);
            res = net->ops->isend(net, nc->comm, nc->keep + (size_t)k * BR_NET_KEEP_STRIDE,
                                  nc->keep_len[k], proxy->rank, nc->mhandle, &nc->ph[slot], &req);
        } else {
            /* The call descriptor travels right after the payload, so the receiver can
             * check it as it does on shared memory. */
            br_slot_desc_t d = nc->ctrl->slot[slot];
            /* A small step is kept while the ring has room past the last confirmed one
             * (the entry it takes then holds a confirmed step), and says so. */
            int keep = nc->keep != NULL && bytes <= BR_NET_KEEP_BYTES &&
                       nc->posted < atomic_load_explicit(&nc->acked, memory_order_relaxed) +
                                        BR_NET_KEEP_STEPS;
            d.func |= keep ? BR_NET_DESC_KEPT : 0;
            memcpy(data + bytes, &d, sizeof(d)); /* unaligned: after any number of bytes */
            if (keep) {
                int k = (int)(nc->posted % BR_NET_KEEP_STEPS);
                memcpy(nc->keep + (size_t)k * BR_NET_KEEP_STRIDE, data, bytes + sizeof(d));
                nc->keep_len[k] = (uint32_t)(bytes + sizeof(d));
                nc->keep_seq[k] = nc->posted + 1;
            }
            res = net->ops->isend(net, nc->comm, data, bytes + sizeof(br_slot_desc_t), proxy->rank,
                                  nc->mhandle, &nc->ph[slot], &req);
        }
        if (res != ncclSuccess) {
            br_proxy_link_failed(proxy, nc, res, "send");
            return moved + 1;
        }
        if (req == NULL) {
            break; /* the plugin is full: retry later */
        }
        nc->req[slot] = req;
        step_posted(proxy, nc, nc->posted, nc->ctrl->slot[slot].bytes);
        nc->posted++;
        moved++;
    }
    while (nc->done < nc->posted) {
        int slot = (int)(nc->done % BR_STEPS), done = 0;
        ncclResult_t res = net->ops->test(net, nc->req[slot], &done, NULL);
        if (res != ncclSuccess) {
            br_proxy_link_failed(proxy, nc, res, "send");
            return moved + 1;
        }
        if (!done) {
            break;
        }
        nc->req[slot] = NULL;
        step_done(proxy, nc, nc->done, 0);
        nc->done++;
        moved++;
    }
    /* Sent, and with failover on also confirmed by the receiver: the executor may
     * overwrite the slot (release). */
    if (nc->acks && atomic_load_explicit(&nc->acked, memory_order_relaxed) < nc->done) {
        br_proxy_link_read_acks(proxy, nc, nc->useg != NULL ? 2 : 0);
    }
    uint64_t head = br_proxy_link_head(nc);
    if (head > atomic_load_explicit(&nc->ctrl->head, memory_order_relaxed)) {
        if (nc->useg != NULL) {
            br_proxy_useg_retire(nc); /* before head frees the executor's buffer */
        }
        atomic_store_explicit(&nc->ctrl->head, head, memory_order_release);
        moved++;
    }
    return moved;
}

/* Move one receive connection; returns the number of state changes. */
static int progress_recv(br_proxy_t *proxy, br_net_conn_t *nc)
{
    br_net_t *net = nc->net;
    int moved = 0;
    /* Acquire pairs with the executor's release of head: it is done reading the slot. */
    uint64_t head = atomic_load_explicit(&nc->ctrl->head, memory_order_acquire);
    uint64_t want = atomic_load_explicit(&nc->want, memory_order_relaxed);

    /* Only receives the executor will consume: one posted beyond them would still be
     * posted when the connection closes. */
    while (nc->posted < head + BR_STEPS && nc->posted < want) {
        int slot = (int)(nc->posted % BR_STEPS);
        void *data = nc->buf + (size_t)slot * nc->stride;
        size_t size = nc->step_size + sizeof(br_slot_desc_t);
        int tag = nc->peer;
        void *req = NULL;
        void *ph = &nc->ph[slot];
        br_net_useg_t *us = nc->useg != NULL ? br_proxy_useg_of(nc, nc->posted) : NULL;
        ncclResult_t res;
        step_begin(proxy, nc, nc->posted);
        if (us != NULL) {
            res = br_proxy_useg_post(proxy, nc, us, nc->posted, &req);
        } else {
            res = net->ops->irecv(net, nc->comm, 1, &data, &size, &tag, &nc->mhandle, &ph, &req);
        }
        if (res != ncclSuccess) {
            br_proxy_link_failed(proxy, nc, res, "receive");
            return moved + 1;
        }
        if (req == NULL) {
            break;
        }
        nc->req[slot] = req;
        step_posted(proxy, nc, nc->posted, size);
        nc->posted++;
        moved++;
    }
    while (nc->done < nc->posted) {
        int slot = (int)(nc->done % BR_STEPS), done = 0, size = 0;
        ncclResult_t res = net->ops->test(net, nc->req[slot], &done, &size);
        if (res != ncclSuccess) {
            br_proxy_link_failed(proxy, nc, res, "receive");
            return moved + 1;
        }
        if (!done) {
            break;
        }
        nc->req[slot] = NULL;
        br_net_useg_t *us = nc->useg != NULL ? br_proxy_useg_of(nc, nc->done) : NULL;
        if (us != NULL) {
            /* Into the user's buffer: no descriptor on the wire (proxy_userbuf.c). */
            step_done(proxy, nc, nc->done, (size_t)(size > 0 ? size : 0));
            if (br_proxy_useg_recv_done(proxy, nc, us, nc->done, size) != 0) {
                return moved;
            }
            nc->rx_unkept = 1; /* the sender keeps such steps in the user's buffer */
            nc->done++;
            int last = nc->done == us->end && us->ack_end;
            br_proxy_useg_retire(nc); /* may free us */
            atomic_store_explicit(&nc->ctrl->tail, nc->done, memory_order_release);
            if (last && nc->acks) {
                br_proxy_link_ack(proxy, nc, 2); /* the sender waits for it to return */
            }
            moved++;
            continue;
        }
        step_done(proxy, nc, nc->done,
                  (size_t)size >= sizeof(br_slot_desc_t) ? (size_t)size - sizeof(br_slot_desc_t) : 0);
        /* The sender's descriptor is the message's last bytes. */
        br_slot_desc_t d;
        if ((size_t)size < sizeof(d)) {
            br_proxy_fail_recv(proxy, nc, ncclRemoteError, "receive (message without a descriptor)");
            return moved;
        }
        memcpy(&d, nc->buf + (size_t)slot * nc->stride + (size_t)size - sizeof(d), sizeof(d));
        if (d.bytes != (uint64_t)size - sizeof(d)) {
            br_proxy_fail_recv(proxy, nc, ncclRemoteError, "receive (descriptor and size disagree)");
            return moved;
        }
        nc->rx_unkept |= (d.func & BR_NET_DESC_KEPT) == 0;
        d.func &= ~BR_NET_DESC_KEPT;
        nc->ctrl->slot[slot] = d;
        nc->done++;
        /* Release: the slot's bytes and descriptor before the new tail. */
        atomic_store_explicit(&nc->ctrl->tail, nc->done, memory_order_release);
        moved++;
    }
    if (nc->acks) {
        br_proxy_link_ack(proxy, nc, 0);
    }
    return moved;
}

static int progress_locked(br_proxy_t *proxy)
{
    int moved = 0;
    if (atomic_load_explicit(&proxy->error, memory_order_relaxed) != ncclSuccess) {
        return 0;
    }
    moved += br_proxy_link_progress(proxy);
    for (br_net_conn_t *nc = proxy->conns; nc != NULL; nc = nc->next) {
        if (nc->fo_state == BR_FO_NONE) {
            moved += nc->is_send ? progress_send(proxy, nc) : progress_recv(proxy, nc);
        }
    }
    proxy->idle_streak = moved ? 0 : proxy->idle_streak + 1;
    if (moved == 0 && (proxy->acks_due || proxy->idle_streak == 8)) {
        /* Nothing else to do: acknowledgements go, and are read, now, off the path of the
         * data (br_proxy_link_ack, br_proxy_link_read_acks). */
        proxy->acks_due = 0;
        for (br_net_conn_t *nc = proxy->conns; nc != NULL; nc = nc->next) {
            if (nc->acks && nc->fo_state == BR_FO_NONE) {
                if (nc->is_send) {
                    br_proxy_link_read_acks(proxy, nc, 1);
                } else {
                    br_proxy_link_ack(proxy, nc, 1);
                }
            }
        }
    }
    return moved;
}

/* Sends filled by the executor but not yet completed keep the proxy awake after the
 * executor returns: the peer is waiting for them. */
static int has_pending_sends(br_proxy_t *proxy)
{
    if (proxy->nfailover > 0) {
        return 1; /* a replacement connection is being made: keep at it */
    }
    for (br_net_conn_t *nc = proxy->conns; nc != NULL; nc = nc->next) {
        if (nc->is_send && nc->done < atomic_load_explicit(&nc->ctrl->tail, memory_order_acquire)) {
            return 1;
        }
    }
    return 0;
}

/* Sleep on `wake` for at most ms milliseconds (wake_lock held). */
static void wait_ms(br_proxy_t *proxy, long ms)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&proxy->wake, &proxy->wake_lock, &ts);
}

/* A ProxyCtrl event (live mask, as NCCL): start, one state, stop; for `sleep`, the
 * Sleep state and the event stay open until ctrl_wakeup. */
static void *ctrl_event(br_proxy_t *proxy, ncclProfilerEventState_v6_t state, int keep)
{
    ncclProfilerEventDescr_v6_t d;
    void *h = NULL;
    br_profiler_t *prof = __atomic_load_n(&proxy->prof, __ATOMIC_ACQUIRE);

    if (prof == NULL || (br_plugin_profiler_mask() & ncclProfileProxyCtrl) == 0) {
        return NULL;
    }
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileProxyCtrl;
    d.rank = proxy->rank;
    if (br_plugin_profiler_start_event(prof, &d, &h) != ncclSuccess || h == NULL) {
        return NULL;
    }
    (void)br_plugin_profiler_record_event_state(prof, h, state, NULL);
    if (!keep) {
        (void)br_plugin_profiler_stop_event(prof, h);
        return NULL;
    }
    return h;
}

static void ctrl_wakeup(br_proxy_t *proxy, void *h)
{
    if (h != NULL) {
        (void)br_plugin_profiler_record_event_state(proxy->prof, h, ncclProfilerProxyCtrlWakeup,
                                                    NULL);
        (void)br_plugin_profiler_stop_event(proxy->prof, h);
    }
}

static void *proxy_main(void *arg)
{
    br_proxy_t *proxy = arg;
    unsigned idle = 0;
    int was_active = 0; /* for ProxyCtrl's Idle / Active transitions */
    void *sleep = NULL; /* ProxyCtrl Sleep event of the current idle rest, from its start to
                         * the first work after it (across 50 ms naps) */

    br_log_set_rank(proxy->rank);
    for (;;) {
        pthread_mutex_lock(&proxy->wake_lock);
        /* Parked while an executor is active: it progresses inline from its wait loop
         * (br_proxy_progress), so one thread per rank is runnable instead of two. On a
         * machine where ranks outnumber cores a second spinning thread only steals the
         * core from the peer it waits for. br_proxy_active(-1) wakes us. */
        if (proxy->active > 0) {
            /* The executor's br_proxy_active opened a Sleep event for the park. */
            ctrl_wakeup(proxy, sleep);
            sleep = NULL;
        }
        while (proxy->active > 0 && !proxy->stop) {
            pthread_cond_wait(&proxy->wake, &proxy->wake_lock);
            idle = 0;
        }
        if (proxy->stop) {
            pthread_mutex_unlock(&proxy->wake_lock);
            break;
        }
        pthread_mutex_unlock(&proxy->wake_lock);

        pthread_mutex_lock(&proxy->lock);
        int moved = progress_locked(proxy);
        int pending = has_pending_sends(proxy);
        pthread_mutex_unlock(&proxy->lock);

        if (pending || moved) {
            ctrl_wakeup(proxy, sleep);
            sleep = NULL;
        }
        if (pending != was_active) {
            (void)ctrl_event(proxy, pending ? ncclProfilerProxyCtrlActive : ncclProfilerProxyCtrlIdle,
                             0);
            was_active = pending;
        }
        if (!pending) {
            /* Idle communicator: sleep until an executor leaves with sends pending. The
             * timed wait also lets late network errors surface. */
            if (sleep == NULL) {
                sleep = ctrl_event(proxy, ncclProfilerProxyCtrlSleep, 1);
            }
            pthread_mutex_lock(&proxy->wake_lock);
            if (proxy->active == 0 && !proxy->stop) {
                wait_ms(proxy, 50);
            }
            pthread_mutex_unlock(&proxy->wake_lock);
            idle = 0;
            continue;
        }
        /* Sends the executor left behind: the peer is waiting for them. */
        if (moved) {
            idle = 0;
        } else if (++idle > 64) {
            /* Ranks may outnumber cores: never spin long without giving the CPU away. */
            if (idle > 4096) {
                struct timespec ts = {0, 20000};
                nanosleep(&ts, NULL);
            } else {
                sched_yield();
            }
        }
    }
    ctrl_wakeup(proxy, sleep); /* before the profiler goes: destroy joins us first */
    return NULL;
}

ncclResult_t br_proxy_create(const br_proxy_config_t *cfg, br_proxy_t **proxy_p)
{
    ncclResult_t res = ncclSuccess;
    br_proxy_t *proxy = NULL;
    int ret;

    BR_CHECK(br_calloc(&proxy, 1, "proxy"));
    proxy->net = cfg->net;
    proxy->boot = cfg->boot;
    proxy->rank = cfg->rank;
    proxy->comm_hash = cfg->comm_hash;
    proxy->traffic_class = cfg->traffic_class;
    proxy->net_required = cfg->net_required;
    proxy->regs = cfg->regs;
    proxy->failover = cfg->boot != NULL ? (int)BR_PARAM_INT(FAILOVER) : 0;
    pthread_mutex_init(&proxy->mail_lock, NULL);
    pthread_mutex_init(&proxy->lock, NULL);
    pthread_mutex_init(&proxy->wake_lock, NULL);
    pthread_cond_init(&proxy->wake, NULL);
    ret = pthread_create(&proxy->thread, NULL, proxy_main, proxy);
    if (ret != 0) {
        BR_WARN(NCCL_PROXY, "cannot start the proxy thread: %s", strerror(ret));
        res = ncclSystemError;
        goto err_free;
    }
    BR_INFO(NCCL_INIT | NCCL_PROXY, "proxy thread started for net plugin %s (failover %s)",
            cfg->net->name, proxy->failover > 0 ? "on" : "off");
    br_proxy_link_start(proxy);
    *proxy_p = proxy;
    return ncclSuccess;
err_free:
    pthread_cond_destroy(&proxy->wake);
    pthread_mutex_destroy(&proxy->wake_lock);
    pthread_mutex_destroy(&proxy->lock);
    pthread_mutex_destroy(&proxy->mail_lock);
    free(proxy);
    return res;
}

ncclResult_t br_proxy_add(br_proxy_t *proxy, br_net_conn_t *nc)
{
    pthread_mutex_lock(&proxy->lock);
    nc->next = proxy->conns;
    proxy->conns = nc;
    pthread_mutex_unlock(&proxy->lock);
    return ncclSuccess;
}

void br_proxy_active(br_proxy_t *proxy, int delta)
{
    int last, pending = 1;

    pthread_mutex_lock(&proxy->wake_lock);
    proxy->active += delta;
    last = proxy->active == 0;
    /* The thread parks while an executor progresses the network inline: that is the
     * proxy's Sleep ... Wakeup in ProxyCtrl terms, recorded here where it starts and ends
     * (the thread itself may not run at all during a short call). */
    if (delta > 0 && proxy->active == delta && proxy->park_ev == NULL) {
        proxy->park_ev = ctrl_event(proxy, ncclProfilerProxyCtrlSleep, 1);
    } else if (last && proxy->park_ev != NULL) {
        ctrl_wakeup(proxy, proxy->park_ev);
        proxy->park_ev = NULL;
    }
    pthread_mutex_unlock(&proxy->wake_lock);
    /* Entering needs no wake-up: a running proxy thread parks at its next check. Leaving
     * needs one only when sends the executor filled still wait for the network; a small
     * collective has usually sent everything, and waking the thread for nothing would
     * cost a context switch per call on a machine whose cores the ranks share. */
    if (!last) {
        return;
    }
    if (pthread_mutex_trylock(&proxy->lock) == 0) {
        (void)progress_locked(proxy);
        pending = has_pending_sends(proxy);
        pthread_mutex_unlock(&proxy->lock);
    }
    if (pending) {
        pthread_mutex_lock(&proxy->wake_lock);
        pthread_cond_signal(&proxy->wake);
        pthread_mutex_unlock(&proxy->wake_lock);
    }
}

int br_proxy_progress(br_proxy_t *proxy)
{
    int moved;
    if (pthread_mutex_trylock(&proxy->lock) != 0) {
        return 0;
    }
    moved = progress_locked(proxy);
    pthread_mutex_unlock(&proxy->lock);
    return moved;
}

ncclResult_t br_proxy_error(br_proxy_t *proxy, char *msg, size_t len)
{
    int res = atomic_load_explicit(&proxy->error, memory_order_acquire);
    if (res != ncclSuccess && msg != NULL) {
        snprintf(msg, len, "%s", proxy->error_msg);
    }
    return (ncclResult_t)res;
}

/* Requests of nc not yet tested to completion. */
static int conn_outstanding(const br_net_conn_t *nc)
{
    int n = 0;
    for (int i = 0; i < BR_STEPS; i++) {
        n += nc->req[i] != NULL;
    }
    return n;
}

/* Test every outstanding request of every connection once, posting nothing new; a
 * request that completes or fails is finished. Returns the requests still outstanding. */
static int drain_once(br_proxy_t *proxy)
{
    int left = 0;

    for (br_net_conn_t *nc = proxy->conns; nc != NULL; nc = nc->next) {
        br_net_t *net = nc->net;
        for (uint64_t k = nc->done; k < nc->posted; k++) {
            int slot = (int)(k % BR_STEPS), done = 0, size = 0;
            if (nc->req[slot] == NULL) {
                continue;
            }
            if (net->ops->test(net, nc->req[slot], &done, &size) != ncclSuccess || done) {
                nc->req[slot] = NULL;
                step_done(proxy, nc, k, (size_t)(size > 0 ? size : 0));
                continue;
            }
            left++;
        }
    }
    return left;
}

/* Destroy: the executor returns once data is in the FIFO, and the peer still needs what
 * the proxy has not sent yet. Bounded: a peer that stopped reading must not hang us. */
static void flush_sends(br_proxy_t *proxy)
{
    uint64_t deadline = br_time_ns() + (uint64_t)BR_PARAM_INT(BOOTSTRAP_TIMEOUT) * 1000000000ull;

    br_proxy_active(proxy, 1);
    for (;;) {
        /* The proxy thread is parked while we are active: progress from here. */
        pthread_mutex_lock(&proxy->lock);
        (void)progress_locked(proxy);
        int pending = has_pending_sends(proxy);
        pthread_mutex_unlock(&proxy->lock);
        if (!pending || atomic_load(&proxy->error) != ncclSuccess) {
            break;
        }
        if (br_time_ns() > deadline) {
            BR_WARN(NCCL_PROXY, "rank %d: gave up flushing network sends at close after %d s",
                    proxy->rank, (int)BR_PARAM_INT(BOOTSTRAP_TIMEOUT));
            break;
        }
        sched_yield();
    }
    br_proxy_active(proxy, -1);
}

/* Test what is still outstanding for a short, bounded while (the proxy thread is gone).
 * After a destroy whose operations all completed there is nothing: every send was
 * flushed and every receive posted was consumed. What is left belongs to an operation
 * that failed or was abandoned, whose peer may be dead. */
static int drain_bounded(br_proxy_t *proxy, uint64_t ms)
{
    uint64_t deadline = br_time_ns() + ms * 1000000ull;
    int left;
    while ((left = drain_once(proxy)) > 0 && br_time_ns() < deadline) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    return left;
}

static void close_conn(br_proxy_t *proxy, br_net_conn_t *nc, int flush)
{
    int left = conn_outstanding(nc);

    if (left > 0) {
        /* The ABI has no cancel: the plugin is closed with them; it may warn. */
        BR_INFO(NCCL_NET | NCCL_PROXY,
                "rank %d: closing the %s connection %s rank %d on net device %d with %d "
                "request%s not completed (%s)",
                proxy->rank, nc->is_send ? "send" : "receive", nc->is_send ? "to" : "from",
                nc->peer, nc->dev, left, left == 1 ? "" : "s",
                flush ? "its operation did not complete" : "abort: the peer may be gone");
    }
    events_stop(proxy, nc);
    br_proxy_comm_close(proxy, nc);
    br_socket_close(&nc->ack_fd); /* its TLS session too */
}

void br_proxy_comm_close(br_proxy_t *proxy, br_net_conn_t *nc)
{
    br_net_t *net = nc->net;

    br_proxy_useg_drop_regs(nc); /* before the comm they were made on goes */
    if (nc->comm != NULL) {
        if (nc->mhandle != NULL) {
            (void)net->ops->dereg_mr(net, nc->comm, nc->mhandle);
        }
        if (nc->is_send) {
            (void)net->ops->close_send(net, nc->comm);
        } else {
            (void)net->ops->close_recv(net, nc->comm);
        }
    }
    nc->comm = NULL;
    nc->mhandle = NULL;
    for (int i = 0; i < BR_STEPS; i++) {
        nc->req[i] = NULL; /* ended with the comm (the net ABI has no cancel) */
    }
    if (nc->fo_listen != NULL) {
        (void)nc->fo_net->ops->close_listen(nc->fo_net, nc->fo_listen);
        nc->fo_listen = NULL;
    }
    (void)proxy;
}

void br_proxy_destroy(br_proxy_t *proxy, int flush)
{
    if (proxy == NULL) {
        return;
    }
    if (flush) {
        flush_sends(proxy);
    }
    pthread_mutex_lock(&proxy->wake_lock);
    proxy->stop = 1;
    pthread_cond_signal(&proxy->wake);
    pthread_mutex_unlock(&proxy->wake_lock);
    pthread_join(proxy->thread, NULL);
    br_proxy_link_stop(proxy); /* no link message reaches the proxy from here on */
    if (proxy->park_ev != NULL) { /* destroyed with an executor still counted active */
        ctrl_wakeup(proxy, proxy->park_ev);
        proxy->park_ev = NULL;
    }
    /* No cancel in the net ABI: test what is outstanding, briefly, then close anyway. */
    (void)drain_bounded(proxy, (uint64_t)BR_PARAM_INT(NET_CLOSE_WAIT));
    while (proxy->conns != NULL) {
        br_net_conn_t *nc = proxy->conns;
        proxy->conns = nc->next;
        close_conn(proxy, nc, flush);
        br_proxy_useg_free_all(nc);
        free(nc);
    }
    if (proxy->fallback != NULL) {
        br_plugin_net_close(proxy->fallback);
    }
    pthread_cond_destroy(&proxy->wake);
    pthread_mutex_destroy(&proxy->wake_lock);
    pthread_mutex_destroy(&proxy->lock);
    pthread_mutex_destroy(&proxy->mail_lock);
    free(proxy);
}
