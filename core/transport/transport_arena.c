/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node arena (br_arena_t, see transport.h), its layout and its protocol: one POSIX
 * shared-memory segment that rank 0 creates and every rank of a single-host communicator
 * maps: every rank's `done` counter, then the small slots (slot-major: slot k of every
 * rank together), then each rank's region of BR_ARENA_NBUF large buffers; a buffer or slot
 * is a header (flag, call descriptor) and the data (layout in transport.h). The
 * protocol (publish, read, done) is at the end; executors call it. Setup is collective and all-or-nothing: two allgathers carry the segment's name and then
 * every rank's verdict, so the ranks agree on whether small operations use it. The first
 * also carries where each rank keeps a probe word, which the other processes read with
 * process_vm_readv (one of each kind of process, arena_cma_probe): only if every rank
 * could read every other's do large AllGather and
 * Broadcast inputs get read in place (a container without CAP_SYS_PTRACE or a kernel with
 * Yama's ptrace_scope at 1 or more refuses it, and the ring path is used instead, logged;
 * a rank in another pid namespace is never probed: its pid names another process here).
 * The arena needs every rank behind one /dev/shm (br_peer_shares_shm).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "transport_int.h"
#include "util.h"

typedef struct {
    char name[64];
    uint64_t probe_addr; /* where the rank's probe word is, and what it holds */
    uint64_t probe_val;
    uint64_t cma_bytes; /* the rank's read-in-place window: rank 0's is used by all */
    uint64_t cma_max;
    uint64_t a2av_max; /* BRAID_ALLTOALLV_READ_MAX_BYTES, resolved: rank 0's is used */
    uint64_t cred_key; /* arena_cred_key(): processes with equal keys answer a reader alike */
    int32_t a2av; /* BRAID_ALLTOALLV_ARENA: rank 0's is used by all */
    int32_t ok;   /* second round: the rank mapped the arena */
    int32_t cma;  /* second round: the rank read every other process's probe word */
} arena_blob_t;

/* Every rank shares this one's /dev/shm, and none has shared memory turned off. */
static int arena_eligible(const br_transport_comm_t *tc)
{
    const br_peer_info_t *me = &tc->peers[tc->rank];
    for (int i = 0; i < tc->nranks; i++) {
        if (!br_peer_shares_shm(&tc->peers[i], me) || tc->peers[i].shm_disable) {
            return 0;
        }
    }
    return 1;
}

/* Rank 0: make the segment; an empty name tells the others it failed. */
static void *arena_create(const br_transport_comm_t *tc, size_t size, char *name, size_t len)
{
    void *base;
    int fd;

    br_shm_name(name, len, "arena-");
    fd = br_shm_create_own(name);
    if (fd < 0) {
        BR_INFO(NCCL_SHM | NCCL_INIT, "rank %d: no node arena: shm_open(%s) failed: %s", tc->rank,
                name, strerror(errno));
        name[0] = '\0';
        return NULL;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        BR_INFO(NCCL_SHM | NCCL_INIT, "rank %d: no node arena: cannot size %s to %zu bytes: %s",
                tc->rank, name, size, strerror(errno));
        close(fd);
        shm_unlink(name);
        name[0] = '\0';
        return NULL;
    }
    base = mmap(NULL, size, PROT_READ | PROT_WRITE,
                MAP_SHARED | (tc->shm_prefault ? MAP_POPULATE : 0), fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        BR_INFO(NCCL_SHM | NCCL_INIT, "rank %d: no node arena: mmap of %s failed: %s", tc->rank,
                name, strerror(errno));
        shm_unlink(name);
        name[0] = '\0';
        return NULL;
    }
    return base;
}

static void *arena_attach(const br_transport_comm_t *tc, size_t size, const char *name)
{
    void *base;
    int fd = shm_open(name, O_RDWR, 0600);

    if (fd < 0) {
        BR_INFO(NCCL_SHM | NCCL_INIT, "rank %d: cannot open rank 0's node arena %s: %s", tc->rank,
                name, strerror(errno));
        return NULL;
    }
    base = mmap(NULL, size, PROT_READ | PROT_WRITE,
                MAP_SHARED | (tc->shm_prefault ? MAP_POPULATE : 0), fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        BR_INFO(NCCL_SHM | NCCL_INIT, "rank %d: mmap of rank 0's node arena %s failed: %s",
                tc->rank, name, strerror(errno));
        return NULL;
    }
    return base;
}

/* What decides whether another process may read this one's memory (process_vm_readv's
 * ptrace access check, Yama aside): its real, effective and saved user and group ids,
 * whether it is dumpable, its user and pid namespaces, and its security module label. */
