/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ProcessGroupBraid's collectives: each checks its tensors in the caller's thread (bad
 * arguments raise there, at once), stages them as dense buffers Braid can use, and queues
 * a BraidWork whose issue function makes the Braid calls on the communication thread.
 *
 * Staging: Braid reads and writes flat memory. A contiguous tensor is used in place; a
 * non-contiguous one is copied to a dense buffer (and copied back when it is an output).
 * List forms (all_gather, gather, scatter, reduce_scatter with lists) go through one flat
 * buffer of the whole result. Complex tensors travel as pairs of their real type. bool
 * travels as uint8, its SUM as MAX and its PRODUCT as MIN (logical or / and).
 */
#include <algorithm>
#include <stdexcept>
#include <thread>

#include "braid_pg.hpp"

namespace braid_torch
{

namespace
{

[[noreturn]] void refuse(const std::string &msg)
{
    throw std::invalid_argument("braid: " + msg);
}

/* The dtype as Python spells it (c10 says "Short" for torch.int16). */
std::string type_name(at::ScalarType st)
{
    switch (st) {
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kShort: return "torch.int16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kBool: return "torch.bool";
    case at::kUInt32: return "torch.uint32";
    case at::kUInt64: return "torch.uint64";
    case at::kFloat8_e4m3fn: return "torch.float8_e4m3fn";
    case at::kFloat8_e5m2: return "torch.float8_e5m2";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    default: return std::string("torch.") + c10::toString(st);
    }
}

/* Braid's type for elements of `st` (complex: of its real parts). */
ncclDataType_t braid_type(at::ScalarType st)
{
    if (c10::isComplexType(st)) {
        st = c10::toRealValueType(st);
    }
    switch (st) {
    case at::kChar: return ncclInt8;
    case at::kByte: return ncclUint8;
    case at::kBool: return ncclUint8;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kUInt32: return ncclUint32;
    case at::kUInt64: return ncclUint64;
    // NCCL's float8 types are OCP's e4m3 (finite, no infinities: PyTorch's "fn") and e5m2.
    case at::kFloat8_e4m3fn: return ncclFloat8e4m3;
    case at::kFloat8_e5m2: return ncclFloat8e5m2;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    default:
        refuse("tensors of dtype " + type_name(st) +
               " have no Braid (NCCL) type; Braid takes float16, bfloat16, float32, float64, "
               "float8_e4m3fn, float8_e5m2, int8, uint8, int32, uint32, int64, uint64, bool "
               "and complex64/128");
    }
}

/* A dense buffer Braid reads or writes: the tensor (kept alive by the issue function that
 * holds it), and its size in Braid's elements. */
struct Raw {
    at::Tensor t;
    size_t n = 0;
    ncclDataType_t type = ncclFloat32;

