#pragma once
// The entry of all_to_all.cpp, which runs it (its row: registry.hpp).

#include <cstdint>
#include <span>
#include <string>

#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

// all_to_all: piece j of `in` (in_splits[j] elements, pieces in order) into member j's `out` at
// the place its out_splits give our piece; in and out do not overlap. Splits have p entries (or
// none, with local_error set).
struct AllToAllArgs {
  void* out = nullptr;
  const void* in = nullptr;
  DType dtype = DType::Float32;
  std::span<const int64_t> out_splits = {};
  std::span<const int64_t> in_splits = {};
  // Non-empty when a layer above refused this rank's call: it still goes to the peers, so
  // that they raise too.
  std::string local_error = {};
};
void all_to_all(Engine& e, GroupState& g, const AllToAllArgs& args);

}  // namespace rdmacoll::engine
