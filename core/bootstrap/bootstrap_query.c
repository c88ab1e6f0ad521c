/* SPDX-License-Identifier: Apache-2.0 */
/*
 * State queries between the ranks of one bootstrap, for the dump of a hang
 * (core/comm/comm_dump.c). A query is a connection of its own to a rank's bootstrap
 * listener that says hello with the communicator's secret and kind BR_BOOT_CONN_QUERY;
 * that rank's background thread (which runs whatever its user threads are blocked in)
 * answers with one frame {BR_BOOT_MSG_STATE, 0, size} and the text its state function
 * returns, and closes. No thread, socket or init-time exchange is added for this: the
 * listener and every rank's address exist already. Every step is bounded: the answer by
 * ANSWER_NS, a query by the caller's deadline.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap_int.h"

/* How long the background thread may spend sending one answer (it fits a socket buffer,
 * so this bounds only a requester that stopped reading). */
#define ANSWER_NS (500ull * 1000000ull)
/* Ranks asked at once. */
#define QUERY_WINDOW 128

void br_bootstrap_set_state_fn(br_bootstrap_t *boot, br_bootstrap_state_fn_t fn, void *arg)
{
    pthread_mutex_lock(&boot->lock);
    boot->state_fn = fn;
    boot->state_arg = arg;
    pthread_mutex_unlock(&boot->lock);
}

void br_boot_query_serve(br_bootstrap_t *boot, int fd, int from)
{
    br_bootstrap_state_fn_t fn;
    void *arg;
    br_boot_frame_t f;
    size_t len = 0;
    char *text = NULL;
    uint64_t deadline = br_time_ns() + ANSWER_NS;

    pthread_mutex_lock(&boot->lock);
    fn = boot->state_fn;
    arg = boot->state_arg;
    pthread_mutex_unlock(&boot->lock);
    if (fn != NULL) {
        text = fn(arg, &len);
    }
    memset(&f, 0, sizeof(f));
    f.kind = BR_BOOT_MSG_STATE;
    f.size = text != NULL ? len : 0; /* 0: nothing to tell (not set up yet) */
    if (br_socket_send_all(fd, &f, sizeof(f), deadline) != ncclSuccess ||
        (f.size > 0 && br_socket_send_all(fd, text, len, deadline) != ncclSuccess)) {
        BR_INFO(NCCL_BOOTSTRAP, "bootstrap: rank %d could not answer rank %d's state query: %s",
                boot->rank, from, strerror(errno));
    }
    free(text);
}

/* One query in flight. */
typedef struct {
    int fd;
    size_t got; /* bytes of the frame, then of the text, read so far */
    br_boot_frame_t frame;
    int in_text; /* the frame is in: reading the text */
} query_t;

static void set_why(br_bootstrap_reply_t *r, const char *fmt, const char *detail)
{
    snprintf(r->why, sizeof(r->why), fmt, detail);
}

/* Read what is ready on q; returns 1 when it is finished (answered or failed). */
static int query_read(query_t *q, br_bootstrap_reply_t *r)
{
    for (;;) {
        size_t got = 0, want;
        char *dst;
        if (!q->in_text) {
            dst = (char *)&q->frame + q->got;
            want = sizeof(q->frame) - q->got;
        } else {
            dst = r->text + q->got;
            want = (size_t)q->frame.size - q->got;
        }
        if (br_socket_recv_some(q->fd, dst, want, &got) != ncclSuccess) {
            set_why(r, "the connection closed before the answer was whole (%s)", strerror(errno));
            free(r->text);
            r->text = NULL;
            return 1;
        }
        if (got == 0) {
            return 0;
        }
        q->got += got;
        if (got < want) {
            continue;
        }
        if (q->in_text) {
            r->text[r->len] = '\0';
            return 1;
        }
        if (q->frame.kind != BR_BOOT_MSG_STATE || q->frame.size > (1u << 26)) {
            set_why(r, "%s", "a corrupt answer");
            return 1;
        }
        if (q->frame.size == 0) {
            set_why(r, "%s", "its communicator is not set up yet, or is being destroyed");
            return 1;
        }
        r->text = malloc((size_t)q->frame.size + 1);
        if (r->text == NULL) {
            set_why(r, "%s", "out of memory for the answer");
            return 1;
        }
        r->len = (size_t)q->frame.size;
        q->in_text = 1;
        q->got = 0;
    }
}