static uint64_t arena_cred_key(void)
{
    struct {
        uid_t uid[3];
        gid_t gid[3];
        int dumpable;
        uint64_t ns[2];
    } c;
    static const char *const ns_paths[] = {"/proc/self/ns/user", "/proc/self/ns/pid"};
    char label[256];
    struct stat st;
    ssize_t len = 0;
    int fd;

    memset(&c, 0, sizeof(c));
    (void)getresuid(&c.uid[0], &c.uid[1], &c.uid[2]);
    (void)getresgid(&c.gid[0], &c.gid[1], &c.gid[2]);
    c.dumpable = prctl(PR_GET_DUMPABLE);
    for (int i = 0; i < 2; i++) {
        c.ns[i] = stat(ns_paths[i], &st) == 0 ? (uint64_t)st.st_ino : 0;
    }
    fd = open("/proc/self/attr/current", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        len = read(fd, label, sizeof(label));
        close(fd);
    }
    return br_hash_bytes(label, len > 0 ? (size_t)len : 0, br_hash_bytes(&c, sizeof(c), 0));
}

/* Does Yama restrict reads to a process's descendants (ptrace_scope 1 or more)? Then the
 * answer depends on the pair of processes, not on their credentials alone. */
static int arena_yama_restricts(void)
{
    char v[8] = "";
    int fd = open("/proc/sys/kernel/yama/ptrace_scope", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    ssize_t n = read(fd, v, sizeof(v) - 1);
    close(fd);
    return n > 0 && v[0] != '0';
}

/* Can this rank read every other rank's memory? Ranks of this process need no system
 * call (their inputs are copied directly). Without Yama's restriction, a read of one
 * process answers for every process of the same credentials (arena_cred_key), so one
 * probe per kind of process is made, not one per rank: every rank probing every other
 * took a million process_vm_readv calls at 1024 ranks, a quarter of init's CPU. */
static int arena_cma_probe(const br_transport_comm_t *tc, const arena_blob_t *blobs)
{
    const br_peer_info_t *me = &tc->peers[tc->rank];
    uint64_t seen[8];
    int nseen = 0, by_kind = !arena_yama_restricts();

    for (int r = 0; r < tc->nranks; r++) {
        const br_peer_info_t *pi = &tc->peers[r];
        uint64_t got = 0;
        int known = 0;
        if (r == tc->rank || pi->pid_hash == me->pid_hash) {
            continue;
        }
        for (int i = 0; i < nseen && by_kind; i++) {
            known |= seen[i] == blobs[r].cred_key;
        }
        if (known) {
            continue;
        }
        if (!br_peer_sees_pid(pi, me)) {
            /* Its pid means another process here (or none): never read through it. */
            BR_INFO(NCCL_SHM | NCCL_INIT,
                    "rank %d: no single-copy reads: rank %d (pid %d) is in another pid "
                    "namespace (a container of its own)",
                    tc->rank, r, pi->pid);
            return 0;
        }
        struct iovec local = {&got, sizeof(got)};
        struct iovec remote = {(void *)(uintptr_t)blobs[r].probe_addr, sizeof(got)};
        ssize_t n = process_vm_readv(pi->pid, &local, 1, &remote, 1, 0);
        if (n != (ssize_t)sizeof(got) || got != blobs[r].probe_val) {
            BR_INFO(NCCL_SHM | NCCL_INIT,
                    "rank %d: no single-copy reads: cannot read rank %d's memory (pid %d): %s",
                    tc->rank, r, pi->pid, n < 0 ? strerror(errno) : "a different process answered");
            return 0;
        }
        if (nseen < (int)(sizeof(seen) / sizeof(seen[0]))) {
            seen[nseen++] = blobs[r].cred_key;
        }
    }
    return 1;
}

ncclResult_t br_transport_arena_setup(br_transport_comm_t *tc, size_t max_bytes, size_t cma_bytes,
                                      size_t cma_max, int a2av, size_t a2av_max)
{
    ncclResult_t res = ncclSuccess;
    arena_blob_t *blobs = NULL;
    br_arena_t *arena = NULL;
    void *base = NULL;
    char name[64] = "";
    int all_ok = 1;

    tc->arena = NULL;
    if ((max_bytes == 0 && cma_bytes == 0) || tc->nranks < 2 || !arena_eligible(tc)) {
        return ncclSuccess;
    }
    _Static_assert(sizeof(br_arena_hdr_t) <= BR_ARENA_HDR_BYTES, "arena header too large");
    _Static_assert(sizeof(br_arena_addr_t) <= BR_ARENA_SMALL_MAX, "published address too large");
    max_bytes = (max_bytes + 63) & ~(size_t)63;
    /* The `done` lines of all ranks, then all small slots, each part on pages of its own;
     * then each rank's large buffers (a header and the data each) on its own pages. */
    size_t n = (size_t)tc->nranks;
    size_t buf_stride = (BR_ARENA_HDR_BYTES + max_bytes + 63) & ~(size_t)63;
    size_t stride = (BR_ARENA_NBUF * buf_stride + 4095) & ~(size_t)4095;
    size_t small_off = (n * sizeof(br_arena_ctrl_t) + 4095) & ~(size_t)4095;
    size_t large_off = (small_off + BR_ARENA_NSMALL * n * BR_ARENA_SMALL_BYTES + 4095) &
                       ~(size_t)4095;
    size_t size = large_off + stride * n;

    BR_CHECK(br_calloc(&blobs, (size_t)tc->nranks, "node arena setup"));
    BR_CHECK_GOTO(br_calloc(&arena, 1, "node arena"), res, out);
    /* Unpredictable enough that another process at a reused pid would not hold it. */
    arena->probe = tc->comm_hash ^ br_time_ns() ^ ((uint64_t)tc->rank << 48);
    blobs[tc->rank].probe_addr = (uint64_t)(uintptr_t)&arena->probe;
    blobs[tc->rank].probe_val = arena->probe;
    blobs[tc->rank].cma_bytes = cma_bytes;
    blobs[tc->rank].cma_max = cma_max;
    blobs[tc->rank].a2av = a2av;
    blobs[tc->rank].cred_key = arena_cred_key();
    blobs[tc->rank].a2av_max = a2av_max;
    if (tc->rank == 0) {
        base = arena_create(tc, size, name, sizeof(name));
        memcpy(blobs[0].name, name, sizeof(name));
    }
    BR_CHECK_GOTO(br_bootstrap_allgather(tc->boot, blobs, sizeof(*blobs)), res, out);
    if (tc->rank != 0 && blobs[0].name[0] != '\0') {
        base = arena_attach(tc, size, blobs[0].name);
    }
    /* Everyone cuts alike with rank 0's window, whatever the others' environment says. */
    cma_bytes = (size_t)blobs[0].cma_bytes;
    cma_max = (size_t)blobs[0].cma_max;
    a2av = blobs[0].a2av;
    a2av_max = (size_t)blobs[0].a2av_max;
    /* Probed even where the window is 0 (more processes than cores): an AlltoAllV reads
     * its large blocks in place whenever the ranks can (exec_a2av.c). */
    int all_cma = 1;
    int cma = arena_cma_probe(tc, blobs);
    /* Second round: everyone's verdict, so nobody uses an arena a peer could not map. */
    memset(blobs, 0, (size_t)tc->nranks * sizeof(*blobs));
    blobs[tc->rank].ok = base != NULL;
    blobs[tc->rank].cma = cma;
    res = br_bootstrap_allgather(tc->boot, blobs, sizeof(*blobs));
    if (res != ncclSuccess) {
        goto out;
    }
    for (int i = 0; i < tc->nranks; i++) {
        all_ok &= blobs[i].ok;
        all_cma &= blobs[i].cma;
    }
    if (!all_ok) {
        BR_INFO(NCCL_SHM | NCCL_INIT, "rank %d: node arena off: a rank could not map it", tc->rank);
        goto out;
    }
    if (cma_bytes > 0 && !all_cma) {
        BR_INFO(NCCL_SHM | NCCL_INIT,
                "rank %d: single-copy reads off: a rank cannot read another's memory "
                "(process_vm_readv; NCCL_DEBUG=INFO on every rank names it)",
                tc->rank);
    }
    arena->cma_bytes = all_cma ? cma_bytes : 0;
    arena->a2av = a2av && all_cma;
    arena->a2av_max = a2av_max;
    arena->cma_max = cma_max;
    for (int i = 0; i < BR_ARENA_NMAP; i++) {
        arena->maps[i].rank = -1;
    }
    arena->nranks = tc->nranks;
    arena->max_bytes = max_bytes;
    arena->buf_stride = buf_stride;
    arena->stride = stride;
    arena->small_off = small_off;
    arena->large_off = large_off;
    arena->base = base;
    arena->size = size;
    tc->arena = arena;
    arena = NULL;
    base = NULL;
    char cma_what[96] = "none";
    if (tc->arena->cma_bytes > 0 && cma_max > 0) {
        snprintf(cma_what, sizeof(cma_what), "%zu to %zu bytes", tc->arena->cma_bytes, cma_max);
    } else if (tc->arena->cma_bytes > 0) {
        snprintf(cma_what, sizeof(cma_what), "from %zu bytes", tc->arena->cma_bytes);
    }
    BR_INFO(NCCL_SHM | NCCL_INIT,
            "rank %d: node arena of %zu bytes: operations up to %zu bytes per rank take one "
            "hop; AllGather/Broadcast inputs read in place: %s",
            tc->rank, size, max_bytes, cma_what);
out:
    if (name[0] != '\0') {
        shm_unlink(name); /* rank 0, after everyone mapped it or gave up */
    }
    if (base != NULL) {
        munmap(base, size);
    }
    free(arena);
    free(blobs);
    return res;
}

/* ---- The protocol (transport.h describes it) ---- */

int br_arena_writable(br_arena_t *a, int rank, uint64_t k, int small, int *wait_p)
{
    uint64_t window = small ? BR_ARENA_NSMALL : BR_ARENA_NBUF, low = UINT64_MAX;

    /* Our buffer for k last held operation k - window: everyone must be done reading it.
     * The lowest `done` seen last time answers most calls without touching the others. */
    if (a->min_done + window > k) {
        return 1;
    }
    for (int r = 0; r < a->nranks; r++) {
        /* Acquire pairs with each reader's release of done. */
        uint64_t d = r == rank ? k
                               : atomic_load_explicit(&br_arena_ctrl(a, r)->done,
                                                      memory_order_acquire);
        if (d + window <= k) {
            *wait_p = r;
            return 0;
        }
        low = d < low ? d : low;
    }
    a->min_done = low;
    return 1;
}

void br_arena_publish(br_arena_t *a, int rank, uint64_t k, int small, const void *data,
                      size_t bytes, const br_slot_desc_t *desc)
{
    br_arena_hdr_t *h = br_arena_hdr(a, rank, k, small);
    if (bytes > 0) {
        memcpy(br_arena_data(a, rank, k, small), data, bytes);
    }
    h->desc = *desc;
    /* Release: the input and its descriptor are visible before the flag. */
    atomic_store_explicit(&h->flag, k + 1, memory_order_release);
}

#define BR_CMA_CHUNK ((size_t)1 << 20) /* per process_vm_readv call (measured best here) */

/* Copy `bytes` between dst (ours) and the peer's remote range, one way or the other. */
static int cma_copy(pid_t pid, char *local, char *remote, size_t bytes, int write, size_t *done_p)
{
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < BR_CMA_CHUNK ? bytes - done : BR_CMA_CHUNK;
        struct iovec l = {local + done, n};
        struct iovec r = {remote + done, n};
        ssize_t got = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                            : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (got > 0) {
            done += (size_t)got;
            *done_p = done;
            continue;
        }
        if (got < 0 && errno == EINTR) {
            continue;
        }
        return got < 0 ? errno : EIO;
    }
    return 0;
}

