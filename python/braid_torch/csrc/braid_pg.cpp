/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ProcessGroupBraid's life and machinery: the communicator made through PyTorch's store,
 * the queue of calls and the communication thread that runs them in issue order, the
 * watchdog that revokes the communicator when a call outlives its timeout, BraidWork,
 * and the Python module. The collectives themselves (what each call issues) are in
 * braid_coll.cpp.
 *
 * Threads: the caller's threads only validate, stage and queue; the communication thread
 * is the only one that calls Braid on the communicator, except ncclCommRevoke from the
 * watchdog (Braid allows it from any thread, and the blocked call then returns). One
 * mutex guards the queue and the running call's deadline.
 */
#include <chrono>
#include <stdexcept>

#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "braid_pg.hpp"

namespace braid_torch
{

namespace
{

const char *const kUniqueIdKey = "braid_unique_id";

std::string braid_error(ncclComm_t comm, ncclResult_t res)
{
    const char *last = ncclGetLastError(comm);
    std::string msg = ncclGetErrorString(res);
    if (last != nullptr && last[0] != '\0') {
        msg += ": ";
        msg += last;
    }
    return msg;
}

} // namespace

BraidWork::BraidWork(int rank, c10d::OpType type, const char *name_, std::vector<at::Tensor> inputs,
                     std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout_)
    // With a title and the inputs, Work opens the profiler's event (shapes included) and
    // closes it in finish().
    : c10d::Work(rank, type, name_, std::optional<std::vector<at::Tensor>>(std::move(inputs))),
      name(name_), timeout(timeout_), outputs_(std::move(outputs)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get())))
{
}

c10::intrusive_ptr<c10::ivalue::Future> BraidWork::getFuture()
{
    if (p2p) {
        p2p->run(); // whoever takes the Future will wait on it
    }
    return future_;
}

std::vector<at::Tensor> BraidWork::result()
{
    return outputs_;
}

int BraidWork::sourceRank() const
{
    return source_rank.load();
}

void P2PFlush::run()
{
    std::lock_guard<std::mutex> lock(mu);
    if (pg != nullptr) {
        pg->flush_p2p();
    }
}

bool BraidWork::wait(std::chrono::milliseconds timeout)
{
    if (p2p) {
        p2p->run();
    }
    return c10d::Work::wait(timeout);
}

bool BraidWork::isCompleted()
{
    if (p2p) {
        p2p->run(); // a caller polling for completion waits too
    }
    return c10d::Work::isCompleted();
}

void BraidWork::complete(std::exception_ptr err)
{
    if (!err) {
        try {
            // Braid wrote the dense buffers directly; these copies are not autograd's.
            at::NoGradGuard no_grad;
            for (auto &c : copy_back) {
                c.first.copy_(c.second);
            }
        } catch (...) {
            err = std::current_exception();
        }
    }
    copy_back.clear();
    issue = nullptr;
    finish(err);
    // The Future last: its callbacks (DDP's) run here and may read the outputs.
    if (err) {
        future_->setError(err);
    } else {
        future_->markCompleted(c10::IValue(outputs_));
    }
}

