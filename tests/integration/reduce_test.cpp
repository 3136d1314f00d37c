// reduce across real processes over the UCX transport (shared memory, and again with
// UCX_TLS=tcp). Every test checks every element of every rank's result.

#include <gtest/gtest.h>

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "engine/collectives/reduce.hpp"
#include "gather_check.hpp"
#include "reduce_check.hpp"
#include "rooted_check.hpp"
#include "support/inprocess_world.hpp"

namespace rdmacoll {
namespace {

using namespace testing::rooted;
using testing::expect_all_ok;
using testing::expect_throw_with;
using testing::run_ranks;

TEST(Reduce, EveryDtypeAndOperatorToEveryRoot) {
  expect_all_ok(run_ranks(3, [](int, int) {
    using namespace testing::reduction;
    int iter = 0;
    for (DType dt : kAllDTypes)
      for (ReduceOp op : kOps) {
        if (!supported(op, dt)) continue;
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}}) {
          reduce_and_check({}, iter % 3, n, dt, op, iter);
          ++iter;
        }
      }
  }));
}

TEST(Reduce, LargeTensorsReduceScatterThenGatherAndLeaveTheOthersAlone) {
  expect_all_ok(run_ranks(3, [](int, int) {
    // 10 MiB: rounds of 4 MiB pieces, and a tail of 10 MiB / 4 mod 3 elements.
    reduce_and_check({}, 1, (10 << 20) / 4 + 2, DType::Float32, ReduceOp::Sum, 0);
    reduce_and_check({}, 0, (100 << 10) / 8, DType::Int64, ReduceOp::Max, 1);
    reduce_and_check({}, 2, (300 << 10) / 2, DType::BFloat16, ReduceOp::Avg, 2);
    reduce_and_check({}, 2, (16 << 20) / 4, DType::Int32, ReduceOp::Min, 3);
  }));
}

TEST(Reduce, GroupsOfOneToEightRanks) {
  expect_all_ok(run_ranks(8, [](int, int) {
    int iter = 0;
    for (const auto& members : groups_of_eight()) {
      Group g = new_group(members);
      iter = 10 * g.size() + members[0];  // the same on every member
      if (!g.is_member()) continue;
      for (int64_t n : {int64_t{7}, int64_t{(100 << 10) / 4}})
        reduce_and_check(g, g.size() / 2, n, DType::Float32, ReduceOp::Sum, iter++);
    }
  }));
}

}  // namespace
}  // namespace rdmacoll

// On the in-process fabric (src/transport/loopback, ctest's loopback. list): ranks as threads of
// this process, every group size and host layout in milliseconds, every element checked.
namespace rdmacoll::engine {
namespace {

// To the middle rank, on one host and across hosts; the others' data stays as it was.
TEST(ReduceOnLoopback, EveryGroupSizeAndLayout) {
  run_rooted_sweep([](RankContext& c, int root, int64_t n, const std::string& at) {
    Tensor in = zeros({n}, DType::Float64);
    for (int64_t i = 0; i < n; ++i)
      in.set(i, value_of(c.rank, i, 0));
    reduce(c.engine, c.group,
           {.data = in.data(),
            .dtype = DType::Float64,
            .numel = n,
            .op = ReduceOp::Sum,
            .root = root});
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int r = 0; r < c.p; ++r)
        want += value_of(r, i, 0);
      check(in.item(i) == (c.rank == root ? want : value_of(c.rank, i, 0)), "reduce" + at);
    }
  });
}

}  // namespace
}  // namespace rdmacoll::engine
