/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The state dump: a JSON file that says, for every live communicator of this process,
 * what its recent operations are doing (the executor's operation log, exec_oplog.c), and
 * the same for every other rank of each, asked live through the bootstrap (bootstrap
 * _query.c: each rank's bootstrap thread answers while its user threads are blocked).
 *
 * Triggers: braidDumpState() from any thread, and with BRAID_DUMP set, SIGUSR1. The
 * signal handler only writes a byte to a pipe; a dump thread, running while at least one
 * communicator of the process is live, wakes on it and writes the dump. The handler is
 * installed with that thread and taken out with it (restoring the handler it replaced,
 * which it also calls), and a fork()ed child drops both (it has no thread, and the
 * communicators it inherited are not its own).
 *
 * Lifetime: a dump holds each communicator it reads (br_comm_hold_all), so another
 * thread's abort cannot free it meanwhile; a peer that does not answer within
 * BRAID_DUMP_TIMEOUT seconds is written as "unreachable" with the reason.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "comm.h"
#include "util.h"

/* Most operations a communicator remembers, whatever BRAID_DUMP_OPS says. */
#define DUMP_OPS_MAX 4096

static int dump_ops(void);

/* ---- A growing JSON text ---- */

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} jbuf_t;

static void jb_reserve(jbuf_t *b, size_t more)
{
    if (b->oom || b->len + more + 1 <= b->cap) {
        return;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more + 1) {
        cap *= 2;
    }
    char *s = realloc(b->s, cap);
    if (s == NULL) {
        b->oom = 1;
        return;
    }
    b->s = s;
    b->cap = cap;
}

static void jb_printf(jbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jb_printf(jbuf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return;
    }
    jb_reserve(b, (size_t)n);
    if (b->oom) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static void jb_raw(jbuf_t *b, const char *s, size_t len)
{
    jb_reserve(b, len);
    if (!b->oom) {
        memcpy(b->s + b->len, s, len);
        b->len += len;
        b->s[b->len] = '\0';
    }
}

static void jb_cat(jbuf_t *b, const char *s)
{
    jb_raw(b, s, strlen(s));
}

/* "key": "text", with text escaped for JSON. */
static void jb_str(jbuf_t *b, const char *key, const char *text)
{
    jb_printf(b, "\"%s\": \"", key);
    for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\') {
            jb_printf(b, "\\%c", *p);
        } else if (*p < 0x20) {
            jb_printf(b, "\\u%04x", *p);
        } else {
            jb_raw(b, (const char *)p, 1);
        }
    }
    jb_cat(b, "\"");
}

/* ---- One communicator as this rank sees it ---- */

/* "AllReduce #3 (count 1024, float32, sum): waiting 2.10 s for data from rank 1". */
static void op_summary(const br_oplog_rec_t *r, uint64_t now, char *buf, size_t len)
{
    char args[96], who[32] = "", state[128];
    int red = br_func_is_reduction(r->func);

    snprintf(args, sizeof(args), "count %zu, %s%s%s", r->count, br_type_name(r->type),
             red ? ", " : "", red ? br_red_kind_name(r->red) : "");
    if (r->func == BR_FUNC_SEND || r->func == BR_FUNC_RECV) {
        snprintf(who, sizeof(who), " %s rank %d", r->func == BR_FUNC_SEND ? "to" : "from", r->peer);
    } else if (r->func == BR_FUNC_BROADCAST || r->func == BR_FUNC_REDUCE) {
        snprintf(who, sizeof(who), " root %d", r->root);
    }
    if (r->state == BR_OPLOG_WAITING && r->wait_peer >= 0 && r->wait_what != NULL) {
        snprintf(state, sizeof(state), "waiting %.2f s for %s rank %d",
                 (double)(now - r->wait_ns) * 1e-9, r->wait_what, r->wait_peer);
    } else {
        snprintf(state, sizeof(state), "%s", br_oplog_state_name(r->state));
    }
    snprintf(buf, len, "%s #%llu (%s)%s: %s", br_func_name(r->func), (unsigned long long)r->seq,
             args, who, state);
}

/* now: br_time_ns(), which wait times use; now_coarse: br_time_coarse_ns(), which the
 * log stamps every call with (exec_oplog.c). */
