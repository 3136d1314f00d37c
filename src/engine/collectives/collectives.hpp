#pragma once
// The collectives, one file each in this folder, and what they share with each other. Internal
// to src/engine.
//
//   all_gather.cpp      inline round, or the selected schedule by one-sided writes
//   all_reduce.cpp      gather-and-fold, or reduce-scatter rounds then an in-place all-gather
//   reduce_scatter.cpp  gather-and-fold, or rounds: direct on one host, the ring across hosts
//   broadcast.cpp       inline, binomial tree, or scatter then all-gather
//   barrier.cpp         a descriptor exchange
//   gather.cpp          inline to the root, or one-sided writes into the root's output
//   scatter.cpp         inline from the root, or its writes into every member's output
//   reduce.cpp          gather-and-fold at the root, or reduce-scatter rounds then a gather
//   all_to_all.cpp      per pair: inline, a write into the receiver's output, or a message;
//                       all_to_all_sizes.cpp agrees the splits, all_to_all_bruck.cpp runs
//                       Bruck's rounds for small equal pieces
// symmetric_fold.cpp runs the calls that fold straight out of symmetric memory.
// selection.cpp picks the all-gather's algorithm and makes its schedules.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/call.hpp"
#include "engine/collectives/all_gather.hpp"
#include "engine/collectives/barrier.hpp"
#include "engine/collectives/registry.hpp"
#include "engine/core/call_descriptor.hpp"
#include "engine/core/round_args.hpp"
#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "engine/spin.hpp"
#include "schedule/schedule.hpp"

namespace rdmacoll::engine {

// selection.cpp: the all-gather algorithm for this group and chunk size (RDMACOLL_ALGO, else the
// selector, or the two-level schedule where the simulator says it sends less), and its
// schedule, made once per group.
schedule::Algorithm algorithm_for(GroupState& g, size_t bytes_per_rank);
const schedule::Schedule& schedule_for(GroupState& g, size_t bytes_per_rank);

// Registers [base, +bytes) as where peers write this call's data and names it in our
// descriptor (address, length, key, and the token writers sign with: reserved only here, so a
// call that exposes nothing takes no token, which cost two transport-lock round trips at every
// small call); `key` holds the key's bytes until the descriptor has left.
// Returns the registration, which the call keeps until it ends.
inline std::shared_ptr<transport::MemoryRegion> expose_target(Call& call, CallDescriptor& mine,
                                                              void* base, size_t bytes,
                                                              transport::Bytes& key) {
  auto region = call.transport().register_memory(base, bytes);
  mine.out_addr = reinterpret_cast<uint64_t>(base);
  mine.out_bytes = bytes;
  mine.signal_token = call.token();
  key = region->packed_key();
  mine.key = key;
  return region;
}

// all_reduce.cpp: the arguments of one gather round of a reduction (all_reduce, reduce_scatter):
// our n elements at `in` into p x n at `out`, the whole length and the operator in the
// descriptors.
RoundArgs reduction_round(void* out, const void* in, DType dtype, int p, int64_t n, ReduceOp op,
                          int64_t total_numel, const std::string& local_error);

// reduce_scatter.cpp: one round of a reduce-scatter, piece j being m elements at
// in + j * stride bytes; all_reduce's first phase runs it too.
struct ReduceScatterRound {
  const Collective& collective;  // what the descriptors say: all_reduce or reduce_scatter
  const uint8_t* in;
  size_t stride;
  uint8_t* out;  // m elements; may be our own piece of `in`
  DType dtype;
  int64_t m;
  ReduceOp op;
  uint64_t total_numel;  // the whole call's length, checked across ranks
  const std::string& local_error;
};
void reduce_scatter_round(Engine& e, GroupState& g, const ReduceScatterRound& round);

// gather.cpp: one gather of n elements per member into the root's out (p x n); reduce's
// rounds run it too, with their own collective, length and operator in the descriptors.
struct GatherRound {
  const Collective& collective;  // gather or reduce
  uint8_t* out;                  // the root's; its own chunk is copied unless `in` is already there
  const uint8_t* in;
  DType dtype;
  int64_t n;
  int root;
  ReduceOp op;
  uint64_t total_numel;
  const std::string& local_error;
};
void gather_round(Engine& e, GroupState& g, const GatherRound& round);

class Call;
struct Window;

// symmetric_fold.cpp: one call on a tensor of `bytes` in symmetric memory (engine/symmetric.hpp)
// on every member. Every member's descriptor, `describe`'s plus the window and the tensor's
// offset in it, is exchanged and checked (a member whose tensor is elsewhere makes every member
// raise); then `body` runs with the window, then a barrier, so no member returns, and may change
// its part, before every member is done reading and storing. The exchange is all the ordering
// `body` needs before it: every member has entered, so its part holds its input. False, having
// done nothing, when the tensor is in no window of the group.
bool run_on_window(Engine& e, GroupState& g, const char* name, const void* tensor, size_t bytes,
                   const std::string& local_error,
                   const std::function<CallDescriptor(Call&)>& describe,
                   const std::function<void(const Window&, size_t offset)>& body);
// Folds the n elements at `at` in every member's part, in rank order (the ordinary paths' rule,
// so the bits match them), into dst.
void fold_members(GroupState& g, const Window& w, size_t at, uint8_t* dst, DType dtype, ReduceOp op,
                  size_t n);

}  // namespace rdmacoll::engine
