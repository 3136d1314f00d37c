// gather, scatter, reduce and all_to_all across real processes over the UCX transport (shared
// memory, and again with UCX_TLS=tcp). Every test checks every element of every rank's result.

#include <gtest/gtest.h>

#include <signal.h>

#include <cstdio>
#include <cstdlib>
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

// Sizes on every path: empty, one element, inline, just past the eager limit (64 KiB up to 16
// ranks), and 16 MiB in all.
std::vector<int64_t> chunk_sizes(int p) {
  return {0, 1, 1000, (100 << 10) / 4, (16 << 20) / 4 / p};
}

// The groups of an 8-rank world the tests run on: 1 to 8 ranks, non-powers of two, and members
// that are not the world's first ranks.
std::vector<std::vector<int>> groups_of_eight() {
  return {
      {0},      {0, 1}, {0, 1, 2}, {3, 5, 6, 7, 1}, {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5, 6, 7},
      {6, 2, 4}};
}

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

TEST(RootedErrors, MistakesRaiseOnEveryRankAndTheGroupStaysUsable) {
  expect_all_ok(run_ranks(3, [](int rank, int) {
    Tensor in = zeros({4});
    // Splits that disagree between two ranks: everyone names the pair.
    {
      Tensor out = zeros({rank == 1 ? 4 : 3});
      std::vector<int64_t> in_splits = {1, 1, 2}, out_splits = {1, 1, 1};
      if (rank == 1) out_splits = {2, 1, 1};
      if (rank == 0) in_splits = {1, 1, 2};
      expect_throw_with<InvalidArgument>([&] { all_to_all_single(out, in, out_splits, in_splits); },
                                         "disagree on the all_to_all's splits");
    }
    // A mistake one rank sees: it says why, the others name it.
    {
      Tensor out = zeros({4});
      std::vector<int64_t> splits = rank == 2 ? std::vector<int64_t>{4} : std::vector<int64_t>{};
      if (rank == 2) {
        expect_throw_with<InvalidArgument>([&] { all_to_all_single(out, in, {}, splits); },
                                           "input_split_sizes has 1 entries");
      } else {
        Tensor ok_in = zeros({3}), ok_out = zeros({3});
        expect_throw_with<InvalidArgument>([&] { all_to_all_single(ok_out, ok_in); },
                                           "rank 2 rejected its arguments");
      }
    }
    {
      Tensor out = zeros({rank == 0 ? 11 : 12});
      expect_throw_with<InvalidArgument>(
          [&] { gather(rank == 0 ? &out : nullptr, in, 0); },
          rank == 0 ? "output has 11 elements" : "rank 0 rejected its arguments");
    }
    expect_throw_with<InvalidArgument>([&] { gather(nullptr, in, 5); }, "dst 5 is not a member");
    expect_throw_with<InvalidArgument>([&] { reduce(in, rank == 2 ? 1 : 0); },
                                       "disagree on the reduce's root");
    Tensor whole = zeros({12});
    Tensor wrong = zeros({rank == 1 ? 5 : 4});
    expect_throw_with<InvalidArgument>([&] { scatter(wrong, rank == 0 ? &whole : nullptr, 0); },
                                       "ranks disagree");
    // Still in step: every collective works afterwards.
    gather_and_check({}, 1, 100, DType::Float32, 7);
    scatter_and_check({}, 2, 100, DType::Float32, 8);
    reduce_and_check({}, 0, 100, DType::Float32, ReduceOp::Sum, 9);
    all_to_all_and_check(
        {}, [](int i, int j) { return int64_t{i + j}; }, 2, DType::Float32, 10);
  }));
}

// A rank dies between all_to_alls: the others raise PeerFailure or Timeout, never hang.
TEST(RootedErrors, APeerKilledDuringAllToAllRaisesOnTheOthers) {
  testing::RunOptions opt;
  opt.kill_on_failure = false;
  opt.env = {{"RDMACOLL_TIMEOUT_S", "10"}};
  const auto results = run_ranks(
      3,
      [](int rank, int) {
        Tensor in = zeros({3 * 20000}), out = zeros({3 * 20000});
        for (int iter = 0; iter < 100000; ++iter) {
          if (rank == 2 && iter == 5) ::raise(SIGKILL);
          try {
            all_to_all_single(out, in);
          } catch (const PeerFailure& e) {
            std::fprintf(stderr, "[rank %d] as expected: %s\n", rank, e.what());
            std::_Exit(0);
          } catch (const Timeout& e) {
            std::fprintf(stderr, "[rank %d] as expected: %s\n", rank, e.what());
            std::_Exit(0);
          }
        }
        throw testing::CheckFailure("never noticed the dead peer");
      },
      opt);
  EXPECT_EQ(results[0].exit_code, 0);
  EXPECT_EQ(results[1].exit_code, 0);
  EXPECT_EQ(results[2].exit_code, 128 + SIGKILL);
}

}  // namespace
}  // namespace rdmacoll
