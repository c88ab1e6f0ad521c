/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TLS 1.3 on Braid's sockets (br_tls.h). One SSL_CTX per configuration, TLS 1.3 only, no
 * session tickets (every connection is a full handshake with ECDHE, so each has its own
 * keys). A pre-shared key of any length is hashed with SHA-256 into the external PSK both
 * ends offer under one identity; a peer with another key fails the binder check, one
 * without TLS sends bytes that are no TLS record. Sessions are found by descriptor in a
 * table of atomic pointers. The socket BIO here sends with MSG_NOSIGNAL (a peer that
 * went away must not kill the process with SIGPIPE, as OpenSSL's own socket BIO would).
 */
#include "br_tls.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#define MAX_FD 65536
#define PSK_ID "braid-psk-v1"

static pthread_mutex_t cfg_lock = PTHREAD_MUTEX_INITIALIZER;
static br_tls_config_t cfg;       /* under cfg_lock */
static SSL_CTX *cur_ctx;          /* under cfg_lock; NULL: off */
static unsigned char psk_key[32]; /* SHA-256 of cfg.psk, read by the PSK callbacks */
static _Atomic int cur_mode;      /* cfg.mode, read without the lock */
static BIO_METHOD *bio_meth;      /* made once */
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;
static _Atomic(SSL *) sessions[MAX_FD];

/* TLS_AES_128_GCM_SHA256, the cipher suite the PSK is bound to. */
static const unsigned char tls13_aes128[2] = {0x13, 0x01};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the socket BIO ---- */

static int bio_write(BIO *b, const char *buf, int len)
{
    int fd = (int)(intptr_t)BIO_get_data(b);
    ssize_t n = send(fd, buf, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
    BIO_clear_retry_flags(b);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        BIO_set_retry_write(b);
    }
    return (int)n;
}

static int bio_read(BIO *b, char *buf, int len)
{
    int fd = (int)(intptr_t)BIO_get_data(b);
    ssize_t n = recv(fd, buf, (size_t)len, MSG_DONTWAIT);
    BIO_clear_retry_flags(b);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        BIO_set_retry_read(b);
    }
    return (int)n;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b;
    (void)num;
    (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0; /* writes go straight to the socket */
}

static void bio_meth_make(void)
{
    bio_meth = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "braid socket");
    if (bio_meth != NULL) {
        BIO_meth_set_write(bio_meth, bio_write);
        BIO_meth_set_read(bio_meth, bio_read);
        BIO_meth_set_ctrl(bio_meth, bio_ctrl);
    }
}

/* When the library or the plugin holding this copy goes (exit, dlclose): what lives as
 * long as it does. Sessions still open belong to sockets nobody closed. */
__attribute__((destructor)) static void tls_unload(void)
{
    SSL_CTX_free(cur_ctx);
    cur_ctx = NULL;
    BIO_meth_free(bio_meth);
    bio_meth = NULL;
}

/* ---- the pre-shared key ---- */

static SSL_SESSION *psk_session(const SSL_CIPHER *cipher)
{
    SSL_SESSION *s = SSL_SESSION_new();
    if (s == NULL || !SSL_SESSION_set1_master_key(s, psk_key, sizeof(psk_key)) ||
        !SSL_SESSION_set_cipher(s, cipher) ||
        !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
        SSL_SESSION_free(s);
        return NULL;
    }
    return s;
}

/* Client: offer the PSK (for the hash of the suite it is bound to). */
static int psk_use(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
                   SSL_SESSION **sess)
{
    const SSL_CIPHER *c = SSL_CIPHER_find(ssl, tls13_aes128);
    *sess = NULL;
    *id = NULL;
    *idlen = 0;
    if (c == NULL) {
        return 0;
    }
    if (md != NULL && md != SSL_CIPHER_get_handshake_digest(c)) {
        return 1; /* a HelloRetryRequest chose another hash: no PSK for it */
    }
    *sess = psk_session(c);
    *id = (const unsigned char *)PSK_ID;
    *idlen = strlen(PSK_ID);
    return *sess != NULL;
}

/* Server: the PSK of the identity the client offered, if it is ours. */
static int psk_find(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess)
{
    const SSL_CIPHER *c = SSL_CIPHER_find(ssl, tls13_aes128);
    *sess = NULL;
    if (idlen != strlen(PSK_ID) || memcmp(id, PSK_ID, idlen) != 0) {
        return 1; /* not ours: the handshake fails for want of a key */
    }
    if (c == NULL) {
        return 0;
    }
    *sess = psk_session(c);
    return *sess != NULL;
}

/* ---- configuration ---- */

static void ssl_reason(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    if (e != 0) {
        ERR_error_string_n(e, buf, len);
    } else {
        snprintf(buf, len, "no reason given by OpenSSL");
    }
    ERR_clear_error();
}

