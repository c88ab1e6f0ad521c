/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TLS on Braid's own connections (ncclSetEncryption, NCCL 2.32). The process's
 * configuration comes from ncclSetEncryption (a pre-shared key) or, when the program never
 * calls it, from BRAID_TLS_PSK_FILE or BRAID_TLS_CERT / _KEY / _CA, read once at the first
 * ncclGetUniqueId or communicator init. It is installed in util_socket's hooks, through
 * which the bootstrap and the failover links connect and accept, and handed to net
 * plugins that encrypt their own sockets (core/plugin/plugin_net.c). The TLS itself is
 * plugins/common/br_tls.c, the code Braid's socket plugin uses too.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "br_tls.h"
#include "comm.h"
#include "util.h"
#include "util_socket.h"

static pthread_mutex_t tls_lock = PTHREAD_MUTEX_INITIALIZER;
static int tls_from_api; /* ncclSetEncryption was called: the parameters are not read */
static int tls_env_read;

static int config_copy(void *out, size_t size)
{
    if (size != sizeof(br_tls_config_t)) {
        return -1;
    }
    br_tls_config_get(out);
    return 0;
}

static const br_socket_tls_t tls_ops = {.start = br_tls_start,
                                        .send = br_tls_send,
                                        .recv = br_tls_recv,
                                        .end = br_tls_end,
                                        .config = config_copy,
                                        .begin = br_tls_begin,
                                        .step = br_tls_step};

/* Make cfg the process's configuration. Caller holds tls_lock. */
static ncclResult_t apply(const br_tls_config_t *cfg, const char *source)
{
    char why[700];
    if (br_tls_configure(cfg, why, sizeof(why)) != 0) {
        BR_WARN(NCCL_INIT, "host %s: %s: %s", br_host_name(), source, why);
        return ncclInvalidUsage;
    }
    br_socket_set_tls(cfg->mode == BR_TLS_OFF ? NULL : &tls_ops);
    BR_INFO(NCCL_INIT | NCCL_NET, "TLS on Braid's own connections: %s (%s)",
            cfg->mode == BR_TLS_OFF   ? "off"
            : cfg->mode == BR_TLS_PSK ? "TLS 1.3 with a pre-shared key"
                                      : "TLS 1.3 with certificates",
            source);
    return ncclSuccess;
}

ncclResult_t br_comm_tls_set(int on, const char *psk)
{
    br_tls_config_t cfg;
    ncclResult_t res;

    memset(&cfg, 0, sizeof(cfg));
    if (on) {
        size_t len = strlen(psk);
        if (len > sizeof(cfg.psk)) {
            BR_WARN(NCCL_INIT, "host %s: ncclSetEncryption: the key has %zu bytes, at most %zu",
                    br_host_name(), len, sizeof(cfg.psk));
            return ncclInvalidArgument;
        }
        cfg.mode = BR_TLS_PSK;
        memcpy(cfg.psk, psk, len);
        cfg.psk_len = len;
    }
    pthread_mutex_lock(&tls_lock);
    res = apply(&cfg, "ncclSetEncryption");
    tls_from_api |= res == ncclSuccess;
    pthread_mutex_unlock(&tls_lock);
    memset(&cfg, 0, sizeof(cfg)); /* no copy of the key left on the stack */
    return res;
}

/* The key in BRAID_TLS_PSK_FILE, trailing white space dropped. */
static ncclResult_t psk_read(const char *path, br_tls_config_t *cfg)
{
    char buf[sizeof(cfg->psk) + 2];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf)) : -1;
    if (fd >= 0) {
        close(fd);
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) {
        n--;
    }
    if (n < 0 || (size_t)n > sizeof(cfg->psk)) {
        BR_WARN(NCCL_INIT, "host %s: BRAID_TLS_PSK_FILE %s: %s", br_host_name(), path,
                n < 0 ? strerror(errno) : "more than 256 bytes");
        return ncclInvalidUsage;
    }
    cfg->mode = BR_TLS_PSK;
    memcpy(cfg->psk, buf, (size_t)n);
    cfg->psk_len = (size_t)n;
    return ncclSuccess;
}

/* BRAID_TLS_CERT, _KEY and _CA: all three, or none. */
static ncclResult_t cert_read(br_tls_config_t *cfg, int *set_p)
{
    const char *v[3] = {BR_PARAM_STR(TLS_CERT), BR_PARAM_STR(TLS_KEY), BR_PARAM_STR(TLS_CA)};
    char *dst[3] = {cfg->cert, cfg->key, cfg->ca};
    int n = 0;
    for (int i = 0; i < 3; i++) {
        n += v[i] != NULL && v[i][0] != '\0';
    }
    *set_p = n > 0;
    if (n > 0 && n < 3) {
        BR_WARN(NCCL_INIT,
                "host %s: BRAID_TLS_CERT, BRAID_TLS_KEY and BRAID_TLS_CA go together: only %d of "
                "them is set",
                br_host_name(), n);
        return ncclInvalidUsage;
    }
    for (int i = 0; i < 3 && n == 3; i++) {
        snprintf(dst[i], BR_TLS_PATH_MAX, "%s", v[i]);
    }
    cfg->mode = n == 3 ? BR_TLS_CERT : cfg->mode;
    return ncclSuccess;
}

ncclResult_t br_comm_tls_env(void)
{
    br_tls_config_t cfg;
    ncclResult_t res = ncclSuccess;
    const char *psk_file = BR_PARAM_STR(TLS_PSK_FILE);
    int certs = 0;

    pthread_mutex_lock(&tls_lock);
    if (tls_from_api || tls_env_read) {
        pthread_mutex_unlock(&tls_lock);
        return ncclSuccess;
    }
    memset(&cfg, 0, sizeof(cfg));
    res = cert_read(&cfg, &certs);
    if (res == ncclSuccess && psk_file != NULL && psk_file[0] != '\0') {
        res = certs ? ncclInvalidUsage : psk_read(psk_file, &cfg);
        if (certs) {
            BR_WARN(NCCL_INIT,
                    "host %s: BRAID_TLS_PSK_FILE and BRAID_TLS_CERT are both set: "
                    "one or the other",
                    br_host_name());
        }
    }
    if (res == ncclSuccess && cfg.mode != BR_TLS_OFF) {
        res = apply(&cfg, "BRAID_TLS_* parameters");
    }
    tls_env_read = res == ncclSuccess;
    pthread_mutex_unlock(&tls_lock);
    memset(&cfg, 0, sizeof(cfg));
    return res;
}
