/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "bootstrap", point to point: tagged send/recv between every pair of ranks
 * (threads and processes, out-of-order tags, multi-megabyte messages that must not wait
 * for the receiver), connection setup at 8 ranks, several threads of one rank sending at
 * once, no descriptor left behind after init, traffic, abort and close, and looking at
 * messages in place (peek, drop, the count, a receive that a watch ends).
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bootstrap.h"
#include "bootstrap_test_util.h"

START_TEST(test_sendrecv_threads)
{
    bt_sendrecv_arg_t a = {.ntags = 20, .big = 4u << 20};
    bt_run_threads(4, bt_sendrecv_body, &a);
}
END_TEST

START_TEST(test_sendrecv_procs)
{
    bt_sendrecv_arg_t a = {.ntags = 20, .big = 4u << 20};
    bt_run_procs(3, bt_sendrecv_body, &a);
}
END_TEST

/* Connection setup at scale: 8 ranks, 64 small messages to every peer. */
START_TEST(test_sendrecv_many)
{
    bt_sendrecv_arg_t a = {.ntags = 64, .big = 1000};
    double t0 = bt_now_s();
    bt_run_threads(8, bt_sendrecv_body, &a);
    ck_assert_msg(bt_now_s() - t0 < 20.0, "8 ranks x 64 messages took %.1f s", bt_now_s() - t0);
}
END_TEST

/* Several threads of one rank sending to the same peer at once. */
typedef struct {
    br_bootstrap_t *boot;
    int base;
    int ret;
} sender_t;

static void *sender_thread(void *p)
{
    sender_t *s = p;
    for (int k = 0; k < 50; k++) {
        int v = s->base + k;
        if (br_bootstrap_send(s->boot, 1, s->base, &v, sizeof(v)) != ncclSuccess) {
            s->ret = 1;
        }
    }
    return NULL;
}

static int concurrent_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int ret = 0;

    (void)nranks;
    (void)arg;
    if (rank == 0) {
        pthread_t th[4];
        sender_t s[4];
        for (int t = 0; t < 4; t++) {
            s[t] = (sender_t){.boot = boot, .base = (t + 1) * 1000, .ret = 0};
            pthread_create(&th[t], NULL, sender_thread, &s[t]);
        }
        for (int t = 0; t < 4; t++) {
            pthread_join(th[t], NULL);
            BT_BODY_CHECK(s[t].ret == 0, "sender thread %d", t);
        }
    } else {
        for (int t = 3; t >= 0; t--) {
            for (int k = 0; k < 50; k++) {
                int v = -1, base = (t + 1) * 1000;
                BT_BODY_CHECK(br_bootstrap_recv(boot, 0, base, &v, sizeof(v)) == ncclSuccess,
                              "recv");
                BT_BODY_CHECK(v == base + k, "got %d, expected %d", v, base + k);
            }
        }
    }
    BT_BODY_CHECK(br_bootstrap_barrier(boot) == ncclSuccess, "barrier");
out:
    return ret;
}

START_TEST(test_send_concurrent_threads)
{
    bt_run_threads(2, concurrent_body, NULL);
}
END_TEST

/* What connection setup uses to see what peers asked for: messages looked at in place
 * (nth of a tag, size checked), counted, dropped, and a receive whose watch ends it. */
typedef struct {
    int calls;
    ncclResult_t give; /* what the watch returns from its second call on */
} watch_t;

static ncclResult_t watch_fn(void *arg)
{
    watch_t *w = arg;
    return ++w->calls >= 2 ? w->give : ncclSuccess;
}

