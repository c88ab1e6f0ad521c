/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net_plugin_bench: throughput and latency of any net plugin between two processes on
 * this machine (a fork), through the same kit as the conformance suite.
 *
 *   net_plugin_bench PLUGIN.so [--version N] [--mode bw|lat|bidir] [--size BYTES]
 *                    [--iters N] [--window W]
 *
 * bw: the parent streams `iters` messages of `size` bytes with up to `window` in flight;
 * the child reports GB/s (1e9 bytes/s) from its first posted receive to its last
 * completion. bidir: both processes stream to each other at once (one thread each
 * driving both connections, like a ring's proxy). lat: ping-pong over two connections;
 * the parent reports half the round trip. Idle polling yields the CPU, as Braid's proxy does.
 */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net_kit.h"

enum { MODE_BW, MODE_LAT, MODE_BIDIR };

typedef struct {
    int version;
    int mode;
    size_t size;
    long iters;
    int window;
} opts_t;

static void die(const char *what, int res)
{
    fprintf(stderr, "net_plugin_bench: %s failed (%d)\n", what, res);
    exit(1);
}

#define OK(call)                                                                                   \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            die(#call, (int)r_);                                                                   \
        }                                                                                          \
    } while (0)

static void xfer_all(int fd, void *buf, size_t n, int write_it)
{
    char *p = buf;
    while (n > 0) {
        ssize_t k = write_it ? write(fd, p, n) : read(fd, p, n);
        if (k <= 0) {
            die(write_it ? "pipe write" : "pipe read", (int)k);
        }
        p += k;
        n -= (size_t)k;
    }
}

/* Listen, ship the handle through out_fd; or read a handle from in_fd and connect. The
 * accept/connect loops poll until done. */
static void *open_recv(int out_fd)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *rc = NULL;

    OK(kit_listen(0, handle, &lc));
    xfer_all(out_fd, handle, sizeof(handle), 1);
    while (rc == NULL) {
        OK(kit_accept(lc, &rc));
        if (rc == NULL) {
            sched_yield();
        }
    }
    OK(kit_close_listen(lc));
    return rc;
}

static void *open_send(int in_fd)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *sc = NULL;

    xfer_all(in_fd, handle, sizeof(handle), 0);
    while (sc == NULL) {
        OK(kit_connect(0, handle, &sc));
        if (sc == NULL) {
            sched_yield();
        }
    }
    return sc;
}

static void wait_req(void *req)
{
    int done = 0;
    while (!done) {
        OK(kit_test(req, &done, NULL));
        if (!done) {
            sched_yield();
        }
    }
}

/* One direction of a stream: iters messages with up to window in flight. */
typedef struct {
    void *comm;
    int is_send;
    char *buf;
    void **reqs;
    long posted, completed;
} stream_t;

/* Post and complete what can be; returns 1 when something moved. */
static int stream_step(stream_t *st, const opts_t *o)
{
    int moved = 0, tag = 0;

    while (st->posted < o->iters && st->posted - st->completed < o->window) {
        void **req = &st->reqs[st->posted % o->window], *data = st->buf;
        size_t cap = o->size;
        *req = NULL;
        if (st->is_send) {
            OK(kit_isend(st->comm, st->buf, o->size, 0, NULL, req));
        } else {
            OK(kit_irecv(st->comm, 1, &data, &cap, &tag, NULL, req));
        }
        if (*req == NULL) {
            break;
        }
        st->posted++;
    }
    while (st->completed < st->posted) {
        int done = 0;
        OK(kit_test(st->reqs[st->completed % o->window], &done, NULL));
        if (!done) {
            break;
        }
        st->completed++;
        moved = 1;
    }
    return moved;
}

/* Drive n streams together until all are done, yielding when nothing moves. */
static void stream(stream_t *st, int n, const opts_t *o)
{
    int left = n;

    for (int i = 0; i < n; i++) {
        st[i].reqs = calloc((size_t)o->window, sizeof(void *));
        st[i].posted = st[i].completed = 0;
    }
    while (left > 0) {
        int moved = 0;
        left = 0;
        for (int i = 0; i < n; i++) {
            if (st[i].completed < o->iters) {
                moved |= stream_step(&st[i], o);
                left += st[i].completed < o->iters;
            }
        }
        if (!moved) {
            sched_yield();
        }
    }
    for (int i = 0; i < n; i++) {
        free(st[i].reqs);
    }
}