/* ---- Peers' ncclMemAlloc memory, mapped once and kept ---- */

void br_arena_unmap_all(br_arena_t *a)
{
    for (int i = 0; i < BR_ARENA_NMAP; i++) {
        if (a->maps[i].base != NULL) {
            munmap(a->maps[i].base, a->maps[i].size);
        }
        a->maps[i].base = NULL;
        a->maps[i].rank = -1;
    }
}

/* The owner's allocation `pub` names, mapped here (found in the cache, else mapped through
 * /proc/<pid>/fd/<fd> in the least recently used entry), or NULL (logged once) when it
 * cannot be: the caller then copies with process_vm_readv/writev. The descriptor is only
 * opened while the owner is inside the call that published it, so it still names that
 * allocation; its size is checked all the same. */
static char *arena_map(br_arena_t *a, const br_peer_info_t *owner, const br_arena_buf_t *pub)
{
    br_arena_map_t *m = NULL, *lru = &a->maps[0];
    char path[64];
    struct stat st;

    for (int i = 0; i < BR_ARENA_NMAP; i++) {
        br_arena_map_t *e = &a->maps[i];
        if (e->base != NULL && e->rank == owner->rank && e->id == pub->mem_id) {
            e->used = ++a->map_clock;
            return e->base;
        }
        lru = e->base == NULL || e->used < lru->used ? e : lru;
    }
    m = lru;
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)owner->pid, (int)pub->mem_fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_size != pub->mem_size) {
        if (!a->map_warned) {
            BR_INFO(NCCL_SHM, "rank %d's ncclMemAlloc memory (pid %d) cannot be mapped here "
                    "(%s: %s); reading it with process_vm_readv instead",
                    owner->rank, (int)owner->pid, path, fd < 0 ? strerror(errno) : "size differs");
            a->map_warned = 1;
        }
        if (fd >= 0) {
            close(fd);
        }
        return NULL;
    }
    void *base = mmap(NULL, (size_t)pub->mem_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        if (!a->map_warned) {
            BR_INFO(NCCL_SHM, "cannot map rank %d's ncclMemAlloc memory: %s; reading it with "
                    "process_vm_readv instead", owner->rank, strerror(errno));
            a->map_warned = 1;
        }
        return NULL;
    }
    if (m->base != NULL) {
        munmap(m->base, m->size);
    }
    m->rank = owner->rank;
    m->id = pub->mem_id;
    m->base = base;
    m->size = (size_t)pub->mem_size;
    m->used = ++a->map_clock;
    BR_TRACE(NCCL_SHM, "mapped rank %d's allocation %llu (%zu bytes)", owner->rank,
             (unsigned long long)pub->mem_id, m->size);
    return m->base;
}

