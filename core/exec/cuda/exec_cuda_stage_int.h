/* SPDX-License-Identifier: Apache-2.0 */
/* exec module-private: the stager of a rank whose communicator spans several processes
 * (exec_cuda_stage.c: calls staged through pinned host memory; exec_cuda_ipc.c: the direct
 * path, GPU to GPU through buffers shared with CUDA IPC). */
#ifndef BR_EXEC_CUDA_STAGE_INT_H_
#define BR_EXEC_CUDA_STAGE_INT_H_

#include "exec_cuda_int.h"

#define STAGE_ALIGN 256               /* each buffer of a slot starts on this */

/* Where one call's data sits in its slot's staging memory. */
typedef struct {
    size_t in_off, in_bytes;   /* the inputs copied from the device (0 bytes: none) */
    size_t out_off, out_bytes; /* what the host executor writes, all of it */
    size_t back_bytes;         /* of which copied back to the device (0: none) */
    size_t scalar_off;         /* a device PreMulSum scalar, copied too (or SIZE_MAX) */
} stage_layout_t;

typedef struct {
    br_op_t *ops; /* as called: device buffers */
    stage_layout_t *lay;
    int nops, cap;
    char *mem; /* pinned staging */
    size_t mem_bytes;
    uint64_t net_id; /* mem in the comm's registered buffers (the net registers it once) */
    br_cu_event_t freed;  /* recorded after the outputs are copied out */
    br_cu_event_t staged; /* host_sync: recorded after the inputs are copied in */
    int used;            /* freed was recorded */
    uint64_t ticket;
} stage_slot_t;

#define BR_IPC_INFLIGHT 64 /* direct deposits whose completion the stager watches */
#define BR_IPC_INBOX 4096  /* bytes of an inbox's shared memory (BR_DEV_REDUCE_MAX_SRC words) */

/* A direct deposit in flight: its end on the stream, for the stager's watch. */
typedef struct {
    br_cu_event_t end;
    uint64_t gen;      /* the barrier count its last barrier reaches */
    uint64_t since_ns; /* when it was deposited */
    char what[96];     /* its first call, for messages */
} ipc_flight_t;

/* The direct path of one rank: every rank's staging buffer mapped (its own at [rank]),
 * and every rank's inbox: nranks 64-bit words in host shared memory (a POSIX shm object
 * each rank maps and registers with the driver), word q written by rank q's stream when it
 * passes a barrier. In host memory so that a failing rank's host can release its own
 * stream's barriers with plain stores: a stream operation to do it could wait in a
 * hardware queue behind the very stream it releases (CUDA_DEVICE_MAX_CONNECTIONS). */
typedef struct {
    int state;         /* 0 not known yet (set up when the communicator is made), 1 on, -1 off */
    size_t data_bytes; /* bytes of each rank's staging */
    br_cu_ptr_t mine;  /* this rank's staging (cuMemAlloc) */
    br_cu_ptr_t *peer; /* [nranks]: each rank's, mapped with cuIpcOpenMemHandle */
    uint64_t **inbox;      /* [nranks]: each rank's inbox, mapped here (host view) */
    br_cu_ptr_t *inbox_d;  /* [nranks]: the same, as the device sees it */
    int *pid;          /* [nranks]: the processes, for the dead-peer check */
    uint64_t gen;      /* barriers this rank's stream was given */
    br_cu_module_t mod;
    br_cu_function_t reduce_fn;
    int sms;
    ipc_flight_t flight[BR_IPC_INFLIGHT];
    uint64_t fl_next, fl_done; /* deposits given, and seen complete */
} ipc_state_t;

/* Staging a slot outgrew, kept until the communicator ends (exec_cuda_stage.c). */
typedef struct stage_retired {
    void *mem;
    struct stage_retired *next;
} stage_retired_t;

struct br_cuda_stage {
    br_exec_comm_t *ec;
    int device;
    br_cu_context_t ctx;
    br_cuda_stage_run_fn run; /* runs host operations on the communicator */
    void *run_arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int started, stop;
    stage_slot_t slot[BR_CUDA_QUEUE];
    stage_retired_t *retired;
    uint32_t *words; /* pinned, mapped: ready[QUEUE], then done[QUEUE] */
    br_cu_ptr_t words_d;
    uint64_t next;  /* tickets handed out */
    uint64_t taken; /* tickets the stager finished (ran, or released after a failure) */
    int failed;
    /* Calls complete on the host: a deposit waits on the host until its stream staged the
     * inputs (the slot's staged event), then writes ready itself; the wait waits on the
     * host for done before the outputs are copied back. No stream memory operation. */
    int host_sync;
    ipc_state_t ipc;
};

/* exec_cuda_stage.c: fail the communicator, release every waiting stream (staged slots
 * and the direct path's inbox). Caller holds st->mu. */
void br_stage_fail(br_cuda_stage_t *st, ncclResult_t res, const char *why);

/* exec_cuda_ipc.c */
/* May this communicator use the direct path at all (one host, one rank per process, every
 * rank with a GPU, BRAID_CUDA_IPC)? Sets ipc.state to 0 (to be set up) or -1, saying why
 * at INFO. Same answer on every rank, except for what a rank's own driver or settings
 * lack, which the set-up exchange shares. */
void br_ipc_decide(br_cuda_stage_t *st);
/* When the communicator is made, before any stream can wait for this rank: load the reduce
 * kernel, allocate, exchange handles (two bootstrap AllGathers), map the peers'; ipc.state
 * becomes 1 or -1 on every rank alike. Fails only when the exchange does (the ranks could
 * not agree); a rank that cannot take the direct path says so in the exchange. */
ncclResult_t br_ipc_setup(br_cuda_stage_t *st);
/* Is op a call the direct path runs (a collective, but not an owner-fold reduction)? */
int br_ipc_handles(const br_op_t *op);
/* Enqueue op on its stream (direct path on). Caller holds st->mu, in the stager's context. */
ncclResult_t br_ipc_enqueue(br_cuda_stage_t *st, const br_op_t *op);
/* After a deposit's direct calls: record its end for the watch. Caller holds st->mu. */
ncclResult_t br_ipc_flight_add(br_cuda_stage_t *st, br_cu_stream_t stream, const br_op_t *first);
/* The stager's watch over direct deposits in flight: those complete are retired; one
 * waiting past BRAID_CUDA_WAIT_TIMEOUT, or for a peer whose process died, fails the
 * communicator naming who. Returns whether any is still in flight. Caller holds st->mu. */
int br_ipc_watch(br_cuda_stage_t *st);
/* Has a peer reported a failure (a bootstrap abort notice)? Then the communicator fails
 * naming it, and 1 is returned. Caller holds st->mu. */
int br_ipc_peer_failed(br_cuda_stage_t *st);
/* Let this rank's stream pass every barrier (the communicator failed). */
void br_ipc_release(br_cuda_stage_t *st);
/* Unmap and free (the streams are done with it). */
void br_ipc_free(br_cuda_stage_t *st);

#endif /* BR_EXEC_CUDA_STAGE_INT_H_ */
