#pragma once
// The entry of all_gather.cpp, which runs it (its row: registry.hpp).

#include <cstddef>
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

// Whether a member copies chunks into outputs with non-temporal stores (common/stream_copy.hpp):
// where the group's outputs, p chunks each, together pass the member's last-level cache
// (`cache_bytes`; 0, unknown: never), the lines would go to memory anyway, and a plain store
// reads each line first (docs/performance.md, the code's thresholds).
inline bool stream_gather_stores(int p, size_t chunk, size_t cache_bytes) {
  return cache_bytes > 0 && static_cast<size_t>(p) * p * chunk >= cache_bytes;
}

}  // namespace rdmacoll::engine