    void *p() const
    {
        return t.data_ptr();
    }
};

Raw raw(const at::Tensor &dense)
{
    Raw r;
    r.t = dense;
    r.type = braid_type(dense.scalar_type());
    r.n = static_cast<size_t>(dense.numel()) * (dense.is_complex() ? 2 : 1);
    return r;
}

void check_tensor(const at::Tensor &t, const char *call)
{
    if (!t.defined()) {
        refuse(std::string(call) + ": undefined tensor");
    }
    if (!t.device().is_cpu()) {
        refuse(std::string(call) + ": the braid backend takes CPU tensors, not " +
               t.device().str() + " (use NCCL for GPU tensors)");
    }
    if (t.layout() != at::kStrided) {
        refuse(std::string(call) + ": sparse and other non-strided tensors are not supported");
    }
    braid_type(t.scalar_type());
}

/* The one tensor of a call that takes a list of one tensor per process. */
const at::Tensor &single(const std::vector<at::Tensor> &tensors, const char *call)
{
    if (tensors.size() != 1) {
        refuse(std::string(call) + ": expects one tensor per process, got " +
               std::to_string(tensors.size()));
    }
    check_tensor(tensors[0], call);
    return tensors[0];
}

void check_like(const at::Tensor &t, const at::Tensor &ref, int64_t numel, const char *call)
{
    check_tensor(t, call);
    if (t.scalar_type() != ref.scalar_type()) {
        refuse(std::string(call) + ": dtypes differ (" + type_name(t.scalar_type()) + " and " +
               type_name(ref.scalar_type()) + ")");
    }
    if (t.numel() != numel) {
        refuse(std::string(call) + ": expected a tensor of " + std::to_string(numel) +
               " elements, got " + std::to_string(t.numel()));
    }
}

/* A tensor Braid only reads: itself when contiguous, else a dense copy. */
Raw input(const at::Tensor &t)
{
    at::NoGradGuard no_grad; // staging copies are not part of any graph
    return raw(t.is_contiguous() ? t : t.contiguous());
}

/* A tensor Braid writes (and reads when copy_in): itself when contiguous, else a dense
 * buffer copied back into it when the call succeeds. */
Raw output(BraidWork &w, const at::Tensor &t, bool copy_in)
{
    at::NoGradGuard no_grad;
    if (t.is_contiguous()) {
        return raw(t);
    }
    at::Tensor dense = copy_in ? t.contiguous() : at::empty(t.sizes(), t.options());
    w.copy_back.emplace_back(t, dense);
    return raw(dense);
}

/* One flat buffer for `list` (one tensor per rank, each of `numel` elements), copied back
 * into the list when the call succeeds (or filled from it when copy_in). */
Raw flat_list(BraidWork &w, const std::vector<at::Tensor> &list, const at::Tensor &like,
              bool copy_in)
{
    at::NoGradGuard no_grad;
    int64_t numel = like.numel();
    at::Tensor flat = at::empty({static_cast<int64_t>(list.size()) * numel}, like.options());
    for (size_t i = 0; i < list.size(); i++) {
        at::Tensor part = flat.narrow(0, static_cast<int64_t>(i) * numel, numel);
        if (copy_in) {
            part.copy_(list[i].reshape({-1}));
        } else {
            w.copy_back.emplace_back(list[i], part.view(list[i].sizes()));
        }
    }
    return raw(flat);
}

/* An all_gather output list whose tensors differ in size (rank p's input has the size of
 * list[p]): one flat buffer of them all, packed in rank order, and each part's size in
 * Braid's elements, for braidAllGatherV. */
Raw flat_uneven(BraidWork &w, const std::vector<at::Tensor> &list, const at::Tensor &in, int rank,
                std::vector<size_t> &counts, const char *call)
{
    at::NoGradGuard no_grad;
    int64_t total = 0;
    for (const auto &t : list) {
        check_like(t, in, t.numel(), call);
        total += t.numel();
    }
    if (list[rank].numel() != in.numel()) {
        refuse(std::string(call) + ": this rank's output tensor has " +
               std::to_string(list[rank].numel()) + " elements but its input " +
               std::to_string(in.numel()));
    }
    at::Tensor flat = at::empty({total}, in.options());
    int64_t at = 0;
    for (const auto &t : list) {
        w.copy_back.emplace_back(t, flat.narrow(0, at, t.numel()).view(t.sizes()));
        counts.push_back(static_cast<size_t>(t.numel()) * (in.is_complex() ? 2 : 1));
        at += t.numel();
    }
    return raw(flat);
}

bool same_numel(const std::vector<at::Tensor> &list, const at::Tensor &ref)
{
    for (const auto &t : list) {
        if (t.defined() && t.numel() != ref.numel()) {
            return false;
        }
    }
    return true;
}

void check_list(const std::vector<at::Tensor> &list, const at::Tensor &ref, int size,
                const char *call)
{
    if (static_cast<int>(list.size()) != size) {
        refuse(std::string(call) + ": expected a list of " + std::to_string(size) +
               " tensors (one per rank), got " + std::to_string(list.size()));
    }
    for (const auto &t : list) {
        check_like(t, ref, ref.numel(), call);
    }
}

/* The reduction of a call on `t`'s dtype. */
RedOp red_op(const c10d::ReduceOp &rop, const at::Tensor &t, const char *call)
{
    bool is_bool = t.scalar_type() == at::kBool;
    bool cplx = t.is_complex();
    RedOp r;
    switch (rop.op_) {
    case c10d::ReduceOp::SUM: r.op = is_bool ? ncclMax : ncclSum; return r;
    case c10d::ReduceOp::PRODUCT:
        if (!cplx) {
            r.op = is_bool ? ncclMin : ncclProd;
            return r;
        }
        break;
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
        if (!cplx) {
            r.op = rop.op_ == c10d::ReduceOp::MIN ? ncclMin : ncclMax;
            return r;
        }
        break;
    case c10d::ReduceOp::AVG:
        if (!is_bool) {
            r.op = ncclAvg;
            return r;
        }
        break;
    case c10d::ReduceOp::PREMUL_SUM: {
        auto *sup = dynamic_cast<c10d::PreMulSumSupplement *>(rop.supplement_.get());
        if (is_bool) {
            break;
        }
        if (sup == nullptr) {
            refuse(std::string(call) + ": PREMUL_SUM without its factor (make the op with "
                                       "torch.distributed._make_nccl_premul_sum)");
        }
        // The scalar is a value of the data's (real) type, as ncclRedOpCreatePreMulSum wants.
        at::ScalarType st = cplx ? c10::toRealValueType(t.scalar_type()) : t.scalar_type();
        if (sup->tensor_factor.defined()) {
            const at::Tensor &f = sup->tensor_factor;
            if (!f.device().is_cpu() || f.numel() != 1 || f.is_complex()) {
                refuse(std::string(call) +
                       ": the PREMUL_SUM factor must be a real one-element CPU tensor");
            }
            r.premul_scalar = f.reshape({}).to(st).clone();
        } else {
            r.premul_scalar = at::scalar_tensor(sup->double_factor, at::TensorOptions().dtype(st));
        }
        r.premul_type = braid_type(st);
        return r;
    }
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
        refuse(std::string(call) +
               ": bitwise reductions (BAND, BOR, BXOR) have no Braid equivalent (NCCL has "
               "none); use the gloo backend for them");
    default: break;
    }
    static const char *const names[] = {"SUM",  "AVG", "PRODUCT", "MIN",       "MAX",
                                        "BAND", "BOR", "BXOR",    "PREMUL_SUM"};
    size_t i = static_cast<size_t>(rop.op_);
    std::string op = i < sizeof(names) / sizeof(names[0]) ? names[i] : std::to_string(i);
    refuse(std::string(call) + ": ReduceOp." + op + " is not supported on " +
           type_name(t.scalar_type()) + " tensors");
}

/* The list and tensor forms of all_gather and reduce_scatter issue the same call. */
void issue_allgather(BraidWork &w, const Raw &src, const Raw &dst)
{
    w.issue = [src, dst](ncclComm_t comm, ncclRedOp_t) {
        return ncclAllGather(src.p(), dst.p(), src.n, src.type, comm, nullptr);
    };
}

void issue_reduce_scatter(BraidWork &w, const Raw &src, const Raw &dst)
{
    w.issue = [src, dst](ncclComm_t comm, ncclRedOp_t op) {
        return ncclReduceScatter(src.p(), dst.p(), dst.n, dst.type, op, comm, nullptr);
    };
}

/* Runs f's Braid calls as one group (as NCCL, groups nest). */
template <class F> ncclResult_t grouped(F f)
{
    ncclResult_t res = ncclGroupStart();
    if (res != ncclSuccess) {
        return res;
    }
    res = f();
    ncclResult_t end = ncclGroupEnd();
    return res != ncclSuccess ? res : end;
}

} // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::broadcast(std::vector<at::Tensor> &tensors,
                                                            const c10d::BroadcastOptions &opts)
{
    const at::Tensor &t = single(tensors, "broadcast");
    auto w = make_work(c10d::OpType::BROADCAST, "braid:broadcast", tensors, tensors, opts.timeout);
    w->sync = !opts.asyncOp;
    Raw b = output(*w, t, true);
    int root = static_cast<int>(opts.rootRank);
    w->issue = [b, root](ncclComm_t comm, ncclRedOp_t) {
        return ncclBroadcast(b.p(), b.p(), b.n, b.type, root, comm, nullptr);
    };
    return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allreduce(std::vector<at::Tensor> &tensors,
                                                            const c10d::AllreduceOptions &opts)
{
    if (tensors.size() == 1 && tensors[0].defined() && tensors[0].is_sparse()) {
        return allreduce_sparse(tensors, opts); // as Gloo: whichever entry PyTorch takes
    }
    const at::Tensor &t = single(tensors, "all_reduce");
    auto w = make_work(c10d::OpType::ALLREDUCE, "braid:all_reduce", tensors, tensors, opts.timeout);
    w->sync = !opts.asyncOp;
    w->redop = red_op(opts.reduceOp, t, "all_reduce");
    Raw b = output(*w, t, true);
    w->issue = [b](ncclComm_t comm, ncclRedOp_t op) {
        return ncclAllReduce(b.p(), b.p(), b.n, b.type, op, comm, nullptr);
    };
    return enqueue(w);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                       const c10d::AllreduceCoalescedOptions &opts)
{
    const char *call = "all_reduce_coalesced";
    if (tensors.empty()) {
        refuse(std::string(call) + ": no tensors");
    }
    auto w = make_work(c10d::OpType::ALLREDUCE_COALESCED, "braid:all_reduce", tensors, tensors,
                       opts.timeout);
    w->sync = !opts.asyncOp;
    // One reduction for the whole group, so one dtype.
    w->redop = red_op(opts.reduceOp, tensors[0], call);
    std::vector<Raw> bufs;
    for (const auto &t : tensors) {
        check_like(t, tensors[0], t.numel(), call);
        bufs.push_back(output(*w, t, true));
    }
    w->issue = [bufs](ncclComm_t comm, ncclRedOp_t op) {
        return grouped([&] {
            ncclResult_t res = ncclSuccess;
            for (size_t i = 0; i < bufs.size() && res == ncclSuccess; i++) {
                const Raw &b = bufs[i];
                res = ncclAllReduce(b.p(), b.p(), b.n, b.type, op, comm, nullptr);
            }
            return res;
        });
    };
    return enqueue(w);
}

namespace
{

/* Sums a sparse (COO) tensor across the group in place, as Gloo does: every rank's
 * indices and values are gathered (padded to the largest count, after an all-gather of
 * the counts), joined, and coalesced, which adds the values of equal indices. Braid's
 * calls run one after the other: each needs the result of the one before. */
ncclResult_t sparse_sum(at::Tensor &t, int n, ncclComm_t comm)
{
    at::Tensor c = t.coalesce();
    at::Tensor idx = c._indices().contiguous(); // [sparse dims, nnz], int64
    at::Tensor val = c._values().contiguous();  // [nnz, dense dims...]
    int64_t nnz = c._nnz();
    auto i64 = at::TensorOptions().dtype(at::kLong);
    at::Tensor mine = at::full({1}, nnz, i64);
    at::Tensor counts = at::empty({n}, i64);
    ncclResult_t res =
        ncclAllGather(mine.data_ptr(), counts.data_ptr(), 1, ncclInt64, comm, nullptr);
    if (res != ncclSuccess) {
        return res;
    }
    int64_t most = counts.max().item<int64_t>();
    int64_t sdim = idx.size(0);
    at::Tensor idx_pad = at::zeros({sdim, most}, i64);
    idx_pad.narrow(1, 0, nnz).copy_(idx);
    std::vector<int64_t> vshape = val.sizes().vec();
    vshape[0] = most;
    at::Tensor val_pad = at::zeros(vshape, val.options());
    val_pad.narrow(0, 0, nnz).copy_(val);
    at::Tensor idx_all = at::empty({n, sdim, most}, i64);
    vshape.insert(vshape.begin(), n);
    at::Tensor val_all = at::empty(vshape, val.options());
    Raw vi = raw(idx_pad), vv = raw(val_pad);
    res = ncclAllGather(vi.p(), idx_all.data_ptr(), vi.n, vi.type, comm, nullptr);
    if (res == ncclSuccess) {
        res = ncclAllGather(vv.p(), val_all.data_ptr(), vv.n, vv.type, comm, nullptr);
    }
    if (res != ncclSuccess) {
        return res;
    }
    std::vector<at::Tensor> idx_parts, val_parts;
    for (int r = 0; r < n; r++) {
        int64_t k = counts[r].item<int64_t>();
        idx_parts.push_back(idx_all[r].narrow(1, 0, k));
        val_parts.push_back(val_all[r].narrow(0, 0, k));
    }
    at::Tensor sum =
        at::sparse_coo_tensor(at::cat(idx_parts, 1), at::cat(val_parts, 0), t.sizes(), t.options())
            .coalesce();
    t.copy_(sum);
    return ncclSuccess;
}

} // namespace

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::allreduce_sparse(std::vector<at::Tensor> &tensors,
                                    const c10d::AllreduceOptions &opts)
{
    const char *call = "all_reduce (sparse)";
    if (tensors.size() != 1) {
        refuse(std::string(call) + ": expects one tensor per process, got " +
               std::to_string(tensors.size()));
    }
    at::Tensor t = tensors[0];
    if (t.layout() != at::kSparse || !t.device().is_cpu()) {
        refuse(std::string(call) + ": takes sparse COO tensors on the CPU (torch.sparse_coo)");
    }
    if (opts.reduceOp != c10d::ReduceOp::SUM) {
        refuse(std::string(call) + ": sparse tensors are summed only (ReduceOp.SUM), as with "
                                   "gloo");
    }
    braid_type(t.scalar_type());
    auto w = make_work(c10d::OpType::_ALLREDUCE_SPARSE, "braid:sparse_all_reduce", tensors, tensors,
                       opts.timeout);
    w->sync = !opts.asyncOp;
    w->solo = true;
    int n = size_;
    w->issue = [t, n](ncclComm_t comm, ncclRedOp_t) mutable { return sparse_sum(t, n, comm); };
    return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::reduce(std::vector<at::Tensor> &tensors,
                                                         const c10d::ReduceOptions &opts)
{
    const at::Tensor &t = single(tensors, "reduce");
    auto w = make_work(c10d::OpType::REDUCE, "braid:reduce", tensors, tensors, opts.timeout);
    w->sync = !opts.asyncOp;
    w->redop = red_op(opts.reduceOp, t, "reduce");
    Raw b = output(*w, t, true);
    int root = static_cast<int>(opts.rootRank);
    w->issue = [b, root](ncclComm_t comm, ncclRedOp_t op) {
        return ncclReduce(b.p(), b.p(), b.n, b.type, op, root, comm, nullptr);
    };
    return enqueue(w);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                             std::vector<at::Tensor> &inputs, const c10d::AllgatherOptions &opts)
{
    const at::Tensor &in = single(inputs, "all_gather");
    if (outputs.size() != 1) {
        refuse("all_gather: expects one output list per process, got " +
               std::to_string(outputs.size()));
    }
    if (static_cast<int>(outputs[0].size()) == size_ && !same_numel(outputs[0], in)) {
        // Tensors of different sizes per rank: one braidAllGatherV into a flat buffer.
        auto w = make_work(c10d::OpType::ALLGATHER, "braid:all_gather", inputs, outputs[0],
                           opts.timeout);
        w->sync = !opts.asyncOp;
        std::vector<size_t> counts;
        Raw src = input(in);
        Raw dst = flat_uneven(*w, outputs[0], in, rank_, counts, "all_gather");
        w->issue = [src, dst, counts](ncclComm_t comm, ncclRedOp_t) {
            return braidAllGatherV(src.p(), src.n, dst.p(), counts.data(), nullptr, src.type,
                                   comm, nullptr);
        };
        return enqueue(w);
    }
    check_list(outputs[0], in, size_, "all_gather");
    auto w =
        make_work(c10d::OpType::ALLGATHER, "braid:all_gather", inputs, outputs[0], opts.timeout);
    w->sync = !opts.asyncOp;
    Raw src = input(in);
    Raw dst = flat_list(*w, outputs[0], in, false);
    issue_allgather(*w, src, dst);
    return enqueue(w);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::_allgather_base(at::Tensor &output_tensor, at::Tensor &input_tensor,
                                   const c10d::AllgatherOptions &opts)
{
    const char *call = "all_gather_into_tensor";
    check_tensor(input_tensor, call);
    check_like(output_tensor, input_tensor, input_tensor.numel() * size_, call);
    auto w = make_work(c10d::OpType::_ALLGATHER_BASE, "braid:all_gather_into_tensor",
                       {input_tensor}, {output_tensor}, opts.timeout);
    w->sync = !opts.asyncOp;
    Raw src = input(input_tensor);
    Raw dst = output(*w, output_tensor, false);
    issue_allgather(*w, src, dst);
    return enqueue(w);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                                       std::vector<at::Tensor> &inputs,
                                       const c10d::AllgatherOptions &opts)
{
    const char *call = "all_gather_coalesced";
    if (outputs.size() != static_cast<size_t>(size_)) {
        refuse(std::string(call) + ": expects one output list per rank, got " +
               std::to_string(outputs.size()));
    }
    std::vector<at::Tensor> all_out;
    for (const auto &list : outputs) {
        if (list.size() != inputs.size()) {
            refuse(std::string(call) + ": each output list needs one tensor per input");
        }
        all_out.insert(all_out.end(), list.begin(), list.end());
    }
    auto w = make_work(c10d::OpType::ALLGATHER_COALESCED, "braid:all_gather", inputs, all_out,
                       opts.timeout);
    w->sync = !opts.asyncOp;
    std::vector<std::pair<Raw, Raw>> bufs;
    for (size_t i = 0; i < inputs.size(); i++) {
        check_tensor(inputs[i], call);
        std::vector<at::Tensor> per_rank;
        for (const auto &list : outputs) {
            per_rank.push_back(list[i]);
        }
        check_list(per_rank, inputs[i], size_, call);
        bufs.emplace_back(input(inputs[i]), flat_list(*w, per_rank, inputs[i], false));
    }
    w->issue = [bufs](ncclComm_t comm, ncclRedOp_t) {
        return grouped([&] {
            ncclResult_t res = ncclSuccess;
            for (size_t i = 0; i < bufs.size() && res == ncclSuccess; i++) {
                const Raw &s = bufs[i].first;
                res = ncclAllGather(s.p(), bufs[i].second.p(), s.n, s.type, comm, nullptr);
            }
            return res;
        });
    };
    return enqueue(w);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::gather(std::vector<std::vector<at::Tensor>> &outputs,
                          std::vector<at::Tensor> &inputs, const c10d::GatherOptions &opts)
{
    const at::Tensor &in = single(inputs, "gather");
    int root = static_cast<int>(opts.rootRank);
    bool is_root = rank_ == root;
    // PyTorch passes the gather list on the root only.
    if (is_root && outputs.size() != 1) {
        refuse("gather: the root expects one gather list, got " + std::to_string(outputs.size()));
    }
    if (!is_root && !outputs.empty() && !outputs[0].empty()) {
        refuse("gather: only the root (rank " + std::to_string(root) + ") takes a gather list");
    }
    std::vector<at::Tensor> out = is_root ? outputs[0] : std::vector<at::Tensor>();
    if (is_root) {
        check_list(out, in, size_, "gather");
    }
    auto w = make_work(c10d::OpType::GATHER, "braid:gather", inputs, out, opts.timeout);
    w->sync = !opts.asyncOp;
    Raw src = input(in);
    Raw dst = is_root ? flat_list(*w, out, in, false) : Raw();
    w->issue = [src, dst, root](ncclComm_t comm, ncclRedOp_t) {
        void *p = dst.t.defined() ? dst.p() : nullptr;
        return ncclGather(src.p(), p, src.n, src.type, root, comm, nullptr);
    };
    return enqueue(w);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::scatter(std::vector<at::Tensor> &outputs,
                           std::vector<std::vector<at::Tensor>> &inputs,
                           const c10d::ScatterOptions &opts)
{
    const at::Tensor &out = single(outputs, "scatter");
    int root = static_cast<int>(opts.rootRank);
    bool is_root = rank_ == root;
    // PyTorch passes the scatter list on the root only.
    if (is_root && inputs.size() != 1) {
        refuse("scatter: the root expects one scatter list, got " + std::to_string(inputs.size()));
    }
    if (!is_root && !inputs.empty() && !inputs[0].empty()) {
        refuse("scatter: only the root (rank " + std::to_string(root) + ") takes a scatter list");
    }
    if (is_root) {
        check_list(inputs[0], out, size_, "scatter");
    }
    auto w = make_work(c10d::OpType::SCATTER, "braid:scatter", is_root ? inputs[0] : outputs,
                       outputs, opts.timeout);
    w->sync = !opts.asyncOp;
    Raw src = is_root ? flat_list(*w, inputs[0], out, true) : Raw();
    Raw dst = output(*w, out, false);
    w->issue = [src, dst, root](ncclComm_t comm, ncclRedOp_t) {
        const void *p = src.t.defined() ? src.p() : nullptr;
        return ncclScatter(p, dst.p(), dst.n, dst.type, root, comm, nullptr);
    };
    return enqueue(w);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::reduce_scatter(std::vector<at::Tensor> &outputs,
                                  std::vector<std::vector<at::Tensor>> &inputs,
                                  const c10d::ReduceScatterOptions &opts)
{
    const at::Tensor &out = single(outputs, "reduce_scatter");
    if (inputs.size() != 1) {
        refuse("reduce_scatter: expects one input list per process, got " +
               std::to_string(inputs.size()));
    }
    check_list(inputs[0], out, size_, "reduce_scatter");
    auto w = make_work(c10d::OpType::REDUCE_SCATTER, "braid:reduce_scatter", inputs[0], outputs,
                       opts.timeout);
    w->sync = !opts.asyncOp;
    w->redop = red_op(opts.reduceOp, out, "reduce_scatter");
    Raw src = flat_list(*w, inputs[0], out, true);
    Raw dst = output(*w, out, false);
    issue_reduce_scatter(*w, src, dst);
    return enqueue(w);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::_reduce_scatter_base(at::Tensor &output_tensor, at::Tensor &input_tensor,
                                        const c10d::ReduceScatterOptions &opts)
{
    const char *call = "reduce_scatter_tensor";
    check_tensor(output_tensor, call);
    check_like(input_tensor, output_tensor, output_tensor.numel() * size_, call);
    auto w = make_work(c10d::OpType::_REDUCE_SCATTER_BASE, "braid:reduce_scatter_tensor",
                       {input_tensor}, {output_tensor}, opts.timeout);
    w->sync = !opts.asyncOp;
    w->redop = red_op(opts.reduceOp, output_tensor, call);
    Raw src = input(input_tensor);
    Raw dst = output(*w, output_tensor, false);
    issue_reduce_scatter(*w, src, dst);
    return enqueue(w);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::allgather_into_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                                   std::vector<at::Tensor> &inputs,
                                                   const c10d::AllgatherOptions &opts)
{
    const char *call = "all_gather_into_tensor (coalesced)";
    if (outputs.size() != inputs.size() || inputs.empty()) {
        refuse(std::string(call) + ": expects as many outputs as inputs, at least one");
    }
    auto w = make_work(c10d::OpType::ALLGATHER_COALESCED, "braid:all_gather_into_tensor", inputs,
                       outputs, opts.timeout);
    w->sync = !opts.asyncOp;
    std::vector<std::pair<Raw, Raw>> bufs;
    for (size_t i = 0; i < inputs.size(); i++) {
        check_tensor(inputs[i], call);
        check_like(outputs[i], inputs[i], inputs[i].numel() * size_, call);
        bufs.emplace_back(input(inputs[i]), output(*w, outputs[i], false));
    }
    w->issue = [bufs](ncclComm_t comm, ncclRedOp_t) {
        return grouped([&] {
            ncclResult_t res = ncclSuccess;
            for (size_t i = 0; i < bufs.size() && res == ncclSuccess; i++) {
                const Raw &s = bufs[i].first;
                res = ncclAllGather(s.p(), bufs[i].second.p(), s.n, s.type, comm, nullptr);
            }
            return res;
        });
    };
    return enqueue(w);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupBraid::reduce_scatter_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                                   std::vector<at::Tensor> &inputs,
                                                   const c10d::ReduceScatterOptions &opts)
{
    const char *call = "reduce_scatter_tensor (coalesced)";
    if (outputs.size() != inputs.size() || inputs.empty()) {
        refuse(std::string(call) + ": expects as many outputs as inputs, at least one");
    }
    auto w = make_work(c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, "braid:reduce_scatter_tensor",
                       inputs, outputs, opts.timeout);
    w->sync = !opts.asyncOp;
    // One reduction for the whole group, so one dtype.
    w->redop = red_op(opts.reduceOp, outputs[0], call);
    std::vector<std::pair<Raw, Raw>> bufs;
    for (size_t i = 0; i < inputs.size(); i++) {
        check_like(outputs[i], outputs[0], outputs[i].numel(), call);
        check_like(inputs[i], outputs[0], outputs[i].numel() * size_, call);
        bufs.emplace_back(input(inputs[i]), output(*w, outputs[i], false));
    }
    w->issue = [bufs](ncclComm_t comm, ncclRedOp_t op) {
        return grouped([&] {
            ncclResult_t res = ncclSuccess;
            for (size_t i = 0; i < bufs.size() && res == ncclSuccess; i++) {
                const Raw &d = bufs[i].second;
                res = ncclReduceScatter(bufs[i].first.p(), d.p(), d.n, d.type, op, comm, nullptr);
            }
            return res;
        });
    };
    return enqueue(w);
}

namespace
{

/* Element offsets and counts (in Braid elements) of the blocks of a tensor split along
 * dimension 0: `splits` rows per rank, or equal blocks when empty. */
void split_blocks(const at::Tensor &t, const std::vector<int64_t> &splits, int size,
                  const char *what, std::vector<size_t> &offset, std::vector<size_t> &count)
{
    int64_t rows = t.dim() > 0 ? t.size(0) : 1;
    size_t row = rows > 0 ? static_cast<size_t>(t.numel() / rows) : 0;
    row *= t.is_complex() ? 2 : 1;
    std::vector<int64_t> s = splits;
    if (s.empty()) {
        if (rows % size != 0) {
            refuse(std::string("all_to_all_single: the ") + what + " tensor's first dimension (" +
                   std::to_string(rows) + ") does not divide by the group size (" +
                   std::to_string(size) + ")");
        }
        s.assign(size, rows / size);
    }
    if (static_cast<int>(s.size()) != size) {
        refuse(std::string("all_to_all_single: ") + what + " split sizes need one entry per rank");
    }
    int64_t total = 0;
    for (int p = 0; p < size; p++) {
        if (s[p] < 0) {
            refuse(std::string("all_to_all_single: negative ") + what + " split size");
        }
        offset.push_back(static_cast<size_t>(total) * row);
        count.push_back(static_cast<size_t>(s[p]) * row);
        total += s[p];
    }
    if (total != rows) {
        refuse(std::string("all_to_all_single: the ") + what + " split sizes add up to " +
               std::to_string(total) + ", not " + std::to_string(rows) + " rows");
    }
}

} // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::alltoall_base(at::Tensor &output_tensor,
                                                                at::Tensor &input_tensor,
                                                                std::vector<int64_t> &output_splits,
                                                                std::vector<int64_t> &input_splits,
                                                                const c10d::AllToAllOptions &opts)
{
    const char *call = "all_to_all_single";
    check_tensor(input_tensor, call);
    check_like(output_tensor, input_tensor, output_tensor.numel(), call);
    std::vector<size_t> soff, scount, roff, rcount;
    split_blocks(input_tensor, input_splits, size_, "input", soff, scount);
    split_blocks(output_tensor, output_splits, size_, "output", roff, rcount);
    if (input_tensor.numel() > 0 && input_tensor.data_ptr() == output_tensor.data_ptr()) {
        refuse(std::string(call) + ": the input and output tensors share memory (in place is "
               "not supported)");
    }
    auto w = make_work(c10d::OpType::ALLTOALL_BASE, "braid:all_to_all_single", {input_tensor},
                       {output_tensor}, opts.timeout);
    w->sync = !opts.asyncOp;
    Raw src = input(input_tensor);
    Raw dst = output(*w, output_tensor, false);
    // One braidAlltoAllV: counts and offsets per rank, in Braid's elements; the ranks check
    // each other's split sizes (a disagreement fails the call on the receiving rank).
    w->issue = [=](ncclComm_t comm, ncclRedOp_t) {
        return braidAlltoAllV(src.p(), scount.data(), soff.data(), dst.p(), rcount.data(),
                              roff.data(), src.type, comm, nullptr);
    };
    return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::alltoall(std::vector<at::Tensor> &outputs,
                                                           std::vector<at::Tensor> &inputs,
                                                           const c10d::AllToAllOptions &opts)
{
    const char *call = "all_to_all";
    if (static_cast<int>(outputs.size()) != size_ || static_cast<int>(inputs.size()) != size_) {
        refuse(std::string(call) + ": expects lists of " + std::to_string(size_) +
               " tensors (one per rank)");
    }
    auto w = make_work(c10d::OpType::ALLTOALL, "braid:all_to_all", inputs, outputs, opts.timeout);
    w->sync = !opts.asyncOp;
    std::vector<Raw> src, dst;
    for (int p = 0; p < size_; p++) {
        check_tensor(inputs[p], call);
        check_like(outputs[p], inputs[p], outputs[p].numel(), call);
        src.push_back(input(inputs[p]));
        dst.push_back(output(*w, outputs[p], false));
    }
    w->issue = [src, dst](ncclComm_t comm, ncclRedOp_t) {
        return grouped([&] {
            ncclResult_t res = ncclSuccess;
            for (size_t p = 0; p < src.size() && res == ncclSuccess; p++) {
                int peer = static_cast<int>(p);
                res = ncclSend(src[p].p(), src[p].n, src[p].type, peer, comm, nullptr);
                if (res == ncclSuccess) {
                    res = ncclRecv(dst[p].p(), dst[p].n, dst[p].type, peer, comm, nullptr);
                }
            }
            return res;
        });
    };
    return enqueue(w);
}

std::string ProcessGroupBraid::p2p_key(int src, int dst, int tag)
{
    return "braid_p2p/" + std::to_string(src) + "/" + std::to_string(dst) + "/" +
           std::to_string(tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::send(std::vector<at::Tensor> &tensors, int dst,
                                                       int tag)
{
    // Braid, as NCCL, has no tags: sends and receives between two ranks match in order.
    const at::Tensor &t = single(tensors, "send");
    auto w = make_work(c10d::OpType::SEND, "braid:send", tensors, tensors, c10d::kUnsetTimeout);
    Raw b = input(t);
    w->p2p = p2p_flush_;
    w->issue = [b, dst](ncclComm_t comm, ncclRedOp_t) {
        return ncclSend(b.p(), b.n, b.type, dst, comm, nullptr);
    };
    // Announced at the call, before it can wait on anything, so that a receive from any
    // source on `dst` finds it (one round trip to the store per send).
    store_->add(p2p_key(rank_, dst, tag), 1);
    return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::recv(std::vector<at::Tensor> &tensors, int src,
                                                       int tag)
{
    const at::Tensor &t = single(tensors, "recv");
    auto w = make_work(c10d::OpType::RECV, "braid:recv", tensors, tensors, c10d::kUnsetTimeout);
    Raw b = output(*w, t, false);
    w->p2p = p2p_flush_;
    w->issue = [b, src](ncclComm_t comm, ncclRedOp_t) {
        return ncclRecv(b.p(), b.n, b.type, src, comm, nullptr);
    };
    {
        // This message from `src` is spoken for: a later receive from any source must
        // not count it as waiting.
        std::lock_guard<std::mutex> lock(recv_mu_);
        received_[{src, tag}]++;
    }
    return enqueue(w);
}

int ProcessGroupBraid::wait_any_source(int tag)
{
    // Polls the senders' counters, from the rank after this one round, and backs off
    // from 50 us to 10 ms between rounds: a receive from any source waits for a person's
    // timescale message more often than for a tight loop's.
    std::chrono::microseconds pause(50);
    for (;;) {
        for (int i = 1; i <= size_; i++) {
            int src = (rank_ + i) % size_;
            int64_t sent = store_->add(p2p_key(src, rank_, tag), 0);
            std::lock_guard<std::mutex> lock(recv_mu_);
            int64_t &got = received_[{src, tag}];
            if (sent > got) {
                got++;
                return src;
            }
        }
        if (failed_) {
            std::lock_guard<std::mutex> lock(mu_);
            throw std::runtime_error(
                timed_out_.empty()
                    ? std::string("braid:recvAnySource: the process group was destroyed while "
                                  "waiting for a sender")
                    : timed_out_ + " waiting for a sender (receive from any source)");
        }
        std::this_thread::sleep_for(pause);
        pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
    }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::recvAnysource(std::vector<at::Tensor> &tensors,
                                                                int tag)
{
    // Braid, as NCCL, has no wildcard receive: the communication thread finds a rank
    // whose announced sends to this one are ahead of those received (wait_any_source),
    // then receives from it.
    const at::Tensor &t = single(tensors, "recv");
    auto w = make_work(c10d::OpType::RECVANYSOURCE, "braid:recvAnySource", tensors, tensors,
                       c10d::kUnsetTimeout);
    Raw b = output(*w, t, false);
    w->p2p = p2p_flush_;
    BraidWork *self = w.get(); // the batch holds the Work while its issue runs
    w->issue = [this, b, tag, self](ncclComm_t comm, ncclRedOp_t) {
        int src = wait_any_source(tag);
        self->source_rank = src;
        return ncclRecv(b.p(), b.n, b.type, src, comm, nullptr);
    };
    return enqueue(w);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::barrier(const c10d::BarrierOptions &opts)
{
    // Every rank must enter before any leaves: a one-byte all-reduce gives that.
    auto w = make_work(c10d::OpType::BARRIER, "braid:barrier", {}, {}, opts.timeout);
    w->sync = !opts.asyncOp;
    Raw b = raw(at::zeros({1}, at::TensorOptions().dtype(at::kByte)));
    w->issue = [b](ncclComm_t comm, ncclRedOp_t) {
        return ncclAllReduce(b.p(), b.p(), 1, ncclUint8, ncclSum, comm, nullptr);
    };
    return enqueue(w);
}

} // namespace braid_torch