static SSL_CTX *ctx_make(const br_tls_config_t *c, char *err, size_t errlen)
{
    char why[256];
    SSL_CTX *ctx = SSL_CTX_new(TLS_method());
    if (ctx == NULL) {
        ssl_reason(why, sizeof(why));
        snprintf(err, errlen, "cannot make a TLS context: %s", why);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_num_tickets(ctx, 0);
    /* Peers close without close_notify (an aborted rank): an end, not an attack on the
     * length of the data, since every message carries its own size. */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (c->mode == BR_TLS_PSK) {
        /* A PSK is bound to one hash: suites of SHA-256 only, or a server preferring
         * AES-256 (SHA-384) would skip the PSK and ask for a certificate. */
        SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256");
        SSL_CTX_set_psk_use_session_callback(ctx, psk_use);
        SSL_CTX_set_psk_find_session_callback(ctx, psk_find);
        return ctx;
    }
    const char *what = "certificate";
    int ok = SSL_CTX_use_certificate_chain_file(ctx, c->cert) == 1;
    if (ok) {
        what = "private key";
        ok = SSL_CTX_use_PrivateKey_file(ctx, c->key, SSL_FILETYPE_PEM) == 1 &&
             SSL_CTX_check_private_key(ctx) == 1;
    }
    if (ok) {
        what = "certificate authority";
        ok = SSL_CTX_load_verify_locations(ctx, c->ca, NULL) == 1;
    }
    if (!ok) {
        ssl_reason(why, sizeof(why));
        snprintf(err, errlen, "cannot load the TLS %s (%s, %s, %s): %s", what, c->cert, c->key,
                 c->ca, why);
        SSL_CTX_free(ctx);
        return NULL;
    }
    /* Both ends present a certificate, and each must chain to the authority. */
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    return ctx;
}

int br_tls_configure(const br_tls_config_t *c, char *err, size_t errlen)
{
    SSL_CTX *ctx = NULL, *old;

    if (c->mode == BR_TLS_PSK && (c->psk_len < BR_TLS_PSK_MIN || c->psk_len > sizeof(c->psk))) {
        snprintf(err, errlen, "a TLS pre-shared key has %d to %zu bytes, not %zu", BR_TLS_PSK_MIN,
                 sizeof(c->psk), c->psk_len);
        return -1;
    }
    pthread_once(&bio_once, bio_meth_make);
    if (bio_meth == NULL) {
        snprintf(err, errlen, "cannot make OpenSSL's socket method");
        return -1;
    }
    pthread_mutex_lock(&cfg_lock);
    if (c->mode == BR_TLS_PSK) {
        EVP_Digest(c->psk, c->psk_len, psk_key, NULL, EVP_sha256(), NULL);
    }
    if (c->mode != BR_TLS_OFF && (ctx = ctx_make(c, err, errlen)) == NULL) {
        pthread_mutex_unlock(&cfg_lock);
        return -1;
    }
    old = cur_ctx;
    cur_ctx = ctx;
    cfg = *c;
    atomic_store(&cur_mode, c->mode);
    pthread_mutex_unlock(&cfg_lock);
    SSL_CTX_free(old); /* sessions made with it hold their own reference */
    return 0;
}

int br_tls_mode(void)
{
    return atomic_load(&cur_mode);
}

void br_tls_config_get(br_tls_config_t *c)
{
    pthread_mutex_lock(&cfg_lock);
    *c = cfg;
    pthread_mutex_unlock(&cfg_lock);
}

/* ---- sessions ---- */

static SSL *session_of(int fd)
{
    return fd >= 0 && fd < MAX_FD ? atomic_load_explicit(&sessions[fd], memory_order_acquire)
                                  : NULL;
}

int br_tls_is_on(int fd)
{
    return session_of(fd) != NULL;
}

void br_tls_end(int fd)
{
    SSL *ssl = fd >= 0 && fd < MAX_FD ? atomic_exchange(&sessions[fd], NULL) : NULL;
    if (ssl != NULL) {
        (void)SSL_shutdown(ssl); /* close_notify when the socket takes it; never waits */
        ERR_clear_error();
        SSL_free(ssl);
    }
}

/* Why the handshake failed, as the peer's alert or OpenSSL's reason says. */
static void handshake_why(SSL *ssl, int ret, char *err, size_t errlen)
{
    char why[256];
    int e = SSL_get_error(ssl, ret);
    long v = SSL_get_verify_result(ssl);
    if (v != X509_V_OK) {
        snprintf(err, errlen, "the peer's certificate is refused: %s",
                 X509_verify_cert_error_string(v));
        ERR_clear_error();
        return;
    }
    if ((e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN) && ERR_peek_last_error() == 0) {
        snprintf(err, errlen, "the peer closed the connection during the TLS handshake%s",
                 errno != 0 && ret < 0 ? " (reset)" : "");
        return;
    }
    ssl_reason(why, sizeof(why));
    snprintf(err, errlen, "TLS handshake failed: %s", why);
}

int br_tls_begin(int fd, int server, char *err, size_t errlen)
{
    SSL *ssl;
    BIO *bio;

    if (fd < 0 || fd >= MAX_FD) {
        snprintf(err, errlen, "descriptor %d is beyond the %d TLS can track", fd, MAX_FD);
        return -1;
    }
    br_tls_end(fd); /* a session whose descriptor was closed without br_tls_end */
    pthread_mutex_lock(&cfg_lock);
    ssl = cur_ctx != NULL ? SSL_new(cur_ctx) : NULL;
    pthread_mutex_unlock(&cfg_lock);
    bio = ssl != NULL ? BIO_new(bio_meth) : NULL;
    if (bio == NULL) {
        SSL_free(ssl);
        snprintf(err, errlen, "cannot make a TLS session (out of memory, or TLS turned off)");
        return -1;
    }
    BIO_set_data(bio, (void *)(intptr_t)fd);
    BIO_set_init(bio, 1);
    SSL_set_bio(ssl, bio, bio);
    if (server) {
        SSL_set_accept_state(ssl);
    } else {
        SSL_set_connect_state(ssl);
    }
    atomic_store_explicit(&sessions[fd], ssl, memory_order_release);
    return 0;
}

int br_tls_step(int fd, short *events_p, char *err, size_t errlen)
{
    SSL *ssl = session_of(fd);
    if (ssl == NULL) {
        snprintf(err, errlen, "no TLS session on descriptor %d", fd);
        return -1;
    }
    ERR_clear_error();
    errno = 0;
    int ret = SSL_do_handshake(ssl);
    if (ret == 1) {
        return 1;
    }
    int e = SSL_get_error(ssl, ret);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        *events_p = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        return 0;
    }
    handshake_why(ssl, ret, err, errlen);
    if (SSL_is_server(ssl)) {
        /* A peer without TLS reads a fatal alert in clear (protocol_version) where it
         * expected its answer, and can say why it was refused. OpenSSL may have sent one
         * already; a second one before the close changes nothing. */
        static const unsigned char alert[7] = {0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46};
        (void)!send(fd, alert, sizeof(alert), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    br_tls_end(fd);
    return -1;
}

int br_tls_start(int fd, int server, uint64_t deadline_ns, char *err, size_t errlen)
{
    if (atomic_load(&cur_mode) == BR_TLS_OFF) {
        return 0;
    }
    if (br_tls_begin(fd, server, err, errlen) != 0) {
        return -1;
    }
    for (;;) {
        short events = 0;
        int r = br_tls_step(fd, &events, err, errlen);
        if (r != 0) {
            return r > 0 ? 0 : -1;
        }
        uint64_t now = now_ns();
        if (now >= deadline_ns) {
            snprintf(err, errlen, "the peer did not answer the TLS handshake in time");
            br_tls_end(fd);
            return -1;
        }
        struct pollfd p = {.fd = fd, .events = events};
        uint64_t left_ms = (deadline_ns - now) / 1000000ull + 1;
        (void)poll(&p, 1, left_ms > 1000 ? 1000 : (int)left_ms);
    }
}

/* One SSL_write or SSL_read on fd's session as send/recv would answer: bytes, 0 at the
 * peer's end (reads), or -1 with errno (EAGAIN, else the socket's error or ECONNRESET). */
static ssize_t tls_io(SSL *ssl, int write, void *buf, size_t len)
{
    int cap = len > INT32_MAX ? INT32_MAX : (int)len;
    if (len == 0) {
        return 0;
    }
    ERR_clear_error();
    int n = write ? SSL_write(ssl, buf, cap) : SSL_read(ssl, buf, cap);
    if (n > 0) {
        return n;
    }
    int e = SSL_get_error(ssl, n);
    if (!write && (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && n == 0))) {
        ERR_clear_error();
        return 0; /* the peer's end */
    }
    errno = e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ ? EAGAIN
            : e == SSL_ERROR_SYSCALL && errno != 0                ? errno
                                                                  : ECONNRESET;
    ERR_clear_error();
    return -1;
}

ssize_t br_tls_send(int fd, const void *buf, size_t len)
{
    SSL *ssl = session_of(fd);
    return ssl == NULL ? send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                       : tls_io(ssl, 1, (void *)(uintptr_t)buf, len);
}

ssize_t br_tls_recv(int fd, void *buf, size_t len)
{
    SSL *ssl = session_of(fd);
    return ssl == NULL ? recv(fd, buf, len, MSG_DONTWAIT) : tls_io(ssl, 0, buf, len);
}

int br_tls_pending(int fd)
{
    SSL *ssl = session_of(fd);
    return ssl != NULL ? SSL_pending(ssl) : 0;
}
