#pragma once
// The vocabulary every layer shares: element types and reduction operators, as torch names them.

#include <cstddef>
#include <cstdint>
#include <string>

#include "rdmacoll/export.hpp"

namespace rdmacoll {

enum class DType : uint8_t {
  Bool,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
};

inline constexpr DType kAllDTypes[] = {
    DType::Bool,  DType::UInt8,   DType::Int8,     DType::Int16,   DType::Int32,
    DType::Int64, DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

RDMACOLL_API size_t element_size(DType dtype);
RDMACOLL_API bool is_floating_point(DType dtype);
// "torch.float32" style name, as torch prints it.
RDMACOLL_API std::string dtype_name(DType dtype);

// Reduction operators, as torch.distributed.ReduceOp. On bool tensors SUM and MAX are a logical
// or, PRODUCT and MIN a logical and. AVG needs a floating-point dtype; BAND, BOR and BXOR an
// integer or bool one.
enum class ReduceOp : uint8_t { Sum, Product, Min, Max, Avg, BAnd, BOr, BXor };
RDMACOLL_API std::string reduce_op_name(ReduceOp op);  // "SUM", "PRODUCT", ...

// Converts `count` elements from `src` (dtype `from`) to `dst` (dtype `to`), as torch's copy_.
RDMACOLL_API void convert_elements(void* dst, DType to, const void* src, DType from, size_t count);

}  // namespace rdmacoll
