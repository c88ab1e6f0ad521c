/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Pure decisions of the net-ib plugin (see netib_util.h): NCCL_IB_HCA lists, RoCE GID
 * choice, port speed. No verbs calls and no state, so host unit tests cover them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "netib_util.h"

int netib_hca_parse(const char *spec, netib_hca_list_t *list)
{
    const char *p = spec;

    memset(list, 0, sizeof(*list));
    if (p == NULL) {
        return 0;
    }
    if (*p == '^') {
        list->exclude = 1;
        p++;
    }
    if (*p == '=') {
        list->exact = 1;
        p++;
    }
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        size_t name_len = strcspn(p, ",:");
        int port = -1;

        if (len == 0) { /* empty entry: ",," or a trailing comma */
            p++;
            continue;
        }
        if (list->n == NETIB_HCA_MAX || name_len == 0 || name_len >= NETIB_HCA_NAME) {
            return -1;
        }
        if (name_len < len) { /* ":port" */
            char *end = NULL;
            long v = strtol(p + name_len + 1, &end, 10);
            if (end != p + len || end == p + name_len + 1 || v < 1 || v > 255) {
                return -1;
            }
            port = (int)v;
        }
        memcpy(list->e[list->n].name, p, name_len);
        list->e[list->n].name[name_len] = '\0';
        list->e[list->n].port = port;
        list->n++;
        p += len;
        if (*p == ',') {
            p++;
        }
    }
    return 0;
}

int netib_hca_names(const netib_hca_list_t *list, const char *name, int port)
{
    for (int i = 0; i < list->n; i++) {
        const char *want = list->e[i].name;
        int hit = list->exact ? strcmp(name, want) == 0 : strncmp(name, want, strlen(want)) == 0;
        if (hit && (list->e[i].port < 0 || list->e[i].port == port)) {
            return 1;
        }
    }
    return 0;
}

int netib_hca_match(const netib_hca_list_t *list, const char *name, int port)
{
    if (list->n == 0) {
        return 1;
    }
    return list->exclude ? !netib_hca_names(list, name, port) : netib_hca_names(list, name, port);
}

int netib_gid_is_ipv4(const uint8_t raw[16])
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(raw, prefix, sizeof(prefix)) == 0;
}

static int gid_is_zero(const uint8_t raw[16])
{
    for (int i = 0; i < 16; i++) {
        if (raw[i] != 0) {
            return 0;
        }
    }
    return 1;
}

/* fe80::/10, which NCCL passes over for AF_INET6 because it does not route. */
static int gid_is_link_local(const uint8_t raw[16])
{
    return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80;
}

static int gid_family_ok(const uint8_t raw[16], int family)
{
    if (family == AF_INET) {
        return netib_gid_is_ipv4(raw);
    }
    return !netib_gid_is_ipv4(raw) && !gid_is_link_local(raw);
}

int netib_gid_choose(const netib_gid_entry_t *entries, int n, int forced_index, int roce_version,
                     int family)
{
    int want = roce_version == 1 ? NETIB_GID_ROCE_V1 : NETIB_GID_ROCE_V2;
    int any_version = -1, v2 = -1, v1 = -1;

    for (int i = 0; i < n; i++) {
        const netib_gid_entry_t *g = &entries[i];
        if (!g->valid || gid_is_zero(g->raw)) {
            continue;
        }
        if (forced_index >= 0) {
            if (g->index == forced_index) {
                return i;
            }
            continue;
        }
        if (g->type == want && gid_family_ok(g->raw, family)) {
            return i;
        }
        if (g->type == want && any_version < 0) {
            any_version = i;
        }
        if (g->type == NETIB_GID_ROCE_V2 && v2 < 0) {
            v2 = i;
        }
        if (g->type == NETIB_GID_ROCE_V1 && v1 < 0) {
            v1 = i;
        }
    }
    if (forced_index >= 0) {
        return -1;
    }
    return any_version >= 0 ? any_version : v2 >= 0 ? v2 : v1;
}

int netib_port_speed_mbps(int active_speed, int active_width)
{
    int lane, lanes;

    switch (active_speed) {
    case 1: lane = 2500; break;     /* SDR */
    case 2: lane = 5000; break;     /* DDR */
    case 4: lane = 10000; break;    /* QDR */
    case 8: lane = 10000; break;    /* FDR10 */
    case 16: lane = 14000; break;   /* FDR */
    case 32: lane = 25000; break;   /* EDR */
    case 64: lane = 50000; break;   /* HDR */
    case 128: lane = 100000; break; /* NDR */
    case 256: lane = 200000; break; /* XDR */
    default: return 0;
    }
    switch (active_width) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: return 0;
    }
    return lane * lanes;
}
