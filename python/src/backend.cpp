#include "backend.hpp"

#include <torch/csrc/utils/pybind.h>

#include <map>
#include <memory>
#include <optional>
#include <variant>

#include "tensors.hpp"
#include "torch_store.hpp"
#include "work.hpp"

namespace rdmacoll_torch {

namespace {

using c10d::OpType;
using rdmacoll::Collective;

RdmacollBackend* world_owner = nullptr;  // the backend that made rdmacoll's world, if alive
std::mutex world_mutex;

// torch's reduce op as rdmacoll's; PREMUL_SUM is a SUM of inputs multiplied first.
std::variant<rdmacoll::ReduceOp, std::string> to_op(const c10d::ReduceOp& op, const at::Tensor& t) {
  const bool complex = t.is_complex();
  auto not_for_complex = [&](const char* name) -> std::variant<rdmacoll::ReduceOp, std::string> {
    return std::string(name) +
           " of complex tensors is not defined (torch's backends refuse it too)";
  };
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PREMUL_SUM:
      return rdmacoll::ReduceOp::Sum;
    case c10d::ReduceOp::AVG:
      return rdmacoll::ReduceOp::Avg;
    case c10d::ReduceOp::PRODUCT:
      if (complex) return not_for_complex("PRODUCT");
      return rdmacoll::ReduceOp::Product;
    case c10d::ReduceOp::MIN:
      if (complex) return not_for_complex("MIN");
      return rdmacoll::ReduceOp::Min;
    case c10d::ReduceOp::MAX:
      if (complex) return not_for_complex("MAX");
      return rdmacoll::ReduceOp::Max;
    case c10d::ReduceOp::BAND:
      return rdmacoll::ReduceOp::BAnd;
    case c10d::ReduceOp::BOR:
      return rdmacoll::ReduceOp::BOr;
    case c10d::ReduceOp::BXOR:
      return rdmacoll::ReduceOp::BXor;
    default:
      return "reduce op " + std::to_string(static_cast<int>(op.op_)) + " is not supported";
  }
}

// Why `t` cannot be reduced (its dtype has no arithmetic in the core, or PREMUL_SUM on a
// non-floating tensor), or nullopt.
std::optional<std::string> not_reducible(const at::Tensor& t, const c10d::ReduceOp& op) {
  if (!element_dtype(t)) {
    return std::string("reductions of ") + c10::toString(t.scalar_type()) +
           " are not supported (rdmacoll reduces bool, integers up to 64 bits, float16, bfloat16, "
           "float32, float64 and complex); all_gather and broadcast move any dtype";
  }
  if (op.op_ == c10d::ReduceOp::PREMUL_SUM) {
    if (!at::isFloatingType(t.scalar_type()) && !t.is_complex()) {
      return std::string("PREMUL_SUM needs a floating-point tensor, got ") +
             c10::toString(t.scalar_type());
    }
    if (!compat::premul_factor(op)) return std::string("PREMUL_SUM without a factor");
  }
  return std::nullopt;
}

// PREMUL_SUM: multiplies `dense` (ours to change) by the op's factor.
void premultiply(at::Tensor& dense, const c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return;
  const at::Tensor factor = *compat::premul_factor(op);
  dense.mul_(factor.to(dense.device()));
}

std::string tensor_count(const char* what, size_t got, const char* expected) {
  return std::string(what) + ": " + std::to_string(got) + " tensors, expected " + expected;
}

}  // namespace

RdmacollBackend::RdmacollBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                 std::chrono::milliseconds timeout, Kind kind)
    : compat::Base(rank, size), kind_(kind) {
  auto ours = std::make_shared<TorchStore>(store);
  std::lock_guard lock(world_mutex);
  try {
    switch (kind) {
      case Kind::World: {
        // A default group made again (init after destroy) replaces the world.
        if (rdmacoll::is_initialized()) rdmacoll::destroy_process_group();
        rdmacoll::InitOptions o;
        o.store = ours;
        o.rank = rank;
        o.world_size = size;
        o.timeout = timeout;
        rdmacoll::init_process_group(o);
        world_owner = this;
        group_ = rdmacoll::Group();
        break;
      }
      case Kind::Member:
        group_ = rdmacoll::new_member_group(ours, rank, size, timeout);
        break;
      case Kind::Standalone:
        group_ = rdmacoll::new_standalone_group(ours, rank, size, timeout);
        break;
    }
  } catch (const rdmacoll::InvalidArgument&) {
    std::rethrow_exception(to_torch_error(std::current_exception()));
  } catch (const rdmacoll::Error& e) {
    // The group's rendezvous over torch's store: a rank that never came, a store gone away.
    std::rethrow_exception(compat::store_error(std::string("rdmacoll: ") + e.what()));
  }
#if !RDMACOLL_TORCH2
  init();
#endif
}

