#pragma once
// Values, expected reductions and checked reduce_scatter/broadcast calls shared by the host
// tests and the SoftRoCE (verbs) tests.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include <rdmacoll/rdmacoll.hpp>

#include "gather_check.hpp"

namespace rdmacoll::testing::reduction {

// Small positive values, so that products of up to 4 ranks stay exact in every dtype
// (int8: at most 4^4 = 256 would not; values are 1..3, so 3^4 = 81). They vary along the
// input with no short period, so a piece folded from the wrong place shows (i * 3 made every
// element of a rank's input alike, and a piece mixed up in a 2-rank reduce_scatter passed).
inline double value(int rank, int64_t i, int iter, DType dt) {
  if (dt == DType::Bool) return (rank + i + iter) % 2;
  return static_cast<double>((rank * 7 + i * 5 + i / 7 + iter) % 3 + 1);
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

inline int group_size(const Group& g) {
  return g.is_default() ? get_world_size() : g.size();
}
inline int group_rank(const Group& g) {
  return g.is_default() ? get_rank() : g.rank();
}

inline void check_reduced(const Tensor& out, int p, int me, int iter, DType dt, ReduceOp op,
                          const std::string& what) {
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double want = expected(p, me * n + i, iter, dt, op);
    const double got = out.item(i);
    // AVG of 16-bit floats is rounded to the format; the rest is exact.
    const double tol = op == ReduceOp::Avg ? std::abs(want) * 1e-2 : 0;
    RANK_CHECK(std::abs(got - want) <= tol, what << ": rank " << me << " of " << p << " "
                                                 << dtype_name(dt) << " " << reduce_op_name(op)
                                                 << " n " << n << " element " << i << ": got "
                                                 << got << ", want " << want);
  }
}

// One checked reduce_scatter_tensor of n elements per rank: flat or stacked input, or in place
// (the output is this rank's piece of the input, as FSDP passes it).
enum class Layout { Flat, Stacked, InPlace };
inline void reduce_scatter_and_check(const Group& g, int64_t n, DType dt, ReduceOp op, int iter,
                                     Layout layout) {
  const int p = group_size(g), me = group_rank(g);
  Tensor in = layout == Layout::Stacked ? zeros({p, n}, dt) : zeros({p * n}, dt);
  for (int64_t i = 0; i < p * n; ++i)
    in.set(i, value(me, i, iter, dt));
  Tensor out;
  if (layout == Layout::InPlace) {
    out = Tensor::view(static_cast<uint8_t*>(in.data()) + me * n * element_size(dt), dt, {n});
  } else {
    out = zeros({n}, dt);
    for (int64_t i = 0; i < n; ++i)
      out.set(i, dt == DType::Bool ? 1 : 99);  // never an expected value of a correct write
  }
  reduce_scatter_tensor(out, in, op, g);
  check_reduced(out, p, me, iter, dt, op, "reduce_scatter_tensor");
}

// A broadcast of n elements from global rank `src`; the other ranks' tensors start with values
// a correct broadcast never leaves.
inline void broadcast_and_check(const Group& g, int src, int64_t n, DType dt, int iter) {
  const int me_global = get_rank();
  Tensor t = zeros({n}, dt);
  for (int64_t i = 0; i < n; ++i) {
    const double want = testing::input_value(src, i, iter, dt);
    t.set(i, me_global == src ? want : (dt == DType::Bool ? 1 - want : want + 1));
  }
  broadcast(t, src, g);
  for (int64_t i = 0; i < n; ++i) {
    const double want = testing::input_value(src, i, iter, dt);
    RANK_CHECK(t.item(i) == want, "broadcast from " << src << ": rank " << me_global << " "
                                                    << dtype_name(dt) << " n " << n << " element "
                                                    << i << ": got " << t.item(i) << ", want "
                                                    << want);
  }
}

}  // namespace rdmacoll::testing::reduction
