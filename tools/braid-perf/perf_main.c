/* SPDX-License-Identifier: Apache-2.0 */
/*
 * braid-perf: command line and launch. The command line is nccl-tests' (-b -e -f -i -n -w
 * -m -c -d -o -r -a -t ...), plus -C to pick the collective (or the program's name, e.g. a
 * link called all_reduce_perf), -N to fork local ranks and --mem to pick the buffers.
 *
 * Launch modes: under mpirun (braid-perf-mpi) every MPI process is a rank, the unique id
 * travels by MPI_Bcast; standalone, -N forks that many processes after the parent has
 * made the unique id (children inherit it), and the parent supervises them; -t runs that
 * many ranks as threads in each process (ncclCommInitAll when there is one process).
 */
#include "perf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FAIL_GRACE_S 5 /* after one rank fails, how long the others get to finish */

struct perf_proc {
    const struct perf_opts *opts;
    struct perf_sync *sync;
    ncclUniqueId id;
    ncclComm_t *comms; /* made beforehand by ncclCommInitAll, or NULL */
    int proc, nprocs, mpi, ndev, local_base;
};

struct perf_thread {
    struct perf_proc *p;
    int thread, ret;
    pthread_t tid;
};

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [options]\n"
            "  -C, --coll NAME        allreduce allgather reducescatter broadcast reduce alltoall\n"
            "                         sendrecv (or nccl-tests' names, e.g. all_reduce_perf);\n"
            "                         Braid's alltoallv allgatherv (equal counts) and the same\n"
            "                         exchanges as grouped send/recv: alltoall_p2p allgather_p2p\n"
            "  -b, --minbytes N       smallest size, with K/M/G suffixes (default 32M)\n"
            "  -e, --maxbytes N       largest size (default 32M)\n"
            "  -f, --stepfactor F     multiply the size by F each step\n"
            "  -i, --stepbytes N      add N bytes each step (default 1M; used without -f)\n"
            "  -n, --iters N          timed iterations (default 20)\n"
            "  -w, --warmup_iters N   warm-up iterations (default 1)\n"
            "  -m, --agg_iters N      calls aggregated in one group per iteration (default 1)\n"
            "  -c, --check N          checked iterations with fresh data, 0 = off (default 1)\n"
            "  -d, --datatype T       int8 uint8 int32 uint32 int64 uint64 half float double\n"
            "                         bfloat16 f8e4m3 f8e5m2, or all (default float)\n"
            "  -o, --op OP            sum prod max min avg, or all (default sum)\n"
            "  -r, --root R           root of broadcast and reduce (default 0)\n"
            "  -a, --average M        time over ranks: 0 rank 0, 1 mean, 2 min, 3 max (default 3)\n"
            "  -N, --nranks N         fork N local processes, one rank each (standalone mode)\n"
            "  -t, --nthreads N       ranks as threads in each process (default 1)\n"
            "  -H, --hosts H          with -N: spread the processes over H simulated hosts\n"
            "                         (consecutive ranks share one; NCCL_HOSTID per process,\n"
            "                         NCCL_COMM_ID on a free loopback port)\n"
            "  -g, --ngpus N          GPUs per thread: only 1\n"
            "  -T, --timeout S        stop everything after S seconds (default: no limit); with\n"
            "                         BRAID_DUMP set, the ranks still running dump their state first\n"
            "  -J, --json FILE        also write the results as JSON\n"
            "      --mem host|device|ncclmem  buffers in host memory (default), CUDA device\n"
            "                         memory, or host memory from ncclMemAlloc\n"
            "      --place both|out|in  run out-of-place and/or in-place calls (default both)\n"
            "  -h, --help\n"
            "Under mpirun, braid-perf-mpi makes every MPI process a rank (times -t threads).\n",
            prog);
}

/* Parses "64", "4K", "16M", "1G" (powers of 1024, as nccl-tests). */
static int parse_size(const char *s, size_t *out)
{
    char *end;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (end == s || errno != 0 || v < 0) {
        return -1;
    }
    switch (*end) {
    case 'k':
    case 'K':
        v *= 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        v *= 1024.0 * 1024.0;
        end++;
        break;
    case 'g':
    case 'G':
        v *= 1024.0 * 1024.0 * 1024.0;
        end++;
        break;
    default: break;
    }
    if (strcasecmp(end, "") != 0 && strcasecmp(end, "b") != 0 && strcasecmp(end, "ib") != 0) {
        return -1;
    }
    *out = (size_t)v;
    return 0;
}