ProcessGroupBraid::ProcessGroupBraid(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                     int size, std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), store_(store), timeout_(timeout)
{
    // As ProcessGroupNCCL: rank 0 makes the id, the store carries it to the others
    // (the store's prefix is the group's name, so every group has its own key).
    ncclUniqueId id;
    if (rank == 0) {
        ncclResult_t res = ncclGetUniqueId(&id);
        if (res != ncclSuccess) {
            throw std::runtime_error("braid: ncclGetUniqueId failed: " + braid_error(nullptr, res));
        }
        const uint8_t *p = reinterpret_cast<const uint8_t *>(&id);
        store->set(kUniqueIdKey, std::vector<uint8_t>(p, p + sizeof(id)));
    } else {
        std::vector<uint8_t> v = store->get(kUniqueIdKey);
        if (v.size() != sizeof(id)) {
            throw std::runtime_error("braid: the unique id in the store has " +
                                     std::to_string(v.size()) + " bytes, not " +
                                     std::to_string(sizeof(id)) +
                                     ": do all ranks run the same braid_torch?");
        }
        memcpy(&id, v.data(), sizeof(id));
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclResult_t res = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
    if (res != ncclSuccess) {
        throw std::runtime_error("braid: ncclCommInitRankConfig (rank " + std::to_string(rank) +
                                 " of " + std::to_string(size) +
                                 ") failed: " + braid_error(nullptr, res));
    }
    p2p_flush_ = std::make_shared<P2PFlush>();
    p2p_flush_->pg = this;
    comm_thread_ = std::thread([this] { comm_loop(); });
    watchdog_thread_ = std::thread([this] { watchdog_loop(); });
}

ProcessGroupBraid::~ProcessGroupBraid()
{
    // Python may drop the last reference with the GIL held; the communication thread may
    // need it (a Python callback on a Future), so let it go while waiting.
    PyThreadState *py = nullptr;
    if (Py_IsInitialized() && PyGILState_Check()) {
        py = PyEval_SaveThread();
    }
    {
        std::lock_guard<std::mutex> lock(p2p_flush_->mu);
        p2p_flush_->pg = nullptr; // Works that outlive the group flush nothing
    }
    {
        std::lock_guard<std::mutex> lock(mu_);
        queue_p2p_locked();
        if (!coalesced_.empty()) {
            queue_.push_back(std::move(coalesced_));
            coalesced_.clear();
        }
        stop_ = true;
    }
    // A receive from any source still waiting for a sender gives up.
    failed_ = true;
    queue_cv_.notify_all();
    comm_thread_.join();
    // The watchdog may sleep towards the last call's deadline: wake it to see the stop.
    watchdog_cv_.notify_all();
    watchdog_thread_.join();
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    // A failed or revoked communicator is only good for abort.
    if (!timed_out_.empty() || async != ncclSuccess) {
        ncclCommAbort(comm_);
    } else {
        ncclCommDestroy(comm_);
    }
    if (py != nullptr) {
        PyEval_RestoreThread(py);
    }
}

WorkPtr ProcessGroupBraid::make_work(c10d::OpType type, const char *name,
                                     std::vector<at::Tensor> inputs,
                                     std::vector<at::Tensor> outputs,
                                     std::chrono::milliseconds timeout)
{
    if (timeout == c10d::kUnsetTimeout) {
        std::lock_guard<std::mutex> lock(mu_); // setTimeout may change it
        timeout = timeout_;
    }
    // None (0 or less) or beyond a century: wait for ever, within what the clock can add.
    const std::chrono::milliseconds forever = std::chrono::hours(24 * 365 * 100);
    if (timeout <= std::chrono::milliseconds(0) || timeout > forever) {
        timeout = forever;
    }
    auto w = c10::make_intrusive<BraidWork>(rank_, type, name, std::move(inputs),
                                            std::move(outputs), timeout);
    if (type != c10d::OpType::SEND && type != c10d::OpType::RECV &&
        type != c10d::OpType::RECVANYSOURCE && type != c10d::OpType::COALESCED) {
        w->seq = ++seq_;
    }
    return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::enqueue(WorkPtr work)
{
    std::unique_lock<std::mutex> lock(mu_);
    if (coalescing_) {
        if (work->solo) {
            throw std::invalid_argument(std::string("braid: ") + work->name +
                                        " cannot be coalesced with other calls; issue it "
                                        "outside the coalescing manager");
        }
        coalesced_.push_back(work);
        return work;
    }
    if (work->p2p) {
        p2p_held_.push_back(work);
        return work;
    }
    // Calls run in issue order: the sends and receives issued before this one first.
    queue_p2p_locked();
    bool idle = queue_.empty() && !comm_busy_ && !inline_busy_ && timed_out_.empty();
    if (!work->sync || !idle) {
        queue_.push_back({work});
        lock.unlock();
        queue_cv_.notify_one();
        return work;
    }
    // Nothing of the group is queued or running, and the caller waits for this call
    // anyway: run it here. The communication thread leaves the queue alone meanwhile.
    inline_busy_ = true;
    std::vector<WorkPtr> batch{work};
    std::exception_ptr err;
    {
        at::NoGradGuard no_grad;
        err = run_watched(lock, batch);
    }
    inline_busy_ = false;
    bool queued = !queue_.empty();
    lock.unlock();
    if (queued) {
        queue_cv_.notify_one(); // calls from other threads, queued while this one ran
    }
    work->complete(err);
    return work;
}

void ProcessGroupBraid::queue_p2p_locked()
{
    if (!p2p_held_.empty()) {
        queue_.push_back(std::move(p2p_held_));
        p2p_held_.clear();
    }
}

void ProcessGroupBraid::flush_p2p()
{
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (p2p_held_.empty()) {
            return;
        }
        queue_p2p_locked();
    }
    queue_cv_.notify_one();
}

void ProcessGroupBraid::startCoalescing()
{
    std::lock_guard<std::mutex> lock(mu_);
    queue_p2p_locked(); // the batch goes after what was issued before it
    coalescing_ = true;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::endCoalescing()
{
    // The calls made since startCoalescing go to Braid in one group, so that sends and
    // receives between the same ranks in either order do not wait on each other. Each
    // call's Work (already returned to the caller) completes when the group does, and so
    // does the one returned here, which issues nothing of its own.
    auto all = make_work(c10d::OpType::COALESCED, "braid:coalesced", {}, {}, c10d::kUnsetTimeout);
    all->issue = [](ncclComm_t, ncclRedOp_t) { return ncclSuccess; };
    {
        std::lock_guard<std::mutex> lock(mu_);
        coalescing_ = false;
        for (auto &w : coalesced_) {
            all->timeout = std::max(all->timeout, w->timeout);
        }
        coalesced_.push_back(all);
        queue_.push_back(std::move(coalesced_));
        coalesced_.clear();
    }
    queue_cv_.notify_one();
    return all;
}

void ProcessGroupBraid::setTimeout(std::chrono::milliseconds timeout)
{
    std::lock_guard<std::mutex> lock(mu_);
    timeout_ = timeout; // for the calls issued from now on
}

std::exception_ptr ProcessGroupBraid::run_batch(std::vector<WorkPtr> &batch)
{
    const char *name = batch.size() == 1 ? batch[0]->name : "braid:group";
    std::vector<ncclRedOp_t> made;
    std::exception_ptr thrown;
    ncclResult_t res = ncclSuccess;
    bool grouped = batch.size() > 1;
    if (grouped) {
        res = ncclGroupStart();
    }
    for (size_t i = 0; i < batch.size() && res == ncclSuccess; i++) {
        BraidWork &w = *batch[i];
        ncclRedOp_t op = w.redop.op;
        if (w.redop.premul_scalar.defined()) {
            res = ncclRedOpCreatePreMulSum(&op, w.redop.premul_scalar.data_ptr(),
                                           w.redop.premul_type, ncclScalarHostImmediate, comm_);
            if (res != ncclSuccess) {
                break;
            }
            made.push_back(op);
        }
        try {
            res = w.issue(comm_, op);
        } catch (...) {
            // Thrown by a receive from any source, or by PyTorch in a sparse all_reduce;
            // the group is still closed below.
            thrown = std::current_exception();
            break;
        }
    }
    if (grouped) {
        // Always close the group; its result is the batch's when the calls were queued.
        ncclResult_t end = ncclGroupEnd();
        if (res == ncclSuccess) {
            res = end;
        }
    }
    std::string detail = res == ncclSuccess ? "" : braid_error(comm_, res);
    for (ncclRedOp_t op : made) {
        ncclRedOpDestroy(op, comm_);
    }
    if (thrown) {
        return thrown;
    }
    if (res == ncclSuccess) {
        return nullptr;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!timed_out_.empty()) {
        return std::make_exception_ptr(std::runtime_error(timed_out_ + "; Braid: " + detail));
    }
    return std::make_exception_ptr(std::runtime_error(std::string(name) + " failed: " + detail));
}

std::exception_ptr ProcessGroupBraid::run_watched(std::unique_lock<std::mutex> &lock,
                                                  std::vector<WorkPtr> &batch)
{
    if (!timed_out_.empty()) {
        // The communicator is revoked: fail at once, saying why.
        return std::make_exception_ptr(std::runtime_error(
            std::string(batch[0]->name) + " not run: the process group timed out earlier (" +
            timed_out_ + "); destroy it with torch.distributed.destroy_process_group()"));
    }
    running_name_ = batch.size() == 1 ? batch[0]->name : "braid:group";
    running_since_ = std::chrono::steady_clock::now();
    running_timeout_ = batch[0]->timeout;
    for (auto &w : batch) {
        running_timeout_ = std::max(running_timeout_, w->timeout);
    }
    // Wake the watchdog only when it sleeps past this call's deadline (idle, or towards a
    // later one): with calls of one timeout it never is, and a call costs no thread wake-up.
    if (running_since_ + running_timeout_ < watchdog_wake_) {
        watchdog_cv_.notify_one();
    }
    lock.unlock();
    std::exception_ptr err;
    try {
        err = run_batch(batch);
    } catch (...) {
        // Nothing may leave this function by an exception: the flags the caller set
        // (comm_busy_, inline_busy_) must be cleared, or the group would stop.
        err = std::current_exception();
    }
    lock.lock();
    running_name_ = nullptr;
    return err;
}

void ProcessGroupBraid::comm_loop()
{
    at::NoGradGuard no_grad;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        // A caller running its own call (enqueue) goes first: it was issued earlier.
        queue_cv_.wait(lock, [this] { return (stop_ || !queue_.empty()) && !inline_busy_; });
        if (queue_.empty()) {
            return; // stopping, and every queued call has run
        }
        std::vector<WorkPtr> batch = std::move(queue_.front());
        queue_.pop_front();
        comm_busy_ = true;
        std::exception_ptr err = run_watched(lock, batch);
        // Complete outside the lock: Future callbacks may queue new calls.
        lock.unlock();
        for (auto &w : batch) {
            w->complete(err);
        }
        batch.clear();
        lock.lock();
        comm_busy_ = false;
    }
}

void ProcessGroupBraid::watchdog_loop()
{
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_ || running_name_ != nullptr) {
        if (running_name_ == nullptr || !timed_out_.empty()) {
            watchdog_wake_ = std::chrono::steady_clock::time_point::max();
            watchdog_cv_.wait(lock);
            continue;
        }
        auto deadline = running_since_ + running_timeout_;
        if (std::chrono::steady_clock::now() < deadline) {
            // Woken early by a call with an earlier deadline or by stop, or at the deadline
            // of a call that has ended since: the loop re-reads the running call's.
            watchdog_wake_ = deadline;
            watchdog_cv_.wait_until(lock, deadline);
            continue;
        }
        // PyTorch's tests (and users' scripts) look for " Timed out " in the text.
        timed_out_ = std::string(running_name_) + ": Timed out after " +
                     std::to_string(running_timeout_.count()) +
                     " ms (the process group's timeout) on rank " + std::to_string(rank_);
        failed_ = true;
        // Revoke under the lock: it only flags the communicator, and the blocked call
        // returns on its own thread within about 100 ms with Braid's reason.
        ncclCommRevoke(comm_, NCCL_REVOKE_DEFAULT);
    }
}

} // namespace braid_torch

namespace py = pybind11;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    // Backend and Store are registered by torch.distributed's module.
    py::module::import("torch.distributed");
    m.doc() = "Braid (NCCL API on host memory) as a torch.distributed backend";
    py::class_<braid_torch::ProcessGroupBraid, c10d::Backend,
               c10::intrusive_ptr<braid_torch::ProcessGroupBraid>>(m, "ProcessGroupBraid")
        .def(py::init<const c10::intrusive_ptr<c10d::Store> &, int, int,
                      std::chrono::milliseconds>(),
             py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
             py::call_guard<py::gil_scoped_release>());
    m.def("nccl_version", [] {
        int v = 0;
        ncclGetVersion(&v);
        return v;
    });
}
