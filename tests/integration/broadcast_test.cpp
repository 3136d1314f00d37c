// broadcast across real processes over the UCX transport (shared memory, and again with
// UCX_TLS=tcp). Every test checks every element of every rank's output.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>

#include "api/debug.hpp"
#include "engine/collectives/broadcast.hpp"
#include "gather_check.hpp"
#include "reduce_check.hpp"
#include "support/inprocess_world.hpp"

namespace rdmacoll {
namespace {

using namespace testing::reduction;
using testing::expect_all_ok;
using testing::expect_throw_with;
using testing::run_ranks;

TEST(Broadcast, EveryDtypeRootAndPathOnThreeRanks) {
  expect_all_ok(run_ranks(3, [](int, int) {
    int iter = 0;
    for (DType dt : kAllDTypes) {
      // Inline (up to the eager limit), binomial tree (on one host up to 2 MiB), scatter +
      // all-gather with a tail (4- and 8-byte dtypes at 600002 elements).
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{30001}, int64_t{600002}}) {
        broadcast_and_check({}, iter % 3, n, dt, iter);
        ++iter;
      }
    }
  }));
}

TEST(Broadcast, GroupSizesOneToEightAndSixteenMiB) {
  expect_all_ok(run_ranks(8, [](int rank, int) {
    for (int k = 1; k <= 8; ++k) {
      std::vector<int> ranks(k);
      std::iota(ranks.begin(), ranks.end(), 8 - k);  // the last k ranks: src is a global rank
      Group g = new_group(ranks);
      if (rank < 8 - k) continue;
      for (int root = 8 - k; root < 8; ++root) {
        broadcast_and_check(g, root, 7, DType::Int64, root);
        broadcast_and_check(g, root, 40000, DType::Float32, root + 1);
      }
      broadcast_and_check(g, 8 - k, 100003, DType::Int32, k);
    }
    Group pair = new_group({2, 5});
    if (rank == 2 || rank == 5) broadcast_and_check(pair, 5, (16 << 20) / 4, DType::Float32, 9);
  }));
}

// On one machine with a CPU for each rank a tensor from 32 KiB moves with one copy (read out
// of the root's memory, or written by UCX's single-copy rendezvous), not inline: every element
// right on both sides of the edge from either root, and bytes moved only from 32 KiB on. Over
// TCP nothing changes.
TEST(Broadcast, TensorsFrom32KiBOnOneUncrowdedMachineAreWrittenNotInlined) {
  const char* tls = std::getenv("UCX_TLS");
  if (tls && std::string(tls) == "tcp") GTEST_SKIP() << "single copy is a shared-memory path";
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "needs a CPU for each of 2 ranks";
  expect_all_ok(run_ranks(2, [](int rank, int) {
    int iter = 0;
    for (int64_t n : {int64_t{8191}, int64_t{8192}, int64_t{30001}}) {
      for (int root = 0; root < 2; ++root) {
        const uint64_t before = detail::bytes_written_to(1 - rank) + detail::bytes_read();
        broadcast_and_check({}, root, n, DType::Float32, iter++);
        // What both ranks moved: the root's writes, or the other rank's reads.
        Tensor moved = Tensor::zeros({1}, DType::Int64);
        moved.set(0, static_cast<double>(detail::bytes_written_to(1 - rank) + detail::bytes_read() -
                                         before));
        all_reduce(moved).wait();
        const auto bytes = static_cast<uint64_t>(moved.item(0));
        RANK_CHECK(n * 4 >= (32 << 10) ? bytes >= static_cast<uint64_t>(n) * 4 : bytes == 0,
                   n * 4 << " bytes from rank " << root << ": " << bytes << " bytes moved");
      }
    }
  }));
}

// A chunk of exactly the eager limit (64 KiB at 3 ranks) on a group's first call, which also
// carries the group's eager-slot key: the descriptor did not fit its buffer, the root raised
// alone and its peers timed out (found by tests/chaos). Every call here is a group's first.
TEST(Broadcast, ChunkOfExactlyTheEagerLimitOnAGroupsFirstCall) {
  expect_all_ok(run_ranks(3, [](int rank, int) {
    for (int root = 0; root < 3; ++root) {
      Group g = new_group({0, 1, 2});
      broadcast_and_check(g, root, 64 << 10, DType::UInt8, root);
      Group h = new_group({0, 1, 2});
      Tensor in = zeros({16 << 10}, DType::Float32), out = zeros({3 * (16 << 10)}, DType::Float32);
      testing::fill_input(in, rank, root);
      all_gather_into_tensor(out, in, h);
      testing::check_gathered(out, 3, root, DType::Float32);
    }
  }));
}

TEST(BroadcastErrors, BadInputRaisesOnEveryRank) {
  expect_all_ok(run_ranks(3, [](int rank, int) {
    Group sub = new_group({0, 1});
    Tensor t = zeros({5});
    if (rank < 2) {
      expect_throw_with<InvalidArgument>([&] { broadcast(t, 2, sub); },
                                         "src 2 is not a member of group 1");
    }
    expect_throw_with<InvalidArgument>([&] { broadcast(t, rank == 1 ? 1 : 0); },
                                       "disagree on the broadcast's root");
    Tensor t6 = zeros({rank == 2 ? 6 : 5});
    expect_throw_with<InvalidArgument>([&] { broadcast(t6, 0); }, "disagree");
    Tensor big = zeros({rank == 0 ? 100000 : 100001});
    expect_throw_with<InvalidArgument>([&] { broadcast(big, 0); }, "disagree");
    broadcast_and_check({}, 1, 10, DType::Float32, 0);
  }));
}

}  // namespace
}  // namespace rdmacoll

// On the in-process fabric (src/transport/loopback, ctest's loopback. list): ranks as threads of
// this process, every group size and host layout in milliseconds, every element checked.
namespace rdmacoll::engine {
namespace {

// Inline, the binomial tree, scatter then all-gather; from the last rank.
TEST(BroadcastOnLoopback, EveryGroupSizeAndLayout) {
  run_every_layout({1, 2, 3, 4, 5, 8, 13}, [](RankContext& c) {
    for (int64_t n : {int64_t{3}, int64_t{1000}, int64_t{70000}}) {
      const int root = c.p - 1;
      Tensor b = zeros({n}, DType::Int32);
      for (int64_t i = 0; i < n; ++i)
        b.set(i, c.rank == root ? value_of(root, i, 2) : -1);
      broadcast(c.engine, c.group,
                {.data = b.data(), .dtype = DType::Int32, .numel = n, .root = root});
      for (int64_t i = 0; i < n; ++i)
        check(b.item(i) == value_of(root, i, 2), "broadcast element " + std::to_string(i));
    }
  });
}

}  // namespace
}  // namespace rdmacoll::engine
