/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bootstrap's allgathers through each host's shared memory. The root groups the ranks
 * by host when it answers their check-ins (br_shm_key: host name and boot id, or
 * NCCL_HOSTID, and the device of /dev/shm, so that containers of one machine that each
 * have their own /dev/shm are different hosts here), and the ranks of a host meet in one
 * segment that its lowest rank (the host's leader) creates:
 *
 *   - every rank writes its slot into the segment's table and counts itself in;
 *   - the leader waits for its host's ranks, allgathers the host's slots with the other
 *     hosts' leaders over the bootstrap's sockets (Bruck's log2(hosts) rounds, each
 *     host's block as long as its rank count), writes what came into the table, and
 *     publishes the round's generation;
 *   - every rank copies the whole table out.
 *
 * So the slots cross the network once per host instead of once per rank (n^2 bytes through
 * loopback TCP when all ranks share one machine), and a rank wakes once per allgather,
 * not once per round. The first allgather (the peer table: listeners, hosts, pids) comes
 * before anyone knows which ranks a host holds: its blocks between leaders carry their
 * ranks. The table has two halves, used by alternate generations: a rank still copying
 * generation g out while a faster one writes g + 1 reads the other half, and nobody can
 * reach g + 2 before everyone has arrived at g + 1. A slot larger than the table's share
 * per rank goes in several generations.
 *
 * Waits sleep on futexes in the segment in slices that grow from SLICE_MIN_MS to
 * SLICE_MAX_MS (a thousand waiting ranks must not keep two cores busy); between slices a
 * waiter checks that the ranks it waits for still exist (kill(pid, 0) and /proc, where the
 * pid namespace is its own; the leader knows its host's pids from the root, so a rank that
 * dies before it maps the segment is seen too) or, once it has mapped the segment, that its
 * lock byte there is still held (hier_lock: any pid namespace), the bootstrap's abort,
 * cancel and deadline, and the segment's
 * failure word: the first rank of a host that fails writes why there and wakes the
 * others, so a host's ranks end together with the same text.
 *
 * The segment's name (/braid-<leader pid>-boot-<secret>) exists from the leader's
 * creation until every rank of the host has mapped it (the first generation); the leader
 * unlinks it then, or when setup fails. A rank maps it only once it holds the secret and
 * the nonce the root drew for this init, so a segment a killed earlier run left under
 * the same name (NCCL_COMM_ID gives every run one secret) is never joined.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap_int.h"

/* How long a waiter sleeps before it looks at the ranks it waits for again. */
#define SLICE_MIN_MS 20
#define SLICE_MAX_MS 500
/* The table's share per rank: slots up to this size go in one generation. */
#define SLOT_SHARE 512
#define TABLE_MIN (64u << 10)
#define PAGE 4096u
/* A failure's text, as the host's ranks share it. */
#define WHY_LEN 512

/* The segment's first page. Words that ranks wait on sit on lines of their own. */
typedef struct {
    uint64_t secret;
    uint64_t nonce;         /* the root's for this init (a stale segment has another) */
    _Atomic uint32_t ready; /* the leader has set the segment up */
    char pad0[44];
    _Atomic uint32_t arrived; /* the non-leader ranks' arrivals, counted over all generations */
    char pad1[60];
    _Atomic uint32_t gen; /* the last generation the leader published */
    char pad2[60];
    _Atomic uint32_t failed; /* 1: a rank is writing why; 2: why is complete */
    char why[WHY_LEN];
} hier_hdr_t;

/* One per rank of the host, by its index there (0: the leader): rank, pid and pid_ns from
 * the root (the leader fills them in) and again from the rank when it maps. */
typedef struct {
    _Atomic uint32_t seen; /* the last generation it arrived at */
    int32_t rank;
    int32_t pid;             /* 0: not known */
    _Atomic uint32_t locked; /* 1: it holds its lock byte (hier_lock) */
    uint64_t pid_ns;
} hier_slot_t;

_Static_assert(sizeof(hier_hdr_t) <= PAGE, "hier header fits its page");

struct br_boot_hier {
    void *base;
    size_t size;
    hier_hdr_t *hdr;
    hier_slot_t *slot; /* nlocal entries */
    char *table[2];
    size_t cap; /* bytes per table half */
    uint32_t gen;
    uint64_t pid_ns;  /* this process's */
    int nlocal, lidx; /* ranks of this host; this rank's index among them */
    int nnodes, node; /* hosts, ordered by their leader's rank; this rank's */
    int leader, leader_pid;
    uint64_t leader_pid_ns;
    uint64_t nonce;
    int fd; /* the segment, open while mapped (its lock bytes), or -1 */
    int hop_rank[BR_BOOT_HOPS], from_rank[BR_BOOT_HOPS]; /* the first allgather's leaders */
    int *node_start; /* from the peer table: node k's ranks are */
    int *node_ranks; /* node_ranks[node_start[k] .. node_start[k + 1]) */
    int *local;      /* this host's (local[0]: the leader) */
    char name[96];   /* the leader's, until unlinked */
};

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, 0);
}

