/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The data path of the socket plugin. Every message starts with a 16-byte header (size,
 * sequence number) on the control socket. Small messages, and every message when the
 * connection has no data sockets, follow their header on the control socket; larger ones
 * are cut into chunks that helper threads move over the data sockets, chunk i of the
 * message going to socket (next_sock + i) % nsocks on both sides, so the receiver knows
 * where each chunk travels once it has read the header.
 *
 * Requests live in a fixed pool of NCCL_NET_MAX_REQUESTS per comm and in a ring indexed
 * by message number; [done_seq, ctrl_seq) have finished on the control socket and wait
 * for chunks, [ctrl_seq, post_seq) still have control-socket work. A request reports
 * done only once every older one has, so messages complete in posting order.
 *
 * Threading: isend / irecv / test of one comm come from one thread at a time; the
 * control socket and the request ring are that thread's. Helper threads share only the
 * task rings and each request's atomic chunk count.
 */
#include <endian.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "netsock.h"
#include "plugin_log.h"

#include "check.h"

#define COMM_MAGIC 0x4d4f4353u /* "SCOM" */
#define RING_MASK (NETSOCK_RING - 1)
#define CHUNK_ALIGN 4096

_Static_assert((NETSOCK_RING & RING_MASK) == 0 && NETSOCK_RING >= NETSOCK_MAX_REQS,
               "the request ring is a power of two that holds every request");

void netsock_comm_fail(netsock_comm_t *comm, ncclResult_t res, const char *fmt, ...)
{
    int expected = 0;
    va_list ap;

    /* The first failure wins; later ones are consequences of it. */
    if (!atomic_compare_exchange_strong(&comm->err_claimed, &expected, 1)) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(comm->err_msg, sizeof(comm->err_msg), fmt, ap);
    va_end(ap);
    /* Release: whoever sees err also sees the complete err_msg. */
    atomic_store_explicit(&comm->err, (int)res, memory_order_release);
}

ncclResult_t netsock_comm_create(int is_send, const netsock_handle_t *h, int *fds,
                                 netsock_comm_t **comm_p)
{
    netsock_comm_t *comm = calloc(1, sizeof(*comm));
    netsock_addr_t peer;
    socklen_t len = sizeof(peer);
    ncclResult_t res;

    if (comm == NULL ||
        (h->nsocks > 0 && (comm->socks = calloc(h->nsocks, sizeof(*comm->socks))) == NULL)) {
        BR_WARN(NCCL_NET, "out of memory for a socket comm");
        for (int i = 0; i <= h->nsocks; i++) {
            netsock_fd_close(fds[i]);
        }
        free(comm);
        return ncclSystemError;
    }
    comm->magic = COMM_MAGIC;
    comm->is_send = is_send;
    comm->ctrl_fd = fds[0];
    comm->nsocks = h->nsocks;
    comm->nthreads = h->nthreads;
    comm->min_chunk = h->min_chunk;
    comm->inline_max = h->nsocks > 0 ? (size_t)h->inline_max : SIZE_MAX;
    for (int i = 0; i < comm->nsocks; i++) {
        comm->socks[i].fd = fds[i + 1];
    }
    for (int i = 0; i < NETSOCK_MAX_REQS; i++) {
        comm->free_idx[i] = NETSOCK_MAX_REQS - 1 - i;
    }
    comm->nfree = NETSOCK_MAX_REQS;
    if (getpeername(comm->ctrl_fd, &peer.sa, &len) == 0) {
        netsock_addr_str(&peer.sa, comm->peer, sizeof(comm->peer));
    } else {
        snprintf(comm->peer, sizeof(comm->peer), "<unknown peer>");
    }
    res = netsock_threads_start(comm);
    if (res != ncclSuccess) {
        netsock_comm_close(comm);
        return res;
    }
    *comm_p = comm;
    return ncclSuccess;
}

ncclResult_t netsock_comm_close(netsock_comm_t *comm)
{
    if (comm == NULL || comm->magic != COMM_MAGIC) {
        BR_WARN(NCCL_NET, "close of an invalid socket comm %p", (void *)comm);
        return ncclInternalError;
    }
    /* Helpers go first: they may still be writing into requests. */
    netsock_threads_stop(comm);
    for (int i = 0; i < comm->nsocks; i++) {
        netsock_fd_close(comm->socks[i].fd);
    }
    netsock_fd_close(comm->ctrl_fd);
    comm->magic = 0;
    free(comm->socks);
    free(comm->threads);
    free(comm);
    return ncclSuccess;
}

