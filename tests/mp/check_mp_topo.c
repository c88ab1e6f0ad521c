/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "mp_topo": the topology across the processes of one host.
 *   share     4 ranks as processes: only the host's first rank runs topology detection,
 *             the others say they use the topology rank 0 detected; with
 *             BRAID_TOPO_SHARE=0 every process detects its own. Both run an AllReduce.
 *   leader_dies  rank 0 dies in the middle of detection (a fake NVML ends it): every
 *             other rank's init fails, naming the topology it waited for, instead of
 *             hanging.
 *   nic       a topology file of this machine made into 2 sockets (one CPU each) with a
 *             NIC each, named after two of its network interfaces; ranks bound to
 *             different sockets pick different NICs, and every net connection of a rank
 *             goes through its own NIC (the socket plugin's device of that name).
 *             Skipped (with a line saying so) with fewer than 2 CPUs or interfaces.
 *
 * Ranks are forked and meet through NCCL_COMM_ID; each writes its INFO log to its own
 * NCCL_DEBUG_FILE, which the test reads. The test process never calls NCCL.
 */
#include <arpa/inet.h>
#include <check.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nccl.h>

#include "brt_check.h"
#include "brt_launch.h"

#define NRANKS 4
#define COUNT 1000

static char log_dir[256];
static char topo_path[300];

static void log_path(int rank, char *buf, size_t len)
{
    snprintf(buf, len, "%s/rank%d.log", log_dir, rank);
}

/* How many lines of rank's log hold `what`, and how many of those also hold `also`. */
static int log_count(int rank, const char *what, const char *also, int *also_p)
{
    char path[300], line[1024];
    int n = 0, m = 0;
    log_path(rank, path, sizeof(path));
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, what) != NULL) {
            n++;
            m += also != NULL && strstr(line, also) != NULL;
        }
    }
    fclose(f);
    if (also_p != NULL) {
        *also_p = m;
    }
    return n;
}

/* Does rank's log hold a line with `what`? */
static int log_has(int rank, const char *what)
{
    return log_count(rank, what, NULL, NULL) > 0;
}

/* One rank: init, an AllReduce checked exactly, destroy. With expect_fail, init must
 * fail with `expect_fail` in its error text. Returns 0 when all went as expected. */
static int rank_run(int rank, const char *comm_id, const char *expect_fail)
{
    char path[300];
    ncclUniqueId id;
    ncclComm_t comm;
    float *buf;
    int bad = 0;

    log_path(rank, path, sizeof(path));
    setenv("NCCL_COMM_ID", comm_id, 1);
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "INIT,GRAPH,NET", 1);
    setenv("NCCL_DEBUG_FILE", path, 1);
    if (ncclGetUniqueId(&id) != ncclSuccess) {
        return 1;
    }
    ncclResult_t res = ncclCommInitRank(&comm, NRANKS, id, rank);
    if (expect_fail != NULL) {
        const char *err = ncclGetLastError(NULL);
        if (res == ncclSuccess || strstr(err, expect_fail) == NULL) {
            fprintf(stderr, "rank %d: init returned %d (%s), expected a failure with '%s'\n", rank,
                    (int)res, err, expect_fail);
            return 1;
        }
        return 0;
    }
    if (res != ncclSuccess) {
        fprintf(stderr, "rank %d: init failed: %s\n", rank, ncclGetLastError(NULL));
        return 1;
    }
    buf = malloc(COUNT * sizeof(float));
    for (int i = 0; buf != NULL && i < COUNT; i++) {
        buf[i] = (float)(rank + i % 7);
    }
    bad = buf == NULL || ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, comm, NULL) != 0;
    for (int i = 0; !bad && i < COUNT; i++) {
        /* sum over r of r + i % 7 */
        bad = buf[i] != (float)(NRANKS * (NRANKS - 1) / 2 + NRANKS * (i % 7));
    }
    free(buf);
    if (bad) {
        fprintf(stderr, "rank %d: AllReduce failed or gave a wrong result\n", rank);
        ncclCommAbort(comm);
        return 1;
    }
    return ncclCommDestroy(comm) == ncclSuccess ? 0 : 1;
}

