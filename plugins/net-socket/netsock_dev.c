/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Devices of the socket plugin: the network interfaces chosen by NCCL_SOCKET_IFNAME
 * (comma list of name prefixes; a leading ^ excludes, a leading = asks for exact names)
 * and NCCL_SOCKET_FAMILY (AF_INET or AF_INET6). Without NCCL_SOCKET_IFNAME every
 * interface that is up, not loopback and not docker* qualifies; loopback only when
 * nothing else does. The table is built once per process under a mutex and is
 * read-only afterwards, so getProperties may run on any thread.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netsock.h"
#include "param_lite.h"
#include "plugin_log.h"

#include "check.h"

#define DEFAULT_SPEED_MBPS 10000

static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static int dev_ready; /* discovery ran; guarded by dev_lock, then read-only */
static ncclResult_t dev_res;
static int dev_count;
static netsock_dev_t devs[NETSOCK_MAX_DEVS];

/* Does name match the NCCL_SOCKET_IFNAME-style list? */
static int ifname_matches(const char *list, const char *name)
{
    int exclude = 0, exact = 0, found = 0;
    const char *p = list;

    if (*p == '^') {
        exclude = 1;
        p++;
    }
    if (*p == '=') {
        exact = 1;
        p++;
    }
    while (*p != '\0' && !found) {
        size_t n = strcspn(p, ",");
        if (n > 0) {
            found =
                exact ? (strlen(name) == n && strncmp(name, p, n) == 0) : strncmp(name, p, n) == 0;
        }
        p += n;
        if (*p == ',') {
            p++;
        }
    }
    return exclude ? !found : found;
}

/* Which address family pass (0: IPv4, 1: global IPv6, 2: link-local IPv6) fits ifa? */
static int addr_pass(const struct ifaddrs *ifa)
{
    if (ifa->ifa_addr == NULL) {
        return -1;
    }
    if (ifa->ifa_addr->sa_family == AF_INET) {
        return 0;
    }
    if (ifa->ifa_addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ifa->ifa_addr;
        return IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr) ? 2 : 1;
    }
    return -1;
}

/* Is ifa a candidate under the user's or the default selection? */
static int if_selected(const struct ifaddrs *ifa, const char *list, int want_loopback)
{
    if (!(ifa->ifa_flags & IFF_UP)) {
        return 0;
    }
    if (list != NULL) {
        return ifname_matches(list, ifa->ifa_name);
    }
    if (strncmp(ifa->ifa_name, "docker", 6) == 0) {
        return 0;
    }
    return want_loopback ? (ifa->ifa_flags & IFF_LOOPBACK) != 0
                         : (ifa->ifa_flags & IFF_LOOPBACK) == 0;
}

static int dev_find(const char *name)
{
    for (int i = 0; i < dev_count; i++) {
        if (strcmp(devs[i].name, name) == 0) {
            return i;
        }
    }
    return -1;
}

/* Speed from sysfs in Mbps; unknown (virtual, loopback, down) gives the default. */
static int read_speed(const char *ifname)
{
    char path[PATH_MAX];
    int speed = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
    f = fopen(path, "r");
    if (f != NULL) {
        if (fscanf(f, "%d", &speed) != 1) {
            speed = -1;
        }
        fclose(f);
    }
    return speed > 0 ? speed : DEFAULT_SPEED_MBPS;
}

static void dev_add(const struct ifaddrs *ifa)
{
    netsock_dev_t *d = &devs[dev_count];
    char path[PATH_MAX];

    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof(d->name), "%s", ifa->ifa_name);
    memcpy(&d->addr, ifa->ifa_addr,
           ifa->ifa_addr->sa_family == AF_INET ? sizeof(d->addr.sin) : sizeof(d->addr.sin6));
    /* Listen on an ephemeral port: the handle carries the one the kernel picks. */
    if (d->addr.sa.sa_family == AF_INET) {
        d->addr.sin.sin_port = 0;
    } else {
        d->addr.sin6.sin6_port = 0;
    }
    snprintf(path, sizeof(path), "/sys/class/net/%s/device", ifa->ifa_name);
    d->pci_path = realpath(path, NULL); /* NULL for virtual interfaces */
    d->speed = read_speed(ifa->ifa_name);
    dev_count++;
}