static void op_json(jbuf_t *b, const br_oplog_rec_t *r, uint64_t now, uint64_t now_coarse)
{
    char summary[300];

    op_summary(r, now, summary, sizeof(summary));
    jb_printf(b, "{\"seq\": %llu, ", (unsigned long long)r->seq);
    jb_str(b, "func", br_func_name(r->func));
    jb_printf(b, ", \"count\": %zu, ", r->count);
    jb_str(b, "type", br_type_name(r->type));
    if (br_func_is_reduction(r->func)) {
        jb_cat(b, ", ");
        jb_str(b, "op", br_red_kind_name(r->red));
    }
    if (r->func == BR_FUNC_BROADCAST || r->func == BR_FUNC_REDUCE) {
        jb_printf(b, ", \"root\": %d", r->root);
    }
    if (r->func == BR_FUNC_SEND || r->func == BR_FUNC_RECV) {
        jb_printf(b, ", \"peer\": %d", r->peer);
    } else {
        jb_cat(b, ", ");
        jb_str(b, "algo", br_algo_name(r->algo));
        jb_cat(b, ", ");
        jb_str(b, "proto", br_proto_name(r->proto));
    }
    jb_cat(b, ", ");
    jb_str(b, "state", br_oplog_state_name(r->state));
    jb_printf(b, ", \"age_ms\": %.1f", (double)(now_coarse - r->queued_ns) * 1e-6);
    if (r->state == BR_OPLOG_DONE || r->state == BR_OPLOG_FAILED) {
        jb_printf(b, ", \"took_ms\": %.3f", (double)(r->end_ns - r->queued_ns) * 1e-6);
    }
    if (r->state == BR_OPLOG_WAITING && r->wait_peer >= 0 && r->wait_what != NULL) {
        jb_printf(b, ", \"waiting_ms\": %.1f, \"waiting_for\": %d, ",
                  (double)(now - r->wait_ns) * 1e-6, r->wait_peer);
        jb_str(b, "waiting_on", r->wait_what);
    }
    jb_cat(b, ", ");
    jb_str(b, "summary", summary);
    jb_cat(b, "}");
}

/* The communicator's object without "peers" and its closing brace. */
static void comm_json(jbuf_t *b, ncclComm_t comm)
{
    br_exec_comm_t *ec = comm->ec;
    int cap = dump_ops();
    br_oplog_rec_t *recs = cap > 0 ? calloc((size_t)cap, sizeof(*recs)) : NULL;
    int n = recs != NULL ? br_exec_oplog_snapshot(ec, recs, cap) : 0;
    uint64_t now = br_time_ns(), now_coarse = br_time_coarse_ns();
    /* Acquire: the text of an error is whole once its code is seen (br_exec_fail). */
    ncclResult_t err = __atomic_load_n(&ec->error, __ATOMIC_ACQUIRE);
    int revoked = atomic_load_explicit(&ec->revoked, memory_order_acquire);

    jb_printf(b, "{\"commHash\": \"0x%016llx\", ", (unsigned long long)comm->comm_hash);
    jb_str(b, "name", comm->name);
    jb_printf(b, ", \"rank\": %d, \"nranks\": %d, ", comm->rank, comm->nranks);
    jb_str(b, "host", br_host_name());
    jb_printf(b, ", \"pid\": %d, \"device\": \"host\", ", (int)getpid());
    if (err != ncclSuccess) {
        jb_str(b, "status", "failed");
        jb_cat(b, ", ");
        jb_str(b, "error", ec->error_msg);
    } else if (revoked) {
        jb_str(b, "status", "revoked");
        jb_cat(b, ", ");
        jb_str(b, "error", ec->revoked_why);
    } else {
        jb_str(b, "status", "ok");
    }
    /* Bootstrap messages that arrived and were not received (wants included). */
    jb_printf(b, ", \"bootstrap_queued\": %d", br_bootstrap_queued(comm->tc->boot));
    jb_cat(b, ", \"ops\": [");
    for (int i = 0; i < n; i++) {
        jb_cat(b, i ? ",\n    " : "\n    ");
        op_json(b, &recs[i], now, now_coarse);
    }
    jb_cat(b, "]");
    free(recs);
}

/* What this rank's bootstrap thread answers another rank's query with. */
static char *state_answer(void *arg, size_t *len_p)
{
    jbuf_t b = {0};

    comm_json(&b, arg);
    jb_cat(&b, "}");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    *len_p = b.len;
    return b.s;
}

