/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "bootstrap", the ring: allgather of several slot sizes, barriers and peer
 * info, with 1 to 8 (and 13 and 33) ranks as threads of this process and as forked
 * processes, a single-rank communicator (no network partner, but still the root), and
 * ranks spread over simulated hosts (NCCL_HOSTID), whose allgathers meet in each host's
 * memory and go between the hosts' leaders. Ranks and the shared bodies come from
 * bootstrap_test_util.h.
 */
#include <check.h>
#include <dirent.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "bootstrap_test_util.h"

START_TEST(test_allgather_threads)
{
    bt_run_threads(_i, bt_allgather_body, NULL);
}
END_TEST

START_TEST(test_allgather_procs)
{
    bt_run_procs(_i, bt_allgather_body, NULL);
}
END_TEST

/* Rank counts that are not powers of two, with several allgather rounds and a last round
 * that carries only part of what a rank holds. */
static const int odd_counts[] = {13, 33};

START_TEST(test_allgather_procs_odd)
{
    bt_run_procs(odd_counts[_i], bt_allgather_body, NULL);
}
END_TEST

/* Ranks enter the barrier at staggered times; none may leave before all have entered. */
static _Atomic int barrier_entered;

static int barrier_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int ret = 0;

    (void)arg;
    for (int round = 1; round <= 3; round++) {
        bt_sleep_ms(rank * 7);
        atomic_fetch_add(&barrier_entered, 1);
        BT_BODY_CHECK(br_bootstrap_barrier(boot) == ncclSuccess, "barrier round %d", round);
        BT_BODY_CHECK(atomic_load(&barrier_entered) >= round * nranks,
                      "left round %d after only %d entries", round, atomic_load(&barrier_entered));
        BT_BODY_CHECK(br_bootstrap_barrier(boot) == ncclSuccess, "second barrier");
    }
out:
    return ret;
}

START_TEST(test_barrier_threads)
{
    atomic_store(&barrier_entered, 0);
    bt_run_threads(5, barrier_body, NULL);
}
END_TEST

static int barrier_procs_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int ret = 0;

    (void)nranks;
    (void)arg;
    for (int round = 0; round < 5; round++) {
        bt_sleep_ms(((rank + round) % 3) * 5);
        BT_BODY_CHECK(br_bootstrap_barrier(boot) == ncclSuccess, "barrier round %d", round);
    }
out:
    return ret;
}

START_TEST(test_barrier_procs)
{
    bt_run_procs(4, barrier_procs_body, NULL);
}
END_TEST

/* Single-rank communicators need no network partner but still use the root. */
/* ---- simulated hosts: allgathers through each host's memory and between leaders ---- */

/* Rank r's host in each layout (NCCL_HOSTID): uneven hosts, leaders not first in hash
 * order, hosts of one rank, host counts that are and are not powers of two. */
static const char *const layouts[][8] = {
    {"bt-A", "bt-B", "bt-A", "bt-C", "bt-B", "bt-A", "bt-D"}, /* 4 hosts of 3, 2, 1, 1 */
    {"bt-X", "bt-Y", "bt-Y", "bt-Z", "bt-X", "bt-Z"},         /* 3 hosts of 2 */
    {"bt-P", "bt-Q", "bt-R"},                                 /* one rank per host: sockets */
    {"bt-S", "bt-S", "bt-S", "bt-S", "bt-S"},                 /* one host */
};
static const int layout_ranks[] = {7, 6, 3, 5};

static int hosts_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    const char *const *hosts = arg;
    int ret = 0, local = 0, nhosts = 0, got_hosts = -1, got_local;

    for (int q = 0; q < nranks; q++) {
        int first = 1;
        local += strcmp(hosts[q], hosts[rank]) == 0;
        for (int p = 0; p < q; p++) {
            first &= strcmp(hosts[p], hosts[q]) != 0;
        }
        nhosts += first;
    }
    const char *shm = getenv("BRAID_BOOTSTRAP_SHM");
    if (nhosts == nranks || (shm != NULL && strcmp(shm, "0") == 0)) {
        local = nhosts = 0; /* every allgather over sockets */
    }
    got_local = br_bootstrap_local_ranks(boot, &got_hosts);
    BT_BODY_CHECK(got_local == local && got_hosts == nhosts,
                  "%d ranks of %d hosts share this rank's memory, expected %d of %d", got_local,
                  got_hosts, local, nhosts);
    /* The host's segment is unlinked once every rank of the host has mapped it: before
     * any of them returns from init (other hosts go at their own pace). */
    for (int q = 0; q < nranks; q++) {
        char name[96];
        if (strcmp(hosts[q], hosts[rank]) != 0) {
            continue;
        }
        snprintf(name, sizeof(name), "/dev/shm/braid-%d-boot-", br_bootstrap_peer_pid(boot, q));
        DIR *dir = opendir("/dev/shm");
        for (struct dirent *e; dir != NULL && (e = readdir(dir)) != NULL;) {
            char path[512];
            snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
            BT_BODY_CHECK(strncmp(path, name, strlen(name)) != 0, "%s is left after init", path);
        }
        if (dir != NULL) {
            closedir(dir);
        }
    }
    ret = bt_allgather_body(boot, rank, nranks, NULL);
out:
    return ret;
}

START_TEST(test_hosts_procs)
{
    bt_run_procs_hosts(layout_ranks[_i], layouts[_i], hosts_body, (void *)layouts[_i]);
}
END_TEST

START_TEST(test_single_rank)
{
    bt_run_threads(1, bt_sendrecv_body, &(bt_sendrecv_arg_t){.ntags = 3, .big = 10});
}
END_TEST

static Suite *bootstrap_ring_suite(void)
{
    Suite *s = suite_create("bootstrap");
    TCase *tc = tcase_create("allgather");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_single_rank);
    tcase_add_loop_test(tc, test_allgather_threads, 1, 9);
    tcase_add_loop_test(tc, test_allgather_procs, 1, 9);
    tcase_add_loop_test(tc, test_allgather_procs_odd, 0, 2);
    tcase_add_test(tc, test_barrier_threads);
    tcase_add_test(tc, test_barrier_procs);
    tcase_add_loop_test(tc, test_hosts_procs, 0,
                        (int)(sizeof(layout_ranks) / sizeof(layout_ranks[0])));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return bt_suite_run(bootstrap_ring_suite());
}
