#pragma once
// What the reducing collectives (all_reduce, reduce, reduce_scatter, the symmetric fold) keep
// per group (core/scratch_arena.hpp), reused by each call: every member's copy of a segment,
// pointers to the copies for the fold, and a non-root's reduced piece.

#include <cstdint>
#include <vector>

namespace rdmacoll::engine {

struct ReduceScratch {
  std::vector<uint8_t> gathered;
  std::vector<const void*> chunks;
  std::vector<uint8_t> piece;
};

}  // namespace rdmacoll::engine