int netsock_chunk_split(const netsock_comm_t *comm, size_t size, size_t *chunk_p)
{
    size_t chunk = (size + (size_t)comm->nsocks - 1) / (size_t)comm->nsocks;

    chunk = chunk < comm->min_chunk ? comm->min_chunk : chunk;
    chunk = (chunk + CHUNK_ALIGN - 1) & ~(size_t)(CHUNK_ALIGN - 1);
    *chunk_p = chunk;
    return size == 0 ? 1 : (int)((size + chunk - 1) / chunk);
}

/* Hand a message's chunks to the helper threads (both sides, in message order). */
static void chunks_queue(netsock_comm_t *comm, netsock_req_t *req)
{
    size_t chunk, size = req->nbytes;
    int n = netsock_chunk_split(comm, size, &chunk);

    /* Relaxed: the release of each task push publishes it to the helpers. */
    atomic_store_explicit(&req->chunks, n, memory_order_relaxed);
    for (int i = 0; i < n; i++) {
        size_t off = (size_t)i * chunk;
        size_t len = size - off < chunk ? size - off : chunk;
        netsock_task_push(comm, (int)((comm->next_sock + (uint32_t)i) % (uint32_t)comm->nsocks),
                          req, req->data + off, len);
    }
    comm->next_sock = (comm->next_sock + (uint32_t)n) % (uint32_t)comm->nsocks;
}

static int would_block(void)
{
    return errno == EAGAIN || errno == EWOULDBLOCK;
}

/* Send headers (and inline data) of posted messages until the socket is full. */
static void progress_send(netsock_comm_t *comm)
{
    while (comm->ctrl_seq < comm->post_seq) {
        netsock_req_t *req = comm->ring[comm->ctrl_seq & RING_MASK];
        size_t hlen = sizeof(req->hdr);
        size_t total = hlen + (req->is_inline ? req->size : 0);
        struct iovec iov[2];
        struct msghdr msg = {.msg_iov = iov};
        ssize_t n;

        if (req->off < hlen) {
            iov[msg.msg_iovlen].iov_base = (char *)&req->hdr + req->off;
            iov[msg.msg_iovlen++].iov_len = hlen - req->off;
        }
        if (total > hlen) {
            size_t done = req->off > hlen ? req->off - hlen : 0;
            iov[msg.msg_iovlen].iov_base = req->data + done;
            iov[msg.msg_iovlen++].iov_len = req->size - done;
        }
        /* A TLS session takes one buffer at a time: the header, then the inline data. */
        n = br_tls_is_on(comm->ctrl_fd)
                ? br_tls_send(comm->ctrl_fd, iov[0].iov_base, iov[0].iov_len)
                : sendmsg(comm->ctrl_fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (would_block()) {
                return;
            }
            if (errno != EINTR) {
                netsock_comm_fail(comm, ncclRemoteError, "send failed: %s", strerror(errno));
                return;
            }
            continue;
        }
        req->off += (size_t)n;
        if (req->off == total) {
            comm->ctrl_seq++;
        }
    }
}

/* Read into the staging buffer; returns 0 when nothing could be read. */
static int stage_fill(netsock_comm_t *comm)
{
    size_t used = comm->stage_tail - comm->stage_head;
    ssize_t n;

    if (comm->stage_head > 0) {
        memmove(comm->stage, comm->stage + comm->stage_head, used);
        comm->stage_head = 0;
        comm->stage_tail = used;
    }
    do {
        n = br_tls_recv(comm->ctrl_fd, comm->stage + used, NETSOCK_STAGE - used);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
        comm->stage_tail += (size_t)n;
        return 1;
    }
    if (n == 0) {
        netsock_comm_fail(comm, ncclRemoteError, "the peer closed the connection");
    } else if (!would_block()) {
        netsock_comm_fail(comm, ncclRemoteError, "receive failed: %s", strerror(errno));
    }
    return 0;
}

