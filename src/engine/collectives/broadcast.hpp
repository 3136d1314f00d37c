#pragma once
// The entry of broadcast.cpp, which runs it (its row: registry.hpp).

#include <cstdint>
#include <string>

#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

// broadcast: in place over data[0, numel), from group rank `root`.
struct BroadcastArgs {
  void* data = nullptr;
  DType dtype = DType::Float32;
  int64_t numel = 0;
  int root = 0;
  // Non-empty when a layer above refused this rank's call: it still goes to the peers, so
  // that they raise too.
  std::string local_error = {};
};
void broadcast(Engine& e, GroupState& g, const BroadcastArgs& args);

}  // namespace rdmacoll::engine