/* Sleep while *word is val, at most *slice_ms, which grows for the next call. */
static void futex_wait_slice(_Atomic uint32_t *word, uint32_t val, int *slice_ms)
{
    struct timespec ts = {*slice_ms / 1000, (long)(*slice_ms % 1000) * 1000000L};
    (void)futex(word, FUTEX_WAIT, val, &ts);
    *slice_ms = *slice_ms * 2 < SLICE_MAX_MS ? *slice_ms * 2 : SLICE_MAX_MS;
}

static void futex_wake_all(_Atomic uint32_t *word)
{
    (void)futex(word, FUTEX_WAKE, INT_MAX, NULL);
}

void br_boot_peer_fill(br_bootstrap_t *boot, br_boot_peer_t *me)
{
    me->addr = boot->listen_addr;
    me->pid = (int32_t)getpid();
    snprintf(me->host, sizeof(me->host), "%s", br_host_name());
    me->shm_key = br_shm_key(NULL);
    uint64_t pid_key[2] = {br_machine_hash(), br_pid_ns()};
    me->pid_key = br_hash_bytes(pid_key, sizeof(pid_key), 0);
}

/* Is the process pid (of pid namespace ns) known to be gone? Only where pid means the
 * same here. */
static int proc_dead(const br_boot_hier_t *h, int pid, uint64_t ns)
{
    return ns == h->pid_ns && br_proc_gone(pid);
}

/*
 * Liveness that needs no pid: every rank that maps the segment holds an open file
 * description lock on byte (its index) of the segment's file as long as it has it open,
 * and the kernel drops the lock when the process dies, whatever its pid namespace. So a
 * rank of another namespace (a container that shares this /dev/shm but not its pids) is
 * seen to die as promptly as one of this namespace once it has mapped the segment.
 */
static void hier_lock(br_boot_hier_t *h)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = h->lidx, .l_len = 1};
    if (h->fd >= 0 && fcntl(h->fd, F_OFD_SETLK, &fl) == 0) {
        /* Release: whoever sees the flag finds the lock taken (or its holder gone). */
        atomic_store_explicit(&h->slot[h->lidx].locked, 1, memory_order_release);
    }
}

/* Has the rank at index i held its lock byte and let go of it (its process ended)? */
static int hier_lock_gone(const br_boot_hier_t *h, int i)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = i, .l_len = 1};
    if (h->fd < 0 || atomic_load_explicit(&h->slot[i].locked, memory_order_acquire) == 0) {
        return 0;
    }
    return fcntl(h->fd, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK;
}

/* Record a failure for the whole host (the first one wins) and wake everyone. */
static void hier_fail(br_boot_hier_t *h, const char *why)
{
    uint32_t zero = 0;
    if (h->hdr == NULL) {
        return;
    }
    if (atomic_compare_exchange_strong(&h->hdr->failed, &zero, 1)) {
        snprintf(h->hdr->why, sizeof(h->hdr->why), "%s", why);
        atomic_store_explicit(&h->hdr->failed, 2, memory_order_release);
    }
    futex_wake_all(&h->hdr->gen);
    futex_wake_all(&h->hdr->arrived);
}

/* Why the host's ranks have stopped, or 0. */
static int hier_failed(br_boot_hier_t *h, char *why, size_t len)
{
    uint32_t f = atomic_load_explicit(&h->hdr->failed, memory_order_acquire);
    if (f == 0) {
        return 0;
    }
    for (int i = 0; i < 1000 && f != 2; i++) { /* the writer is a few bytes from done */
        sched_yield();
        f = atomic_load_explicit(&h->hdr->failed, memory_order_acquire);
    }
    snprintf(why, len, "%s", f == 2 ? h->hdr->why : "another rank of this host failed");
    return 1;
}