/* Collect the interfaces of one selection; IPv4 addresses win over IPv6 ones. */
static void dev_scan(struct ifaddrs *list, const char *names, int family, int want_loopback)
{
    for (int pass = 0; pass < 3; pass++) {
        for (struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
            if (dev_count == NETSOCK_MAX_DEVS) {
                return;
            }
            if (addr_pass(ifa) != pass ||
                (family != AF_UNSPEC && ifa->ifa_addr->sa_family != family)) {
                continue;
            }
            if (if_selected(ifa, names, want_loopback) && dev_find(ifa->ifa_name) < 0) {
                dev_add(ifa);
            }
        }
    }
}

static int family_param(void)
{
    const char *s = br_lite_param_str("NCCL_SOCKET_FAMILY");

    if (s == NULL) {
        return AF_UNSPEC;
    }
    if (strcmp(s, "AF_INET") == 0) {
        return AF_INET;
    }
    if (strcmp(s, "AF_INET6") == 0) {
        return AF_INET6;
    }
    BR_WARN(NCCL_NET | NCCL_ENV, "NCCL_SOCKET_FAMILY '%s' is not AF_INET or AF_INET6; ignored", s);
    return AF_UNSPEC;
}

static ncclResult_t dev_discover(void)
{
    const char *names = br_lite_param_str("NCCL_SOCKET_IFNAME");
    int family = family_param();
    struct ifaddrs *list = NULL;
    ncclResult_t res = ncclSuccess;

    BR_SYS_GOTO(getifaddrs(&list), res, out);
    dev_scan(list, names, family, 0);
    if (dev_count == 0 && names == NULL) {
        dev_scan(list, NULL, family, 1);
    }
    if (dev_count == 0) {
        const char *fam = br_lite_param_str("NCCL_SOCKET_FAMILY");
        BR_WARN(NCCL_NET | NCCL_INIT,
                "no usable network interface (NCCL_SOCKET_IFNAME '%s', "
                "NCCL_SOCKET_FAMILY '%s'): the socket plugin has no device",
                names ? names : "", fam ? fam : "");
        res = ncclSystemError;
        goto out;
    }
    for (int i = 0; i < dev_count; i++) {
        char addr[NETSOCK_ADDR_STRLEN];
        netsock_addr_str(&devs[i].addr.sa, addr, sizeof(addr));
        BR_INFO(NCCL_NET | NCCL_INIT, "socket device %d: %s %s, %d Mbps", i, devs[i].name, addr,
                devs[i].speed);
    }
out:
    if (list != NULL) {
        freeifaddrs(list);
    }
    return res;
}

ncclResult_t netsock_dev_init(void)
{
    ncclResult_t res;

    pthread_mutex_lock(&dev_lock);
    if (!dev_ready) {
        dev_res = dev_discover();
        dev_ready = 1;
    }
    res = dev_res;
    pthread_mutex_unlock(&dev_lock);
    return res;
}

int netsock_dev_count(void)
{
    int n;

    pthread_mutex_lock(&dev_lock);
    n = dev_res == ncclSuccess ? dev_count : 0;
    pthread_mutex_unlock(&dev_lock);
    return n;
}

const netsock_dev_t *netsock_dev_get(int dev)
{
    return (dev >= 0 && dev < netsock_dev_count()) ? &devs[dev] : NULL;
}

void netsock_addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
        snprintf(buf, len, "%s:%u", host, ntohs(s4->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
        snprintf(buf, len, "[%s]:%u", host, ntohs(s6->sin6_port));
    } else {
        snprintf(buf, len, "<family %d>", sa->sa_family);
    }
}

unsigned netsock_addr_len(const netsock_addr_t *addr)
{
    return addr->sa.sa_family == AF_INET ? sizeof(addr->sin) : sizeof(addr->sin6);
}
