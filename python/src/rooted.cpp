// gather and scatter in the torch backend: the data moves as bytes (any dtype, complex and
// float8 included), through one staging buffer at the root unless the root's list is one block
// of memory already.

#include "backend.hpp"
#include "tensors.hpp"
#include "work.hpp"

namespace rdmacoll_torch {

namespace {
using c10d::OpType;
using rdmacoll::Collective;
}  // namespace

std::string RdmacollBackend::bad_root(int64_t root_rank, int64_t root_tensor) const {
  if (root_rank >= 0 && root_rank < size_ && root_tensor == 0) return "";
  return "root rank " + std::to_string(root_rank) + " (tensor " + std::to_string(root_tensor) +
         ") is not a rank of this group of " + std::to_string(size_);
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const Issue call{OpType::GATHER, "rdmacoll:gather", Collective::Gather};
  if (inputs.size() != 1) refuse(call, tensor_count("gather input", inputs.size(), "1"));
  const at::Tensor& input = inputs[0];
  if (auto why = unusable(input, "the input")) refuse(call, *why);
  const std::string root_error = bad_root(opts.rootRank, 0);
  if (!root_error.empty()) refuse(call, root_error);
  const bool root = opts.rootRank == rank_;
  std::vector<at::Tensor> targets;
  if (root) {
    if (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != size_) {
      refuse(call, "the destination needs one gather list of " + std::to_string(size_) +
                       " tensors (the group size)");
    }
    targets = outputs[0];
    for (size_t r = 0; r < targets.size(); ++r) {
      if (auto why = unusable(targets[r], "an output")) refuse(call, *why);
      if (targets[r].numel() != input.numel() || targets[r].scalar_type() != input.scalar_type()) {
        refuse(call, "gather_list[" + std::to_string(r) + "] has " +
                         std::to_string(targets[r].numel()) + " elements of " +
                         c10::toString(targets[r].scalar_type()) +
                         "; every one needs the input's " + std::to_string(input.numel()) +
                         " elements of " + c10::toString(input.scalar_type()));
      }
    }
  } else if (!outputs.empty() && !(outputs.size() == 1 && outputs[0].empty())) {
    refuse(call, "only the destination rank passes a gather list (as in torch)");
  }
  const Staged in = stage_input(input, true);
  // Into the caller's list itself when it is one block (the root's input may be its own slot);
  // else through a staging buffer, copied out once the gather is done.
  std::optional<at::Tensor> block;
  if (root) block = block_in_place(targets, in.dense, static_cast<size_t>(rank_));
  at::Tensor staging;
  if (root) staging = block ? *block : staging_.empty({size_, input.numel()}, input.scalar_type());
  rdmacoll::Tensor i = in.view, o;
  if (root) o = flat_view(staging, true);
  const int dst = global_rank(static_cast<int>(opts.rootRank));
  std::function<void()> copy_out;
  if (root && !block) {
    copy_out = [staging, targets] {
      for (size_t r = 0; r < targets.size(); ++r)
        targets[r].copy_(staging[static_cast<int64_t>(r)].view(targets[r].sizes()));
    };
  }
  return issue(
      call, targets, inputs, {in.dense, staging},
      [&] { return rdmacoll::gather(root ? &o : nullptr, i, dst, group_, true); },
      std::move(copy_out));
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const Issue call{OpType::SCATTER, "rdmacoll:scatter", Collective::Scatter};
  if (outputs.size() != 1) refuse(call, tensor_count("scatter output", outputs.size(), "1"));
  const at::Tensor& output = outputs[0];
  if (auto why = unusable(output, "the output")) refuse(call, *why);
  const std::string root_error = bad_root(opts.rootRank, 0);
  if (!root_error.empty()) refuse(call, root_error);
  const bool root = opts.rootRank == rank_;
  const Staged out = stage_output(output, true);
  at::Tensor packed;
  if (root) {
    if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != size_) {
      refuse(call, "the source needs one scatter list of " + std::to_string(size_) +
                       " tensors (the group size)");
    }
    for (size_t r = 0; r < inputs[0].size(); ++r) {
      const at::Tensor& t = inputs[0][r];
      if (auto why = unusable(t, "an input")) refuse(call, *why);
      if (t.numel() != output.numel() || t.scalar_type() != output.scalar_type()) {
        refuse(call, "scatter_list[" + std::to_string(r) + "] has " + std::to_string(t.numel()) +
                         " elements of " + c10::toString(t.scalar_type()) +
                         "; every one needs the output's " + std::to_string(output.numel()) +
                         " elements of " + c10::toString(output.scalar_type()));
      }
    }
    // From the caller's list itself when it is one block the output does not overlap (other
    // than as the root's own slot); else from a packed copy.
    std::optional<at::Tensor> block =
        block_in_place(inputs[0], out.dense, static_cast<size_t>(rank_));
    if (block) {
      packed = *block;
    } else {
      std::vector<at::Tensor> flat;
      for (const at::Tensor& t : inputs[0])
        flat.push_back(t.reshape(-1));
      packed = at::cat(flat);
    }
  } else if (!inputs.empty() && !(inputs.size() == 1 && inputs[0].empty())) {
    refuse(call, "only the source rank passes a scatter list (as in torch)");
  }
  rdmacoll::Tensor o = out.view, i;
  if (root) i = flat_view(packed, true);
  const int src = global_rank(static_cast<int>(opts.rootRank));
  return issue(
      call, outputs, root ? inputs[0] : std::vector<at::Tensor>{}, {out.dense, packed},
      [&] { return rdmacoll::scatter(o, root ? &i : nullptr, src, group_, true); },
      [out] { copy_back(out); });
}

}  // namespace rdmacoll_torch