/* Where the owner's published buffer is mapped here, or NULL. */
static char *arena_mapped(br_arena_t *a, const br_peer_info_t *owner, const br_arena_buf_t *pub,
                          size_t end)
{
    if (pub->mem_id == 0 || pub->mem_off > pub->mem_size || end > pub->mem_size - pub->mem_off) {
        return NULL;
    }
    char *base = arena_map(a, owner, pub);
    return base != NULL ? base + pub->mem_off : NULL;
}

/* Rank owner's published buffer `which` of operation k. */
static br_arena_buf_t published_buf(const br_arena_t *a, int owner, uint64_t k, int which)
{
    const br_arena_addr_t *pub = (const br_arena_addr_t *)br_arena_data(a, owner, k, 1);
    br_arena_buf_t b;
    memcpy(&b, &pub->buf[which], sizeof(b));
    return b;
}

/* Where the owner's buffer `pub` can be loaded here (its bytes [0, end)), or NULL. */
static char *loadable(br_arena_t *a, const br_peer_info_t *owner, const br_peer_info_t *me,
                      const br_arena_buf_t *pub, size_t end)
{
    if (owner->pid_hash == me->pid_hash) {
        return (char *)(uintptr_t)pub->addr;
    }
    if (!br_peer_sees_pid(owner, me)) {
        return NULL; /* /proc/<pid> would be another process's, if any */
    }
    return arena_mapped(a, owner, pub, end);
}

