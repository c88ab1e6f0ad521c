/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal interfaces of the socket net plugin (libnccl-net-socket.so).
 *
 * netsock_dev.c     network interfaces (devices) and address helpers
 * netsock_conn.c    listen / connect / accept and the connection handshake
 * netsock_data.c    communicators, requests, isend / irecv / test on the control socket
 * netsock_thread.c  helper threads moving message chunks over the data sockets
 * netsock_plugin.c  the exported ncclNetPlugin_v10/v11/v12 tables
 *
 * Threading: a communicator is driven by one thread at a time (NCCL's proxy thread);
 * its helper threads only touch their own data sockets and task rings.
 */
#ifndef NETSOCK_H_
#define NETSOCK_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "br_tls.h"
#include "netsock_handle.h"
#include "plugin_api/net/net.h"

#define NETSOCK_MAX_DEVS 32
#define NETSOCK_MAX_REQS NCCL_NET_MAX_REQUESTS /* outstanding requests per comm */
#define NETSOCK_RING 64                        /* request ring, a power of two > NETSOCK_MAX_REQS */
#define NETSOCK_TASKS 64                       /* task ring of one data socket, a power of two */
#define NETSOCK_STAGE 8192                     /* control-socket receive staging buffer */
#define NETSOCK_ADDR_STRLEN 64

/* One network interface. */
typedef struct {
    char name[64];
    char *pci_path;      /* realpath of /sys/class/net/<if>/device, or NULL */
    int speed;           /* Mbps */
    netsock_addr_t addr; /* address to listen on (port 0) */
} netsock_dev_t;

/* Discover the interfaces once per process (NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY).
 * Thread-safe; later calls return the first result. Fails when none matches. */
ncclResult_t netsock_dev_init(void);
/* Number of devices found by netsock_dev_init (0 before). */
int netsock_dev_count(void);
/* Device dev, or NULL when out of range. */
const netsock_dev_t *netsock_dev_get(int dev);
/* "1.2.3.4:port" or "[::1]:port" into buf. */
void netsock_addr_str(const struct sockaddr *sa, char *buf, size_t len);
/* socklen_t-sized length of an address of its family. */
unsigned netsock_addr_len(const netsock_addr_t *addr);

struct netsock_comm;

/* One posted isend or irecv. */
typedef struct netsock_req {
    struct netsock_comm *comm;
    uint64_t seq; /* message number on this comm (posting order) */
    char *data;
    size_t size;   /* send: message size; recv: buffer capacity */
    size_t nbytes; /* bytes of the message (recv: from its header) */
    size_t off;    /* control-socket progress: header and inline bytes moved */
    int in_use;
    int have_hdr;          /* recv: the header was read */
    int is_inline;         /* the data travels on the control socket */
    atomic_int chunks;     /* chunks still owned by helper threads */
    netsock_msg_hdr_t hdr; /* send: the encoded header */
} netsock_req_t;

/* A piece of one message on one data socket. */
typedef struct {
    netsock_req_t *req;
    char *data;
    size_t len;
    size_t off; /* owned by the helper thread */
} netsock_task_t;

/* A data socket: a single-producer (comm thread), single-consumer (helper) task ring. */
typedef struct {
    int fd;
    int owner;        /* index of the helper thread serving this socket */
    atomic_uint head; /* next task the helper works on; written by the helper */
    atomic_uint tail; /* next free task slot; written by the comm thread */
    netsock_task_t tasks[NETSOCK_TASKS];
} netsock_sock_t;

/* A helper thread serving data sockets [first, first + count). */
typedef struct {
    struct netsock_comm *comm;
    pthread_t tid;
    int started;
    int efd; /* eventfd: new work or stop */
    int first, count;
    atomic_int waiting; /* 1 while it may block in poll; a producer then signals efd */
    atomic_int stop;
} netsock_thread_t;

/* A send or receive communicator. */
typedef struct netsock_comm {
    uint32_t magic;
    int is_send;
    int ctrl_fd;
    int nsocks, nthreads;
    size_t min_chunk, inline_max;
    char peer[NETSOCK_ADDR_STRLEN]; /* remote address, for logs */
    netsock_sock_t *socks;
    netsock_thread_t *threads;
    uint64_t post_seq;                 /* next message number to post */
    uint64_t ctrl_seq;                 /* oldest message whose control-socket part is unfinished */
    uint64_t done_seq;                 /* messages [0, done_seq) are complete, in order */
    uint32_t next_sock;                /* data socket of the next message's first chunk */
    netsock_req_t *ring[NETSOCK_RING]; /* posted requests by seq % NETSOCK_RING */
    int nfree;
    int free_idx[NETSOCK_MAX_REQS];
    netsock_req_t reqs[NETSOCK_MAX_REQS];
    size_t stage_head, stage_tail; /* recv: unread bytes of stage */
    char stage[NETSOCK_STAGE];
    atomic_int err_claimed; /* the first failure claims err_msg */
    atomic_int err;         /* ncclResult_t of the first failure */
    int err_logged;
    char err_msg[256];
} netsock_comm_t;

/* Build a communicator from connected sockets (fds[0] control, fds[1..nsocks] data) and
 * start its helper threads. Takes ownership of the fds, also on failure. */
ncclResult_t netsock_comm_create(int is_send, const netsock_handle_t *h, int *fds,
                                 netsock_comm_t **comm_p);
/* Stop the helpers, close the sockets, free. Safe with requests pending. */
ncclResult_t netsock_comm_close(netsock_comm_t *comm);
/* Record the first failure of a comm (any thread); the message is logged once by test. */
void netsock_comm_fail(netsock_comm_t *comm, ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Post a send of size bytes (0 allowed); *request NULL means "all requests in flight,
 * retry later". Tries to send at once; never blocks. */
ncclResult_t netsock_isend(void *send_comm, void *data, size_t size, void **request);
/* Post a receive into one buffer of capacity sizes[0]; n must be 1 (maxRecvs). Same
 * NULL-request rule as isend. */
ncclResult_t netsock_irecv(void *recv_comm, int n, void **data, size_t *sizes, void **request);
/* Progress the request's comm without blocking; *done = 1 once it and every older request
 * of the comm completed, with sizes[0] (if not NULL) the message size. A done request is
 * released. A failed comm returns its error (ncclRemoteError when the peer is gone). */
ncclResult_t netsock_test(void *request, int *done, int *sizes);

/* Split a message of size bytes into chunks for the data sockets: returns the chunk
 * count and the chunk length (the last chunk may be shorter). */
int netsock_chunk_split(const netsock_comm_t *comm, size_t size, size_t *chunk_p);

/* Start / stop the helper threads of comm. */
ncclResult_t netsock_threads_start(netsock_comm_t *comm);
void netsock_threads_stop(netsock_comm_t *comm);
/* Queue a chunk on data socket s (the ring always has room) and wake its helper. */
void netsock_task_push(netsock_comm_t *comm, int s, netsock_req_t *req, char *data, size_t len);

/* Listen on device dev and write the handle (NCCL_NET_HANDLE_MAXSIZE bytes). */
ncclResult_t netsock_listen(int dev, void *handle, void **listen_comm);
/* Connect to a peer's handle; success with *send_comm NULL means "call again with the same
 * handle buffer". Garbage handles and refused handshakes fail. Never blocks. */
ncclResult_t netsock_connect(int dev, void *handle, void **send_comm);
/* Accept the next connection presenting the listener's secret; *recv_comm NULL means
 * "call again". Strangers are dropped and logged. Never blocks. */
ncclResult_t netsock_accept(void *listen_comm, void **recv_comm);
/* Close a listener and every connection it has not handed out yet. */
ncclResult_t netsock_close_listen(void *listen_comm);
/* Set the options every socket of a connection gets (non-blocking, TCP_NODELAY, buffers). */
ncclResult_t netsock_socket_setup(int fd);

/* The plugin's TLS entry (BR_TLS_PLUGIN_SYMBOL, br_tls.h): exported beside the tables. */
int braidNetTlsConfigure(const br_tls_config_t *cfg, size_t size, char *err, size_t errlen);

/* Close a socket of the plugin's, with its TLS session when it has one. */
static inline void netsock_fd_close(int fd)
{
    br_tls_end(fd);
    (void)close(fd);
}

#endif /* NETSOCK_H_ */
