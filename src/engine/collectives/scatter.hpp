#pragma once
// The entry of scatter.cpp, which runs it (its row: registry.hpp).

#include <cstdint>
#include <string>

#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

// scatter: the root's `in` (p x n; only the root's is read) piece j into member j's `out` (n).
struct ScatterArgs {
  void* out = nullptr;
  const void* in = nullptr;
  DType dtype = DType::Float32;
  int64_t n = 0;
  int root = 0;  // a group rank
  // Non-empty when a layer above refused this rank's call: it still goes to the peers, so
  // that they raise too.
  std::string local_error = {};
};
void scatter(Engine& e, GroupState& g, const ScatterArgs& args);

}  // namespace rdmacoll::engine
