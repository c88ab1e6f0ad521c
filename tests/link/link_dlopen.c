/* SPDX-License-Identifier: Apache-2.0 */
/*
 * link_dlopen: a program that does not link libnccl.so.2 loads it at run time, as
 * Python's ctypes or a framework that loads its communication library lazily does, and
 * calls it. Loading fails where the library needs static TLS space (initial-exec
 * thread-locals) beyond what glibc keeps for libraries loaded late.
 *     link_dlopen PATH/libnccl.so.2
 */
#include <dlfcn.h>
#include <stdio.h>

#include "nccl.h"

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
    printf("loaded %s at run time: version %d, a unique id made\n", argv[1], version);
    /* No dlclose: a unique id starts the bootstrap root's thread, which runs in the library
     * until the ranks have met (as in NCCL, the library is not made to be unloaded). */
    return 0;
}
