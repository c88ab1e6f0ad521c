/* SPDX-License-Identifier: Apache-2.0 */
/* The routing decision of a call (api_route.h). */
#include <stdio.h>

#include "api_route.h"

static void describe(const br_route_buf_t *b, char *out, size_t len)
{
    if (b->kind == BR_MEM_HOST) {
        snprintf(out, len, "%s %p is host memory", b->name, b->ptr);
    } else {
        snprintf(out, len, "%s %p is %s of device %d", b->name, b->ptr, br_mem_kind_name(b->kind),
                 b->device);
    }
}

int br_route_decide(const br_route_buf_t *bufs, int n, int comm_device, const char *no_cuda_why,
                    char *msg, size_t len)
{
    const br_route_buf_t *host = NULL, *dev = NULL;
    int nmanaged = 0, nused = 0;
    char a[160], b[160];

    for (int i = 0; i < n; i++) {
        const br_route_buf_t *x = &bufs[i];
        if (x->ptr == NULL) {
            continue;
        }
        nused++;
        if (x->kind == BR_MEM_HOST) {
            host = host != NULL ? host : x;
        } else if (x->kind == BR_MEM_MANAGED) {
            nmanaged++;
        } else {
            dev = dev != NULL ? dev : x;
            if (comm_device >= 0 && x->device != comm_device) {
                describe(x, a, sizeof(a));
                snprintf(msg, len,
                         "%s, but the communicator is bound to device %d (the current device "
                         "when it was created)",
                         a, comm_device);
                return BR_ROUTE_REFUSED;
            }
        }
    }
    if (host != NULL && dev != NULL) {
        describe(host, a, sizeof(a));
        describe(dev, b, sizeof(b));
        snprintf(msg, len,
                 "%s but %s: a call's buffers must all be device memory of the communicator's "
                 "device or all host memory",
                 a, b);
        return BR_ROUTE_REFUSED;
    }
    if (dev != NULL) {
        if (comm_device < 0) {
            describe(dev, a, sizeof(a));
            snprintf(msg, len, "%s, but this communicator has no CUDA device: %s", a,
                     no_cuda_why != NULL ? no_cuda_why : "CUDA is not available");
            return BR_ROUTE_REFUSED;
        }
        return BR_ROUTE_DEVICE;
    }
    if (host != NULL) {
        return BR_ROUTE_HOST;
    }
    if (nused == 0) {
        /* Nothing to move (count 0): the communicator's own executor, so that the call is
         * ordered on its stream like any other. */
        return comm_device >= 0 ? BR_ROUTE_DEVICE : BR_ROUTE_HOST;
    }
    /* Only managed memory. */
    (void)nmanaged;
    return comm_device >= 0 ? BR_ROUTE_DEVICE : BR_ROUTE_HOST;
}
