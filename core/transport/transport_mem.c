/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The two memory transports: p2p (ranks that are threads of one process: the receiver's
 * FIFO is plain memory the sender writes through a pointer) and shm (processes of one
 * host: the receiver's FIFO is a POSIX shared-memory segment, unlinked as soon as the
 * sender has mapped it). The receiver owns the mapping; both ends see the same control
 * block, Simple slots and LL region.
 *
 * Every mapping is populated when it is made (MAP_POPULATE, then written): a page's
 * first touch costs microseconds (far more under a hypervisor), and touching a 512 KiB
 * slot for the first time inside a collective made the first calls of each size several
 * times slower.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport_int.h"
#include "util.h"

/* A new FIFO: zeroed counters, Simple slots written with a pattern (not zeros, which a
 * hypervisor may keep backed by one shared zero page), LL lines with flag 0 (no step).
 * Without prefault only the counters are written: the slots of a fresh segment read as
 * zeros, which for LL lines is flag 0 as well, and each page is faulted in on first use
 * (tc->shm_prefault says why). */
static void fifo_init(br_conn_t *conn, void *base, size_t size, int prefault)
{
    size_t ctrl = br_transport_ctrl_bytes();
    memset(base, 0, ctrl);
    br_transport_layout(conn, base);
    conn->mapping = base;
    conn->mapping_size = size;
    if (!prefault) {
        return;
    }
    memset((char *)base + ctrl, 0x5a, size - ctrl);
    for (size_t i = 0; conn->ll != NULL && i < BR_STEPS * conn->ll_bytes / BR_LL_LINE; i++) {
        conn->ll[i] = 0x5a5a5a5aull; /* flag 0: no step */
    }
}

/*
 * p2p: the receiver's FIFO is memory of this process that the sender's end points into.
 * The two ends belong to different communicators, closed at different times: a rank whose
 * call failed aborts (and closes its ends) while its peer's thread may still be inside a
 * call that reads the FIFO's counters, until the failure notice reaches it. So the memory
 * outlives both ends: a page after the FIFO counts the ends that hold it, and the last one
 * to close unmaps it (the peer then reads counters that no longer move, and fails as any
 * peer of a failed rank does, instead of faulting).
 * The receiver may also close before its sender has attached at all (it failed, or was
 * aborted, between publishing the FIFO's address and the sender reading it). So a sender
 * attaches only to a FIFO that the process's list of open receive ends still holds, found
 * by address and serial number under one lock: a FIFO whose receiver has closed leaves
 * the list at once, and the sender fails naming that rank instead of touching memory the
 * receiver may already have unmapped.
 */
#define BR_P2P_TAIL 4096

typedef struct br_p2p_tail {
    _Atomic int ends; /* ends holding the memory */
    uint64_t serial;
    void *base;
    struct br_p2p_tail *next; /* in p2p_open while the receiver's end is open */
} br_p2p_tail_t;

static pthread_mutex_t p2p_lock = PTHREAD_MUTEX_INITIALIZER;
static br_p2p_tail_t *p2p_open;
static uint64_t p2p_serial;

static br_p2p_tail_t *p2p_tail(void *base, size_t size)
{
    return (br_p2p_tail_t *)(void *)((char *)base + size);
}

/* Under p2p_lock. */
static void p2p_unlist(br_p2p_tail_t *t)
{
    for (br_p2p_tail_t **pp = &p2p_open; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            return;
        }
    }
}

static void p2p_release(br_conn_t *conn)
{
    size_t size = br_transport_mapping_bytes(conn);
    br_p2p_tail_t *t = p2p_tail(conn->p2p_held, size);
    int last;

    pthread_mutex_lock(&p2p_lock);
    if (!conn->is_send) {
        p2p_unlist(t); /* no sender attaches after its receiver closed */
    }
    /* acq_rel: the other end's last accesses happen before the unmap. */
    last = atomic_fetch_sub_explicit(&t->ends, 1, memory_order_acq_rel) == 1;
    pthread_mutex_unlock(&p2p_lock);
    if (last) {
        munmap(conn->p2p_held, size + BR_P2P_TAIL);
    }
    conn->p2p_held = NULL;
    conn->mapping = NULL;
}

