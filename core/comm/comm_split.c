/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ncclCommSplit: every rank of the parent shares (color, key) through the parent's
 * bootstrap; the ranks of one color, ordered by (key, parent rank), form a child whose
 * first member makes a unique id and sends it to the others out of band.
 *
 * ncclCommShrink: the ranks not excluded (all of them call it; the excluded ones may be
 * dead) form a child in parent order. Nothing collective over the parent is possible
 * then, so the first survivor makes a unique id and sends it to each other survivor as a
 * numbered recovery message, which the parent's bootstrap delivers even after a failure
 * or a revoke. With NCCL_SHRINK_ABORT the parent is revoked first, so calls still blocked
 * on it in other threads return.
 *
 * ncclCommGrow: the parent's ranks learn over its bootstrap which of them holds the id
 * (made by ncclCommGetUniqueId, handed to the new ranks by the program) and join the child
 * with it under their own rank numbers; the new ranks join with the id alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "util.h"

#define BR_TAG_SPLIT 3

static ncclResult_t child_init(ncclComm_t parent, const ncclUniqueId *id, int nnew, int newrank,
                               const ncclConfig_t *config, ncclComm_t *newcomm_p);

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
    BR_INFO(NCCL_INIT, "ncclCommSplit: parent rank %d color %d key %d -> rank %d of %d", me, color,
            key, newrank, nnew);
    res = child_init(parent, &id, nnew, newrank, config, newcomm_p);
out:
    free(all);
    free(members);
    return res;
}

/* Join the child; a NULL config means the parent's settings. */
static ncclResult_t child_init(ncclComm_t parent, const ncclUniqueId *id, int nnew, int newrank,
                               const ncclConfig_t *config, ncclComm_t *newcomm_p)
{
    ncclConfig_t inherited = NCCL_CONFIG_INITIALIZER;

    if (config == NULL) {
        inherited.blocking = parent->blocking;
        inherited.trafficClass = parent->traffic_class;
        inherited.netName = parent->net_name[0] ? parent->net_name : NULL;
        inherited.commName = parent->name[0] ? parent->name : NULL;
        config = &inherited;
    }
    ncclResult_t res = br_comm_init(newcomm_p, nnew, id, newrank, config);
    br_log_set_rank(parent->rank);
    return res;
}

ncclResult_t br_comm_shrink(ncclComm_t parent, const int *exclude, int nexclude,
                            ncclComm_t *newcomm_p, const ncclConfig_t *config, int flags)
{
    int n = parent->nranks, me = parent->rank, nnew = 0, newrank = -1;
    ncclResult_t res = ncclSuccess;
    char *out = NULL;
    int *members = NULL;
    ncclUniqueId id;
    uint32_t seq;

    *newcomm_p = NULL;
    BR_CHECK_GOTO(br_calloc(&out, (size_t)n, "shrink"), res, done);
    BR_CHECK_GOTO(br_calloc(&members, (size_t)n, "shrink"), res, done);
    for (int i = 0; i < nexclude; i++) {
        int r = exclude[i];
        if (r < 0 || r >= n || out[r]) {
            BR_WARN(NCCL_INIT, "ncclCommShrink: rank %d: excludeRanksList[%d] = %d is %s", me, i, r,
                    r < 0 || r >= n ? "not a rank of the communicator" : "listed twice");
            res = ncclInvalidArgument;
            goto done;
        }
        if (r == me) {
            BR_WARN(NCCL_INIT, "ncclCommShrink: rank %d is in its own excludeRanksList: an "
                    "excluded rank does not call ncclCommShrink", me);
            res = ncclInvalidArgument;
            goto done;
        }
        out[r] = 1;
    }
    for (int r = 0; r < n; r++) {
        if (!out[r]) {
            if (r == me) {
                newrank = nnew;
            }
            members[nnew++] = r;
        }
    }
    if (flags & NCCL_SHRINK_ABORT) {
        br_comm_revoke(parent, "the communicator was shrunk with NCCL_SHRINK_ABORT (ncclCommShrink)");
    }
    /* Recovery messages are numbered per parent, so a second shrink never takes the id
     * of the first. */
    seq = (uint32_t)atomic_fetch_add(&parent->shrinks, 1) + 1;
    if (newrank == 0) {
        BR_CHECK_GOTO(br_bootstrap_new_unique_id(&id), res, done);
        for (int i = 1; i < nnew; i++) {
            BR_CHECK_GOTO(br_bootstrap_send_recovery(parent->tc->boot, members[i], seq, &id,
                                                     sizeof(id)),
                          res, done);
        }
    } else {
        BR_CHECK_GOTO(br_bootstrap_recv_recovery(parent->tc->boot, members[0], seq, &id,
                                                 sizeof(id)),
                      res, done);
    }
    BR_INFO(NCCL_INIT, "ncclCommShrink: parent rank %d -> rank %d of %d (%d excluded%s)", me,
            newrank, nnew, nexclude, (flags & NCCL_SHRINK_ABORT) ? ", parent revoked" : "");
    res = child_init(parent, &id, nnew, newrank, config, newcomm_p);
done:
    free(out);
    free(members);
    return res;
}

typedef struct {
    int32_t has; /* this rank was given the id */
    int32_t pad;
    ncclUniqueId id;
} grow_info_t;

ncclResult_t br_comm_grow(ncclComm_t parent, int nranks, const ncclUniqueId *id,
                          ncclComm_t *newcomm_p, const ncclConfig_t *config)
{
    int n = parent->nranks, me = parent->rank, root = -1, other = -1;
    grow_info_t *all = NULL;
    ncclResult_t res;

    *newcomm_p = NULL;
    BR_CHECK(br_calloc(&all, (size_t)n, "grow"));
    all[me].has = id != NULL;
    if (id != NULL) {
        all[me].id = *id;
    }
    BR_CHECK_GOTO(br_bootstrap_allgather(parent->tc->boot, all, sizeof(*all)), res, out);
    for (int r = 0; r < n; r++) {
        if (all[r].has && root < 0) {
            root = r;
        } else if (all[r].has && other < 0) {
            other = r;
        }
    }
    /* Every rank sees the same table, so every rank fails alike. */
    if (root < 0 || other >= 0) {
        if (root < 0) {
            BR_WARN(NCCL_INIT,
                    "ncclCommGrow: rank %d: none of the %d ranks passed the unique id "
                    "(exactly one of them passes the id from ncclCommGetUniqueId)",
                    me, n);
        } else {
            BR_WARN(NCCL_INIT,
                    "ncclCommGrow: rank %d: ranks %d and %d both passed a unique id "
                    "(exactly one of them passes it, the others pass NULL)",
                    me, root, other);
        }
        res = ncclInvalidUsage;
        goto out;
    }
    pthread_mutex_lock(&parent->lock);
    if (parent->grow_pending &&
        memcmp(&parent->grow_id, &all[root].id, sizeof(ncclUniqueId)) == 0) {
        parent->grow_pending = 0; /* consumed: ncclCommGetUniqueId may make another */
    }
    pthread_mutex_unlock(&parent->lock);
    BR_INFO(NCCL_INIT,
            "ncclCommGrow: rank %d joins a communicator of %d ranks (%d new) with "
            "the id of rank %d",
            me, nranks, nranks - n, root);
    res = child_init(parent, &all[root].id, nranks, me, config, newcomm_p);
out:
    free(all);
    return res;
}
