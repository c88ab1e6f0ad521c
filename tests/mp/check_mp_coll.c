/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "mp_coll": every collective and send/recv pattern, checked against the
 * reference of tests/common, over one communicator per rank count that lives for the
 * whole case list. How the ranks run comes from the command line, so CTest can run the
 * same binary over each transport and rank layout:
 *
 *   check_mp_coll --mode proc|threads|initall --ranks 1,2,3 --matrix full,thin,big,huge
 *                 [--timeout s] [--algo SPEC] [--proto SPEC] [--hosts H]
 *
 *   proc      one forked process per rank, ncclCommInitRank (shm, or the net plugin when
 *             the environment disables shm and p2p)
 *   threads   one thread per rank in this process, ncclCommInitRank
 *   initall   ncclCommInitAll; this thread issues every rank's call inside one
 *             ncclGroupStart/End, as single-process multi-GPU NCCL programs do
 *
 * --algo and --proto set NCCL_ALGO and NCCL_PROTO for every rank ('|' stands for ';',
 * which CTest's argument lists cannot carry). --hosts H (proc mode) puts rank r on
 * simulated host r % H (its own NCCL_HOSTID, set before its first NCCL call), so the ring
 * is not in rank order and hosts talk through the net plugin.
 *
 * Each rank count is one loop iteration of the TCase, so a failure names it.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brt_check.h"
#include "brt_coll.h"
#include "brt_launch.h"

static struct {
    int mode;
    int ranks[BRT_MAX_RANKS];
    int nranks_list;
    unsigned matrices; /* bit per brt_matrix_t */
    double timeout;    /* per rank count, before brt_time_scale() */
    int hosts;         /* simulated hosts (proc mode), 0: the real one */
} cfg;

#define ERR_LEN 16384

/* Run every selected matrix on comms (nlocal of them driven by this thread). */
static int run_matrices(ncclComm_t *comms, int nlocal, int nranks, brt_rank_ctx_t *ctx, char *err,
                        size_t errlen)
{
    int bad = 0;
    size_t used = 0;
    err[0] = '\0';
    for (int m = BRT_MATRIX_FULL; m <= BRT_MATRIX_HUGE; m++) {
        brt_case_t *cases = NULL;
        size_t ncases;
        if (!(cfg.matrices >> m & 1u)) {
            continue;
        }
        ncases = brt_cases_build((brt_matrix_t)m, nranks, &cases);
        int ret = brt_cases_run(comms, nlocal, cases, ncases, ctx, err + used, errlen - used);
        free(cases);
        if (ret != 0) {
            bad = bad > ret ? bad : ret;
            used = strlen(err);
            if (used + 2 < errlen) {
                err[used++] = '\n';
                err[used] = '\0';
            }
        }
        if (ret == 2) {
            break; /* a call failed: the ranks may no longer agree on what comes next */
        }
    }
    return bad;
}

/* A rank of the proc and threads modes. */
static int rank_body(brt_rank_ctx_t *ctx)
{
    ncclComm_t comm = NULL;
    ncclResult_t res;
    char *err;
    int bad;

    if (cfg.hosts > 0) {
        char host[32];
        snprintf(host, sizeof(host), "brt-host-%d", ctx->rank % cfg.hosts);
        setenv("NCCL_HOSTID", host, 1);
    }
    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    err = malloc(ERR_LEN);
    if (err == NULL) {
        brt_fail(ctx, "out of memory");
        return 1;
    }
    bad = run_matrices(&comm, 1, ctx->nranks, ctx, err, ERR_LEN);
    if (bad) {
        brt_fail(ctx, "%s", err);
    }
    free(err);
    if (bad == 2) {
        /* A call failed: leave, peers may still be inside a call with us. */
        ncclCommAbort(comm);
        return 1;
    }
    brt_doing(ctx, "ncclCommFinalize/ncclCommDestroy");
    res = ncclCommFinalize(comm);
    if (res != ncclSuccess) {
        brt_fail(ctx, "ncclCommFinalize returned %d: %s", (int)res, ncclGetLastError(comm));
        bad = 1;
    }
    res = ncclCommDestroy(comm);
    if (res != ncclSuccess) {
        brt_fail(ctx, "ncclCommDestroy returned %d: %s", (int)res, ncclGetLastError(NULL));
        bad = 1;
    }
    return bad;
}

static void run_initall(int n, double timeout)
{
    ncclComm_t comms[BRT_MAX_RANKS];
    brt_report_t rep;
    char *err = malloc(ERR_LEN);
    int bad;

    ck_assert_ptr_nonnull(err);
    memset(&rep, 0, sizeof(rep));
    snprintf(rep.doing, sizeof(rep.doing), "in ncclCommInitAll(%d)", n);
    brt_watchdog_start(timeout, &rep);
    ncclResult_t res = ncclCommInitAll(comms, n, NULL);
    ck_assert_msg(res == ncclSuccess, "ncclCommInitAll(%d) returned %d: %s", n, (int)res,
                  ncclGetLastError(NULL));
    brt_rank_ctx_t ctx = {.rank = 0, .nranks = n, .report = &rep, .all = &rep};
    bad = run_matrices(comms, n, n, &ctx, err, ERR_LEN);
    snprintf(rep.doing, sizeof(rep.doing), "destroying the %d communicators", n);
    for (int r = 0; r < n; r++) {
        if (bad == 2) {
            ncclCommAbort(comms[r]);
            continue;
        }
        ck_assert_int_eq(ncclCommFinalize(comms[r]), ncclSuccess);
        ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
    }
    brt_watchdog_stop();
    if (bad) {
        fprintf(stderr, "%s\n", err);
    }
    ck_assert_msg(!bad, "%d ranks (ncclCommInitAll, one thread, grouped):\n%s", n,
                  brt_clip(err, 3000));
    free(err);
}

START_TEST(test_coll_matrix)
{
    int n = cfg.ranks[_i];
    double timeout = cfg.timeout * brt_time_scale();
    char *out = malloc(4 * ERR_LEN);
    int bad = 0;

    ck_assert_ptr_nonnull(out);
    out[0] = '\0';
    switch (cfg.mode) {
    case BRT_MODE_PROC: bad = brt_procs_run(n, rank_body, NULL, timeout, out, 4 * ERR_LEN); break;
    case BRT_MODE_THREADS:
        bad = brt_threads_run(n, rank_body, NULL, timeout, out, 4 * ERR_LEN);
        break;
    default: run_initall(n, timeout); break;
    }
    ck_assert_msg(!bad, "%d ranks (%s):\n%s", n,
                  cfg.mode == BRT_MODE_PROC ? "processes" : "threads", brt_clip(out, 3000));
    free(out);
}
END_TEST

static int parse_args(int argc, char **argv)
{
    cfg.mode = BRT_MODE_PROC;
    cfg.timeout = 300;
    cfg.matrices = 1u << BRT_MATRIX_THIN;
    cfg.nranks_list = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (brt_layout_option(k, v, &cfg.mode, cfg.ranks, &cfg.nranks_list)) {
            continue;
        } else if (strcmp(k, "--matrix") == 0) {
            cfg.matrices = 0;
            cfg.matrices |= strstr(v, "full") ? 1u << BRT_MATRIX_FULL : 0;
            cfg.matrices |= strstr(v, "thin") ? 1u << BRT_MATRIX_THIN : 0;
            cfg.matrices |= strstr(v, "big") ? 1u << BRT_MATRIX_BIG : 0;
            cfg.matrices |= strstr(v, "huge") ? 1u << BRT_MATRIX_HUGE : 0;
        } else if (strcmp(k, "--timeout") == 0) {
            cfg.timeout = atof(v);
        } else if (brt_select_option(k, v)) {
            continue;
        } else if (strcmp(k, "--hosts") == 0) {
            cfg.hosts = atoi(v);
        } else {
            fprintf(stderr, "unknown option %s\n", k);
            return -1;
        }
    }
    if (cfg.nranks_list == 0) {
        cfg.ranks[cfg.nranks_list++] = 2;
    }
    if (cfg.hosts > 0 && cfg.mode != BRT_MODE_PROC) {
        fprintf(stderr, "--hosts needs --mode proc (a process reads NCCL_HOSTID once)\n");
        return -1;
    }
    return 0;
}

static Suite *mp_coll_suite(void)
{
    Suite *s = suite_create("mp_coll");
    TCase *tc = tcase_create("matrix");
    tcase_set_timeout(tc, cfg.timeout * brt_time_scale() + 60);
    tcase_add_loop_test(tc, test_coll_matrix, 0, cfg.nranks_list);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (parse_args(argc, argv) != 0) {
        return 2;
    }
    return brt_suite_run(mp_coll_suite());
}
