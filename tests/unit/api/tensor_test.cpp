#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/half.hpp"
#include "rdmacoll/errors.hpp"
#include "rdmacoll/tensor.hpp"

namespace rdmacoll {
namespace {

TEST(Tensor, PrintsLikeTorch) {
  EXPECT_EQ(tensor({1, 2, 2, 3}, DType::Float32).to_string(), "tensor([1., 2., 2., 3.])");
  EXPECT_EQ(tensor({0, 1, 100, 101}, DType::Float32).to_string(),
            "tensor([  0.,   1., 100., 101.])");
  EXPECT_EQ(tensor({1, 2}).to_string(), "tensor([1, 2])");
  EXPECT_EQ(tensor({1.5, 2}, DType::Float64).to_string(),
            "tensor([1.5000, 2.0000], dtype=torch.float64)");
  Tensor m = zeros({2, 3});
  for (int i = 0; i < 3; ++i) {
    m.set(i, i + 1);
    m.set(3 + i, 11 + i);
  }
  EXPECT_EQ(m.to_string(), "tensor([[ 1.,  2.,  3.],\n        [11., 12., 13.]])");
  EXPECT_EQ(tensor({1, 0}, DType::Bool).to_string(), "tensor([ True, False])");
  EXPECT_EQ(zeros({0}).to_string(), "tensor([])");
}

TEST(Tensor, SummarizesLargeTensors) {
  Tensor t = zeros({2000});
  const std::string s = t.to_string();
  EXPECT_NE(s.find("..."), std::string::npos);
  EXPECT_LT(s.size(), 100u);
}

TEST(Tensor, ShapesAndViews) {
  Tensor t = zeros({4, 3}, DType::Int16);
  EXPECT_EQ(t.numel(), 12);
  EXPECT_EQ(t.nbytes(), 24u);
  Tensor row = t.select(2);
  row.set(1, 7);
  EXPECT_EQ(t.item(7), 7);
  int32_t buf[3] = {1, 2, 3};
  Tensor v = Tensor::view(buf, DType::Int32, {3});
  EXPECT_EQ(v.item(2), 3);
  EXPECT_THROW(v.item(3), InvalidArgument);
  EXPECT_THROW(Tensor::view(nullptr, DType::Int32, {3}), InvalidArgument);
  EXPECT_THROW(zeros({-1}), InvalidArgument);
}

// A shape whose element count or byte count does not fit in 63 bits once wrapped to 0 elements
// (2^32 x 2^32) or to a small count: refused, naming the shape.
TEST(Tensor, ShapesBeyondSixtyThreeBitsAreRefused) {
  int32_t buf[1] = {};
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{int64_t{1} << 32, int64_t{1} << 32},
        std::vector<int64_t>{int64_t{1} << 62, 4}, std::vector<int64_t>{int64_t{1} << 61}}) {
    try {
      (void)Tensor::view(buf, DType::Int32, shape);
      ADD_FAILURE() << "no error for a shape of " << shape.size() << " sizes";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("has more bytes than fit in 63 bits"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(zeros({int64_t{1} << 40, int64_t{1} << 40}), InvalidArgument);
  EXPECT_EQ(Tensor::view(buf, DType::Int32, {0, int64_t{1} << 62}).numel(), 0);
}

TEST(Tensor, ConvertsBetweenEveryDtypePair) {
  const double values[] = {0, 1, 2, 7, 100, 127};
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      Tensor src = zeros({6}, from);
      for (int i = 0; i < 6; ++i)
        src.set(i, values[i]);
      Tensor dst = zeros({6}, to);
      convert_elements(dst.data(), to, src.data(), from, 6);
      for (int i = 0; i < 6; ++i) {
        const double expect =
            (to == DType::Bool || from == DType::Bool) ? (values[i] != 0) : values[i];
        EXPECT_EQ(dst.item(i), expect) << dtype_name(from) << " -> " << dtype_name(to) << " #" << i;
      }
    }
  }
}

TEST(Tensor, Int64ToFloat32LikeTorchCopy) {
  Tensor src = tensor({-3, 16777217});
  Tensor dst = zeros({2});
  convert_elements(dst.data(), DType::Float32, src.data(), DType::Int64, 2);
  EXPECT_EQ(dst.item(0), -3.0);
  EXPECT_EQ(dst.item(1), 16777216.0);  // nearest float, as torch gives
}

TEST(Tensor, HalfAndBfloat16RoundToNearestEven) {
  using detail::bfloat16_to_float;
  using detail::float_to_bfloat16;
  using detail::float_to_half;
  using detail::half_to_float;
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    ASSERT_EQ(float_to_half(half_to_float(static_cast<uint16_t>(h))), h);
  }
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(bfloat16_to_float(0x4049), 3.140625f);
  EXPECT_EQ(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie -> even
}

TEST(Tensor, FloatToIntSaturatesWithoutUndefinedBehaviour) {
  Tensor src = tensor({1e30, -1e30, NAN}, DType::Float64);
  Tensor dst = zeros({3}, DType::Int64);
  convert_elements(dst.data(), DType::Int64, src.data(), DType::Float64, 3);
  EXPECT_GT(dst.item(0), 0);
  EXPECT_LT(dst.item(1), 0);
  EXPECT_EQ(dst.item(2), 0);
}

}  // namespace
}  // namespace rdmacoll
