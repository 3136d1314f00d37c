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
void reduce_scatter(Engine& e, GroupState& g, void* out, const void* in, DType dtype, int64_t n,
                    ReduceOp op, const std::string& local_error);

}  // namespace rdmacoll::engine
