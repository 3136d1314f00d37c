#pragma once
// The entry of scatter.cpp, which runs it (its row: registry.hpp).

#include <cstdint>
#include <string>

#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

// scatter: the root's `in` (p x n; only the root's is read) piece j into member j's `out` (n).
void scatter(Engine& e, GroupState& g, void* out, const void* in, DType dtype, int64_t n, int root,
             const std::string& local_error);

}  // namespace rdmacoll::engine
