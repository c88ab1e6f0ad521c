/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ncclCommSplit: every rank of the parent shares (color, key) through the parent's
 * bootstrap; the ranks of one color, ordered by (key, parent rank), form a child whose
 * first member makes a unique id and sends it to the others out of band.
 */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "util.h"

#define BR_TAG_SPLIT 3

typedef struct {
    int color, key;
} split_info_t;

ncclResult_t br_comm_split(ncclComm_t parent, int color, int key, ncclComm_t *newcomm_p,
                           const ncclConfig_t *config)
{
    ncclResult_t res = ncclSuccess;
    int n = parent->nranks, me = parent->rank, nnew = 0, newrank = -1;
    split_info_t *all = NULL;
    int *members = NULL;
    ncclUniqueId id;
    ncclConfig_t inherited;

    BR_CHECK_GOTO(br_calloc(&all, (size_t)n, "split"), res, out);
    BR_CHECK_GOTO(br_calloc(&members, (size_t)n, "split"), res, out);
    all[me].color = color;
    all[me].key = key;
    BR_CHECK_GOTO(br_bootstrap_allgather(parent->tc->boot, all, sizeof(*all)), res, out);
    *newcomm_p = NULL;
    if (color == NCCL_SPLIT_NOCOLOR) {
        goto out;
    }
    /* Members of my color, ordered by (key, parent rank): a stable insertion sort. */
    for (int r = 0; r < n; r++) {
        if (all[r].color != color) {
            continue;
        }
        int pos = nnew++;
        while (pos > 0 && all[members[pos - 1]].key > all[r].key) {
            members[pos] = members[pos - 1];
            pos--;
        }
        members[pos] = r;
    }
    for (int i = 0; i < nnew; i++) {
        if (members[i] == me) {
            newrank = i;
        }
    }
    if (newrank == 0) {
        BR_CHECK_GOTO(br_bootstrap_new_unique_id(&id), res, out);
        for (int i = 1; i < nnew; i++) {
            BR_CHECK_GOTO(br_bootstrap_send(parent->tc->boot, members[i], BR_TAG_SPLIT, &id,
                                            sizeof(id)), res, out);
        }
    } else {
        BR_CHECK_GOTO(br_bootstrap_recv(parent->tc->boot, members[0], BR_TAG_SPLIT, &id,
                                        sizeof(id)), res, out);
    }
    if (config == NULL) {
        /* NULL config: the child inherits the parent's settings. */
        ncclConfig_t def = NCCL_CONFIG_INITIALIZER;
        inherited = def;
        inherited.blocking = parent->blocking;
        inherited.trafficClass = parent->traffic_class;
        inherited.netName = parent->net_name[0] ? parent->net_name : NULL;
        inherited.commName = parent->name[0] ? parent->name : NULL;
        config = &inherited;
    }
    BR_INFO(NCCL_INIT, "ncclCommSplit: parent rank %d color %d key %d -> rank %d of %d", me, color,
            key, newrank, nnew);
    BR_CHECK_GOTO(br_comm_init(newcomm_p, nnew, &id, newrank, config), res, out);
    br_log_set_rank(me);
out:
    free(all);
    free(members);
    return res;
}
