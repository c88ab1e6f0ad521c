/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The connection FIFO shared by the transports, the proxy and the executor: BR_STEPS
 * slots and a control block with the sender's tail and the receiver's head counters.
 * Counters only grow; slot i of step s is s % BR_STEPS. A writer fills a slot, then
 * publishes it with a release store of the counter; the reader acquires the counter
 * before touching the slot.
 */
#ifndef BR_COMMON_FIFO_H_
#define BR_COMMON_FIFO_H_

#include <stdatomic.h>
#include <stdint.h>

#define BR_STEPS 8 /* NCCL_STEPS: slots per connection */

/* Which call a slot's data belongs to: lets the receiver detect mismatched calls. */
typedef struct {
    uint64_t bytes;  /* payload bytes in the slot */
    uint64_t seq;    /* collective sequence number (p2p: per-peer message number) + 1; 0 = unknown */
    uint64_t count;  /* element count of the call */
    uint32_t func;   /* br_func_t of the call */
    uint32_t type;   /* data type | (reduction kind << 8) | (root << 16) */
} br_slot_desc_t;

/* On net connections each message carries its slot descriptor after the payload; the
 * slot stride leaves this much room for it. */
#define BR_NET_DESC_ROOM 64

/* The shared control block; each counter on its own cache line. */
typedef struct {
    _Alignas(64) _Atomic uint64_t tail; /* written by the sender (or the receiving proxy) */
    _Alignas(64) _Atomic uint64_t head; /* written by the receiver (or the sending proxy) */
    _Alignas(64) br_slot_desc_t slot[BR_STEPS];
} br_fifo_ctrl_t;

#endif /* BR_COMMON_FIFO_H_ */
