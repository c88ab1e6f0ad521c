/* SPDX-License-Identifier: Apache-2.0 */
/*
 * braid-perf synchronisation: a barrier, small reductions and a line gather across every
 * rank of the job, used between measurements only (never inside a timed loop).
 *
 * The ranks that share one address space or one fork tree (threads, forked processes)
 * meet in a sync area: a process-shared barrier and one slot per rank, in an anonymous
 * shared mapping made before fork. With MPI, the first local rank of each process also
 * combines its process's result with the other processes' through MPI; only that thread
 * (the main thread) calls MPI, so MPI_THREAD_FUNNELED is enough.
 */
#include "perf.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifdef BRAID_PERF_MPI
#include <mpi.h>
#endif

struct perf_sync {
    pthread_barrier_t barrier;
    int nlocal, use_mpi;
    size_t map_bytes;
    double result[PERF_MAX_REDUCE];
    char slots[]; /* nlocal x PERF_SLOT_BYTES */
};

struct perf_sync *perf_sync_create(int nlocal, int shared_between_processes, int use_mpi)
{
    size_t bytes = sizeof(struct perf_sync) + (size_t)nlocal * PERF_SLOT_BYTES;
    pthread_barrierattr_t attr;
    /* MAP_SHARED survives fork as one copy: forked ranks see each other's slots. */
    struct perf_sync *s =
        mmap(NULL, bytes, PROT_READ | PROT_WRITE,
             (shared_between_processes ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) {
        perror("braid-perf: mmap of the sync area");
        return NULL;
    }
    s->nlocal = nlocal;
    s->use_mpi = use_mpi;
    s->map_bytes = bytes;
    pthread_barrierattr_init(&attr);
    if (shared_between_processes) {
        pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    }
    pthread_barrier_init(&s->barrier, &attr, (unsigned)nlocal);
    pthread_barrierattr_destroy(&attr);
    return s;
}

void perf_sync_destroy(struct perf_sync *s)
{
    if (s != NULL) {
        pthread_barrier_destroy(&s->barrier);
        munmap(s, s->map_bytes);
    }
}

static char *slot(struct perf_sync *s, int local)
{
    return s->slots + (size_t)local * PERF_SLOT_BYTES;
}

void perf_sync_barrier(struct perf_sync *s, int local)
{
    pthread_barrier_wait(&s->barrier);
#ifdef BRAID_PERF_MPI
    if (s->use_mpi) {
        /* Local rank 0 meets the other processes while its threads wait at the second
         * barrier, so no rank of the job leaves before every rank has arrived. */
        if (local == 0) {
            MPI_Barrier(MPI_COMM_WORLD);
        }
        pthread_barrier_wait(&s->barrier);
    }
#else
    (void)local;
#endif
}

static double combine(int op, double a, double b)
{
    switch (op) {
    case PERF_RED_MIN: return a < b ? a : b;
    case PERF_RED_MAX: return a > b ? a : b;
    default: return a + b;
    }
}

#ifdef BRAID_PERF_MPI
/* Combines the per-process partial results across processes, element by element. */
static void mpi_combine(double *vals, const int *ops, int n)
{
    double sum[PERF_MAX_REDUCE], mn[PERF_MAX_REDUCE], mx[PERF_MAX_REDUCE];
    MPI_Allreduce(vals, sum, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(vals, mn, n, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(vals, mx, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    for (int i = 0; i < n; i++) {
        vals[i] = ops[i] == PERF_RED_MIN ? mn[i] : ops[i] == PERF_RED_MAX ? mx[i] : sum[i];
    }
}
#endif

void perf_sync_reduce(struct perf_sync *s, int local, double *vals, const int *ops, int n)
{
    memcpy(slot(s, local), vals, (size_t)n * sizeof(double));
    pthread_barrier_wait(&s->barrier);
    if (local == 0) {
        for (int i = 0; i < n; i++) {
            double acc = ((double *)slot(s, 0))[i];
            for (int l = 1; l < s->nlocal; l++) {
                acc = combine(ops[i], acc, ((double *)slot(s, l))[i]);
            }
            s->result[i] = acc;
        }
#ifdef BRAID_PERF_MPI
        if (s->use_mpi) {
            mpi_combine(s->result, ops, n);
        }
#endif
    }
    /* After this barrier the result is complete; the slots are not reused before the next
     * call's first barrier, which every reader of this result must have passed first. */
    pthread_barrier_wait(&s->barrier);
    memcpy(vals, s->result, (size_t)n * sizeof(double));
}

void perf_sync_gather(struct perf_sync *s, int local, const char *line, char *all, int nranks)
{
    snprintf(slot(s, local), PERF_SLOT_BYTES, "%s", line);
    pthread_barrier_wait(&s->barrier);
    if (local == 0) {
#ifdef BRAID_PERF_MPI
        if (s->use_mpi) {
            int count = s->nlocal * PERF_SLOT_BYTES;
            MPI_Gather(s->slots, count, MPI_CHAR, all, count, MPI_CHAR, 0, MPI_COMM_WORLD);
        } else
#endif
            if (all != NULL) {
            memcpy(all, s->slots, (size_t)nranks * PERF_SLOT_BYTES);
        }
    }
    pthread_barrier_wait(&s->barrier);
}

int perf_sync_mpi_world(int *rank_p, int *size_p)
{
#ifdef BRAID_PERF_MPI
    /* Started by a launcher? Open MPI sets OMPI_COMM_WORLD_SIZE; MPICH and Slurm PMI_SIZE. */
    if (getenv("OMPI_COMM_WORLD_SIZE") == NULL && getenv("PMI_SIZE") == NULL &&
        getenv("PMIX_RANK") == NULL) {
        return 0;
    }
    int provided;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, rank_p);
    MPI_Comm_size(MPI_COMM_WORLD, size_p);
    return 1;
#else
    (void)rank_p;
    (void)size_p;
    return 0;
#endif
}

void perf_sync_mpi_bcast(void *buf, size_t len)
{
#ifdef BRAID_PERF_MPI
    MPI_Bcast(buf, (int)len, MPI_BYTE, 0, MPI_COMM_WORLD);
#else
    (void)buf;
    (void)len;
#endif
}

void perf_sync_mpi_finalize(int failed)
{
#ifdef BRAID_PERF_MPI
    int up = 0;
    MPI_Initialized(&up);
    if (!up) {
        return; /* a standalone run of braid-perf-mpi */
    }
    if (failed) {
        MPI_Abort(MPI_COMM_WORLD, failed);
    }
    MPI_Finalize();
#else
    (void)failed;
#endif
}