/* One slice's checks while waiting for the host's rank at index i; 0 to keep waiting. */
static ncclResult_t hier_check(br_bootstrap_t *boot, int i, uint64_t deadline, char *why,
                               size_t len)
{
    br_boot_hier_t *h = boot->hier;
    /* Generation 1 is the setup: every rank of the host maps the segment. */
    const char *what = i == 0 ? (h->gen == 1 ? "(this host's leader) in the setup of this host's "
                                               "bootstrap shared memory"
                                             : "(this host's leader) in a bootstrap allgather")
                              : (h->gen == 1 ? "to map this host's bootstrap shared memory"
                                             : "in a bootstrap allgather");
    const hier_slot_t *sl = &h->slot[i];
    int pid = i == 0 ? h->leader_pid : sl->pid;
    int peer = i == 0 ? h->leader : (pid > 0 ? sl->rank : -1);
    uint64_t ns = i == 0 ? h->leader_pid_ns : sl->pid_ns;
    char who[160], reason[BR_BOOT_REASON_LEN + 64];
    ncclResult_t res;

    if (hier_failed(h, why, len)) {
        return ncclRemoteError;
    }
    pthread_mutex_lock(&boot->lock);
    res = br_boot_wait_blocked(boot, peer >= 0 ? peer : boot->rank, reason, sizeof(reason));
    pthread_mutex_unlock(&boot->lock);
    if (peer >= 0 && boot->peers[peer].info.pid == 0) {
        /* Before the peer table: what the root told us (a host's ranks share its name). */
        snprintf(who, sizeof(who), "rank %d (host %.64s, pid %d)", peer, br_host_name(), pid);
    } else if (peer >= 0) {
        br_boot_rank_str(boot, peer, who, sizeof(who));
    } else {
        snprintf(who, sizeof(who), "this host's rank number %d (by rank), which never mapped "
                 "the host's memory,", i);
    }
    if (res == ncclSuccess && proc_dead(h, pid, ns)) {
        snprintf(reason, sizeof(reason), "its process is gone");
        res = ncclRemoteError;
    }
    if (res == ncclSuccess && hier_lock_gone(h, i)) {
        snprintf(reason, sizeof(reason),
                 "its process is gone (it let go of its lock on the host's segment)");
        res = ncclRemoteError;
    }
    if (res == ncclSuccess && br_time_ns() >= deadline) {
        snprintf(reason, sizeof(reason), "it did not arrive within %d s", br_boot_timeout_s());
        res = ncclSystemError;
    }
    if (res != ncclSuccess) {
        snprintf(why, len, "rank %d (host %.64s) stopped waiting for %.120s %s: %.150s",
                 boot->rank, br_host_name(), who, what, reason);
    }
    return res;
}

/* This rank is not the leader: count in for generation g. */
static void hier_arrive(br_boot_hier_t *h, uint32_t g)
{
    atomic_store_explicit(&h->slot[h->lidx].seen, g, memory_order_relaxed);
    /* Release: the leader that sees the count sees this rank's slot. */
    uint32_t a = atomic_fetch_add_explicit(&h->hdr->arrived, 1, memory_order_acq_rel) + 1;
    if (a == g * (uint32_t)(h->nlocal - 1)) {
        futex_wake_all(&h->hdr->arrived);
    }
}

/* The leader: wait until every rank of the host has arrived at generation g. */
static ncclResult_t hier_wait_arrivals(br_bootstrap_t *boot, uint32_t g, uint64_t deadline,
                                       char *why, size_t len)
{
    br_boot_hier_t *h = boot->hier;
    uint32_t want = g * (uint32_t)(h->nlocal - 1);
    int slice_ms = SLICE_MIN_MS;

    for (;;) {
        uint32_t a = atomic_load_explicit(&h->hdr->arrived, memory_order_acquire);
        if (a == want) {
            return ncclSuccess;
        }
        futex_wait_slice(&h->hdr->arrived, a, &slice_ms);
        if (atomic_load_explicit(&h->hdr->arrived, memory_order_acquire) == want) {
            return ncclSuccess;
        }
        for (int i = 1; i < h->nlocal; i++) {
            if (atomic_load_explicit(&h->slot[i].seen, memory_order_relaxed) != g) {
                ncclResult_t res = hier_check(boot, i, deadline, why, len);
                if (res != ncclSuccess) {
                    return res;
                }
                break;
            }
        }
        if (hier_failed(h, why, len)) {
            return ncclRemoteError;
        }
    }
}

/* Not the leader: wait until the leader publishes generation g. */
static ncclResult_t hier_wait_gen(br_bootstrap_t *boot, uint32_t g, uint64_t deadline, char *why,
                                  size_t len)
{
    br_boot_hier_t *h = boot->hier;
    int slice_ms = SLICE_MIN_MS;

    for (;;) {
        uint32_t v = atomic_load_explicit(&h->hdr->gen, memory_order_acquire);
        if (v == g) {
            return ncclSuccess;
        }
        futex_wait_slice(&h->hdr->gen, v, &slice_ms);
        if (atomic_load_explicit(&h->hdr->gen, memory_order_acquire) == g) {
            return ncclSuccess;
        }
        ncclResult_t res = hier_check(boot, 0, deadline, why, len);
        if (res != ncclSuccess) {
            return res;
        }
    }
}

static void hier_publish(br_boot_hier_t *h, uint32_t g)
{
    atomic_store_explicit(&h->hdr->gen, g, memory_order_release);
    futex_wake_all(&h->hdr->gen);
}

/* What the leader does between its host's arrival and the publication of a generation,
 * on the table tab of slot size c. */
typedef ncclResult_t (*hier_between_t)(br_bootstrap_t *boot, char *tab, size_t c, int tag,
                                       uint64_t deadline);