static void pingpong(void *sc, void *rc, int first, const opts_t *o, char *buf)
{
    int tag = 0;
    for (long i = 0; i < o->iters; i++) {
        for (int turn = 0; turn < 2; turn++) {
            void *req = NULL, *data = buf;
            size_t cap = o->size;
            if ((turn == 0) == first) {
                while (req == NULL) {
                    OK(kit_isend(sc, buf, o->size, 0, NULL, &req));
                }
            } else {
                while (req == NULL) {
                    OK(kit_irecv(rc, 1, &data, &cap, &tag, NULL, &req));
                }
            }
            wait_req(req);
        }
    }
}

static int run(const opts_t *o, int is_parent, int to_peer, int from_peer)
{
    char *buf = malloc(o->size ? o->size : 1), *buf2 = malloc(o->size ? o->size : 1);
    void *sc = NULL, *rc = NULL;
    int two = o->mode != MODE_BW;
    char sync = 0;
    double t0, t;

    memset(buf, 1, o->size);
    memset(buf2, 2, o->size);
    OK(kit_init());
    /* Parent sends on connection 1 (child listens); lat and bidir add the reverse one. */
    if (is_parent) {
        sc = open_send(from_peer);
        rc = two ? open_recv(to_peer) : NULL;
    } else {
        rc = open_recv(to_peer);
        sc = two ? open_send(from_peer) : NULL;
    }
    /* Start together. */
    xfer_all(to_peer, &sync, 1, 1);
    xfer_all(from_peer, &sync, 1, 0);
    t0 = kit_now();
    if (o->mode == MODE_LAT) {
        pingpong(sc, rc, is_parent, o, buf);
        t = kit_now() - t0;
        if (is_parent) {
            printf("lat size %zu: %.2f us one way (%ld round trips)\n", o->size,
                   1e6 * t / (2.0 * (double)o->iters), o->iters);
        }
    } else {
        stream_t st[2] = {{.comm = rc, .is_send = 0, .buf = buf},
                          {.comm = sc, .is_send = 1, .buf = buf2}};
        if (o->mode == MODE_BW) {
            stream(is_parent ? &st[1] : &st[0], 1, o);
        } else {
            stream(st, 2, o);
        }
        t = kit_now() - t0;
        if (!is_parent) {
            printf("%s size %zu window %d: %.2f GB/s%s (%ld messages in %.3f s)\n",
                   o->mode == MODE_BW ? "bw" : "bidir", o->size, o->window,
                   (double)o->size * (double)o->iters / t / 1e9,
                   o->mode == MODE_BW ? "" : " each way", o->iters, t);
        }
    }
    /* Both sides are done before either closes. */
    xfer_all(to_peer, &sync, 1, 1);
    xfer_all(from_peer, &sync, 1, 0);
    if (sc != NULL) {
        OK(kit_close_send(sc));
    }
    if (rc != NULL) {
        OK(kit_close_recv(rc));
    }
    kit_fini();
    free(buf);
    free(buf2);
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o = {.version = 0, .mode = MODE_BW, .size = 64 << 20, .iters = 0, .window = 4};
    const char *path = NULL;
    int p2c[2], c2p[2], status = 0;
    char err[512];
    pid_t pid;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--version") == 0 && v) {
            o.version = atoi(v), i++;
        } else if (strcmp(a, "--mode") == 0 && v) {
            o.mode = strcmp(v, "lat") == 0     ? MODE_LAT
                     : strcmp(v, "bidir") == 0 ? MODE_BIDIR
                                               : MODE_BW;
            i++;
        } else if (strcmp(a, "--size") == 0 && v) {
            o.size = strtoull(v, NULL, 0), i++;
        } else if (strcmp(a, "--iters") == 0 && v) {
            o.iters = atol(v), i++;
        } else if (strcmp(a, "--window") == 0 && v) {
            o.window = atoi(v), i++;
        } else if (path == NULL && a[0] != '-') {
            path = a;
        } else {
            fprintf(stderr,
                    "usage: %s PLUGIN.so [--version N] [--mode bw|lat|bidir] [--size B] "
                    "[--iters N] [--window W]\n",
                    argv[0]);
            return 2;
        }
    }
    if (path == NULL || o.window < 1) {
        return 2;
    }
    if (o.iters <= 0) {
        o.iters = o.mode == MODE_LAT ? 20000 : (long)((4ULL << 30) / (o.size ? o.size : 1));
        o.iters = o.iters < 10 ? 10 : o.iters > 200000 ? 200000 : o.iters;
    }
    if (kit_load(path, o.version, err, sizeof(err)) != 0) {
        fprintf(stderr, "net_plugin_bench: %s\n", err);
        return 1;
    }
    if (pipe(p2c) != 0 || pipe(c2p) != 0) {
        perror("pipe");
        return 1;
    }
    pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        return run(&o, 0, c2p[1], p2c[0]);
    }
    run(&o, 1, p2c[1], c2p[0]);
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
