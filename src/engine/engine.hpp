#pragma once
// Runs collectives over a transport: per-call descriptors (readiness and cross-rank checks),
// then the schedule's one-sided writes, every wait bounded by the group's timeout. The facade:
// each collective lives in its own file, src/engine/collectives/.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/core/call_descriptor.hpp"
#include "engine/core/round_args.hpp"
#include "engine/group_state.hpp"
#include "engine/p2p.hpp"
#include "engine/spin.hpp"
#include "rdmacoll/types.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::engine {

class Engine {
 public:
  Engine(transport::Transport& transport, SpinPolicy spin)
      : transport_(transport), spin_(spin), p2p_(std::make_shared<PointToPoint>(transport, spin)) {}

  void all_gather(GroupState& group, const RoundArgs& args);
  // In place over data[0, numel); `local_error` as for all_gather.
  void all_reduce(GroupState& group, void* data, DType dtype, int64_t numel, ReduceOp op,
                  const std::string& local_error);
  // reduce_scatter_tensor: `in` holds p x n elements, `out` receives the reduction of every
  // member's piece `rank` (n elements); in and out share `dtype`.
  void reduce_scatter(GroupState& group, void* out, const void* in, DType dtype, int64_t n,
                      ReduceOp op, const std::string& local_error);
  // In place over data[0, numel), from group rank `root`.
  void broadcast(GroupState& group, void* data, DType dtype, int64_t numel, int root,
                 const std::string& local_error);
  // `local_error` as for all_gather (a layer above refused this rank's call).
  void barrier(GroupState& group, const std::string& local_error = {});
  // Every member's n elements at `in` into the root's `out` (p x n, group rank order; only the
  // root's is read, and its own chunk may already be in place). `root` is a group rank.
  void gather(GroupState& group, void* out, const void* in, DType dtype, int64_t n, int root,
              const std::string& local_error);
  // The root's `in` (p x n; only the root's is read) piece j into member j's `out` (n).
  void scatter(GroupState& group, void* out, const void* in, DType dtype, int64_t n, int root,
               const std::string& local_error);
  // The reduction of every member's data[0, numel) into the root's `data`; the others' data
  // stays as it was.
  void reduce(GroupState& group, void* data, DType dtype, int64_t numel, ReduceOp op, int root,
              const std::string& local_error);
  // Piece j of `in` (in_splits[j] elements, pieces in order) into member j's `out` at the
  // place its out_splits give our piece; in and out do not overlap. Splits have p entries
  // (or none, with local_error set).
  void all_to_all(GroupState& group, void* out, const void* in, DType dtype,
                  const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits,
                  const std::string& local_error);

  // Point-to-point (p2p.hpp): a group's sends and receives start here, in its issue order.
  void send(GroupState& group, const void* data, size_t bytes, int peer, uint32_t tag,
            const std::shared_ptr<WorkState>& work);
  // `peer` -1: from any other member.
  void recv(GroupState& group, void* data, size_t bytes, int peer, uint32_t tag,
            const std::shared_ptr<WorkState>& work);

  // For the collectives' files (collectives/*.cpp): the transport every call runs over, and
  // how its waits poll.
  transport::Transport& transport() { return transport_; }
  SpinPolicy spin() const { return spin_; }

 private:
  transport::Transport& transport_;
  SpinPolicy spin_;
  std::shared_ptr<PointToPoint> p2p_;
};

// The algorithm `forced` names (RDMACOLL_ALGO), checked for a group of p ranks, else the
// selector's pick.
schedule::Algorithm choose_algorithm(int p, size_t bytes_per_rank, int hosts,
                                     const std::optional<schedule::Algorithm>& forced);
// The all-gather algorithm for a group with this layout (host_of[group rank] = host index):
// `forced` when set; else the selector's pick, or the two-level schedule where the simulator
// says it sends fewer bytes off the hosts. `order` and `ring_order` as in GroupState.
schedule::Algorithm choose_algorithm(size_t bytes_per_rank, const std::vector<int>& host_of,
                                     const std::vector<int>& order,
                                     const std::vector<int>& ring_order,
                                     const std::optional<schedule::Algorithm>& forced);

}  // namespace rdmacoll::engine
