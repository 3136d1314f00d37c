#pragma once
// The entry of barrier.cpp, which runs it (its row: registry.hpp).

#include <cstdint>
#include <string>

#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

// barrier: no member leaves before every member has entered.
struct BarrierArgs {
  // Non-empty when a layer above refused this rank's call: it still goes to the peers, so
  // that they raise too.
  std::string local_error = {};
};
void barrier(Engine& e, GroupState& g, const BarrierArgs& args = {});

}  // namespace rdmacoll::engine
