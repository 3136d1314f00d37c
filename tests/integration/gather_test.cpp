// gather across real processes over the UCX transport (shared memory, and again with
// UCX_TLS=tcp). Every test checks every element of every rank's result.

#include <gtest/gtest.h>

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "engine/collectives/gather.hpp"
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

TEST(Gather, EveryDtypeEveryRootAndSizesFromEmptyToSixteenMiB) {
  expect_all_ok(run_ranks(3, [](int, int) {
    int iter = 0;
    for (DType dt : kAllDTypes)
      for (int root = 0; root < 3; ++root)
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}})
          gather_and_check({}, root, n, dt, iter++);
    for (int64_t n : chunk_sizes(3)) {
      gather_and_check({}, 2, n, DType::Float32, iter++);
      gather_and_check({}, 1, n, DType::Float32, iter++, /*stacked=*/true);
    }
  }));
}

TEST(Gather, GroupsOfOneToEightRanks) {
  expect_all_ok(run_ranks(8, [](int rank, int) {
    int iter = 0;
    for (const auto& members : groups_of_eight()) {
      Group g = new_group(members);
      iter = 10 * g.size() + members[0];  // the same on every member
      if (!g.is_member()) continue;
      for (int64_t n : {int64_t{7}, int64_t{(100 << 10) / 4}}) {
        gather_and_check(g, 0, n, DType::Float32, iter++);
        gather_and_check(g, g.size() - 1, n, DType::Int64, iter++);
      }
    }
    (void)rank;
  }));
}

}  // namespace
}  // namespace rdmacoll

// On the in-process fabric (src/transport/loopback, ctest's loopback. list): ranks as threads of
// this process, every group size and host layout in milliseconds, every element checked.
namespace rdmacoll::engine {
namespace {

// To the middle rank, on one host and across hosts (where the eager limit is 2 KiB, so the data
// paths run early).
TEST(GatherOnLoopback, EveryGroupSizeAndLayout) {
  run_rooted_sweep([](RankContext& c, int root, int64_t n, const std::string& at) {
    Tensor in = zeros({n}, DType::Float64);
    for (int64_t i = 0; i < n; ++i)
      in.set(i, value_of(c.rank, i, 0));
    Tensor all = zeros({c.p * n}, DType::Float64);
    gather(c.engine, c.group,
           {.out = c.rank == root ? all.data() : nullptr,
            .in = in.data(),
            .dtype = DType::Float64,
            .n = n,
            .root = root});
    for (int r = 0; c.rank == root && r < c.p; ++r)
      for (int64_t i = 0; i < n; ++i)
        check(all.item(r * n + i) == value_of(r, i, 0), "gather" + at);
  });
}

}  // namespace
}  // namespace rdmacoll::engine
