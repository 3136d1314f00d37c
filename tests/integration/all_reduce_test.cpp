// all_reduce across real processes over the UCX transport (shared memory, and again with
// UCX_TLS=tcp). Every test checks every element of every rank's result.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "engine/collectives/all_reduce.hpp"
#include "gather_check.hpp"
#include "reduce_check.hpp"
#include "support/inprocess_world.hpp"

namespace rdmacoll {
namespace {

using namespace testing::reduction;
using testing::expect_all_ok;
using testing::expect_throw_with;
using testing::run_ranks;

void reduce_and_check(const Group& group, int64_t n, DType dt, ReduceOp op, int iter) {
  const int world = group.is_default() ? get_world_size() : group.size();
  const int me = group.is_default() ? get_rank() : group.rank();
  Tensor t = zeros({n}, dt);
  for (int64_t i = 0; i < n; ++i)
    t.set(i, value(me, i, iter, dt));
  all_reduce(t, op, group);
  for (int64_t i = 0; i < n; ++i) {
    const double want = expected(world, i, iter, dt, op);
    const double got = t.item(i);
    // AVG of 16-bit floats is rounded to the format; the rest is exact.
    const double tol = op == ReduceOp::Avg ? std::abs(want) * 1e-2 : 0;
    RANK_CHECK(std::abs(got - want) <= tol,
               "rank " << me << " " << dtype_name(dt) << " " << reduce_op_name(op) << " n " << n
                       << " element " << i << ": got " << got << ", want " << want);
  }
}

TEST(AllReduce, EveryDtypeAndOperatorOnThreeRanks) {
  expect_all_ok(run_ranks(3, [](int, int) {
    int iter = 0;
    for (DType dt : kAllDTypes) {
      for (ReduceOp op : kOps) {
        if (!supported(op, dt)) continue;
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}})
          reduce_and_check({}, n, dt, op, iter++);
      }
    }
  }));
}

TEST(AllReduce, LargeTensorsSpanSegmentsAndTheDataPath) {
  expect_all_ok(run_ranks(2, [](int, int) {
    // 10 MiB of float32: reduce-scatter + all-gather in two rounds (4 MiB pieces, then 1 MiB).
    reduce_and_check({}, (10 << 20) / 4, DType::Float32, ReduceOp::Sum, 0);
    // 48 KiB of int64: within the eager limit, gathered in one round and folded by every rank.
    reduce_and_check({}, (48 << 10) / 8, DType::Int64, ReduceOp::Max, 1);
    // 100 KiB: just past it, so reduce-scatter + all-gather.
    reduce_and_check({}, (100 << 10) / 8, DType::Int64, ReduceOp::Sum, 3);
    reduce_and_check({}, (1 << 20) / 2, DType::BFloat16, ReduceOp::Avg, 2);
  }));
}

TEST(AllReduce, ReduceScatterWithATailOnThreeRanks) {
  expect_all_ok(run_ranks(3, [](int, int) {
    // 100003 float32 (about 390 KiB): pieces of 33334 elements, then one element gathered.
    reduce_and_check({}, 100003, DType::Float32, ReduceOp::Sum, 0);
    reduce_and_check({}, 100003, DType::Int16, ReduceOp::Product, 1);
    reduce_and_check({}, (3 << 20) / 8 + 2, DType::Float64, ReduceOp::Min, 2);
  }));
}

TEST(AllReduce, SubgroupsAndManyCalls) {
  expect_all_ok(run_ranks(4, [](int rank, int) {
    Group sub = new_group({1, 2, 3});
    for (int iter = 0; iter < 60; ++iter) {
      reduce_and_check({}, 1 + iter % 17, DType::Float32, ReduceOp::Sum, iter);
      if (rank != 0) reduce_and_check(sub, 5, DType::Int32, ReduceOp::Product, iter);
      if (iter % 7 == 0)
        testing::gather_and_check({}, 3, DType::Float32, DType::Float32, false, iter);
    }
  }));
}

// Every rank raises and no rank's tensor changes.
void expect_rejected(Tensor& t, ReduceOp op, const std::string& needle) {
  Tensor before = zeros({t.numel()}, t.dtype());
  for (int64_t i = 0; i < t.numel(); ++i)
    before.set(i, t.item(i));
  expect_throw_with<InvalidArgument>([&] { all_reduce(t, op); }, needle);
  for (int64_t i = 0; i < t.numel(); ++i)
    RANK_CHECK(t.item(i) == before.item(i), "element " << i << " changed");
}

