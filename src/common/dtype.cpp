// Element types and reduction operators: sizes, names, and torch's conversion rules.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/elements.hpp"
#include "common/half.hpp"
#include "rdmacoll/errors.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll {

size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8:
      return 1;
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Int32:
    case DType::Float32:
      return 4;
    case DType::Int64:
    case DType::Float64:
      return 8;
  }
  throw InvalidArgument("unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

bool is_floating_point(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float32 ||
         dtype == DType::Float64;
}

std::string dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return "torch.bool";
    case DType::UInt8:
      return "torch.uint8";
    case DType::Int8:
      return "torch.int8";
    case DType::Int16:
      return "torch.int16";
    case DType::Int32:
      return "torch.int32";
    case DType::Int64:
      return "torch.int64";
    case DType::Float16:
      return "torch.float16";
    case DType::BFloat16:
      return "torch.bfloat16";
    case DType::Float32:
      return "torch.float32";
    case DType::Float64:
      return "torch.float64";
  }
  return "torch.<unknown dtype " + std::to_string(static_cast<int>(dtype)) + ">";
}

namespace {

// Elements are read as int64 when both sides are integral (exact for every integer dtype),
// else as double.
int64_t load_int(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::Bool:
      return static_cast<const uint8_t*>(p)[i] != 0;
    case DType::UInt8:
      return static_cast<const uint8_t*>(p)[i];
    case DType::Int8:
      return static_cast<const int8_t*>(p)[i];
    case DType::Int16:
      return static_cast<const int16_t*>(p)[i];
    case DType::Int32:
      return static_cast<const int32_t*>(p)[i];
    case DType::Int64:
      return static_cast<const int64_t*>(p)[i];
    default:
      return 0;
  }
}

double load_double(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::Float16:
      return detail::half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::BFloat16:
      return detail::bfloat16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::Float32:
      return static_cast<const float*>(p)[i];
    case DType::Float64:
      return static_cast<const double*>(p)[i];
    default:
      return static_cast<double>(load_int(p, t, i));
  }
}

// Float to integer without undefined behaviour: NaN becomes 0, out-of-range saturates.
int64_t double_to_int(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

void store_int(void* p, DType t, size_t i, int64_t v) {
  switch (t) {
    case DType::Bool:
      static_cast<uint8_t*>(p)[i] = v != 0;
      break;
    case DType::UInt8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
    case DType::Int8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      break;
    case DType::Int16:
      static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
      break;
    case DType::Int32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DType::Int64:
      static_cast<int64_t*>(p)[i] = v;
      break;
    default:
      break;
  }
}

void store_double(void* p, DType t, size_t i, double v) {
  switch (t) {
    case DType::Bool:
      static_cast<uint8_t*>(p)[i] = v != 0.0;
      break;
    case DType::Float16:
      static_cast<uint16_t*>(p)[i] = detail::float_to_half(static_cast<float>(v));
      break;
    case DType::BFloat16:
      static_cast<uint16_t*>(p)[i] = detail::float_to_bfloat16(static_cast<float>(v));
      break;
    case DType::Float32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DType::Float64:
      static_cast<double*>(p)[i] = v;
      break;
    default:
      store_int(p, t, i, double_to_int(v));
      break;
  }
}

template <typename To, typename From>
void convert_loop(To* dst, const From* src, size_t n) {
  for (size_t i = 0; i < n; ++i)
    dst[i] = static_cast<To>(src[i]);
}

}  // namespace

double load_element(const void* data, DType dtype, size_t index) {
  return load_double(data, dtype, index);
}

void store_element(void* data, DType dtype, size_t index, double value) {
  store_double(data, dtype, index, value);
}

void convert_elements(void* dst, DType to, const void* src, DType from, size_t count) {
  if (count == 0) return;
  if (to == from) {
    std::memmove(dst, src, count * element_size(to));
    return;
  }
  // The common mixed-precision pairs get tight loops; the rest go element by element.
  if (to == DType::Float32 && from == DType::Int64) {
    convert_loop(static_cast<float*>(dst), static_cast<const int64_t*>(src), count);
    return;
  }
  if (to == DType::Float64 && from == DType::Float32) {
    convert_loop(static_cast<double*>(dst), static_cast<const float*>(src), count);
    return;
  }
  const bool integral = !is_floating_point(to) && !is_floating_point(from);
  for (size_t i = 0; i < count; ++i) {
    if (integral) {
      store_int(dst, to, i, load_int(src, from, i));
    } else {
      store_double(dst, to, i, load_double(src, from, i));
    }
  }
}

std::string reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "SUM";
    case ReduceOp::Product:
      return "PRODUCT";
    case ReduceOp::Min:
      return "MIN";
    case ReduceOp::Max:
      return "MAX";
    case ReduceOp::Avg:
      return "AVG";
    case ReduceOp::BAnd:
      return "BAND";
    case ReduceOp::BOr:
      return "BOR";
    case ReduceOp::BXor:
      return "BXOR";
  }
  return "op " + std::to_string(static_cast<int>(op));
}

}  // namespace rdmacoll