/* Fork NRANKS ranks; env_of(rank) may set the rank's own environment. Asserts that each
 * exits with 0. */
static void run_ranks(void (*env_of)(int rank), const char *expect_fail_of_others)
{
    char comm_id[64];
    pid_t pids[NRANKS];
    int status;

    int port = brt_free_port();
    ck_assert_int_gt(port, 0);
    snprintf(comm_id, sizeof(comm_id), "127.0.0.1:%d", port);
    for (int r = 0; r < NRANKS; r++) {
        pids[r] = fork();
        ck_assert_int_ge(pids[r], 0);
        if (pids[r] == 0) {
            alarm(120); /* a hang kills the rank, and fails the test with a signal */
            if (env_of != NULL) {
                env_of(r);
            }
            _exit(rank_run(r, comm_id, r == 0 ? NULL : expect_fail_of_others));
        }
    }
    for (int r = 0; r < NRANKS; r++) {
        ck_assert_int_eq(waitpid(pids[r], &status, 0), pids[r]);
        if (expect_fail_of_others != NULL && r == 0) {
            ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 42,
                          "rank 0 should have died in detection (exit 42), status 0x%x", status);
            continue;
        }
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d: %s %d (see stderr)",
                      r, WIFEXITED(status) ? "exit" : "signal",
                      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
}

static void make_log_dir(void)
{
    snprintf(log_dir, sizeof(log_dir), "/tmp/braid-mp-topo-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(log_dir));
}

static void remove_log_dir(void)
{
    char path[300];
    for (int r = 0; r < NRANKS; r++) {
        log_path(r, path, sizeof(path));
        unlink(path);
    }
    if (topo_path[0] != '\0') {
        unlink(topo_path);
        topo_path[0] = '\0';
    }
    rmdir(log_dir);
}

START_TEST(test_share_detects_once)
{
    run_ranks(NULL, NULL);
    ck_assert_msg(log_has(0, "topology detected in"), "rank 0 did not detect the topology");
    for (int r = 1; r < NRANKS; r++) {
        char what[64];
        snprintf(what, sizeof(what), "Topology: rank %d: detected by rank 0", r);
        ck_assert_msg(!log_has(r, "topology detected in"), "rank %d detected it again", r);
        ck_assert_msg(log_has(r, what), "rank %d does not use rank 0's topology", r);
    }
}
END_TEST

static void no_share(int rank)
{
    (void)rank;
    setenv("BRAID_TOPO_SHARE", "0", 1);
}

START_TEST(test_share_off_detects_everywhere)
{
    run_ranks(no_share, NULL);
    for (int r = 0; r < NRANKS; r++) {
        ck_assert_msg(log_has(r, "topology detected in"), "rank %d did not detect", r);
    }
}
END_TEST

static void leader_dies(int rank)
{
    if (rank == 0) {
        setenv("BRAID_NVML_LIBRARY", NVML_EXIT_PATH, 1);
    }
}

START_TEST(test_leader_dies)
{
    run_ranks(leader_dies, "this host's topology from rank");
}
END_TEST

/* The sockets of the nic case: the CPU each is made of and the interface of its NIC. */
static int nic_cpu[2];
static char nic_if[2][IF_NAMESIZE];

/* Two CPUs below 32 this process may run on, and two IPv4 interfaces that are up (the
 * socket plugin's devices); 0 when the machine has fewer. */
static int pick_cpus_and_ifs(void)
{
    cpu_set_t set;
    struct ifaddrs *list = NULL;
    int ncpu = 0, nif = 0;

    ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
    for (int c = 0; c < 32 && ncpu < 2; c++) {
        if (CPU_ISSET(c, &set)) {
            nic_cpu[ncpu++] = c;
        }
    }
    ck_assert_int_eq(getifaddrs(&list), 0);
    for (struct ifaddrs *a = list; a != NULL && nif < 2; a = a->ifa_next) {
        if (a->ifa_addr == NULL || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP) ||
            (nif == 1 && strcmp(nic_if[0], a->ifa_name) == 0)) {
            continue;
        }
        snprintf(nic_if[nif++], IF_NAMESIZE, "%s", a->ifa_name);
    }
    freeifaddrs(list);
    return ncpu == 2 && nif == 2;
}

