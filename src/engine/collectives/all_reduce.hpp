#pragma once
// The entry of all_reduce.cpp, which runs it (its row: registry.hpp).

#include <cstdint>
#include <string>

#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

// all_reduce: in place over data[0, numel); `local_error` non-empty when a layer above refused
// this rank's call (the peers raise too).
void all_reduce(Engine& e, GroupState& g, void* data, DType dtype, int64_t numel, ReduceOp op,
                const std::string& local_error);

}  // namespace rdmacoll::engine
