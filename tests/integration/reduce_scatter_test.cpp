// reduce_scatter_tensor across real processes over the UCX transport (shared memory, and again with
// UCX_TLS=tcp). Every test checks every element of every rank's output.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>

#include "api/debug.hpp"
#include "engine/collectives/reduce_scatter.hpp"
#include "gather_check.hpp"
#include "reduce_check.hpp"
#include "support/inprocess_world.hpp"

namespace rdmacoll {
namespace {

using namespace testing::reduction;
using testing::expect_all_ok;
using testing::expect_throw_with;
using testing::run_ranks;

TEST(ReduceScatter, EveryDtypeAndOperatorOnThreeRanks) {
  expect_all_ok(run_ranks(3, [](int, int) {
    int iter = 0;
    for (DType dt : kAllDTypes) {
      for (ReduceOp op : kOps) {
        if (!supported(op, dt)) continue;
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{12000}}) {
          reduce_scatter_and_check({}, n, dt, op, iter, static_cast<Layout>(iter % 3));
          ++iter;
        }
      }
    }
  }));
}

// Group sizes 1..8 (every subgroup {0..k-1} of an 8-rank world), small (one gather round) and
// past the eager limit (direct rounds).
TEST(ReduceScatter, GroupSizesOneToEight) {
  expect_all_ok(run_ranks(8, [](int rank, int) {
    for (int k = 1; k <= 8; ++k) {
      std::vector<int> ranks(k);
      std::iota(ranks.begin(), ranks.end(), 0);
      Group g = new_group(ranks);
      if (rank >= k) continue;
      reduce_scatter_and_check(g, 3, DType::Float32, ReduceOp::Sum, k, Layout::Flat);
      reduce_scatter_and_check(g, 5000, DType::Int32, ReduceOp::Max, k, Layout::Stacked);
      reduce_scatter_and_check(g, 5000, DType::Int64, ReduceOp::Sum, k + 1, Layout::InPlace);
    }
  }));
}

TEST(ReduceScatter, SixteenMiBInRoundsAndSubgroups) {
  expect_all_ok(run_ranks(4, [](int rank, int) {
    // 16 MiB of float32 input on 2 ranks: 8 MiB out each, two 4 MiB rounds.
    Group pair = new_group({1, 3});
    Group three = new_group({0, 1, 2});
    if (rank == 1 || rank == 3) {
      reduce_scatter_and_check(pair, (8 << 20) / 4, DType::Float32, ReduceOp::Sum, 0, Layout::Flat);
      reduce_scatter_and_check(pair, (8 << 20) / 4, DType::Float32, ReduceOp::Min, 1,
                               Layout::InPlace);
    }
    if (rank < 3) {
      reduce_scatter_and_check(three, 300001, DType::BFloat16, ReduceOp::Avg, 2, Layout::Stacked);
    }
    reduce_scatter_and_check({}, 1 << 10, DType::Float64, ReduceOp::Product, 3, Layout::Flat);
  }));
}

// The ring reduce-scatter (what groups spanning hosts use), forced on one host: every dtype
// and operator past the eager limit, odd and even group sizes, and all_reduce through it.
TEST(ReduceScatter, RingEveryDtypeAndOperator) {
  testing::RunOptions opt;
  opt.env = {{"RDMACOLL_ALGO", "ring"}};
  expect_all_ok(run_ranks(
      5,
      [](int rank, int) {
        Group four = new_group({0, 1, 3, 4});
        int iter = 0;
        for (DType dt : kAllDTypes) {
          for (ReduceOp op : kOps) {
            if (!supported(op, dt) || op == ReduceOp::Product) continue;  // 3^5 overflows int8
            reduce_scatter_and_check({}, 20000, dt, op, iter, static_cast<Layout>(iter % 3));
            if (rank != 2)
              reduce_scatter_and_check(four, 30000, dt, op, iter, static_cast<Layout>(iter % 3));
            ++iter;
          }
        }
        reduce_scatter_and_check({}, (4 << 20) / 4 + 3, DType::Float32, ReduceOp::Sum, 0,
                                 Layout::Flat);  // two rounds
        Tensor t = zeros({100003});
        for (int64_t i = 0; i < t.numel(); ++i)
          t.set(i, rank + i % 7);
        all_reduce(t);
        for (int64_t i = 0; i < t.numel(); ++i)
          RANK_CHECK(t.item(i) == 10 + 5 * (i % 7), "all_reduce element " << i);
      },
      opt));
}

