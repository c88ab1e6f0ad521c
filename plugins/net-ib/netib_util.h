/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Pure decisions of the net-ib plugin, without verbs calls, so that host unit tests
 * (tests/net-ib) can check them where no RDMA device exists: NCCL_IB_HCA parsing and
 * matching, RoCE GID choice, and the port speed.
 */
#ifndef NETIB_UTIL_H_
#define NETIB_UTIL_H_

#include <stdint.h>

#define NETIB_HCA_MAX 32  /* entries of an NCCL_IB_HCA list */
#define NETIB_HCA_NAME 64 /* characters of one entry's name */

/* A parsed NCCL_IB_HCA value. */
typedef struct {
    int exclude; /* leading '^': the entries name what not to use */
    int exact;   /* leading '=': names match whole, not as prefixes */
    int n;       /* entries */
    struct {
        char name[NETIB_HCA_NAME];
        int port; /* -1: any port */
    } e[NETIB_HCA_MAX];
} netib_hca_list_t;

/* Parse spec ("mlx5_0:1,mlx5_1", "^=rxe1", ...) into *list. NULL or "" gives an empty
 * list, which matches everything. Returns 0, or -1 when an entry is malformed (too long,
 * a bad port, too many entries); *list then holds the entries before it. */
int netib_hca_parse(const char *spec, netib_hca_list_t *list);

/* 1 when device name, port passes the list (selected, or not excluded), else 0. */
int netib_hca_match(const netib_hca_list_t *list, const char *name, int port);

/* 1 when the list names name:port explicitly (exact or as a prefix), whatever ^ says. */
int netib_hca_names(const netib_hca_list_t *list, const char *name, int port);

/* GID types as the chooser sees them (independent of the verbs enum). */
enum { NETIB_GID_IB = 0, NETIB_GID_ROCE_V1 = 1, NETIB_GID_ROCE_V2 = 2 };

/* One GID table entry: its index, type and the 16 raw bytes; valid 0 for an empty slot. */
typedef struct {
    int valid;
    int index;
    int type;
    uint8_t raw[16];
} netib_gid_entry_t;

/*
 * Choose a RoCE GID as NCCL does: forced_index >= 0 wins when that entry is valid;
 * otherwise the first entry of type roce_version (1 or 2) whose address is of family
 * (AF_INET: IPv4-mapped ::ffff:a.b.c.d; AF_INET6: any other address that is not
 * link-local), falling back to the first entry of the wanted version with any address,
 * then to the first RoCE v2, then v1 entry. Returns the position in entries[], or -1.
 */
int netib_gid_choose(const netib_gid_entry_t *entries, int n, int forced_index, int roce_version,
                     int family);

/* 1 when raw is an IPv4-mapped IPv6 address (::ffff:a.b.c.d). */
int netib_gid_is_ipv4(const uint8_t raw[16]);

/* Port speed in Mbps from ibv_port_attr's active_speed and active_width codes; 0 when a
 * code is unknown. */
int netib_port_speed_mbps(int active_speed, int active_width);

#endif /* NETIB_UTIL_H_ */
