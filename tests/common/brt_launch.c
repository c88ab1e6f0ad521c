/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Rank launchers for the multi-rank tests: forked processes sharing a unique id and a
 * MAP_SHARED array of report slots, or threads sharing heap slots. The parent never runs
 * rank code; it polls (waitpid WNOHANG, 10 ms) until every rank is done or the deadline
 * passes, then kills what is left and writes one line per failed, dead or hung rank.
 * Children leave with _exit() so that nothing of the parent's (Check's pipes, stdio
 * buffers, atexit handlers) runs twice.
 */
#include "brt_launch.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double brt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void brt_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int brt_free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
        port = ntohs(a.sin_port);
    } else {
        perror("no free TCP port on 127.0.0.1");
    }
    if (fd >= 0) {
        close(fd);
    }
    return port;
}

void brt_fail(brt_rank_ctx_t *ctx, const char *fmt, ...)
{
    char line[3072];
    va_list ap;
    size_t used = strlen(ctx->report->msg);

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "[test rank %d/%d] FAIL: %s\n", ctx->rank, ctx->nranks, line);
    if (used > 0 && used + 3 < sizeof(ctx->report->msg)) {
        memcpy(ctx->report->msg + used, " | ", 3);
        used += 3;
    }
    size_t room = sizeof(ctx->report->msg) - 1 - used, len = strlen(line);
    len = len < room ? len : room;
    memcpy(ctx->report->msg + used, line, len);
    ctx->report->msg[used + len] = '\0';
}

void brt_doing(brt_rank_ctx_t *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->report->doing, sizeof(ctx->report->doing), fmt, ap);
    va_end(ap);
}

ncclResult_t brt_rank_init(brt_rank_ctx_t *ctx, ncclComm_t *comm)
{
    brt_doing(ctx, "ncclCommInitRank");
    ncclResult_t res = ncclCommInitRank(comm, ctx->nranks, ctx->id, ctx->rank);
    if (res != ncclSuccess) {
        ctx->report->result = res;
        brt_fail(ctx, "ncclCommInitRank(nranks %d, rank %d) returned %d (%s): %s", ctx->nranks,
                 ctx->rank, (int)res, ncclGetErrorString(res), ncclGetLastError(NULL));
    }
    return res;
}

static brt_report_t *reports_map(int nranks)
{
    void *p = mmap(NULL, sizeof(brt_report_t) * (size_t)nranks, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return NULL;
    }
    memset(p, 0, sizeof(brt_report_t) * (size_t)nranks);
    return p;
}

/* The unique id, handed to ranks forked before it existed. */
typedef struct {
    volatile int state; /* 0 not yet, 1 id ready, -1 the parent gave up */
    ncclUniqueId id;
} id_handoff_t;

/* Child: wait for the parent's id (it exits if the parent gave up or went away). */
static int id_wait(id_handoff_t *h, ncclUniqueId *id)
{
    for (int i = 0; i < 120000; i++) { /* 2 minutes at most */
        int state = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE);
        if (state != 0) {
            *id = h->id;
            return state == 1 ? 0 : -1;
        }
        if (getppid() == 1) {
            return -1;
        }
        brt_sleep_ms(1);
    }
    return -1;
}