/* The leaders' allgather of their hosts' blocks (slot size c) in tab, in log2(hosts)
 * rounds: the blocks held are kept in host order starting at this host's, so round d
 * sends the first min(d, hosts - d) of them to the leader d hosts back and receives as
 * many from the one d hosts on. */
static ncclResult_t hier_leaders(br_bootstrap_t *boot, char *tab, size_t c, int tag,
                                 uint64_t deadline)
{
    br_boot_hier_t *h = boot->hier;
    int nn = h->nnodes, me = h->node;
    size_t *off = NULL;
    char *held = NULL;
    ncclResult_t res = ncclSuccess;

    if (nn == 1) {
        return ncclSuccess;
    }
    BR_CHECK(br_calloc(&off, (size_t)nn + 1, "bootstrap host offsets"));
    for (int j = 0; j < nn; j++) {
        int k = (me + j) % nn;
        off[j + 1] = off[j] + (size_t)(h->node_start[k + 1] - h->node_start[k]) * c;
    }
    BR_CHECK_GOTO(br_calloc(&held, off[nn], "bootstrap host blocks"), res, out);
    for (int i = 0; i < h->nlocal; i++) {
        memcpy(held + (size_t)i * c, tab + (size_t)h->local[i] * c, c);
    }
    for (int d = 1; d < nn; d <<= 1) {
        int cnt = d < nn - d ? d : nn - d;
        int to = h->node_ranks[h->node_start[(me + nn - d) % nn]];
        int from = h->node_ranks[h->node_start[(me + d) % nn]];
        BR_CHECK_GOTO(br_boot_send_msg(boot, to, BR_BOOT_MSG_RING, tag, held, off[cnt]), res, out);
        BR_CHECK_GOTO(br_boot_recv_msg(boot, from, BR_BOOT_MSG_RING, tag, held + off[d],
                                       off[d + cnt] - off[d], deadline),
                      res, out);
    }
    for (int j = 1; j < nn; j++) {
        int k = (me + j) % nn;
        for (int i = h->node_start[k]; i < h->node_start[k + 1]; i++) {
            memcpy(tab + (size_t)h->node_ranks[i] * c,
                   held + off[j] + (size_t)(i - h->node_start[k]) * c, c);
        }
    }
out:
    free(held);
    free(off);
    return res;
}

/* The same for the first allgather, before the leaders know who is on which host: a
 * host's block is its rank count, its ranks and their slots, and each round's message is
 * as long as the blocks it carries, which the receiver splits by their counts. */
static ncclResult_t hier_leaders_first(br_bootstrap_t *boot, char *tab, size_t c, int tag,
                                       uint64_t deadline)
{
    br_boot_hier_t *h = boot->hier;
    int nn = h->nnodes, n = boot->nranks, got = 0;
    size_t *off = NULL, cap = (size_t)n * (c + sizeof(int32_t)) + (size_t)nn * sizeof(int32_t);
    char *held = NULL, *seen = NULL, who[160];
    ncclResult_t res = ncclSuccess;

    if (nn == 1) {
        return ncclSuccess;
    }
    BR_CHECK(br_calloc(&off, (size_t)nn + 1, "bootstrap host offsets"));
    BR_CHECK_GOTO(br_calloc(&held, cap, "bootstrap host blocks"), res, out);
    BR_CHECK_GOTO(br_calloc(&seen, (size_t)n, "bootstrap ranks"), res, out);
    /* This host's block: [count][rank, slot]... */
    int32_t cnt32 = h->nlocal;
    memcpy(held, &cnt32, sizeof(cnt32));
    off[1] = sizeof(cnt32);
    for (int i = 0; i < h->nlocal; i++) {
        int32_t r = h->slot[i].rank;
        memcpy(held + off[1], &r, sizeof(r));
        memcpy(held + off[1] + sizeof(r), tab + (size_t)r * c, c);
        off[1] += sizeof(r) + c;
    }
    for (int d = 1; d < nn; d <<= 1) {
        int k = 0, cnt = d < nn - d ? d : nn - d;
        br_boot_msg_t *m = NULL;
        while ((1 << k) != d) {
            k++;
        }
        BR_CHECK_GOTO(br_boot_send_msg(boot, h->hop_rank[k], BR_BOOT_MSG_RING, tag, held, off[cnt]),
                      res, out);
        BR_CHECK_GOTO(br_boot_recv_msg_any(boot, h->from_rank[k], BR_BOOT_MSG_RING, tag, &m,
                                           deadline),
                      res, out);
        /* Split it into its cnt blocks, checking every length against what is there. */
        size_t at = 0;
        int ok = m->size <= cap - off[d];
        for (int b = 0; b < cnt && ok; b++) {
            int32_t bc = 0;
            ok = at + sizeof(bc) <= m->size;
            if (ok) {
                memcpy(&bc, m->data + at, sizeof(bc));
                ok = bc >= 1 && bc <= n &&
                     (size_t)bc * (sizeof(int32_t) + c) <= m->size - at - sizeof(bc);
            }
            if (ok) {
                at += sizeof(bc) + (size_t)bc * (sizeof(int32_t) + c);
                off[d + b + 1] = off[d] + at;
            }
        }
        ok = ok && at == m->size;
        if (ok) {
            memcpy(held + off[d], m->data, m->size);
        }
        free(m);
        if (!ok) {
            BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                    "bootstrap: rank %d: the host blocks from %s do not add up (do the ranks "
                    "run the same code?)",
                    boot->rank, br_boot_rank_str(boot, h->from_rank[k], who, sizeof(who)));
            res = ncclInternalError;
            goto out;
        }
    }
    /* Every block but this host's into the table; every rank exactly once. */
    for (int i = 0; i < h->nlocal; i++) {
        seen[h->slot[i].rank] = 1;
        got++;
    }
    for (size_t at = off[1]; at < off[nn];) {
        int32_t bc;
        memcpy(&bc, held + at, sizeof(bc));
        at += sizeof(bc);
        for (int32_t i = 0; i < bc; i++, at += sizeof(int32_t) + c) {
            int32_t r;
            memcpy(&r, held + at, sizeof(r));
            if (r < 0 || r >= n || seen[r]) {
                BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                        "bootstrap: rank %d: rank %d came twice or out of range in the host "
                        "blocks",
                        boot->rank, (int)r);
                res = ncclInternalError;
                goto out;
            }
            seen[r] = 1;
            got++;
            memcpy(tab + (size_t)r * c, held + at + sizeof(r), c);
        }
    }
    if (got != n) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: rank %d: the host blocks hold %d ranks, not %d", boot->rank, got, n);
        res = ncclInternalError;
    }
