/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The unique id and the root. An id is a br_boot_handle_t (magic, random secret, root
 * address, flags) at the front of the 128 bytes, the rest zero. The root is a detached
 * thread that owns its listening socket and serves exactly one init: it reads each rank's
 * check-in (secret first), checks rank range, duplicates and nranks agreement, and once
 * every rank has arrived answers each with its ring neighbours' addresses. On any failure,
 * or when ranks are still missing BRAID_BOOTSTRAP_TIMEOUT seconds after the first arrived,
 * every rank that did arrive is answered with one error text naming the culprits.
 * The thread is a single poll() loop; it shares nothing with the rest of the process.
 */
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap_int.h"

/* Largest communicator the root accepts: beyond this nranks is a corrupt check-in. */
#define ROOT_MAX_NRANKS (1 << 22)
/* Connections the root has room for before it first grows its arrays. */
#define ROOT_INITIAL_CONNS 64

/* A connection whose check-in is still being read. */
typedef struct {
    int fd;
    br_socket_addr_t from;
    size_t got;
    br_boot_checkin_t in;
} root_pending_t;

typedef struct root {
    int listen_fd;
    br_socket_addr_t addr;
    char addr_text[BR_SOCKET_ADDR_STRLEN];
    uint64_t secret;
    uint64_t deadline; /* for the first rank, then for all of them */
    int nranks;        /* from the first check-in; 0 before it */
    int narrived;
    int *fds; /* per rank: connection to answer, -1 until it arrives */
    br_boot_checkin_t *info;
    root_pending_t *pend;
    int npend;
    int pend_cap;
    struct pollfd *pfd; /* the poll set (allocated at start, grown by the thread) */
    size_t pfd_cap;
    ncclResult_t err_res; /* set once the init has failed */
    char err[BR_BOOT_MSG_LEN];
    int nanswered; /* connections answered with the error */
    int done;
    struct root *next_live; /* live_roots */
} root_t;

/*
 * The roots this process runs, so a fork()ed child, which does not inherit their threads,
 * closes its copies of their listening sockets (or the port would keep accepting, in the
 * kernel, for nobody once the parent's root is done) and keeps their memory reachable.
 */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static root_t *live_roots;
static pthread_once_t live_once = PTHREAD_ONCE_INIT;

static void live_prepare(void)
{
    pthread_mutex_lock(&live_lock);
}

static void live_parent(void)
{
    pthread_mutex_unlock(&live_lock);
}

static void live_child(void)
{
    for (root_t *rt = live_roots; rt != NULL; rt = (root_t *)rt->next_live) {
        if (rt->listen_fd >= 0) {
            close(rt->listen_fd);
            rt->listen_fd = -1;
        }
    }
    pthread_mutex_init(&live_lock, NULL);
}

static void live_init(void)
{
    (void)pthread_atfork(live_prepare, live_parent, live_child);
}

static void live_add(root_t *rt)
{
    pthread_once(&live_once, live_init);
    pthread_mutex_lock(&live_lock);
    rt->next_live = (struct root *)live_roots;
    live_roots = rt;
    pthread_mutex_unlock(&live_lock);
}

static void live_remove(root_t *rt)
{
    pthread_mutex_lock(&live_lock);
    for (root_t **at = &live_roots; *at != NULL; at = (root_t **)&(*at)->next_live) {
        if (*at == rt) {
            *at = (root_t *)rt->next_live;
            break;
        }
    }
    pthread_mutex_unlock(&live_lock);
}

uint64_t br_boot_timeout_ns(void)
{
    return (uint64_t)br_boot_timeout_s() * 1000000000ull;
}

int br_boot_timeout_s(void)
{
    int64_t t = BR_PARAM_INT(BOOTSTRAP_TIMEOUT);
    if (t <= 0 || t > 1000000) {
        BR_WARN_ONCE(NCCL_INIT | NCCL_BOOTSTRAP,
                     "BRAID_BOOTSTRAP_TIMEOUT %lld is not a number of seconds from 1 to 1000000; "
                     "using 60",
                     (long long)t);
        return 60;
    }
    return (int)t;
}

