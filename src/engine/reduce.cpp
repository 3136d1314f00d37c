#include "engine/reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/half.hpp"

namespace rdmacoll::engine {

namespace {

bool is_bitwise(ReduceOp op) {
  return op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor;
}

// Folds one more value into the accumulator. Integer sums and products wrap, as in torch
// (computed unsigned, so the wrap is defined).
template <typename A>
A combine(A acc, A v, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      if constexpr (std::is_integral_v<A>) {
        using U = std::make_unsigned_t<A>;
        return static_cast<A>(static_cast<U>(acc) + static_cast<U>(v));
      } else {
        return acc + v;
      }
    case ReduceOp::Product:
      if constexpr (std::is_integral_v<A>) {
        using U = std::make_unsigned_t<A>;
        return static_cast<A>(static_cast<U>(acc) * static_cast<U>(v));
      } else {
        return acc * v;
      }
    case ReduceOp::Min:
      return v < acc ? v : acc;
    case ReduceOp::Max:
      return acc < v ? v : acc;
    case ReduceOp::BAnd:
    case ReduceOp::BOr:
    case ReduceOp::BXor:
      if constexpr (std::is_integral_v<A>) {
        return op == ReduceOp::BAnd  ? static_cast<A>(acc & v)
               : op == ReduceOp::BOr ? static_cast<A>(acc | v)
                                     : static_cast<A>(acc ^ v);
      }
      break;
  }
  return acc;
}

// T: storage type; A: accumulator; load/store convert between them. Element by element, so
// dst may be any of the chunks: all of element i is read before element i is written.
template <typename T, typename A, typename Load, typename Store>
void fold(void* dst, const void* const* chunks, ReduceOp op, int p, size_t n, Load load,
          Store store) {
  T* out = static_cast<T*>(dst);
  for (size_t i = 0; i < n; ++i) {
    A acc = load(static_cast<const T*>(chunks[0])[i]);
    for (int r = 1; r < p; ++r)
      acc = combine<A>(acc, load(static_cast<const T*>(chunks[r])[i]), op);
    if constexpr (std::is_floating_point_v<A>) {
      if (op == ReduceOp::Avg) acc /= static_cast<A>(p);
    }
    out[i] = store(acc);
  }
}

// o[i] = finish(a[i] op b[i]) over n elements, a few vector registers' worth at a time: each
// sub-block is loaded whole before it is stored, so o may be a or b (exactly), and the fixed
// sub-block lets the compiler keep it in registers and vectorize without alias checks.
template <typename T, ReduceOp Op, typename Finish>
void combine_into(T* o, const T* a, const T* b, size_t n, Finish finish) {
  constexpr size_t kLanes = 64 / sizeof(T);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    T t[kLanes];
    for (size_t j = 0; j < kLanes; ++j)
      t[j] = finish(combine<T>(a[i + j], b[i + j], Op));
    for (size_t j = 0; j < kLanes; ++j)
      o[i + j] = t[j];
  }
  for (; i < n; ++i)
    o[i] = finish(combine<T>(a[i], b[i], Op));
}

// Types that accumulate in themselves fold a block at a time, chunk after chunk: the first two
// chunks into a local accumulator, then each later one into it, the last straight into dst:
// the same order, so the same bits, as element by element, in streaming loops the compiler
// vectorizes (no copy into the accumulator or out of it: those copies were 76% of the fold's
// samples at 256 KiB on 2 ranks). dst's block is written only after every chunk's was read, so
// dst may be any chunk. p >= 2 (reduce_chunks moves a single chunk).
template <typename T, ReduceOp Op>
void fold_streams(T* out, const void* const* chunks, int p, size_t n) {
  constexpr size_t kBlock = 4096 / sizeof(T);
  auto same = [](T v) { return v; };
  auto finish = [&](T v) {
    if constexpr (Op == ReduceOp::Avg && std::is_floating_point_v<T>) return v / static_cast<T>(p);
    return v;
  };
  auto chunk = [&](int r, size_t b) { return static_cast<const T*>(chunks[r]) + b; };
  T acc[kBlock];
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t len = std::min(kBlock, n - b);
    const T* first = chunk(0, b);
    for (int r = 1; r + 1 < p; ++r) {
      combine_into<T, Op>(acc, first, chunk(r, b), len, same);
      first = acc;
    }
    combine_into<T, Op>(out + b, first, chunk(p - 1, b), len, finish);
  }
}

