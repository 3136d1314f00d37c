#pragma once
// The entry of all_to_all.cpp, which runs it (its row: registry.hpp).

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

// all_to_all: piece j of `in` (in_splits[j] elements, pieces in order) into member j's `out` at
// the place its out_splits give our piece; in and out do not overlap. Splits have p entries (or
// none, with local_error set).
void all_to_all(Engine& e, GroupState& g, void* out, const void* in, DType dtype,
                const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits,
                const std::string& local_error);

}  // namespace rdmacoll::engine
