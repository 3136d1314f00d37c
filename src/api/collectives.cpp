// The collectives' entry points: each checks this rank's arguments (a mistake still takes part
// in the group's call, so that every rank raises), then runs the engine's collective on the
// caller's thread or queues it for the group's worker (async_op).

#include <algorithm>
#include <cstring>
#include <string>

#include "api/entry.hpp"
#include "api/staging.hpp"
#include "api/world.hpp"
#include "engine/collectives/all_gather.hpp"
#include "engine/collectives/all_reduce.hpp"
#include "engine/collectives/all_to_all.hpp"
#include "engine/collectives/barrier.hpp"
#include "engine/collectives/broadcast.hpp"
#include "engine/collectives/gather.hpp"
#include "engine/collectives/reduce.hpp"
#include "engine/collectives/reduce_scatter.hpp"
#include "engine/collectives/registry.hpp"
#include "engine/collectives/scatter.hpp"
#include "engine/reduce.hpp"
#include "rdmacoll/errors.hpp"
#include "rdmacoll/process_group.hpp"

namespace rdmacoll {

using api::check_all_gather_args;
using api::engine_of;
using api::issue;
using api::resolve;
using api::shape_string;

bool Work::is_completed() const {
  return !state_ || state_->completed();
}

bool Work::wait(std::optional<std::chrono::milliseconds> timeout) const {
  if (state_) state_->wait(timeout);
  return true;
}

std::exception_ptr Work::exception() const {
  return state_ && state_->completed() ? state_->error() : nullptr;
}

void Work::on_completion(std::function<void(std::exception_ptr)> callback) const {
  if (!state_) return callback(nullptr);
  state_->on_completion(std::move(callback));
}

namespace api {

void check_all_gather_args(const Tensor& output, const Tensor& input, int p, int rank,
                           std::string& error) {
  const int64_t n = input.numel();
  const auto& os = output.sizes();
  const auto& is = input.sizes();
  if (output.data() == nullptr && output.numel() > 0) {
    error = "output tensor has no storage";
    return;
  }
  if (input.data() == nullptr && n > 0) {
    error = "input tensor has no storage";
    return;
  }
  if (output.numel() != static_cast<int64_t>(p) * n) {
    error = "output has " + std::to_string(output.numel()) + " elements " + shape_string(os) +
            ", expected group size " + std::to_string(p) + " x input's " + std::to_string(n) +
            " elements " + shape_string(is) + " = " + std::to_string(p * n);
    return;
  }
  // Flat (p*n0, ...) or stacked (p, n0, ...): the trailing dimensions must agree with the input.
  // Compared in place: the shapes are built only for the error (two allocations per call).
  const bool is_flat = is.empty() ? os.size() == 1 && os[0] == p
                                  : os.size() == is.size() && os[0] == is[0] * p &&
                                        std::equal(is.begin() + 1, is.end(), os.begin() + 1);
  const bool is_stacked =
      os.size() == is.size() + 1 && os[0] == p && std::equal(is.begin(), is.end(), os.begin() + 1);
  if (!is_flat && !is_stacked) {
    std::vector<int64_t> flat = is.empty() ? std::vector<int64_t>{p} : is;
    if (!is.empty()) flat[0] *= p;
    std::vector<int64_t> stacked = is;
    stacked.insert(stacked.begin(), p);
    error = "output shape " + shape_string(os) + " is neither the flat " + shape_string(flat) +
            " nor the stacked " + shape_string(stacked) + " gather of input shape " +
            shape_string(is) + " over " + std::to_string(p) + " ranks";
    return;
  }
  // An input inside the output is allowed only as this rank's own slot (in-place).
  const auto* ob = static_cast<const uint8_t*>(output.data());
  const auto* ib = static_cast<const uint8_t*>(input.data());
  const bool own_slot =
      ib == ob + static_cast<size_t>(rank) * input.numel() * element_size(output.dtype()) &&
      input.dtype() == output.dtype();
  if (n > 0 && !own_slot && ib < ob + output.nbytes() && ob < ib + input.nbytes()) {
    error =
        "input overlaps the output; in-place use must pass exactly this rank's slot of the "
        "output, with the output's dtype";
  }
}

int group_root(const GroupState& g, int global, const char* role, std::string& error) {
  const auto it = std::find(g.members.begin(), g.members.end(), global);
  if (it == g.members.end()) {
    if (error.empty()) {
      error = std::string(role) + " " + std::to_string(global) + " is not a member of " +
              g.describe() + "; " + role + " is a global rank, as in torch";
    }
    return 0;
  }
  return static_cast<int>(it - g.members.begin());
}

}  // namespace api

namespace {

void all_gather_into_tensor_now(engine::Engine& e, GroupState& g, Tensor& output,
                                const Tensor& input) {
  std::string error;
  if (g.is_member()) check_all_gather_args(output, input, g.size(), g.rank, error);
  engine::RoundArgs a;
  a.collective = &engine::collectives::kAllGather;
  a.out = output.data();
  a.out_dtype = output.dtype();
  a.out_numel = output.numel();
  a.in = input.data();
  a.in_dtype = input.dtype();
  a.in_numel = input.numel();
  a.local_error = error;
  engine::all_gather(e, g, a);
}

void all_gather_now(engine::Engine& e, GroupState& g, std::vector<Tensor>& outputs,
                    const Tensor& input) {
  // Gather into one contiguous buffer, then copy out: one collective whatever the list.
  std::string error;
  if (g.is_member() && static_cast<int>(outputs.size()) != g.size()) {
    error = "output list has " + std::to_string(outputs.size()) + " tensors, expected group size " +
            std::to_string(g.size());
  }
  for (size_t i = 0; error.empty() && i < outputs.size(); ++i) {
    if (outputs[i].numel() != input.numel()) {
      error = "output tensor " + std::to_string(i) + " has " + std::to_string(outputs[i].numel()) +
              " elements, expected the input's " + std::to_string(input.numel());
    }
  }
  const DType dt = outputs.empty() ? input.dtype() : outputs[0].dtype();
  for (size_t i = 0; error.empty() && i < outputs.size(); ++i) {
    if (outputs[i].dtype() != dt) {
      error = "output tensors disagree on dtype: " + dtype_name(outputs[i].dtype()) + " vs " +
              dtype_name(dt);
    }
  }
  const int64_t total = static_cast<int64_t>(g.size()) * input.numel();
  api::Staging staging(g.scratch.get<api::ListScratch>().out,
                       static_cast<size_t>(total) * element_size(dt));
  engine::RoundArgs a;
  a.collective = &engine::collectives::kAllGather;
  a.out = staging.data();
  a.out_dtype = dt;
  a.out_numel = total;
  a.in = input.data();
  a.in_dtype = input.dtype();
  a.in_numel = input.numel();
  a.local_error = error;
  engine::all_gather(e, g, a);
  const size_t chunk = static_cast<size_t>(input.numel()) * element_size(dt);
  for (size_t i = 0; i < outputs.size(); ++i) {
    convert_elements(outputs[i].data(), dt, staging.data() + i * chunk, dt,
                     static_cast<size_t>(input.numel()));
  }
}

void all_reduce_now(engine::Engine& e, GroupState& g, Tensor& tensor, ReduceOp op) {
  // A dtype the operator cannot reduce still goes to the peers, so that every rank raises.
  const std::string error = g.is_member() ? engine::reduce_unsupported(op, tensor.dtype()) : "";
  engine::all_reduce(e, g,
                     {.data = tensor.data(),
                      .dtype = tensor.dtype(),
                      .numel = tensor.numel(),
                      .op = op,
                      .local_error = error});
}

std::string check_reduce_scatter_args(const Tensor& output, const Tensor& input, ReduceOp op, int p,
                                      int rank) {
  std::string error = engine::reduce_unsupported(op, input.dtype());
  if (!error.empty()) return error;
  if (output.dtype() != input.dtype()) {
    return "output dtype " + dtype_name(output.dtype()) + " differs from input dtype " +
           dtype_name(input.dtype()) + "; reduce_scatter_tensor needs one dtype";
  }
  if ((output.data() == nullptr && output.numel() > 0) ||
      (input.data() == nullptr && input.numel() > 0)) {
    return "a tensor has no storage";
  }
  if (input.numel() != static_cast<int64_t>(p) * output.numel()) {
    return "input has " + std::to_string(input.numel()) + " elements " +
           shape_string(input.sizes()) + ", expected group size " + std::to_string(p) +
           " x output's " + std::to_string(output.numel()) + " elements " +
           shape_string(output.sizes()) + " = " + std::to_string(p * output.numel());
  }
  // The input is shaped as the all-gather of the output (flat or stacked), and the output
  // may be this rank's piece of it: the all-gather's checks with the roles swapped.
  check_all_gather_args(input, output, p, rank, error);
  if (!error.empty()) {
    return "input " + shape_string(input.sizes()) + " must be the flat or stacked " +
           std::to_string(p) + "-rank gather of output " + shape_string(output.sizes()) + ": " +
           error;
  }
  return "";
}

void reduce_scatter_now(engine::Engine& e, GroupState& g, Tensor& output, const Tensor& input,
                        ReduceOp op) {
  const std::string error =
      g.is_member() ? check_reduce_scatter_args(output, input, op, g.size(), g.rank) : "";
  engine::reduce_scatter(e, g,
                         {.out = output.data(),
                          .in = input.data(),
                          .dtype = output.dtype(),
                          .n = output.numel(),
                          .op = op,
                          .local_error = error});
}

void broadcast_now(engine::Engine& e, GroupState& g, Tensor& tensor, int src) {
  std::string error;
  int root = 0;
  if (g.is_member()) {
    root = api::group_root(g, src, "src", error);
    if (tensor.data() == nullptr && tensor.numel() > 0) error = "tensor has no storage";
  }
  engine::broadcast(e, g,
                    {.data = tensor.data(),
                     .dtype = tensor.dtype(),
                     .numel = tensor.numel(),
                     .root = root,
                     .local_error = error});
}

}  // namespace

Work all_gather_into_tensor(Tensor& output, const Tensor& input, const Group& group,
                            bool async_op) {
  constexpr const char* what = "all_gather_into_tensor";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  return issue(
      g, async_op, what, [&] { all_gather_into_tensor_now(e, g, output, input); },
      [&] {
        return
            [&e, &g, output, input]() mutable { all_gather_into_tensor_now(e, g, output, input); };
      });
}

Work all_gather(std::vector<Tensor>& outputs, const Tensor& input, const Group& group,
                bool async_op) {
  constexpr const char* what = "all_gather";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  return issue(
      g, async_op, what, [&] { all_gather_now(e, g, outputs, input); },
      [&] { return [&e, &g, outputs, input]() mutable { all_gather_now(e, g, outputs, input); }; });
}

Work all_reduce(Tensor& tensor, ReduceOp op, const Group& group, bool async_op) {
  constexpr const char* what = "all_reduce";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  return issue(
      g, async_op, what, [&] { all_reduce_now(e, g, tensor, op); },
      [&] { return [&e, &g, tensor, op]() mutable { all_reduce_now(e, g, tensor, op); }; });
}

Work reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op, const Group& group,
                           bool async_op) {
  constexpr const char* what = "reduce_scatter_tensor";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  return issue(
      g, async_op, what, [&] { reduce_scatter_now(e, g, output, input, op); },
      [&] {
        return
            [&e, &g, output, input, op]() mutable { reduce_scatter_now(e, g, output, input, op); };
      });
}

