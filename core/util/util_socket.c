/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plain TCP for the bootstrap: address text <-> br_socket_addr_t, the choice of interface
 * (NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY, cached once per process), and deadline-bounded
 * listen / connect / accept / send / recv on non-blocking sockets, waiting in poll().
 * Nothing here keeps state besides the cached interface choice (under a mutex); every
 * function may be called from any thread.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "util.h"
#include "util_socket.h"

/* Longest pause between two connect attempts to a listener that is not up yet. */
#define CONNECT_PAUSE_MAX_MS 100

int br_socket_addr_is_valid(const br_socket_addr_t *addr)
{
    if (addr->sa.sa_family != AF_INET && addr->sa.sa_family != AF_INET6) {
        return 0;
    }
    return br_socket_addr_port(addr) != 0;
}

socklen_t br_socket_addr_len(const br_socket_addr_t *addr)
{
    return addr->sa.sa_family == AF_INET6 ? (socklen_t)sizeof(struct sockaddr_in6)
                                          : (socklen_t)sizeof(struct sockaddr_in);
}

uint16_t br_socket_addr_port(const br_socket_addr_t *addr)
{
    if (addr->sa.sa_family == AF_INET) {
        return ntohs(addr->sin.sin_port);
    }
    if (addr->sa.sa_family == AF_INET6) {
        return ntohs(addr->sin6.sin6_port);
    }
    return 0;
}

int br_socket_addr_equal(const br_socket_addr_t *a, const br_socket_addr_t *b)
{
    if (a->sa.sa_family != b->sa.sa_family || br_socket_addr_port(a) != br_socket_addr_port(b)) {
        return 0;
    }
    if (a->sa.sa_family == AF_INET) {
        return a->sin.sin_addr.s_addr == b->sin.sin_addr.s_addr;
    }
    if (a->sa.sa_family == AF_INET6) {
        return memcmp(&a->sin6.sin6_addr, &b->sin6.sin6_addr, sizeof(struct in6_addr)) == 0;
    }
    return 0;
}

/* The host part of an address alone, without brackets or port. */
static const char *host_str(const br_socket_addr_t *addr, char *buf, size_t len)
{
    const void *src = addr->sa.sa_family == AF_INET6 ? (const void *)&addr->sin6.sin6_addr
                                                     : (const void *)&addr->sin.sin_addr;
    if (len > 0) {
        buf[0] = '\0';
    }
    if (inet_ntop(addr->sa.sa_family, src, buf, (socklen_t)len) == NULL) {
        snprintf(buf, len, "?");
    }
    return buf;
}

const char *br_socket_addr_str(const br_socket_addr_t *addr, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN];

    if (addr->sa.sa_family == AF_INET) {
        snprintf(buf, len, "%s:%u", host_str(addr, host, sizeof(host)),
                 (unsigned)br_socket_addr_port(addr));
    } else if (addr->sa.sa_family == AF_INET6) {
        snprintf(buf, len, "[%s]:%u", host_str(addr, host, sizeof(host)),
                 (unsigned)br_socket_addr_port(addr));
    } else {
        snprintf(buf, len, "<family %d>", (int)addr->sa.sa_family);
    }
    return buf;
}

/* NCCL_SOCKET_FAMILY as an address family; AF_UNSPEC when unset or not understood. */
static int family_param(void)
{
    const char *s = BR_PARAM_STR(SOCKET_FAMILY);

    if (s == NULL) {
        return AF_UNSPEC;
    }
    if (strcasecmp(s, "AF_INET") == 0 || strcmp(s, "4") == 0) {
        return AF_INET;
    }
    if (strcasecmp(s, "AF_INET6") == 0 || strcmp(s, "6") == 0) {
        return AF_INET6;
    }
    BR_WARN_ONCE(NCCL_INIT | NCCL_BOOTSTRAP,
                 "NCCL_SOCKET_FAMILY %s is not AF_INET or AF_INET6; using either", s);
    return AF_UNSPEC;
}

