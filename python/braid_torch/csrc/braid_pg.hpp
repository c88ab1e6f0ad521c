/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ProcessGroupBraid: a torch.distributed process group whose collectives run on Braid's
 * host-memory path (libnccl.so.2 built by this repository) for CPU tensors.
 *
 * One communication thread per process group runs the calls in the order they were
 * issued; a call returns a BraidWork at once, and the thread completes it (copies back
 * staged outputs, marks the Work and its Future done or failed). A watchdog thread
 * revokes the communicator when a call runs past its timeout, so the blocked call
 * returns and the group can be destroyed.
 *
 * A call made without async_op (PyTorch waits on it at once) runs on the caller's own
 * thread when nothing else of the group is queued or running: the result is the same, and
 * the two thread hand-overs (tens of microseconds each) are saved on small calls.
 *
 * Sends and receives (isend, irecv) are held back until a Work of theirs is waited on or
 * polled, or another kind of call is issued, and then go to Braid together as one group:
 * so two ranks that both send first, then receive, do not wait on each other's send.
 *
 * Receives from any source: every send announces itself in the group's store (a counter
 * per sender, receiver and tag); a receive without a source waits, on the communication
 * thread, for a sender whose count is ahead of what this rank has received from it, then
 * receives from that sender.
 *
 * C++ only because PyTorch's c10d API is C++ (PyTorch 2.x: a c10d::Backend for the CPU).
 */
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <braid.h>
#include <nccl.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace braid_torch
{

class ProcessGroupBraid;

/* How a held-back send or receive gets its group queued: the Work calls run() when it is
 * waited on. The process group detaches it (pg = nullptr) before it goes away. */
struct P2PFlush {
    std::mutex mu;
    ProcessGroupBraid *pg;
    void run();
};

/* How one queued call reduces: a built-in op, or a PREMUL_SUM whose scalar (a
 * one-element tensor of the data's type) becomes a Braid op on the communication thread,
 * where the communicator is used. */
struct RedOp {
    ncclRedOp_t op = ncclSum;
    at::Tensor premul_scalar; // defined for PREMUL_SUM only
    ncclDataType_t premul_type = ncclFloat32;
};

/* One call of a process group: what to issue to Braid, and what to do once it is done. */
class BraidWork : public c10d::Work
{
  public:
    /* Issues the call's Braid operations with `op` (the call's reduction, already
     * created). Runs on the communication thread; must not block on anything but Braid. */
    using Issue = std::function<ncclResult_t(ncclComm_t comm, ncclRedOp_t op)>;

    /* `name` is also the profiler's title (e.g. "braid:all_reduce"); `inputs` give the
     * profiler event its shapes. */
    BraidWork(int rank, c10d::OpType type, const char *name, std::vector<at::Tensor> inputs,
              std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout);

    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
    std::vector<at::Tensor> result() override;
    /* A held-back send or receive is queued first (with the others held back). */
    bool wait(std::chrono::milliseconds timeout) override;
    bool isCompleted() override;
    /* The sender a receive from any source took its message from (-1 before). */
    int sourceRank() const override;
    uint64_t getSequencenumber() const override
    {
        return seq;
    }

    /* Called once by the communication thread: on success (err null) copies staged outputs
     * to the caller's tensors, then completes the Work and its Future. */
    void complete(std::exception_ptr err);

    const char *name;                  // "all_reduce", ... for messages
    std::chrono::milliseconds timeout; // this call's timeout
    Issue issue;
    RedOp redop;
    /* (destination, source) pairs copied after success: the caller's non-contiguous or
     * list outputs, filled from the dense buffers Braid wrote. */
    std::vector<std::pair<at::Tensor, at::Tensor>> copy_back;
    std::shared_ptr<P2PFlush> p2p; // set for a send or receive
    /* Must run alone, not inside a Braid group (it reads results of its own Braid calls
     * before it makes the next: sparse all_reduce). */
    bool solo = false;
    /* The caller waits on it at once (async_op=False): it may run on the caller's thread. */
    bool sync = false;
    std::atomic<int> source_rank{-1};
    uint64_t seq = 0; // the group's sequence number of this call (collectives only)

  private:
    std::vector<at::Tensor> outputs_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
};

using WorkPtr = c10::intrusive_ptr<BraidWork>;

class ProcessGroupBraid : public c10d::Backend
{
  public:
    /* Creates the Braid communicator: rank 0 makes the unique id and sets it in `store`,
     * the other ranks read it there. Blocks until every rank has joined (or Braid's
     * bootstrap timeout). Throws std::runtime_error with Braid's error text. */
    ProcessGroupBraid(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                      std::chrono::milliseconds timeout);
    /* Runs the calls still queued, stops both threads, then destroys the communicator (or
     * aborts it when it failed or timed out). */
    ~ProcessGroupBraid() override;

    const std::string getBackendName() const override
    {
        return "braid";
    }

    bool supportsCoalescing() const override
    {
        return true;
    }
    void startCoalescing() override;
    /* One Work for the calls made since startCoalescing, run as one Braid group. */
    c10::intrusive_ptr<c10d::Work> endCoalescing() override;
    void setTimeout(std::chrono::milliseconds timeout) override;
    /* Sequence numbers count the collectives issued on the group: 0 on every rank at
     * the start, one more per collective (sends and receives differ between ranks and do
     * not count), so that ranks issuing the same calls agree (TORCH_DISTRIBUTED_DEBUG's
     * checks compare them). */
    void setSequenceNumberForGroup() override
    {
        seq_ = 0;
    }
    uint64_t getSequenceNumberForGroup() override
    {
        return seq_;
    }

    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                             const c10d::BroadcastOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                             const c10d::AllreduceOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    allreduce_coalesced(std::vector<at::Tensor> &tensors,
                        const c10d::AllreduceCoalescedOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor> &tensors,
                                                    const c10d::AllreduceOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                          const c10d::ReduceOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                             std::vector<at::Tensor> &inputs,
                                             const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                   const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                        std::vector<at::Tensor> &inputs,
                        const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    allgather_into_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                    std::vector<at::Tensor> &inputs,
                                    const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::GatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                           std::vector<std::vector<at::Tensor>> &inputs,
                                           const c10d::ScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                  std::vector<std::vector<at::Tensor>> &inputs,
                                                  const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                         const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    reduce_scatter_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                    std::vector<at::Tensor> &inputs,
                                    const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                                 std::vector<int64_t> &output_splits,
                                                 std::vector<int64_t> &input_splits,
                                                 const c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                            std::vector<at::Tensor> &inputs,
                                            const c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst,
                                        int tag) override;
    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src,
                                        int tag) override;
    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors,
                                                 int tag) override;
    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override;

  private:
    /* A new Work for one call, with the call's timeout (the group's when unset). */
    WorkPtr make_work(c10d::OpType type, const char *name, std::vector<at::Tensor> inputs,
                      std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout);
    /* Queues the Work (or holds it back: a send or receive, a call between
     * startCoalescing and endCoalescing) and returns it. */
    c10::intrusive_ptr<c10d::Work> enqueue(WorkPtr work);

    /* The store key that counts the sends from `src` to `dst` with `tag`. */
    static std::string p2p_key(int src, int dst, int tag);
    /* On the communication thread: waits until some rank has sent this rank a message with
     * `tag` that it has not received yet, and returns that rank (the lowest when several
     * have). Throws when the group times out or is destroyed meanwhile. */
    int wait_any_source(int tag);

  public:
    /* Queues the sends and receives held back, as one group. */
    void flush_p2p();

  private:
    /* The held-back sends and receives to the queue (mu_ held). */
    void queue_p2p_locked();

    /* Runs one batch with the group's deadline set for the watchdog (mu_ held on entry and
     * on return, released while Braid runs); returns its error, or null. */
    std::exception_ptr run_watched(std::unique_lock<std::mutex> &lock, std::vector<WorkPtr> &batch);
    void comm_loop();
    void watchdog_loop();
    /* Issues one batch (one call, or a coalesced batch in one Braid group); returns the
     * error to give every Work of the batch, or null. */
    std::exception_ptr run_batch(std::vector<WorkPtr> &batch);

    ncclComm_t comm_ = nullptr;
    std::atomic<uint64_t> seq_{0};
    c10::intrusive_ptr<c10d::Store> store_;
    std::chrono::milliseconds timeout_;
    /* Messages received so far from each (source, tag): counted when a receive with a
     * source is issued, and when a receive from any source has chosen its source. */
    std::mutex recv_mu_;
    std::map<std::pair<int, int>, int64_t> received_;

    std::mutex mu_; // guards everything below
    std::condition_variable queue_cv_;
    std::condition_variable watchdog_cv_;
    std::deque<std::vector<WorkPtr>> queue_;
    bool coalescing_ = false;
    std::vector<WorkPtr> coalesced_;
    std::vector<WorkPtr> p2p_held_;
    std::shared_ptr<P2PFlush> p2p_flush_;
    bool stop_ = false;
    bool comm_busy_ = false;   // the communication thread holds a batch (run or completing)
    bool inline_busy_ = false; // a caller runs its own call (enqueue)
    /* The batch the communication thread runs now: its name, start and timeout. */
    const char *running_name_ = nullptr;
    std::chrono::steady_clock::time_point running_since_;
    std::chrono::milliseconds running_timeout_{0};
    /* When the watchdog wakes next by itself (max: not before it is notified). */
    std::chrono::steady_clock::time_point watchdog_wake_ =
        std::chrono::steady_clock::time_point::max();
    /* Set by the watchdog when a call timed out; every later call fails with it. */
    std::string timed_out_;
    std::atomic<bool> failed_{false}; // timed_out_ is set, or the group stops

    std::thread comm_thread_;
    std::thread watchdog_thread_;
};

} // namespace braid_torch
