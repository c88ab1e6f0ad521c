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
 * direction tests only its oldest request.
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

#include "proxy.h"
#include "util.h"

struct br_proxy {
    br_net_t *net;
    int rank;
    pthread_t thread;
    pthread_mutex_t lock;      /* guards the connection list and its progress */
    pthread_mutex_t wake_lock; /* guards active/stop with `wake` */
    pthread_cond_t wake;
    int active;
    int stop;
    br_net_conn_t *conns;
    _Atomic int error;   /* ncclResult_t of the first failure */
    br_profiler_t *prof; /* ProxyStep events, or NULL */
    char error_msg[512];
};

static void proxy_fail(br_proxy_t *proxy, br_net_conn_t *nc, ncclResult_t res, const char *what)
{
    int expected = ncclSuccess;
    if (!nc->is_send) {
        /* A peer that finished and closed its end also ends our pre-posted receive:
         * remember it; the executor decides whether it still needed that data. */
        snprintf(nc->why, sizeof(nc->why),
                 "network %s from rank %d failed (net plugin %s, error %d) after %llu steps: "
                 "the peer process may have died or closed its communicator, or its network "
                 "may be down",
                 what, nc->peer, proxy->net->name, (int)res, (unsigned long long)nc->done);
        atomic_store_explicit(&nc->failed, (int)res, memory_order_release);
        BR_INFO(NCCL_NET | NCCL_PROXY, "rank %d: %s", proxy->rank, nc->why);
        return;
    }
    if (atomic_compare_exchange_strong(&proxy->error, &expected, (int)res)) {
        snprintf(proxy->error_msg, sizeof(proxy->error_msg),
                 "network %s %s rank %d failed (net plugin %s, error %d) after %llu of %llu "
                 "steps: the peer process may have died or its network may be down",
                 what, nc->is_send ? "to" : "from", nc->peer, proxy->net->name, (int)res,
                 (unsigned long long)nc->done, (unsigned long long)nc->posted);
        BR_WARN(NCCL_NET | NCCL_PROXY, "rank %d: %s", proxy->rank, proxy->error_msg);
    }
}

/* ProxyStep events: one per network transfer, started when it is posted and stopped when
 * the plugin reports it complete. */
static void step_start(br_proxy_t *proxy, br_net_conn_t *nc, int slot, size_t bytes)
{
    ncclProfilerEventDescr_v6_t d;
    ncclProfilerEventStateArgs_v6_t args;

    nc->ev[slot] = NULL;
    /* Emitted for its own bit and for its child's (NetPlugin), as NCCL does. */
    if (proxy->prof == NULL ||
        (br_plugin_profiler_mask() & (ncclProfileProxyStep | ncclProfileNetPlugin)) == 0) {
        return;
    }
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileProxyStep;
    d.rank = proxy->rank;
    d.proxyStep.step = (int)(nc->posted % 0x7fffffff);
    if (br_plugin_profiler_start_event(proxy->prof, &d, &nc->ev[slot]) != ncclSuccess) {
        nc->ev[slot] = NULL;
        return;
    }
    memset(&args, 0, sizeof(args));
    args.proxyStep.transSize = bytes;
    (void)br_plugin_profiler_record_event_state(
        proxy->prof, nc->ev[slot],
        nc->is_send ? ncclProfilerProxyStepSendWait : ncclProfilerProxyStepRecvWait, &args);
}

static void step_stop(br_proxy_t *proxy, br_net_conn_t *nc, int slot)
{
    if (nc->ev[slot] != NULL) {
        (void)br_plugin_profiler_stop_event(proxy->prof, nc->ev[slot]);
        nc->ev[slot] = NULL;
    }
}

void br_proxy_set_profiler(br_proxy_t *proxy, br_profiler_t *prof)
{
    pthread_mutex_lock(&proxy->lock);
    proxy->prof = prof;
    pthread_mutex_unlock(&proxy->lock);
}