out:
    free(seen);
    free(held);
    free(off);
    return res;
}

/* One generation: this rank's slot (c bytes at mine) in, everyone's (n x c at out) back.
 * With mine NULL it is only a meeting of the host's ranks (setup). The leader runs
 * between, if any, once all have arrived. */
static ncclResult_t hier_round(br_bootstrap_t *boot, const char *mine, char *out, size_t c,
                               int tag, uint64_t deadline, hier_between_t between)
{
    br_boot_hier_t *h = boot->hier;
    uint32_t g = ++h->gen;
    char *tab = h->table[g & 1];
    char why[WHY_LEN];
    ncclResult_t res = ncclSuccess;

    if (mine != NULL) {
        memcpy(tab + (size_t)boot->rank * c, mine, c);
    }
    if (h->lidx != 0) {
        hier_arrive(h, g);
        res = hier_wait_gen(boot, g, deadline, why, sizeof(why));
    } else {
        if (h->nlocal > 1) {
            res = hier_wait_arrivals(boot, g, deadline, why, sizeof(why));
        }
        if (res == ncclSuccess && between != NULL) {
            res = between(boot, tab, c, tag, deadline);
            if (res != ncclSuccess) {
                snprintf(why, sizeof(why),
                         "rank %d (host %.64s), this host's leader, failed in the allgather "
                         "between hosts: %.300s",
                         boot->rank, br_host_name(), br_log_last_error());
            }
        }
        if (res == ncclSuccess) {
            hier_publish(h, g);
        }
    }
    if (res != ncclSuccess) {
        hier_fail(h, why);
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: rank %d (host %s): %s failed: %s",
                boot->rank, br_host_name(), g == 1 ? "host memory setup" : "allgather", why);
        return res;
    }
    if (out != NULL) {
        memcpy(out, tab, (size_t)boot->nranks * c);
    }
    return ncclSuccess;
}

/* An allgather of n slots of size bytes at data, in generations of at most the table's
 * share per rank. */
static ncclResult_t hier_gather(br_bootstrap_t *boot, void *data, size_t size, int tag,
                                hier_between_t between)
{
    br_boot_hier_t *h = boot->hier;
    int n = boot->nranks, r = boot->rank;
    size_t chunk = h->cap / (size_t)n;
    uint64_t deadline = br_time_ns() + boot->timeout_ns;
    char *slots = data, *tmp = NULL;
    ncclResult_t res = ncclSuccess;

    if (chunk >= size) {
        /* One generation: this rank's slot goes into the table before the table comes out. */
        return hier_round(boot, slots + (size_t)r * size, slots, size, tag, deadline, between);
    }
    BR_CHECK(br_calloc(&tmp, (size_t)n * chunk, "bootstrap allgather piece"));
    for (size_t off = 0; off < size && res == ncclSuccess; off += chunk) {
        size_t c = size - off < chunk ? size - off : chunk;
        res = hier_round(boot, slots + (size_t)r * size + off, tmp, c, tag, deadline, between);
        for (int q = 0; q < n && res == ncclSuccess; q++) {
            if (q != r) {
                memcpy(slots + (size_t)q * size + off, tmp + (size_t)q * c, c);
            }
        }
    }
    free(tmp);
    return res;
}

