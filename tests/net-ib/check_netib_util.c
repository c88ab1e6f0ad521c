/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "netib_util": the net-ib plugin's pure decisions, on any host: NCCL_IB_HCA
 * parsing and matching (prefixes, ^, =, :port), the RoCE GID choice (version, family,
 * forced index, fallbacks) and port speeds.
 */
#include <check.h>
#include <string.h>
#include <sys/socket.h>

#include "netib_util.h"

START_TEST(test_hca_prefix_and_port)
{
    netib_hca_list_t l;

    ck_assert_int_eq(netib_hca_parse("mlx5_0:1,rxe", &l), 0);
    ck_assert_int_eq(l.n, 2);
    ck_assert_int_eq(l.exclude, 0);
    ck_assert_int_eq(netib_hca_match(&l, "mlx5_0", 1), 1);
    ck_assert_int_eq(netib_hca_match(&l, "mlx5_0", 2), 0);
    ck_assert_int_eq(netib_hca_match(&l, "mlx5_01", 1), 1); /* a prefix */
    ck_assert_int_eq(netib_hca_match(&l, "rxe0", 1), 1);
    ck_assert_int_eq(netib_hca_match(&l, "mlx4_0", 1), 0);
}
END_TEST

START_TEST(test_hca_exclude_exact)
{
    netib_hca_list_t l;

    ck_assert_int_eq(netib_hca_parse("^=mlx5_1", &l), 0);
    ck_assert_int_eq(l.exclude, 1);
    ck_assert_int_eq(l.exact, 1);
    ck_assert_int_eq(netib_hca_match(&l, "mlx5_1", 1), 0);
    ck_assert_int_eq(netib_hca_match(&l, "mlx5_10", 1), 1); /* exact: not a prefix */
    ck_assert_int_eq(netib_hca_match(&l, "mlx5_0", 1), 1);
    ck_assert_int_eq(netib_hca_parse("=rxe0", &l), 0);
    ck_assert_int_eq(netib_hca_match(&l, "rxe0", 1), 1);
    ck_assert_int_eq(netib_hca_match(&l, "rxe01", 1), 0);
    ck_assert_int_eq(netib_hca_parse("^rxe", &l), 0);
    ck_assert_int_eq(netib_hca_match(&l, "rxe0", 1), 0);
    ck_assert_int_eq(netib_hca_names(&l, "rxe0", 1), 1);
}
END_TEST

START_TEST(test_hca_empty_and_malformed)
{
    netib_hca_list_t l;

    ck_assert_int_eq(netib_hca_parse(NULL, &l), 0);
    ck_assert_int_eq(netib_hca_match(&l, "anything", 3), 1);
    ck_assert_int_eq(netib_hca_parse("a,,b,", &l), 0);
    ck_assert_int_eq(l.n, 2);
    ck_assert_int_eq(netib_hca_parse("mlx5_0:x", &l), -1);
    ck_assert_int_eq(netib_hca_parse("mlx5_0:0", &l), -1);
    ck_assert_int_eq(netib_hca_parse(":1", &l), -1);
}
END_TEST

static netib_gid_entry_t gid(int index, int type, const char *kind)
{
    netib_gid_entry_t g;

    memset(&g, 0, sizeof(g));
    g.valid = 1;
    g.index = index;
    g.type = type;
    if (strcmp(kind, "v4") == 0) { /* ::ffff:10.0.0.1 */
        g.raw[10] = g.raw[11] = 0xff;
        g.raw[12] = 10;
        g.raw[15] = 1;
    } else if (strcmp(kind, "ll") == 0) { /* fe80::1 */
        g.raw[0] = 0xfe;
        g.raw[1] = 0x80;
        g.raw[15] = 1;
    } else { /* 2001:db8::1 */
        g.raw[0] = 0x20;
        g.raw[1] = 0x01;
        g.raw[2] = 0x0d;
        g.raw[3] = 0xb8;
        g.raw[15] = 1;
    }
    return g;
}

/* A typical RoCE table: link-local v1/v2, IPv4-mapped v1/v2, global IPv6 v1/v2. */
static void table(netib_gid_entry_t *t)
{
    t[0] = gid(0, NETIB_GID_ROCE_V1, "ll");
    t[1] = gid(1, NETIB_GID_ROCE_V2, "ll");
    t[2] = gid(2, NETIB_GID_ROCE_V1, "v4");
    t[3] = gid(3, NETIB_GID_ROCE_V2, "v4");
    t[4] = gid(4, NETIB_GID_ROCE_V1, "v6");
    t[5] = gid(5, NETIB_GID_ROCE_V2, "v6");
}

START_TEST(test_gid_default_is_v2_ipv4)
{
    netib_gid_entry_t t[6];

    table(t);
    ck_assert_int_eq(netib_gid_choose(t, 6, -1, 2, AF_INET), 3);
    ck_assert_int_eq(netib_gid_choose(t, 6, -1, 1, AF_INET), 2);
    ck_assert_int_eq(netib_gid_choose(t, 6, -1, 2, AF_INET6), 5);
    ck_assert_int_eq(netib_gid_choose(t, 6, -1, 1, AF_INET6), 4);
    ck_assert_int_eq(netib_gid_choose(t, 6, 4, 2, AF_INET), 4); /* NCCL_IB_GID_INDEX wins */
    ck_assert_int_eq(netib_gid_choose(t, 6, 9, 2, AF_INET), -1);
}
END_TEST

START_TEST(test_gid_fallbacks)
{
    netib_gid_entry_t t[6];

    table(t);
    t[3].valid = 0; /* no v2 IPv4: the first v2 entry (link-local) */
    t[5].valid = 0;
    ck_assert_int_eq(netib_gid_choose(t, 6, -1, 2, AF_INET), 1);
    t[1].valid = 0; /* no v2 at all: v1 */
    ck_assert_int_eq(netib_gid_choose(t, 6, -1, 2, AF_INET), 0);
    memset(t, 0, sizeof(t));
    ck_assert_int_eq(netib_gid_choose(t, 6, -1, 2, AF_INET), -1);
}
END_TEST

START_TEST(test_port_speed)
{
    ck_assert_int_eq(netib_port_speed_mbps(1, 1), 2500);     /* SDR 1x (rxe) */
    ck_assert_int_eq(netib_port_speed_mbps(32, 2), 100000);  /* EDR 4x */
    ck_assert_int_eq(netib_port_speed_mbps(64, 2), 200000);  /* HDR 4x */
    ck_assert_int_eq(netib_port_speed_mbps(128, 2), 400000); /* NDR 4x */
    ck_assert_int_eq(netib_port_speed_mbps(3, 2), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("netib_util");
    TCase *tc = tcase_create("hca");
    SRunner *sr;
    int failed;

    tcase_add_test(tc, test_hca_prefix_and_port);
    tcase_add_test(tc, test_hca_exclude_exact);
    tcase_add_test(tc, test_hca_empty_and_malformed);
    suite_add_tcase(s, tc);
    tc = tcase_create("gid");
    tcase_add_test(tc, test_gid_default_is_v2_ipv4);
    tcase_add_test(tc, test_gid_fallbacks);
    tcase_add_test(tc, test_port_speed);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
