/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Seeded chaos: each iteration draws, from one 64-bit seed, a rank count (2-6), a layout
 * (processes, a thread per rank, or ncclCommInitAll driven by one thread), a transport
 * (shared memory, or sockets with NCCL_P2P_DISABLE/NCCL_SHM_DISABLE), BRAID_BOOTSTRAP_SHM,
 * a short program of collectives on host memory (every collective of tests/common,
 * Send/Recv groups, braidAllGatherV and braidAlltoAllV, 0 to 4 MiB) and one fault:
 *   kill      a victim process _exit()s or SIGKILLs itself before init, in init
 *             (BRAID_TEST_EXIT_AT), mid-call (a timer thread), between calls or in destroy;
 *   abort     a thread of the victim calls ncclCommAbort or ncclCommRevoke while its
 *   revoke    main thread is at a drawn step;
 *   mismatch  the victim makes a different call (count, type, op, root or collective);
 *   none      the control: every call must succeed with the right result.
 * The oracle (judge() in chaos_mp_oracle.c): no rank dies of a signal or hangs past the
 * deadline, no process outlives its iteration, every step a rank completes gives the right
 * result, and
 *   kill/abort/revoke: a survivor completes no step (init counting as one) that the victim
 *     had not entered when the fault struck (read after the abort returned), except steps
 *     it can finish without the victim (step_needs_all(): count 0, a rank that only sends,
 *     a Broadcast whose root lives), and every error it gets names the victim ("rank V",
 *     also inside "rank R reported: ...");
 *   mismatch: each rank either fails or returns the right result for its own call, every
 *     error names the victim, and at least one rank fails (a call or destroy), unless
 *     every call's result is right and nobody waits (mismatch_unseen(): a Gather or
 *     Reduce without a root, a Scatter with two, sends nobody receives);
 *   none: everything succeeds.
 * Each iteration runs in a fresh process of this program (so its environment, read once
 * by the library, can differ), in a process group of its own that must be empty after.
 * BRAID_CHAOS_SEED (first seed; iteration i uses seed + i) and BRAID_CHAOS_ITERS override
 * --seed and --iters; a failure prints its seed, so BRAID_CHAOS_SEED=S BRAID_CHAOS_ITERS=1
 * runs it again; --repeat R runs each seed R times (a race that needs several tries).
 * This file runs the iterations (each in a process of its own) and the program's options;
 * the scenario is drawn in chaos_mp_draw.c, the ranks run it in chaos_mp_rank.c, and
 * chaos_mp_oracle.c judges what they did (chaos_mp.h holds what they share).
 */
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nccl.h>

#include "brt_launch.h"
#include "chaos_mp.h"

ch_shared_t *g_sh;

/* ---- one iteration (in its own process) ------------------------------------------- */