/* One communicator with its peers, fetched live. */
static void comm_dump(jbuf_t *b, ncclComm_t comm, uint64_t timeout_ns)
{
    br_bootstrap_reply_t *replies = calloc((size_t)comm->nranks, sizeof(*replies));
    int first = 1;

    comm_json(b, comm);
    jb_cat(b, ",\n   \"peers\": [");
    if (replies == NULL) {
        jb_cat(b, "]}");
        return;
    }
    br_bootstrap_query_all(comm->tc->boot, br_time_ns() + timeout_ns, replies);
    for (int r = 0; r < comm->nranks; r++) {
        if (r == comm->rank) {
            continue;
        }
        jb_cat(b, first ? "\n    " : ",\n    ");
        first = 0;
        if (replies[r].text != NULL) {
            jb_raw(b, replies[r].text, replies[r].len);
        } else {
            char why[256];
            snprintf(why, sizeof(why), "unreachable: %s", replies[r].why);
            jb_printf(b, "{\"rank\": %d, ", r);
            jb_str(b, "host", comm->tc->peers[r].host);
            jb_printf(b, ", \"pid\": %d, ", comm->tc->peers[r].pid);
            jb_str(b, "status", why);
            jb_cat(b, "}");
        }
        free(replies[r].text);
    }
    jb_cat(b, "]}");
    free(replies);
}

/* ---- Writing a dump ---- */

static pthread_mutex_t dump_lock = PTHREAD_MUTEX_INITIALIZER; /* one dump at a time */
static unsigned dump_count;                                   /* under dump_lock */

/* Expand %h (host), %p (pid), %t (seconds since 1970), %n (this process's dump number)
 * and %% in pattern. */
static void path_expand(const char *pattern, char *out, size_t len)
{
    size_t o = 0;
    for (const char *p = pattern; *p != '\0' && o + 1 < len; p++) {
        char piece[64] = "";
        if (p[0] != '%' || p[1] == '\0') {
            out[o++] = *p;
            continue;
        }
        p++;
        switch (*p) {
        case 'h': snprintf(piece, sizeof(piece), "%s", br_host_name()); break;
        case 'p': snprintf(piece, sizeof(piece), "%d", (int)getpid()); break;
        case 't': snprintf(piece, sizeof(piece), "%lld", (long long)time(NULL)); break;
        case 'n': snprintf(piece, sizeof(piece), "%u", dump_count); break;
        case '%': snprintf(piece, sizeof(piece), "%%"); break;
        default: snprintf(piece, sizeof(piece), "%%%c", *p); break;
        }
        int n = snprintf(out + o, len - o, "%s", piece);
        o += n > 0 ? (size_t)n : 0;
        o = o < len ? o : len - 1;
    }
    out[o] = '\0';
}

/* Write text to path whole: a reader sees the old file or the new one, never a part. */
static ncclResult_t file_write(const char *path, const char *text, size_t len)
{
    char tmp[4200];
    FILE *f;

    snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid());
    f = fopen(tmp, "w");
    if (f == NULL) {
        BR_WARN(NCCL_INIT, "braid dump: cannot create %s (host %s): %s", tmp, br_host_name(),
                strerror(errno));
        return ncclSystemError;
    }
    size_t put = fwrite(text, 1, len, f);
    if (fclose(f) != 0 || put != len) {
        BR_WARN(NCCL_INIT, "braid dump: cannot write %s (host %s): %s", tmp, br_host_name(),
                strerror(errno));
        unlink(tmp);
        return ncclSystemError;
    }
    if (rename(tmp, path) != 0) {
        BR_WARN(NCCL_INIT, "braid dump: cannot rename %s to %s (host %s): %s", tmp, path,
                br_host_name(), strerror(errno));
        unlink(tmp);
        return ncclSystemError;
    }
    return ncclSuccess;
}

/* Is comm this process's own (not one a fork()ed child inherited from its parent)? */
static int comm_is_own(ncclComm_t comm)
{
    return comm->tc->peers[comm->rank].pid == (int)getpid();
}