static int parse_int(const char *s, int lo, int *out)
{
    char *end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < lo || v > 1 << 30) {
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* -d and -o: one name, or "all". */
static int parse_list(const char *s, int is_type, int *vals, int *n)
{
    static const int all_types[] = {ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,
                                    ncclInt64,   ncclUint64,  ncclFloat16, ncclFloat32,
                                    ncclFloat64, ncclBfloat16};
    if (strcasecmp(s, "all") == 0) {
        *n = is_type ? (int)(sizeof(all_types) / sizeof(all_types[0])) : ncclNumOps;
        for (int i = 0; i < *n; i++) {
            vals[i] = is_type ? all_types[i] : i;
        }
        return 0;
    }
    *n = 1;
    return is_type ? perf_type_lookup(s, &vals[0]) : perf_op_lookup(s, &vals[0]);
}

static void defaults(struct perf_opts *o, const char *argv0)
{
    const char *base = strrchr(argv0, '/');
    memset(o, 0, sizeof(*o));
    o->min_bytes = o->max_bytes = 32u << 20;
    o->step_bytes = 1u << 20;
    o->step_factor = 1;
    o->iters = 20;
    o->warmup = 1;
    o->agg = 1;
    o->check = 1;
    o->types[0] = ncclFloat32;
    o->ntypes = 1;
    o->ops[0] = ncclSum;
    o->nops = 1;
    o->avg_mode = 3;
    o->nprocs = 1;
    o->nthreads = 1;
    o->places = 3;
    o->coll = PERF_ALLREDUCE;
    /* A link named after an nccl-tests binary selects that collective. */
    perf_coll_lookup(base != NULL ? base + 1 : argv0, &o->coll);
}

static int parse_opt(struct perf_opts *o, int c, const char *arg)
{
    int ngpus, graph;
    switch (c) {
    case 'C': return perf_coll_lookup(arg, &o->coll);
    case 'b': return parse_size(arg, &o->min_bytes);
    case 'e': return parse_size(arg, &o->max_bytes);
    case 'f': o->step_factor = strtod(arg, NULL); return o->step_factor > 0 ? 0 : -1;
    case 'i': return parse_size(arg, &o->step_bytes);
    case 'n': return parse_int(arg, 1, &o->iters);
    case 'w': return parse_int(arg, 0, &o->warmup);
    case 'm': return parse_int(arg, 1, &o->agg);
    case 'c': return parse_int(arg, 0, &o->check);
    case 'd': return parse_list(arg, 1, o->types, &o->ntypes);
    case 'o': return parse_list(arg, 0, o->ops, &o->nops);
    case 'r': return parse_int(arg, 0, &o->root);
    case 'a': return parse_int(arg, 0, &o->avg_mode) || o->avg_mode > 3 ? -1 : 0;
    case 'N': return parse_int(arg, 1, &o->nprocs);
    case 't': return parse_int(arg, 1, &o->nthreads);
    case 'H': return parse_int(arg, 1, &o->hosts);
    case 'g': return parse_int(arg, 1, &ngpus) || ngpus != 1 ? -1 : 0;
    case 'G': return parse_int(arg, 0, &graph) || graph != 0 ? -1 : 0;
    case 'T': return parse_int(arg, 0, &o->timeout_s);
    case 'J': o->json_path = arg; return 0;
    case 'P':
        o->places = strcmp(arg, "out") == 0    ? 1
                    : strcmp(arg, "in") == 0   ? 2
                    : strcmp(arg, "both") == 0 ? 3
                                               : 0;
        return o->places ? 0 : -1;
    case 'M':
        if (strcmp(arg, "host") != 0 && strcmp(arg, "device") != 0 &&
            strcmp(arg, "ncclmem") != 0) {
            return -1;
        }
        o->device = strcmp(arg, "device") == 0;
        o->memalloc = strcmp(arg, "ncclmem") == 0;
        return 0;
    default: return -1;
    }
}

static int parse_args(struct perf_opts *o, int argc, char **argv)
{
    static const struct option longs[] = {
        {"coll", required_argument, NULL, 'C'},
        {"minbytes", required_argument, NULL, 'b'},
        {"maxbytes", required_argument, NULL, 'e'},
        {"stepfactor", required_argument, NULL, 'f'},
        {"stepbytes", required_argument, NULL, 'i'},
        {"iters", required_argument, NULL, 'n'},
        {"warmup_iters", required_argument, NULL, 'w'},
        {"agg_iters", required_argument, NULL, 'm'},
        {"check", required_argument, NULL, 'c'},
        {"datatype", required_argument, NULL, 'd'},
        {"op", required_argument, NULL, 'o'},
        {"root", required_argument, NULL, 'r'},
        {"average", required_argument, NULL, 'a'},
        {"nranks", required_argument, NULL, 'N'},
        {"nthreads", required_argument, NULL, 't'},
        {"hosts", required_argument, NULL, 'H'},
        {"ngpus", required_argument, NULL, 'g'},
        {"cudagraph", required_argument, NULL, 'G'},
        {"timeout", required_argument, NULL, 'T'},
        {"json", required_argument, NULL, 'J'},
        {"mem", required_argument, NULL, 'M'},
        {"place", required_argument, NULL, 'P'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    defaults(o, argv[0]);
    while ((c = getopt_long(argc, argv, "C:b:e:f:i:n:w:m:c:d:o:r:a:N:t:H:g:G:T:J:h", longs, NULL)) !=
           -1) {
        if (c == 'h') {
            usage(stdout, argv[0]);
            exit(0);
        }
        if (c == '?' || parse_opt(o, c, optarg) != 0) {
            if (c != '?') {
                fprintf(stderr, "%s: invalid value '%s' for -%c\n", argv[0], optarg, c);
            }
            fprintf(stderr, "(%s --help lists the options)\n", argv[0]);
            return -1;
        }
    }
    if (optind < argc || o->min_bytes > o->max_bytes) {
        fprintf(stderr, "%s: %s\n", argv[0],
                optind < argc ? "unexpected argument" : "minbytes is larger than maxbytes");
        return -1;
    }
    return 0;
}

static void on_alarm(int sig)
{
    static const char msg[] = "braid-perf: timeout (-T) reached, stopping\n";
    (void)sig;
    if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0) {
        /* nothing more can be done from a signal handler */
    }
    _exit(124);
}

static void *rank_thread(void *arg)
{
    struct perf_thread *th = arg;
    struct perf_proc *p = th->p;
    const struct perf_opts *o = p->opts;
    struct perf_rank r = {0};
    r.opts = o;
    r.sync = p->sync;
    r.nranks = p->nprocs * o->nthreads;
    r.rank = p->proc * o->nthreads + th->thread;
    r.local = p->local_base + th->thread;
    r.gpu = p->ndev > 0 ? r.rank % p->ndev : -1;
    if (o->device && perf_mem_select_device(r.gpu) != 0) {
        perf_fatal(&r, "cannot select CUDA device %d", r.gpu);
    }
    if (p->comms != NULL) {
        r.comm = p->comms[th->thread];
    } else {
        ncclResult_t res = ncclCommInitRank(&r.comm, r.nranks, p->id, r.rank);
        if (res != ncclSuccess) {
            perf_fatal(&r, "ncclCommInitRank failed: %s: %s", ncclGetErrorString(res),
                       ncclGetLastError(NULL));
        }
    }
    th->ret = perf_rank_main(&r);
    ncclCommDestroy(r.comm);
    return NULL;
}

/* Runs this process's ranks: threads 1..n-1 in new threads, thread 0 in the caller (the
 * main thread, the only one that calls MPI). Returns 0 if every rank passed. */
static int run_process(struct perf_proc *p)
{
    int n = p->opts->nthreads, ret = 0;
    struct perf_thread *th = calloc((size_t)n, sizeof(*th));
    if (th == NULL) {
        return 2;
    }
    for (int t = 0; t < n; t++) {
        th[t].p = p;
        th[t].thread = t;
        if (t > 0 && pthread_create(&th[t].tid, NULL, rank_thread, &th[t]) != 0) {
            perf_fatal(NULL, "pthread_create failed");
        }
    }
    rank_thread(&th[0]);
    for (int t = 0; t < n; t++) {
        if (t > 0) {
            pthread_join(th[t].tid, NULL);
        }
        ret |= th[t].ret;
    }
    free(th);
    return ret;
}

/* The fork parent: waits for its children, stops the rest if one fails or time runs out. */
static int supervise(pid_t *pids, int n, int timeout_s)
{
    int left = n, status_out = 0, stopping = 0, dumped = 0;
    time_t start = time(NULL), failed_at = 0;
    while (left > 0) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        time_t now = time(NULL);
        if (pid > 0) {
            int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            for (int i = 0; i < n; i++) {
                if (pids[i] == pid) {
                    pids[i] = 0;
                    left--;
                    /* 1 means wrong results, already in the table; SIGKILL is ours. */
                    if (code > 1 && !stopping) {
                        fprintf(stderr, "braid-perf: process %d exited with status %d\n", i, code);
                    }
                }
            }
            if (code != 0 && status_out == 0) {
                status_out = code;
                failed_at = now;
            }
            continue;
        }
        int expired = timeout_s > 0 && now - start >= timeout_s;
        if (expired && !dumped && getenv("BRAID_DUMP") != NULL && getenv("BRAID_DUMP")[0]) {
            /* A hang explains itself: every rank still running writes the state dump
             * (SIGUSR1, docs/user-guide.md) before it is stopped. */
            fprintf(stderr, "braid-perf: timeout (-T) reached; asking the remaining ranks "
                            "for a state dump (BRAID_DUMP) first\n");
            for (int i = 0; i < n; i++) {
                if (pids[i] > 0) {
                    kill(pids[i], SIGUSR1);
                }
            }
            dumped = 1;
            timeout_s += 3; /* the dump waits up to BRAID_DUMP_TIMEOUT (2 s) for peers */
            continue;
        }
        if (expired || (failed_at && now - failed_at >= FAIL_GRACE_S)) {
            fprintf(stderr, "braid-perf: %s; stopping the remaining ranks\n",
                    expired ? "timeout (-T) reached" : "a rank failed");
            stopping = 1;
            for (int i = 0; i < n; i++) {
                if (pids[i] > 0) {
                    kill(pids[i], SIGKILL);
                }
            }
            if (status_out == 0) {
                status_out = 124;
            }
            failed_at = 0;
            timeout_s = 0;
        }
        usleep(20000);
    }
    return status_out;
}

static int run_on_host(struct perf_proc *p);

static int launch_fork(struct perf_proc *p)
{
    int n = p->nprocs;
    pid_t *pids = calloc((size_t)n, sizeof(*pids));
    int ret;
    if (pids == NULL) {
        return 2;
    }
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("braid-perf: fork");
            for (int j = 0; j < i; j++) {
                kill(pids[j], SIGKILL);
            }
            exit(2);
        }
        if (pid == 0) {
            p->proc = i;
            p->local_base = i * p->opts->nthreads;
            exit(p->opts->hosts > 0 ? run_on_host(p) : run_process(p));
        }
        pids[i] = pid;
    }
    ret = supervise(pids, n, p->opts->timeout_s);
    free(pids);
    return ret;
}