/* The topology: socket k holds CPU nic_cpu[k] and a NIC named nic_if[k] (net dev k). */
static void write_topology(void)
{
    snprintf(topo_path, sizeof(topo_path), "%s/topo.xml", log_dir);
    FILE *f = fopen(topo_path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "<system version=\"1\">\n");
    for (int k = 0; k < 2; k++) {
        fprintf(f,
                "  <cpu numaid=\"%d\" affinity=\"%08x\" arch=\"x86_64\" vendor=\"AuthenticAMD\" "
                "familyid=\"175\" modelid=\"1\">\n"
                "    <pci busid=\"0000:%02x:00.0\" class=\"0x020000\" vendor=\"0x15b3\" "
                "device=\"0x101b\" subsystem_vendor=\"0x15b3\" subsystem_device=\"0x0007\" "
                "link_speed=\"16.0 GT/s PCIe\" link_width=\"16\">\n"
                "      <nic>\n"
                "        <net name=\"%s\" dev=\"%d\" latency=\"0\" speed=\"100000\" port=\"1\" "
                "guid=\"0x%x\" maxconn=\"65536\" gdr=\"0\"/>\n"
                "      </nic>\n"
                "    </pci>\n"
                "  </cpu>\n",
                k, 1u << nic_cpu[k], 0x41 + 0x80 * k, nic_if[k], k, k + 1);
    }
    fprintf(f, "</system>\n");
    ck_assert_int_eq(fclose(f), 0);
}

/* Rank r runs on socket r / 2's CPU, over the network, with the topology file. */
static void nic_env(int rank)
{
    cpu_set_t set;
    char ifs[64];
    CPU_ZERO(&set);
    CPU_SET(nic_cpu[rank / 2], &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        _exit(3);
    }
    snprintf(ifs, sizeof(ifs), "=%s,%s", nic_if[0], nic_if[1]);
    setenv("NCCL_SOCKET_IFNAME", ifs, 1);
    setenv("NCCL_TOPO_FILE", topo_path, 1);
    setenv("NCCL_SHM_DISABLE", "1", 1);
    setenv("NCCL_P2P_DISABLE", "1", 1);
    setenv("NCCL_NET_PLUGIN", "socket", 1);
}

START_TEST(test_nic_by_cpu_affinity)
{
    if (!pick_cpus_and_ifs()) {
        printf("mp_topo nic: skipped: needs 2 CPUs and 2 IPv4 interfaces that are up\n");
        return;
    }
    write_topology();
    run_ranks(nic_env, NULL);
    for (int r = 0; r < NRANKS; r++) {
        char uses[96], dev[64];
        int k = r / 2, own = 0;
        snprintf(uses, sizeof(uses), "rank %d uses NIC %d %s from CPU %d", r, k, nic_if[k], k);
        ck_assert_msg(log_has(r, uses), "rank %d: no line '%s'", r, uses);
        snprintf(dev, sizeof(dev), "(%s)", nic_if[k]);
        int n = log_count(r, "via NET/Socket device", dev, &own);
        ck_assert_msg(n > 0, "rank %d made no net connection", r);
        ck_assert_msg(own == n, "rank %d: %d of %d net connections not through %s", r, n - own, n,
                      nic_if[k]);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mp_topo");
    TCase *tc = tcase_create("share");
    tcase_set_timeout(tc, 180);
    tcase_add_checked_fixture(tc, make_log_dir, remove_log_dir);
    tcase_add_test(tc, test_share_detects_once);
    tcase_add_test(tc, test_share_off_detects_everywhere);
    tcase_add_test(tc, test_leader_dies);
    suite_add_tcase(s, tc);
    tc = tcase_create("nic");
    tcase_set_timeout(tc, 180);
    tcase_add_checked_fixture(tc, make_log_dir, remove_log_dir);
    tcase_add_test(tc, test_nic_by_cpu_affinity);
    suite_add_tcase(s, tc);
    return brt_suite_run(s);
}
