/* SPDX-License-Identifier: Apache-2.0 */
/*
 * link_two_copies: one process holds two copies of the library, libbraid.so and
 * libnccl.so.2 (as a program linked with one whose framework loads the other does), and
 * each copy runs its own communicator of two processes (this one and a child) on one host,
 * the two initialised at the same time by two threads. The copies have their own counters for the names of the shared memory
 * they create, so names made of the process id and a counter alone would be the same in
 * both: the second copy would find the first one's FIFOs and arena "left by a dead
 * process" and unlink them. The test runs with NCCL_DEBUG=INFO and fails (ctest's
 * FAIL_REGULAR_EXPRESSION) on the library's "already exists" line, and on a wrong sum.
 *     link_two_copies LIBDIR
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl.h"

#define COUNT 4096

typedef struct {
    const char *name;
    ncclResult_t (*get_id)(ncclUniqueId *);
    ncclResult_t (*init)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*allreduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                              ncclComm_t, cudaStream_t);
    ncclResult_t (*destroy)(ncclComm_t);
    const char *(*last_error)(ncclComm_t);
    ncclUniqueId id;
    ncclComm_t comm;
} copy_t;

static int load(copy_t *c, const char *dir, const char *file)
{
    char path[4096];
    void *h;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    c->name = file;
    *(void **)&c->get_id = dlsym(h, "ncclGetUniqueId");
    *(void **)&c->init = dlsym(h, "ncclCommInitRank");
    *(void **)&c->allreduce = dlsym(h, "ncclAllReduce");
    *(void **)&c->destroy = dlsym(h, "ncclCommDestroy");
    *(void **)&c->last_error = dlsym(h, "ncclGetLastError");
    if (c->get_id == NULL || c->init == NULL || c->allreduce == NULL || c->destroy == NULL ||
        c->last_error == NULL) {
        fprintf(stderr, "%s lacks an NCCL function\n", path);
        return 1;
    }
    return 0;
}

static int the_rank;

static void *init_thread(void *arg)
{
    copy_t *c = arg;

    if (c->init(&c->comm, 2, c->id, the_rank) != ncclSuccess) {
        fprintf(stderr, "rank %d: %s: ncclCommInitRank: %s\n", the_rank, c->name,
                c->last_error(NULL));
        c->comm = NULL;
    }
    return NULL;
}

/* Rank `rank` of both copies' communicators: both inits at once (each copy names and
 * creates its shared memory while the other does), then an AllReduce on each. */
static int run_rank(copy_t c[2], int rank)
{
    static float in[COUNT], out[COUNT];
    pthread_t t[2];
    int bad = 0;

    the_rank = rank;
    for (int k = 0; k < 2; k++) {
        if (pthread_create(&t[k], NULL, init_thread, &c[k]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    for (int k = 0; k < 2; k++) {
        pthread_join(t[k], NULL);
    }
    if (c[0].comm == NULL || c[1].comm == NULL) {
        return 1;
    }
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < COUNT; i++) {
            in[i] = (float)(i % 97 + 10 * k + rank);
        }
        memset(out, 0, sizeof(out));
        if (c[k].allreduce(in, out, COUNT, ncclFloat, ncclSum, c[k].comm, NULL) != ncclSuccess) {
            fprintf(stderr, "rank %d: %s: ncclAllReduce: %s\n", rank, c[k].name,
                    c[k].last_error(c[k].comm));
            bad = 1;
            continue;
        }
        for (int i = 0; i < COUNT; i++) {
            float want = (float)(2 * (i % 97 + 10 * k) + 1);
            if (out[i] != want) {
                fprintf(stderr, "rank %d: %s: element %d is %g, not %g\n", rank, c[k].name, i,
                        (double)out[i], (double)want);
                bad = 1;
                break;
            }
        }
    }
    for (int k = 0; k < 2; k++) {
        bad |= c[k].destroy(c[k].comm) != ncclSuccess;
    }
    return bad;
}

int main(int argc, char **argv)
{
    copy_t c[2];
    int status, bad;
    pid_t child;

    if (argc != 2) {
        fprintf(stderr, "usage: link_two_copies LIBDIR\n");
        return 2;
    }
    memset(c, 0, sizeof(c));
    if (load(&c[0], argv[1], "libbraid.so") || load(&c[1], argv[1], "libnccl.so.2")) {
        return 1;
    }
    for (int k = 0; k < 2; k++) {
        if (c[k].get_id(&c[k].id) != ncclSuccess) {
            fprintf(stderr, "%s: ncclGetUniqueId failed\n", c[k].name);
            return 1;
        }
    }
    fflush(NULL);
    child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        _exit(run_rank(c, 1));
    }
    bad = run_rank(c, 0);
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "rank 1 failed\n");
        bad = 1;
    }
    if (!bad) {
        printf("link_two_copies: two copies of the library ran a 2-process AllReduce each\n");
    }
    return bad;
}
