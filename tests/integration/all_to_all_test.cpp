// all_to_all_single and all_to_all across real processes over the UCX transport (shared memory, and
// again with UCX_TLS=tcp). Every test checks every element of every rank's result.

#include <gtest/gtest.h>
#include <signal.h>

#include <vector>

#include "gather_check.hpp"
#include "reduce_check.hpp"
#include "rooted_check.hpp"

namespace rdmacoll {
namespace {

using namespace testing::rooted;
using testing::expect_all_ok;
using testing::expect_throw_with;
using testing::run_ranks;

TEST(AllToAll, EqualSplitsInEveryDtype) {
  expect_all_ok(run_ranks(3, [](int, int) {
    int iter = 0;
    for (DType dt : kAllDTypes) {
      all_to_all_and_check(
          {}, [](int, int) { return int64_t{2}; }, 3, dt, iter++, true);
      all_to_all_and_check(
          {}, [](int, int) { return int64_t{0}; }, 3, dt, iter++, true);
    }
  }));
}

TEST(AllToAll, UnevenSplitsWithZerosInlineWrittenAndAsMessages) {
  expect_all_ok(run_ranks(4, [](int, int) {
    auto uneven = [](int i, int j) { return int64_t{(i + 2 * j) % 4}; };
    // Every rank's input inline.
    all_to_all_and_check({}, uneven, 1, DType::Float32, 0);
    // Every input past the eager limit, every output exposed: one-sided writes.
    all_to_all_and_check({}, uneven, 10000, DType::Float32, 1);
    // Rank 0 sends 80 KiB to rank 1 (exposed: a write) and one row to the others, whose small
    // outputs are not exposed: those rows go as messages; the rest is inline.
    all_to_all_and_check(
        {}, [](int i, int j) { return int64_t{i == 0 ? (j == 1 ? 20000 : 1) : (i + j) % 3}; }, 1,
        DType::Int32, 2);
    // 16 MiB per rank.
    all_to_all_and_check(
        {}, [](int, int) { return int64_t{1024}; }, 1024, DType::Float32, 3);
    // Ranks that send nothing at all, and one that receives nothing.
    all_to_all_and_check(
        {}, [](int i, int j) { return int64_t{i % 2 == 0 || j == 3 ? 0 : 5}; }, 7, DType::Float64,
        4);
  }));
}

TEST(AllToAll, GroupsOfOneToEightRanks) {
  expect_all_ok(run_ranks(8, [](int, int) {
    int iter = 0;
    for (const auto& members : groups_of_eight()) {
      Group g = new_group(members);
      iter = 10 * g.size() + members[0];  // the same on every member
      if (!g.is_member()) continue;
      all_to_all_and_check(
          g, [](int i, int j) { return int64_t{(i * 3 + j) % 4}; }, 5, DType::Float32, iter++);
      all_to_all_and_check(
          g, [](int i, int j) { return int64_t{(i + j) % 2 * 3000}; }, 8, DType::Float32, iter++);
    }
  }));
}

// Every rank its own host: equal pieces of up to 2 KiB whose input is past the 2 KiB eager
// limit take Bruck's log p rounds (9 ranks: 4 steps, the last carrying one piece), in every
// dtype, on the world and on a group of 8 whose members are not the world's first; smaller
// inputs ride inline, and uneven splits and larger pieces still go pairwise.
TEST(AllToAll, SmallEqualPiecesAcrossHostsInEveryDtype) {
  testing::RunOptions opt;
  opt.init = false;
  expect_all_ok(run_ranks(
      9,
      [](int rank, int) {
        ::setenv("RDMACOLL_HOST_ID", ("host" + std::to_string(rank)).c_str(), 1);
        init_process_group();
        int iter = 0;
        for (DType dt : kAllDTypes) {
          const int64_t width = 64 / static_cast<int64_t>(element_size(dt));
          all_to_all_and_check(  // 4 rows of 64 bytes per piece: Bruck's rounds
              {}, [](int, int) { return int64_t{4}; }, width, dt, iter++, true);
          all_to_all_and_check(  // one row: inline
              {}, [](int, int) { return int64_t{1}; }, width, dt, iter++, true);
        }
        Group g = new_group({8, 1, 2, 3, 4, 5, 6, 7});
        if (g.is_member()) {
          all_to_all_and_check(
              g, [](int, int) { return int64_t{3}; }, 20, DType::Float32, iter++, true);
          all_to_all_and_check(
              g, [](int i, int j) { return int64_t{(i + j) % 3}; }, 5, DType::Float32, iter++);
          all_to_all_and_check(
              g, [](int, int) { return int64_t{200}; }, 5, DType::Float32, iter++, true);
        }
        destroy_process_group();
      },
      opt));
}

TEST(AllToAll, ListsOfTensorsOfDifferentSizes) {
  expect_all_ok(run_ranks(3, [](int rank, int) {
    // inputs[j] here has j + rank + 1 elements; outputs[i] receives rank i's inputs[rank].
    std::vector<Tensor> inputs, outputs;
    for (int j = 0; j < 3; ++j) {
      Tensor t = zeros({j + rank + 1}, DType::Int64);
      for (int64_t e = 0; e < t.numel(); ++e)
        t.set(e, rank * 100 + j * 10 + e);
      inputs.push_back(t);
      outputs.push_back(zeros({rank + j + 1}, DType::Int64));
    }
    all_to_all(outputs, inputs);
    for (int i = 0; i < 3; ++i)
      for (int64_t e = 0; e < outputs[i].numel(); ++e)
        RANK_CHECK(outputs[i].item(e) == i * 100 + rank * 10 + e,
                   "from rank " << i << " element " << e << ": got " << outputs[i].item(e));
  }));
}

// A rank dies between all_to_alls: the others raise PeerFailure or Timeout, never hang.
TEST(AllToAllErrors, APeerKilledDuringAllToAllRaisesOnTheOthers) {
  testing::RunOptions opt;
  opt.kill_on_failure = false;
  opt.env = {{"RDMACOLL_TIMEOUT_S", "10"}};
  const auto results = run_ranks(
      3,
      [](int rank, int) {
        Tensor in = zeros({3 * 20000}), out = zeros({3 * 20000});
        testing::call_until_a_peer_dies(rank, 2, 5, [&] { all_to_all_single(out, in); });
      },
      opt);
  EXPECT_EQ(results[0].exit_code, 0);
  EXPECT_EQ(results[1].exit_code, 0);
  EXPECT_EQ(results[2].exit_code, 128 + SIGKILL);
}

}  // namespace
}  // namespace rdmacoll
