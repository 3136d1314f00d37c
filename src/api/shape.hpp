#pragma once
// The shape check every tensor constructor runs (api/tensor.cpp), for code that needs a
// shape's bytes before it has memory for them (rdmacoll::empty).

#include <cstdint>
#include <vector>

#include "rdmacoll/types.hpp"

namespace rdmacoll::api {

// The bytes of a tensor of `sizes` and `dtype`; InvalidArgument naming `where` for a negative
// size or a shape whose bytes do not fit in 63 bits.
int64_t checked_bytes(const std::vector<int64_t>& sizes, DType dtype, const char* where);

}  // namespace rdmacoll::api
