/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The end of every Check program's main in the multi-rank tests (STYLE.md 3.8): run the
 * suite's cases, each in a child of its own (fork mode; CK_FORK=no, CK_RUN_SUITE and
 * CK_RUN_CASE apply as Check reads them), and turn the result into the exit status.
 * Header only: brt_common does not link Check, the test programs that include this do.
 */
#ifndef BR_TESTS_BRT_CHECK_H_
#define BR_TESTS_BRT_CHECK_H_

#include <check.h>

/* Runs every case of s, frees the runner (and s with it); 1 when a case failed, else 0. */
static inline int brt_suite_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

#endif /* BR_TESTS_BRT_CHECK_H_ */
