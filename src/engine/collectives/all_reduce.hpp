#pragma once
// The entry of all_reduce.cpp, which runs it (its row: registry.hpp).

#include <cstdint>
#include <string>

#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

// all_reduce: in place over data[0, numel).
struct AllReduceArgs {
  void* data = nullptr;
  DType dtype = DType::Float32;
  int64_t numel = 0;
  ReduceOp op = ReduceOp::Sum;
  // Non-empty when a layer above refused this rank's call: it still goes to the peers, so
  // that they raise too.
  std::string local_error = {};
};
void all_reduce(Engine& e, GroupState& g, const AllReduceArgs& args);

}  // namespace rdmacoll::engine
