/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "bootstrap", unique ids and the root: what an id holds and which ids are
 * refused, the socket helpers behind them, intruders that connect to the root or to a
 * rank's listener without the communicator's secret, user errors the root catches (ranks
 * that disagree on the size, a rank that checks in twice), and ids derived from
 * NCCL_COMM_ID. White-box where it must be: bootstrap_int.h gives the root's and the
 * listeners' addresses for the intruder tests.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "bootstrap_int.h"
#include "bootstrap_test_util.h"
#include "util.h"
#include "util_socket.h"

/* ---- unique ids ---- */

START_TEST(test_unique_id_checks)
{
    ncclUniqueId id, bad;
    br_boot_handle_t h;
    br_bootstrap_t *boot = NULL;

    memset(&bad, 0, sizeof(bad));
    ck_assert_int_eq(br_bootstrap_check_unique_id(&bad), ncclInvalidArgument);
    ck_assert_ptr_nonnull(strstr(br_log_last_error(), "all zeros"));
    ck_assert_int_eq(br_bootstrap_init(&bad, 0, 1, &boot), ncclInvalidArgument);
    ck_assert_ptr_null(boot);

    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    ck_assert_int_eq(br_bootstrap_check_unique_id(&id), ncclSuccess);
    memcpy(&h, id.internal, sizeof(h));
    ck_assert(h.magic == BR_BOOT_ID_MAGIC);
    ck_assert(h.secret != 0);
    ck_assert_int_eq(h.root.sa.sa_family, AF_INET);
    ck_assert_int_ne(br_socket_addr_port(&h.root), 0);

    bad = id;
    bad.internal[0] ^= 0x40; /* magic */
    ck_assert_int_eq(br_bootstrap_check_unique_id(&bad), ncclInvalidArgument);
    ck_assert_ptr_nonnull(strstr(br_log_last_error(), "magic"));
    bad = id;
    memset(&((br_boot_handle_t *)(void *)bad.internal)->root, 0, sizeof(br_socket_addr_t));
    ck_assert_int_eq(br_bootstrap_check_unique_id(&bad), ncclInvalidArgument);
    ck_assert_ptr_nonnull(strstr(br_log_last_error(), "family"));
    bad = id;
    bad.internal[100] = 1;
    ck_assert_int_eq(br_bootstrap_check_unique_id(&bad), ncclInvalidArgument);

    /* Two ids never share a secret or a root. */
    ck_assert_int_eq(br_bootstrap_get_unique_id(&bad), ncclSuccess);
    ck_assert(memcmp(&bad, &id, sizeof(id)) != 0);
}
END_TEST

/* ---- intruders ---- */

static int raw_connect(const br_socket_addr_t *addr, br_socket_addr_t *local_p)
{
    int fd = -1;
    socklen_t len = sizeof(*local_p);

    if (br_socket_connect(addr, br_time_ns() + 5000000000ull, &fd) != ncclSuccess) {
        return -1;
    }
    memset(local_p, 0, sizeof(*local_p));
    getsockname(fd, &local_p->sa, &len);
    return fd;
}

/* Wait until the process's last WARN mentions both strings. */
static int wait_warning(const char *a, const char *b)
{
    for (double t0 = bt_now_s(); bt_now_s() - t0 < 10.0; bt_sleep_ms(5)) {
        const char *e = br_log_last_error();
        if (strstr(e, a) != NULL && strstr(e, b) != NULL) {
            return 1;
        }
    }
    return 0;
}