int br_boot_handle_decode(const ncclUniqueId *id, br_boot_handle_t *h_p, char *why, size_t len)
{
    static const char zeros[NCCL_UNIQUE_ID_BYTES];
    br_boot_handle_t h;

    if (memcmp(id->internal, zeros, sizeof(zeros)) == 0) {
        snprintf(why, len,
                 "unique id is all zeros: was ncclGetUniqueId called and the id "
                 "broadcast to every rank?");
        return -1;
    }
    memcpy(&h, id->internal, sizeof(h));
    if (h.magic != BR_BOOT_ID_MAGIC) {
        snprintf(why, len,
                 "unique id starts with 0x%016llx, not Braid's magic 0x%016llx: it was "
                 "not made by this library's ncclGetUniqueId, or was damaged in the broadcast",
                 (unsigned long long)h.magic, (unsigned long long)BR_BOOT_ID_MAGIC);
        return -1;
    }
    if (h.root.sa.sa_family != AF_INET && h.root.sa.sa_family != AF_INET6) {
        snprintf(why, len,
                 "unique id holds address family %d, neither AF_INET nor AF_INET6: "
                 "damaged in the broadcast?",
                 (int)h.root.sa.sa_family);
        return -1;
    }
    if (br_socket_addr_port(&h.root) == 0) {
        snprintf(why, len, "unique id holds root port 0: damaged in the broadcast?");
        return -1;
    }
    if (h.secret == 0 || (h.flags & ~BR_BOOT_FLAGS_KNOWN) != 0) {
        snprintf(why, len, "unique id has %s: damaged in the broadcast?",
                 h.secret == 0 ? "a zero secret" : "unknown flag bits");
        return -1;
    }
    if (memcmp(id->internal + sizeof(h), zeros, sizeof(zeros) - sizeof(h)) != 0) {
        snprintf(why, len,
                 "unique id has non-zero bytes after its first %zu: damaged in the broadcast?",
                 sizeof(h));
        return -1;
    }
    *h_p = h;
    return 0;
}

ncclResult_t br_bootstrap_check_unique_id(const ncclUniqueId *id)
{
    br_boot_handle_t h;
    char why[256];

    if (br_boot_handle_decode(id, &h, why, sizeof(why)) != 0) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "%s", why);
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

/* A fresh id whose root this process serves, whatever NCCL_COMM_ID says. */
ncclResult_t br_bootstrap_new_unique_id(ncclUniqueId *id)
{
    br_boot_handle_t h;
    br_socket_addr_t local;
    int fd = -1;
    int64_t wait_s;

    memset(&h, 0, sizeof(h));
    h.magic = BR_BOOT_ID_MAGIC;
    do {
        BR_CHECK(br_random_bytes(&h.secret, sizeof(h.secret)));
    } while (h.secret == 0);
    BR_CHECK(br_socket_iface_pick(NULL, NULL, 0, &local));
    BR_CHECK(br_socket_listen(&local, &fd, &h.root));
    wait_s = BR_PARAM_INT(BOOTSTRAP_ROOT_WAIT);
    if (wait_s < br_boot_timeout_s()) {
        wait_s = br_boot_timeout_s();
    }
    /* The root owns fd from here on, failure included. */
    BR_CHECK(br_boot_root_start(fd, &h.root, h.secret, (uint64_t)wait_s * 1000000000ull));
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, &h, sizeof(h));
    return ncclSuccess;
}

uint64_t br_boot_comm_id_secret(const char *comm_id, const char *job)
{
    uint64_t s = br_hash_bytes(comm_id, strlen(comm_id), BR_BOOT_ID_MAGIC);
    if (job != NULL) {
        s = br_hash_bytes(job, strlen(job), s);
    }
    return s | 1; /* never 0 */
}

/* What tells this job from another on the same NCCL_COMM_ID: BRAID_COMM_SECRET, else the
 * launcher's job id ("NAME=value" in buf), else NULL. */
static const char *job_identity(char *buf, size_t len)
{
    static const char *const launchers[] = {"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID",
                                            "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"};
    const char *secret = BR_PARAM_STR(COMM_SECRET);

    if (secret != NULL && secret[0] != '\0') {
        snprintf(buf, len, "BRAID_COMM_SECRET=%s", secret);
        return buf;
    }
    for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++) {
        const char *v = getenv(launchers[i]); /* the launcher's, not a Braid parameter */
        /* torchrun's default run id is "none", shared by every run: no identity. */
        if (v != NULL && v[0] != '\0' && strcmp(v, "none") != 0) {
            snprintf(buf, len, "%s=%s", launchers[i], v);
            return buf;
        }
    }
    return NULL;
}