/* Parse the header of req from the staging buffer; 0 when the stream is unusable. */
static int header_take(netsock_comm_t *comm, netsock_req_t *req)
{
    netsock_msg_hdr_t hdr;

    memcpy(&hdr, comm->stage + comm->stage_head, sizeof(hdr));
    comm->stage_head += sizeof(hdr);
    if (le32toh(hdr.magic) != NETSOCK_MSG_MAGIC || le32toh(hdr.seq) != (uint32_t)req->seq) {
        netsock_comm_fail(comm, ncclInternalError,
                          "the stream is corrupt: expected the header of message #%llu, got "
                          "magic 0x%x seq %u",
                          (unsigned long long)req->seq, le32toh(hdr.magic), le32toh(hdr.seq));
        return 0;
    }
    req->nbytes = le64toh(hdr.size);
    req->have_hdr = 1;
    if (req->nbytes > req->size) {
        netsock_comm_fail(comm, ncclInvalidUsage,
                          "message #%llu has %zu bytes but the posted receive buffer holds only "
                          "%zu: the two sides disagree on sizes",
                          (unsigned long long)req->seq, req->nbytes, req->size);
        return 0;
    }
    req->is_inline = req->nbytes <= comm->inline_max;
    return 1;
}

/* Read headers and inline data of posted receives until the socket is empty. */
static void progress_recv(netsock_comm_t *comm)
{
    while (comm->ctrl_seq < comm->post_seq) {
        netsock_req_t *req = comm->ring[comm->ctrl_seq & RING_MASK];
        size_t avail = comm->stage_tail - comm->stage_head;

        if (!req->have_hdr) {
            if (avail < sizeof(netsock_msg_hdr_t)) {
                if (!stage_fill(comm)) {
                    return;
                }
                continue;
            }
            if (!header_take(comm, req)) {
                return;
            }
            if (!req->is_inline) {
                chunks_queue(comm, req);
                comm->ctrl_seq++;
                continue;
            }
            avail = comm->stage_tail - comm->stage_head;
        }
        /* Inline data: first what was staged, then straight into the user's buffer. */
        size_t take = avail < req->nbytes - req->off ? avail : req->nbytes - req->off;
        memcpy(req->data + req->off, comm->stage + comm->stage_head, take);
        comm->stage_head += take;
        req->off += take;
        while (req->off < req->nbytes) {
            ssize_t n = br_tls_recv(comm->ctrl_fd, req->data + req->off, req->nbytes - req->off);
            if (n > 0) {
                req->off += (size_t)n;
            } else if (n == 0 || (!would_block() && errno != EINTR)) {
                netsock_comm_fail(comm, ncclRemoteError,
                                  "%s after %zu of %zu bytes of message #%llu",
                                  n == 0 ? "the peer closed the connection" : strerror(errno),
                                  req->off, req->nbytes, (unsigned long long)req->seq);
                return;
            } else if (errno != EINTR) {
                return;
            }
        }
        comm->ctrl_seq++;
    }
}

/* Move everything that can move without blocking, then advance the in-order prefix. */
static void comm_progress(netsock_comm_t *comm)
{
    if (comm->is_send) {
        progress_send(comm);
    } else {
        progress_recv(comm);
    }
    while (comm->done_seq < comm->ctrl_seq) {
        netsock_req_t *req = comm->ring[comm->done_seq & RING_MASK];
        /* Acquire pairs with the helper's release: the chunk's bytes are in place. */
        if (!req->is_inline && atomic_load_explicit(&req->chunks, memory_order_acquire) > 0) {
            break;
        }
        comm->done_seq++;
    }
}

/* Log the first failure once, with what was in flight; returns its code. */
static ncclResult_t comm_error(netsock_comm_t *comm)
{
    ncclResult_t res = (ncclResult_t)atomic_load_explicit(&comm->err, memory_order_acquire);

    if (res != ncclSuccess && !comm->err_logged) {
        netsock_req_t *old =
            comm->done_seq < comm->post_seq ? comm->ring[comm->done_seq & RING_MASK] : NULL;
        comm->err_logged = 1;
        if (old == NULL) {
            BR_WARN(NCCL_NET, "%s comm with %s: %s; nothing was in flight",
                    comm->is_send ? "send" : "receive", comm->peer, comm->err_msg);
        } else {
            BR_WARN(NCCL_NET,
                    "%s comm with %s: %s; %llu messages in flight, the oldest #%llu "
                    "(%zu bytes%s%s)",
                    comm->is_send ? "send" : "receive", comm->peer, comm->err_msg,
                    (unsigned long long)(comm->post_seq - comm->done_seq),
                    (unsigned long long)old->seq, comm->is_send ? old->size : old->nbytes,
                    old->have_hdr || comm->is_send ? "" : " of buffer, header not received",
                    !old->is_inline ? ", split over the data sockets" : "");
        }
    }
    return res;
}

