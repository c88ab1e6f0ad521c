/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The connection FIFO and its two protocols, shared by the transports, the proxy and
 * every executor. A connection has BR_STEPS slots and a control block with the sender's
 * `tail` (slots filled) and the receiver's `head` (slots freed). Counters only grow;
 * step s uses slot s % BR_STEPS. One step counter serves both protocols, so operations
 * with different protocols follow each other on one connection.
 *
 * Simple: the payload goes into the slot as it is; the sender publishes it with a release
 * store of tail, and the receiver acquires tail before reading the slot.
 *
 * LL (low latency): the payload travels as 8-byte lines, 4 bytes of data and a 4-byte flag
 * each, every line written with one 8-byte store (host byte order: data in the low half). The flag says which step the line
 * belongs to, so the receiver polls the data's own cache lines instead of a separate
 * counter: one line handoff per hop instead of two. Where the receiver's memory is
 * written by the sender (p2p, shm) the lines live in a separate LL region and are
 * trusted by their flags; where a network plugin writes them (net) they land in the
 * Simple slot and are read after tail, their flags checked. The sender still advances
 * tail after the lines (Simple readers of later steps and the network proxy count on it).
 * Flags are unique within an epoch of 2^30 steps; the first use of a slot in each epoch
 * clears the slot, so a line left from an older epoch never looks current.
 */
#ifndef BR_COMMON_FIFO_H_
#define BR_COMMON_FIFO_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define BR_STEPS 8 /* NCCL_STEPS: slots per connection */

/* Which call a slot's data belongs to: lets the receiver detect mismatched calls. */
typedef struct {
    uint64_t bytes; /* bytes in the slot as sent (LL: lines x 8) */
    uint64_t seq;   /* collective sequence number (p2p: per-peer message number) + 1; 0 = unknown */
    uint64_t count; /* element count of the call */
    uint32_t func;  /* br_func_t | algorithm << 8 | protocol << 16 of the call */
    uint32_t type;  /* data type | (reduction kind << 8) | (root << 16) */
} br_slot_desc_t;

/* On net connections each message carries its slot descriptor after the payload; the
 * slot stride leaves this much room for it. */
#define BR_NET_DESC_ROOM 64

/* With failover on, a net sender also copies each step of up to BR_NET_KEEP_BYTES into a
 * ring of BR_NET_KEEP_STEPS entries beside its FIFO (proxy.c), so that the slot goes back
 * to the executor once sent, not once the receiver confirmed it: a failover resends such
 * steps from the ring. The wire copy of the descriptor says so with BR_NET_DESC_KEPT in
 * `func` (the receiver clears it), and the receiver then confirms every
 * BR_NET_KEEP_STEPS / 2 steps instead of every BR_STEPS / 2 (proxy_link.c). */
#define BR_NET_KEEP_STEPS 32
#define BR_NET_KEEP_BYTES 1024
#define BR_NET_KEEP_STRIDE (BR_NET_KEEP_BYTES + BR_NET_DESC_ROOM)
#define BR_NET_DESC_KEPT (1u << 31)

/* The shared control block; each counter on its own cache line. */
typedef struct {
    _Alignas(64) _Atomic uint64_t tail; /* written by the sender (or the receiving proxy) */
    _Alignas(64) _Atomic uint64_t head; /* written by the receiver (or the sending proxy) */
    _Alignas(64) br_slot_desc_t slot[BR_STEPS];
} br_fifo_ctrl_t;

/* ---- Simple ---- */

/* Receiver: has step `step` been filled? Acquire pairs with the sender's release of tail. */
static inline int br_fifo_filled(const br_fifo_ctrl_t *ctrl, uint64_t step)
{
    return atomic_load_explicit(&ctrl->tail, memory_order_acquire) > step;
}

/* Sender: is the slot of step `step` free? Acquire pairs with the receiver's release of
 * head: it finished reading what the slot held. */
static inline int br_fifo_free(const br_fifo_ctrl_t *ctrl, uint64_t step)
{
    return atomic_load_explicit(&ctrl->head, memory_order_acquire) + BR_STEPS > step;
}

/* Sender: publish step `step` (its data and descriptor are written). */
static inline void br_fifo_post_send(br_fifo_ctrl_t *ctrl, uint64_t step, const br_slot_desc_t *d)
{
    ctrl->slot[step % BR_STEPS] = *d;
    /* Release: the slot's data and descriptor are visible before the new tail. */
    atomic_store_explicit(&ctrl->tail, step + 1, memory_order_release);
}

/* Sender: publish step `step` whose descriptor is already in place (LL writes it before
 * the lines, so that a reader of the first line may read it). */
static inline void br_fifo_post_tail(br_fifo_ctrl_t *ctrl, uint64_t step)
{
    /* Release: the slot's data and descriptor are visible before the new tail. */
    atomic_store_explicit(&ctrl->tail, step + 1, memory_order_release);
}