/* Move one send connection; returns the number of state changes. */
static int progress_send(br_proxy_t *proxy, br_net_conn_t *nc)
{
    br_net_t *net = proxy->net;
    int moved = 0;
    /* Acquire pairs with the executor's release of tail: the slot bytes are visible. */
    uint64_t tail = atomic_load_explicit(&nc->ctrl->tail, memory_order_acquire);

    while (nc->posted < tail) {
        int slot = (int)(nc->posted % BR_STEPS);
        void *req = NULL;
        char *data = nc->buf + (size_t)slot * nc->stride;
        size_t bytes = nc->ctrl->slot[slot].bytes;
        /* The call descriptor travels right after the payload, so the receiver can check
         * it as it does on shared memory. */
        memcpy(data + bytes, &nc->ctrl->slot[slot], sizeof(br_slot_desc_t));
        ncclResult_t res = net->ops->isend(net, nc->comm, data, bytes + sizeof(br_slot_desc_t),
                                           proxy->rank, nc->mhandle, NULL, &req);
        if (res != ncclSuccess) {
            proxy_fail(proxy, nc, res, "send");
            return moved;
        }
        if (req == NULL) {
            break; /* the plugin is full: retry later */
        }
        nc->req[slot] = req;
        step_start(proxy, nc, slot, nc->ctrl->slot[slot].bytes);
        nc->posted++;
        moved++;
    }
    while (nc->done < nc->posted) {
        int slot = (int)(nc->done % BR_STEPS), done = 0;
        ncclResult_t res = net->ops->test(net, nc->req[slot], &done, NULL);
        if (res != ncclSuccess) {
            proxy_fail(proxy, nc, res, "send");
            return moved;
        }
        if (!done) {
            break;
        }
        nc->req[slot] = NULL;
        step_stop(proxy, nc, slot);
        nc->done++;
        /* Release: the executor may now overwrite the slot. */
        atomic_store_explicit(&nc->ctrl->head, nc->done, memory_order_release);
        moved++;
    }
    return moved;
}

/* Move one receive connection; returns the number of state changes. */
static int progress_recv(br_proxy_t *proxy, br_net_conn_t *nc)
{
    br_net_t *net = proxy->net;
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
        ncclResult_t res =
            net->ops->irecv(net, nc->comm, 1, &data, &size, &tag, &nc->mhandle, NULL, &req);
        if (res != ncclSuccess) {
            proxy_fail(proxy, nc, res, "receive");
            return moved;
        }
        if (req == NULL) {
            break;
        }
        nc->req[slot] = req;
        step_start(proxy, nc, slot, size);
        nc->posted++;
        moved++;
    }
    while (nc->done < nc->posted) {
        int slot = (int)(nc->done % BR_STEPS), done = 0, size = 0;
        ncclResult_t res = net->ops->test(net, nc->req[slot], &done, &size);
        if (res != ncclSuccess) {
            proxy_fail(proxy, nc, res, "receive");
            return moved;
        }
        if (!done) {
            break;
        }
        nc->req[slot] = NULL;
        step_stop(proxy, nc, slot);
        /* The sender's descriptor is the message's last bytes. */
        br_slot_desc_t d;
        if ((size_t)size < sizeof(d)) {
            proxy_fail(proxy, nc, ncclRemoteError, "receive (message without a descriptor)");
            return moved;
        }
        memcpy(&d, nc->buf + (size_t)slot * nc->stride + (size_t)size - sizeof(d), sizeof(d));
        if (d.bytes != (uint64_t)size - sizeof(d)) {
            proxy_fail(proxy, nc, ncclRemoteError, "receive (descriptor and size disagree)");
            return moved;
        }
        nc->ctrl->slot[slot] = d;
        nc->done++;
        /* Release: the slot's bytes and descriptor before the new tail. */
        atomic_store_explicit(&nc->ctrl->tail, nc->done, memory_order_release);
        moved++;
    }
    return moved;
}

