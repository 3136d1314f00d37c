#pragma once
// The entry of barrier.cpp, which runs it (its row: registry.hpp).

#include <cstdint>
#include <string>

#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

// barrier: `local_error` as for all_reduce.
void barrier(Engine& e, GroupState& g, const std::string& local_error = {});

}  // namespace rdmacoll::engine
