/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cutting operations into channels. Deterministic from the call's arguments alone.
 */
#include "plan.h"

/* Below this many bytes per channel a second channel costs more than it brings. */
#define BR_PLAN_MIN_CHANNEL_BYTES (256 * 1024)

int br_plan_nchannels(size_t bytes, int nchannels)
{
    size_t n = bytes / BR_PLAN_MIN_CHANNEL_BYTES;
    if (n < 1) {
        n = 1;
    }
    return n < (size_t)nchannels ? (int)n : nchannels;
}

void br_plan_channel_range(size_t units, int nch, int c, size_t *lo_p, size_t *hi_p)
{
    size_t part = (units + (size_t)nch - 1) / (size_t)nch;
    /* Keep channel boundaries on 64-unit multiples so slices stay aligned. */
    part = (part + 63) & ~(size_t)63;
    size_t lo = part * (size_t)c, hi = lo + part;
    if (lo > units) {
        lo = units;
    }
    if (hi > units) {
        hi = units;
    }
    *lo_p = lo;
    *hi_p = hi;
}
