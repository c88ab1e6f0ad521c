/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "topo_gpu_emu": a rank's CUDA device is its GPU in the topology. Over the
 * emulated driver (4 devices) and the PCIe 4-GPU reference topology (GPUs 0 and 1 beside
 * NIC mlx5_0 under one switch, GPUs 2 and 3 under a second switch below that one, NIC
 * mlx5_1 on the CPU), ncclCommInitAll puts rank i on device 3 - i; each rank must be
 * placed on that GPU, whatever its rank, and so reach mlx5_0 at PIX from GPUs 0 and 1
 * and at PXB from GPUs 2 and 3 (still nearer than mlx5_1 at PHB). The INFO log
 * (NCCL_DEBUG_FILE) says so.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nccl.h>

#define NRANKS 4

/* The emulated driver; calling it keeps it linked, so the process "uses CUDA". */
int cuInit(unsigned flags);

static int log_has(const char *path, const char *what)
{
    char line[1024];
    int found = 0;
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        found = strstr(line, what) != NULL;
    }
    fclose(f);
    return found;
}

START_TEST(test_rank_on_its_device_gpu)
{
    char dir[] = "/tmp/braid-topo-gpu-XXXXXX", path[64];
    ncclComm_t comms[NRANKS];
    int devs[NRANKS];

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/log", dir);
    setenv("NCCL_DEBUG_FILE", path, 1);
    ck_assert_int_eq(cuInit(0), 0);
    for (int i = 0; i < NRANKS; i++) {
        devs[i] = NRANKS - 1 - i;
    }
    ck_assert_int_eq(ncclCommInitAll(comms, NRANKS, devs), ncclSuccess);
    for (int i = 0; i < NRANKS; i++) {
        int dev = -1;
        ck_assert_int_eq(ncclCommCuDevice(comms[i], &dev), ncclSuccess);
        ck_assert_int_eq(dev, devs[i]);
        ck_assert_int_eq(ncclCommDestroy(comms[i]), ncclSuccess);
    }
    for (int i = 0; i < NRANKS; i++) {
        char gpu[96], nic[64];
        const char *path_type = devs[i] >= 2 ? "PXB" : "PIX";
        snprintf(gpu, sizeof(gpu), "rank %d: CUDA device %d is the topology's GPU %d", i, devs[i],
                 devs[i]);
        snprintf(nic, sizeof(nic), "NIC 0 mlx5_0 from GPU %d at %s", devs[i], path_type);
        ck_assert_msg(log_has(path, gpu), "no line '%s'", gpu);
        ck_assert_msg(log_has(path, nic), "rank %d: no line with '%s'", i, nic);
    }
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("topo_gpu_emu");
    TCase *tc = tcase_create("placement");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_rank_on_its_device_gpu);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