ncclResult_t br_bootstrap_get_unique_id(ncclUniqueId *id)
{
    const char *comm_id = BR_PARAM_STR(COMM_ID), *job;
    br_boot_handle_t h;
    char ident[256];

    if (comm_id == NULL) {
        return br_bootstrap_new_unique_id(id);
    }
    /* Every process of a job derives the same id from the same text and job identity;
     * rank 0 hosts the root, which refuses ranks whose secret differs. */
    memset(&h, 0, sizeof(h));
    h.magic = BR_BOOT_ID_MAGIC;
    BR_CHECK(br_socket_addr_parse(comm_id, &h.root));
    job = job_identity(ident, sizeof(ident));
    h.secret = br_boot_comm_id_secret(comm_id, job);
    h.flags = BR_BOOT_FLAG_COMM_ID;
    if (job != NULL) {
        /* The value is the secret: log only where it came from. */
        BR_INFO(NCCL_INIT | NCCL_BOOTSTRAP, "unique id from NCCL_COMM_ID %s and the job identity "
                "in %.*s", comm_id, (int)strcspn(job, "="), job);
    } else {
        BR_INFO(NCCL_INIT | NCCL_BOOTSTRAP, "unique id from NCCL_COMM_ID %s, no job identity "
                "(BRAID_COMM_SECRET or a launcher's job id): another job on the same address "
                "could join this one", comm_id);
    }
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, &h, sizeof(h));
    return ncclSuccess;
}

/* "2,3" or "2-5,9": the ranks that have not checked in, bounded by len. */
static void missing_ranks(const root_t *rt, char *buf, size_t len, int *count_p)
{
    size_t off = 0;
    int count = 0;

    buf[0] = '\0';
    for (int r = 0; r < rt->nranks; r++) {
        int end = r;
        if (rt->fds[r] >= 0) {
            continue;
        }
        while (end + 1 < rt->nranks && rt->fds[end + 1] < 0) {
            end++;
        }
        count += end - r + 1;
        if (off + 32 >= len) {
            snprintf(buf + off, len - off, ",...");
            off = len - 1;
        } else if (end - r >= 2) {
            off += (size_t)snprintf(buf + off, len - off, "%s%d-%d", off ? "," : "", r, end);
        } else {
            for (int i = r; i <= end; i++) {
                off += (size_t)snprintf(buf + off, len - off, "%s%d", off ? "," : "", i);
            }
        }
        r = end;
    }
    *count_p = count;
}

/* Send the answer, then extra_len bytes of extra (a leader's host ranks), and close. */
static void answer_with(root_t *rt, int *fd, const br_boot_answer_t *ans, const void *extra,
                        size_t extra_len)
{
    char text[BR_SOCKET_ADDR_STRLEN];
    uint64_t deadline = br_time_ns() + br_boot_timeout_ns();

    /* A rank that cannot be answered fails on its own timeout; nothing more to do here. */
    if (br_socket_send_all(*fd, ans, sizeof(*ans), deadline) != ncclSuccess ||
        (extra_len > 0 && br_socket_send_all(*fd, extra, extra_len, deadline) != ncclSuccess)) {
        socklen_t alen = sizeof(br_socket_addr_t);
        br_socket_addr_t peer;
        memset(&peer, 0, sizeof(peer));
        (void)getpeername(*fd, &peer.sa, &alen);
        BR_INFO(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap root at %s: could not answer %s: %s",
                rt->addr_text, br_socket_addr_str(&peer, text, sizeof(text)), strerror(errno));
    }
    br_socket_close(fd);
}

static void answer(root_t *rt, int *fd, const br_boot_answer_t *ans)
{
    answer_with(rt, fd, ans, NULL, 0);
}

/* The init has failed: tell every rank that arrived, and every rank that arrives later. */
static void root_fail(root_t *rt, ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void root_fail(root_t *rt, ncclResult_t res, const char *fmt, ...)
{
    br_boot_answer_t ans;
    va_list ap;

    if (rt->err_res != ncclSuccess) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(rt->err, sizeof(rt->err), fmt, ap);
    va_end(ap);
    rt->err_res = res;
    BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "%s", rt->err);
    memset(&ans, 0, sizeof(ans));
    ans.secret = rt->secret;
    ans.res = (int32_t)res;
    snprintf(ans.msg, sizeof(ans.msg), "%s", rt->err);
    for (int r = 0; r < rt->nranks; r++) {
        if (rt->fds[r] >= 0) {
            answer(rt, &rt->fds[r], &ans);
            rt->nanswered++;
        }
    }
    rt->done = rt->nanswered >= rt->nranks;
}