/* Split "host:port" / "[v6]:port" / "v6:port" into host and port; 0 on success. */
static int split_host_port(const char *text, char *host, size_t hlen, long *port_p)
{
    const char *colon;
    const char *hstart = text;
    size_t n;
    char *end = NULL;

    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL || close[1] != ':') {
            return -1;
        }
        hstart = text + 1;
        n = (size_t)(close - hstart);
        colon = close + 1;
    } else {
        /* A bare v6 address has several colons: the last one starts the port. */
        colon = strrchr(text, ':');
        if (colon == NULL) {
            return -1;
        }
        n = (size_t)(colon - text);
    }
    if (n == 0 || n >= hlen) {
        return -1;
    }
    memcpy(host, hstart, n);
    host[n] = '\0';
    errno = 0;
    *port_p = strtol(colon + 1, &end, 10);
    if (errno != 0 || end == colon + 1 || *end != '\0' || *port_p < 1 || *port_p > 65535) {
        return -1;
    }
    return 0;
}

ncclResult_t br_socket_addr_parse(const char *text, br_socket_addr_t *addr_p)
{
    char host[256];
    long port = 0;
    struct addrinfo hints, *res = NULL;
    br_socket_addr_t addr;
    int ret;

    if (text == NULL || split_host_port(text, host, sizeof(host), &port) != 0) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "cannot parse address '%s': expected host:port, 1.2.3.4:port or [v6]:port "
                "with a port from 1 to 65535",
                text == NULL ? "(null)" : text);
        return ncclInvalidArgument;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = family_param();
    hints.ai_socktype = SOCK_STREAM;
    ret = getaddrinfo(host, NULL, &hints, &res);
    if (ret != 0) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "cannot resolve '%s' (from '%s'): %s", host, text,
                gai_strerror(ret));
        return ncclInvalidArgument;
    }
    memset(&addr, 0, sizeof(addr));
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
            ai->ai_addrlen <= sizeof(addr)) {
            memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
            break;
        }
    }
    freeaddrinfo(res);
    if (addr.sa.sa_family == AF_INET) {
        addr.sin.sin_port = htons((uint16_t)port);
    } else if (addr.sa.sa_family == AF_INET6) {
        addr.sin6.sin6_port = htons((uint16_t)port);
    } else {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "'%s' has no IPv4 or IPv6 address", host);
        return ncclInvalidArgument;
    }
    *addr_p = addr;
    return ncclSuccess;
}

/* One way of choosing interfaces: a comma list of names or prefixes, or a subnet. */
typedef struct {
    const char *list;               /* NULL: match by subnet */
    int exclude;                    /* list names what must not match */
    int exact;                      /* whole names rather than prefixes */
    const br_socket_addr_t *remote; /* subnet mode: the address to be on a subnet with */
} iface_filter_t;

static int name_in_list(const char *name, const char *list, int exact)
{
    char buf[512];
    char *save = NULL;

    snprintf(buf, sizeof(buf), "%s", list);
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        if (exact ? strcmp(name, tok) == 0 : strncmp(name, tok, strlen(tok)) == 0) {
            return 1;
        }
    }
    return 0;
}

static int same_subnet(const struct ifaddrs *ifa, const br_socket_addr_t *remote)
{
    const unsigned char *a, *m, *r;
    size_t n;

    if (ifa->ifa_netmask == NULL || ifa->ifa_addr->sa_family != remote->sa.sa_family) {
        return 0;
    }
    if (remote->sa.sa_family == AF_INET) {
        a = (const unsigned char *)&((const struct sockaddr_in *)ifa->ifa_addr)->sin_addr;
        m = (const unsigned char *)&((const struct sockaddr_in *)ifa->ifa_netmask)->sin_addr;
        r = (const unsigned char *)&remote->sin.sin_addr;
        n = 4;
    } else {
        a = (const unsigned char *)&((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr;
        m = (const unsigned char *)&((const struct sockaddr_in6 *)ifa->ifa_netmask)->sin6_addr;
        r = (const unsigned char *)&remote->sin6.sin6_addr;
        n = 16;
    }
    for (size_t i = 0; i < n; i++) {
        if ((a[i] & m[i]) != (r[i] & m[i])) {
            return 0;
        }
    }
    return 1;
}

/* Is this interface address usable at all (up, right family, not v6 link-local)? */
static int iface_usable(const struct ifaddrs *ifa, int family)
{
    const struct sockaddr *sa = ifa->ifa_addr;

    if (sa == NULL || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)) {
        return 0;
    }
    if ((ifa->ifa_flags & IFF_UP) == 0 || (family != AF_UNSPEC && sa->sa_family != family)) {
        return 0;
    }
    /* Link-local v6 needs a scope id that means nothing to another host. */
    if (sa->sa_family == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)sa)->sin6_addr)) {
        return 0;
    }
    return 1;
}

