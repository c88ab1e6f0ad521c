/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "mp_hosts": ranks spread round-robin over simulated hosts. Each forked rank
 * sets its own NCCL_HOSTID (hosts A, B, A, B, ...) and meets the others through
 * NCCL_COMM_ID, so the communicator sees several hosts: ranks of a host are adjacent on
 * the ring (ring order differs from rank order) and hosts talk through the socket plugin.
 * Every collective is checked exactly, with small integers in float32 and int32, at
 * sizes that take the one-shot, single-slot and multi-slot ring paths.
 *
 * The test process itself never calls NCCL (its parameters would then be fixed before
 * the fork); the ranks report through their exit status and stderr.
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nccl.h>

#include "brt_check.h"
#include "brt_launch.h"

#define NRANKS 4
#define NHOSTS 2

/* Input element i of rank r: small integers, so every sum is exact in float32. */
static float in_val(int r, size_t i)
{
    return (float)((int)((i * 7 + (size_t)r * 13) % 31) - 15);
}

static int report_wrong(int rank, const char *what, size_t count, size_t i, double got, double want)
{
    fprintf(stderr, "rank %d: %s count %zu: element %zu is %g, expected %g\n", rank, what, count, i,
            got, want);
    return 1;
}

/* One rank's whole run; returns the number of failed checks (0: all good). */
static int rank_run(int rank, const char *comm_id)
{
    static const size_t counts[] = {1, 2, 1000, 4096, 70000, 300001};
    char host[32];
    ncclUniqueId id;
    ncclComm_t comm;
    int bad = 0;

    snprintf(host, sizeof(host), "braid-test-host-%c", 'A' + rank % NHOSTS);
    setenv("NCCL_HOSTID", host, 1);
    setenv("NCCL_COMM_ID", comm_id, 1);
    if (ncclGetUniqueId(&id) != ncclSuccess ||
        ncclCommInitRank(&comm, NRANKS, id, rank) != ncclSuccess) {
        fprintf(stderr, "rank %d: init failed: %s\n", rank, ncclGetLastError(NULL));
        return 1;
    }
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]) && !bad; c++) {
        size_t n = counts[c];
        float *in = malloc(n * NRANKS * sizeof(float)), *out = malloc(n * NRANKS * sizeof(float));
        if (in == NULL || out == NULL) {
            free(in);
            free(out);
            return 1;
        }
        for (size_t i = 0; i < n * NRANKS; i++) {
            in[i] = in_val(rank, i);
        }
        /* AllReduce: out[i] = sum over ranks of in_r[i]. */
        ncclResult_t res = ncclAllReduce(in, out, n, ncclFloat, ncclSum, comm, NULL);
        for (size_t i = 0; i < n && res == ncclSuccess && !bad; i++) {
            double want = 0;
            for (int r = 0; r < NRANKS; r++) {
                want += in_val(r, i);
            }
            bad |= out[i] != want ? report_wrong(rank, "AllReduce", n, i, out[i], want) : 0;
        }
        /* AllGather: block r of the output is rank r's first n inputs. */
        res = res == ncclSuccess ? ncclAllGather(in, out, n, ncclFloat, comm, NULL) : res;
        for (size_t i = 0; i < n * NRANKS && res == ncclSuccess && !bad; i++) {
            double want = in_val((int)(i / n), i % n);
            bad |= out[i] != want ? report_wrong(rank, "AllGather", n, i, out[i], want) : 0;
        }
        /* ReduceScatter: this rank gets the sum of everyone's block `rank`. */
        res = res == ncclSuccess ? ncclReduceScatter(in, out, n, ncclFloat, ncclSum, comm, NULL)
                                 : res;
        for (size_t i = 0; i < n && res == ncclSuccess && !bad; i++) {
            double want = 0;
            for (int r = 0; r < NRANKS; r++) {
                want += in_val(r, (size_t)rank * n + i);
            }
            bad |= out[i] != want ? report_wrong(rank, "ReduceScatter", n, i, out[i], want) : 0;
        }
        /* Broadcast from every root, Reduce to every root. */
        for (int root = 0; root < NRANKS && res == ncclSuccess && !bad; root++) {
            res = ncclBroadcast(in, out, n, ncclFloat, root, comm, NULL);
            for (size_t i = 0; i < n && res == ncclSuccess && !bad; i++) {
                bad |= out[i] != in_val(root, i)
                           ? report_wrong(rank, "Broadcast", n, i, out[i], in_val(root, i))
                           : 0;
            }
            memset(out, 0, n * sizeof(float));
            res = res == ncclSuccess ? ncclReduce(in, out, n, ncclFloat, ncclSum, root, comm, NULL)
                                     : res;
            for (size_t i = 0; i < n && res == ncclSuccess && rank == root && !bad; i++) {
                double want = 0;
                for (int r = 0; r < NRANKS; r++) {
                    want += in_val(r, i);
                }
                bad |= out[i] != want ? report_wrong(rank, "Reduce", n, i, out[i], want) : 0;
            }
        }
        if (res != ncclSuccess) {
            fprintf(stderr, "rank %d: a call with count %zu failed: %s\n", rank, n,
                    ncclGetLastError(comm));
            bad = 1;
        }
        free(in);
        free(out);
    }
    if (bad) {
        ncclCommAbort(comm);
        return bad;
    }
    return ncclCommDestroy(comm) == ncclSuccess ? 0 : 1;
}

START_TEST(test_round_robin_hosts)
{
    char comm_id[64];
    pid_t pids[NRANKS];
    int status[NRANKS], bad = 0;

    int port = brt_free_port();
    ck_assert_int_gt(port, 0);
    snprintf(comm_id, sizeof(comm_id), "127.0.0.1:%d", port);
    for (int r = 0; r < NRANKS; r++) {
        pids[r] = fork();
        ck_assert_int_ge(pids[r], 0);
        if (pids[r] == 0) {
            alarm(240); /* a hang kills the rank, and fails the test with a signal */
            _exit(rank_run(r, comm_id));
        }
    }
    for (int r = 0; r < NRANKS; r++) {
        ck_assert_int_eq(waitpid(pids[r], &status[r], 0), pids[r]);
    }
    for (int r = 0; r < NRANKS; r++) {
        if (!WIFEXITED(status[r]) || WEXITSTATUS(status[r]) != 0) {
            fprintf(stderr, "rank %d: %s %d\n", r, WIFEXITED(status[r]) ? "exit" : "signal",
                    WIFEXITED(status[r]) ? WEXITSTATUS(status[r]) : WTERMSIG(status[r]));
            bad = 1;
        }
    }
    ck_assert_msg(!bad, "ranks over round-robin hosts got wrong results or failed (see stderr)");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mp_hosts");
    TCase *tc = tcase_create("round_robin");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_round_robin_hosts);
    suite_add_tcase(s, tc);
    return brt_suite_run(s);
}
