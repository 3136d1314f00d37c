// The rooted collectives' entry points: gather, scatter and reduce. Each checks this rank's
// arguments (a mistake still takes part in the group's call, so that every rank raises).

#include <optional>
#include <string>

#include "api/entry.hpp"
#include "api/world.hpp"
#include "engine/collectives/gather.hpp"
#include "engine/collectives/reduce.hpp"
#include "engine/collectives/scatter.hpp"
#include "engine/reduce.hpp"
#include "rdmacoll/process_group.hpp"

namespace rdmacoll {

using api::engine_of;
using api::group_root;
using api::issue;
using api::resolve;

namespace {

std::string storage_error(const Tensor* t, const char* what) {
  if (t && t->data() == nullptr && t->numel() > 0) return std::string(what) + " has no storage";
  return "";
}

void gather_now(engine::Engine& e, GroupState& g, Tensor* output, const Tensor& input, int dst) {
  std::string error;
  int root = 0;
  if (g.is_member()) {
    root = group_root(g, dst, "dst", error);
    if (error.empty()) error = storage_error(&input, "the input");
    if (error.empty() && g.rank == root) {
      if (!output) {
        error = "the destination rank needs an output (got none)";
      } else if (output->dtype() != input.dtype()) {
        error = "output dtype " + dtype_name(output->dtype()) + " differs from input dtype " +
                dtype_name(input.dtype()) + "; gather needs one dtype";
      } else {
        api::check_all_gather_args(*output, input, g.size(), g.rank, error);
      }
    }
  }
  void* out = output && g.rank == root ? output->data() : nullptr;
  engine::gather(e, g,
                 {.out = out,
                  .in = input.data(),
                  .dtype = input.dtype(),
                  .n = input.numel(),
                  .root = root,
                  .local_error = error});
}

void scatter_now(engine::Engine& e, GroupState& g, Tensor& output, const Tensor* input, int src) {
  std::string error;
  int root = 0;
  if (g.is_member()) {
    root = group_root(g, src, "src", error);
    if (error.empty()) error = storage_error(&output, "the output");
    if (error.empty() && g.rank == root) {
      if (!input) {
        error = "the source rank needs an input (got none)";
      } else if (output.dtype() != input->dtype()) {
        error = "output dtype " + dtype_name(output.dtype()) + " differs from input dtype " +
                dtype_name(input->dtype()) + "; scatter needs one dtype";
      } else {
        // The input is shaped as the gather of the output, which may be this rank's piece.
        api::check_all_gather_args(*input, output, g.size(), g.rank, error);
        if (!error.empty()) error = "input must be the flat or stacked scatter of output: " + error;
      }
    }
  }
  const void* in = input && g.rank == root ? input->data() : nullptr;
  engine::scatter(e, g,
                  {.out = output.data(),
                   .in = in,
                   .dtype = output.dtype(),
                   .n = output.numel(),
                   .root = root,
                   .local_error = error});
}

void reduce_now(engine::Engine& e, GroupState& g, Tensor& tensor, int dst, ReduceOp op) {
  std::string error;
  int root = 0;
  if (g.is_member()) {
    root = group_root(g, dst, "dst", error);
    if (error.empty()) error = engine::reduce_unsupported(op, tensor.dtype());
    if (error.empty()) error = storage_error(&tensor, "the tensor");
  }
  engine::reduce(e, g,
                 {.data = tensor.data(),
                  .dtype = tensor.dtype(),
                  .numel = tensor.numel(),
                  .op = op,
                  .root = root,
                  .local_error = error});
}

}  // namespace

Work gather(Tensor* output, const Tensor& input, int dst, const Group& group, bool async_op) {
  constexpr const char* what = "gather";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  return issue(
      g, async_op, what, [&] { gather_now(e, g, output, input, dst); },
      [&] {
        std::optional<Tensor> out;
        if (output) out = *output;
        return [&e, &g, out, input, dst]() mutable {
          gather_now(e, g, out ? &*out : nullptr, input, dst);
        };
      });
}

Work scatter(Tensor& output, const Tensor* input, int src, const Group& group, bool async_op) {
  constexpr const char* what = "scatter";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  return issue(
      g, async_op, what, [&] { scatter_now(e, g, output, input, src); },
      [&] {
        std::optional<Tensor> in;
        if (input) in = *input;
        return [&e, &g, output, in, src]() mutable {
          scatter_now(e, g, output, in ? &*in : nullptr, src);
        };
      });
}

Work reduce(Tensor& tensor, int dst, ReduceOp op, const Group& group, bool async_op) {
  constexpr const char* what = "reduce";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  return issue(
      g, async_op, what, [&] { reduce_now(e, g, tensor, dst, op); },
      [&] { return [&e, &g, tensor, dst, op]() mutable { reduce_now(e, g, tensor, dst, op); }; });
}

}  // namespace rdmacoll
