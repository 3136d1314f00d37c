// all_to_all_single and all_to_all: this rank's splits checked here (a mistake still takes
// part in the group's call, so that every rank raises); the pairs' agreement is the engine's.

#include <cstring>
#include <string>

#include "api/entry.hpp"
#include "api/staging.hpp"
#include "api/world.hpp"
#include "engine/collectives/all_to_all.hpp"
#include "rdmacoll/process_group.hpp"

namespace rdmacoll {

using api::engine_of;
using api::issue;
using api::resolve;
using api::shape_string;

namespace {

// Rows of `t` along dim 0 (a 0-d tensor is one row) and the elements of each.
int64_t rows(const Tensor& t) {
  return t.sizes().empty() ? 1 : t.sizes()[0];
}
int64_t row_numel(const Tensor& t) {
  const int64_t r = rows(t);
  return r == 0 ? 0 : t.numel() / r;
}

// The element splits of `t` for `given` row splits (equal when empty), or an error.
std::string element_splits(const Tensor& t, const std::vector<int64_t>& given, int p, int64_t row,
                           const char* name, std::vector<int64_t>& out) {
  const int64_t n_rows = rows(t);
  out.assign(p, 0);
  if (given.empty()) {
    if (n_rows % p != 0) {
      return std::string(name) + " " + shape_string(t.sizes()) + ": dim 0 (" +
             std::to_string(n_rows) + ") is not divisible by the group size " + std::to_string(p) +
             "; pass " + name + "_split_sizes";
    }
    for (auto& s : out)
      s = n_rows / p * row;
    return "";
  }
  if (static_cast<int>(given.size()) != p) {
    return std::string(name) + "_split_sizes has " + std::to_string(given.size()) +
           " entries, expected the group size " + std::to_string(p);
  }
  int64_t sum = 0;
  for (int j = 0; j < p; ++j) {
    if (given[j] < 0) {
      return std::string(name) + "_split_sizes[" + std::to_string(j) + "] is negative (" +
             std::to_string(given[j]) + ")";
    }
    sum += given[j];
    out[j] = given[j] * row;
  }
  if (sum != n_rows) {
    return std::string(name) + "_split_sizes sum to " + std::to_string(sum) + " rows, but " + name +
           " " + shape_string(t.sizes()) + " has " + std::to_string(n_rows);
  }
  return "";
}

void all_to_all_single_now(engine::Engine& e, GroupState& g, Tensor& output, const Tensor& input,
                           const std::vector<int64_t>& out_rows,
                           const std::vector<int64_t>& in_rows) {
  std::string error;
  std::vector<int64_t> out_splits, in_splits;
  if (g.is_member()) {
    const int p = g.size();
    if (output.dtype() != input.dtype()) {
      error = "output dtype " + dtype_name(output.dtype()) + " differs from input dtype " +
              dtype_name(input.dtype()) + "; all_to_all needs one dtype";
    } else if ((output.data() == nullptr && output.numel() > 0) ||
               (input.data() == nullptr && input.numel() > 0)) {
      error = "a tensor has no storage";
    } else if (input.numel() > 0 && output.numel() > 0 && row_numel(input) != row_numel(output)) {
      error = "input " + shape_string(input.sizes()) + " and output " +
              shape_string(output.sizes()) + " have rows of different sizes";
    } else {
      const auto* ob = static_cast<const uint8_t*>(output.data());
      const auto* ib = static_cast<const uint8_t*>(input.data());
      if (output.nbytes() > 0 && input.nbytes() > 0 && ib < ob + output.nbytes() &&
          ob < ib + input.nbytes()) {
        error = "input and output overlap; all_to_all is not in place";
      }
    }
    const int64_t row = input.numel() > 0 ? row_numel(input) : row_numel(output);
    if (error.empty()) error = element_splits(input, in_rows, p, row, "input", in_splits);
    if (error.empty()) error = element_splits(output, out_rows, p, row, "output", out_splits);
  }
  if (!error.empty()) {
    out_splits.clear();
    in_splits.clear();
  }
  engine::all_to_all(e, g,
                     {.out = output.data(),
                      .in = input.data(),
                      .dtype = output.dtype(),
                      .out_splits = out_splits,
                      .in_splits = in_splits,
                      .local_error = error});
}

void all_to_all_now(engine::Engine& e, GroupState& g, std::vector<Tensor>& outputs,
                    const std::vector<Tensor>& inputs) {
  // One all_to_all over packed buffers, then copied out: one call whatever the lists.
  std::string error;
  const int p = g.is_member() ? g.size() : 0;
  if (g.is_member() &&
      (static_cast<int>(outputs.size()) != p || static_cast<int>(inputs.size()) != p)) {
    error = "all_to_all needs one input and one output per member (group size " +
            std::to_string(p) + "), got " + std::to_string(inputs.size()) + " inputs and " +
            std::to_string(outputs.size()) + " outputs";
  }
  const DType dt = !inputs.empty() ? inputs[0].dtype() : DType::Float32;
  for (const auto* list : {&inputs, static_cast<const std::vector<Tensor>*>(&outputs)}) {
    for (const Tensor& t : *list) {
      if (!error.empty()) break;
      if (t.dtype() != dt) {
        error = "all_to_all's tensors disagree on dtype: " + dtype_name(t.dtype()) + " vs " +
                dtype_name(dt);
      } else if (t.data() == nullptr && t.numel() > 0) {
        error = "a tensor has no storage";
      }
    }
  }
  std::vector<int64_t> in_splits, out_splits;
  int64_t in_total = 0, out_total = 0;
  if (error.empty()) {
    for (const Tensor& t : inputs) {
      in_splits.push_back(t.numel());
      in_total += t.numel();
    }
    for (const Tensor& t : outputs) {
      out_splits.push_back(t.numel());
      out_total += t.numel();
    }
  }
  const size_t es = element_size(dt);
  api::Staging in(g.scratch.get<api::ListScratch>().in, static_cast<size_t>(in_total) * es);
  api::Staging out(g.scratch.get<api::ListScratch>().out, static_cast<size_t>(out_total) * es);
  size_t offset = 0;
  for (size_t j = 0; error.empty() && j < inputs.size(); ++j) {
    std::memcpy(in.data() + offset, inputs[j].data(), inputs[j].nbytes());
    offset += inputs[j].nbytes();
  }
  engine::all_to_all(e, g,
                     {.out = out.data(),
                      .in = in.data(),
                      .dtype = dt,
                      .out_splits = out_splits,
                      .in_splits = in_splits,
                      .local_error = error});
  offset = 0;
  for (Tensor& t : outputs) {
    std::memcpy(t.data(), out.data() + offset, t.nbytes());
    offset += static_cast<size_t>(t.numel()) * es;
  }
}

}  // namespace

Work all_to_all_single(Tensor& output, const Tensor& input,
                       const std::vector<int64_t>& output_split_sizes,
                       const std::vector<int64_t>& input_split_sizes, const Group& group,
                       bool async_op) {
  constexpr const char* what = "all_to_all_single";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  return issue(
      g, async_op, what,
      [&] { all_to_all_single_now(e, g, output, input, output_split_sizes, input_split_sizes); },
      [&] {
        return [&e, &g, output, input, output_split_sizes, input_split_sizes]() mutable {
          all_to_all_single_now(e, g, output, input, output_split_sizes, input_split_sizes);
        };
      });
}

Work all_to_all(std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs, const Group& group,
                bool async_op) {
  constexpr const char* what = "all_to_all";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  return issue(
      g, async_op, what, [&] { all_to_all_now(e, g, outputs, inputs); },
      [&] {
        return [&e, &g, outputs, inputs]() mutable { all_to_all_now(e, g, outputs, inputs); };
      });
}

}  // namespace rdmacoll
