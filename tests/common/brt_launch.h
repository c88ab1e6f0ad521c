/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Running N ranks for a test: as forked processes that inherit a unique id made by the
 * caller (the way MPI programs pass it around), or as threads of this process, one per
 * rank. Each rank gets a report slot (shared memory for processes) where it records what
 * it is doing and why it failed; the caller waits with a deadline, kills processes that
 * overrun it, and gets one line per rank that failed, hung or died. A rank body returns 0
 * for pass. Check's own fork and timeout stay in force around all this.
 */
#ifndef BRT_LAUNCH_H_
#define BRT_LAUNCH_H_

#include <stddef.h>
#include <sys/types.h>

#include <nccl.h>

#define BRT_MAX_RANKS 16

/* What a rank tells the test driver; lives in memory shared with the parent. */
typedef struct {
    volatile int done;      /* the body returned (threads) */
    volatile int progress;  /* body-defined counter, e.g. iterations completed */
    volatile int result;    /* ncclResult_t of the call that failed, if one did */
    volatile double t_mark; /* body-defined time stamp (brt_now()), e.g. when a call failed */
    char doing[256];        /* what the rank is doing now, for a hang report */
    char msg[3072];         /* why it failed */
} brt_report_t;

typedef struct brt_rank_ctx {
    int rank;
    int nranks;
    ncclUniqueId id;
    brt_report_t *report; /* this rank's slot */
    brt_report_t *all;    /* every rank's slot, indexed by rank */
    void *arg;            /* the caller's argument */
} brt_rank_ctx_t;

typedef int (*brt_rank_fn_t)(brt_rank_ctx_t *ctx);

/* A set of forked ranks in flight. */
typedef struct {
    int nranks;
    pid_t pids[BRT_MAX_RANKS];
    int status[BRT_MAX_RANKS];
    int exited[BRT_MAX_RANKS];
    brt_report_t *reports; /* MAP_SHARED, nranks slots */
} brt_procs_t;

/* The options that choose algorithms for a whole run: "--algo SPEC" sets NCCL_ALGO and
 * "--proto SPEC" NCCL_PROTO ('|' in SPEC stands for ';', which CTest's argument lists
 * cannot carry). Returns 1 when k is one of them (and sets the variable), 0 otherwise.
 * Call before the first NCCL call of the process. */
int brt_select_option(const char *k, const char *v);

/* Rank layouts of the multi-rank tests: forked processes, threads with ncclCommInitRank,
 * or one thread driving every rank of ncclCommInitAll. */
enum { BRT_MODE_PROC, BRT_MODE_THREADS, BRT_MODE_INITALL };

/* "--mode proc|threads|initall" sets *mode_p, "--ranks 1,2,5" appends to ranks (up to
 * BRT_MAX_RANKS, count in *nranks_p). Returns 1 when k is one of them, 0 otherwise. */
int brt_layout_option(const char *k, const char *v, int *mode_p, int *ranks, int *nranks_p);

/* Seconds on CLOCK_MONOTONIC (comparable between processes of one host). */
double brt_now(void);
/* Sleep for ms milliseconds. */
void brt_sleep_ms(int ms);
/* A TCP port of 127.0.0.1 that nobody holds right now (the kernel picks it), for
 * NCCL_COMM_ID; -1 (with a message on stderr) when none can be had. */
int brt_free_port(void);

/* Append a formatted line to the rank's failure message (also printed to stderr). */
void brt_fail(brt_rank_ctx_t *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Record what the rank is doing now. */
void brt_doing(brt_rank_ctx_t *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ncclCommInitRank for ctx's rank; on failure records the code and ncclGetLastError. */
ncclResult_t brt_rank_init(brt_rank_ctx_t *ctx, ncclComm_t *comm);

/*
 * Fork nranks children running fn (each exits with fn's result), then make a unique id and
 * hand it to them through shared memory (forking first: see brt_launch.c), and return at
 * once. Returns 0, or -1 with the reason in err if a fork or the id failed.
 */
int brt_procs_start(brt_procs_t *p, int nranks, brt_rank_fn_t fn, void *arg, char *err,
                    size_t errlen);
/* Has rank r's process exited (reaps it if so)? */
int brt_procs_exited(brt_procs_t *p, int r);
/* SIGKILL rank r's process (it is reaped by brt_procs_wait). */
void brt_procs_kill(brt_procs_t *p, int r);
/*
 * Wait until every process exited or deadline_s (from brt_now()) passed; kill the rest.
 * Ranks listed in `killed_ok` (bitmask) may die by SIGKILL without failing the run.
 * Returns 0 if every other rank exited 0, else 1 with one line per bad rank in out.
 * Frees the shared reports unless keep_reports is set (then brt_procs_free does).
 */
int brt_procs_wait(brt_procs_t *p, double deadline_s, unsigned killed_ok, char *out, size_t outlen,
                   int keep_reports);
void brt_procs_free(brt_procs_t *p);

/* brt_procs_start + brt_procs_wait with a deadline timeout_s from now. */
int brt_procs_run(int nranks, brt_rank_fn_t fn, void *arg, double timeout_s, char *out,
                  size_t outlen);

/*
 * One thread per rank of this process, sharing a unique id made here; waits at most
 * timeout_s. Returns 0 if every body returned 0, else 1 with a line per bad rank in out.
 * A thread still running at the deadline is reported and left running (the Check child
 * exits after the failed assertion, which ends it).
 */
int brt_threads_run(int nranks, brt_rank_fn_t fn, void *arg, double timeout_s, char *out,
                    size_t outlen);

/*
 * A thread that, if brt_watchdog_stop is not called within timeout_s, prints what `rep`
 * says this process is doing and ends the process with exit status 3; for tests whose
 * ranks are all driven by the calling thread, so a hang still says where it was.
 */
void brt_watchdog_start(double timeout_s, const brt_report_t *rep);
void brt_watchdog_stop(void);

/* How much slower this build runs than an optimised one (sanitizers: 4); deadlines and
 * Check timeouts are multiplied by it. */
double brt_time_scale(void);

/* Does text name rank r ("rank 2", "ranks 1, 2", "rank(s): 0 2", case-insensitive)? */
int brt_text_names_rank(const char *text, int r);
/* Cut text to at most max bytes (Check refuses longer assertion messages), ending it with
 * a note that the rest went to stderr; returns text. */
char *brt_clip(char *text, size_t max);
/* Case-insensitive substring search. */
int brt_text_has(const char *text, const char *needle);

#endif /* BRT_LAUNCH_H_ */