/* Ranks by (host, rank), and hosts by their leaders' ranks: qsort_r orders. */
static int by_host(const void *a, const void *b, void *arg)
{
    const br_boot_checkin_t *info = arg;
    int x = *(const int *)a, y = *(const int *)b;
    if (info[x].shm_key != info[y].shm_key) {
        return info[x].shm_key < info[y].shm_key ? -1 : 1;
    }
    return x < y ? -1 : x > y;
}

static int by_leader(const void *a, const void *b, void *arg)
{
    const int *lead = arg; /* per host in hash order: its lowest rank */
    int x = lead[*(const int *)a], y = lead[*(const int *)b];
    return x < y ? -1 : x > y;
}

/* Group the ranks by host for allgathers through host memory (a host: the ranks whose
 * /dev/shm is one, by shm_key, so containers of one machine with their own are apart;
 * every rank follows this one grouping, so they choose alike): the ranks by host, hosts
 * in the order of their leaders (lowest ranks), each host's ranks ascending (sorted; host
 * k's are sorted[start[k] .. start[k + 1])), and per rank its host (node_of) and its
 * index there (lidx_of). Returns the host count, or 0 when allgathers go over sockets (a
 * rank without BRAID_BOOTSTRAP_SHM, every host a single rank, or no memory for this). */
static int root_group(const root_t *rt, int **sorted_p, int **start_p, int **node_of_p,
                      int **lidx_of_p)
{
    int n = rt->nranks, nn = 0, hier = n >= 2;
    int *by_hash = calloc((size_t)n, sizeof(int)), *runs = calloc((size_t)n + 1, sizeof(int));
    int *lead = calloc((size_t)n, sizeof(int)), *order = calloc((size_t)n, sizeof(int));
    int *sorted = calloc((size_t)n, sizeof(int)), *start = calloc((size_t)n + 1, sizeof(int));
    int *node_of = calloc((size_t)n, sizeof(int)), *lidx_of = calloc((size_t)n, sizeof(int));

    for (int r = 0; r < n; r++) {
        hier &= rt->info[r].shm != 0;
    }
    if (!hier || by_hash == NULL || runs == NULL || lead == NULL || order == NULL ||
        sorted == NULL || start == NULL || node_of == NULL || lidx_of == NULL) {
        goto out;
    }
    for (int r = 0; r < n; r++) {
        by_hash[r] = r;
    }
    qsort_r(by_hash, (size_t)n, sizeof(int), by_host, rt->info);
    for (int i = 0; i < n; i++) {
        if (i == 0 || rt->info[by_hash[i]].shm_key != rt->info[by_hash[i - 1]].shm_key) {
            lead[nn] = by_hash[i];
            order[nn] = nn;
            runs[nn++] = i;
        }
    }
    runs[nn] = n;
    if (nn == n) {
        nn = 0;
        goto out;
    }
    qsort_r(order, (size_t)nn, sizeof(int), by_leader, lead);
    for (int k = 0, at = 0; k < nn; k++) {
        int h = order[k];
        start[k] = at;
        for (int i = runs[h]; i < runs[h + 1]; i++, at++) {
            sorted[at] = by_hash[i];
            node_of[by_hash[i]] = k;
            lidx_of[by_hash[i]] = at - start[k];
        }
    }
    start[nn] = n;
    *sorted_p = sorted;
    *start_p = start;
    *node_of_p = node_of;
    *lidx_of_p = lidx_of;
    sorted = start = node_of = lidx_of = NULL;
out:
    free(by_hash);
    free(runs);
    free(lead);
    free(order);
    free(sorted);
    free(start);
    free(node_of);
    free(lidx_of);
    return nn;
}

