#pragma once
// The entry of gather.cpp, which runs it (its row: registry.hpp).

#include <cstdint>
#include <string>

#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

// gather: every member's n elements at `in` into the root's `out` (p x n, group rank order;
// only the root's is read, and its own chunk may already be in place). `root` is a group rank.
struct GatherArgs {
  void* out = nullptr;
  const void* in = nullptr;
  DType dtype = DType::Float32;
  int64_t n = 0;
  int root = 0;
  // Non-empty when a layer above refused this rank's call: it still goes to the peers, so
  // that they raise too.
  std::string local_error = {};
};
void gather(Engine& e, GroupState& g, const GatherArgs& args);

}  // namespace rdmacoll::engine