/* Receiver: step `step` is consumed; the sender may reuse its slot. */
static inline void br_fifo_post_recv(br_fifo_ctrl_t *ctrl, uint64_t step)
{
    /* Release: our reads of the slot are done before the sender may overwrite it. */
    atomic_store_explicit(&ctrl->head, step + 1, memory_order_release);
}

/* ---- LL ---- */

#define BR_LL_LINE 8u                        /* bytes of one line */
#define BR_LL_DATA 4u                        /* data bytes per line */
#define BR_LL_EPOCH_MASK ((1ull << 30) - 1)  /* flags repeat after 2^30 steps */

/* Lines carrying `bytes` of data (a step with no data still sends one, so that it is
 * seen), and their size on the wire. */
static inline size_t br_ll_lines(size_t bytes)
{
    return bytes == 0 ? 1 : (bytes + BR_LL_DATA - 1) / BR_LL_DATA;
}

static inline size_t br_ll_wire_bytes(size_t bytes)
{
    return br_ll_lines(bytes) * BR_LL_LINE;
}

/* The flag of step `step`: never 0 (a cleared line), unique within an epoch. */
static inline uint32_t br_ll_flag(uint64_t step)
{
    return 1u + (uint32_t)(step & BR_LL_EPOCH_MASK);
}

/* Is `step` the first use of its slot in an epoch (clear the slot's lines first)? */
static inline int br_ll_epoch_start(uint64_t step)
{
    return (step & BR_LL_EPOCH_MASK) < BR_STEPS;
}

/* Line i of `bytes` of data at src, with `flag` (the last line may be partial; lines are
 * in host byte order: data in the low half). */
static inline uint64_t br_ll_line_of(const unsigned char *src, size_t bytes, size_t i,
                                     uint64_t flag)
{
    uint32_t data = 0;
    size_t at = i * BR_LL_DATA;
    memcpy(&data, src + at, bytes - at < BR_LL_DATA ? bytes - at : BR_LL_DATA);
    return flag | data;
}

/*
 * Sender: write `bytes` of `src` as lines of step `step` at `lines`, each one 8-byte
 * store. The first line is a release (a reader that acquires it sees the descriptor
 * written before the lines), then the middle lines as plain stores (no reader looks at
 * them before it has the last line; plain, the loop vectorises), then the last line, a
 * release, so a reader that acquires it sees every line.
 */
static inline void br_ll_pack(uint64_t *lines, const void *src, size_t bytes, uint64_t step)
{
    const unsigned char *s = (const unsigned char *)src;
    uint64_t flag = (uint64_t)br_ll_flag(step) << 32;
    size_t n = br_ll_lines(bytes);

    __atomic_store_n(&lines[0], br_ll_line_of(s, bytes, 0, flag), __ATOMIC_RELEASE);
    for (size_t i = 1; i + 1 < n; i++) { /* full lines: only the last may be partial */
        uint32_t data;
        memcpy(&data, s + i * BR_LL_DATA, BR_LL_DATA);
        lines[i] = flag | data;
    }
    if (n > 1) {
        __atomic_store_n(&lines[n - 1], br_ll_line_of(s, bytes, n - 1, flag), __ATOMIC_RELEASE);
    }
}

/* Receiver: does line i carry step `step`'s flag? (Acquire: once the last line does,
 * every line before it is complete.) */
static inline int br_ll_line_ready(const uint64_t *lines, size_t i, uint64_t step)
{
    return (uint32_t)(__atomic_load_n(&lines[i], __ATOMIC_ACQUIRE) >> 32) == br_ll_flag(step);
}

/*
 * Receiver, once the last line is acquired (or, on net links, tail): copy the data of
 * `bytes` worth of lines of step `step` to dst, checking every flag. Returns the index of
 * the first line with a wrong flag, or -1 when all are right.
 */
static inline long br_ll_unpack(void *dst, const uint64_t *lines, size_t bytes, uint64_t step)
{
    unsigned char *d = (unsigned char *)dst;
    uint32_t flag = br_ll_flag(step), bad = 0;
    size_t n = br_ll_lines(bytes), full = bytes / BR_LL_DATA;

    for (size_t i = 0; i < full; i++) {
        uint64_t v = lines[i];
        uint32_t data = (uint32_t)v;
        bad |= (uint32_t)(v >> 32) ^ flag;
        memcpy(d + i * BR_LL_DATA, &data, BR_LL_DATA);
    }
    if (full < n) {
        uint64_t v = lines[full];
        uint32_t data = (uint32_t)v;
        bad |= (uint32_t)(v >> 32) ^ flag;
        memcpy(d + full * BR_LL_DATA, &data, bytes - full * BR_LL_DATA);
    }
    for (size_t i = 0; bad != 0 && i < n; i++) { /* the rare case: say which line */
        if ((uint32_t)(lines[i] >> 32) != flag) {
            return (long)i;
        }
    }
    return -1;
}

#endif /* BR_COMMON_FIFO_H_ */
