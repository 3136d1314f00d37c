// all_reduce's local fold: every dtype and operator against values worked out by hand.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "engine/reduce.hpp"
#include "rdmacoll/tensor.hpp"

namespace rdmacoll::engine {
namespace {

// p = 3 chunks of n = 2 elements: rank r holds {r + 1, 5 - r} (i.e. {1,5}, {2,4}, {3,3}).
Tensor chunks_of(DType dt) {
  Tensor t = zeros({6}, dt);
  for (int r = 0; r < 3; ++r) {
    t.set(r * 2, r + 1);
    t.set(r * 2 + 1, 5 - r);
  }
  return t;
}

std::vector<double> fold_of(DType dt, ReduceOp op) {
  Tensor src = chunks_of(dt);
  Tensor dst = zeros({2}, dt);
  reduce_chunks(dst.data(), src.data(), dt, op, 3, 2);
  return {dst.item(0), dst.item(1)};
}

TEST(Reduce, EveryNumericDtypeAndOperator) {
  for (DType dt : kAllDTypes) {
    if (dt == DType::Bool) continue;
    EXPECT_EQ(fold_of(dt, ReduceOp::Sum), (std::vector<double>{6, 12})) << dtype_name(dt);
    EXPECT_EQ(fold_of(dt, ReduceOp::Product), (std::vector<double>{6, 60})) << dtype_name(dt);
    EXPECT_EQ(fold_of(dt, ReduceOp::Min), (std::vector<double>{1, 3})) << dtype_name(dt);
    EXPECT_EQ(fold_of(dt, ReduceOp::Max), (std::vector<double>{3, 5})) << dtype_name(dt);
    if (is_floating_point(dt)) {
      EXPECT_EQ(fold_of(dt, ReduceOp::Avg), (std::vector<double>{2, 4})) << dtype_name(dt);
    } else {
      // {1,5} & {2,4} & {3,3} = {0, 0}; | = {3, 7}; ^ = {0, 2} (5 ^ 4 = 1, 1 ^ 3 = 2)
      EXPECT_EQ(fold_of(dt, ReduceOp::BAnd), (std::vector<double>{0, 0})) << dtype_name(dt);
      EXPECT_EQ(fold_of(dt, ReduceOp::BOr), (std::vector<double>{3, 7})) << dtype_name(dt);
      EXPECT_EQ(fold_of(dt, ReduceOp::BXor), (std::vector<double>{0, 2})) << dtype_name(dt);
    }
  }
}

TEST(Reduce, BoolIsLogical) {
  Tensor src = zeros({6}, DType::Bool);  // columns: {1,0,1} and {0,0,0}
  src.set(0, 1);
  src.set(4, 1);
  Tensor dst = zeros({2}, DType::Bool);
  auto run = [&](ReduceOp op) {
    reduce_chunks(dst.data(), src.data(), DType::Bool, op, 3, 2);
    return std::vector<double>{dst.item(0), dst.item(1)};
  };
  EXPECT_EQ(run(ReduceOp::Sum), (std::vector<double>{1, 0}));  // or
  EXPECT_EQ(run(ReduceOp::Max), (std::vector<double>{1, 0}));
  EXPECT_EQ(run(ReduceOp::Product), (std::vector<double>{0, 0}));  // and
  EXPECT_EQ(run(ReduceOp::Min), (std::vector<double>{0, 0}));
  EXPECT_EQ(run(ReduceOp::BXor), (std::vector<double>{0, 0}));
}

TEST(Reduce, IntegerSumsWrapAndHalfAccumulatesInFloat) {
  std::vector<int8_t> i8 = {100, 100};  // two ranks, one element each
  int8_t out8 = 0;
  reduce_chunks(&out8, i8.data(), DType::Int8, ReduceOp::Sum, 2, 1);
  EXPECT_EQ(out8, static_cast<int8_t>(-56));  // 200 wraps, as in torch
  // 2048 + 1 + 1 in half: pairwise in half would stay at 2048 (spacing 2); in float it is 2050.
  Tensor h = zeros({3}, DType::Float16);
  h.set(0, 2048);
  h.set(1, 1);
  h.set(2, 1);
  Tensor hout = zeros({1}, DType::Float16);
  reduce_chunks(hout.data(), h.data(), DType::Float16, ReduceOp::Sum, 3, 1);
  EXPECT_EQ(hout.item(0), 2050);
}

TEST(Reduce, DestinationMayBeTheFirstChunk) {
  std::vector<float> v = {1, 2, 10, 20};  // p = 2, n = 2
  reduce_chunks(v.data(), v.data(), DType::Float32, ReduceOp::Sum, 2, 2);
  EXPECT_EQ(v[0], 11);
  EXPECT_EQ(v[1], 22);
}

// The reduce-scatter folds into the owner's own copy, which may be any of the chunks; blocks
// longer than the fold's inner buffer must not read what they already wrote.
TEST(Reduce, SeparateChunksAndADestinationThatIsALaterChunk) {
  const size_t n = 5000;
  std::vector<double> a(n, 1.5), b(n), c(n, 0.25);
  for (size_t i = 0; i < n; ++i)
    b[i] = static_cast<double>(i);
  const void* chunks[] = {a.data(), b.data(), c.data()};
  reduce_chunks(b.data(), chunks, DType::Float64, ReduceOp::Sum, 3, n);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(b[i], 1.5 + static_cast<double>(i) + 0.25) << "element " << i;
  std::vector<uint16_t> h0(n, 0x3c00), h1(n, 0x4000);  // half 1.0 and 2.0
  const void* halves[] = {h0.data(), h1.data()};
  reduce_chunks(h1.data(), halves, DType::Float16, ReduceOp::Max, 2, n);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(h1[i], 0x4000) << "element " << i;
}

// The streaming fold (blocks of the accumulator, sub-blocks in registers, a tail) against the
// element-by-element fold written out here, in rank order, for every operator, group sizes 2,
// 3 and 5, and a destination that is separate or any one of the chunks: the same bits.
template <typename T>
void expect_fold_matches_by_element(DType dt, ReduceOp op) {
  const size_t n = 5003;  // several accumulator blocks and a tail shorter than a sub-block
  for (int p : {2, 3, 5}) {
    std::vector<std::vector<T>> in(p, std::vector<T>(n));
    for (int r = 0; r < p; ++r) {
      for (size_t i = 0; i < n; ++i)
        in[r][i] = static_cast<T>((static_cast<int>(i) * 7 + r * 3) % 11 + 1);
    }
    std::vector<T> want(n);
    for (size_t i = 0; i < n; ++i) {
      T acc = in[0][i];
      for (int r = 1; r < p; ++r) {
        const T v = in[r][i];
        switch (op) {
          case ReduceOp::Sum:
          case ReduceOp::Avg:
            acc = static_cast<T>(acc + v);
            break;
          case ReduceOp::Product:
            acc = static_cast<T>(acc * v);
            break;
          case ReduceOp::Min:
            acc = v < acc ? v : acc;
            break;
          case ReduceOp::Max:
            acc = acc < v ? v : acc;
            break;
          default:
            break;
        }
      }
      if (op == ReduceOp::Avg) acc = static_cast<T>(acc / static_cast<T>(p));
      want[i] = acc;
    }
    for (int into = -1; into < p; ++into) {
      auto chunks_now = in;
      std::vector<T> separate(n);
      std::vector<const void*> ptrs(p);
      for (int r = 0; r < p; ++r)
        ptrs[r] = chunks_now[r].data();
      T* dst = into < 0 ? separate.data() : chunks_now[into].data();
      reduce_chunks(dst, ptrs.data(), dt, op, p, n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(dst[i], want[i]) << dtype_name(dt) << " " << reduce_op_name(op) << " p=" << p
                                   << " into chunk " << into << " element " << i;
      }
    }
  }
}

TEST(Reduce, StreamingFoldMatchesTheElementByElementFoldForEveryDestination) {
  for (ReduceOp op :
       {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
    expect_fold_matches_by_element<float>(DType::Float32, op);
    expect_fold_matches_by_element<double>(DType::Float64, op);
    if (op == ReduceOp::Avg) continue;
    expect_fold_matches_by_element<int32_t>(DType::Int32, op);
    expect_fold_matches_by_element<int64_t>(DType::Int64, op);
  }
}

TEST(Reduce, UnsupportedPairsSayWhy) {
  EXPECT_EQ(reduce_unsupported(ReduceOp::Avg, DType::Int32),
            "AVG needs a floating-point dtype, got torch.int32");
  EXPECT_EQ(reduce_unsupported(ReduceOp::BXor, DType::Float32),
            "BXOR needs an integer or bool dtype, got torch.float32");
  EXPECT_EQ(reduce_unsupported(ReduceOp::Sum, DType::BFloat16), "");
  EXPECT_EQ(reduce_op_name(ReduceOp::Product), "PRODUCT");
}

}  // namespace
}  // namespace rdmacoll::engine