template <typename T>
void fold_plain(void* dst, const void* const* chunks, ReduceOp op, int p, size_t n) {
  T* out = static_cast<T*>(dst);
  switch (op) {
    case ReduceOp::Sum:
      return fold_streams<T, ReduceOp::Sum>(out, chunks, p, n);
    case ReduceOp::Product:
      return fold_streams<T, ReduceOp::Product>(out, chunks, p, n);
    case ReduceOp::Min:
      return fold_streams<T, ReduceOp::Min>(out, chunks, p, n);
    case ReduceOp::Max:
      return fold_streams<T, ReduceOp::Max>(out, chunks, p, n);
    case ReduceOp::Avg:
      return fold_streams<T, ReduceOp::Avg>(out, chunks, p, n);
    case ReduceOp::BAnd:
      return fold_streams<T, ReduceOp::BAnd>(out, chunks, p, n);
    case ReduceOp::BOr:
      return fold_streams<T, ReduceOp::BOr>(out, chunks, p, n);
    case ReduceOp::BXor:
      return fold_streams<T, ReduceOp::BXor>(out, chunks, p, n);
  }
}

}  // namespace

std::string reduce_unsupported(ReduceOp op, DType dtype) {
  if (op == ReduceOp::Avg && !is_floating_point(dtype)) {
    return "AVG needs a floating-point dtype, got " + dtype_name(dtype);
  }
  if (is_bitwise(op) && is_floating_point(dtype)) {
    return reduce_op_name(op) + " needs an integer or bool dtype, got " + dtype_name(dtype);
  }
  return "";
}

void divide_elements(void* data, DType dtype, size_t n, int p) {
  switch (dtype) {
    case DType::Float32:
      for (size_t i = 0; i < n; ++i)
        static_cast<float*>(data)[i] /= static_cast<float>(p);
      return;
    case DType::Float64:
      for (size_t i = 0; i < n; ++i)
        static_cast<double*>(data)[i] /= static_cast<double>(p);
      return;
    case DType::Float16:
    case DType::BFloat16: {
      const bool half = dtype == DType::Float16;
      auto* v = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < n; ++i) {
        const float f = (half ? detail::half_to_float(v[i]) : detail::bfloat16_to_float(v[i])) /
                        static_cast<float>(p);
        v[i] = half ? detail::float_to_half(f) : detail::float_to_bfloat16(f);
      }
      return;
    }
    default:
      return;  // AVG is refused for other dtypes before any data moves
  }
}

void reduce_chunks(void* dst, const void* chunks, DType dtype, ReduceOp op, int p, size_t n) {
  std::vector<const void*> ptrs(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r)
    ptrs[r] =
        static_cast<const uint8_t*>(chunks) + static_cast<size_t>(r) * n * element_size(dtype);
  reduce_chunks(dst, ptrs.data(), dtype, op, p, n);
}

void reduce_chunks(void* dst, const void* const* chunks, DType dtype, ReduceOp op, int p,
                   size_t n) {
  if (n == 0) return;
  if (p == 1) {
    std::memmove(dst, chunks[0], n * element_size(dtype));
    return;
  }
  switch (dtype) {
    case DType::Bool: {
      // Logical: SUM and MAX are or, PRODUCT and MIN are and (torch maps them so).
      const ReduceOp logical = op == ReduceOp::Sum || op == ReduceOp::Max       ? ReduceOp::BOr
                               : op == ReduceOp::Product || op == ReduceOp::Min ? ReduceOp::BAnd
                                                                                : op;
      fold<uint8_t, uint8_t>(
          dst, chunks, logical, p, n, [](uint8_t v) { return static_cast<uint8_t>(v != 0); },
          [](uint8_t v) { return static_cast<uint8_t>(v != 0); });
      return;
    }
    case DType::UInt8:
      return fold_plain<uint8_t>(dst, chunks, op, p, n);
    case DType::Int8:
      return fold_plain<int8_t>(dst, chunks, op, p, n);
    case DType::Int16:
      return fold_plain<int16_t>(dst, chunks, op, p, n);
    case DType::Int32:
      return fold_plain<int32_t>(dst, chunks, op, p, n);
    case DType::Int64:
      return fold_plain<int64_t>(dst, chunks, op, p, n);
    case DType::Float16:
      return fold<uint16_t, float>(dst, chunks, op, p, n, detail::half_to_float,
                                   detail::float_to_half);
    case DType::BFloat16:
      return fold<uint16_t, float>(dst, chunks, op, p, n, detail::bfloat16_to_float,
                                   detail::float_to_bfloat16);
    case DType::Float32:
      return fold_plain<float>(dst, chunks, op, p, n);
    case DType::Float64:
      return fold_plain<double>(dst, chunks, op, p, n);
  }
}

}  // namespace rdmacoll::engine
