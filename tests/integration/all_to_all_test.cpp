// all_to_all_single and all_to_all across real processes over the UCX transport (shared memory, and
// again with UCX_TLS=tcp). Every test checks every element of every rank's result.

#include <gtest/gtest.h>
#include <signal.h>

#include <vector>

#include "engine/collectives/all_to_all.hpp"
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

// On the in-process fabric (src/transport/loopback, ctest's loopback. list): ranks as threads of
// this process, every group size and host layout in milliseconds, every element checked.
namespace rdmacoll::engine {
namespace {

// An all_to_all where rank i sends rank j count(i, j) float64, the value naming (i, j, e);
// checked element by element, and untouched when the call raises InvalidArgument.
template <typename Count>
void all_to_all_checked(RankContext& c, Count count, int call) {
  std::vector<int64_t> in_splits(c.p), out_splits(c.p);
  int64_t in_total = 0, out_total = 0;
  for (int j = 0; j < c.p; ++j) {
    in_splits[j] = count(c.rank, j);
    out_splits[j] = count(j, c.rank);
    in_total += in_splits[j];
    out_total += out_splits[j];
  }
  auto value = [&](int i, int j, int64_t e) { return (i * 1000 + j) * 100 + (e + call) % 100; };
  Tensor src = zeros({in_total}, DType::Float64), dst = zeros({out_total}, DType::Float64);
  for (int j = 0, k = 0; j < c.p; ++j)
    for (int64_t e = 0; e < in_splits[j]; ++e, ++k)
      src.set(k, value(c.rank, j, e));
  for (int64_t k = 0; k < out_total; ++k)
    dst.set(k, -1);
  try {
    all_to_all(c.engine, c.group,
               {.out = dst.data(),
                .in = src.data(),
                .dtype = DType::Float64,
                .out_splits = out_splits,
                .in_splits = in_splits});
  } catch (const InvalidArgument&) {  // then nothing is written, not even our own piece
    for (int64_t k = 0; k < out_total; ++k)
      check(dst.item(k) == -1, "a rejected all_to_all wrote element " + std::to_string(k));
    throw;
  }
  for (int i = 0, k = 0; i < c.p; ++i) {
    for (int64_t e = 0; e < out_splits[i]; ++e, ++k) {
      if (dst.item(k) != value(i, c.rank, e)) {
        throw std::runtime_error("all_to_all call " + std::to_string(call) +
                                 " p=" + std::to_string(c.p) + ": element " + std::to_string(e) +
                                 " from rank " + std::to_string(i) + " is " +
                                 std::to_string(dst.item(k)));
      }
    }
  }
}

// Uneven splits (rank i sends rank j (i + 2j) % 3 x n / 4 elements, zeros among them), on one
// host and across hosts.
TEST(AllToAllOnLoopback, UnevenSplitsEveryGroupSizeAndLayout) {
  run_every_layout({1, 2, 3, 5, 8, 13}, [](RankContext& c) {
    int call = 0;
    for (int64_t n : {int64_t{0}, int64_t{3}, int64_t{1000}, int64_t{70000}}) {
      all_to_all_checked(
          c, [n](int i, int j) { return int64_t{(i + 2 * j) % 3} * (n / 4); }, call++);
    }
  });
}

// Uneven splits of 130 ranks on 65 hosts take 16 x 130 bytes, more than the 2 KiB a descriptor
// has room for: each pair swaps its sizes in a round of its own. Equal splits travel as two
// numbers at any size. Inline pieces (k = 1) and one-sided writes (k = 8), zeros among them.
TEST(AllToAllOnLoopback, MoreRanksThanTheDescriptorsHoldSplitsFor) {
  const int p = 130;
  run_world(p, hosts_for(p, 2), [](RankContext& c) {
    int call = 0;
    for (int64_t k : {1, 8}) {
      all_to_all_checked(
          c, [k](int i, int j) { return int64_t{(i + 2 * j) % 3} * k; }, call++);
      all_to_all_checked(
          c, [k](int, int) { return k; }, call++);
    }
  });
}

// Equal pieces of up to 2 KiB across hosts from 8 ranks up, whose input is past the 2 KiB
// eager limit, take Bruck's rounds: each rank sends 2 ceil(log2 p) messages a call (the
// descriptors' rounds, then the pieces'), where the pairwise exchange sends ceil(log2 p) +
// p - 1. Smaller inputs ride in the descriptors' rounds alone; larger pieces go pairwise, here
// as one-sided writes (the outputs exceed the eager limit): no messages of their own.
TEST(AllToAllOnLoopback, SmallEqualPiecesAcrossHostsTakesBrucksLogPRounds) {
  for (int p : {8, 9, 13, 16, 33}) {
    for (int per_host : {1, 3}) {
      run_world(p, hosts_for(p, per_host), [](RankContext& c) {
        int log2p = 0;
        while ((1 << log2p) < c.p)
          ++log2p;
        int call = 0;
        for (int64_t k : {1, 8, 32, 256, 257, 0}) {  // float64: 8 .. 2056 bytes, and none
          const bool fits_inline = c.p * 8 * k + 16 <= 2048;
          const bool bruck = k > 0 && k <= 256 && !fits_inline;
          const uint64_t before = c.group.transport.lock()->statistics().control_messages_sent;
          all_to_all_checked(
              c, [k](int, int) { return k; }, call++);
          const uint64_t sent =
              c.group.transport.lock()->statistics().control_messages_sent - before;
          const uint64_t want = bruck ? 2 * log2p : log2p;
          check(sent == want, "p=" + std::to_string(c.p) + " pieces of " + std::to_string(8 * k) +
                                  " bytes: " + std::to_string(sent) + " messages, expected " +
                                  std::to_string(want));
        }
      });
    }
  }
}

// Beyond the descriptors' room, a pair that disagrees is found by its two ranks, and every rank
// raises their words before anything is written; the group goes on.
TEST(AllToAllOnLoopback, APairThatDisagreesBeyondTheDescriptorsRoomRaisesOnEveryRank) {
  const int p = 130;
  std::vector<std::string> errors(p);
  run_world(p, hosts_for(p, 2), [&](RankContext& c) {
    // Rank 3 sends rank 70 one element more than rank 70 expects.
    auto count = [&](int i, int j) {
      return int64_t{(i + j) % 4} + (i == 3 && j == 70 && c.rank == 3 ? 1 : 0);
    };
    try {
      all_to_all_checked(c, count, 0);
    } catch (const InvalidArgument& e) {
      errors[c.rank] = e.what();
    }
    all_to_all_checked(
        c, [](int i, int j) { return int64_t{(i * j) % 3}; }, 1);
  });
  for (int r = 0; r < p; ++r) {
    EXPECT_NE(errors[r].find("rank 3 sends 2 elements to rank 70, which expects 1"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
}

}  // namespace
}  // namespace rdmacoll::engine