/* Every rank is here: give each its ring neighbours and first allgather's partners. */
static void root_succeed(root_t *rt)
{
    int n = rt->nranks;
    int *sorted = NULL, *start = NULL, *node_of = NULL, *lidx_of = NULL;
    int nn = root_group(rt, &sorted, &start, &node_of, &lidx_of);
    uint64_t nonce = 0;
    br_boot_local_t *local = nn > 0 ? calloc((size_t)n, sizeof(*local)) : NULL;

    if (br_random_bytes(&nonce, sizeof(nonce)) != ncclSuccess) {
        nonce = br_time_ns() ^ rt->secret; /* only needs to differ from an earlier init's */
    }

    for (int r = 0; r < n; r++) {
        br_boot_answer_t ans;
        memset(&ans, 0, sizeof(ans));
        ans.secret = rt->secret;
        ans.res = ncclSuccess;
        ans.next = rt->info[(r + 1) % n].addr;
        ans.prev = rt->info[(r + n - 1) % n].addr;
        if (nn == 0) {
            for (int k = 0; k < BR_BOOT_HOPS && (1 << k) < n; k++) {
                ans.hop_rank[k] = (r + n - (1 << k)) % n;
                ans.from_rank[k] = (r + (1 << k)) % n;
                ans.hop[k] = rt->info[ans.hop_rank[k]].addr;
            }
        } else {
            int node = node_of[r], leader = sorted[start[node]];
            ans.hier = 1;
            ans.leader = leader;
            ans.leader_pid = rt->info[leader].pid;
            ans.leader_pid_ns = rt->info[leader].pid_ns;
            ans.nonce = nonce;
            ans.nlocal = start[node + 1] - start[node];
            ans.lidx = lidx_of[r];
            ans.nnodes = nn;
            ans.node = node;
            for (int k = 0; k < BR_BOOT_HOPS && (1 << k) < nn && r == leader; k++) {
                ans.hop_rank[k] = sorted[start[(node + nn - (1 << k)) % nn]];
                ans.from_rank[k] = sorted[start[(node + (1 << k)) % nn]];
                ans.hop[k] = rt->info[ans.hop_rank[k]].addr;
            }
        }
        size_t nlocal = 0;
        if (ans.hier && r == ans.leader && ans.nlocal > 1) {
            /* Its leader gets the host's ranks (a leader that cannot have them fails its
             * init on a short read, rather than waiting blind for a dead rank). */
            for (int i = start[ans.node]; i < start[ans.node + 1] && local != NULL; i++) {
                const br_boot_checkin_t *c = &rt->info[sorted[i]];
                local[nlocal++] = (br_boot_local_t){sorted[i], c->pid, c->pid_ns};
            }
        }
        answer_with(rt, &rt->fds[r], &ans, local, nlocal * sizeof(*local));
    }
    free(local);
    free(sorted);
    free(start);
    free(node_of);
    free(lidx_of);
    BR_INFO(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap root at %s: all %d ranks checked in",
            rt->addr_text, n);
    rt->done = 1;
}

static void desc_checkin(const br_boot_checkin_t *c, char *buf, size_t len)
{
    snprintf(buf, len, "rank %d (host %.*s, pid %d)", c->rank, BR_BOOT_HOST_LEN - 1, c->host,
             c->pid);
}

/* The first check-in fixes nranks and starts the clock for everyone else. */
static int root_first(root_t *rt, const br_boot_checkin_t *c)
{
    if (c->nranks < 1 || c->nranks > ROOT_MAX_NRANKS) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap root at %s: ignoring a check-in with nranks %d", rt->addr_text,
                c->nranks);
        return -1;
    }
    rt->fds = malloc(sizeof(*rt->fds) * (size_t)c->nranks);
    rt->info = calloc((size_t)c->nranks, sizeof(*rt->info));
    if (rt->fds == NULL || rt->info == NULL) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap root: out of memory for %d ranks",
                c->nranks);
        free(rt->fds);
        free(rt->info);
        rt->fds = NULL;
        rt->info = NULL;
        return -1;
    }
    for (int r = 0; r < c->nranks; r++) {
        rt->fds[r] = -1;
    }
    rt->nranks = c->nranks;
    rt->deadline = br_time_ns() + br_boot_timeout_ns();
    return 0;
}