ncclResult_t br_boot_hier_allgather(br_bootstrap_t *boot, void *data, size_t size, int tag)
{
    return hier_gather(boot, data, size, tag, hier_leaders);
}

ncclResult_t br_boot_hier_first(br_bootstrap_t *boot, void *data, size_t size, int tag)
{
    return hier_gather(boot, data, size, tag, hier_leaders_first);
}

/* Ranks ordered by (host, rank): for qsort_r over indices into the peer table. */
static int by_host(const void *a, const void *b, void *arg)
{
    const br_bootstrap_t *boot = arg;
    int x = *(const int *)a, y = *(const int *)b;
    uint64_t hx = boot->peers[x].info.shm_key, hy = boot->peers[y].info.shm_key;
    if (hx != hy) {
        return hx < hy ? -1 : 1;
    }
    return x < y ? -1 : x > y;
}

static int by_leader(const void *a, const void *b, void *arg)
{
    const int *ranks = arg;
    const int *x = a, *y = b; /* start offsets of two hosts' runs in ranks */
    return ranks[*x] < ranks[*y] ? -1 : ranks[*x] > ranks[*y];
}

ncclResult_t br_boot_hier_group(br_bootstrap_t *boot)
{
    br_boot_hier_t *h = boot->hier;
    int n = boot->nranks;
    int *sorted = NULL, *starts = NULL, nn = 0, node = -1, lidx = -1;
    ncclResult_t res = ncclSuccess;

    BR_CHECK(br_calloc(&sorted, (size_t)n, "bootstrap hosts"));
    BR_CHECK_GOTO(br_calloc(&starts, (size_t)n + 1, "bootstrap hosts"), res, out);
    for (int r = 0; r < n; r++) {
        sorted[r] = r;
    }
    qsort_r(sorted, (size_t)n, sizeof(*sorted), by_host, boot);
    for (int i = 0; i < n; i++) {
        if (i == 0 ||
            boot->peers[sorted[i]].info.shm_key != boot->peers[sorted[i - 1]].info.shm_key) {
            starts[nn++] = i;
        }
    }
    /* Hosts in the order of their leaders (the lowest rank of each host). */
    qsort_r(starts, (size_t)nn, sizeof(*starts), by_leader, sorted);
    BR_CHECK_GOTO(br_calloc(&h->node_start, (size_t)nn + 1, "bootstrap hosts"), res, out);
    BR_CHECK_GOTO(br_calloc(&h->node_ranks, (size_t)n, "bootstrap hosts"), res, out);
    for (int k = 0, at = 0; k < nn; k++) {
        uint64_t hash = boot->peers[sorted[starts[k]]].info.shm_key;
        h->node_start[k] = at;
        for (int i = starts[k]; i < n && boot->peers[sorted[i]].info.shm_key == hash; i++) {
            if (sorted[i] == boot->rank) {
                node = k;
                lidx = at - h->node_start[k];
            }
            h->node_ranks[at++] = sorted[i];
        }
        h->node_start[k + 1] = at;
    }
    /* The root grouped the same keys the same way. */
    if (nn != h->nnodes || node != h->node || lidx != h->lidx ||
        h->node_start[node + 1] - h->node_start[node] != h->nlocal) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: rank %d: the peer table puts it on host %d of %d at %d, the root on "
                "host %d of %d at %d",
                boot->rank, node, nn, lidx, h->node, h->nnodes, h->lidx);
        res = ncclInternalError;
        goto out;
    }
    h->local = h->node_ranks + h->node_start[h->node];
out:
    free(starts);
    free(sorted);
    return res;
}

static void hier_unlink(br_boot_hier_t *h)
{
    if (h->name[0] != '\0') {
        shm_unlink(h->name);
        h->name[0] = '\0';
    }
}

static ncclResult_t between_unlink(br_bootstrap_t *boot, char *tab, size_t c, int tag,
                                   uint64_t deadline)
{
    (void)tab;
    (void)c;
    (void)tag;
    (void)deadline;
    hier_unlink(boot->hier);
    return ncclSuccess;
}

/* The leader: make the segment. Returns 0, or -1 with why. */
static int hier_create(br_boot_hier_t *h, uint64_t secret, char *why, size_t len)
{
    int fd = br_shm_create_own(h->name);

    if (fd < 0) {
        snprintf(why, len, "shm_open(%s) failed: %s", h->name, strerror(errno));
        h->name[0] = '\0';
        return -1;
    }
    if (ftruncate(fd, (off_t)h->size) != 0) {
        snprintf(why, len, "cannot size %s to %zu bytes: %s", h->name, h->size, strerror(errno));
        close(fd);
        hier_unlink(h);
        return -1;
    }
    h->base = mmap(NULL, h->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h->base == MAP_FAILED) {
        h->base = NULL;
        snprintf(why, len, "mmap of %s failed: %s", h->name, strerror(errno));
        close(fd);
        hier_unlink(h);
        return -1;
    }
    h->fd = fd; /* kept for the lock bytes */
    ((hier_hdr_t *)h->base)->secret = secret;
    ((hier_hdr_t *)h->base)->nonce = h->nonce;
    return 0;
}

