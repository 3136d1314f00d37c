#pragma once
// One element of a buffer of any dtype, as a double: what Tensor's element accessors (tests,
// examples) read and write. Integers round toward zero and saturate, as torch converts them.

#include <cstddef>

#include "rdmacoll/types.hpp"

namespace rdmacoll {

double load_element(const void* data, DType dtype, size_t index);
void store_element(void* data, DType dtype, size_t index, double value);

}  // namespace rdmacoll