static void root_checkin(root_t *rt, int fd, const br_boot_checkin_t *c)
{
    char me[160], other[160];
    int tmp = fd;

    desc_checkin(c, me, sizeof(me));
    if (rt->nranks == 0 && root_first(rt, c) != 0) {
        br_socket_close(&tmp);
        return;
    }
    if (rt->err_res == ncclSuccess && c->nranks != rt->nranks) {
        int first = 0;
        while (first < rt->nranks && rt->fds[first] < 0) {
            first++;
        }
        desc_checkin(&rt->info[first], other, sizeof(other));
        root_fail(rt, ncclInvalidUsage,
                  "bootstrap: ranks disagree on the number of ranks: %s "
                  "says %d but %s says %d (root at %s)",
                  me, c->nranks, other, rt->nranks, rt->addr_text);
    } else if (rt->err_res == ncclSuccess && (c->rank < 0 || c->rank >= rt->nranks)) {
        root_fail(rt, ncclInvalidUsage, "bootstrap: %s is out of range for %d ranks (root at %s)",
                  me, rt->nranks, rt->addr_text);
    } else if (rt->err_res == ncclSuccess && rt->fds[c->rank] >= 0) {
        desc_checkin(&rt->info[c->rank], other, sizeof(other));
        root_fail(rt, ncclInvalidUsage,
                  "bootstrap: rank %d checked in twice, as %s and as %s: "
                  "were two processes given the same rank? (root at %s)",
                  c->rank, other, me, rt->addr_text);
    }
    if (rt->err_res != ncclSuccess) {
        br_boot_answer_t ans;
        memset(&ans, 0, sizeof(ans));
        ans.secret = rt->secret;
        ans.res = (int32_t)rt->err_res;
        snprintf(ans.msg, sizeof(ans.msg), "%s", rt->err);
        answer(rt, &tmp, &ans);
        rt->nanswered++;
        rt->done = rt->nanswered >= rt->nranks;
        return;
    }
    rt->fds[c->rank] = fd;
    rt->info[c->rank] = *c;
    rt->info[c->rank].host[BR_BOOT_HOST_LEN - 1] = '\0';
    if (++rt->narrived == rt->nranks) {
        root_succeed(rt);
    }
}

/* Read what has come on a pending connection; returns 1 when it is finished with. */
static int root_pending_read(root_t *rt, root_pending_t *p)
{
    char text[BR_SOCKET_ADDR_STRLEN];
    size_t got = 0;
    ncclResult_t res = ncclSuccess;

    while (p->got < sizeof(p->in)) {
        res = br_socket_recv_some(p->fd, (char *)&p->in + p->got, sizeof(p->in) - p->got, &got);
        if (res != ncclSuccess || got == 0) {
            break;
        }
        p->got += got;
    }
    br_socket_addr_str(&p->from, text, sizeof(text));
    /* A whole check-in of this protocol with another secret: a Braid rank of another job.
     * (A rank sends its check-in in one write; read all of it before replying, since
     * closing on unread bytes would reset the reply.) Anything else is dropped below. */
    if (p->got == sizeof(p->in) && p->in.secret != rt->secret && p->in.proto == BR_BOOT_PROTO) {
        /* Tell the rank why, under its own secret (all a refusal can prove), then drop it. */
        br_boot_answer_t ans;
        memset(&ans, 0, sizeof(ans));
        ans.secret = p->in.secret;
        ans.res = ncclInvalidUsage;
        snprintf(ans.msg, sizeof(ans.msg),
                 "bootstrap: the root at %s belongs to another job or communicator (its secret "
                 "differs): do two jobs share one NCCL_COMM_ID? Give each job its own address, "
                 "and every rank of one job the same BRAID_COMM_SECRET or launcher job id",
                 rt->addr_text);
        (void)br_socket_send_all(p->fd, &ans, sizeof(ans), br_time_ns() + 1000000000ull);
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: root at %s refused a connection from %s with another secret "
                "(another job on the same NCCL_COMM_ID, or a stale unique id)",
                rt->addr_text, text);
        br_socket_close(&p->fd);
        return 1;
    }
    if ((res != ncclSuccess && p->got < sizeof(p->in.secret)) ||
        (p->got >= sizeof(p->in.secret) && p->in.secret != rt->secret)) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: dropped a connection from %s that did "
                "not present the communicator's secret (root at %s)",
                text, rt->addr_text);
        br_socket_close(&p->fd);
        return 1;
    }
    if (res != ncclSuccess) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: root at %s: %s closed its connection in the middle of its check-in",
                rt->addr_text, text);
        br_socket_close(&p->fd);
        return 1;
    }
    if (p->got < sizeof(p->in)) {
        return 0;
    }
    if (p->in.proto != BR_BOOT_PROTO) {
        /* A rank of this job (it has the secret) on another Braid version: the init fails
         * for every rank now, this one included (the check-in's layout has not changed, nor
         * the answer's), rather than at the timeout for a rank the others wait for. */
        char me[160];
        desc_checkin(&p->in, me, sizeof(me));
        if (rt->nranks == 0 && root_first(rt, &p->in) != 0) {
            br_socket_close(&p->fd);
            return 1;
        }
        root_fail(rt, ncclInvalidUsage,
                  "bootstrap: %s (at %s) speaks bootstrap protocol %u, this root %u: every "
                  "process of a job must run the same Braid version (root at %s)",
                  me, text, p->in.proto, BR_BOOT_PROTO, rt->addr_text);
        root_checkin(rt, p->fd, &p->in);
        p->fd = -1;
        return 1;
    }
    root_checkin(rt, p->fd, &p->in);
    p->fd = -1;
    return 1;
}

