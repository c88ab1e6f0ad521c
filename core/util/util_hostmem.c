/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host memory that other processes of the host can map: what ncclMemAlloc returns where
 * the process does not use CUDA. Each allocation is a memfd mapped shared, kept in a
 * process-wide list (mutex; a handful of entries in practice) with its descriptor and a
 * number unique for the life of the process, so a peer that maps it (through
 * /proc/<pid>/fd/<fd>) can tell a new allocation from a freed one that reused the
 * descriptor. Thread-safe; called from any thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

typedef struct hostmem {
    struct hostmem *next;
    char *base;
    size_t size;
    int fd;
    uint64_t id;
} hostmem_t;

static pthread_mutex_t hostmem_lock = PTHREAD_MUTEX_INITIALIZER;
static hostmem_t *hostmem_list;
static uint64_t hostmem_next_id = 1;

ncclResult_t br_hostmem_alloc(size_t size, void **ptr_p)
{
    size_t rounded = (size + 4095) & ~(size_t)4095;
    hostmem_t *h = NULL;

    rounded = rounded ? rounded : 4096;
    BR_CHECK(br_calloc(&h, 1, "host memory record"));
    h->fd = memfd_create("braid-mem", MFD_CLOEXEC);
    if (h->fd < 0 || ftruncate(h->fd, (off_t)rounded) != 0) {
        BR_WARN(NCCL_ALLOC, "ncclMemAlloc: cannot make %zu bytes of shareable memory: %s", rounded,
                strerror(errno));
        goto err;
    }
    h->base = mmap(NULL, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, h->fd, 0);
    if (h->base == MAP_FAILED) {
        BR_WARN(NCCL_ALLOC, "ncclMemAlloc: cannot map %zu bytes: %s", rounded, strerror(errno));
        goto err;
    }
    h->size = rounded;
    pthread_mutex_lock(&hostmem_lock);
    h->id = hostmem_next_id++;
    h->next = hostmem_list;
    hostmem_list = h;
    pthread_mutex_unlock(&hostmem_lock);
    BR_INFO(NCCL_ALLOC,
            "ncclMemAlloc: %zu bytes of host memory at %p (memfd %d, peers of this "
            "host map it)",
            rounded, (void *)h->base, h->fd);
    *ptr_p = h->base;
    return ncclSuccess;
err:
    if (h->fd >= 0) {
        close(h->fd);
    }
    free(h);
    return ncclSystemError;
}

int br_hostmem_free(void *ptr)
{
    hostmem_t **pp, *h = NULL;

    pthread_mutex_lock(&hostmem_lock);
    for (pp = &hostmem_list; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->base == ptr) {
            h = *pp;
            *pp = h->next;
            break;
        }
    }
    pthread_mutex_unlock(&hostmem_lock);
    if (h == NULL) {
        return 0;
    }
    munmap(h->base, h->size);
    close(h->fd);
    free(h);
    return 1;
}

int br_hostmem_find(const void *ptr, size_t bytes, br_hostmem_ref_t *ref_p)
{
    const char *p = ptr;
    int found = 0;

    pthread_mutex_lock(&hostmem_lock);
    for (hostmem_t *h = hostmem_list; h != NULL; h = h->next) {
        if (p >= h->base && bytes <= h->size && (size_t)(p - h->base) <= h->size - bytes) {
            ref_p->id = h->id;
            ref_p->fd = h->fd;
            ref_p->off = (uint64_t)(p - h->base);
            ref_p->size = h->size;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&hostmem_lock);
    return found;
}

static uint32_t shm_load;
static pthread_once_t shm_load_once = PTHREAD_ONCE_INIT;
static _Atomic unsigned shm_counter;

static void shm_load_draw(void)
{
    uint32_t v = 0;

    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
        /* No entropy yet (early boot): the clock and this copy's address differ enough. */
        uint64_t t = br_time_ns() ^ (uint64_t)(uintptr_t)&shm_load;
        v = (uint32_t)(t ^ (t >> 32));
    }
    shm_load = v;
}

void br_shm_name(char *buf, size_t len, const char *kind)
{
    pthread_once(&shm_load_once, shm_load_draw);
    snprintf(buf, len, "/braid-%s%d-%08x-%u", kind, (int)getpid(), shm_load,
             atomic_fetch_add(&shm_counter, 1u));
}

int br_shm_create_own(const char *name)
{
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno == EEXIST) {
        BR_INFO(NCCL_SHM, "shared memory %s already exists: left by an earlier process with "
                          "this process id (killed?); removing it",
                name);
        if (shm_unlink(name) == 0) {
            fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        }
    }
    return fd;
}
