#pragma once
// What a call of the engine is given: the arguments of one gather round (every collective is
// built from them) and how its waits poll. Apart from engine.hpp, so that the pieces a
// collective is built from (call.hpp) need not include the facade.

#include <chrono>
#include <cstdint>
#include <string>

#include "engine/call_descriptor.hpp"
#include "rdmacoll/types.hpp"

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
  // What errors call the call, when it is not the collective itself (rdmacoll::empty's
  // rounds); null: the collective's name.
  const char* title = nullptr;
};

// How a wait polls before it blocks in the transport: a wake-up from poll() costs tens of us,
// so waits poll first; when ranks outnumber cores each poll yields the core (sched_yield) so
// the peer being waited for can run, as MPI's yield-when-idle does.
struct SpinPolicy {
  std::chrono::microseconds duration{0};
  bool yield = false;
};

}  // namespace rdmacoll::engine
