/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The per-call configuration of the nccl*Config collectives (ncclCollConfig_t, NCCL 2.31
 * and 2.32): checked against NCCL's size/magic/version handshake, then turned into the
 * op's own selection (algorithms from algSelection, protocols from Braid's vendor option
 * BRAID_OPT_PROTO, channel bounds from minCTAs/maxCTAs), its profiler tag, and how it
 * reduces (BRAID_OPT_DETERMINISTIC, BRAID_OPT_ACCUMULATE_FP32). The plan
 * (plan_tune.c, plan_device.c) honours the selection or refuses the call naming it.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "braid.h"
#include "util.h"

/* A list longer than this is taken for a circular one. */
#define EXT_MAX 64

/* Size of NCCL 2.31's ncclCollConfig_t (up to userProfilerTag): the smallest accepted. */
#define COLLCFG_MIN_SIZE offsetof(ncclCollConfig_t, launchCompletionEvent)

#define CFG_FAIL(comm, fn, res, ...)                                                               \
    do {                                                                                           \
        char what_[512];                                                                           \
        snprintf(what_, sizeof(what_), __VA_ARGS__);                                               \
        BR_WARN(NCCL_COLL, "rank %d (host %s): %s: config: %s", (comm)->rank, br_host_name(),      \
                (fn), what_);                                                                      \
        return (res);                                                                              \
    } while (0)

/* "COLLNET_DIRECT", "CollNetDirect" and "collnetdirect" name the same algorithm. */
static int name_matches(const char *tok, size_t len, const char *name)
{
    size_t j = 0;
    for (size_t i = 0; i < len; i++) {
        if (tok[i] == '_') {
            continue;
        }
        if (name[j] == '\0' || tolower((unsigned char)tok[i]) != tolower((unsigned char)name[j])) {
            return 0;
        }
        j++;
    }
    return name[j] == '\0';
}

/*
 * A comma list of names ("Ring,Tree", "^LL") as a mask over n ids named by name_of. An
 * unknown name fails when force is set and is skipped otherwise; *unknown_p gets the
 * first one. Returns 0, or -1 for an unknown name with force.
 */
static int parse_list(const char *list, int n, const char *(*name_of)(int), int force,
                      uint32_t *mask_p, char *unknown, size_t ulen)
{
    int neg = list[0] == '^';
    uint32_t sel = 0;
    const char *p = list + neg;

    unknown[0] = '\0';
    while (*p != '\0') {
        while (*p == ' ' || *p == ',') {
            p++;
        }
        size_t len = strcspn(p, ", ");
        if (len == 0) {
            break;
        }
        int found = -1;
        for (int i = 0; i < n && found < 0; i++) {
            found = name_matches(p, len, name_of(i)) ? i : -1;
        }
        if (found < 0) {
            if (unknown[0] == '\0') {
                snprintf(unknown, ulen, "%.*s", (int)len, p);
            }
            if (force) {
                return -1;
            }
        } else {
            sel |= 1u << found;
        }
        p += len;
    }
    uint32_t all = (1u << n) - 1;       /* n is at most BR_NUM_ALGOS */
    *mask_p = neg ? (all & ~sel) : sel; /* 0: any */
    return *mask_p == 0 && neg && force ? -1 : 0;
}

/* The vendor list: at most EXT_MAX entries, no key twice (a circular list repeats its
 * first key), then Braid's own entries applied to op. */
static ncclResult_t apply_ext(ncclComm_t comm, const char *fn, const ncclConfigExt_t *ext,
                              br_op_t *op)
{
    const ncclConfigExt_t *seen[EXT_MAX];
    int n = 0;

    for (const ncclConfigExt_t *e = ext; e != NULL; e = e->next) {
        if (n == EXT_MAX) {
            CFG_FAIL(comm, fn, ncclInvalidArgument,
                     "the ext list has more than %d entries (is it circular?)", EXT_MAX);
        }
        for (int i = 0; i < n; i++) {
            if (seen[i]->key.vendorId == e->key.vendorId &&
                seen[i]->key.optionId == e->key.optionId) {
                CFG_FAIL(comm, fn, ncclInvalidArgument,
                         "the ext list holds key (vendor 0x%x, option %d) twice", e->key.vendorId,
                         e->key.optionId);
            }
        }
        seen[n++] = e;
    }
    /* The list is sound: now Braid's own entries. */
    for (int k = 0; k < n; k++) {
        const ncclConfigExt_t *e = seen[k];
        if (e->key.vendorId != BRAID_VENDOR_ID) {
            continue; /* another library's option */
        }
        switch (e->key.optionId) {
        case BRAID_OPT_PROTO: {
            char unknown[64];
            if (e->val.s == NULL || parse_list(e->val.s, BR_NUM_PROTOS, br_proto_name, 1,
                                               &op->call_protos, unknown, sizeof(unknown)) != 0) {
                CFG_FAIL(comm, fn, ncclInvalidArgument,
                         "BRAID_OPT_PROTO '%s' is not a list of LL, LL128 and Simple%s%s",
                         e->val.s != NULL ? e->val.s : "(null)", unknown[0] ? ": unknown " : "",
                         unknown);
            }
            break;
        }
        case BRAID_OPT_DETERMINISTIC:
        case BRAID_OPT_ACCUMULATE_FP32: {
            int det = e->key.optionId == BRAID_OPT_DETERMINISTIC;
            if (e->val.i != 0 && e->val.i != 1) {
                CFG_FAIL(comm, fn, ncclInvalidArgument, "%s is %d; it takes 0 (off) or 1 (on)",
                         det ? "BRAID_OPT_DETERMINISTIC" : "BRAID_OPT_ACCUMULATE_FP32", e->val.i);
            }
            /* The call's own choice wins over BRAID_DETERMINISTIC / BRAID_ACCUMULATE. */
            *(det ? &op->det : &op->acc32) = (int)e->val.i;
            break;
        }
        default:
            CFG_FAIL(comm, fn, ncclInvalidArgument,
                     "unknown Braid option %d (braid.h lists BRAID_OPT_*)", e->key.optionId);
        }
    }
    return ncclSuccess;
}