RdmacollBackend::~RdmacollBackend() {
  release(false);
}

void RdmacollBackend::release(bool abort) {
  std::lock_guard once(release_mutex_);
  if (released_) return;
  released_ = true;
  // Python may free the group holding the GIL, and freeing waits for the group's worker, which
  // may need the GIL to free the tensors of its last work or run a future's Python callback.
  std::optional<py::gil_scoped_release> no_gil;
  if (Py_IsInitialized() && PyGILState_Check()) no_gil.emplace();
  std::lock_guard lock(world_mutex);
  try {
    if (world_owner == this) {
      world_owner = nullptr;
      if (abort) {
        rdmacoll::abort_process_group();
      } else {
        rdmacoll::destroy_process_group();
      }
    } else if (!group_.is_default() && kind_ != Kind::World) {
      rdmacoll::destroy_group(group_);
    }
  } catch (const std::exception&) {
    // A world already gone (destroyed by a newer default group) or a failed peer: nothing is
    // left to free.
  }
}

int RdmacollBackend::global_rank(int group_rank) const {
  return group_.is_default() ? group_rank : group_.ranks().at(group_rank);
}

void RdmacollBackend::refuse(const Issue& call, const std::string& why) {
  try {
    (void)rdmacoll::reject(call.collective, why, group_, true);
  } catch (const rdmacoll::Error&) {
    // The group cannot run the call at all (broken, destroyed): this rank raises regardless.
  }
  std::rethrow_exception(
      compat::argument_error(std::string("rdmacoll: ") + call.title + ": " + why));
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::issue(const Issue& call,
                                                      std::vector<at::Tensor> outputs,
                                                      const std::vector<at::Tensor>& inputs,
                                                      std::vector<at::Tensor> keep_alive,
                                                      const std::function<rdmacoll::Work()>& start,
                                                      std::function<void()> after) {
  rdmacoll::Work w;
  try {
    w = start();
  } catch (const rdmacoll::Error&) {
    std::rethrow_exception(to_torch_error(std::current_exception()));
  }
  auto work = c10::make_intrusive<WorkRdmacoll>(rank_, call.type, call.title, outputs, inputs);
  for (auto& t : outputs)
    keep_alive.push_back(t);
  work->arm(w, std::move(keep_alive), std::move(after));
  if (coalescing_) coalesced_.push_back(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::completed(const Issue& call,
                                                          std::vector<at::Tensor> outputs) {
  auto work = c10::make_intrusive<WorkRdmacoll>(rank_, call.type, call.title, outputs,
                                                std::vector<at::Tensor>{});
  work->arm(rdmacoll::Work(), {});
  if (coalescing_) coalesced_.push_back(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
  const Issue call{OpType::BROADCAST, "rdmacoll:broadcast", Collective::Broadcast};
  if (tensors.size() != 1) refuse(call, tensor_count("broadcast", tensors.size(), "1"));
  if (auto why = unusable(tensors[0], "the tensor")) refuse(call, *why);
  if (opts.rootRank < 0 || opts.rootRank >= size_ || opts.rootTensor != 0) {
    refuse(call, "root rank " + std::to_string(opts.rootRank) + " (tensor " +
                     std::to_string(opts.rootTensor) + ") is not a rank of this group of " +
                     std::to_string(size_));
  }
  const Staged t = stage_output(tensors[0], false, /*in_place=*/true);
  const int src = global_rank(static_cast<int>(opts.rootRank));
  rdmacoll::Tensor v = t.view;
  return issue(
      call, tensors, {}, {t.dense}, [&] { return rdmacoll::broadcast(v, src, group_, true); },
      [t] { copy_back(t); });
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  const Issue call{OpType::ALLREDUCE, "rdmacoll:all_reduce", Collective::AllReduce};
  if (tensors.size() != 1) refuse(call, tensor_count("all_reduce", tensors.size(), "1"));
  if (tensors[0].is_sparse()) return sparse_allreduce(call, tensors[0], opts);
  if (auto why = unusable(tensors[0], "the tensor")) refuse(call, *why);
  return allreduce_packed(call, tensors, opts.reduceOp);
}

#if RDMACOLL_TORCH2
c10::intrusive_ptr<c10d::Work> RdmacollBackend::allreduce_sparse(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  return allreduce(tensors, opts);
}
#endif

c10::intrusive_ptr<c10d::Work> RdmacollBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const Issue call{OpType::ALLREDUCE_COALESCED, "rdmacoll:all_reduce_coalesced",
                   Collective::AllReduce};
  for (const auto& t : tensors) {
    if (auto why = unusable(t, "a tensor")) refuse(call, *why);
  }
  // One call per dtype, in the order each dtype first appears (the same on every rank).
  std::vector<std::pair<at::ScalarType, std::vector<at::Tensor>>> by_dtype;
  for (const auto& t : tensors) {
    auto it = std::find_if(by_dtype.begin(), by_dtype.end(),
                           [&](const auto& e) { return e.first == t.scalar_type(); });
    if (it == by_dtype.end()) {
      by_dtype.push_back({t.scalar_type(), {t}});
    } else {
      it->second.push_back(t);
    }
  }
  c10::intrusive_ptr<c10d::Work> last;
  for (auto& [dtype, group] : by_dtype)
    last = allreduce_packed(call, group, opts.reduceOp);
  return last ? last : completed(call, tensors);
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::allreduce_packed(const Issue& call,
                                                                 std::vector<at::Tensor> tensors,
                                                                 const c10d::ReduceOp& reduce_op) {
  const at::Tensor& first = tensors.front();
  if (auto why = not_reducible(first, reduce_op)) refuse(call, *why);
  const auto op = to_op(reduce_op, first);
  if (const auto* why = std::get_if<std::string>(&op)) refuse(call, *why);
  // One tensor: in place (a staging copy only when it is not contiguous). Several: packed.
  Staged packed;
  if (tensors.size() == 1) {
    packed = stage_output(first, false, /*in_place=*/true);
  } else {
    std::vector<at::Tensor> flat;
    for (const auto& t : tensors)
      flat.push_back(t.reshape(-1));
    packed.dense = at::cat(flat);
    packed.view = flat_view(packed.dense, false);
  }
  if (reduce_op.op_ == c10d::ReduceOp::PREMUL_SUM) {
    if (!packed.copied()) packed.dense = packed.dense.clone(), packed.user = first;
    premultiply(packed.dense, reduce_op);
    packed.view = flat_view(packed.dense, false);
  }
  rdmacoll::Tensor v = packed.view;
  const rdmacoll::ReduceOp rop = std::get<rdmacoll::ReduceOp>(op);
  std::function<void()> after;
  if (tensors.size() == 1) {
    after = [packed] { copy_back(packed); };
  } else {
    after = [packed, tensors] {
      int64_t offset = 0;
      for (const auto& t : tensors) {
        t.copy_(packed.dense.narrow(0, offset, t.numel()).view(t.sizes()));
        offset += t.numel();
      }
    };
  }
  return issue(
      call, tensors, {}, {packed.dense}, [&] { return rdmacoll::all_reduce(v, rop, group_, true); },
      std::move(after));
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::sparse_allreduce(
    const Issue& call, at::Tensor& tensor, const c10d::AllreduceOptions& opts) {
  // As gloo: every rank's indices and values are gathered and summed by coalescing. The sizes
  // of the second gather depend on the first, so this runs to completion here.
  if (opts.reduceOp.op_ != c10d::ReduceOp::SUM) {
    refuse(call, "sparse tensors are reduced with SUM only (as gloo does)");
  }
  if (!tensor.device().is_cpu()) refuse(call, *unusable(tensor, "the tensor"));
  try {
    const at::Tensor input = tensor.coalesce();
    const int p = size_;
    const int64_t nnz = input._nnz();
    at::Tensor counts = at::empty({p}, at::kLong);
    at::Tensor mine = at::full({1}, nnz, at::kLong);
    rdmacoll::Tensor cv = flat_view(counts, false), mv = flat_view(mine, false);
    rdmacoll::all_gather_into_tensor(cv, mv, group_).wait();
    const int64_t most = counts.max().item<int64_t>();
    const at::Tensor indices = input._indices();  // sparse_dim x nnz
    const at::Tensor values = input._values();    // nnz x dense sizes
    at::Tensor pad_i = at::zeros({indices.size(0), most}, indices.options());
    pad_i.narrow(1, 0, nnz).copy_(indices);
    std::vector<int64_t> vshape(values.sizes().begin(), values.sizes().end());
    vshape[0] = most;
    at::Tensor pad_v = at::zeros(vshape, values.options());
    pad_v.narrow(0, 0, nnz).copy_(values);
    std::vector<int64_t> all_i_shape{p, indices.size(0), most};
    at::Tensor all_i = at::empty(all_i_shape, indices.options());
    vshape.insert(vshape.begin(), p);
    at::Tensor all_v = at::empty(vshape, values.options());
    rdmacoll::Tensor aiv = flat_view(all_i, true), piv = flat_view(pad_i, true);
    rdmacoll::all_gather_into_tensor(aiv, piv, group_).wait();
    rdmacoll::Tensor avv = flat_view(all_v, true), pvv = flat_view(pad_v, true);
    rdmacoll::all_gather_into_tensor(avv, pvv, group_).wait();
    std::vector<at::Tensor> is, vs;
    for (int r = 0; r < p; ++r) {
      const int64_t n = counts[r].item<int64_t>();
      is.push_back(all_i[r].narrow(1, 0, n));
      vs.push_back(all_v[r].narrow(0, 0, n));
    }
    at::Tensor sum =
        at::sparse_coo_tensor(at::cat(is, 1), at::cat(vs, 0), input.sizes()).coalesce();
    tensor.copy_(sum);
    return completed(call, {sum});
  } catch (const rdmacoll::Error&) {
    std::rethrow_exception(to_torch_error(std::current_exception()));
  }
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::_allgather_base(at::Tensor& output,
                                                                at::Tensor& input,
                                                                const c10d::AllgatherOptions&) {
  const Issue call{OpType::_ALLGATHER_BASE, "rdmacoll:all_gather_into_tensor",
                   Collective::AllGather};
  if (auto why = unusable(output, "the output")) refuse(call, *why);
  if (auto why = unusable(input, "the input")) refuse(call, *why);
  // The core converts between its dtypes (the documentation's example gathers int64 into
  // float32); other dtypes (float8, uint32, complex) move as bytes and must match.
  const bool convertible =
      element_dtype(output) && element_dtype(input) && !output.is_complex() && !input.is_complex();
  const bool bytes = !convertible;
  if (bytes && output.scalar_type() != input.scalar_type()) {
    refuse(call, std::string("the input is ") + c10::toString(input.scalar_type()) +
                     " and the output " + c10::toString(output.scalar_type()) +
                     "; rdmacoll converts between bool, integer and real float dtypes only");
  }
  // Any output shape with the right element count, as NCCL takes it: both go as flat views.
  const Staged out = stage_output(output, bytes);
  const Staged in = stage_input(input, bytes);
  rdmacoll::Tensor o = out.view, i = in.view;
  return issue(
      call, {output}, {input}, {out.dense, in.dense},
      [&] { return rdmacoll::all_gather_into_tensor(o, i, group_, true); },
      [out] { copy_back(out); });
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const Issue call{OpType::ALLGATHER, "rdmacoll:all_gather", Collective::AllGather};
  if (inputs.size() != 1 || outputs.size() != 1) {
    refuse(call, tensor_count("all_gather input", inputs.size(), "1 (and one output list)"));
  }
  const at::Tensor& input = inputs[0];
  std::vector<at::Tensor>& outs = outputs[0];
  if (auto why = unusable(input, "the input")) refuse(call, *why);
  if (static_cast<int>(outs.size()) != size_) {
    refuse(call, "the output list has " + std::to_string(outs.size()) +
                     " tensors, expected the group size " + std::to_string(size_));
  }
  for (size_t r = 0; r < outs.size(); ++r) {
    if (auto why = unusable(outs[r], "an output")) refuse(call, *why);
    if (outs[r].numel() != input.numel() || outs[r].scalar_type() != outs[0].scalar_type()) {
      refuse(call, "output " + std::to_string(r) + " has " + std::to_string(outs[r].numel()) +
                       " elements of " + c10::toString(outs[r].scalar_type()) +
                       "; every output needs the input's " + std::to_string(input.numel()) +
                       " elements and the first output's dtype");
    }
  }
  const bool convertible = element_dtype(outs[0]) && element_dtype(input) &&
                           !outs[0].is_complex() && !input.is_complex();
  if (!convertible && outs[0].scalar_type() != input.scalar_type()) {
    refuse(call, std::string("the input is ") + c10::toString(input.scalar_type()) +
                     " and the outputs " + c10::toString(outs[0].scalar_type()) +
                     "; rdmacoll converts between bool, integer and real float dtypes only");
  }
  // One gather into a staging tensor, copied into each output (any strides) when done.
  at::Tensor staging = at::empty({size_, input.numel()}, outs[0].options());
  const Staged in = stage_input(input, !convertible);
  rdmacoll::Tensor o = flat_view(staging, !convertible), i = in.view;
  std::vector<at::Tensor> targets = outs;
  return issue(
      call, outs, inputs, {staging, in.dense},
      [&] { return rdmacoll::all_gather_into_tensor(o, i, group_, true); },
      [staging, targets] {
        for (size_t r = 0; r < targets.size(); ++r)
          targets[r].copy_(staging[static_cast<int64_t>(r)].view(targets[r].sizes()));
      });
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const Issue call{OpType::_REDUCE_SCATTER_BASE, "rdmacoll:reduce_scatter_tensor",
                   Collective::ReduceScatter};
  if (auto why = unusable(output, "the output")) refuse(call, *why);
  if (auto why = unusable(input, "the input")) refuse(call, *why);
  return reduce_scatter_packed(call, {output}, {input}, opts.reduceOp);
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const Issue call{OpType::REDUCE_SCATTER, "rdmacoll:reduce_scatter", Collective::ReduceScatter};
  if (outputs.size() != 1 || inputs.size() != 1) {
    refuse(call, tensor_count("reduce_scatter output", outputs.size(), "1 (and one input list)"));
  }
  const at::Tensor& out = outputs[0];
  if (auto why = unusable(out, "the output")) refuse(call, *why);
  if (static_cast<int>(inputs[0].size()) != size_) {
    refuse(call, "the input list has " + std::to_string(inputs[0].size()) +
                     " tensors, expected the group size " + std::to_string(size_));
  }
  for (const auto& t : inputs[0]) {
    if (auto why = unusable(t, "an input")) refuse(call, *why);
    if (t.numel() != out.numel() || t.scalar_type() != out.scalar_type()) {
      refuse(call, "every input must have the output's " + std::to_string(out.numel()) +
                       " elements of " + c10::toString(out.scalar_type()));
    }
  }
  std::vector<at::Tensor> flat;
  for (const auto& t : inputs[0])
    flat.push_back(t.reshape(-1));
  return reduce_scatter_packed(call, {out}, {at::cat(flat)}, opts.reduceOp);
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::reduce_scatter_packed(
    const Issue& call, std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs,
    const c10d::ReduceOp& reduce_op) {
  const at::Tensor& first = inputs.front();
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].scalar_type() != first.scalar_type() ||
        outputs[k].scalar_type() != first.scalar_type()) {
      refuse(call, "inputs and outputs must share one dtype, got " +
                       std::string(c10::toString(inputs[k].scalar_type())) + " and " +
                       c10::toString(outputs[k].scalar_type()));
    }
  }
  if (auto why = not_reducible(first, reduce_op)) refuse(call, *why);
  const auto op = to_op(reduce_op, first);
  if (const auto* why = std::get_if<std::string>(&op)) refuse(call, *why);
  const int64_t p = size_;
  Staged in, out;
  std::function<void()> after;
  if (inputs.size() == 1) {
    in = stage_input(first, false);
    out = stage_output(outputs[0], false);
    after = [out] { copy_back(out); };
  } else {
    // Coalesced: piece r of the packed input is every input's piece r, so one call reduces
    // them all and this rank's piece holds every output, one after the other.
    std::vector<at::Tensor> pieces;
    int64_t total = 0;
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (inputs[k].numel() != p * outputs[k].numel()) {
        refuse(call, "input " + std::to_string(k) + " has " + std::to_string(inputs[k].numel()) +
                         " elements, expected the group size " + std::to_string(p) +
                         " x its output's " + std::to_string(outputs[k].numel()));
      }
      pieces.push_back(inputs[k].reshape({p, -1}));
      total += outputs[k].numel();
    }
    in.dense = at::cat(pieces, 1).reshape(-1);
    in.view = flat_view(in.dense, false);
    out.dense = at::empty({total}, first.options());
    out.view = flat_view(out.dense, false);
    after = [out, outputs] {
      int64_t offset = 0;
      for (const auto& o : outputs) {
        o.copy_(out.dense.narrow(0, offset, o.numel()).view(o.sizes()));
        offset += o.numel();
      }
    };
  }
  if (reduce_op.op_ == c10d::ReduceOp::PREMUL_SUM) {
    if (!in.copied() || in.dense.is_same(first)) in.dense = in.dense.clone();
    premultiply(in.dense, reduce_op);
    in.view = flat_view(in.dense, false);
  }
  rdmacoll::Tensor o = out.view, i = in.view;
  const rdmacoll::ReduceOp rop = std::get<rdmacoll::ReduceOp>(op);
  return issue(
      call, outputs, inputs, {in.dense, out.dense},
      [&] { return rdmacoll::reduce_scatter_tensor(o, i, rop, group_, true); }, std::move(after));
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::barrier(const c10d::BarrierOptions&) {
  const Issue call{OpType::BARRIER, "rdmacoll:barrier", Collective::Barrier};
  return issue(call, {}, {}, {}, [&] { return rdmacoll::barrier(group_, true); });
}

#if RDMACOLL_TORCH2
c10::intrusive_ptr<c10d::Work> RdmacollBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const Issue call{OpType::COALESCED, "rdmacoll:all_gather_into_tensor_coalesced",
                   Collective::AllGather};
  if (outputs.size() != inputs.size()) {
    refuse(call, std::to_string(outputs.size()) + " outputs for " + std::to_string(inputs.size()) +
                     " inputs");
  }
  if (inputs.size() == 1) return _allgather_base(outputs[0], inputs[0], opts);
  const int64_t p = size_;
  // Every input's bytes packed into one, gathered in one call; rank r's block of the gather
  // holds every input of rank r, one after the other.
  std::vector<at::Tensor> packed_in;
  int64_t total = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (auto why = unusable(inputs[k], "an input")) refuse(call, *why);
    if (auto why = unusable(outputs[k], "an output")) refuse(call, *why);
    if (inputs[k].scalar_type() != outputs[k].scalar_type() ||
        outputs[k].numel() != p * inputs[k].numel()) {
      refuse(call, "output " + std::to_string(k) + " must have input " + std::to_string(k) +
                       "'s dtype and the group size x its elements");
    }
    packed_in.push_back(inputs[k].contiguous().view(-1).view(at::kByte));
    total += static_cast<int64_t>(inputs[k].nbytes());
  }
  at::Tensor in = at::cat(packed_in);
  at::Tensor out = at::empty({p * total}, in.options());
  rdmacoll::Tensor o = flat_view(out, true), i = flat_view(in, true);
  std::vector<at::Tensor> targets = outputs;
  return issue(
      call, outputs, inputs, {in, out},
      [&] { return rdmacoll::all_gather_into_tensor(o, i, group_, true); },
      [out, targets, p, total] {
        const at::Tensor blocks = out.view({p, total});
        int64_t offset = 0;
        for (const auto& t : targets) {
          const int64_t n = static_cast<int64_t>(t.nbytes()) / p;
          const at::Tensor mine = blocks.narrow(1, offset, n);
          if (t.is_contiguous()) {
            t.view(-1).view(at::kByte).view({p, n}).copy_(mine);
          } else {
            at::Tensor dense = at::empty(t.sizes(), t.options());
            dense.view(-1).view(at::kByte).view({p, n}).copy_(mine);
            t.copy_(dense);
          }
          offset += n;
        }
      });
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const Issue call{OpType::COALESCED, "rdmacoll:reduce_scatter_tensor_coalesced",
                   Collective::ReduceScatter};
  if (outputs.size() != inputs.size()) {
    refuse(call, std::to_string(outputs.size()) + " outputs for " + std::to_string(inputs.size()) +
                     " inputs");
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (auto why = unusable(inputs[k], "an input")) refuse(call, *why);
    if (auto why = unusable(outputs[k], "an output")) refuse(call, *why);
  }
  if (inputs.empty()) return completed(call, {});
  return reduce_scatter_packed(call, outputs, inputs, opts.reduceOp);
}

void RdmacollBackend::startCoalescing() {
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::endCoalescing() {
  coalescing_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.swap(coalesced_);
  // A group completes its calls in issue order: the last one done means all are.
  if (!works.empty()) return works.back();
  auto work =
      c10::make_intrusive<WorkRdmacoll>(rank_, OpType::COALESCED, "rdmacoll:coalesced",
                                        std::vector<at::Tensor>{}, std::vector<at::Tensor>{});
  work->arm(rdmacoll::Work(), {});
  return work;
}
#endif

void leave_at_exit() {
  std::optional<py::gil_scoped_release> no_gil;
  if (Py_IsInitialized() && PyGILState_Check()) no_gil.emplace();
  std::lock_guard lock(world_mutex);
  world_owner = nullptr;
  rdmacoll::abort_process_group();
}

}  // namespace rdmacoll_torch
