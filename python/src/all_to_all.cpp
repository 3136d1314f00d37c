// all_to_all_single (alltoall_base) and all_to_all in the torch backend: the data moves as
// bytes (any dtype), with torch's row splits turned into byte splits here.

#include "backend.hpp"
#include "tensors.hpp"
#include "work.hpp"

namespace rdmacoll_torch {

namespace {

using c10d::OpType;
using rdmacoll::Collective;

// Byte splits of `t` (rows along dim 0, equal when `rows` is empty), or why not.
std::optional<std::string> byte_splits(const at::Tensor& t, const std::vector<int64_t>& rows, int p,
                                       const char* name, std::vector<int64_t>& out) {
  if (t.dim() == 0) return std::string(name) + " is a 0-d tensor; all_to_all splits dim 0";
  const int64_t n_rows = t.size(0);
  const int64_t row_bytes = n_rows == 0 ? 0 : static_cast<int64_t>(t.nbytes()) / n_rows;
  out.assign(p, 0);
  if (rows.empty()) {
    if (n_rows % p != 0) {
      return std::string(name) + " has " + std::to_string(n_rows) +
             " rows, not divisible by the group size " + std::to_string(p) + "; pass " + name +
             "_split_sizes";
    }
    for (auto& s : out)
      s = n_rows / p * row_bytes;
    return std::nullopt;
  }
  if (static_cast<int>(rows.size()) != p) {
    return std::string(name) + "_split_sizes has " + std::to_string(rows.size()) +
           " entries, expected the group size " + std::to_string(p);
  }
  int64_t sum = 0;
  for (int j = 0; j < p; ++j) {
    if (rows[j] < 0) return std::string(name) + "_split_sizes has a negative entry";
    sum += rows[j];
    out[j] = rows[j] * row_bytes;
  }
  if (sum != n_rows) {
    return std::string(name) + "_split_sizes sum to " + std::to_string(sum) + " rows, but " + name +
           " has " + std::to_string(n_rows);
  }
  return std::nullopt;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> RdmacollBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions&) {
  const Issue call{OpType::ALLTOALL_BASE, "rdmacoll:all_to_all_single", Collective::AllToAll};
  if (auto why = unusable(output, "the output")) refuse(call, *why);
  if (auto why = unusable(input, "the input")) refuse(call, *why);
  if (output.scalar_type() != input.scalar_type()) {
    refuse(call, std::string("the input is ") + c10::toString(input.scalar_type()) +
                     " and the output " + c10::toString(output.scalar_type()) +
                     "; all_to_all needs one dtype");
  }
  if (input.dim() > 0 && output.dim() > 0 && input.size(0) > 0 && output.size(0) > 0 &&
      input.numel() / input.size(0) != output.numel() / output.size(0)) {
    refuse(call, "input rows have " + std::to_string(input.numel() / input.size(0)) +
                     " elements and output rows " +
                     std::to_string(output.numel() / output.size(0)) +
                     "; every row must have the same size");
  }
  std::vector<int64_t> out_bytes, in_bytes;
  if (auto why = byte_splits(input, input_split_sizes, size_, "input", in_bytes))
    refuse(call, *why);
  if (auto why = byte_splits(output, output_split_sizes, size_, "output", out_bytes)) {
    refuse(call, *why);
  }
  const Staged in = stage_input(input, true);
  const Staged out = stage_output(output, true);
  rdmacoll::Tensor o = out.view, i = in.view;
  return issue(
      call, {output}, {input}, {in.dense, out.dense},
      [&] { return rdmacoll::all_to_all_single(o, i, out_bytes, in_bytes, group_, true); },
      [out] { copy_back(out); });
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllToAllOptions&) {
  const Issue call{OpType::ALLTOALL, "rdmacoll:all_to_all", Collective::AllToAll};
  if (static_cast<int>(inputs.size()) != size_ || static_cast<int>(outputs.size()) != size_) {
    refuse(call, "all_to_all needs one input and one output per rank of the group (" +
                     std::to_string(size_) + "), got " + std::to_string(inputs.size()) +
                     " inputs and " + std::to_string(outputs.size()) + " outputs");
  }
  std::vector<int64_t> in_bytes, out_bytes;
  int64_t out_total = 0;
  for (size_t j = 0; j < inputs.size(); ++j) {
    if (auto why = unusable(inputs[j], "an input")) refuse(call, *why);
    if (auto why = unusable(outputs[j], "an output")) refuse(call, *why);
    if (inputs[j].scalar_type() != inputs[0].scalar_type() ||
        outputs[j].scalar_type() != inputs[0].scalar_type()) {
      refuse(call, "all_to_all's tensors must share one dtype");
    }
    in_bytes.push_back(static_cast<int64_t>(inputs[j].nbytes()));
    out_bytes.push_back(static_cast<int64_t>(outputs[j].nbytes()));
    out_total += out_bytes.back();
  }
  const at::Tensor packed_in = pack_bytes(inputs).tensor;
  at::Tensor packed_out = staging_.empty({out_total}, at::kByte);
  rdmacoll::Tensor o = flat_view(packed_out, true), i = flat_view(packed_in, true);
  std::vector<at::Tensor> targets = outputs;
  return issue(
      call, outputs, inputs, {packed_in, packed_out},
      [&] { return rdmacoll::all_to_all_single(o, i, out_bytes, in_bytes, group_, true); },
      [packed_out, targets] {
        int64_t offset = 0;
        for (const auto& t : targets) {
          const int64_t n = static_cast<int64_t>(t.nbytes());
          write_bytes(t, packed_out.narrow(0, offset, n));
          offset += n;
        }
      });
}

}  // namespace rdmacoll_torch