ncclResult_t br_api_collcfg_apply(ncclComm_t comm, const char *fn, int has_algos,
                                  const ncclCollConfig_t *in, br_op_t *op)
{
    ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;

    if (in == NULL) {
        return ncclSuccess; /* the plain call */
    }
    if (in->magic != NCCL_API_MAGIC) {
        CFG_FAIL(comm, fn, ncclInvalidArgument,
                 "magic is 0x%x, not 0x%x: initialise the config with NCCL_COLLCONFIG_INITIALIZER",
                 in->magic, NCCL_API_MAGIC);
    }
    if (in->size < COLLCFG_MIN_SIZE || in->size > 4096 || in->version < NCCL_VERSION(2, 31, 0)) {
        CFG_FAIL(comm, fn, ncclInvalidArgument,
                 "size %zu / version %u is not an ncclCollConfig_t of NCCL 2.31 or later", in->size,
                 in->version);
    }
    memcpy(&c, in, in->size < sizeof(c) ? in->size : sizeof(c));
    if (c.minCTAs != NCCL_CONFIG_UNDEF_INT && c.minCTAs < 1) {
        CFG_FAIL(comm, fn, ncclInvalidArgument, "minCTAs %d is not positive", c.minCTAs);
    }
    if (c.maxCTAs != NCCL_CONFIG_UNDEF_INT &&
        (c.maxCTAs < 1 || (c.minCTAs != NCCL_CONFIG_UNDEF_INT && c.minCTAs > c.maxCTAs))) {
        CFG_FAIL(comm, fn, ncclInvalidArgument, "maxCTAs %d is not positive or below minCTAs %d",
                 c.maxCTAs, c.minCTAs);
    }
    if (c.launchCompletionEvent != NULL) {
        CFG_FAIL(comm, fn, ncclInvalidUsage,
                 "launchCompletionEvent is not implemented by Braid "
                 "(leave it NULL)");
    }
    op->call_force = c.forceAlgSelection != 0;
    op->call_min_ch = c.minCTAs != NCCL_CONFIG_UNDEF_INT ? c.minCTAs : 0;
    op->call_max_ch = c.maxCTAs != NCCL_CONFIG_UNDEF_INT ? c.maxCTAs : 0;
    op->user_tag = c.userProfilerTag;
    if (c.algSelection != NULL && c.algSelection[0] != '\0') {
        char unknown[64];
        if (!has_algos) {
            if (op->call_force) {
                CFG_FAIL(comm, fn, ncclInvalidUsage,
                         "algSelection '%s': this call runs as sends and receives and has no "
                         "algorithm to select (set forceAlgSelection to 0 to ignore it)",
                         c.algSelection);
            }
        } else if (parse_list(c.algSelection, BR_NUM_ALGOS, br_algo_name, op->call_force,
                              &op->call_algos, unknown, sizeof(unknown)) != 0) {
            CFG_FAIL(comm, fn, ncclInvalidArgument,
                     "algSelection '%s' names %s%s; known: Ring, Tree, CollNetDirect, "
                     "CollNetChain, NVLS, NVLSTree, PAT, OneShot, DirectRead, RingOneShot "
                     "(set forceAlgSelection to 0 to ignore unknown names)",
                     c.algSelection, unknown[0] ? "an unknown algorithm " : "no algorithm",
                     unknown);
        }
    }
    BR_CHECK(apply_ext(comm, fn, c.ext, op));
    if (!has_algos) {
        op->call_algos = op->call_protos = 0; /* sends and receives have no protocol choice */
    }
    return ncclSuccess;
}
