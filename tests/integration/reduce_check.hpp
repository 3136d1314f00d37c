#pragma once
// Values and expected reductions shared by the all_reduce and reduce_scatter tests.

#include <algorithm>
#include <cstdint>

#include <rdmacoll/rdmacoll.hpp>

namespace rdmacoll::testing::reduction {

// Small positive values, so that products of up to 4 ranks stay exact in every dtype
// (int8: at most 4^4 = 256 would not; values are 1..3, so 3^4 = 81).
inline double value(int rank, int64_t i, int iter, DType dt) {
  if (dt == DType::Bool) return (rank + i + iter) % 2;
  return static_cast<double>((rank * 7 + i * 3 + iter) % 3 + 1);
}

inline double expected(int world, int64_t i, int iter, DType dt, ReduceOp op) {
  if (dt == DType::Bool) {
    bool any = false, all = true, x = false;
    for (int r = 0; r < world; ++r) {
      const bool v = value(r, i, iter, dt) != 0;
      any = any || v;
      all = all && v;
      x = x != v;
    }
    if (op == ReduceOp::Sum || op == ReduceOp::Max || op == ReduceOp::BOr) return any;
    if (op == ReduceOp::BXor) return x;
    return all;
  }
  double acc = value(0, i, iter, dt);
  auto bits = [](double d) { return static_cast<int64_t>(d); };
  for (int r = 1; r < world; ++r) {
    const double v = value(r, i, iter, dt);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc += v;
        break;
      case ReduceOp::Product:
        acc *= v;
        break;
      case ReduceOp::Min:
        acc = std::min(acc, v);
        break;
      case ReduceOp::Max:
        acc = std::max(acc, v);
        break;
      case ReduceOp::BAnd:
        acc = static_cast<double>(bits(acc) & bits(v));
        break;
      case ReduceOp::BOr:
        acc = static_cast<double>(bits(acc) | bits(v));
        break;
      case ReduceOp::BXor:
        acc = static_cast<double>(bits(acc) ^ bits(v));
        break;
    }
  }
  return op == ReduceOp::Avg ? acc / world : acc;
}

// What torch allows: AVG on floating point only, bitwise operators on integers and bool only.
inline bool supported(ReduceOp op, DType dt) {
  const bool bitwise = op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor;
  if (op == ReduceOp::Avg) return is_floating_point(dt);
  return !(bitwise && is_floating_point(dt));
}

inline constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min,
                                    ReduceOp::Max, ReduceOp::Avg,     ReduceOp::BAnd,
                                    ReduceOp::BOr, ReduceOp::BXor};

}  // namespace rdmacoll::testing::reduction
