/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Failure cases of the net-ib plugin, each a mode of this program (through net_kit):
 *
 *   netib_check PLUGIN.so devices N      init + devices; exit 0 when exactly N devices
 *                                        (the log, on stderr, says why; callers grep it)
 *   netib_check PLUGIN.so access         a receive buffer deregistered before the sender
 *                                        writes: the send must fail with the queue pair's
 *                                        "remote access error", naming device and peer
 *   netib_check PLUGIN.so portdown CMD   a connection whose port goes down (CMD, e.g.
 *                                        "ip link set d0 down", run after connecting): the
 *                                        transfer must fail in bounded time, with the
 *                                        asynchronous port event logged
 *
 * Exit 0: the expected failure was seen; 1: it was not; 77: no device (access/portdown).
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net_kit.h"

#define WAIT_S 60.0 /* every wait here is bounded */

static void *lc, *sc, *rc;
static char handle[NCCL_NET_HANDLE_MAXSIZE];

static int open_pair(void)
{
    double end = kit_now() + WAIT_S;

    if (kit_listen(0, handle, &lc) != ncclSuccess) {
        return -1;
    }
    while ((sc == NULL || rc == NULL) && kit_now() < end) {
        if (sc == NULL && kit_connect(0, handle, &sc) != ncclSuccess) {
            return -1;
        }
        if (rc == NULL && kit_accept(lc, &rc) != ncclSuccess) {
            return -1;
        }
    }
    return sc != NULL && rc != NULL ? 0 : -1;
}

/* Test req until it fails (1), completes (0) or the time is up (-1). */
static int until_error(void *req, const char *what)
{
    double end = kit_now() + WAIT_S;
    int done = 0;

    while (kit_now() < end) {
        ncclResult_t res = kit_test(req, &done, NULL);
        if (res != ncclSuccess) {
            printf("%s: error %d after %.1f s\n", what, (int)res, WAIT_S - (end - kit_now()));
            return 1;
        }
        if (done) {
            printf("%s: completed\n", what);
            return 0;
        }
        sched_yield();
    }
    printf("%s: neither done nor failed in %.0f s\n", what, WAIT_S);
    return -1;
}

static int mode_access(void)
{
    static char sbuf[65536], rbuf[65536];
    void *rmh = NULL, *rreq = NULL, *sreq = NULL, *data = rbuf;
    size_t cap = sizeof(rbuf);
    int tag = 0;

    if (open_pair() != 0 || kit_reg_mr(rc, rbuf, sizeof(rbuf), NCCL_PTR_HOST, &rmh) != 0 ||
        kit_irecv(rc, 1, &data, &cap, &tag, &rmh, &rreq) != ncclSuccess || rreq == NULL) {
        printf("access: setting up failed\n");
        return 1;
    }
    /* The receive's FIFO entry carries the rkey of a registration that is gone now. */
    kit_dereg_mr(rc, rmh);
    for (double end = kit_now() + WAIT_S; sreq == NULL && kit_now() < end;) {
        if (kit_isend(sc, sbuf, sizeof(sbuf), 0, NULL, &sreq) != ncclSuccess) {
            break;
        }
    }
    if (sreq == NULL || until_error(sreq, "send into a deregistered buffer") != 1) {
        return 1;
    }
    if (strstr(kit_warn_text(), "remote access error") == NULL ||
        strstr(kit_warn_text(), "rxe") == NULL) {
        printf("access: the error was not logged as a remote access error on the device\n");
        return 1;
    }
    return 0;
}

static int mode_portdown(const char *cmd)
{
    static char sbuf[1 << 20], rbuf[1 << 20];
    void *rreq = NULL, *sreq = NULL, *data = rbuf;
    size_t cap = sizeof(rbuf);
    int tag = 0, r;

    if (open_pair() != 0) {
        printf("portdown: connecting failed\n");
        return 1;
    }
    printf("portdown: running '%s'\n", cmd);
    fflush(stdout);
    if (system(cmd) != 0) {
        printf("portdown: '%s' failed\n", cmd);
        return 1;
    }
    if (kit_irecv(rc, 1, &data, &cap, &tag, NULL, &rreq) != ncclSuccess ||
        kit_isend(sc, sbuf, sizeof(sbuf), 0, NULL, &sreq) != ncclSuccess) {
        printf("portdown: posting failed at once: %s", kit_warn_text());
        return strstr(kit_warn_text(), "asynchronous event") != NULL ? 0 : 1;
    }
    /* Both ends must fail: the receive by its queue pair's error, the send (which waits
     * for a FIFO entry that cannot come) by the port's asynchronous event. */
    r = until_error(sreq, "send over a port that went down") == 1 &&
                until_error(rreq, "receive over a port that went down") == 1
            ? 1
            : 0;
    if (r != 1 || strstr(kit_warn_text(), "asynchronous event") == NULL) {
        printf("portdown: no error, or no asynchronous event logged\n");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    char err[512];
    int ndev = 0;

    if (argc < 3) {
        fprintf(stderr, "usage: %s PLUGIN.so devices N | access | portdown CMD\n", argv[0]);
        return 2;
    }
    if (kit_load(argv[1], 0, err, sizeof(err)) != 0) {
        fprintf(stderr, "netib_check: %s\n", err);
        return 1;
    }
    kit_set_verbose(1);
    if (kit_init() != ncclSuccess || kit_devices(&ndev) != ncclSuccess) {
        ndev = -1;
    }
    if (strcmp(argv[2], "devices") == 0 && argc == 4) {
        printf("netib_check: %d device(s), expected %s\n", ndev, argv[3]);
        return ndev == atoi(argv[3]) ? 0 : 1;
    }
    if (ndev <= 0) {
        printf("netib_check: no device\n");
        return 77;
    }
    if (strcmp(argv[2], "access") == 0) {
        return mode_access();
    }
    if (strcmp(argv[2], "portdown") == 0 && argc == 4) {
        return mode_portdown(argv[3]);
    }
    fprintf(stderr, "netib_check: unknown mode %s\n", argv[2]);
    return 2;
}