static int peek_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int ret = 0, v = -1;
    watch_t w = {0, ncclInvalidUsage};

    (void)nranks;
    (void)arg;
    if (rank == 0) {
        for (int k = 0; k < 3; k++) {
            int x = 10 + k;
            BT_BODY_CHECK(br_bootstrap_send(boot, 1, 7, &x, sizeof(x)) == ncclSuccess, "send");
        }
        int y = 99;
        BT_BODY_CHECK(br_bootstrap_send(boot, 1, 8, &y, sizeof(y)) == ncclSuccess, "send");
    }
    if (rank == 1) {
        /* Tag 8 went last on the same connection: once it is here, all are. */
        for (double t0 = bt_now_s(); !br_bootstrap_peek(boot, 0, 8, 0, &v, sizeof(v)) &&
                                     bt_now_s() - t0 < 10.0;
             bt_sleep_ms(1)) {
        }
        BT_BODY_CHECK(br_bootstrap_queued(boot) == 4, "queued %d, expected 4",
                      br_bootstrap_queued(boot));
        for (int k = 0; k < 3; k++) {
            BT_BODY_CHECK(br_bootstrap_peek(boot, 0, 7, k, &v, sizeof(v)) && v == 10 + k,
                          "peek %d of tag 7: %d", k, v);
        }
        BT_BODY_CHECK(!br_bootstrap_peek(boot, 0, 7, 3, &v, sizeof(v)), "a 4th of tag 7");
        BT_BODY_CHECK(!br_bootstrap_peek(boot, 0, 8, 0, &v, 2), "peek of the wrong size");
        BT_BODY_CHECK(!br_bootstrap_peek(boot, 0, 9, 0, &v, sizeof(v)), "peek of tag 9");
        br_bootstrap_drop(boot, 0, 7);
        BT_BODY_CHECK(br_bootstrap_queued(boot) == 1, "queued %d after the drop",
                      br_bootstrap_queued(boot));
        BT_BODY_CHECK(br_bootstrap_recv(boot, 0, 8, &v, sizeof(v)) == ncclSuccess && v == 99,
                      "recv of tag 8 after the drop: %d", v);
        BT_BODY_CHECK(br_bootstrap_queued(boot) == 0, "queued %d at the end",
                      br_bootstrap_queued(boot));
        /* Nothing comes on tag 7 now: the watch ends the wait with its error. */
        BT_BODY_CHECK(br_bootstrap_recv_watch(boot, 0, 7, &v, sizeof(v), watch_fn, &w) ==
                          ncclInvalidUsage,
                      "recv_watch did not end with the watch's error");
        BT_BODY_CHECK(w.calls == 2, "the watch ran %d times", w.calls);
    }
    BT_BODY_CHECK(br_bootstrap_barrier(boot) == ncclSuccess, "barrier");
out:
    return ret;
}

START_TEST(test_peek_drop_watch)
{
    bt_run_threads(2, peek_body, NULL);
}
END_TEST

static int count_fds(void)
{
    char path[64];
    int n = 0;

    for (int fd = 0; fd < 4096; fd++) {
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        n += access(path, F_OK) == 0;
    }
    return n;
}

/* Init, traffic and close leave no descriptor behind (the detached root closes its own
 * once it has answered, so wait for it a little). */
START_TEST(test_no_fd_leak)
{
    bt_sendrecv_arg_t a = {.ntags = 4, .big = 100};
    int before = count_fds(), after = -1;

    bt_run_threads(4, bt_sendrecv_body, &a);
    bt_run_threads(3, bt_abort_body, NULL);
    for (double t0 = bt_now_s(); bt_now_s() - t0 < 5.0; bt_sleep_ms(10)) {
        after = count_fds();
        if (after == before) {
            break;
        }
    }
    ck_assert_int_eq(after, before);
}
END_TEST

static Suite *bootstrap_p2p_suite(void)
{
    Suite *s = suite_create("bootstrap");
    TCase *tc = tcase_create("sendrecv");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sendrecv_threads);
    tcase_add_test(tc, test_sendrecv_procs);
    tcase_add_test(tc, test_sendrecv_many);
    tcase_add_test(tc, test_send_concurrent_threads);
    tcase_add_test(tc, test_no_fd_leak);
    tcase_add_test(tc, test_peek_drop_watch);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return bt_suite_run(bootstrap_p2p_suite());
}