ncclResult_t br_comm_dump_write(const char *path, const char *trigger)
{
    jbuf_t b = {0};
    ncclComm_t *comms = NULL;
    char when[64], file[4096];
    struct timespec ts;
    struct tm tm;
    ncclResult_t res;
    int n, first = 1;
    int64_t timeout_s = BR_PARAM_INT(DUMP_TIMEOUT);
    uint64_t timeout_ns = (uint64_t)(timeout_s < 1 ? 1 : timeout_s) * 1000000000ull;

    if (path == NULL) {
        path = BR_PARAM_STR(DUMP);
    }
    if (path == NULL) {
        BR_WARN(NCCL_INIT, "braidDumpState: no path given and BRAID_DUMP is not set (host %s)",
                br_host_name());
        return ncclInvalidArgument;
    }
    BR_CHECK(br_comm_hold_all(&comms, &n));
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    pthread_mutex_lock(&dump_lock);
    jb_printf(&b, "{\"braid_dump\": 1, ");
    jb_str(&b, "host", br_host_name());
    jb_printf(&b, ", \"pid\": %d, ", (int)getpid());
    jb_str(&b, "time", when);
    jb_cat(&b, ", ");
    jb_str(&b, "trigger", trigger);
    jb_cat(&b, ",\n \"communicators\": [");
    for (int i = 0; i < n; i++) {
        if (comm_is_own(comms[i])) {
            jb_cat(&b, first ? "\n  " : ",\n  ");
            first = 0;
            comm_dump(&b, comms[i], timeout_ns);
        }
        br_comm_unhold(comms[i]); /* may free a comm released meanwhile */
    }
    free(comms);
    jb_cat(&b, "]}\n");
    if (b.oom) {
        BR_WARN(NCCL_ALLOC, "braid dump: out of memory (host %s)", br_host_name());
        res = ncclSystemError;
    } else if (strcmp(path, "-") == 0) {
        fwrite(b.s, 1, b.len, stderr);
        fflush(stderr);
        res = ncclSuccess;
    } else {
        path_expand(path, file, sizeof(file));
        res = file_write(file, b.s, b.len);
        if (res == ncclSuccess) {
            BR_INFO(NCCL_INIT, "braid dump: wrote %s (%s)", file, trigger);
        }
    }
    dump_count++;
    pthread_mutex_unlock(&dump_lock);
    free(b.s);
    return res;
}

/* ---- The SIGUSR1 service: a handler and a thread, while communicators are live ---- */

static pthread_mutex_t svc_lock = PTHREAD_MUTEX_INITIALIZER;
static int svc_live;    /* communicators of this process attached */
static int svc_running; /* the thread and the handler are in place */
static pthread_t svc_thread;
static int svc_pipe[2] = {-1, -1};
static _Atomic int svc_wfd = -1; /* what the handler writes to (-1: nothing) */
static _Atomic int svc_stop;
static struct sigaction svc_old; /* the handler we replaced (set before ours goes in) */
static pthread_once_t svc_once = PTHREAD_ONCE_INIT;

/* Async-signal-safe: one write, errno kept; then the handler we replaced, if any. */
static void svc_on_signal(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;
    int fd = atomic_load_explicit(&svc_wfd, memory_order_relaxed);
    if (fd >= 0) {
        char c = 'd';
        ssize_t w = write(fd, &c, 1); /* a full pipe already holds a wake-up */
        (void)w;
    }
    errno = saved;
    if (svc_old.sa_flags & SA_SIGINFO) {
        if (svc_old.sa_sigaction != NULL) {
            svc_old.sa_sigaction(sig, si, uc);
        }
    } else if (svc_old.sa_handler != SIG_DFL && svc_old.sa_handler != SIG_IGN &&
               svc_old.sa_handler != NULL) {
        svc_old.sa_handler(sig);
    }
}

static void *svc_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "braid-dump");
    for (;;) {
        struct pollfd p = {.fd = svc_pipe[0], .events = POLLIN};
        char drain[64];
        if (poll(&p, 1, -1) < 0 && errno != EINTR) {
            break;
        }
        /* Signals that came together make one dump. */
        while (read(svc_pipe[0], drain, sizeof(drain)) > 0) {
        }
        if (atomic_load_explicit(&svc_stop, memory_order_acquire)) {
            break;
        }
        if (p.revents != 0) {
            (void)br_comm_dump_write(NULL, "SIGUSR1");
        }
    }
    return NULL;
}

/* A fork()ed child has no dump thread, and its pipe is its parent's: drop both, and the
 * handler. Runs in the child's only thread, which held svc_lock across the fork. */
static void svc_prepare(void)
{
    pthread_mutex_lock(&svc_lock);
}

static void svc_parent(void)
{
    pthread_mutex_unlock(&svc_lock);
}

