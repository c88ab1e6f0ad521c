/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Socket helpers for the bootstrap (and anything else that needs plain TCP): address
 * parsing and printing, interface selection (NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY),
 * listening on an ephemeral port, and connect / accept / send_all / recv_all, each bounded
 * by an absolute deadline on the br_time_ns() clock. Every socket is non-blocking and
 * close-on-exec; waits use poll(); sends use MSG_NOSIGNAL; EINTR is retried.
 *
 * Errors: a local failure (a syscall that should not fail) is logged with BR_WARN and
 * returns ncclSystemError. A failure that depends on the remote side (refused, reset,
 * closed) returns ncclRemoteError, and a wait that passed its deadline ncclTimeout (errno
 * ETIMEDOUT), without logging, with errno set to ECONNRESET, ECONNREFUSED, ...: only the
 * caller knows which peer it was talking to, so the caller writes the message.
 */
#ifndef BR_UTIL_SOCKET_H_
#define BR_UTIL_SOCKET_H_

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "nccl.h"

/* An IPv4 or IPv6 socket address: 28 bytes, the size of sockaddr_in6. */
typedef union {
    struct sockaddr sa;
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;
} br_socket_addr_t;

/* Room for any address as text: "[v6 address%scope]:port". */
#define BR_SOCKET_ADDR_STRLEN 80
/* Room for an interface name (IFNAMSIZ). */
#define BR_SOCKET_IFNAME_LEN 16

/* Deadline meaning "never". */
#define BR_SOCKET_NO_DEADLINE UINT64_MAX

/* Is this an AF_INET or AF_INET6 address with a non-zero port? */
int br_socket_addr_is_valid(const br_socket_addr_t *addr);
/* Length to pass to bind/connect for this address's family. */
socklen_t br_socket_addr_len(const br_socket_addr_t *addr);
/* Port in host byte order (0 for an unknown family). */
uint16_t br_socket_addr_port(const br_socket_addr_t *addr);
/* Do two addresses name the same host and port? */
int br_socket_addr_equal(const br_socket_addr_t *a, const br_socket_addr_t *b);

/* Print an address as "1.2.3.4:5678" or "[::1]:5678" into buf; returns buf. */
const char *br_socket_addr_str(const br_socket_addr_t *addr, char *buf, size_t len);

/* Parse "host:port", "1.2.3.4:port", "[v6]:port" (or a bare v6 address whose last colon
 * starts the port). Host names are resolved, preferring NCCL_SOCKET_FAMILY when set. Logs
 * and returns ncclInvalidArgument when the text cannot be used. */
ncclResult_t br_socket_addr_parse(const char *text, br_socket_addr_t *addr_p);

/* The interface bootstrap traffic should use, chosen once per process and logged at INFO:
 * NCCL_SOCKET_IFNAME when set (comma list of prefixes, ^ to exclude, = for exact names),
 * else a non-loopback, non-docker, non-virbr interface, else docker or virbr, else lo.
 * When remote is not NULL and NCCL_SOCKET_IFNAME is unset, an interface on the same subnet
 * as remote is preferred (not cached). NCCL_SOCKET_FAMILY (AF_INET, AF_INET6, 4 or 6)
 * restricts the family. The returned address has port 0. Fails with a WARN when no
 * interface matches. ifname may be NULL. */
ncclResult_t br_socket_iface_pick(const br_socket_addr_t *remote, char *ifname, size_t len,
                                  br_socket_addr_t *addr_p);

/* Listen on addr (port 0: an ephemeral port). When the address itself cannot be bound
 * (EADDRNOTAVAIL: a name that resolves elsewhere) the wildcard address of the same family
 * and port is used instead. The socket is non-blocking; bound_p gets the address with the
 * real port. */
ncclResult_t br_socket_listen(const br_socket_addr_t *addr, int *fd_p, br_socket_addr_t *bound_p);

/* Connect to remote, retrying refused or unreachable attempts (a listener that is not up
 * yet) with growing pauses until deadline_ns. The socket is non-blocking with TCP_NODELAY. */
ncclResult_t br_socket_connect(const br_socket_addr_t *remote, uint64_t deadline_ns, int *fd_p);
/* The same for a listener that should be up already: refusals in a row for refused_ns
 * mean its owner is gone (errno ECONNREFUSED), whatever deadline_ns allows. */