START_TEST(test_root_drops_bad_secret)
{
    ncclUniqueId id;
    br_boot_handle_t h;
    br_socket_addr_t local;
    char junk[64], text[BR_SOCKET_ADDR_STRLEN];
    int fd;

    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    memcpy(&h, id.internal, sizeof(h));
    fd = raw_connect(&h.root, &local);
    ck_assert_int_ge(fd, 0);
    memset(junk, 0x55, sizeof(junk));
    ck_assert_int_eq(br_socket_send_all(fd, junk, sizeof(junk), br_time_ns() + 1000000000ull),
                     ncclSuccess);
    br_socket_addr_str(&local, text, sizeof(text));
    ck_assert_msg(wait_warning("did not present the communicator's secret", text),
                  "no warning naming %s; last error: %s", text, br_log_last_error());
    close(fd);
    /* A connection that closes before saying anything is dropped too. */
    fd = raw_connect(&h.root, &local);
    ck_assert_int_ge(fd, 0);
    close(fd);
    br_socket_addr_str(&local, text, sizeof(text));
    ck_assert_msg(wait_warning("did not present the communicator's secret", text),
                  "no warning naming %s; last error: %s", text, br_log_last_error());
    /* ... and the root still serves the real ranks. */
    {
        bt_rank_job_t jobs[3];
        for (int r = 0; r < 3; r++) {
            jobs[r] = (bt_rank_job_t){.id = id, .rank = r, .nranks = 3, .fn = bt_allgather_body};
        }
        bt_run_jobs(jobs, 3);
        for (int r = 0; r < 3; r++) {
            ck_assert_msg(jobs[r].init_res == ncclSuccess && jobs[r].fn_ret == 0,
                          "rank %d: %d/%d %s", r, jobs[r].init_res, jobs[r].fn_ret, jobs[r].err);
        }
    }
}
END_TEST

/* Rank 0 sends junk to rank 1's listener, then the two still exchange messages. */
static int listener_intruder_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int ret = 0, v = 0, fd = -1;
    char text[BR_SOCKET_ADDR_STRLEN];
    br_socket_addr_t local;

    (void)nranks;
    (void)arg;
    if (rank == 0) {
        fd = raw_connect(&boot->peers[1].info.addr, &local);
        BT_BODY_CHECK(fd >= 0, "raw connect");
        BT_BODY_CHECK(br_socket_send_all(fd, "not the secret!!", 16,
                                         br_time_ns() + 1000000000ull) == ncclSuccess,
                      "junk");
        br_socket_addr_str(&local, text, sizeof(text));
        BT_BODY_CHECK(wait_warning("did not present the communicator's secret", text),
                      "no warning naming %s; last error: %s", text, br_log_last_error());
        BT_BODY_CHECK(br_bootstrap_send(boot, 1, 7, &v, sizeof(v)) == ncclSuccess, "send");
        BT_BODY_CHECK(br_bootstrap_recv(boot, 1, 8, &v, sizeof(v)) == ncclSuccess, "recv");
        BT_BODY_CHECK(v == 42, "reply %d", v);
    } else {
        BT_BODY_CHECK(br_bootstrap_recv(boot, 0, 7, &v, sizeof(v)) == ncclSuccess, "recv");
        v = 42;
        BT_BODY_CHECK(br_bootstrap_send(boot, 0, 8, &v, sizeof(v)) == ncclSuccess, "send");
    }
out:
    if (fd >= 0) {
        close(fd);
    }
    return ret;
}

START_TEST(test_listener_drops_bad_secret)
{
    bt_run_threads(2, listener_intruder_body, NULL);
}
END_TEST

/* ---- user errors the root catches ---- */

START_TEST(test_nranks_mismatch)
{
    bt_rank_job_t jobs[2];
    ncclUniqueId id;

    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    jobs[0] = (bt_rank_job_t){.id = id, .rank = 0, .nranks = 2};
    jobs[1] = (bt_rank_job_t){.id = id, .rank = 1, .nranks = 3, .delay_ms = 50};
    bt_run_jobs(jobs, 2);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(jobs[r].init_res, ncclInvalidUsage);
        ck_assert_msg(strstr(jobs[r].err, "disagree on the number of ranks") != NULL &&
                          strstr(jobs[r].err, "rank 0") != NULL &&
                          strstr(jobs[r].err, "rank 1") != NULL,
                      "rank %d: %s", r, jobs[r].err);
        ck_assert_msg(jobs[r].secs < 10.0, "took %.1f s", jobs[r].secs);
    }
}
END_TEST

