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
struct ReduceArgs {
  void* data = nullptr;
  DType dtype = DType::Float32;
  int64_t numel = 0;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;  // a group rank
  // Non-empty when a layer above refused this rank's call: it still goes to the peers, so
  // that they raise too.
  std::string local_error = {};
};
void reduce(Engine& e, GroupState& g, const ReduceArgs& args);

}  // namespace rdmacoll::engine