static void svc_child(void)
{
    if (svc_running) {
        sigaction(SIGUSR1, &svc_old, NULL);
        atomic_store(&svc_wfd, -1);
        close(svc_pipe[0]);
        close(svc_pipe[1]);
        svc_pipe[0] = svc_pipe[1] = -1;
        svc_running = 0;
    }
    svc_live = 0;
    pthread_mutex_unlock(&svc_lock);
}

static void svc_register_atfork(void)
{
    (void)pthread_atfork(svc_prepare, svc_parent, svc_child);
}

/* Called with svc_lock. */
static void svc_start(void)
{
    struct sigaction sa;
    int ret;

    if (pipe2(svc_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        BR_WARN(NCCL_INIT, "BRAID_DUMP: no SIGUSR1 dumps in this process: pipe: %s",
                strerror(errno));
        return;
    }
    atomic_store(&svc_stop, 0);
    ret = pthread_create(&svc_thread, NULL, svc_main, NULL);
    if (ret != 0) {
        BR_WARN(NCCL_INIT, "BRAID_DUMP: no SIGUSR1 dumps in this process: thread: %s",
                strerror(ret));
        close(svc_pipe[0]);
        close(svc_pipe[1]);
        svc_pipe[0] = svc_pipe[1] = -1;
        return;
    }
    atomic_store(&svc_wfd, svc_pipe[1]);
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = svc_on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    /* The handler to chain to is read before ours goes in, so ours never sees it half
     * written. */
    sigaction(SIGUSR1, NULL, &svc_old);
    if ((svc_old.sa_flags & SA_SIGINFO) && svc_old.sa_sigaction == svc_on_signal) {
        memset(&svc_old, 0, sizeof(svc_old)); /* never chain to ourselves */
    }
    sigaction(SIGUSR1, &sa, NULL);
    svc_running = 1;
    BR_INFO(NCCL_INIT, "BRAID_DUMP: SIGUSR1 writes a state dump to %s%s", BR_PARAM_STR(DUMP),
            (svc_old.sa_flags & SA_SIGINFO) ||
                    (svc_old.sa_handler != SIG_DFL && svc_old.sa_handler != SIG_IGN)
                ? " (and then calls the SIGUSR1 handler that was installed)"
                : "");
}

/* Called with svc_lock. */
static void svc_stop_now(void)
{
    struct sigaction cur;
    char c = 's';

    /* Put the old handler back unless someone replaced ours since; then the handler (if
     * it still runs, chained from theirs) writes nowhere. */
    if (sigaction(SIGUSR1, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
        cur.sa_sigaction == svc_on_signal) {
        sigaction(SIGUSR1, &svc_old, NULL);
    }
    atomic_store(&svc_wfd, -1);
    atomic_store_explicit(&svc_stop, 1, memory_order_release);
    while (write(svc_pipe[1], &c, 1) < 0 && errno == EINTR) {
    }
    pthread_join(svc_thread, NULL);
    close(svc_pipe[0]);
    close(svc_pipe[1]);
    svc_pipe[0] = svc_pipe[1] = -1;
    svc_running = 0;
}

/* BRAID_DUMP_OPS, at most DUMP_OPS_MAX. */
static int dump_ops(void)
{
    int64_t n = BR_PARAM_INT(DUMP_OPS);
    return n < 0 ? 0 : (n > DUMP_OPS_MAX ? DUMP_OPS_MAX : (int)n);
}

ncclResult_t br_comm_dump_attach(ncclComm_t comm)
{
    BR_CHECK(br_exec_oplog_open(comm->ec, dump_ops()));
    br_bootstrap_set_state_fn(comm->tc->boot, state_answer, comm);
    if (BR_PARAM_STR(DUMP) == NULL) {
        return ncclSuccess; /* no signal service: nothing more to set up */
    }
    pthread_once(&svc_once, svc_register_atfork);
    pthread_mutex_lock(&svc_lock);
    if (svc_live++ == 0 && !svc_running) {
        svc_start();
    }
    pthread_mutex_unlock(&svc_lock);
    return ncclSuccess;
}

void br_comm_dump_detach(ncclComm_t comm)
{
    if (BR_PARAM_STR(DUMP) == NULL || !comm_is_own(comm)) {
        return;
    }
    pthread_mutex_lock(&svc_lock);
    if (svc_live > 0 && --svc_live == 0 && svc_running) {
        svc_stop_now(); /* waits for a dump in progress (bounded by BRAID_DUMP_TIMEOUT) */
    }
    pthread_mutex_unlock(&svc_lock);
}
