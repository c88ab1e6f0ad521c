/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the software collnet plugin (collnet_plugin.c) and its reducer process
 * (collnet_reducer.c) say to each other over loopback TCP: after connecting, a rank sends
 * its rank (int32); then per request a header and its data, answered by a header
 * (status 0: the result follows; status r > 0: rank r sent other arguments than rank 0,
 * nothing follows). What the data is depends on the kind:
 *   CN_ALLREDUCE      sends count elements, gets count reduced elements;
 *   CN_ALLGATHER      a window of the concatenation of every rank's block (n ranks x
 *                     bytes_per_rank bytes), count bytes (type uint8) at window_off, as
 *                     NCCL's proxy passes it: sends the bytes of its own block that lie
 *                     in the window (maybe none), gets the whole window;
 *   CN_REDUCESCATTER  the same kind of window, count elements: sends the window, gets
 *                     the reduced bytes of its own block that lie in it (maybe none).
 */
#ifndef COLLNET_WIRE_H_
#define COLLNET_WIRE_H_

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define CN_MAGIC 0x636f6c6cu

typedef struct {
    uint32_t magic;
    int32_t type, op;
    int32_t status; /* reply: 0 ok, else the first rank that disagreed with rank 0 */
    uint64_t count;
    uint64_t seq; /* the request's number on its communicator */
    int32_t kind; /* CN_ALLREDUCE, CN_ALLGATHER, CN_REDUCESCATTER */
    int32_t pad;
    uint64_t bytes_per_rank, window_off; /* AllGather / ReduceScatter: must agree too */
} cn_hdr_t;

enum { CN_ALLREDUCE = 0, CN_ALLGATHER = 1, CN_REDUCESCATTER = 2 };

/* Bytes per element of an nccl.h type (0: not a type). */
static inline size_t cn_type_size(int t)
{
    static const size_t sz[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    return t >= 0 && t < 12 ? sz[t] : 0;
}

/* Where rank `rank`'s block meets the window of request h: the offset in the window
 * (*off_p) and the bytes (0: the window misses the block). AllGather / ReduceScatter. */
static inline size_t cn_own_bytes(const cn_hdr_t *h, int rank, size_t *off_p)
{
    size_t wb = (size_t)h->count * cn_type_size(h->type);
    size_t lo = (size_t)rank * h->bytes_per_rank, hi = lo + h->bytes_per_rank;
    size_t b = h->window_off > lo ? h->window_off : lo;
    size_t e = h->window_off + wb < hi ? h->window_off + wb : hi;

    *off_p = b < e ? b - h->window_off : 0;
    return b < e ? e - b : 0;
}

/* Bytes rank `rank` sends with request h (to = 0) or gets back (to = 1). */
static inline size_t cn_data_bytes(const cn_hdr_t *h, int rank, int to)
{
    size_t off;
    if ((h->kind == CN_ALLGATHER && !to) || (h->kind == CN_REDUCESCATTER && to)) {
        return cn_own_bytes(h, rank, &off);
    }
    return (size_t)h->count * cn_type_size(h->type);
}

/* The types the collnet reduces: all but the two fp8 ones, for which the core falls back. */
static inline int cn_type_supported(int t)
{
    return t >= 0 && t <= 9;
}

/* Send all of buf on fd (blocking or not: waits with poll), 0 or -1. */
static inline int cn_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            (void)poll(&pf, 1, 100);
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

#endif /* COLLNET_WIRE_H_ */
