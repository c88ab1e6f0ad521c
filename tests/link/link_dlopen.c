/* SPDX-License-Identifier: Apache-2.0 */
/*
 * link_dlopen: a program that does not link libnccl.so.2 loads it at run time, as
 * Python's ctypes or a framework that loads its communication library lazily does, and
 * calls it. Loading fails where the library needs static TLS space (initial-exec
 * thread-locals) beyond what glibc keeps for libraries loaded late. Then a one-rank
 * communicator runs calls that use the library's thread-locals (a group's depth, the
 * thread's last error), on the main thread and on one started after the load, whose
 * thread-locals the loader makes on first use.
 *     link_dlopen PATH/libnccl.so.2
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "nccl.h"

typedef struct {
    ncclResult_t (*init)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*allreduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                              ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    const char *(*last_error)(ncclComm_t);
    ncclResult_t (*destroy)(ncclComm_t);
    ncclUniqueId id;
    int failed;
} calls_t;

/* A one-rank communicator: a lone AllReduce, two in a group, and a refused call whose
 * message must reach ncclGetLastError on this thread. */
static void *one_rank(void *arg)
{
    calls_t *c = arg;
    ncclComm_t comm;
    float in[4] = {1, 2, 3, 4}, out[4] = {0}, out2[4] = {0};

    if (c->init(&comm, 1, c->id, 0) != ncclSuccess) {
        fprintf(stderr, "ncclCommInitRank (1 rank) failed\n");
        c->failed = 1;
        return NULL;
    }
    if (c->allreduce(in, out, 4, ncclFloat, ncclSum, comm, NULL) != ncclSuccess ||
        c->group_start() != ncclSuccess ||
        c->allreduce(in, out2, 4, ncclFloat, ncclSum, comm, NULL) != ncclSuccess ||
        c->allreduce(in, out2, 4, ncclFloat, ncclMax, comm, NULL) != ncclSuccess ||
        c->group_end() != ncclSuccess || memcmp(in, out, sizeof(in)) != 0 ||
        memcmp(in, out2, sizeof(in)) != 0) {
        fprintf(stderr, "AllReduce on one rank failed or gave a wrong result\n");
        c->failed = 1;
    }
    if (c->allreduce(in, out, 4, (ncclDataType_t)99, ncclSum, comm, NULL) != ncclInvalidArgument ||
        strstr(c->last_error(comm), "datatype") == NULL) {
        fprintf(stderr, "a bad datatype was not refused with its message: \"%s\"\n",
                c->last_error(comm));
        c->failed = 1;
    }
    if (c->destroy(comm) != ncclSuccess) {
        fprintf(stderr, "ncclCommDestroy failed\n");
        c->failed = 1;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH/libnccl.so.2\n", argv[0]);
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    ncclResult_t (*get_version)(int *) = (ncclResult_t(*)(int *))dlsym(h, "ncclGetVersion");
    ncclResult_t (*get_id)(ncclUniqueId *) =
        (ncclResult_t(*)(ncclUniqueId *))dlsym(h, "ncclGetUniqueId");
    int version = 0;
    ncclUniqueId id;
    if (get_version == NULL || get_id == NULL) {
        fprintf(stderr, "dlsym: %s\n", dlerror());
        return 1;
    }
    if (get_version(&version) != ncclSuccess || version != NCCL_VERSION_CODE) {
        fprintf(stderr, "ncclGetVersion gave %d, nccl.h says %d\n", version, NCCL_VERSION_CODE);
        return 1;
    }
    if (get_id(&id) != ncclSuccess) {
        fprintf(stderr, "ncclGetUniqueId failed\n");
        return 1;
    }
    calls_t c = {
        .init = (ncclResult_t(*)(ncclComm_t *, int, ncclUniqueId, int))dlsym(h, "ncclCommInitRank"),
        .allreduce = (ncclResult_t(*)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                      ncclComm_t, cudaStream_t))dlsym(h, "ncclAllReduce"),
        .group_start = (ncclResult_t(*)(void))dlsym(h, "ncclGroupStart"),
        .group_end = (ncclResult_t(*)(void))dlsym(h, "ncclGroupEnd"),
        .last_error = (const char *(*)(ncclComm_t))dlsym(h, "ncclGetLastError"),
        .destroy = (ncclResult_t(*)(ncclComm_t))dlsym(h, "ncclCommDestroy"),
        .id = id,
    };
    if (c.init == NULL || c.allreduce == NULL || c.group_start == NULL || c.group_end == NULL ||
        c.last_error == NULL || c.destroy == NULL) {
        fprintf(stderr, "dlsym: %s\n", dlerror());
        return 1;
    }
    one_rank(&c);
    pthread_t t;
    if (get_id(&c.id) != ncclSuccess || pthread_create(&t, NULL, one_rank, &c) != 0 ||
        pthread_join(t, NULL) != 0) {
        fprintf(stderr, "a second unique id or the thread could not be made\n");
        return 1;
    }
    if (c.failed) {
        return 1;
    }
    printf("loaded %s at run time: version %d; one-rank calls ran on the main thread and on "
           "a later one\n",
           argv[1], version);
    /* No dlclose: a unique id starts the bootstrap root's thread, which runs in the library
     * until the ranks have met (as in NCCL, the library is not made to be unloaded). */
    return 0;
}