START_TEST(test_duplicate_rank)
{
    bt_rank_job_t jobs[2];
    ncclUniqueId id;

    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    jobs[0] = (bt_rank_job_t){.id = id, .rank = 1, .nranks = 3};
    jobs[1] = (bt_rank_job_t){.id = id, .rank = 1, .nranks = 3, .delay_ms = 50};
    bt_run_jobs(jobs, 2);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(jobs[r].init_res, ncclInvalidUsage);
        ck_assert_msg(strstr(jobs[r].err, "rank 1 checked in twice") != NULL, "%s", jobs[r].err);
    }
}
END_TEST

/* ---- NCCL_COMM_ID ---- */

START_TEST(test_comm_id)
{
    char text[64];
    ncclUniqueId id, id2;
    br_boot_handle_t h;
    bt_rank_job_t jobs[4];
    const char *seen;

    snprintf(text, sizeof(text), "127.0.0.1:%d", bt_free_port());
    setenv("NCCL_COMM_ID", text, 1);
    seen = BR_PARAM_STR(COMM_ID);
    if (seen == NULL || strcmp(seen, text) != 0) {
        /* Parameters load once per process: only a fresh (forked) test can set one. */
        fprintf(stderr, "test_comm_id: parameters already loaded (CK_FORK=no?): not run\n");
        return;
    }
    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    ck_assert_int_eq(br_bootstrap_check_unique_id(&id), ncclSuccess);
    memcpy(&h, id.internal, sizeof(h));
    ck_assert_uint_eq(h.flags & BR_BOOT_FLAG_COMM_ID, BR_BOOT_FLAG_COMM_ID);
    /* Every process derives the same id from the same NCCL_COMM_ID. */
    ck_assert_int_eq(br_bootstrap_get_unique_id(&id2), ncclSuccess);
    ck_assert(memcmp(&id, &id2, sizeof(id)) == 0);

    /* Threads, with rank 0 (the root's host) last to start: the others retry. */
    for (int r = 0; r < 4; r++) {
        jobs[r] = (bt_rank_job_t){.id = id,
                                  .rank = r,
                                  .nranks = 4,
                                  .fn = bt_allgather_body,
                                  .delay_ms = r == 0 ? 300 : 0};
    }
    bt_run_jobs(jobs, 4);
    for (int r = 0; r < 4; r++) {
        ck_assert_msg(jobs[r].init_res == ncclSuccess && jobs[r].fn_ret == 0, "rank %d: %s", r,
                      jobs[r].err);
    }
    /* Then processes, on the same port again. The first root thread is detached and may
     * still be freeing its memory: give it time to exit, because forking while another
     * thread holds AddressSanitizer's allocator lock deadlocks the child (glibc's malloc
     * has fork handlers, ASan's in GCC 12 does not). */
    bt_sleep_ms(200);
    bt_run_procs_id(&id, 3, bt_allgather_body, NULL);
}
END_TEST

/* ---- socket helpers ---- */

START_TEST(test_socket_addr_parse)
{
    br_socket_addr_t a;
    char text[BR_SOCKET_ADDR_STRLEN];

    ck_assert_int_eq(br_socket_addr_parse("127.0.0.1:1234", &a), ncclSuccess);
    ck_assert_str_eq(br_socket_addr_str(&a, text, sizeof(text)), "127.0.0.1:1234");
    ck_assert_int_eq(br_socket_addr_parse("[::1]:80", &a), ncclSuccess);
    ck_assert_int_eq(a.sa.sa_family, AF_INET6);
    ck_assert_str_eq(br_socket_addr_str(&a, text, sizeof(text)), "[::1]:80");
    ck_assert_int_eq(br_socket_addr_parse("::1:81", &a), ncclSuccess);
    ck_assert_int_eq(br_socket_addr_port(&a), 81);
    ck_assert_int_eq(br_socket_addr_parse("localhost:5000", &a), ncclSuccess);
    ck_assert_int_eq(br_socket_addr_port(&a), 5000);
    ck_assert(br_socket_addr_is_valid(&a));
    ck_assert_int_eq(br_socket_addr_parse("127.0.0.1", &a), ncclInvalidArgument);
    ck_assert_int_eq(br_socket_addr_parse("127.0.0.1:0", &a), ncclInvalidArgument);
    ck_assert_int_eq(br_socket_addr_parse("127.0.0.1:70000", &a), ncclInvalidArgument);
    ck_assert_int_eq(br_socket_addr_parse(":80", &a), ncclInvalidArgument);
    ck_assert_int_eq(br_socket_addr_parse("[::1:80", &a), ncclInvalidArgument);
    ck_assert_int_eq(br_socket_addr_parse("no.such.host.invalid:80", &a), ncclInvalidArgument);
}
END_TEST