int brt_procs_start(brt_procs_t *p, int nranks, brt_rank_fn_t fn, void *arg, char *err,
                    size_t errlen)
{
    ncclResult_t res;
    id_handoff_t *h;

    memset(p, 0, sizeof(*p));
    if (nranks < 1 || nranks > BRT_MAX_RANKS) {
        snprintf(err, errlen, "bad rank count %d", nranks);
        return -1;
    }
    p->nranks = nranks;
    p->reports = reports_map(nranks);
    h = mmap(NULL, sizeof(*h), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p->reports == NULL || h == MAP_FAILED) {
        snprintf(err, errlen, "mmap of the report slots failed: %s", strerror(errno));
        return -1;
    }
    memset(h, 0, sizeof(*h));
    /* Every rank is forked before ncclGetUniqueId starts the bootstrap root's thread:
     * forking while that thread serves earlier ranks could copy a lock it holds (the
     * sanitizers' allocator lock, seen to deadlock a child under ASan). */
    fflush(NULL); /* nothing buffered may be written twice */
    for (int r = 0; r < nranks; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            snprintf(err, errlen, "fork of rank %d failed: %s", r, strerror(errno));
            for (int k = 0; k < r; k++) {
                kill(p->pids[k], SIGKILL);
                waitpid(p->pids[k], NULL, 0);
            }
            munmap(h, sizeof(*h));
            return -1;
        }
        if (pid == 0) {
            brt_rank_ctx_t ctx = {.rank = r,
                                  .nranks = nranks,
                                  .report = &p->reports[r],
                                  .all = p->reports,
                                  .arg = arg};
            if (id_wait(h, &ctx.id) != 0) {
                _exit(1);
            }
            int ret = fn(&ctx);
            fflush(NULL);
            _exit(ret == 0 ? 0 : 1);
        }
        p->pids[r] = pid;
    }
    res = ncclGetUniqueId(&h->id);
    __atomic_store_n(&h->state, res == ncclSuccess ? 1 : -1, __ATOMIC_RELEASE);
    munmap(h, sizeof(*h));
    if (res != ncclSuccess) {
        snprintf(err, errlen, "ncclGetUniqueId returned %d: %s", (int)res, ncclGetLastError(NULL));
        for (int k = 0; k < nranks; k++) {
            waitpid(p->pids[k], NULL, 0);
        }
        return -1;
    }
    return 0;
}

int brt_procs_exited(brt_procs_t *p, int r)
{
    if (!p->exited[r]) {
        pid_t w = waitpid(p->pids[r], &p->status[r], WNOHANG);
        if (w == p->pids[r]) {
            p->exited[r] = 1;
        }
    }
    return p->exited[r];
}

void brt_procs_kill(brt_procs_t *p, int r)
{
    if (!p->exited[r]) {
        kill(p->pids[r], SIGKILL);
    }
}