/* First interface address passing the filter; 1 when found. */
static int iface_scan(const struct ifaddrs *ifs, int family, const iface_filter_t *f, char *ifname,
                      size_t len, br_socket_addr_t *addr_p)
{
    for (const struct ifaddrs *ifa = ifs; ifa != NULL; ifa = ifa->ifa_next) {
        int match;
        if (!iface_usable(ifa, family)) {
            continue;
        }
        if (f->list == NULL) {
            match = same_subnet(ifa, f->remote);
        } else {
            match = name_in_list(ifa->ifa_name, f->list, f->exact) != f->exclude;
        }
        if (!match) {
            continue;
        }
        memset(addr_p, 0, sizeof(*addr_p));
        memcpy(addr_p, ifa->ifa_addr,
               ifa->ifa_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                    : sizeof(struct sockaddr_in));
        snprintf(ifname, len, "%s", ifa->ifa_name);
        return 1;
    }
    return 0;
}

/* Apply NCCL_SOCKET_IFNAME, or the default order, to the interface list. */
static int iface_choose(const struct ifaddrs *ifs, const br_socket_addr_t *remote, char *ifname,
                        size_t len, br_socket_addr_t *addr_p)
{
    const char *spec = BR_PARAM_STR(SOCKET_IFNAME);
    int family = family_param();
    iface_filter_t f = {NULL, 0, 0, remote};
    static const iface_filter_t defaults[] = {
        {"docker,lo,virbr", 1, 0, NULL}, /* real interfaces first */
        {"docker,virbr", 0, 0, NULL},    /* then bridges */
        {"lo", 0, 0, NULL},              /* loopback only when nothing else exists */
    };

    if (spec != NULL) {
        if (spec[0] == '^') {
            f.exclude = 1;
            spec++;
        }
        if (spec[0] == '=') {
            f.exact = 1;
            spec++;
        }
        f.list = spec;
        return iface_scan(ifs, family, &f, ifname, len, addr_p);
    }
    if (remote != NULL && iface_scan(ifs, family, &f, ifname, len, addr_p)) {
        return 1;
    }
    for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++) {
        if (iface_scan(ifs, family, &defaults[i], ifname, len, addr_p)) {
            return 1;
        }
    }
    return 0;
}

static pthread_mutex_t iface_lock = PTHREAD_MUTEX_INITIALIZER;
static int iface_cached;
static char iface_cached_name[BR_SOCKET_IFNAME_LEN];
static br_socket_addr_t iface_cached_addr;

