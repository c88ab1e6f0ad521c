/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A program that forgets ncclCommDestroy: 2 ranks as communicators of one thread
 * (ncclCommInitAll) run one AllReduce, then main returns with both still live. With the
 * trace profiler loaded, each rank's trace must still be written (profiler_lost.sh). The
 * AllReduce goes through ncclAllReduceConfig with a user profiler tag, which the traces
 * must carry on its API and task events.
 */
#include <nccl.h>
#include <stdio.h>

int main(void)
{
    ncclComm_t comms[2];
    float data[2][4] = {{1, 2, 3, 4}, {1, 2, 3, 4}};
    ncclResult_t res = ncclCommInitAll(comms, 2, NULL);

    if (res != ncclSuccess) {
        fprintf(stderr, "ncclCommInitAll: %s\n", ncclGetErrorString(res));
        return 1;
    }
    ncclCollConfig_t config = NCCL_COLLCONFIG_INITIALIZER;
    config.userProfilerTag = 0x5eed;
    res = ncclGroupStart();
    for (int r = 0; r < 2 && res == ncclSuccess; r++) {
        res = ncclAllReduceConfig(data[r], data[r], 4, ncclFloat, ncclSum, comms[r], NULL, &config);
    }
    if (res == ncclSuccess) {
        res = ncclGroupEnd();
    }
    if (res != ncclSuccess || data[1][3] != 8) {
        fprintf(stderr, "AllReduce: %s, %g\n", ncclGetErrorString(res), data[1][3]);
        return 1;
    }
    printf("AllReduce ok; exiting without ncclCommDestroy\n");
    return 0;
}
