#pragma once
// The entry of reduce.cpp, which runs it (its row: registry.hpp).

#include <cstdint>
#include <string>

#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

// reduce: the reduction of every member's data[0, numel) into the root's `data`; the others'
// data stays as it was.
void reduce(Engine& e, GroupState& g, void* data, DType dtype, int64_t numel, ReduceOp op, int root,
            const std::string& local_error);

}  // namespace rdmacoll::engine
