// The reductions of the torch backend: all_reduce (dense, packed when coalesced, and sparse as
// gloo does it), reduce_scatter_tensor and its list and coalesced forms, PREMUL_SUM.

#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <variant>

#include "backend.hpp"
#include "tensors.hpp"
#include "work.hpp"

namespace rdmacoll_torch {

namespace {

using c10d::OpType;
using rdmacoll::Collective;

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

}  // namespace

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

c10::intrusive_ptr<c10d::Work> RdmacollBackend::reduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::ReduceOptions& opts) {
  const Issue call{OpType::REDUCE, "rdmacoll:reduce", Collective::Reduce};
  if (tensors.size() != 1) refuse(call, tensor_count("reduce", tensors.size(), "1"));
  const at::Tensor& tensor = tensors[0];
  if (auto why = unusable(tensor, "the tensor")) refuse(call, *why);
  const std::string root_error = bad_root(opts.rootRank, opts.rootTensor);
  if (!root_error.empty()) refuse(call, root_error);
  if (auto why = not_reducible(tensor, opts.reduceOp)) refuse(call, *why);
  const auto op = to_op(opts.reduceOp, tensor);
  if (const auto* why = std::get_if<std::string>(&op)) refuse(call, *why);
  const bool root = opts.rootRank == rank_;
  Staged staged = stage_output(tensor, false, /*in_place=*/true);
  if (opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM) {
    // The others' tensors are only read: their factor goes into a copy.
    if (!staged.copied()) staged.dense = staged.dense.clone();
    premultiply(staged.dense, opts.reduceOp);
    staged.view = flat_view(staged.dense, false);
  }
  rdmacoll::Tensor v = staged.view;
  const rdmacoll::ReduceOp rop = std::get<rdmacoll::ReduceOp>(op);
  const int dst = global_rank(static_cast<int>(opts.rootRank));
  std::function<void()> after;
  if (root) after = [staged] { copy_back(staged); };
  return issue(
      call, tensors, {}, {staged.dense},
      [&] { return rdmacoll::reduce(v, dst, rop, group_, true); }, std::move(after));
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

#if RDMACOLL_TORCH2
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

#endif

}  // namespace rdmacoll_torch
