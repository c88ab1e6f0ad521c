/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared by the bootstrap Check binaries (check_bootstrap_*.c): running ranks as threads
 * of this process or as forked processes over loopback, the rank bodies that more than
 * one binary uses, and small helpers. Rank bodies run off the main thread (or in a
 * child), so they report failures by return code and stderr through BT_BODY_CHECK; the
 * test thread makes the assertions.
 */
#ifndef BR_BOOTSTRAP_TEST_UTIL_H_
#define BR_BOOTSTRAP_TEST_UTIL_H_

#include <check.h>
#include <stddef.h>
#include <stdio.h>

#include "bootstrap.h"

#define BT_MAX_RANKS 40

/* A rank body: runs after a successful init, returns 0 for pass. */
typedef int (*bt_rank_fn_t)(br_bootstrap_t *boot, int rank, int nranks, void *arg);

/* One rank run by a thread: what it was given and what came of it. */
typedef struct {
    ncclUniqueId id;
    int rank;
    int nranks;
    int delay_ms; /* sleep before init */
    bt_rank_fn_t fn;
    void *arg;
    ncclResult_t init_res;
    int fn_ret;
    double secs; /* time init took */
    char err[1024];
} bt_rank_job_t;

/* Argument of bt_sendrecv_body: tags per peer and the size of the big message. */
typedef struct {
    int ntags;
    size_t big;
} bt_sendrecv_arg_t;

/* In a rank body (which has `int rank`, `int ret` and an `out:` label): on failure, print
 * the rank, place and message to stderr, set ret to 1 and go to out. */
#define BT_BODY_CHECK(cond, ...)                                                                   \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__);                         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            ret = 1;                                                                               \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* Sleep ms milliseconds, resuming after signals. */
void bt_sleep_ms(int ms);

/* Monotonic time in seconds. */
double bt_now_s(void);

/* Run the jobs, one thread each, and wait for all of them; results land in the jobs. */
void bt_run_jobs(bt_rank_job_t *jobs, int njobs);

/* nranks ranks as threads on a fresh id, all asserted to succeed. */
void bt_run_threads(int nranks, bt_rank_fn_t fn, void *arg);

/* nranks ranks as forked processes on id (its root thread lives in this process), all
 * asserted to exit cleanly. */
void bt_run_procs_id(const ncclUniqueId *id, int nranks, bt_rank_fn_t fn, void *arg);

/* The same on a fresh id, made after every rank is forked (so no thread is copied). */
void bt_run_procs(int nranks, bt_rank_fn_t fn, void *arg);

/* The same with rank r on simulated host hosts[r] (its NCCL_HOSTID, set before init; the
 * parameters are read after the fork). */
void bt_run_procs_hosts(int nranks, const char *const *hosts, bt_rank_fn_t fn, void *arg);

/* The byte a test message from src to dst on tag carries at offset i. */
unsigned char bt_pattern(int src, int dst, int tag, size_t i);

/* A loopback TCP port that was free a moment ago. */
int bt_free_port(void);

/* Allgathers of several slot sizes, a barrier and the peers' pids and host. */
int bt_allgather_body(br_bootstrap_t *boot, int rank, int nranks, void *arg);

/* Every rank sends a->ntags tagged messages and one of a->big bytes to every rank (itself
 * included) before receiving any, then checks a size mismatch fails. */
int bt_sendrecv_body(br_bootstrap_t *boot, int rank, int nranks, void *arg);

/* Rank 0 sends an abort notice once the others are ready; they must see it and fail a
 * pending recv at once. */
int bt_abort_body(br_bootstrap_t *boot, int rank, int nranks, void *arg);

/* Run the suite (which it frees) with CK_NORMAL output; the process exit code. */
int bt_suite_run(Suite *s);

#endif /* BR_BOOTSTRAP_TEST_UTIL_H_ */
