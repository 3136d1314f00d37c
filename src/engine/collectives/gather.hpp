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
void gather(Engine& e, GroupState& g, void* out, const void* in, DType dtype, int64_t n, int root,
            const std::string& local_error);

}  // namespace rdmacoll::engine