static int progress_locked(br_proxy_t *proxy)
{
    int moved = 0;
    if (atomic_load_explicit(&proxy->error, memory_order_relaxed) != ncclSuccess) {
        return 0;
    }
    for (br_net_conn_t *nc = proxy->conns; nc != NULL; nc = nc->next) {
        if (atomic_load_explicit(&nc->failed, memory_order_relaxed) == ncclSuccess) {
            moved += nc->is_send ? progress_send(proxy, nc) : progress_recv(proxy, nc);
        }
    }
    return moved;
}

/* Sends filled by the executor but not yet completed keep the proxy awake after the
 * executor returns: the peer is waiting for them. */
static int has_pending_sends(br_proxy_t *proxy)
{
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

static void *proxy_main(void *arg)
{
    br_proxy_t *proxy = arg;
    unsigned idle = 0;

    br_log_set_rank(proxy->rank);
    for (;;) {
        pthread_mutex_lock(&proxy->wake_lock);
        /* Parked while an executor is active: it progresses inline from its wait loop
         * (br_proxy_progress), so one thread per rank is runnable instead of two. On a
         * machine where ranks outnumber cores a second spinning thread only steals the
         * core from the peer it waits for. br_proxy_active(-1) wakes us. */
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

        if (!pending) {
            /* Idle communicator: sleep until an executor leaves with sends pending. The
             * timed wait also lets late network errors surface. */
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
    return NULL;
}

ncclResult_t br_proxy_create(br_net_t *net, int rank, br_proxy_t **proxy_p)
{
    ncclResult_t res = ncclSuccess;
    br_proxy_t *proxy = NULL;
    int ret;

    BR_CHECK(br_calloc(&proxy, 1, "proxy"));
    proxy->net = net;
    proxy->rank = rank;
    pthread_mutex_init(&proxy->lock, NULL);
    pthread_mutex_init(&proxy->wake_lock, NULL);
    pthread_cond_init(&proxy->wake, NULL);
    ret = pthread_create(&proxy->thread, NULL, proxy_main, proxy);
    if (ret != 0) {
        BR_WARN(NCCL_PROXY, "cannot start the proxy thread: %s", strerror(ret));
        res = ncclSystemError;
        goto err_free;
    }
    BR_INFO(NCCL_INIT | NCCL_PROXY, "proxy thread started for net plugin %s", net->name);
    *proxy_p = proxy;
    return ncclSuccess;
err_free:
    pthread_cond_destroy(&proxy->wake);
    pthread_mutex_destroy(&proxy->wake_lock);
    pthread_mutex_destroy(&proxy->lock);
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
    br_net_t *net = proxy->net;
    int left = 0;

    for (br_net_conn_t *nc = proxy->conns; nc != NULL; nc = nc->next) {
        for (uint64_t k = nc->done; k < nc->posted; k++) {
            int slot = (int)(k % BR_STEPS), done = 0, size = 0;
            if (nc->req[slot] == NULL) {
                continue;
            }
            if (net->ops->test(net, nc->req[slot], &done, &size) != ncclSuccess || done) {
                nc->req[slot] = NULL;
                step_stop(proxy, nc, slot);
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
    br_net_t *net = proxy->net;
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
    for (int i = 0; i < BR_STEPS; i++) {
        step_stop(proxy, nc, i);
    }
    if (nc->mhandle != NULL) {
        (void)net->ops->dereg_mr(net, nc->comm, nc->mhandle);
    }
    if (nc->is_send) {
        (void)net->ops->close_send(net, nc->comm);
    } else {
        (void)net->ops->close_recv(net, nc->comm);
    }
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
    /* No cancel in the net ABI: test what is outstanding, briefly, then close anyway. */
    (void)drain_bounded(proxy, (uint64_t)BR_PARAM_INT(NET_CLOSE_WAIT));
    while (proxy->conns != NULL) {
        br_net_conn_t *nc = proxy->conns;
        proxy->conns = nc->next;
        close_conn(proxy, nc, flush);
        free(nc);
    }
    pthread_cond_destroy(&proxy->wake);
    pthread_mutex_destroy(&proxy->wake_lock);
    pthread_mutex_destroy(&proxy->lock);
    free(proxy);
}
