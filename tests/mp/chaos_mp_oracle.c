/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The chaos oracle (chaos_mp.c's comment states its rules): reads every rank's outcome
 * from the iteration's shared memory once the ranks are done and judges it against the
 * scenario: no rank hung or died of a signal, no wrong result, no step completed that
 * needed the victim after its fault struck (step_needs_all says which steps do), every
 * error names the victim, and a mismatch is noticed. Single-threaded, after the ranks.
 */
#include <stdio.h>

#include <nccl.h>

#include "brt_coll.h"
#include "brt_launch.h"
#include "chaos_mp.h"

/* Does step si (0: init) of rank r need every rank? A call of count 0 returns at once
 * without a message (as in NCCL), and a rank that only sends (a Broadcast or Scatter root,
 * a Gather non-root) may finish once its data is out, as may a Reduce non-root (it may
 * wait for ranks further from the root, which the oracle does not trace); the V collectives
 * exchange descriptors at any count. */
static int step_needs_all(const ch_scn_t *s, int si, int r)
{
    if (si == 0 || si > s->nsteps) {
        return 1;
    }
    const ch_step_t *p = &s->steps[si - 1];
    if (p->kind != CH_STEP_CASE) {
        return 1;
    }
    switch (p->c.func) {
    case BRT_BROADCAST:
    case BRT_BCAST:
        /* On the node arena's OneShot path every rank copies from the root alone (the
         * root's check of the others ends at its next call or destroy): only a dead root
         * keeps the others from completing. */
        if (r == p->c.root || s->victim != p->c.root) {
            return 0;
        }
        break;
    case BRT_SCATTER:
        if (r == p->c.root) {
            return 0;
        }
        break;
    case BRT_SENDRECV:
        if (p->c.root != BRT_SHIFT_ALL) {
            /* A ring shift: rank r sends to r + shift and receives from r - shift only (a
             * shift of the rank count: from itself); a send may finish without its
             * receiver, so only a dead sender to r keeps r from completing. */
            int from = ((r - p->c.root) % s->nranks + s->nranks) % s->nranks;
            if (from != s->victim || from == r) {
                return 0;
            }
        }
        break;
    case BRT_GATHER:
    case BRT_REDUCE: /* data flows to the root only: a non-root never waits for it */
        if (r != p->c.root) {
            return 0;
        }
        break;
    default: break;
    }
    return p->c.count > 0;
}

/* Could an earlier step than si have made the p2p connection src -> dst (a send of src
 * to dst)? Sends and receives connect a pair the first time they move data (any count for
 * the V collectives, which exchange a descriptor per pair); a Send/Recv step counts as
 * connecting its pairs whatever their counts, which can only excuse more. */
static int connected_before(const ch_scn_t *s, int si, int src, int dst)
{
    for (int i = 0; i < si - 1; i++) {
        const ch_step_t *p = &s->steps[i];
        const brt_case_t *c = &p->c;
        if (p->kind != CH_STEP_CASE) {
            return 1;
        }
        if (c->count == 0) {
            continue;
        }
        if (c->func == BRT_ALLTOALL || (c->func == BRT_GATHER && dst == c->root) ||
            (c->func == BRT_SCATTER && src == c->root) ||
            (c->func == BRT_SENDRECV &&
             (c->root == BRT_SHIFT_ALL || (src + c->root) % s->nranks == dst))) {
            return 1;
        }
    }
    return 0;
}

/* A mismatch no rank is promised to see: every rank gets the right result of its own call
 * and nothing it waits for is missing.
 *   Gather, the victim the others' root but in a Gather of another root: every rank is a
 *     non-root and only sends (the others to the victim, the victim to the root it
 *     believes in); nobody receives. Seed 20758.
 *   Scatter, the victim in one of its own root: it sends to every rank and receives
 *     nothing, the others receive the real root's block as they should, and the real
 *     root's block for the victim and the victim's blocks are never received. Seed 23713.
 *   In both, where a connection for a send nobody receives is missing, the sender waits
 *     for a receive end that will not come and connection setup names both calls
 *     (br_conn_purpose_t); where every one exists already (an earlier step made them),
 *     each such send finishes into its receiver's buffer, as a send may in NCCL:
 *     docs/user-guide.md, "Once the connections exist, such calls are data on open
 *     connections".
 *   Reduce, the victim the others' root but in a Reduce of another root: every rank is a
 *     non-root, and "a Reduce's non-root may return success" (docs/user-guide.md, "When
 *     something goes wrong"): on the node arena's OneShot path each publishes its input
 *     and returns, and only a root reads (on a Ring some non-root receives and notices,
 *     but that depends on the path the plan picks). Seeds 21337, 30028. */
static int mismatch_unseen(const ch_scn_t *s)
{
    const ch_step_t *p = &s->steps[s->mstep - 1];
    int r = p->c.root, v = p->victim.root, x = s->victim;

    if (p->kind != CH_STEP_CASE || s->mkind != CH_MM_ROOT || v == r) {
        return 0;
    }
    switch (p->c.func) {
    case BRT_REDUCE: return x == r;
    case BRT_GATHER: /* sends to the victim, and the victim's to v */
        if (x != r || !connected_before(s, s->mstep, x, v)) {
            return 0;
        }
        for (int q = 0; q < s->nranks; q++) {
            if (q != x && !connected_before(s, s->mstep, q, x)) {
                return 0;
            }
        }
        return 1;
    case BRT_SCATTER: /* the root's send to the victim, and the victim's sends */
        if (x != v || !connected_before(s, s->mstep, r, x)) {
            return 0;
        }
        for (int q = 0; q < s->nranks; q++) {
            if (q != x && !connected_before(s, s->mstep, x, q)) {
                return 0;
            }
        }
        return 1;
    default: return 0;
    }
}

int judge(const ch_scn_t *s, const char *launch_err, FILE *f)
{
    int bad = 0, any_fail = 0;
    int bound = s->nsteps + 2; /* steps a survivor may complete */
    const ch_out_t *vo = &g_sh->out[s->victim];

    if (launch_err[0]) {
        fprintf(f, "  %s", launch_err);
        bad = 1;
    }
    if (s->fault == CH_KILL) {
        bound = vo->entered;
    } else if (s->fault == CH_ABORT || s->fault == CH_REVOKE) {
        bound = vo->fault_done ? vo->fault_entered : s->nsteps + 2;
    }
    for (int r = 0; r < s->nranks; r++) {
        const ch_out_t *o = &g_sh->out[r];
        int survivor = !(r == s->victim && s->fault == CH_KILL);
        int failed = o->failed_at >= 0;
        if (!survivor) {
            continue;
        }
        if (!o->finished) {
            fprintf(f, "  rank %d did not finish (entered %d steps, completed %d)\n", r, o->entered,
                    o->completed);
            bad = 1;
            continue;
        }
        if (o->wrong) {
            fprintf(f, "  rank %d: %s\n", r, o->wrong_msg);
            bad = 1;
        }
        any_fail |= failed || o->destroy_res != ncclSuccess;
        if (s->fault == CH_NONE) {
            if (failed || o->destroy_res != ncclSuccess) {
                fprintf(f, "  rank %d failed with no fault: %s%s\n", r, o->err, o->destroy_err);
                bad = 1;
            }
            continue;
        }
        if (r == s->victim && s->fault != CH_MISMATCH) {
            continue; /* its own abort or revoke: any error of its own */
        }
        for (int si = bound; s->fault != CH_MISMATCH && si < o->completed; si++) {
            if (step_needs_all(s, si, r)) {
                fprintf(f,
                        "  rank %d completed step %d (0 is init) but the victim had entered "
                        "only %d steps when the fault struck\n",
                        r, si, bound);
                bad = 1;
                break;
            }
        }
        if (failed && s->layout == CH_INITALL && s->fault == CH_ABORT &&
            brt_text_has(o->err, "not a live communicator")) {
            /* One thread drives every rank: it used the victim's handle after the abort
             * (the test's doing; the library can only say the handle is dead). */
            continue;
        }
        if (failed && !brt_text_names_rank(o->err, s->victim)) {
            fprintf(f, "  rank %d failed at step %d without naming rank %d: %s\n", r, o->failed_at,
                    s->victim, o->err);
            bad = 1;
        }
    }
    if (s->fault == CH_MISMATCH && !any_fail && !mismatch_unseen(s)) {
        fprintf(f, "  the mismatch went unnoticed: every rank succeeded\n");
        bad = 1;
    }
    return bad;
}

void report_ranks(const ch_scn_t *s, FILE *f)
{
    for (int r = 0; r < s->nranks; r++) {
        const ch_out_t *o = &g_sh->out[r];
        fprintf(f, "  rank %d: entered %d completed %d failed_at %d res %d destroy %d%s%s\n", r,
                o->entered, o->completed, o->failed_at, o->res, o->destroy_res,
                o->err[0] ? "\n    error: " : "", o->err);
        if (o->destroy_err[0]) {
            fprintf(f, "    destroy: %s\n", o->destroy_err);
        }
    }
}