START_TEST(test_socket_iface_and_io)
{
    br_socket_addr_t addr, bound, peer;
    char name[BR_SOCKET_IFNAME_LEN];
    int lfd = -1, cfd = -1, afd = -1;
    char buf[8];
    double t0;

    /* The CTest environment sets NCCL_SOCKET_IFNAME=lo. */
    ck_assert_int_eq(br_socket_iface_pick(NULL, name, sizeof(name), &addr), ncclSuccess);
    ck_assert_str_eq(name, "lo");
    ck_assert_int_eq(br_socket_listen(&addr, &lfd, &bound), ncclSuccess);
    ck_assert(br_socket_addr_is_valid(&bound));
    /* Nobody connects: accept gives up at its deadline. */
    t0 = bt_now_s();
    ck_assert_int_eq(br_socket_accept(lfd, br_time_ns() + 200000000ull, &afd, &peer), ncclTimeout);
    ck_assert_int_eq(errno, ETIMEDOUT);
    ck_assert(bt_now_s() - t0 >= 0.15);
    ck_assert_int_eq(br_socket_connect(&bound, br_time_ns() + 1000000000ull, &cfd), ncclSuccess);
    ck_assert_int_eq(br_socket_accept(lfd, br_time_ns() + 1000000000ull, &afd, &peer), ncclSuccess);
    ck_assert_int_eq(br_socket_send_all(cfd, "abcd", 4, br_time_ns() + 1000000000ull), ncclSuccess);
    ck_assert_int_eq(br_socket_recv_all(afd, buf, 4, br_time_ns() + 1000000000ull), ncclSuccess);
    ck_assert(memcmp(buf, "abcd", 4) == 0);
    /* Nothing more is coming: recv_all times out; then the peer closes: reset. */
    ck_assert_int_eq(br_socket_recv_all(afd, buf, 4, br_time_ns() + 100000000ull), ncclTimeout);
    ck_assert_int_eq(errno, ETIMEDOUT);
    br_socket_close(&cfd);
    ck_assert_int_eq(cfd, -1);
    ck_assert_int_eq(br_socket_recv_all(afd, buf, 4, br_time_ns() + 1000000000ull),
                     ncclRemoteError);
    ck_assert_int_eq(errno, ECONNRESET);
    br_socket_close(&afd);
    br_socket_close(&lfd);
}
END_TEST

static Suite *bootstrap_root_suite(void)
{
    Suite *s = suite_create("bootstrap");
    TCase *tc;

    tc = tcase_create("unique_id");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_unique_id_checks);
    tcase_add_test(tc, test_socket_addr_parse);
    tcase_add_test(tc, test_socket_iface_and_io);
    suite_add_tcase(s, tc);

    tc = tcase_create("security");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_root_drops_bad_secret);
    tcase_add_test(tc, test_listener_drops_bad_secret);
    tcase_add_test(tc, test_nranks_mismatch);
    tcase_add_test(tc, test_duplicate_rank);
    suite_add_tcase(s, tc);

    tc = tcase_create("comm_id");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_comm_id);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return bt_suite_run(bootstrap_root_suite());
}