/* Connect to peer and ask; fd -1 (and r->why) when that failed. */
static void query_open(br_bootstrap_t *boot, int peer, uint64_t deadline_ns, query_t *q,
                       br_bootstrap_reply_t *r)
{
    const br_boot_peer_t *p = &boot->peers[peer].info;
    br_boot_hello_t hello;
    char where[BR_SOCKET_ADDR_STRLEN];

    q->fd = -1;
    if (!br_socket_addr_is_valid(&p->addr)) {
        set_why(r, "%s", "its address is not known");
        return;
    }
    memset(&hello, 0, sizeof(hello));
    hello.secret = boot->secret;
    hello.proto = BR_BOOT_PROTO;
    hello.rank = boot->rank;
    hello.conn = BR_BOOT_CONN_QUERY;
    /* The listener is up until the bootstrap closes: a refusal means the rank is gone. */
    if (br_socket_connect_once(&p->addr, deadline_ns, &q->fd) != ncclSuccess ||
        br_socket_send_all(q->fd, &hello, sizeof(hello), deadline_ns) != ncclSuccess) {
        int err = errno;
        char detail[160];
        snprintf(detail, sizeof(detail), "%s at %s", strerror(err),
                 br_socket_addr_str(&p->addr, where, sizeof(where)));
        set_why(r,
                err == ECONNREFUSED ? "%s: its process exited or destroyed the communicator"
                                    : "cannot connect: %s",
                detail);
        br_socket_close(&q->fd);
    }
}

/* Ask ranks [lo, hi) (not this one) and read their answers until deadline_ns. */
static void query_window(br_bootstrap_t *boot, int lo, int hi, uint64_t deadline_ns, query_t *qs,
                         struct pollfd *pfd, br_bootstrap_reply_t *replies)
{
    int open = 0;

    for (int r = lo; r < hi; r++) {
        qs[r].fd = -1;
        if (r != boot->rank) {
            query_open(boot, r, deadline_ns, &qs[r], &replies[r]);
            open += qs[r].fd >= 0;
        }
    }
    while (open > 0) {
        int np = 0;
        for (int r = lo; r < hi; r++) {
            if (qs[r].fd >= 0) {
                pfd[np++] = (struct pollfd){.fd = qs[r].fd, .events = POLLIN};
            }
        }
        int ms = br_socket_poll_ms(deadline_ns, 100);
        if (ms == 0 && br_time_ns() >= deadline_ns) {
            break;
        }
        if (poll(pfd, (nfds_t)np, ms) < 0 && errno != EINTR) {
            break;
        }
        for (int r = lo; r < hi; r++) {
            if (qs[r].fd >= 0 && query_read(&qs[r], &replies[r])) {
                br_socket_close(&qs[r].fd);
                open--;
            }
        }
    }
    for (int r = lo; r < hi; r++) {
        if (qs[r].fd >= 0) { /* no whole answer in time: a stopped or stuck process */
            free(replies[r].text);
            replies[r].text = NULL;
            replies[r].len = 0;
            set_why(&replies[r], "%s", "no answer in time (is the process stopped or stuck?)");
            br_socket_close(&qs[r].fd);
        }
    }
}

void br_bootstrap_query_all(br_bootstrap_t *boot, uint64_t deadline_ns,
                            br_bootstrap_reply_t *replies)
{
    int n = boot->nranks;
    query_t *qs = calloc((size_t)n, sizeof(*qs));
    struct pollfd *pfd = calloc(QUERY_WINDOW, sizeof(*pfd));

    memset(replies, 0, (size_t)n * sizeof(*replies));
    if (qs == NULL || pfd == NULL) {
        for (int r = 0; r < n; r++) {
            set_why(&replies[r], "%s", "out of memory for the query");
        }
    } else {
        /* A window of ranks at a time keeps the open sockets well under the usual limit of
         * 1024 descriptors; all windows share the one deadline. */
        for (int lo = 0; lo < n; lo += QUERY_WINDOW) {
            query_window(boot, lo, lo + QUERY_WINDOW < n ? lo + QUERY_WINDOW : n, deadline_ns, qs,
                         pfd, replies);
        }
    }
    free(qs);
    free(pfd);
}