/* Under mpirun: every MPI process is a rank (times -t); rank 0 makes the unique id. */
static int launch_mpi(struct perf_proc *p)
{
    struct {
        ncclResult_t res;
        ncclUniqueId id;
    } msg;
    int ret;
    memset(&msg, 0, sizeof(msg));
    if (p->proc == 0) {
        msg.res = ncclGetUniqueId(&msg.id);
    }
    perf_sync_mpi_bcast(&msg, sizeof(msg)); /* the result too, so every rank stops on error */
    if (msg.res != ncclSuccess) {
        fprintf(stderr, "braid-perf: ncclGetUniqueId failed: %s\n", ncclGetErrorString(msg.res));
        perf_sync_mpi_finalize(0);
        return 2;
    }
    p->id = msg.id;
    p->sync = perf_sync_create(p->opts->nthreads, 0, 1);
    ret = p->sync ? run_process(p) : 2;
    perf_sync_destroy(p->sync);
    perf_sync_mpi_finalize(0);
    return ret;
}

/* -H: this forked process is on simulated host proc * H / N. The library reads its
 * parameters once, so the parent never calls it: every child names its host, then finds
 * the others through NCCL_COMM_ID (rank 0 serves it). */
static int run_on_host(struct perf_proc *p)
{
    char host[64];
    snprintf(host, sizeof(host), "braid-perf-host-%d", p->proc * p->opts->hosts / p->nprocs);
    setenv("NCCL_HOSTID", host, 1);
    ncclResult_t res = ncclGetUniqueId(&p->id);
    if (res != ncclSuccess) {
        fprintf(stderr, "braid-perf: ncclGetUniqueId failed: %s\n", ncclGetErrorString(res));
        return 2;
    }
    return run_process(p);
}

