/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check tests of the net-ofi plugin, loaded from argv[1] with dlopen as a core loads it.
 * Run once per provider (ctest sets FI_PROVIDER=tcp, FI_PROVIDER=shm). Each test runs in
 * its own forked child (Check's fork mode), so libfabric is initialized per test and
 * environment knobs set in a fixture apply to that test only.
 *
 * This file only runs suite "net-ofi"; the cases live by concern in check_netofi_connect.c,
 * check_netofi_procs.c, check_netofi_data.c and check_netofi_fail.c, and what they share
 * in netofi_test_util.c.
 */
#include <check.h>
#include <stdio.h>

#include "netofi_test_util.h"

static Suite *netofi_suite(void)
{
    Suite *s = suite_create("net-ofi");

    nt_add_connect_tcases(s);
    nt_add_procs_tcases(s);
    nt_add_data_tcases(s);
    nt_add_failure_tcases(s);
    return s;
}

int main(int argc, char **argv)
{
    SRunner *sr;
    int failed;

    if (argc < 2) {
        fprintf(stderr, "usage: %s path/to/libnccl-net-ofi.so\n", argv[0]);
        return 2;
    }
    nt_plugin_path = argv[1];
    sr = srunner_create(netofi_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
