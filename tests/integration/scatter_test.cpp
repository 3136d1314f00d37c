// scatter across real processes over the UCX transport (shared memory, and again with
// UCX_TLS=tcp). Every test checks every element of every rank's result.

#include <gtest/gtest.h>

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "engine/collectives/scatter.hpp"
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

TEST(Scatter, EveryDtypeEveryRootAndSizesFromEmptyToSixteenMiB) {
  expect_all_ok(run_ranks(3, [](int, int) {
    int iter = 0;
    for (DType dt : kAllDTypes)
      for (int root = 0; root < 3; ++root)
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}})
          scatter_and_check({}, root, n, dt, iter++);
    for (int64_t n : chunk_sizes(3))
      scatter_and_check({}, 0, n, DType::Float32, iter++);
  }));
}

TEST(Scatter, GroupsOfOneToEightRanks) {
  expect_all_ok(run_ranks(8, [](int, int) {
    int iter = 0;
    for (const auto& members : groups_of_eight()) {
      Group g = new_group(members);
      iter = 10 * g.size() + members[0];  // the same on every member
      if (!g.is_member()) continue;
      for (int64_t n : {int64_t{7}, int64_t{(100 << 10) / 4}}) {
        scatter_and_check(g, 0, n, DType::Float32, iter++);
        scatter_and_check(g, g.size() - 1, n, DType::Int16, iter++);
      }
    }
  }));
}

}  // namespace
}  // namespace rdmacoll

// On the in-process fabric (src/transport/loopback, ctest's loopback. list): ranks as threads of
// this process, every group size and host layout in milliseconds, every element checked.
namespace rdmacoll::engine {
namespace {

// From the middle rank, on one host and across hosts.
TEST(ScatterOnLoopback, EveryGroupSizeAndLayout) {
  run_rooted_sweep([](RankContext& c, int root, int64_t n, const std::string& at) {
    Tensor whole = zeros({c.p * n}, DType::Float64);
    for (int64_t i = 0; i < c.p * n; ++i)
      whole.set(i, value_of(root, i, 1));
    Tensor piece = zeros({n}, DType::Float64);
    scatter(c.engine, c.group,
            {.out = piece.data(),
             .in = c.rank == root ? whole.data() : nullptr,
             .dtype = DType::Float64,
             .n = n,
             .root = root});
    for (int64_t i = 0; i < n; ++i)
      check(piece.item(i) == value_of(root, c.rank * n + i, 1), "scatter" + at);
  });
}

}  // namespace
}  // namespace rdmacoll::engine
