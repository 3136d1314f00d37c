#pragma once
// The arguments of one round of the engine's descriptor exchange: where this rank's data is
// and what its descriptor states about the call (shapes, dtypes, the collective, its operator,
// length and root, a local error), which every member checks against its own. The all-gather
// is one such round; the other collectives run theirs (collectives/*.cpp).

#include <cstdint>
#include <string_view>

#include "engine/core/collective.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

struct RoundArgs {
  void* out = nullptr;
  DType out_dtype = DType::Float32;
  int64_t out_numel = 0;
  const void* in = nullptr;
  DType in_dtype = DType::Float32;
  int64_t in_numel = 0;
  // Non-empty when the local arguments are invalid: the call still tells the peers (so they
  // raise too) and then raises InvalidArgument with this text. A view of the caller's string,
  // which outlives the call, as the descriptor made from these arguments views it too: a
  // RoundArgs built for one descriptor and gone before the exchange leaves nothing dangling.
  std::string_view local_error;
  // What the descriptors say the call is, so that ranks that disagree (or call different
  // collectives) raise on every rank.
  const Collective* collective = nullptr;  // its row (collectives/registry.hpp); never null
  ReduceOp reduce_op = ReduceOp::Sum;
  uint64_t total_numel = 0;
  int root = 0;
  // What errors call the call, when it is not the collective itself (rdmacoll::empty's
  // rounds); null: the collective's name.
  const char* title = nullptr;
};

}  // namespace rdmacoll::engine
