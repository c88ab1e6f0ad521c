/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TLS 1.3 on Braid's own TCP connections (ncclSetEncryption, NCCL 2.32), with OpenSSL 3.
 * Shared by the core (bootstrap, failover links) and the socket plugin, each with its own
 * copy of the state: the process's configuration (a pre-shared key, or a certificate, its
 * key and the certificate authority every peer's certificate must come from) and one TLS
 * session per connected socket, found by its descriptor. No logging here: every call that
 * can fail writes why into the caller's buffer, and the caller logs it with its own
 * context (rank, peer, operation).
 * Threading: configuration under a lock; a session is used by one thread at a time (each
 * of Braid's connections has one reader and one writer, never both at once on one side).
 */
#ifndef BR_TLS_H_
#define BR_TLS_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define BR_TLS_PATH_MAX 512
#define BR_TLS_PSK_MIN 32 /* bytes of a pre-shared key, at least (as ncclSetEncryption) */

typedef enum { BR_TLS_OFF = 0, BR_TLS_PSK = 1, BR_TLS_CERT = 2 } br_tls_mode_t;

/* What a process encrypts with. */
typedef struct {
    int mode;               /* br_tls_mode_t */
    unsigned char psk[256]; /* BR_TLS_PSK: the key (hashed to the session's 32 bytes) */
    size_t psk_len;
    char cert[BR_TLS_PATH_MAX]; /* BR_TLS_CERT: PEM files: this process's certificate, */
    char key[BR_TLS_PATH_MAX];  /* its private key, */
    char ca[BR_TLS_PATH_MAX];   /* and the authority a peer's certificate must chain to */
} br_tls_config_t;

/* Make cfg the process's configuration for connections set up from now on (BR_TLS_OFF:
 * none). Returns 0, or -1 with why in err (a file that does not load, a short key). */
int br_tls_configure(const br_tls_config_t *cfg, char *err, size_t errlen)
    __attribute__((visibility("hidden")));
/* The mode in force (br_tls_mode_t). */
int br_tls_mode(void) __attribute__((visibility("hidden")));
/* A copy of the configuration in force. */
void br_tls_config_get(br_tls_config_t *cfg) __attribute__((visibility("hidden")));

/*
 * Start TLS on connected socket fd (nonblocking) as the client (server 0) or the server,
 * and finish the handshake before deadline_ns (CLOCK_MONOTONIC): 0, or -1 with why in err
 * (the peer's alert or OpenSSL's reason, and what it usually means). Nothing when TLS is
 * off (returns 0). A session left behind by a descriptor closed without br_tls_end is
 * dropped first.
 */
int br_tls_start(int fd, int server, uint64_t deadline_ns, char *err, size_t errlen)
    __attribute__((visibility("hidden")));
/* The same without blocking, for event loops: begin makes fd's session (0, or -1 with
 * why), then step moves the handshake: 1 done, 0 again once poll says *events_p, -1 failed
 * (why in err; the session is gone). */
int br_tls_begin(int fd, int server, char *err, size_t errlen)
    __attribute__((visibility("hidden")));
int br_tls_step(int fd, short *events_p, char *err, size_t errlen)
    __attribute__((visibility("hidden")));
/* The plugin entry through which Braid's core hands its configuration to a net plugin
 * that encrypts its own sockets (plugins/net-socket): size is sizeof(br_tls_config_t);
 * 0, or -1 with why in err. */
#define BR_TLS_PLUGIN_SYMBOL "braidNetTlsConfigure"
typedef int (*br_tls_plugin_fn_t)(const br_tls_config_t *cfg, size_t size, char *err,
                                  size_t errlen);
/* Does fd carry a TLS session? */
int br_tls_is_on(int fd) __attribute__((visibility("hidden")));
/* send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) and recv(fd, buf, len, MSG_DONTWAIT),
 * through fd's session when it has one: bytes moved, 0 at the peer's end (recv), or -1
 * with errno (EAGAIN: try again when poll allows; ECONNRESET for a TLS failure). */
ssize_t br_tls_send(int fd, const void *buf, size_t len) __attribute__((visibility("hidden")));
ssize_t br_tls_recv(int fd, void *buf, size_t len) __attribute__((visibility("hidden")));
/* Bytes already decrypted and waiting in fd's session (poll does not see them). */
int br_tls_pending(int fd) __attribute__((visibility("hidden")));
/* Free fd's session (call before closing fd; nothing if it has none). */
void br_tls_end(int fd) __attribute__((visibility("hidden")));

#endif /* BR_TLS_H_ */
