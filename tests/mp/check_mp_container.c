/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "mp_container": ranks of one host (same host name and boot id) in
 * containers of their own, made here with unshare(2) as root: a mount namespace with its
 * own tmpfs on /dev/shm (what a pod or `docker run --uts=host --network=host` without
 * --ipc=host gets), and a pid namespace (with its own /proc, and its own IPC namespace).
 * Each container is a process that forks its ranks, so the ranks of one container share
 * its /dev/shm and pids. Every rank runs AllReduce, AllGather, braidAlltoAllV and a
 * Send/Recv exchange with every other rank, checked exactly against values computed
 * here; the test then reads each rank's NCCL_DEBUG=INFO log for the path each pair took:
 * shared memory within a /dev/shm, the network across.
 *
 * The cases "dead_*" run 3 to 5 ranks on the host with BRAID_TEST_EXIT_AT on one of them:
 * it ends during the bootstrap's host-memory setup, and the others must fail their init
 * naming it (within seconds: BRAID_BOOTSTRAP_TIMEOUT is left at a minute, past the
 * ranks' alarm, so only a prompt diagnosis passes).
 *
 * Without the privilege to unshare (not root, or a container that forbids it) the binary
 * prints why and exits 77 (skipped). The test process itself never calls NCCL; ranks
 * report through a shared page and their log files.
 */
#include <check.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <braid.h>
#include <nccl.h>

#include "brt_check.h"
#include "brt_launch.h"

#define NRANKS_MAX 5
#define MSG_LEN 1024
#define RANK_ALARM_S 30

/* A container: what it has of its own. */
enum { C_HOST = 0, C_SHM = 1, C_PID = 2 };

/* What the ranks report, in memory every process of the test shares. */
typedef struct {
    int done[NRANKS_MAX]; /* 1: ran to the end; 2: init failed (msg says why) */
    char msg[NRANKS_MAX][MSG_LEN];
} report_t;

static report_t *rep;
static char logdir[64];

/* Element i of rank r's input for peer (or position) j: exact in float32 and int32. */
static int val(int r, int j, size_t i)
{
    return (int)((i * 7 + (size_t)r * 13 + (size_t)j * 5) % 29) - 14;
}

static void rank_msg(int rank, const char *fmt, const char *what, const char *err)
{
    snprintf(rep->msg[rank], MSG_LEN, fmt, rank, what, err);
}

/* Every rank sends block p of its input to rank p and receives block q from rank q. */
static ncclResult_t sendrecv_all(ncclComm_t comm, int rank, int n, const int *in, int *out,
                                 size_t cnt)
{
    ncclResult_t res = ncclGroupStart();
    for (int p = 0; p < n && res == ncclSuccess; p++) {
        res = ncclSend(in + (size_t)p * cnt, cnt, ncclInt32, p, comm, NULL);
        res = res == ncclSuccess ? ncclRecv(out + (size_t)p * cnt, cnt, ncclInt32, p, comm, NULL)
                                 : res;
    }
    ncclResult_t end = ncclGroupEnd();
    (void)rank;
    return res != ncclSuccess ? res : end;
}

/* The collectives at one count; returns 0 when every result is right. */
static int run_count(ncclComm_t comm, int rank, int n, size_t cnt)
{
    size_t total = cnt * (size_t)n;
    int *in = malloc(total * sizeof(int)), *out = malloc(total * sizeof(int));
    size_t counts[NRANKS_MAX], displs[NRANKS_MAX];
    const char *what = "AllReduce";
    ncclResult_t res;
    int bad = 0;

    if (in == NULL || out == NULL) {
        free(in);
        free(out);
        return 1;
    }
    for (int p = 0; p < n; p++) {
        counts[p] = cnt;
        displs[p] = (size_t)p * cnt;
        for (size_t i = 0; i < cnt; i++) {
            in[(size_t)p * cnt + i] = val(rank, p, i);
        }
    }
    res = ncclAllReduce(in, out, total, ncclInt32, ncclSum, comm, NULL);
    for (size_t i = 0; i < total && res == ncclSuccess && !bad; i++) {
        int want = 0;
        for (int r = 0; r < n; r++) {
            want += val(r, (int)(i / cnt), i % cnt);
        }
        bad = out[i] != want;
    }
    if (res == ncclSuccess && !bad) {
        what = "AllGather"; /* block r: rank r's block 0 */
        res = ncclAllGather(in, out, cnt, ncclInt32, comm, NULL);
        for (size_t i = 0; i < total && res == ncclSuccess && !bad; i++) {
            bad = out[i] != val((int)(i / cnt), 0, i % cnt);
        }
    }
    if (res == ncclSuccess && !bad) {
        what = "braidAlltoAllV"; /* block q: rank q's block for this rank */
        res = braidAlltoAllV(in, counts, displs, out, counts, displs, ncclInt32, comm, NULL);
        for (size_t i = 0; i < total && res == ncclSuccess && !bad; i++) {
            bad = out[i] != val((int)(i / cnt), rank, i % cnt);
        }
    }
    if (res == ncclSuccess && !bad) {
        what = "Send/Recv";
        memset(out, 0, total * sizeof(int));
        res = sendrecv_all(comm, rank, n, in, out, cnt);
        for (size_t i = 0; i < total && res == ncclSuccess && !bad; i++) {
            bad = out[i] != val((int)(i / cnt), rank, i % cnt);
        }
    }
    if (res != ncclSuccess || bad) {
        char why[MSG_LEN / 2];
        snprintf(why, sizeof(why), "count %zu: %s", cnt,
                 res != ncclSuccess ? ncclGetLastError(comm) : "wrong result");
        rank_msg(rank, "rank %d: %s failed at %s", what, why);
    }
    free(in);
    free(out);
    return res != ncclSuccess || bad;
}

/* One rank: join through NCCL_COMM_ID, run everything, report. */
static void rank_main(int rank, int n, const char *comm_id, const char *exit_at)
{
    static const size_t counts[] = {1, 1000, 70001};
    char path[128];
    ncclUniqueId id;
    ncclComm_t comm;
    int bad = 0;

    /* A hang ends the rank and shows as not done. Check's own SIGALRM handler (inherited
     * through fork) would kill the whole test's process group instead. */
    signal(SIGALRM, SIG_DFL);
    alarm(RANK_ALARM_S);
    snprintf(path, sizeof(path), "%s/rank%d.log", logdir, rank);
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "INIT,SHM,P2P,BOOTSTRAP", 1);
    setenv("NCCL_DEBUG_FILE", path, 1);
    setenv("NCCL_COMM_ID", comm_id, 1);
    if (exit_at != NULL) {
        setenv("BRAID_TEST_EXIT_AT", exit_at, 1);
    }
    if (ncclGetUniqueId(&id) != ncclSuccess ||
        ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) {
        rank_msg(rank, "rank %d: %s: %s", "init failed", ncclGetLastError(NULL));
        rep->done[rank] = 2;
        _exit(1);
    }
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]) && !bad; c++) {
        bad = run_count(comm, rank, n, counts[c]);
    }
    if (bad) {
        ncclCommAbort(comm);
        _exit(1);
    }
    rep->done[rank] = ncclCommDestroy(comm) == ncclSuccess ? 1 : 0;
    _exit(0);
}