ncclResult_t br_socket_iface_pick(const br_socket_addr_t *remote, char *ifname, size_t len,
                                  br_socket_addr_t *addr_p)
{
    struct ifaddrs *ifs = NULL;
    char name[BR_SOCKET_IFNAME_LEN] = "";
    char text[BR_SOCKET_ADDR_STRLEN];
    br_socket_addr_t addr;
    int found;

    pthread_mutex_lock(&iface_lock);
    if (remote == NULL && iface_cached) {
        snprintf(name, sizeof(name), "%s", iface_cached_name);
        addr = iface_cached_addr;
        pthread_mutex_unlock(&iface_lock);
        goto out;
    }
    if (getifaddrs(&ifs) != 0) {
        pthread_mutex_unlock(&iface_lock);
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "getifaddrs failed: %s", strerror(errno));
        return ncclSystemError;
    }
    found = iface_choose(ifs, remote, name, sizeof(name), &addr);
    freeifaddrs(ifs);
    if (!found) {
        const char *spec = BR_PARAM_STR(SOCKET_IFNAME);
        const char *fam = BR_PARAM_STR(SOCKET_FAMILY);
        pthread_mutex_unlock(&iface_lock);
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "no usable network interface for bootstrap (NCCL_SOCKET_IFNAME %s, "
                "NCCL_SOCKET_FAMILY %s): check the names against 'ip addr'",
                spec == NULL ? "unset" : spec, fam == NULL ? "unset" : fam);
        return ncclSystemError;
    }
    if (remote == NULL) {
        snprintf(iface_cached_name, sizeof(iface_cached_name), "%s", name);
        iface_cached_addr = addr;
        iface_cached = 1;
    }
    pthread_mutex_unlock(&iface_lock);
    /* Logged once per process for the cached choice, each time for a remote-driven one. */
    BR_INFO(NCCL_INIT | NCCL_BOOTSTRAP, "Bootstrap: using %s:%s<0>", name,
            host_str(&addr, text, sizeof(text)));
out:
    if (ifname != NULL) {
        snprintf(ifname, len, "%s", name);
    }
    *addr_p = addr;
    return ncclSuccess;
}

static void set_port(br_socket_addr_t *addr, uint16_t port)
{
    if (addr->sa.sa_family == AF_INET) {
        addr->sin.sin_port = htons(port);
    } else {
        addr->sin6.sin6_port = htons(port);
    }
}

ncclResult_t br_socket_listen(const br_socket_addr_t *addr, int *fd_p, br_socket_addr_t *bound_p)
{
    ncclResult_t res = ncclSuccess;
    br_socket_addr_t local = *addr, bound;
    socklen_t blen = sizeof(bound);
    int fd = -1, one = 1;
    char text[BR_SOCKET_ADDR_STRLEN];

    BR_SYS_GOTO(fd = socket(local.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), res,
                err_close_fd);
    /* A fixed port (NCCL_COMM_ID) must be reusable while old connections sit in TIME_WAIT.
     * Ephemeral ports go without, so the kernel never hands one port to two listeners. */
    if (br_socket_addr_port(&local) != 0) {
        BR_SYS_GOTO(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), res, err_close_fd);
    }
    if (bind(fd, &local.sa, br_socket_addr_len(&local)) != 0) {
        if (errno != EADDRNOTAVAIL) {
            BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "cannot listen on %s: bind: %s",
                    br_socket_addr_str(&local, text, sizeof(text)), strerror(errno));
            res = ncclSystemError;
            goto err_close_fd;
        }
        /* Not an address of this host: take the wildcard of the same family and port. */
        if (local.sa.sa_family == AF_INET) {
            local.sin.sin_addr.s_addr = htonl(INADDR_ANY);
        } else {
            local.sin6.sin6_addr = in6addr_any;
            local.sin6.sin6_scope_id = 0;
        }
        if (bind(fd, &local.sa, br_socket_addr_len(&local)) != 0) {
            BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "cannot listen on %s: bind: %s",
                    br_socket_addr_str(addr, text, sizeof(text)), strerror(errno));
            res = ncclSystemError;
            goto err_close_fd;
        }
    }
    BR_SYS_GOTO(listen(fd, SOMAXCONN), res, err_close_fd);
    memset(&bound, 0, sizeof(bound));
    BR_SYS_GOTO(getsockname(fd, &bound.sa, &blen), res, err_close_fd);
    /* A wildcard bind still advertises the address we were asked for. */
    if (!br_socket_addr_equal(&local, addr)) {
        uint16_t port = br_socket_addr_port(&bound);
        bound = *addr;
        set_port(&bound, port);
    }
    *fd_p = fd;
    *bound_p = bound;
    return ncclSuccess;