static size_t out_append(char *out, size_t outlen, size_t used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static size_t out_append(char *out, size_t outlen, size_t used, const char *fmt, ...)
{
    va_list ap;
    if (used >= outlen) {
        return used;
    }
    va_start(ap, fmt);
    int n = vsnprintf(out + used, outlen - used, fmt, ap);
    va_end(ap);
    return n < 0 ? used : used + (size_t)n;
}

int brt_procs_wait(brt_procs_t *p, double deadline_s, unsigned killed_ok, char *out, size_t outlen,
                   int keep_reports)
{
    int hung[BRT_MAX_RANKS] = {0};
    int all, bad = 0;
    size_t used = 0;

    out[0] = '\0';
    for (;;) {
        all = 1;
        for (int r = 0; r < p->nranks; r++) {
            all &= brt_procs_exited(p, r);
        }
        if (all || brt_now() > deadline_s) {
            break;
        }
        brt_sleep_ms(10);
    }
    for (int r = 0; r < p->nranks; r++) {
        if (!p->exited[r]) {
            hung[r] = 1;
            kill(p->pids[r], SIGKILL);
            waitpid(p->pids[r], &p->status[r], 0);
            p->exited[r] = 1;
        }
    }
    for (int r = 0; r < p->nranks; r++) {
        int st = p->status[r];
        const brt_report_t *rep = &p->reports[r];
        if (hung[r]) {
            used = out_append(out, outlen, used, "rank %d/%d hung past the deadline while %s%s%s\n",
                              r, p->nranks, rep->doing, rep->msg[0] ? "; earlier: " : "", rep->msg);
            bad = 1;
        } else if (WIFSIGNALED(st)) {
            if (WTERMSIG(st) == SIGKILL && (killed_ok >> r & 1u)) {
                continue;
            }
            used = out_append(out, outlen, used, "rank %d/%d died of signal %d while %s %s\n", r,
                              p->nranks, WTERMSIG(st), rep->doing, rep->msg);
            bad = 1;
        } else if (WEXITSTATUS(st) != 0) {
            used = out_append(out, outlen, used, "rank %d/%d failed: %s\n", r, p->nranks,
                              rep->msg[0] ? rep->msg : "(exit status, no message)");
            bad = 1;
        }
    }
    if (!keep_reports) {
        brt_procs_free(p);
    }
    return bad;
}

void brt_procs_free(brt_procs_t *p)
{
    if (p->reports != NULL) {
        munmap(p->reports, sizeof(brt_report_t) * (size_t)p->nranks);
        p->reports = NULL;
    }
}

int brt_procs_run(int nranks, brt_rank_fn_t fn, void *arg, double timeout_s, char *out,
                  size_t outlen)
{
    brt_procs_t p;
    if (brt_procs_start(&p, nranks, fn, arg, out, outlen) != 0) {
        brt_procs_free(&p);
        return 1;
    }
    return brt_procs_wait(&p, brt_now() + timeout_s, 0, out, outlen, 0);
}

typedef struct {
    brt_rank_ctx_t ctx;
    brt_rank_fn_t fn;
    int ret;
} thread_job_t;

static void *thread_main(void *a)
{
    thread_job_t *job = a;
    job->ret = job->fn(&job->ctx);
    __atomic_store_n(&job->ctx.report->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

int brt_threads_run(int nranks, brt_rank_fn_t fn, void *arg, double timeout_s, char *out,
                    size_t outlen)
{
    thread_job_t jobs[BRT_MAX_RANKS];
    pthread_t tids[BRT_MAX_RANKS];
    brt_report_t *reports;
    ncclUniqueId id;
    ncclResult_t res;
    double deadline = brt_now() + timeout_s;
    int bad = 0, started = 0, leave_running = 0;
    size_t used = 0;

    out[0] = '\0';
    if (nranks < 1 || nranks > BRT_MAX_RANKS) {
        snprintf(out, outlen, "bad rank count %d", nranks);
        return 1;
    }
    res = ncclGetUniqueId(&id);
    if (res != ncclSuccess) {
        snprintf(out, outlen, "ncclGetUniqueId returned %d: %s", (int)res, ncclGetLastError(NULL));
        return 1;
    }
    reports = calloc((size_t)nranks, sizeof(*reports));
    if (reports == NULL) {
        snprintf(out, outlen, "out of memory");
        return 1;
    }
    for (int r = 0; r < nranks; r++) {
        jobs[r] = (thread_job_t){.ctx = {.rank = r,
                                         .nranks = nranks,
                                         .id = id,
                                         .report = &reports[r],
                                         .all = reports,
                                         .arg = arg},
                                 .fn = fn,
                                 .ret = -1};
        if (pthread_create(&tids[r], NULL, thread_main, &jobs[r]) != 0) {
            used = out_append(out, outlen, used, "pthread_create for rank %d failed\n", r);
            bad = 1;
            break;
        }
        started++;
    }
    for (int r = 0; r < started; r++) {
        struct timespec ts;
        double left = deadline;
        ts.tv_sec = 0;
        ts.tv_nsec = 0;
        clock_gettime(CLOCK_REALTIME, &ts);
        left = deadline - brt_now();
        if (left < 0) {
            left = 0;
        }
        ts.tv_sec += (time_t)left;
        ts.tv_nsec += (long)((left - (double)(time_t)left) * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (pthread_timedjoin_np(tids[r], NULL, &ts) != 0) {
            used = out_append(out, outlen, used,
                              "rank %d/%d (thread) hung past the deadline "
                              "while %s%s%s\n",
                              r, nranks, reports[r].doing, reports[r].msg[0] ? "; earlier: " : "",
                              reports[r].msg);
            bad = 1;
            leave_running = 1;
            continue;
        }
        if (jobs[r].ret != 0) {
            used = out_append(out, outlen, used, "rank %d/%d (thread) failed: %s\n", r, nranks,
                              reports[r].msg[0] ? reports[r].msg : "(no message)");
            bad = 1;
        }
    }
    if (!leave_running) {
        free(reports); /* a hung thread may still write its slot: leak it then */
    }
    return bad;
}

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int armed;
    double deadline;
    const brt_report_t *rep;
} watchdog = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0.0, NULL};

static void *watchdog_main(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&watchdog.lock);
    while (watchdog.armed) {
        double left = watchdog.deadline - brt_now();
        if (left <= 0) {
            fprintf(stderr, "watchdog: no result after the deadline; the test was %s\n",
                    watchdog.rep != NULL ? watchdog.rep->doing : "(unknown)");
            fflush(stderr);
            _exit(3);
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&watchdog.cond, &watchdog.lock, &ts);
    }
    pthread_mutex_unlock(&watchdog.lock);
    return NULL;
}

void brt_watchdog_start(double timeout_s, const brt_report_t *rep)
{
    pthread_t tid;
    pthread_mutex_lock(&watchdog.lock);
    watchdog.armed = 1;
    watchdog.deadline = brt_now() + timeout_s;
    watchdog.rep = rep;
    pthread_mutex_unlock(&watchdog.lock);
    if (pthread_create(&tid, NULL, watchdog_main, NULL) == 0) {
        pthread_detach(tid);
    }
}

void brt_watchdog_stop(void)
{
    pthread_mutex_lock(&watchdog.lock);
    watchdog.armed = 0;
    pthread_cond_broadcast(&watchdog.cond);
    pthread_mutex_unlock(&watchdog.lock);
}

double brt_time_scale(void)
{
    double scale = 1.0;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    scale = 4.0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    scale = 4.0;
#endif
#endif
#ifndef __OPTIMIZE__
    if (scale == 1.0) {
        scale = 2.0; /* a Debug build: the library is unoptimised too */
    }
#endif
    return scale;
}

char *brt_clip(char *text, size_t max)
{
    static const char note[] = "\n... (cut; every rank's full report is on stderr)";
    if (max > sizeof(note) && strlen(text) >= max) {
        memcpy(text + max - sizeof(note), note, sizeof(note));
    }
    return text;
}

int brt_text_has(const char *text, const char *needle)
{
    size_t n = strlen(needle);
    if (text == NULL) {
        return 0;
    }
    for (const char *p = text; *p; p++) {
        if (strncasecmp(p, needle, n) == 0) {
            return 1;
        }
    }
    return 0;
}

/* After a "rank" at p: a list of numbers separated by spaces, commas, colons, '#', '=',
 * brackets or "and"; does it hold r? */
static int rank_list_has(const char *p, int r)
{
    const char *end = p + 64;
    while (*p && p < end) {
        if (isdigit((unsigned char)*p)) {
            char *q;
            long v = strtol(p, &q, 10);
            if (v == r) {
                return 1;
            }
            p = q;
        } else if (strchr(" ,:#=[]{}()s", *p) != NULL && *p != '\0') {
            p++;
        } else if (strncasecmp(p, "and", 3) == 0) {
            p += 3;
        } else {
            return 0;
        }
    }
    return 0;
}

int brt_text_names_rank(const char *text, int r)
{
    if (text == NULL) {
        return 0;
    }
    for (const char *p = text; *p; p++) {
        if (strncasecmp(p, "rank", 4) == 0 && rank_list_has(p + 4, r)) {
            return 1;
        }
    }
    return 0;
}

int brt_layout_option(const char *k, const char *v, int *mode_p, int *ranks, int *nranks_p)
{
    if (strcmp(k, "--mode") == 0) {
        *mode_p = strcmp(v, "threads") == 0   ? BRT_MODE_THREADS
                  : strcmp(v, "initall") == 0 ? BRT_MODE_INITALL
                                              : BRT_MODE_PROC;
        return 1;
    }
    if (strcmp(k, "--ranks") != 0) {
        return 0;
    }
    for (char *s = (char *)v; *s && *nranks_p < BRT_MAX_RANKS;) {
        ranks[(*nranks_p)++] = (int)strtol(s, &s, 10);
        s += *s == ',';
    }
    return 1;
}

int brt_select_option(const char *k, const char *v)
{
    char spec[256];
    int algo = strcmp(k, "--algo") == 0;
    if (!algo && strcmp(k, "--proto") != 0) {
        return 0;
    }
    snprintf(spec, sizeof(spec), "%s", v);
    for (char *c = spec; *c; c++) {
        *c = *c == '|' ? ';' : *c;
    }
    setenv(algo ? "NCCL_ALGO" : "NCCL_PROTO", spec, 1);
    return 1;
}
