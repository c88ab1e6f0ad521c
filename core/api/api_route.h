/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which executor runs a call, decided by where its buffers are: host memory goes to the
 * host executor, device memory of the communicator's device to the CUDA executor. Anything
 * else (host and device buffers mixed, another device's memory, device memory where the
 * communicator has no CUDA) is refused with a message naming the argument and what it is.
 * The decision is a pure function of the classified buffers, so it is tested without a
 * GPU (tests/unit/route).
 */
#ifndef BR_API_ROUTE_H_
#define BR_API_ROUTE_H_

#include <stddef.h>

#include "util_cuda.h"

/* One buffer argument of a call, classified. */
typedef struct {
    const char *name; /* "sendbuff", "recvbuff" */
    const void *ptr;  /* NULL: not given / not used by this rank (ignored) */
    br_mem_kind_t kind;
    int device; /* its device (DEVICE, MANAGED) */
} br_route_buf_t;

#define BR_ROUTE_HOST 0
#define BR_ROUTE_DEVICE 1
#define BR_ROUTE_REFUSED (-1)

/*
 * Decide for a call whose buffers are bufs[0..n). comm_device is the communicator's CUDA
 * device, or -1 when it has none; then no_cuda_why says why (shown in the message).
 * Returns BR_ROUTE_HOST, BR_ROUTE_DEVICE, or BR_ROUTE_REFUSED with the reason in msg.
 * Managed memory goes where the other buffers go, and to the device when every buffer is
 * managed and the communicator has a device (the host can read it too, slowly). A call
 * with no buffer in use (count 0) goes to the device when the communicator has one.
 */
int br_route_decide(const br_route_buf_t *bufs, int n, int comm_device, const char *no_cuda_why,
                    char *msg, size_t len);

#endif /* BR_API_ROUTE_H_ */
