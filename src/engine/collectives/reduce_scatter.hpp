#pragma once
// The entry of reduce_scatter.cpp, which runs it (its row: registry.hpp).

#include <cstdint>
#include <string>

#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

// reduce_scatter_tensor: `in` holds p x n elements, `out` receives the reduction of every
// member's piece `rank` (n elements); in and out share `dtype`.
struct ReduceScatterArgs {
  void* out = nullptr;
  const void* in = nullptr;
  DType dtype = DType::Float32;
  int64_t n = 0;
  ReduceOp op = ReduceOp::Sum;
  // Non-empty when a layer above refused this rank's call: it still goes to the peers, so
  // that they raise too.
  std::string local_error = {};
};
void reduce_scatter(Engine& e, GroupState& g, const ReduceScatterArgs& args);

}  // namespace rdmacoll::engine