char *br_arena_peer_ptr(br_arena_t *a, const br_peer_info_t *owner, const br_peer_info_t *me,
                        uint64_t k, int which, size_t end)
{
    br_arena_buf_t pub = published_buf(a, owner->rank, k, which);
    return loadable(a, owner, me, &pub, end);
}

int br_arena_read_peer(br_arena_t *a, const br_peer_info_t *owner, const br_peer_info_t *me,
                       uint64_t k, int which, char *dst, size_t off, size_t bytes, int stream,
                       const void **src_p, size_t *done_p)
{
    br_arena_buf_t pub = published_buf(a, owner->rank, k, which);
    return br_arena_read_buf(a, owner, me, &pub, dst, off, bytes, stream, src_p, done_p);
}

int br_arena_read_buf(br_arena_t *a, const br_peer_info_t *owner, const br_peer_info_t *me,
                      const br_arena_buf_t *pub, char *dst, size_t off, size_t bytes, int stream,
                      const void **src_p, size_t *done_p)
{
    const char *from = loadable(a, owner, me, pub, off + bytes);
    char *src = (char *)(uintptr_t)pub->addr;

    *src_p = src;
    *done_p = 0;
    if (from != NULL) {
        br_copy_out(dst, from + off, bytes, stream);
        *done_p = bytes;
        return 0;
    }
    return cma_copy(owner->pid, dst, src + off, bytes, 0, done_p);
}

int br_arena_write_peer(br_arena_t *a, const br_peer_info_t *owner,
                        const br_peer_info_t *me, uint64_t k, const char *src, size_t bytes,
                        void **dst_p, size_t *done_p)
{
    br_arena_buf_t pub = published_buf(a, owner->rank, k, BR_ARENA_IN);
    char *to = loadable(a, owner, me, &pub, bytes);
    char *dst = (char *)(uintptr_t)pub.addr;

    *dst_p = dst;
    *done_p = 0;
    if (to != NULL) {
        memcpy(to, src, bytes);
        *done_p = bytes;
        return 0;
    }
    return cma_copy(owner->pid, (char *)src, dst, bytes, 1, done_p);
}