/* A loopback address with a port free right now, for NCCL_COMM_ID. */
static int free_port_comm_id(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    char id[64];
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        perror("braid-perf: cannot find a free port for NCCL_COMM_ID");
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    close(fd);
    snprintf(id, sizeof(id), "127.0.0.1:%d", (int)ntohs(a.sin_port));
    setenv("NCCL_COMM_ID", id, 1);
    return 0;
}

/* Standalone with -N: the parent makes the unique id, the forked children inherit it. */
static int launch_standalone(struct perf_proc *p)
{
    ncclResult_t res = ncclSuccess;
    int ret;
    if (p->opts->hosts > 0) {
        res = free_port_comm_id() == 0 ? ncclSuccess : ncclSystemError;
    } else {
        res = ncclGetUniqueId(&p->id);
    }
    if (res != ncclSuccess) {
        fprintf(stderr, "braid-perf: ncclGetUniqueId failed: %s\n", ncclGetErrorString(res));
        return 2;
    }
    p->sync = perf_sync_create(p->nprocs * p->opts->nthreads, 1, 0);
    ret = p->sync ? launch_fork(p) : 2;
    perf_sync_destroy(p->sync);
    return ret;
}

/* One process: every rank is a thread, made together by ncclCommInitAll. */
static int launch_threads(struct perf_proc *p)
{
    int n = p->opts->nthreads, ret = 2;
    ncclResult_t res;
    p->comms = calloc((size_t)n, sizeof(*p->comms));
    p->sync = perf_sync_create(n, 0, 0);
    if (p->comms == NULL || p->sync == NULL) {
        goto out;
    }
    /* Rank t on device t % count, as rank_thread selects it (NULL would ask for devices 0
     * to n - 1, more than one GPU has). */
    int *devs = calloc((size_t)n, sizeof(*devs));
    if (devs == NULL) {
        goto out;
    }
    for (int t = 0; t < n; t++) {
        devs[t] = p->ndev > 0 ? t % p->ndev : 0;
    }
    res = ncclCommInitAll(p->comms, n, p->ndev > 0 ? devs : NULL);
    free(devs);
    if (res != ncclSuccess) {
        fprintf(stderr, "braid-perf: ncclCommInitAll failed: %s\n", ncclGetErrorString(res));
        goto out;
    }
    ret = run_process(p);
out:
    perf_sync_destroy(p->sync);
    free(p->comms);
    return ret;
}

