#pragma once
// The entry of broadcast.cpp, which runs it (its row: registry.hpp).

#include <cstdint>
#include <string>

#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

// broadcast: in place over data[0, numel), from group rank `root`.
void broadcast(Engine& e, GroupState& g, void* data, DType dtype, int64_t numel, int root,
               const std::string& local_error);

}  // namespace rdmacoll::engine
