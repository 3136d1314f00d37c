#pragma once
// The local half of all_reduce: combining every member's copy of a segment, in group rank order.
// Pure functions, unit-tested without any network.

#include <cstddef>
#include <string>

#include "rdmacoll/types.hpp"

namespace rdmacoll::engine {

// Why `op` cannot reduce `dtype` ("AVG needs a floating-point dtype, got torch.int32"), or "".
std::string reduce_unsupported(ReduceOp op, DType dtype);

// dst[i] = op over r = 0, 1, ..., p-1 of chunks[r * n + i], folded in that order (16-bit
// floats accumulate in float, AVG divides the sum by p). dst may be any chunk.
void reduce_chunks(void* dst, const void* chunks, DType dtype, ReduceOp op, int p, size_t n);
// data[i] /= p, for floating-point dtypes (16-bit ones through float): the end of an AVG whose
// partial sums were folded pairwise (the ring reduce-scatter).
void divide_elements(void* data, DType dtype, size_t n, int p);
// The same over p separate chunks (chunks[r] is rank r's copy); dst may be one of them.
void reduce_chunks(void* dst, const void* const* chunks, DType dtype, ReduceOp op, int p, size_t n);

}  // namespace rdmacoll::engine