/* Take every connection waiting on the listener. */
static void root_accept(root_t *rt)
{
    for (;;) {
        br_socket_addr_t from;
        int fd = -1;
        if (br_socket_accept(rt->listen_fd, 0, &fd, &from) != ncclSuccess) {
            return;
        }
        if (rt->npend == rt->pend_cap) {
            int cap = rt->pend_cap ? 2 * rt->pend_cap : 16;
            root_pending_t *p = realloc(rt->pend, sizeof(*p) * (size_t)cap);
            if (p == NULL) {
                BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap root: out of memory");
                br_socket_close(&fd);
                return;
            }
            rt->pend = p;
            rt->pend_cap = cap;
        }
        memset(&rt->pend[rt->npend], 0, sizeof(rt->pend[0]));
        rt->pend[rt->npend].fd = fd;
        rt->pend[rt->npend].from = from;
        rt->npend++;
    }
}

/* An arrived rank's connection became readable: it can only have closed. */
static void root_check_arrived(root_t *rt, int r)
{
    char c;
    size_t got = 0;
    char me[160];

    if (br_socket_recv_some(rt->fds[r], &c, 1, &got) == ncclSuccess) {
        return; /* stray byte or nothing: ignore */
    }
    desc_checkin(&rt->info[r], me, sizeof(me));
    br_socket_close(&rt->fds[r]);
    rt->narrived--;
    root_fail(rt, ncclSystemError,
              "bootstrap: %s left before all %d ranks had joined (its init "
              "failed or its process died; root at %s)",
              me, rt->nranks, rt->addr_text);
}

/* Time is up: name the ranks that never came. */
static void root_deadline(root_t *rt)
{
    char list[BR_BOOT_MSG_LEN / 2];
    int count;

    if (rt->nranks == 0) {
        BR_INFO(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap root at %s: no rank arrived; exiting",
                rt->addr_text);
        return;
    }
    if (rt->err_res != ncclSuccess) {
        return;
    }
    missing_ranks(rt, list, sizeof(list), &count);
    root_fail(rt, ncclSystemError, "bootstrap: %s %s of %d did not join within %d s (root at %s)",
              count == 1 ? "rank" : "ranks", list, rt->nranks, br_boot_timeout_s(), rt->addr_text);
}

/* One pass of the loop: poll everything, handle what is ready. Returns -1 on a fatal
 * poll failure. */
static int root_step(root_t *rt, struct pollfd *pfd)
{
    int n = 0, ret;
    int narr_base;
    int npend = rt->npend;

    pfd[n++] = (struct pollfd){.fd = rt->listen_fd, .events = POLLIN};
    for (int i = 0; i < rt->npend; i++) {
        pfd[n++] = (struct pollfd){.fd = rt->pend[i].fd, .events = POLLIN};
    }
    narr_base = n;
    for (int r = 0; r < rt->nranks && rt->err_res == ncclSuccess; r++) {
        pfd[n++] = (struct pollfd){.fd = rt->fds[r], .events = POLLIN};
    }
    ret = poll(pfd, (nfds_t)n, br_socket_poll_ms(rt->deadline, 1000));
    if (ret < 0) {
        if (errno == EINTR) {
            return 0;
        }
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap root: poll failed: %s", strerror(errno));
        return -1;
    }
    for (int r = 0; r < n - narr_base && rt->err_res == ncclSuccess; r++) {
        if (pfd[narr_base + r].fd >= 0 && pfd[narr_base + r].revents != 0) {
            root_check_arrived(rt, r);
        }
    }
    /* Keep the pending connections not yet finished with, in order. */
    for (int i = 0, j = 0; i < npend; i++) {
        if (!(pfd[1 + i].revents != 0 && !rt->done && root_pending_read(rt, &rt->pend[i]))) {
            rt->pend[j++] = rt->pend[i];
        }
        rt->npend = j;
    }
    if (pfd[0].revents != 0 && !rt->done) {
        root_accept(rt);
    }
    return 0;
}

