/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The direct path of the CUDA executor: a unit of collectives whose ranks are all on one
 * GPU runs on the direct kernel (core/device/dev_direct.h), one launch per collective that
 * reads every rank's input in place and writes every output. exec_cuda.c decides and
 * launches the unit; this file says whether it fits and fills the kernel's arguments. It
 * is also the only device path of a clique for deterministic reductions and fp32
 * accumulation (br_op_owner_fold): its fold is the host's rank-order fold, bit for bit.
 */
#include <string.h>

#include "device.h"
#include "exec_cuda_int.h"
#include "util.h"

/* Can the unit run on the direct kernel? Every rank on one device, calls that are the
 * direct kernel's collectives and agree across ranks (those that do not go the FIFO path,
 * whose build says what is wrong), a PreMulSum scalar the same everywhere, and the same
 * BRAID_OPT_DETERMINISTIC / _ACCUMULATE_FP32 on every rank. */
int br_cuda_direct_fits(const br_clique_t *cl, const char *in_unit)
{
    if (cl->ndevs != 1 || cl->nranks > BR_DEV_DIRECT_MAX || BR_PARAM_INT(CUDA_DIRECT) == 0) {
        return 0;
    }
    const br_cuda_dep_t *d0 = br_cuda_head((br_clique_t *)cl, 0);
    for (int r = 0; r < cl->nranks; r++) {
        const br_cuda_dep_t *d = br_cuda_head((br_clique_t *)cl, r);
        if (!in_unit[r] || d->nops != d0->nops) {
            return 0;
        }
        for (int i = 0; i < d->nops; i++) {
            const br_op_t *a = &d0->ops[i], *b = &d->ops[i];
            switch (b->func) {
            case BR_FUNC_ALLREDUCE:
            case BR_FUNC_BROADCAST:
            case BR_FUNC_REDUCE:
            case BR_FUNC_ALLGATHER:
            case BR_FUNC_REDUCESCATTER: break;
            default: return 0;
            }
            if (b->func != a->func || b->count != a->count || b->type != a->type ||
                b->root != a->root || b->redop.kind != a->redop.kind || b->det != a->det ||
                b->acc32 != a->acc32 ||
                b->redop.scalar_dev != NULL || b->redop.scalar_f != a->redop.scalar_f ||
                b->redop.scalar_i != a->redop.scalar_i || b->redop.divisor != a->redop.divisor) {
                return 0;
            }
        }
    }
    return 1;
}

/* Does the unit hold a deterministic or fp32-accumulating reduction (br_op_owner_fold),
 * which only the direct kernel folds as the host does? */
int br_cuda_unit_folds(const br_clique_t *cl, const char *in_unit)
{
    for (int r = 0; r < cl->nranks; r++) {
        if (!in_unit[r]) {
            continue;
        }
        const br_cuda_dep_t *d = br_cuda_head((br_clique_t *)cl, r);
        for (int i = 0; i < d->nops; i++) {
            if (br_op_owner_fold(&d->ops[i], cl->nranks)) {
                return 1;
            }
        }
    }
    return 0;
}

/* One collective of the unit (index i of every rank's deposit) on the direct kernel. */
static ncclResult_t direct_launch(br_clique_t *cl, int i, int rank)
{
    const br_cuda_t *cu = br_cuda(NULL);
    const br_cuda_dev_t *dv = &cl->devs[0];
    const br_op_t *op = &br_cuda_head(cl, 0)->ops[i];
    br_dev_direct_t D;
    memset(&D, 0, sizeof(D));
    D.bytes = op->count * br_type_size(op->type);
    D.nranks = (uint32_t)cl->nranks;
    D.func = (uint32_t)op->func;
    D.root = (uint32_t)(op->root >= 0 ? op->root : 0);
    D.type = (uint32_t)op->type;
    D.red = (uint32_t)op->redop.kind;
    D.scalar_f = op->redop.scalar_f;
    D.scalar_i = op->redop.scalar_i;
    D.divisor = op->redop.divisor;
    /* Deterministic reductions fold in rank order here anyway; fp32 accumulation of the
     * narrow floats is the kernel's acc32 fold (br_op_owner_fold's calls need nothing else). */
    D.acc32 = br_op_owner_fold(op, cl->nranks) && op->acc32 &&
              br_dev_acc32_applies(D.type, D.red);
    uintptr_t bits = (uintptr_t)D.bytes;
    for (int r = 0; r < cl->nranks; r++) {
        const br_op_t *o = &br_cuda_head(cl, r)->ops[i];
        D.in[r] = (const char *)o->sendbuff;
        D.out[r] = (char *)o->recvbuff;
        bits |= (uintptr_t)o->sendbuff | (uintptr_t)o->recvbuff;
    }
    D.aligned = (bits & 15) == 0;
    uint64_t work = (D.bytes + 15) / 16 * br_dev_direct_segments(&D);
    if (work == 0) {
        return ncclSuccess;
    }
    /* Enough blocks to keep every SM's memory pipe full; the grid strides over the rest. */
    uint64_t blocks = (work + BR_DEV_NTHREADS - 1) / BR_DEV_NTHREADS;
    uint64_t most = (uint64_t)(dv->sms > 0 ? dv->sms : 1) * 4;
    blocks = blocks > most ? most : blocks;
    void *params[1] = {&D};
    return br_cuda_check(cu->LaunchKernel(dv->direct_fn, (unsigned)blocks, 1, 1, BR_DEV_NTHREADS,
                                          1, 1, 0, dv->stream, params, NULL),
                         "cuLaunchKernel (direct)", rank);
}

/* The unit on the direct kernel: after every rank's call was reached on its stream, one
 * launch per collective, then the ranks' done events. */
ncclResult_t br_cuda_direct_unit(br_clique_t *cl, const char *in_unit, int rank)
{
    const br_cuda_t *cu = br_cuda(NULL);
    br_cuda_dev_t *dv = &cl->devs[0];
    br_cuda_desc_t *desc = NULL;

    BR_CHECK(br_cuda_desc_get(cl, 0, rank, &desc));
    BR_CHECK(br_cuda_check(cu->CtxSetCurrent(dv->ctx), "cuCtxSetCurrent", rank));
    for (int r = 0; r < cl->nranks; r++) {
        const br_cuda_rank_t *q = &cl->rank[r];
        BR_CHECK(br_cuda_check(
            cu->StreamWaitEvent(dv->stream, q->arrive[q->launched % BR_CUDA_QUEUE], 0),
            "cuStreamWaitEvent", rank));
    }
    for (int i = 0; i < br_cuda_head(cl, 0)->nops; i++) {
        BR_CHECK(direct_launch(cl, i, rank));
    }
    return br_cuda_unit_done_events(cl, in_unit, rank, desc);
}