err_close_fd:
    br_socket_close(&fd);
    return res;
}

int br_socket_poll_ms(uint64_t deadline_ns, int cap_ms)
{
    uint64_t now = br_time_ns();
    uint64_t ms;

    if (deadline_ns == BR_SOCKET_NO_DEADLINE) {
        return cap_ms;
    }
    if (now >= deadline_ns) {
        return 0;
    }
    /* Round up, so a wait never ends just short of the deadline and spins. */
    ms = (deadline_ns - now + 999999) / 1000000;
    if (cap_ms >= 0 && ms > (uint64_t)cap_ms) {
        return cap_ms;
    }
    return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

/* Wait for events on one fd by the deadline. Returns 1 when ready, 0 on timeout, -1 with
 * errno on a poll failure. */
static int wait_fd(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events, .revents = 0};
        int ms = br_socket_poll_ms(deadline_ns, -1);
        int ret = poll(&p, 1, ms);
        if (ret > 0) {
            return 1;
        }
        if (ret == 0) {
            if (br_time_ns() >= deadline_ns) {
                return 0;
            }
            continue;
        }
        if (errno != EINTR) {
            return -1;
        }
    }
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void set_nodelay(int fd)
{
    int one = 1;
    /* Bootstrap messages are small and latency bound; failure only costs speed. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* A loopback connect to a port nobody listens on can, rarely, connect the socket to
 * itself (TCP simultaneous open). Such a connection must be thrown away. */
static int is_self_connected(int fd)
{
    br_socket_addr_t a, b;
    socklen_t alen = sizeof(a), blen = sizeof(b);

    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    if (getsockname(fd, &a.sa, &alen) != 0 || getpeername(fd, &b.sa, &blen) != 0) {
        return 0;
    }
    return br_socket_addr_equal(&a, &b);
}

/* One connect attempt: 0 when connected, else the errno that stopped it. */
static int connect_once(int fd, const br_socket_addr_t *remote, uint64_t deadline_ns)
{
    int err = 0;
    socklen_t elen = sizeof(err);

    if (connect(fd, &remote->sa, br_socket_addr_len(remote)) == 0) {
        return is_self_connected(fd) ? ECONNREFUSED : 0;
    }
    /* An interrupted connect carries on in the background, like EINPROGRESS. */
    if (errno != EINPROGRESS && errno != EINTR) {
        return errno;
    }
    switch (wait_fd(fd, POLLOUT, deadline_ns)) {
    case 0: return ETIMEDOUT;
    case -1: return errno;
    default: break;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) {
        return errno;
    }
    if (err == 0 && is_self_connected(fd)) {
        return ECONNREFUSED;
    }
    return err;
}

/* ---- TLS ---- */

static _Atomic(const br_socket_tls_t *) tls_ops;

/* How long an accepted connection has to finish its TLS handshake when the caller gave
 * no deadline (a listener drained by an event loop). */
#define TLS_ACCEPT_NS (10ull * 1000000000ull)

void br_socket_set_tls(const br_socket_tls_t *tls)
{
    atomic_store(&tls_ops, tls);
}

const br_socket_tls_t *br_socket_tls(void)
{
    return atomic_load(&tls_ops);
}

static void secure_failed(int server, const char *peer, const char *why)
{
    BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP | NCCL_NET,
            "host %s: %s %s refused: %s (TLS is on here, ncclSetEncryption: the peer has it "
            "off, or another key or certificate authority)",
            br_host_name(), server ? "a connection from" : "the connection to", peer, why);
    errno = EPROTO; /* callers say "TLS" for it */
}

ncclResult_t br_socket_secure(int fd, int server, uint64_t deadline_ns, const char *peer)
{
    const br_socket_tls_t *tls = atomic_load(&tls_ops);
    char why[320];
    if (tls == NULL || tls->start(fd, server, deadline_ns, why, sizeof(why)) == 0) {
        return ncclSuccess;
    }
    secure_failed(server, peer, why);
    return ncclRemoteError;
}