Work broadcast(Tensor& tensor, int src, const Group& group, bool async_op) {
  constexpr const char* what = "broadcast";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  return issue(
      g, async_op, what, [&] { broadcast_now(e, g, tensor, src); },
      [&] { return [&e, &g, tensor, src]() mutable { broadcast_now(e, g, tensor, src); }; });
}

Work barrier(const Group& group, bool async_op) {
  GroupState& g = resolve(group, "barrier");
  engine::Engine& e = engine_of(g, "barrier");
  auto body = [&e, &g] { engine::barrier(e, g); };
  return issue(g, async_op, "barrier", body, [&] { return body; });
}

Work reject(Collective collective, const std::string& why, const Group& group, bool async_op) {
  if (why.empty()) throw InvalidArgument("reject: the reason must not be empty");
  constexpr const char* what = "reject";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  // This rank's part of the call, with no data: its descriptor says why, so the peers raise.
  auto body = [&e, &g, collective, why] {
    switch (collective) {
      case Collective::AllGather: {
        engine::RoundArgs a;
        a.collective = &engine::collectives::kAllGather;
        a.local_error = why;
        return engine::all_gather(e, g, a);
      }
      case Collective::AllReduce:
        return engine::all_reduce(e, g, {.local_error = why});
      case Collective::ReduceScatter:
        return engine::reduce_scatter(e, g, {.local_error = why});
      case Collective::Broadcast:
        return engine::broadcast(e, g, {.local_error = why});
      case Collective::Barrier:
        return engine::barrier(e, g, {.local_error = why});
      case Collective::Gather:
        return engine::gather(e, g, {.local_error = why});
      case Collective::Scatter:
        return engine::scatter(e, g, {.local_error = why});
      case Collective::Reduce:
        return engine::reduce(e, g, {.local_error = why});
      case Collective::AllToAll:
        return engine::all_to_all(e, g, {.local_error = why});
    }
    throw InvalidArgument("reject: unknown collective " +
                          std::to_string(static_cast<int>(collective)));
  };
  return issue(g, async_op, what, body, [&] { return body; });
}

}  // namespace rdmacoll