/* The CUDA devices here, or 0 with why. Ranks forked below must be the first to use CUDA
 * in their process (a CUDA context does not survive fork), so without MPI and with several
 * processes the parent asks a child of its own. */
static int device_count(const struct perf_proc *p, char *why, size_t len)
{
    int fds[2];
    if (p->nprocs < 2 || p->mpi || pipe(fds) != 0) {
        return perf_mem_device_available(why, len);
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char buf[256];
        int n = perf_mem_device_available(buf, sizeof(buf));
        close(fds[0]);
        if (n == 0 && write(fds[1], buf, strlen(buf)) < 0) {
            _exit(0);
        }
        _exit(n > 100 ? 100 : n);
    }
    close(fds[1]);
    int st = 0, n = 0;
    ssize_t got = pid > 0 ? read(fds[0], why, len - 1) : -1;
    why[got > 0 ? got : 0] = '\0';
    close(fds[0]);
    if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st)) {
        n = WEXITSTATUS(st);
    }
    if (n == 0 && why[0] == '\0') {
        snprintf(why, len, "the probe process failed");
    }
    return n;
}

int main(int argc, char **argv)
{
    struct perf_opts opts;
    struct perf_proc p;
    int mpi, wrank = 0, wsize = 1;
    char why[256];

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (parse_args(&opts, argc, argv) != 0) {
        return 2;
    }
    mpi = perf_sync_mpi_world(&wrank, &wsize);
    if (mpi && opts.nprocs > 1) {
        fprintf(stderr, "braid-perf: -N forks local ranks; under mpirun use -np instead\n");
        perf_sync_mpi_finalize(0);
        return 2;
    }
    memset(&p, 0, sizeof(p));
    p.opts = &opts;
    p.mpi = mpi;
    p.nprocs = mpi ? wsize : opts.nprocs;
    p.proc = wrank;
    if (opts.hosts > 0 && (mpi || opts.nprocs < 2 || opts.hosts > opts.nprocs)) {
        fprintf(stderr, "braid-perf: -H needs -N with at least as many processes as hosts\n");
        return 2;
    }
    if (opts.root >= p.nprocs * opts.nthreads) {
        fprintf(stderr, "braid-perf: root %d is not a rank (%d ranks)\n", opts.root,
                p.nprocs * opts.nthreads);
        perf_sync_mpi_finalize(0);
        return 2;
    }
    if (opts.device && (p.ndev = device_count(&p, why, sizeof(why))) == 0) {
        if (wrank == 0) {
            printf("# braid-perf: skipped: device buffers requested but %s\n", why);
        }
        perf_sync_mpi_finalize(0);
        return 77;
    }
    if (opts.timeout_s > 0 && (mpi || p.nprocs == 1)) {
        signal(SIGALRM, on_alarm); /* the fork parent enforces -T itself */
        alarm((unsigned)opts.timeout_s);
    }
    if (mpi) {
        return launch_mpi(&p);
    }
    return p.nprocs > 1 ? launch_standalone(&p) : launch_threads(&p);
}