static ncclResult_t p2p_recv_setup(br_transport_comm_t *tc, br_conn_t *conn, br_conn_blob_t *blob)
{
    size_t size = br_transport_mapping_bytes(conn);
    br_p2p_tail_t *t;
    void *base = mmap(NULL, size + BR_P2P_TAIL, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (base == MAP_FAILED) {
        BR_WARN(NCCL_ALLOC, "rank %d: cannot allocate a %zu-byte FIFO from rank %d: %s", tc->rank,
                size, conn->peer, strerror(errno));
        return ncclSystemError;
    }
    fifo_init(conn, base, size, 1);
    t = p2p_tail(base, size);
    atomic_init(&t->ends, 1);
    t->base = base;
    pthread_mutex_lock(&p2p_lock);
    t->serial = ++p2p_serial;
    t->next = p2p_open;
    p2p_open = t;
    pthread_mutex_unlock(&p2p_lock);
    conn->p2p_held = base;
    blob->ptr = (uint64_t)(uintptr_t)base;
    blob->ptr_serial = t->serial;
    return ncclSuccess;
}

static ncclResult_t p2p_send_attach(br_transport_comm_t *tc, br_conn_t *conn,
                                    const br_conn_blob_t *blob)
{
    void *base = (void *)(uintptr_t)blob->ptr;
    br_p2p_tail_t *t;
    char fate[400];

    pthread_mutex_lock(&p2p_lock);
    for (t = p2p_open; t != NULL; t = t->next) {
        if (t->base == base && t->serial == blob->ptr_serial) {
            /* Relaxed: the list's lock orders it against the receiver's release. */
            atomic_fetch_add_explicit(&t->ends, 1, memory_order_relaxed);
            break;
        }
    }
    pthread_mutex_unlock(&p2p_lock);
    if (t == NULL) {
        br_transport_peer_fate(tc, conn->peer, BR_FATE_WAIT_NS, fate, sizeof(fate));
        BR_WARN(NCCL_P2P | NCCL_INIT,
                "rank %d (host %s): rank %d closed its receive end before this rank attached to "
                "it (it failed or was aborted)%s",
                tc->rank, tc->peers[tc->rank].host, conn->peer, fate);
        return ncclRemoteError;
    }
    conn->p2p_held = base;
    br_transport_layout(conn, base);
    return ncclSuccess;
}

static void p2p_close(br_transport_comm_t *tc, br_conn_t *conn)
{
    (void)tc;
    if (conn->p2p_held != NULL) {
        p2p_release(conn);
    }
}

/* The receiver's own mapping (shm: the sender maps the segment on its own). */
static void mem_close(br_transport_comm_t *tc, br_conn_t *conn)
{
    (void)tc;
    if (conn->mapping != NULL) {
        munmap(conn->mapping, conn->mapping_size);
        conn->mapping = NULL;
    }
    if (!conn->is_send && conn->kind == BR_TRANSPORT_SHM && conn->shm_name[0] != '\0') {
        shm_unlink(conn->shm_name); /* ENOENT once the sender attached: fine */
        conn->shm_name[0] = '\0';
    }
}

const br_transport_ops_t br_transport_p2p = {
    .kind = BR_TRANSPORT_P2P,
    .name = "P2P/direct pointer",
    .recv_setup = p2p_recv_setup,
    .send_attach = p2p_send_attach,
    .complete = NULL,
    .close = p2p_close,
};

static ncclResult_t shm_recv_setup(br_transport_comm_t *tc, br_conn_t *conn, br_conn_blob_t *blob)
{
    size_t size = br_transport_mapping_bytes(conn);
    void *base;
    int fd;

    br_shm_name(conn->shm_name, sizeof(conn->shm_name), "");
    fd = br_shm_create_own(conn->shm_name);
    if (fd < 0) {
        BR_WARN(NCCL_SHM, "rank %d: shm_open(%s) failed: %s", tc->rank, conn->shm_name,
                strerror(errno));
        conn->shm_name[0] = '\0';
        return ncclSystemError;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        BR_WARN(NCCL_SHM,
                "rank %d: cannot size shared memory %s to %zu bytes: %s (is /dev/shm large "
                "enough?)",
                tc->rank, conn->shm_name, size, strerror(errno));
        close(fd);
        return ncclSystemError;
    }
    base = mmap(NULL, size, PROT_READ | PROT_WRITE,
                MAP_SHARED | (tc->shm_prefault ? MAP_POPULATE : 0), fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        BR_WARN(NCCL_SHM, "rank %d: mmap of %s failed: %s", tc->rank, conn->shm_name,
                strerror(errno));
        return ncclSystemError;
    }
    fifo_init(conn, base, size, tc->shm_prefault);
    snprintf(blob->shm_name, sizeof(blob->shm_name), "%s", conn->shm_name);
    return ncclSuccess;
}

static ncclResult_t shm_send_attach(br_transport_comm_t *tc, br_conn_t *conn,
                                    const br_conn_blob_t *blob)
{
    size_t size = br_transport_mapping_bytes(conn);
    int fd = shm_open(blob->shm_name, O_RDWR, 0600);
    void *base;

    if (fd < 0) {
        /* The peer made it and told us its name: gone means the peer failed and cleaned up. */
        int err = errno;
        char fate[400];
        br_transport_peer_fate(tc, conn->peer, err == ENOENT ? BR_FATE_WAIT_NS : 0, fate,
                               sizeof(fate));
        BR_WARN(NCCL_SHM | NCCL_INIT,
                "rank %d (host %s): cannot open rank %d's shared memory %s: %s%s", tc->rank,
                tc->peers[tc->rank].host, conn->peer, blob->shm_name, strerror(err), fate);
        return ncclSystemError;
    }
    base = mmap(NULL, size, PROT_READ | PROT_WRITE,
                MAP_SHARED | (tc->shm_prefault ? MAP_POPULATE : 0), fd, 0);
    close(fd);
    /* Both ends have it mapped (or we failed): the name is no longer needed. */
    shm_unlink(blob->shm_name);
    if (base == MAP_FAILED) {
        BR_WARN(NCCL_SHM, "rank %d: mmap of rank %d's %s failed: %s", tc->rank, conn->peer,
                blob->shm_name, strerror(errno));
        return ncclSystemError;
    }
    /* Write-touch every slot page (rewriting the byte it holds: nothing is in flight
     * yet), so the first real sends do not take write faults. */
    for (size_t off = br_transport_ctrl_bytes(); tc->shm_prefault && off < size; off += 4096) {
        ((volatile char *)base)[off] = ((volatile char *)base)[off];
    }
    br_transport_layout(conn, base);
    conn->mapping = base;
    conn->mapping_size = size;
    return ncclSuccess;
}

const br_transport_ops_t br_transport_shm = {
    .kind = BR_TRANSPORT_SHM,
    .name = "SHM/direct",
    .recv_setup = shm_recv_setup,
    .send_attach = shm_send_attach,
    .complete = NULL,
    .close = mem_close,
};
