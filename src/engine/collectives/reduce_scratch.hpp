#pragma once
// What the reducing collectives (all_reduce, reduce, reduce_scatter, the symmetric fold) keep
// per group (core/scratch_arena.hpp), reused by each call: every member's copy of a segment,
// pointers to the copies for the fold, and a non-root's reduced piece.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace rdmacoll::engine {

struct ReduceScratch {
  std::vector<uint8_t> gathered;
  std::vector<const void*> chunks;
  std::vector<uint8_t> piece;

  // Where the fold reads member r's copy (`bytes` at `at`, of p members): there, or a copy in
  // `gathered` when it is off its elements' alignment `es`, as inline data can be where a
  // message's framing shifts it (the fold loads whole elements).
  const uint8_t* aligned(int r, int p, const uint8_t* at, size_t bytes, size_t es) {
    if (reinterpret_cast<uintptr_t>(at) % es == 0) return at;
    if (gathered.size() < static_cast<size_t>(p) * bytes) gathered.resize(p * bytes);
    uint8_t* copy = gathered.data() + static_cast<size_t>(r) * bytes;
    std::memcpy(copy, at, bytes);
    return copy;
  }
};

}  // namespace rdmacoll::engine
