#pragma once
// The entry of all_gather.cpp, which runs it (its row: registry.hpp).

#include <cstdint>
#include <string>

#include "engine/core/round_args.hpp"
#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

// all_gather_into_tensor: every member's in_numel elements at `in` into `out` (p x in_numel,
// group rank order); RoundArgs says the rest (collective, dtypes, a local error).
void all_gather(Engine& e, GroupState& g, const RoundArgs& a);

}  // namespace rdmacoll::engine