/* Fork the ranks of one container and wait for them. */
static int fork_ranks(const int *group, int g, int n, const char *comm_id, int exit_rank,
                      const char *exit_at)
{
    pid_t pids[NRANKS_MAX];
    int nk = 0, bad = 0;
    for (int r = 0; r < n; r++) {
        if (group[r] != g) {
            continue;
        }
        pids[nk] = fork();
        if (pids[nk] == 0) {
            rank_main(r, n, comm_id, r == exit_rank ? exit_at : NULL);
        }
        bad |= pids[nk] < 0;
        nk += pids[nk] > 0;
    }
    for (int i = 0; i < nk; i++) {
        int st;
        bad |= waitpid(pids[i], &st, 0) != pids[i];
    }
    return bad;
}

/* Make this process's namespaces for a container of kind `kind`; 0 on success. A pid
 * namespace applies to children: the caller forks once more after this. */
static int container_enter(int kind, char *why, size_t len)
{
    int flags = CLONE_NEWNS | ((kind & C_PID) ? CLONE_NEWPID | CLONE_NEWIPC : 0);
    if (unshare(flags) != 0) {
        snprintf(why, len, "unshare: %s", strerror(errno));
        return -1;
    }
    /* Mounts made here must not leak back to the host. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        snprintf(why, len, "making / private: %s", strerror(errno));
        return -1;
    }
    if ((kind & C_SHM) && mount("tmpfs", "/dev/shm", "tmpfs", 0, "mode=1777") != 0) {
        snprintf(why, len, "mounting a tmpfs on /dev/shm: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* Inside the new pid namespace (its first process): its own /proc. */
static int container_proc(char *why, size_t len)
{
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) {
        snprintf(why, len, "mounting /proc: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* A container process: its namespaces, then its ranks. Never returns. */
static void container_main(int kind, const int *group, int g, int n, const char *comm_id,
                           int exit_rank, const char *exit_at)
{
    char why[256];
    if (kind != C_HOST && container_enter(kind, why, sizeof(why)) != 0) {
        fprintf(stderr, "container %d: %s\n", g, why);
        _exit(2);
    }
    if (kind & C_PID) {
        pid_t init = fork(); /* pid 1 of the new namespace */
        if (init == 0) {
            if (container_proc(why, sizeof(why)) != 0) {
                fprintf(stderr, "container %d: %s\n", g, why);
                _exit(2);
            }
            _exit(fork_ranks(group, g, n, comm_id, exit_rank, exit_at));
        }
        int st = 0;
        _exit(init > 0 && waitpid(init, &st, 0) == init && WIFEXITED(st) ? WEXITSTATUS(st) : 2);
    }
    _exit(fork_ranks(group, g, n, comm_id, exit_rank, exit_at));
}

/* Run n ranks: rank r in container group[r], of kind kinds[group[r]]. */
static void run_layout(int n, const int *group, const int *kinds, int ngroups, int exit_rank,
                       const char *exit_at)
{
    char comm_id[64];
    pid_t pids[NRANKS_MAX];

    memset(rep, 0, sizeof(*rep));
    snprintf(logdir, sizeof(logdir), "/tmp/braid-container-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(logdir));
    int port = brt_free_port();
    ck_assert_int_gt(port, 0);
    snprintf(comm_id, sizeof(comm_id), "127.0.0.1:%d", port);
    for (int g = 0; g < ngroups; g++) {
        pids[g] = fork();
        ck_assert_int_ge(pids[g], 0);
        if (pids[g] == 0) {
            container_main(kinds[g], group, g, n, comm_id, exit_rank, exit_at);
        }
    }
    for (int g = 0; g < ngroups; g++) {
        int st;
        ck_assert_int_eq(waitpid(pids[g], &st, 0), pids[g]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 2, "container %d could not be set up", g);
    }
}

/* The whole of rank r's log (the caller frees it), or NULL. */
static char *rank_log(int r)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/rank%d.log", logdir, r);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return NULL;
    }
    char *text = calloc(1, 1 << 20);
    size_t got = text != NULL ? fread(text, 1, (1 << 20) - 1, f) : 0;
    (void)got;
    fclose(f);
    return text;
}

static void logs_remove(int n)
{
    char path[128];
    for (int r = 0; r < n; r++) {
        snprintf(path, sizeof(path), "%s/rank%d.log", logdir, r);
        unlink(path);
    }
    rmdir(logdir);
}

/* Every rank finished with right results. */
static void check_done(int n)
{
    for (int r = 0; r < n; r++) {
        ck_assert_msg(rep->done[r] == 1, "rank %d did not finish: %s", r,
                      rep->msg[r][0] ? rep->msg[r] : "(killed, or hung past its alarm)");
    }
}

/* Each pair of ranks took shared memory exactly when they share a /dev/shm. */
static void check_paths(int n, const int *group, const int *kinds)
{
    for (int a = 0; a < n; a++) {
        char *log = rank_log(a);
        ck_assert_ptr_nonnull(log);
        for (int b = 0; b < n; b++) {
            char line[64];
            /* Ranks of one container share its /dev/shm; a pid-only container keeps the
             * host's. */
            int ga = group[a], gb = group[b];
            int shared = ga == gb || (!(kinds[ga] & C_SHM) && !(kinds[gb] & C_SHM));
            if (a == b) {
                continue;
            }
            snprintf(line, sizeof(line), "P2P : %d -> %d via %s", a, b, shared ? "SHM" : "NET");
            ck_assert_msg(strstr(log, line) != NULL, "rank %d's log lacks \"%s\"", a, line);
        }
        free(log);
    }
    logs_remove(n);
}

/* Run 4 ranks in containers: every result right, rank 0's log holds each line of want
 * (NULL-terminated), and every pair took shared memory exactly where it shares /dev/shm. */
static void check_layout(const int *group, const int *kinds, int ngroups,
                         const char *const *want)
{
    run_layout(4, group, kinds, ngroups, -1, NULL);
    check_done(4);
    char *log = rank_log(0);
    ck_assert_ptr_nonnull(log);
    for (int i = 0; want[i] != NULL; i++) {
        ck_assert_msg(strstr(log, want[i]) != NULL, "rank 0's log lacks \"%s\"", want[i]);
    }
    free(log);
    check_paths(4, group, kinds);
}

/* Ranks 0 and 1 on the host, 2 and 3 in a container with its own /dev/shm: two hosts to
 * the bootstrap's shared memory, the network between them. */
START_TEST(test_own_shm)
{
    static const int group[] = {0, 0, 1, 1}, kinds[] = {C_HOST, C_SHM};
    static const char *const want[] = {"2 rank(s) of this host do not share its /dev/shm",
                                       "shared memory with this host's 2 ranks, 2 hosts", NULL};
    check_layout(group, kinds, 2, want);
}
END_TEST

/* Ranks 2 and 3 in a pid namespace of their own, /dev/shm still the host's: shared memory
 * everywhere, but no single-copy reads between the namespaces (BRAID_CMA_BYTES=1 would
 * otherwise read every AllGather input in place). */
START_TEST(test_own_pid)
{
    static const int group[] = {0, 0, 1, 1}, kinds[] = {C_HOST, C_PID};
    static const char *const want[] = {"is in another pid namespace",
                                       "shared memory with this host's 4 ranks, 1 hosts", NULL};
    setenv("BRAID_CMA_BYTES", "1", 1);
    check_layout(group, kinds, 2, want);
}
END_TEST

/* Ranks 0 and 2 on the host, 1 and 3 in a container with its own /dev/shm: the rings
 * keep each container's ranks together (0 2 1 3), one network hop per container. */
START_TEST(test_own_shm_interleaved)
{
    static const int group[] = {0, 1, 0, 1}, kinds[] = {C_HOST, C_SHM};
    static const char *const want[] = {" : 0 2 1 3", "0[0] -> 2[2] via SHM", NULL};
    check_layout(group, kinds, 2, want);
}
END_TEST

/* Rank 0 and 1 on the host, 2 and 3 each in a container with its own /dev/shm and pids. */
START_TEST(test_own_all)
{
    static const int group[] = {0, 0, 1, 2}, kinds[] = {C_HOST, C_SHM | C_PID, C_SHM | C_PID};
    static const char *const want[] = {"2 rank(s) of this host do not share its /dev/shm",
                                       "shared memory with this host's 2 ranks, 3 hosts", NULL};
    check_layout(group, kinds, 3, want);
}
END_TEST

/* n ranks in containers (NULL: all on the host); rank `dead` ends at init point `at`: the
 * others fail init, naming it and what they waited for. */
static void check_dead(int n, const int *group, const int *kinds, int ngroups, int dead,
                       const char *at, const char *step)
{
    static const int host_group[NRANKS_MAX] = {0}, host_kinds[] = {C_HOST};
    char rank_text[32];
    if (group == NULL) {
        group = host_group;
        kinds = host_kinds;
        ngroups = 1;
    }
    run_layout(n, group, kinds, ngroups, dead, at);
    snprintf(rank_text, sizeof(rank_text), "rank %d (host ", dead);
    for (int r = 0; r < n; r++) {
        if (r == dead) {
            continue;
        }
        ck_assert_msg(rep->done[r] == 2, "rank %d: init did not fail promptly (%s)", r,
                      rep->msg[r][0] ? rep->msg[r] : "killed by its alarm, or succeeded");
        ck_assert_msg(strstr(rep->msg[r], rank_text) != NULL && strstr(rep->msg[r], step) != NULL,
                      "rank %d's error does not name rank %d and \"%s\": %s", r, dead, step,
                      rep->msg[r]);
        printf("as expected, %s\n", rep->msg[r]);
    }
    logs_remove(n);
}

/* Rank 2 of 5 is no ring neighbour of the leader (rank 0): no bootstrap connection of
 * the leader's closes, so the leader has to look at its process (its pid from the root). */
START_TEST(test_dead_before_map)
{
    check_dead(5, NULL, NULL, 0, 2, "boot-shm-map", "bootstrap shared memory");
}
END_TEST

START_TEST(test_dead_leader_before_map)
{
    check_dead(3, NULL, NULL, 0, 0, "boot-shm-map", "bootstrap memory");
}
END_TEST

START_TEST(test_dead_in_first_allgather)
{
    check_dead(4, NULL, NULL, 0, 1, "boot-shm-gather", "bootstrap allgather");
}
END_TEST

/* Rank 2 of 5 lives in a pid namespace of its own (with rank 3; /dev/shm is the host's)
 * and ends after mapping the host's segment: the leader, no ring neighbour of it and
 * unable to ask for its pid, sees its lock on the segment go. */
START_TEST(test_dead_other_pid_ns)
{
    static const int group[] = {0, 0, 1, 1, 0}, kinds[] = {C_HOST, C_PID};
    check_dead(5, group, kinds, 2, 2, "boot-shm-gather", "bootstrap allgather");
}
END_TEST

/* Ranks 0 and 2 on the host, 1 and 3 in a container with its own /dev/shm (rings 0 2 1
 * 3); rank 2 ends once the rings are built: rank 0, which waits for its connection
 * details but was never connected to it in the bootstrap, sees its process gone. */
START_TEST(test_dead_connecting)
{
    static const int group[] = {0, 1, 0, 1}, kinds[] = {C_HOST, C_SHM};
    check_dead(4, group, kinds, 2, 2, "init-connect", "message");
}
END_TEST

/* Can this process make the namespaces the cases need? */
static int can_unshare(char *why, size_t len)
{
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(why, len, "pipe: %s", strerror(errno));
        return 0;
    }
    pid_t pid = fork();
    if (pid == 0) {
        char w[256] = "";
        close(fds[0]);
        if (container_enter(C_SHM | C_PID, w, sizeof(w)) != 0) {
            ssize_t k = write(fds[1], w, strlen(w));
            (void)k;
            _exit(1);
        }
        _exit(0);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], why, len - 1);
    close(fds[0]);
    why[got > 0 ? got : 0] = '\0';
    int st = 0;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(void)
{
    char why[256] = "";
    if (!can_unshare(why, sizeof(why))) {
        printf("SKIP: cannot make mount and pid namespaces here (%s); needs root or "
               "CAP_SYS_ADMIN\n",
               why[0] ? why : "fork failed");
        return 77;
    }
    rep = mmap(NULL, sizeof(*rep), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (rep == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    Suite *s = suite_create("mp_container");
    TCase *tc = tcase_create("containers");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_own_shm);
    tcase_add_test(tc, test_own_shm_interleaved);
    tcase_add_test(tc, test_own_pid);
    tcase_add_test(tc, test_own_all);
    suite_add_tcase(s, tc);
    TCase *td = tcase_create("dead");
    tcase_set_timeout(td, 120);
    tcase_add_test(td, test_dead_before_map);
    tcase_add_test(td, test_dead_leader_before_map);
    tcase_add_test(td, test_dead_in_first_allgather);
    tcase_add_test(td, test_dead_other_pid_ns);
    tcase_add_test(td, test_dead_connecting);
    suite_add_tcase(s, td);
    return brt_suite_run(s);
}