ncclResult_t br_socket_connect_up(const br_socket_addr_t *remote, uint64_t deadline_ns,
                                  uint64_t refused_ns, int *fd_p);
/* One connect attempt, bounded by deadline_ns: for a listener known to be up, where a
 * refusal means its owner is gone. */
ncclResult_t br_socket_connect_once(const br_socket_addr_t *remote, uint64_t deadline_ns,
                                    int *fd_p);

/* Accept one connection on a listening socket by deadline_ns; peer_p (may be NULL) gets
 * the remote address. The new socket is non-blocking with TCP_NODELAY. */
ncclResult_t br_socket_accept(int listen_fd, uint64_t deadline_ns, int *fd_p,
                              br_socket_addr_t *peer_p);

/* Write all len bytes by deadline_ns. */
ncclResult_t br_socket_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns);
/* Read exactly len bytes by deadline_ns; a connection closed first is ECONNRESET. */
ncclResult_t br_socket_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns);

/* Non-blocking read of up to len bytes: *got_p gets the count (0 when nothing is ready).
 * A connection closed by the peer returns ncclRemoteError with errno ECONNRESET. */
ncclResult_t br_socket_recv_some(int fd, void *buf, size_t len, size_t *got_p);

/* Close fd when it is not negative, then set it to -1. */
void br_socket_close(int *fd);

/*
 * TLS on every connection these functions make and accept (ncclSetEncryption): the layer
 * that configures it (core/comm/comm_tls.c, over plugins/common/br_tls.h) installs its
 * functions here; NULL, the default, is plain TCP. A connection is encrypted from its first
 * byte: connect and accept finish the handshake before they return, and a peer that fails
 * it (no TLS, another key or certificate authority) is refused with a WARN saying so.
 */
typedef struct {
    int (*start)(int fd, int server, uint64_t deadline_ns, char *err, size_t errlen);
    ssize_t (*send)(int fd, const void *buf, size_t len); /* as send(MSG_DONTWAIT) */
    ssize_t (*recv)(int fd, void *buf, size_t len);       /* as recv(MSG_DONTWAIT) */
    void (*end)(int fd);
    int (*config)(void *cfg, size_t size); /* copy the br_tls_config_t in force */
    int (*begin)(int fd, int server, char *err, size_t errlen);
    int (*step)(int fd, short *events_p, char *err, size_t errlen);
} br_socket_tls_t;
void br_socket_set_tls(const br_socket_tls_t *tls);
/* The functions installed, or NULL. */
const br_socket_tls_t *br_socket_tls(void);
/* TLS (as server or client) on a socket made some other way (accept4 of a side link);
 * bounded by deadline_ns; peer names the other end for the WARN. */
ncclResult_t br_socket_secure(int fd, int server, uint64_t deadline_ns, const char *peer);
/* The same without blocking, for setup loops that poll: begin returns 0 when TLS is off
 * (nothing to do), 1 when the handshake started, -1 on failure; step then returns 1 once
 * it is done, 0 to call again, -1 on failure (a WARN naming peer, as above). */
int br_socket_secure_begin(int fd, int server, const char *peer);
int br_socket_secure_step(int fd, int server, const char *peer);
/* One connect attempt (as br_socket_connect_once) without TLS: the caller secures the
 * socket itself with the calls above. */
ncclResult_t br_socket_connect_plain(const br_socket_addr_t *remote, uint64_t deadline_ns,
                                     int *fd_p);
/* One non-blocking send / recv through TLS when the socket has it: as send(MSG_DONTWAIT |
 * MSG_NOSIGNAL) and recv(MSG_DONTWAIT). */
ssize_t br_socket_send_nb(int fd, const void *buf, size_t len);
ssize_t br_socket_recv_nb(int fd, void *buf, size_t len);

/* Milliseconds from now until deadline_ns, for poll(): 0 when past, -1 for no deadline,
 * capped at cap_ms when cap_ms >= 0. */
int br_socket_poll_ms(uint64_t deadline_ns, int cap_ms);

#endif /* BR_UTIL_SOCKET_H_ */