static int run_iteration(uint64_t seed, int verbose)
{
    ch_scn_t *s;
    char launch_err[4096] = "";
    double scale = brt_time_scale();
    double deadline_s = 8 * CH_TIMEOUT_S * scale;
    int bad;

    g_sh = mmap(NULL, sizeof(*g_sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_sh == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(g_sh, 0, sizeof(*g_sh));
    s = &g_sh->s;
    scn_draw(s, seed);
    for (int r = 0; r < CH_MAX_RANKS; r++) {
        g_sh->out[r].failed_at = -1;
    }
    if (s->layout == CH_PROC) {
        brt_procs_t p;
        if (brt_procs_start(&p, s->nranks, rank_body, NULL, launch_err, sizeof(launch_err)) == 0) {
            char out[8192];
            /* The victim may end by SIGKILL; its exit status is not judged. */
            unsigned ok = s->fault == CH_KILL ? 1u << s->victim : 0;
            brt_procs_wait(&p, brt_now() + deadline_s, ok, out, sizeof(out), 0);
            /* Exit statuses: a rank that died of a signal or hung is a failure, except the
             * victim of a kill (which exits 3 or dies of SIGKILL on purpose). */
            char *line = out;
            while (line && *line) {
                char *nl = strchr(line, '\n');
                int r = -1;
                if (sscanf(line, "rank %d/", &r) == 1 && !(s->fault == CH_KILL && r == s->victim)) {
                    size_t used = strlen(launch_err);
                    snprintf(launch_err + used, sizeof(launch_err) - used, "%.*s\n",
                             nl ? (int)(nl - line) : (int)strlen(line), line);
                }
                line = nl ? nl + 1 : NULL;
            }
        }
    } else {
        alarm((unsigned)(deadline_s + 30));
        if (s->layout == CH_THREADS) {
            brt_threads_run(s->nranks, rank_body, NULL, deadline_s, launch_err, sizeof(launch_err));
        } else {
            run_program(s, NULL, 0, s->nranks);
        }
    }
    bad = judge(s, launch_err, stderr);
    if (bad || verbose) {
        fprintf(stderr, "chaos: seed %" PRIu64 " %s\n", seed, bad ? "FAILED" : "passed");
        scn_describe(s, stderr);
        report_ranks(s, stderr);
    }
    return bad;
}

/* ---- the driver ------------------------------------------------------------------- */

static void set_env(const ch_scn_t *s)
{
    char v[32];
    snprintf(v, sizeof(v), "%d", CH_TIMEOUT_S);
    setenv("BRAID_TIMEOUT", v, 1);
    setenv("BRAID_BOOTSTRAP_TIMEOUT", v, 1);
    setenv("BRAID_BOOTSTRAP_SHM", s->boot_shm ? "1" : "0", 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    setenv("BRAID_WAIT_WARN", "0", 1);
    if (s->small_fifo) {
        setenv("NCCL_BUFFSIZE", "65536", 1);
    }
    if (s->net) {
        setenv("NCCL_P2P_DISABLE", "1", 1);
        setenv("NCCL_SHM_DISABLE", "1", 1);
        setenv("NCCL_NET_PLUGIN", "socket", 1);
    }
}

/* Run seed's iteration in a child process (own process group, own environment); 0 when
 * it passed. */
static int spawn_iteration(const char *self, uint64_t seed, int verbose)
{
    ch_scn_t s;
    char arg[32];
    double scale = brt_time_scale();
    double deadline = brt_now() + 10 * CH_TIMEOUT_S * scale + 30;
    int st = 0, bad = 0;
    pid_t pid;

    scn_draw(&s, seed);
    snprintf(arg, sizeof(arg), "%" PRIu64, seed);
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        set_env(&s);
        execl(self, self, "--one", arg, verbose ? "--verbose" : NULL, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            break;
        }
        if (brt_now() > deadline) {
            fprintf(stderr, "chaos: seed %" PRIu64 ": the iteration hung past %.0f s; killed\n",
                    seed, 10 * CH_TIMEOUT_S * scale + 30);
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            bad = 1;
            break;
        }
        brt_sleep_ms(20);
    }
    if (!bad && WIFSIGNALED(st)) {
        fprintf(stderr, "chaos: seed %" PRIu64 ": the iteration process died of signal %d\n", seed,
                WTERMSIG(st));
        bad = 1;
    } else if (!bad && WEXITSTATUS(st) != 0) {
        bad = 1;
    }
    /* No rank may outlive its iteration (a rank that hung was killed by the iteration). */
    for (int i = 0; i < 50 && kill(-pid, 0) == 0; i++) {
        brt_sleep_ms(20);
    }
    if (kill(-pid, 0) == 0) {
        fprintf(stderr, "chaos: seed %" PRIu64 ": processes of the iteration outlived it\n", seed);
        kill(-pid, SIGKILL);
        bad = 1;
    }
    if (bad) {
        fprintf(stderr,
                "chaos: seed %" PRIu64 " failed; run it again with "
                "BRAID_CHAOS_SEED=%" PRIu64 " BRAID_CHAOS_ITERS=1\n",
                seed, seed);
        scn_describe(&s, stderr);
    }
    return bad;
}

static uint64_t num_arg(const char *env, const char *v, uint64_t dflt)
{
    const char *e = getenv(env);
    if (e != NULL && *e) {
        v = e;
    }
    return v != NULL ? strtoull(v, NULL, 0) : dflt;
}

int main(int argc, char **argv)
{
    const char *seed_arg = NULL, *iters_arg = NULL;
    int repeat = 1;
    int verbose = 0, nbad = 0;
    uint64_t seed, iters;
    double t0 = brt_now();

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--one") == 0 && i + 1 < argc) {
            return run_iteration(strtoull(argv[i + 1], NULL, 0),
                                 i + 2 < argc && strcmp(argv[i + 2], "--verbose") == 0);
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed_arg = argv[++i];
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters_arg = argv[++i];
        } else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
            repeat = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--verbose") == 0) {
            verbose = 1;
        } else {
            fprintf(stderr,
                    "usage: %s [--seed S] [--iters N] [--repeat R] [--verbose] "
                    "(BRAID_CHAOS_SEED, BRAID_CHAOS_ITERS override)\n",
                    argv[0]);
            return 2;
        }
    }
    seed = num_arg("BRAID_CHAOS_SEED", seed_arg, 1);
    iters = num_arg("BRAID_CHAOS_ITERS", iters_arg, 10);
    for (uint64_t i = 0; i < iters * (uint64_t)(repeat > 0 ? repeat : 1); i++) {
        double t = brt_now();
        int bad = spawn_iteration("/proc/self/exe", seed + i % iters, verbose);
        nbad += bad;
        printf("chaos: seed %" PRIu64 " %s (%.2f s)\n", seed + i % iters, bad ? "FAILED" : "ok",
               brt_now() - t);
        fflush(stdout);
    }
    printf("chaos: %d of %" PRIu64 " iterations failed (seeds %" PRIu64 "..%" PRIu64 ", %.1f s)\n",
           nbad, iters * (uint64_t)(repeat > 0 ? repeat : 1), seed, seed + iters - 1,
           brt_now() - t0);
    return nbad ? 1 : 0;
}