static void root_free(root_t *rt)
{
    live_remove(rt);
    for (int i = 0; i < rt->npend; i++) {
        br_socket_close(&rt->pend[i].fd);
    }
    for (int r = 0; r < rt->nranks; r++) {
        br_socket_close(&rt->fds[r]);
    }
    br_socket_close(&rt->listen_fd);
    free(rt->pend);
    free(rt->pfd);
    free(rt->fds);
    free(rt->info);
    free(rt);
}

/* Handshake between br_boot_root_start and the thread it starts (on the starter's stack). */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int ready;
    root_t *rt;
} root_start_t;

static void *root_main(void *arg)
{
    root_start_t *start = arg;
    root_t *rt = start->rt;

    pthread_setname_np(pthread_self(), "braid-bootroot");
    BR_INFO(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap root listening on %s", rt->addr_text);
    /* From here on the thread sits in poll() until a rank connects, holding no lock, so a
     * fork() right after ncclGetUniqueId (a common launcher pattern) cannot copy a held
     * allocator or logger lock into the child. start lives on the starter's stack: it is
     * not touched after this. */
    pthread_mutex_lock(&start->lock);
    start->ready = 1;
    pthread_cond_signal(&start->cond);
    pthread_mutex_unlock(&start->lock);
    while (!rt->done) {
        size_t need = 1 + (size_t)rt->npend + (size_t)rt->nranks;
        if (br_time_ns() >= rt->deadline) {
            root_deadline(rt);
            break;
        }
        if (need > rt->pfd_cap) {
            struct pollfd *p = realloc(rt->pfd, need * 2 * sizeof(*p));
            if (p == NULL) {
                BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap root: out of memory");
                break;
            }
            rt->pfd = p;
            rt->pfd_cap = need * 2;
        }
        if (root_step(rt, rt->pfd) != 0) {
            break;
        }
    }
    root_free(rt);
    return NULL;
}

ncclResult_t br_boot_root_start(int listen_fd, const br_socket_addr_t *addr, uint64_t secret,
                                uint64_t wait_first_ns)
{
    ncclResult_t res = ncclSuccess;
    root_start_t start = {.ready = 0};
    pthread_attr_t attr;
    pthread_t thread;
    root_t *rt = NULL;
    int ret;

    BR_CHECK_GOTO(br_calloc(&rt, 1, "bootstrap root"), res, err_free);
    rt->listen_fd = listen_fd;
    rt->addr = *addr;
    br_socket_addr_str(addr, rt->addr_text, sizeof(rt->addr_text));
    rt->secret = secret;
    rt->deadline = br_time_ns() + wait_first_ns;
    /* Room for the first connections, allocated here rather than in the thread (see the
     * handshake in root_main). */
    rt->pend_cap = ROOT_INITIAL_CONNS;
    rt->pfd_cap = 2 * ROOT_INITIAL_CONNS;
    rt->pend = calloc((size_t)rt->pend_cap, sizeof(*rt->pend));
    rt->pfd = calloc(rt->pfd_cap, sizeof(*rt->pfd));
    if (rt->pend == NULL || rt->pfd == NULL) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap root: out of memory");
        res = ncclSystemError;
        goto err_free;
    }
    start.rt = rt;
    live_add(rt); /* before the thread exists: its end removes it */
    pthread_mutex_init(&start.lock, NULL);
    pthread_cond_init(&start.cond, NULL);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* Detached: the thread frees rt and closes listen_fd itself when it is done. */
    ret = pthread_create(&thread, &attr, root_main, &start);
    pthread_attr_destroy(&attr);
    if (ret == 0) {
        pthread_mutex_lock(&start.lock);
        while (!start.ready) {
            pthread_cond_wait(&start.cond, &start.lock);
        }
        pthread_mutex_unlock(&start.lock);
    }
    pthread_cond_destroy(&start.cond);
    pthread_mutex_destroy(&start.lock);
    if (ret != 0) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "cannot start the bootstrap root thread: %s",
                strerror(ret));
        res = ncclSystemError;
        goto err_free;
    }
    return ncclSuccess;
err_free:
    if (rt != NULL) {
        live_remove(rt);
        free(rt->pend);
        free(rt->pfd);
        free(rt);
    }
    br_socket_close(&listen_fd);
    return res;
}