/* Not the leader: map the leader's segment once it exists (bounded by the deadline, and
 * ended early when the leader is gone or the bootstrap fails). */
static ncclResult_t hier_attach(br_bootstrap_t *boot, uint64_t deadline, char *why, size_t len)
{
    br_boot_hier_t *h = boot->hier;
    long sleep_us = 1000;
    char who[160], reason[BR_BOOT_REASON_LEN + 64];
    ncclResult_t res = ncclSuccess;

    snprintf(who, sizeof(who), "rank %d (host %.64s, pid %d), this host's leader", h->leader,
             br_host_name(), h->leader_pid);
    for (;;) {
        int fd = shm_open(h->name, O_RDWR, 0);
        if (fd >= 0) {
            struct stat st;
            if (fstat(fd, &st) == 0 && (size_t)st.st_size == h->size) {
                void *p = mmap(NULL, h->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                if (p != MAP_FAILED) {
                    hier_hdr_t *hdr = p;
                    if (atomic_load_explicit(&hdr->ready, memory_order_acquire) == 1 &&
                        hdr->secret == boot->secret && hdr->nonce == h->nonce) {
                        h->fd = fd; /* kept for the lock bytes */
                        h->base = p;
                        return ncclSuccess;
                    }
                    munmap(p, h->size);
                }
            }
            close(fd);
        } else if (errno != ENOENT) {
            snprintf(why, len, "rank %d (host %.64s) cannot open %s, made by %.120s: %s",
                     boot->rank, br_host_name(), h->name, who, strerror(errno));
            return ncclSystemError;
        }
        pthread_mutex_lock(&boot->lock);
        res = br_boot_wait_blocked(boot, h->leader, reason, sizeof(reason));
        pthread_mutex_unlock(&boot->lock);
        if (res == ncclSuccess && proc_dead(h, h->leader_pid, h->leader_pid_ns)) {
            snprintf(reason, sizeof(reason), "its process is gone");
            res = ncclRemoteError;
        }
        if (res == ncclSuccess && br_time_ns() >= deadline) {
            snprintf(reason, sizeof(reason),
                     "%s did not appear within %d s (does this rank's /dev/shm differ from the "
                     "leader's in a way its device and inode do not show? set NCCL_HOSTID "
                     "apart, or BRAID_BOOTSTRAP_SHM=0)",
                     h->name, br_boot_timeout_s());
            res = ncclSystemError;
        }
        if (res != ncclSuccess) {
            snprintf(why, len,
                     "rank %d (host %.64s) gave up on this host's bootstrap memory from %.120s: "
                     "%.150s",
                     boot->rank, br_host_name(), who, reason);
            return res;
        }
        struct timespec ts = {0, sleep_us * 1000L};
        nanosleep(&ts, NULL);
        sleep_us = sleep_us * 2 < SLICE_MAX_MS * 1000L / 10 ? sleep_us * 2 : SLICE_MAX_MS * 1000L / 10;
    }
}

void br_boot_hier_free(br_bootstrap_t *boot)
{
    br_boot_hier_t *h = boot->hier;

    if (h == NULL) {
        return;
    }
    hier_unlink(h);
    if (h->base != NULL) {
        munmap(h->base, h->size);
    }
    if (h->fd >= 0) {
        close(h->fd);
    }
    free(h->node_start);
    free(h->node_ranks);
    free(h);
    boot->hier = NULL;
}

int br_bootstrap_local_ranks(br_bootstrap_t *boot, int *nhosts_p)
{
    br_boot_hier_t *h = boot->hier;
    *nhosts_p = h != NULL ? h->nnodes : 0;
    return h != NULL ? h->nlocal : 0;
}

void br_boot_hier_kick(br_bootstrap_t *boot)
{
    br_boot_hier_t *h = boot->hier;
    if (h != NULL && h->hdr != NULL) {
        futex_wake_all(&h->hdr->gen);
        futex_wake_all(&h->hdr->arrived);
    }
}

/* The leader: every rank of its host in its slot before anyone maps the segment, so a
 * wait for one that never maps still knows whose process to look at. The root's list is
 * checked, not trusted: a slot it cannot fill stays empty. */
static void hier_slots_prefill(br_bootstrap_t *boot, const br_boot_local_t *local)
{
    br_boot_hier_t *h = boot->hier;
    for (int i = 1; i < h->nlocal && local != NULL; i++) {
        if (local[i].rank >= 0 && local[i].rank < boot->nranks && local[i].pid > 0) {
            h->slot[i].rank = local[i].rank;
            h->slot[i].pid_ns = local[i].pid_ns;
            h->slot[i].pid = local[i].pid;
        }
    }
}

ncclResult_t br_boot_hier_open(br_bootstrap_t *boot, const br_boot_answer_t *ans,
                               const br_boot_local_t *local)
{
    int n = boot->nranks;
    br_boot_hier_t *h = NULL;
    uint64_t deadline = br_time_ns() + boot->timeout_ns;
    char why[WHY_LEN];
    ncclResult_t res = ncclSuccess;

    if (ans->nlocal < 1 || ans->lidx < 0 || ans->lidx >= ans->nlocal || ans->nnodes < 1 ||
        ans->node < 0 || ans->node >= ans->nnodes || ans->leader < 0 || ans->leader >= n ||
        (ans->lidx == 0) != (ans->leader == boot->rank)) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: rank %d: the root's host grouping makes no sense (host %d of %d, "
                "index %d of %d, leader %d)",
                boot->rank, ans->node, ans->nnodes, ans->lidx, ans->nlocal, ans->leader);
        return ncclInternalError;
    }
    BR_CHECK(br_calloc(&h, 1, "bootstrap host memory"));
    boot->hier = h;
    h->fd = -1;
    h->pid_ns = br_pid_ns();
    h->nlocal = ans->nlocal;
    h->lidx = ans->lidx;
    h->nnodes = ans->nnodes;
    h->node = ans->node;
    h->leader = ans->leader;
    h->leader_pid = ans->leader_pid;
    h->leader_pid_ns = ans->leader_pid_ns;
    h->nonce = ans->nonce;
    memcpy(h->hop_rank, ans->hop_rank, sizeof(h->hop_rank));
    memcpy(h->from_rank, ans->from_rank, sizeof(h->from_rank));
    h->cap = ((size_t)n * SLOT_SHARE > TABLE_MIN ? (size_t)n * SLOT_SHARE : TABLE_MIN);
    h->cap = (h->cap + PAGE - 1) & ~(size_t)(PAGE - 1);
    size_t slot_bytes = ((size_t)h->nlocal * sizeof(hier_slot_t) + PAGE - 1) & ~(size_t)(PAGE - 1);
    h->size = PAGE + slot_bytes + 2 * h->cap;
    if (h->nlocal == 1) {
        /* Alone on this host: the same layout in private memory. */
        h->base = mmap(NULL, h->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (h->base == MAP_FAILED) {
            h->base = NULL;
            snprintf(why, sizeof(why), "rank %d (host %s): no memory for the bootstrap table: %s",
                     boot->rank, br_host_name(), strerror(errno));
            res = ncclSystemError;
            goto fail_tell;
        }
    } else {
        snprintf(h->name, sizeof(h->name), "/braid-%d-boot-%016llx", h->leader_pid,
                 (unsigned long long)boot->secret);
        if (h->lidx == 0) {
            char reason[256];
            if (hier_create(h, boot->secret, reason, sizeof(reason)) != 0) {
                snprintf(why, sizeof(why),
                         "rank %d (host %s), this host's leader, cannot make the bootstrap's "
                         "shared memory: %s",
                         boot->rank, br_host_name(), reason);
                res = ncclSystemError;
                goto fail_tell;
            }
        } else {
            res = hier_attach(boot, deadline, why, sizeof(why));
            h->name[0] = '\0'; /* only the leader unlinks */
            if (res != ncclSuccess) {
                goto fail_tell;
            }
        }
    }
    h->hdr = h->base;
    h->slot = (hier_slot_t *)((char *)h->base + PAGE);
    h->table[0] = (char *)h->base + PAGE + slot_bytes;
    h->table[1] = h->table[0] + h->cap;
    h->slot[h->lidx].rank = boot->rank;
    h->slot[h->lidx].pid_ns = h->pid_ns;
    h->slot[h->lidx].pid = (int32_t)getpid();
    hier_lock(h);
    if (h->lidx == 0) {
        hier_slots_prefill(boot, local);
        /* Release: a rank that sees ready sees the slots above. */
        atomic_store_explicit(&h->hdr->ready, 1, memory_order_release);
    }
    /* Every rank of the host has mapped the segment once the leader sees them all. */
    res = hier_round(boot, NULL, NULL, 0, 0, deadline, between_unlink);
    if (res != ncclSuccess) {
        if (h->lidx == 0) {
            /* The other hosts' leaders (the only ranks it knows) wait for this one. */
            br_bootstrap_abort_notify(boot, br_log_last_error());
        }
        goto fail;
    }
    BR_INFO(NCCL_INIT | NCCL_BOOTSTRAP,
            "bootstrap: rank %d: allgathers through shared memory with this host's %d ranks, "
            "%d hosts",
            boot->rank, h->nlocal, h->nnodes);
    return ncclSuccess;
fail_tell:
    /* Nobody of this host can be told through the segment: tell every rank. */
    BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: %s", why);
    br_bootstrap_abort_notify(boot, why);
fail:
    br_boot_hier_free(boot);
    return res;
}
