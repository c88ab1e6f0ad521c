/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helper threads of the socket plugin. Each serves a contiguous range of a comm's data
 * sockets; each socket has a single-producer (the comm's thread) single-consumer (its
 * helper) ring of chunk tasks. A helper moves bytes with non-blocking send/recv until
 * every socket with work would block, then sleeps in poll() on those sockets and its
 * eventfd; with no work at all it sleeps on the eventfd alone. It never spins.
 *
 * Wake-up protocol: the helper sets `waiting` before its final look at the rings, the
 * producer publishes a task before reading `waiting` (both sequentially consistent), so
 * either the helper sees the task or the producer sees `waiting` and writes the eventfd.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netsock.h"
#include "plugin_log.h"

#include "check.h"

#define TASK_MASK (NETSOCK_TASKS - 1)

_Static_assert((NETSOCK_TASKS & TASK_MASK) == 0 && NETSOCK_TASKS >= NETSOCK_MAX_REQS,
               "a socket's task ring is a power of two that holds a chunk of every request");

static void thread_wake(netsock_thread_t *th)
{
    uint64_t one = 1;

    /* Only fails if the counter would overflow, which leaves it readable anyway. */
    if (write(th->efd, &one, sizeof(one)) < 0) {
        BR_TRACE(NCCL_NET, "eventfd write: %s", strerror(errno));
    }
}

void netsock_task_push(netsock_comm_t *comm, int s, netsock_req_t *req, char *data, size_t len)
{
    netsock_sock_t *sock = &comm->socks[s];
    netsock_thread_t *th = &comm->threads[sock->owner];
    unsigned tail = atomic_load_explicit(&sock->tail, memory_order_relaxed);
    netsock_task_t *task = &sock->tasks[tail & TASK_MASK];

    task->req = req;
    task->data = data;
    task->len = len;
    task->off = 0;
    /* Sequentially consistent: publishes the task, and orders this store before the load
     * of `waiting` below (the helper does the mirror image). */
    atomic_store(&sock->tail, tail + 1);
    if (atomic_load(&th->waiting) && atomic_exchange(&th->waiting, 0)) {
        thread_wake(th);
    }
}

/* Work through one socket's tasks: 0 when its ring is empty, 1 when it would block, -1
 * when the connection failed. */
static int sock_progress(netsock_comm_t *comm, netsock_sock_t *sock, int s)
{
    for (;;) {
        unsigned head = atomic_load_explicit(&sock->head, memory_order_relaxed);
        /* Acquire pairs with the producer's publication of the task. */
        if (head == atomic_load_explicit(&sock->tail, memory_order_acquire)) {
            return 0;
        }
        netsock_task_t *task = &sock->tasks[head & TASK_MASK];
        while (task->off < task->len) {
            ssize_t n = comm->is_send
                            ? br_tls_send(sock->fd, task->data + task->off, task->len - task->off)
                            : br_tls_recv(sock->fd, task->data + task->off, task->len - task->off);
            if (n > 0) {
                task->off += (size_t)n;
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                return 1;
            }
            if (n < 0 && errno == EINTR) {
                continue;
            }
            netsock_comm_fail(comm, ncclRemoteError,
                              "data socket %d: %s after %zu of %zu bytes of a chunk of message "
                              "#%llu",
                              s, n == 0 ? "the peer closed the connection" : strerror(errno),
                              task->off, task->len, (unsigned long long)task->req->seq);
            return -1;
        }
        /* Release: the chunk's bytes are visible to whoever sees the count drop. The task
         * (and the request) must not be touched after this. */
        atomic_fetch_sub_explicit(&task->req->chunks, 1, memory_order_release);
        atomic_store_explicit(&sock->head, head + 1, memory_order_release);
    }
}

static void *thread_main(void *arg)
{
    netsock_thread_t *th = arg;
    netsock_comm_t *comm = th->comm;
    struct pollfd pfd[NETSOCK_MAX_SOCKS + 1];
    int blocked[NETSOCK_MAX_SOCKS];
    uint64_t count;

    while (!atomic_load(&th->stop)) {
        int n = 0, failed = atomic_load_explicit(&comm->err, memory_order_relaxed) != 0;

        for (int i = 0; i < th->count && !failed; i++) {
            netsock_sock_t *sock = &comm->socks[th->first + i];
            int r = sock_progress(comm, sock, th->first + i);
            blocked[i] = r > 0;
            failed = r < 0;
            if (r > 0) {
                pfd[n].fd = sock->fd;
                pfd[n++].events = comm->is_send ? POLLOUT : POLLIN;
            }
        }
        /* After a failure only a stop is awaited: the comm is dead. */
        atomic_store(&th->waiting, 1);
        int fresh = 0;
        for (int i = 0; i < th->count && !failed && !fresh; i++) {
            netsock_sock_t *sock = &comm->socks[th->first + i];
            fresh = !blocked[i] && atomic_load(&sock->head) != atomic_load(&sock->tail);
        }
        if (fresh || atomic_load(&th->stop)) {
            atomic_store(&th->waiting, 0);
            continue;
        }
        pfd[n].fd = th->efd;
        pfd[n++].events = POLLIN;
        if (poll(pfd, (nfds_t)n, -1) < 0 && errno != EINTR) {
            netsock_comm_fail(comm, ncclSystemError, "poll in a helper thread failed: %s",
                              strerror(errno));
        }
        atomic_store(&th->waiting, 0);
        if (pfd[n - 1].revents & POLLIN) {
            /* Drain the eventfd (non-blocking); a failure only means it was empty. */
            if (read(th->efd, &count, sizeof(count)) < 0) {
                BR_TRACE(NCCL_NET, "eventfd read: %s", strerror(errno));
            }
        }
    }
    return NULL;
}

ncclResult_t netsock_threads_start(netsock_comm_t *comm)
{
    ncclResult_t res = ncclSuccess;
    int ret;

    if (comm->nthreads == 0) {
        return ncclSuccess;
    }
    comm->threads = calloc((size_t)comm->nthreads, sizeof(*comm->threads));
    if (comm->threads == NULL) {
        BR_WARN(NCCL_NET, "out of memory for helper threads");
        return ncclSystemError;
    }
    for (int t = 0; t < comm->nthreads; t++) {
        comm->threads[t].efd = -1;
    }
    for (int t = 0; t < comm->nthreads; t++) {
        netsock_thread_t *th = &comm->threads[t];
        th->comm = comm;
        th->first = t * comm->nsocks / comm->nthreads;
        th->count = (t + 1) * comm->nsocks / comm->nthreads - th->first;
        for (int s = th->first; s < th->first + th->count; s++) {
            comm->socks[s].owner = t;
        }
        BR_SYS_GOTO(th->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), res, out);
        ret = pthread_create(&th->tid, NULL, thread_main, th);
        if (ret != 0) {
            BR_WARN(NCCL_NET, "starting a helper thread failed: %s", strerror(ret));
            res = ncclSystemError;
            goto out;
        }
        th->started = 1;
    }
out:
    return res;
}

void netsock_threads_stop(netsock_comm_t *comm)
{
    if (comm->threads == NULL) {
        return;
    }
    for (int t = 0; t < comm->nthreads; t++) {
        netsock_thread_t *th = &comm->threads[t];
        if (th->started) {
            atomic_store(&th->stop, 1);
            thread_wake(th);
            pthread_join(th->tid, NULL);
            th->started = 0;
        }
        if (th->efd >= 0) {
            close(th->efd);
            th->efd = -1;
        }
    }
}
