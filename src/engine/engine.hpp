#pragma once
// Runs collectives over a transport: per-call descriptors (readiness and cross-rank checks),
// then the schedule's one-sided writes, every wait bounded by the group's timeout.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/call_descriptor.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/process_group.hpp"
#include "rdmacoll/tensor.hpp"
#include "transports/transport.hpp"

namespace rdmacoll::engine {

struct AllGatherArgs {
  void* out = nullptr;
  DType out_dtype = DType::Float32;
  int64_t out_numel = 0;
  const void* in = nullptr;
  DType in_dtype = DType::Float32;
  int64_t in_numel = 0;
  // Non-empty when the local arguments are invalid: the call still tells the peers (so they
  // raise too) and then raises InvalidArgument with this text.
  std::string local_error;
  // all_reduce gathers through here; these travel in the descriptors so that ranks that
  // disagree (or call different collectives) raise on every rank.
  CollectiveOp op = CollectiveOp::AllGather;
  ReduceOp reduce_op = ReduceOp::Sum;
  uint64_t total_numel = 0;
  int root = 0;  // broadcast
};

// How a wait polls before it blocks in the transport: a wake-up from poll() costs tens of us,
// so waits poll first; when ranks outnumber cores each poll yields the core (sched_yield) so
// the peer being waited for can run, as MPI's yield-when-idle does.
struct SpinPolicy {
  std::chrono::microseconds duration{0};
  bool yield = false;
};

class Engine {
 public:
  Engine(transport::Transport& transport, SpinPolicy spin) : transport_(transport), spin_(spin) {}

  void all_gather(GroupState& group, const AllGatherArgs& args);
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

 public:
  // One round of a reduce-scatter: piece j is m elements at in + j * stride bytes.
  struct ReduceScatterRound {
    CollectiveOp collective;  // what the descriptors say: AllReduce or ReduceScatter
    const uint8_t* in;
    size_t stride;
    uint8_t* out;  // m elements; may be our own piece of `in`
    DType dtype;
    int64_t m;
    ReduceOp op;
    uint64_t total_numel;  // the whole call's length, checked across ranks
    const std::string& local_error;
  };

 private:
  void reduce_scatter_round(GroupState& group, const ReduceScatterRound& round);
  void reduce_scatter_direct(GroupState& group, const ReduceScatterRound& round);
  void reduce_scatter_ring(GroupState& group, const ReduceScatterRound& round);
  void broadcast_tree(GroupState& group, uint8_t* data, size_t bytes, const AllGatherArgs& args,
                      int root);
  void broadcast_scatter(GroupState& group, uint8_t* data, const AllGatherArgs& args, int root);

  transport::Transport& transport_;
  SpinPolicy spin_;
};

// The arguments of one gather round of a reduction (all_reduce, reduce_scatter): our n elements
// at `in` into p x n at `out`, with the whole length and the operator in the descriptors.
AllGatherArgs round_args(void* out, const void* in, DType dtype, int p, int64_t n, ReduceOp op,
                         int64_t total_numel, const std::string& local_error);

// RDMACOLL_ALGO (auto|rd|bruck|ring|direct|two_level) resolved for a group of p ranks.
schedule::Algorithm choose_algorithm(int p, size_t bytes_per_rank, int hosts);
// The all-gather algorithm for a group with this layout (host_of[group rank] = host index):
// RDMACOLL_ALGO when set; else the selector's pick, or the two-level schedule where the
// simulator says it sends fewer bytes off the hosts. `order` and `ring_order` as in GroupState.
schedule::Algorithm choose_algorithm(size_t bytes_per_rank, const std::vector<int>& host_of,
                                     const std::vector<int>& order,
                                     const std::vector<int>& ring_order);
// The algorithm RDMACOLL_ALGO names, or nullopt for auto.
const std::optional<schedule::Algorithm>& forced_algorithm();
// RDMACOLL_DESCRIPTORS: how a call's descriptors travel when no eager slots carry them. Auto:
// a log-p all-gather across hosts (recursive doubling for powers of two, else Bruck's), the
// direct round of p - 1 messages on one host. Bruck: Bruck's rounds for any p.
enum class DescriptorExchange { Auto, Direct, Bruck };
DescriptorExchange descriptor_exchange();  // read once; InvalidArgument on a bad value

}  // namespace rdmacoll::engine
