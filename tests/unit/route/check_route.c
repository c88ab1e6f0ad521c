/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "route": which executor runs a call, from where its buffers are
 * (br_route_decide), and the refusals' messages; and the lazy CUDA loader on a machine
 * that may have no driver at all (then every pointer is host memory, and the reason is
 * said). Runs without a GPU.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "api_route.h"
#include "util_cuda.h"

static char dev0_a[16], dev0_b[16], dev1_a[16], host_a[16], host_b[16], man_a[16];

static br_route_buf_t buf(const char *name, const void *p, br_mem_kind_t kind, int device)
{
    br_route_buf_t b = {name, p, kind, device};
    return b;
}

static int decide(br_route_buf_t a, br_route_buf_t b, int comm_dev, char *msg)
{
    br_route_buf_t bufs[2] = {a, b};
    msg[0] = '\0';
    return br_route_decide(bufs, 2, comm_dev, "no CUDA driver here", msg, 512);
}

START_TEST(test_host_buffers_go_to_the_host_executor)
{
    char msg[512];
    ck_assert_int_eq(decide(buf("sendbuff", host_a, BR_MEM_HOST, -1),
                            buf("recvbuff", host_b, BR_MEM_HOST, -1), -1, msg),
                     BR_ROUTE_HOST);
    /* A communicator with a device still runs host buffers on the host. */
    ck_assert_int_eq(decide(buf("sendbuff", host_a, BR_MEM_HOST, -1),
                            buf("recvbuff", host_b, BR_MEM_HOST, -1), 0, msg),
                     BR_ROUTE_HOST);
    ck_assert_str_eq(msg, "");
}
END_TEST

START_TEST(test_device_buffers_of_the_comm_device_go_to_cuda)
{
    char msg[512];
    ck_assert_int_eq(decide(buf("sendbuff", dev0_a, BR_MEM_DEVICE, 0),
                            buf("recvbuff", dev0_b, BR_MEM_DEVICE, 0), 0, msg),
                     BR_ROUTE_DEVICE);
    ck_assert_int_eq(decide(buf("sendbuff", dev1_a, BR_MEM_DEVICE, 1),
                            buf("recvbuff", dev1_a, BR_MEM_DEVICE, 1), 1, msg),
                     BR_ROUTE_DEVICE);
}
END_TEST

START_TEST(test_mixed_host_and_device_is_refused_naming_both)
{
    char msg[512];
    ck_assert_int_eq(decide(buf("sendbuff", host_a, BR_MEM_HOST, -1),
                            buf("recvbuff", dev0_a, BR_MEM_DEVICE, 0), 0, msg),
                     BR_ROUTE_REFUSED);
    ck_assert_msg(strstr(msg, "sendbuff") && strstr(msg, "is host memory") &&
                      strstr(msg, "recvbuff") && strstr(msg, "device memory of device 0"),
                  "message: %s", msg);
    ck_assert_int_eq(decide(buf("sendbuff", dev0_a, BR_MEM_DEVICE, 0),
                            buf("recvbuff", host_a, BR_MEM_HOST, -1), 0, msg),
                     BR_ROUTE_REFUSED);
    ck_assert_msg(strstr(msg, "recvbuff") && strstr(msg, "host memory"), "message: %s", msg);
}
END_TEST

START_TEST(test_another_devices_memory_is_refused)
{
    char msg[512];
    ck_assert_int_eq(decide(buf("sendbuff", dev0_a, BR_MEM_DEVICE, 0),
                            buf("recvbuff", dev1_a, BR_MEM_DEVICE, 1), 0, msg),
                     BR_ROUTE_REFUSED);
    ck_assert_msg(strstr(msg, "recvbuff") && strstr(msg, "device 1") &&
                      strstr(msg, "bound to device 0"),
                  "message: %s", msg);
}
END_TEST

START_TEST(test_device_memory_without_cuda_is_refused_with_the_reason)
{
    char msg[512];
    ck_assert_int_eq(decide(buf("sendbuff", dev0_a, BR_MEM_DEVICE, 0),
                            buf("recvbuff", dev0_a, BR_MEM_DEVICE, 0), -1, msg),
                     BR_ROUTE_REFUSED);
    ck_assert_msg(strstr(msg, "sendbuff") && strstr(msg, "no CUDA device") &&
                      strstr(msg, "no CUDA driver here"),
                  "message: %s", msg);
}
END_TEST