int br_socket_secure_begin(int fd, int server, const char *peer)
{
    const br_socket_tls_t *tls = atomic_load(&tls_ops);
    char why[320];
    if (tls == NULL) {
        return 0;
    }
    if (tls->begin(fd, server, why, sizeof(why)) != 0) {
        secure_failed(server, peer, why);
        return -1;
    }
    return 1;
}

int br_socket_secure_step(int fd, int server, const char *peer)
{
    const br_socket_tls_t *tls = atomic_load(&tls_ops);
    char why[320];
    short events = 0;
    int r = tls != NULL ? tls->step(fd, &events, why, sizeof(why)) : 1;
    if (r < 0) {
        secure_failed(server, peer, why);
    }
    return r;
}

ssize_t br_socket_send_nb(int fd, const void *buf, size_t len)
{
    const br_socket_tls_t *tls = atomic_load(&tls_ops);
    return tls != NULL ? tls->send(fd, buf, len) : send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
}

ssize_t br_socket_recv_nb(int fd, void *buf, size_t len)
{
    const br_socket_tls_t *tls = atomic_load(&tls_ops);
    return tls != NULL ? tls->recv(fd, buf, len) : recv(fd, buf, len, MSG_DONTWAIT);
}

static int connect_retryable(int err)
{
    return err == ECONNREFUSED || err == ECONNRESET || err == ECONNABORTED || err == EHOSTUNREACH ||
           err == ENETUNREACH || err == EAGAIN || err == ETIMEDOUT;
}

/* Connect, retrying refusals and timeouts with growing pauses when retry is set; with
 * refused_ns, refusals in a row for that long end it early. */
static ncclResult_t connect_impl(const br_socket_addr_t *remote, uint64_t deadline_ns, int retry,
                                 uint64_t refused_ns, int secure, int *fd_p)
{
    uint64_t pause_ms = 5, refused_since = 0;

    for (;;) {
        int fd, err;
        fd = socket(remote->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "socket() for a connection failed: %s",
                    strerror(errno));
            return ncclSystemError;
        }
        err = connect_once(fd, remote, deadline_ns);
        if (err == 0) {
            char text[BR_SOCKET_ADDR_STRLEN];
            set_nodelay(fd);
            if (secure &&
                br_socket_secure(fd, 0, deadline_ns,
                                 br_socket_addr_str(remote, text, sizeof(text))) != ncclSuccess) {
                close(fd);
                errno = EPROTO;
                return ncclRemoteError;
            }
            *fd_p = fd;
            return ncclSuccess;
        }
        close(fd);
        uint64_t now = br_time_ns();
        refused_since = err != ECONNREFUSED ? 0 : refused_since != 0 ? refused_since : now;
        /* Refused: the listener is not up yet. Retry while the deadline allows. */
        if (!retry || !connect_retryable(err) || now + pause_ms * 1000000ull >= deadline_ns ||
            (refused_ns > 0 && refused_since != 0 && now - refused_since >= refused_ns)) {
            errno = err;
            return ncclRemoteError;
        }
        sleep_ms(pause_ms);
        pause_ms = pause_ms * 2 > CONNECT_PAUSE_MAX_MS ? CONNECT_PAUSE_MAX_MS : pause_ms * 2;
    }
}

ncclResult_t br_socket_connect(const br_socket_addr_t *remote, uint64_t deadline_ns, int *fd_p)
{
    return connect_impl(remote, deadline_ns, 1, 0, 1, fd_p);
}

ncclResult_t br_socket_connect_up(const br_socket_addr_t *remote, uint64_t deadline_ns,
                                  uint64_t refused_ns, int *fd_p)
{
    return connect_impl(remote, deadline_ns, 1, refused_ns, 1, fd_p);
}

ncclResult_t br_socket_connect_once(const br_socket_addr_t *remote, uint64_t deadline_ns, int *fd_p)
{
    return connect_impl(remote, deadline_ns, 0, 0, 1, fd_p);
}

ncclResult_t br_socket_connect_plain(const br_socket_addr_t *remote, uint64_t deadline_ns,
                                     int *fd_p)
{
    return connect_impl(remote, deadline_ns, 0, 0, 0, fd_p);
}