TEST(ReduceScatterErrors, BadInputRaisesOnEveryRankAndWritesNothing) {
  expect_all_ok(run_ranks(3, [](int rank, int) {
    auto rejected = [&](Tensor& out, const Tensor& in, ReduceOp op, const std::string& needle) {
      for (int64_t i = 0; i < out.numel(); ++i)
        out.set(i, 7);
      expect_throw_with<InvalidArgument>([&] { reduce_scatter_tensor(out, in, op); }, needle);
      for (int64_t i = 0; i < out.numel(); ++i)
        RANK_CHECK(out.item(i) == 7, "element " << i << " changed");
    };
    Tensor in = zeros({12}), out = zeros({4});
    Tensor out5 = zeros({5});
    rejected(rank == 1 ? out5 : out, in, ReduceOp::Sum,
             rank == 1 ? "input has 12 elements (12,), expected group size 3 x output's 5"
                       : "rank 1 rejected its arguments");
    Tensor ints = zeros({12}, DType::Int32), iout = zeros({4}, DType::Int32);
    rejected(iout, ints, ReduceOp::Avg, "AVG needs a floating-point dtype");
    Tensor dout = zeros({4}, DType::Float64);
    rejected(rank == 0 ? dout : out, in, ReduceOp::Sum,
             rank == 0 ? "needs one dtype" : "rank 0 rejected its arguments");
    Tensor in15 = zeros({15}), out5b = zeros({5});
    rejected(rank == 2 ? out5b : out, rank == 2 ? in15 : in, ReduceOp::Sum, "disagree");
    rejected(out, in, rank == 0 ? ReduceOp::Max : ReduceOp::Sum, "disagree on the reduce op");
    // Still usable afterwards.
    reduce_scatter_and_check({}, 4, DType::Float32, ReduceOp::Sum, 0, Layout::Flat);
  }));
}

// Past the eager limit the rounds' descriptors carry a rejecting rank's reason to its peers: the
// reason itself, not a view of a string gone by then (it once arrived as garbage).
TEST(ReduceScatterErrors, OneRanksReasonReachesEveryPeerPastTheEagerLimit) {
  expect_all_ok(run_ranks(3, [](int rank, int) {
    constexpr int64_t n = 40000;  // 3 x 160 KB of input: the direct rounds
    Tensor in = zeros({3 * n}), out = zeros({n});
    Tensor dout = zeros({n}, DType::Float64);
    const std::string why = "needs one dtype";
    expect_throw_with<InvalidArgument>(
        [&] { reduce_scatter_tensor(rank == 2 ? dout : out, in, ReduceOp::Sum); }, why);
    Tensor ints = zeros({3 * n}, DType::Int32);
    expect_throw_with<InvalidArgument>(
        [&] { all_reduce(rank == 1 ? ints : in, rank == 1 ? ReduceOp::Avg : ReduceOp::Sum); },
        "AVG needs a floating-point dtype");
  }));
}

}  // namespace
}  // namespace rdmacoll

// On the in-process fabric (src/transport/loopback, ctest's loopback. list): ranks as threads of
// this process, every group size and host layout in milliseconds, every element checked.
namespace rdmacoll::engine {
namespace {

TEST(ReduceScatterOnLoopback, EveryGroupSizeAndLayout) {
  run_every_layout({1, 2, 3, 4, 5, 8, 13}, [](RankContext& c) {
    for (int64_t n : {int64_t{3}, int64_t{1000}, int64_t{70000}}) {
      Tensor in = zeros({c.p * n}, DType::Float64);
      for (int64_t i = 0; i < c.p * n; ++i)
        in.set(i, value_of(c.rank, i, 1));
      Tensor out = zeros({n}, DType::Float64);
      reduce_scatter(c.engine, c.group,
                     {.out = out.data(),
                      .in = in.data(),
                      .dtype = DType::Float64,
                      .n = n,
                      .op = ReduceOp::Max});
      for (int64_t i = 0; i < n; ++i) {
        double want = -1;
        for (int r = 0; r < c.p; ++r)
          want = std::max(want, value_of(r, c.rank * n + i, 1));
        check(out.item(i) == want,
              "reduce_scatter n=" + std::to_string(n) + " element " + std::to_string(i));
      }
    }
  });
}

}  // namespace
}  // namespace rdmacoll::engine
