/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "bootstrap", the ring: allgather of several slot sizes, barriers and peer
 * info, with 1 to 8 (and 13 and 33) ranks as threads of this process and as forked processes, and a
 * single-rank communicator (no network partner, but still the root). Ranks and the shared
 * bodies come from bootstrap_test_util.h.
 */
#include <check.h>
#include <stdatomic.h>
#include <stdlib.h>

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
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return bt_suite_run(bootstrap_ring_suite());
}