ncclResult_t br_socket_accept(int listen_fd, uint64_t deadline_ns, int *fd_p,
                              br_socket_addr_t *peer_p)
{
    for (;;) {
        br_socket_addr_t peer;
        socklen_t plen = sizeof(peer);
        int fd;

        memset(&peer, 0, sizeof(peer));
        fd = accept4(listen_fd, &peer.sa, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            char text[BR_SOCKET_ADDR_STRLEN];
            uint64_t until = br_time_ns() + TLS_ACCEPT_NS;
            set_nodelay(fd);
            if (br_socket_secure(fd, 1,
                                 deadline_ns > 0 && deadline_ns < until ? deadline_ns : until,
                                 br_socket_addr_str(&peer, text, sizeof(text))) != ncclSuccess) {
                close(fd); /* refused: wait for the next */
                continue;
            }
            if (peer_p != NULL) {
                *peer_p = peer;
            }
            *fd_p = fd;
            return ncclSuccess;
        }
        /* A connection reset before we took it is not our failure: wait for the next. */
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED &&
            errno != EPROTO) {
            BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "accept failed: %s", strerror(errno));
            return ncclSystemError;
        }
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) {
            continue;
        }
        switch (wait_fd(listen_fd, POLLIN, deadline_ns)) {
        case 0: errno = ETIMEDOUT; return ncclTimeout;
        case -1:
            BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "poll on a listener failed: %s", strerror(errno));
            return ncclSystemError;
        default: break;
        }
    }
}

/* Classify a failed send/recv: the peer's doing, or ours. */
static ncclResult_t io_error(const char *what)
{
    if (errno == EPIPE || errno == ECONNRESET || errno == ETIMEDOUT || errno == EHOSTUNREACH ||
        errno == ENETUNREACH || errno == ECONNABORTED) {
        return ncclRemoteError;
    }
    BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "%s failed: %s", what, strerror(errno));
    return ncclSystemError;
}

ncclResult_t br_socket_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns)
{
    const char *p = buf;
    size_t off = 0;

    while (off < len) {
        ssize_t n = br_socket_send_nb(fd, p + off, len - off);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            return io_error("send");
        }
        switch (wait_fd(fd, POLLOUT, deadline_ns)) {
        case 0: errno = ETIMEDOUT; return ncclTimeout;
        case -1: return io_error("poll");
        default: break;
        }
    }
    return ncclSuccess;
}

ncclResult_t br_socket_recv_some(int fd, void *buf, size_t len, size_t *got_p)
{
    for (;;) {
        ssize_t n = br_socket_recv_nb(fd, buf, len);
        if (n > 0) {
            *got_p = (size_t)n;
            return ncclSuccess;
        }
        if (n == 0 && len > 0) {
            errno = ECONNRESET;
            return ncclRemoteError;
        }
        if (n == 0 || errno == EAGAIN || errno == EWOULDBLOCK) {
            *got_p = 0;
            return ncclSuccess;
        }
        if (errno != EINTR) {
            return io_error("recv");
        }
    }
}

ncclResult_t br_socket_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
    char *p = buf;
    size_t off = 0;

    while (off < len) {
        size_t got = 0;
        BR_CHECK(br_socket_recv_some(fd, p + off, len - off, &got));
        if (got > 0) {
            off += got;
            continue;
        }
        switch (wait_fd(fd, POLLIN, deadline_ns)) {
        case 0: errno = ETIMEDOUT; return ncclTimeout;
        case -1: return io_error("poll");
        default: break;
        }
    }
    return ncclSuccess;
}

void br_socket_close(int *fd)
{
    if (*fd >= 0) {
        const br_socket_tls_t *tls = atomic_load(&tls_ops);
        if (tls != NULL) {
            tls->end(*fd);
        }
        /* Linux releases the descriptor even when close reports EINTR: never retry. */
        (void)close(*fd);
        *fd = -1;
    }
}