static netsock_comm_t *comm_check(void *c, int is_send, const char *what)
{
    netsock_comm_t *comm = c;

    if (comm == NULL || comm->magic != COMM_MAGIC || comm->is_send != is_send) {
        BR_WARN(NCCL_NET, "%s on an invalid %s comm %p", what, is_send ? "send" : "receive", c);
        return NULL;
    }
    return comm;
}

/* A free request with the next message number, or NULL when all are in flight. */
static netsock_req_t *req_alloc(netsock_comm_t *comm, void *data, size_t size)
{
    netsock_req_t *req;

    if (comm->nfree == 0) {
        return NULL;
    }
    req = &comm->reqs[comm->free_idx[--comm->nfree]];
    req->comm = comm;
    req->seq = comm->post_seq++;
    req->data = data;
    req->size = size;
    req->nbytes = size;
    req->off = 0;
    req->in_use = 1;
    req->have_hdr = 0;
    req->is_inline = 1;
    atomic_store_explicit(&req->chunks, 0, memory_order_relaxed);
    comm->ring[req->seq & RING_MASK] = req;
    return req;
}

ncclResult_t netsock_isend(void *send_comm, void *data, size_t size, void **request)
{
    netsock_comm_t *comm = comm_check(send_comm, 1, "isend");
    netsock_req_t *req;
    ncclResult_t res;

    if (comm == NULL || request == NULL || (data == NULL && size > 0)) {
        return ncclInternalError;
    }
    *request = NULL;
    if ((res = comm_error(comm)) != ncclSuccess) {
        return res;
    }
    req = req_alloc(comm, data, size);
    if (req == NULL) {
        return ncclSuccess; /* all requests in flight: the caller retries */
    }
    req->hdr.size = htole64((uint64_t)size);
    req->hdr.seq = htole32((uint32_t)req->seq);
    req->hdr.magic = htole32(NETSOCK_MSG_MAGIC);
    req->is_inline = size <= comm->inline_max;
    if (!req->is_inline) {
        chunks_queue(comm, req);
    }
    /* Start sending now: a small message often leaves in this one call. */
    comm_progress(comm);
    *request = req;
    return ncclSuccess;
}

ncclResult_t netsock_irecv(void *recv_comm, int n, void **data, size_t *sizes, void **request)
{
    netsock_comm_t *comm = comm_check(recv_comm, 0, "irecv");
    netsock_req_t *req;
    ncclResult_t res;

    if (comm == NULL || request == NULL || data == NULL || sizes == NULL) {
        return ncclInternalError;
    }
    if (n != 1) {
        BR_WARN(NCCL_NET,
                "irecv of %d buffers from %s: this plugin takes one buffer per "
                "receive (maxRecvs 1)",
                n, comm->peer);
        return ncclInternalError;
    }
    /* *request may hold NCCL's optional-completion hint; it is overwritten either way. */
    *request = NULL;
    if ((res = comm_error(comm)) != ncclSuccess) {
        return res;
    }
    if (data[0] == NULL && sizes[0] > 0) {
        BR_WARN(NCCL_NET, "irecv of %zu bytes into a NULL buffer", sizes[0]);
        return ncclInternalError;
    }
    req = req_alloc(comm, data[0], sizes[0]);
    *request = req; /* NULL when all requests are in flight: the caller retries */
    return ncclSuccess;
}

ncclResult_t netsock_test(void *request, int *done, int *sizes)
{
    netsock_req_t *req = request;
    netsock_comm_t *comm;

    if (req == NULL || done == NULL || !req->in_use || req->comm == NULL ||
        req->comm->magic != COMM_MAGIC) {
        BR_WARN(NCCL_NET, "test of an invalid request %p", request);
        return ncclInternalError;
    }
    comm = req->comm;
    *done = 0;
    if (req->seq >= comm->done_seq &&
        atomic_load_explicit(&comm->err, memory_order_relaxed) == ncclSuccess) {
        comm_progress(comm);
    }
    if (req->seq < comm->done_seq) {
        size_t bytes = comm->is_send ? req->size : req->nbytes;
        /* The ABI reports sizes as int; a message above 2 GiB reports INT32_MAX. */
        if (sizes != NULL) {
            sizes[0] = bytes > INT32_MAX ? INT32_MAX : (int)bytes;
        }
        *done = 1;
        req->in_use = 0;
        comm->free_idx[comm->nfree++] = (int)(req - comm->reqs);
        return ncclSuccess;
    }
    return comm_error(comm);
}