START_TEST(test_unused_buffers_are_ignored)
{
    char msg[512];
    /* Broadcast on a non-root rank: sendbuff unused (NULL here), recvbuff decides. */
    ck_assert_int_eq(decide(buf("sendbuff", NULL, BR_MEM_HOST, -1),
                            buf("recvbuff", dev0_a, BR_MEM_DEVICE, 0), 0, msg),
                     BR_ROUTE_DEVICE);
    /* Nothing used at all (count 0): the host executor returns at once. */
    ck_assert_int_eq(decide(buf("sendbuff", NULL, BR_MEM_HOST, -1),
                            buf("recvbuff", NULL, BR_MEM_DEVICE, 0), -1, msg),
                     BR_ROUTE_HOST);
    /* ... and on a communicator with a device, the CUDA executor orders it on its stream. */
    ck_assert_int_eq(decide(buf("sendbuff", NULL, BR_MEM_HOST, -1),
                            buf("recvbuff", NULL, BR_MEM_DEVICE, 0), 0, msg),
                     BR_ROUTE_DEVICE);
}
END_TEST

START_TEST(test_managed_memory_follows_the_others)
{
    char msg[512];
    ck_assert_int_eq(decide(buf("sendbuff", man_a, BR_MEM_MANAGED, 0),
                            buf("recvbuff", dev0_a, BR_MEM_DEVICE, 0), 0, msg),
                     BR_ROUTE_DEVICE);
    ck_assert_int_eq(decide(buf("sendbuff", man_a, BR_MEM_MANAGED, 0),
                            buf("recvbuff", host_a, BR_MEM_HOST, -1), 0, msg),
                     BR_ROUTE_HOST);
    ck_assert_int_eq(decide(buf("sendbuff", man_a, BR_MEM_MANAGED, 0),
                            buf("recvbuff", man_a, BR_MEM_MANAGED, 0), 0, msg),
                     BR_ROUTE_DEVICE);
    /* Without a device the host reads managed memory itself. */
    ck_assert_int_eq(decide(buf("sendbuff", man_a, BR_MEM_MANAGED, 0),
                            buf("recvbuff", man_a, BR_MEM_MANAGED, 0), -1, msg),
                     BR_ROUTE_HOST);
}
END_TEST

START_TEST(test_loader_says_why_or_finds_a_driver)
{
    const char *why = NULL;
    const br_cuda_t *cu = br_cuda(&why);
    int dev = 7;
    int local = 0;

    if (cu == NULL) {
        ck_assert_msg(why != NULL && why[0] != '\0', "no driver and no reason");
        printf("route: no CUDA here (%s): every pointer is host memory\n", why);
    } else {
        ck_assert_int_gt(cu->ndevices, 0);
        printf("route: CUDA driver %d, %d devices\n", cu->driver_version, cu->ndevices);
    }
    /* Ordinary host memory is host memory, with or without a driver. */
    ck_assert_int_eq(br_cuda_ptr_kind(&local, &dev), BR_MEM_HOST);
    ck_assert_int_eq(dev, -1);
    ck_assert_int_eq(br_cuda_ptr_kind(NULL, &dev), BR_MEM_HOST);
    ck_assert_str_eq(br_mem_kind_name(BR_MEM_DEVICE), "device memory");
}
END_TEST

static Suite *route_suite(void)
{
    Suite *s = suite_create("route");
    TCase *tc = tcase_create("decide");
    tcase_add_test(tc, test_host_buffers_go_to_the_host_executor);
    tcase_add_test(tc, test_device_buffers_of_the_comm_device_go_to_cuda);
    tcase_add_test(tc, test_mixed_host_and_device_is_refused_naming_both);
    tcase_add_test(tc, test_another_devices_memory_is_refused);
    tcase_add_test(tc, test_device_memory_without_cuda_is_refused_with_the_reason);
    tcase_add_test(tc, test_unused_buffers_are_ignored);
    tcase_add_test(tc, test_managed_memory_follows_the_others);
    tcase_add_test(tc, test_loader_says_why_or_finds_a_driver);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(route_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