TEST(AllReduceErrors, BadInputRaisesOnEveryRankAndChangesNothing) {
  expect_all_ok(run_ranks(3, [](int rank, int) {
    Tensor ints = zeros({4}, DType::Int32);
    ints.set(0, rank + 1);
    expect_rejected(ints, ReduceOp::Avg, "AVG needs a floating-point dtype, got torch.int32");
    Tensor f = zeros({4});
    f.set(1, rank + 2);
    expect_rejected(f, rank == 1 ? ReduceOp::Max : ReduceOp::Sum, "disagree on the reduce op");
    // Lengths that agree in the first 4 MiB segment but not in total: caught before any
    // segment is reduced.
    Tensor big = zeros({rank == 2 ? (5 << 20) / 4 : (6 << 20) / 4});
    big.set(0, 1);
    expect_rejected(big, ReduceOp::Sum, "disagree");
    Tensor fd = zeros({4}, rank == 0 ? DType::Float64 : DType::Float32);
    expect_rejected(fd, ReduceOp::Sum, "torch.float64");
    // The group is still usable.
    reduce_and_check({}, 9, DType::Float32, ReduceOp::Sum, 0);
  }));
}

TEST(AllReduceErrors, DifferentCollectivesOnDifferentRanksRaiseOnEveryRank) {
  expect_all_ok(run_ranks(2, [](int rank, int) {
    Tensor t = zeros({4});
    if (rank == 0) {
      expect_throw_with<InvalidArgument>([&] { all_reduce(t); }, "ranks called different");
    } else {
      Tensor out = zeros({8});
      expect_throw_with<InvalidArgument>([&] { all_gather_into_tensor(out, t); },
                                         "ranks called different");
    }
    reduce_and_check({}, 3, DType::Float32, ReduceOp::Sum, 1);
  }));
}

}  // namespace
}  // namespace rdmacoll

// On the in-process fabric (src/transport/loopback, ctest's loopback. list): ranks as threads of
// this process, every group size and host layout in milliseconds, every element checked.
namespace rdmacoll::engine {
namespace {

// Inline, reduce-scatter rounds then an in-place all-gather; on one host and across hosts.
TEST(AllReduceOnLoopback, EveryGroupSizeAndLayout) {
  run_every_layout({1, 2, 3, 4, 5, 8, 13}, [](RankContext& c) {
    for (int64_t n : {int64_t{3}, int64_t{1000}, int64_t{70000}}) {
      Tensor t = zeros({n}, DType::Float64);
      for (int64_t i = 0; i < n; ++i)
        t.set(i, value_of(c.rank, i, 0));
      all_reduce(c.engine, c.group,
                 {.data = t.data(), .dtype = DType::Float64, .numel = n, .op = ReduceOp::Sum});
      for (int64_t i = 0; i < n; ++i) {
        double want = 0;
        for (int r = 0; r < c.p; ++r)
          want += value_of(r, i, 0);
        check(t.item(i) == want,
              "all_reduce n=" + std::to_string(n) + " element " + std::to_string(i));
      }
    }
  });
}

// One rank refuses its arguments (what the torch backend's reject() does): every rank raises
// InvalidArgument naming it, nothing is written, and the group's next calls are right.
TEST(AllReduceOnLoopback, ARankThatRejectsItsArgumentsMakesEveryRankRaiseAndTheGroupGoesOn) {
  for (int p : {2, 3, 5, 8}) {
    for (int per_host : {0, 1}) {
      run_world(p, hosts_for(p, per_host), [](RankContext& c) {
        for (int64_t n : {int64_t{4}, int64_t{1} << 18}) {
          const int bad = c.p / 2;
          Tensor t = zeros({n}, DType::Float32);
          try {
            if (c.rank == bad) {
              all_reduce(c.engine, c.group,
                         {.data = nullptr,
                          .dtype = DType::Float32,
                          .numel = 0,
                          .op = ReduceOp::Sum,
                          .local_error = "a mistake of this rank's"});
            } else {
              all_reduce(
                  c.engine, c.group,
                  {.data = t.data(), .dtype = DType::Float32, .numel = n, .op = ReduceOp::Sum});
            }
            check(false, "no error");
          } catch (const InvalidArgument& e) {
            check(std::string(e.what()).find("a mistake of this rank's") != std::string::npos,
                  std::string("the reason travels: ") + e.what());
          }
          gather_checked(c, 5, 0);
          gather_checked(c, n, 1);
        }
      });
    }
  }
}

}  // namespace
}  // namespace rdmacoll::engine
