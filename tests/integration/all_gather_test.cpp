// all_gather_into_tensor across real processes over the UCX transport (shared memory by
// default; ctest runs this binary again with UCX_TLS=tcp). Every test checks every element of
// every rank's output.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "api/debug.hpp"
#include "gather_check.hpp"
#include "support/inprocess_world.hpp"
#include "topology/topology.hpp"

namespace rdmacoll {
namespace {

using testing::expect_all_ok;
using testing::expect_throw_with;
using testing::expected_value;
using testing::gather_and_check;
using testing::input_value;
using testing::run_ranks;
using testing::RunOptions;

// Rank 2's input is one element longer: every rank raises and no element of any output is
// written, its own slot included (a small call once copied the rank's own chunk in first).
// Small (inline), converting int64 into float32 (the torch documentation's example), and
// 64 KiB (written one-sided).
void expect_size_mismatch_raises_and_writes_nothing(int rank, int world) {
  struct Case {
    int64_t n;
    DType in_dt;
  };
  for (const Case c : {Case{4, DType::Float32}, Case{4, DType::Int64}, Case{16384, DType::Float32},
                       Case{16384, DType::Int64}}) {
    const int64_t n = rank == 2 ? c.n + 1 : c.n;
    Tensor in = zeros({n}, c.in_dt);
    Tensor out = zeros({world * n});
    for (int64_t i = 0; i < out.numel(); ++i)
      out.set(i, -7);
    expect_throw_with<InvalidArgument>([&] { all_gather_into_tensor(out, in); }, "disagree");
    for (int64_t i = 0; i < out.numel(); ++i) {
      RANK_CHECK(out.item(i) == -7, c.n << " elements of " << dtype_name(c.in_dt) << ": slot "
                                        << i / n << " element " << i % n << " was written");
    }
  }
}

class GroupSize : public ::testing::TestWithParam<int> {};

TEST_P(GroupSize, SizesFromZeroBytesUpFlatAndStacked) {
  const int p = GetParam();
  expect_all_ok(run_ranks(p, [](int, int world) {
    for (bool stacked : {false, true}) {
      gather_and_check({}, 0, DType::Float32, DType::Float32, stacked);
      gather_and_check({}, 1, DType::Float32, DType::Float32, stacked);
      gather_and_check({}, 13, DType::Int8, DType::Int8, stacked);       // 13 bytes: odd
      gather_and_check({}, 5, DType::Float16, DType::Float16, stacked);  // 10 bytes
      gather_and_check({}, 1001, DType::Float64, DType::Float64, stacked);
      gather_and_check({}, (1 << 20) / 4, DType::Float32, DType::Float32, stacked);  // 1 MiB
    }
    if (world <= 4) gather_and_check({}, (16 << 20) / 4, DType::Float32, DType::Float32, false);
  }));
}

INSTANTIATE_TEST_SUITE_P(AllGather, GroupSize, ::testing::Values(1, 2, 3, 4, 5, 7, 8));

TEST(AllGather, EveryDtypeAndConversions) {
  expect_all_ok(run_ranks(3, [](int, int) {
    for (DType dt : kAllDTypes)
      gather_and_check({}, 37, dt, dt, false);
    gather_and_check({}, 37, DType::Int64, DType::Float32, false);
    gather_and_check({}, 37, DType::Int64, DType::Float32, true);
    gather_and_check({}, 37, DType::Float32, DType::BFloat16, false);
    gather_and_check({}, 37, DType::Int32, DType::Float64, false);
    gather_and_check({}, 37, DType::Bool, DType::Int64, false);
    gather_and_check({}, 37, DType::UInt8, DType::Float16, true);
    gather_and_check({}, 37, DType::Float64, DType::Bool, false);
  }));
}

// On one machine with a CPU for each rank, a chunk from 16 KiB up moves with one copy (read
// out of the peer's memory, or written by UCX's single-copy rendezvous straight into the
// output) instead of inline (copied into the descriptor and out of it): every element right on
// both sides of the edge, in place and with a conversion, and bytes moved only from 16 KiB on.
// Over TCP nothing changes.
TEST(AllGather, ChunksFrom16KiBOnOneUncrowdedMachineAreWrittenNotInlined) {
  const char* tls = std::getenv("UCX_TLS");
  if (tls && std::string(tls) == "tcp") GTEST_SKIP() << "single copy is a shared-memory path";
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "needs a CPU for each of 2 ranks";
  expect_all_ok(run_ranks(2, [](int rank, int) {
    const int peer = 1 - rank;
    int iter = 0;
    for (int64_t n : {int64_t{4095}, int64_t{4096}, int64_t{4097}, int64_t{50000}}) {
      const uint64_t before = detail::bytes_written_to(peer) + detail::bytes_read();
      gather_and_check({}, n, DType::Float32, DType::Float32, false, iter++);
      gather_and_check({}, n, DType::Int64, DType::Float32, true, iter++);
      const uint64_t moved = detail::bytes_written_to(peer) + detail::bytes_read() - before;
      const bool single_copy = n * 4 >= (16 << 10);
      RANK_CHECK(single_copy ? moved >= 2 * static_cast<uint64_t>(n) * 4 : moved == 0,
                 n * 4 << "-byte chunks: " << moved << " bytes moved");
    }
  }));
}

TEST(AllGather, InPlaceInputIsTheOwnSlot) {
  expect_all_ok(run_ranks(3, [](int rank, int world) {
    const int64_t n = 100;
    Tensor out = zeros({world * n}, DType::Int32);
    Tensor slot = Tensor::view(static_cast<int32_t*>(out.data()) + rank * n, DType::Int32, {n});
    for (int64_t i = 0; i < n; ++i)
      slot.set(i, input_value(rank, i, 0, DType::Int32));
    all_gather_into_tensor(out, slot);
    for (int r = 0; r < world; ++r) {
      for (int64_t i = 0; i < n; ++i) {
        RANK_CHECK(out.item(r * n + i) == input_value(r, i, 0, DType::Int32),
                   "r " << r << " i " << i);
      }
    }
  }));
}

TEST(AllGather, SubgroupsOneAfterAnother) {
  expect_all_ok(run_ranks(4, [](int rank, int) {
    Group g01 = new_group({0, 1});
    Group g13 = new_group({3, 1});  // sorted to [1, 3]: rank 3 is group rank 1
    Group solo = new_group({2});
    RANK_CHECK(g01.is_member() == (rank <= 1), "membership of [0, 1]");
    RANK_CHECK(g13.is_member() == (rank == 1 || rank == 3), "membership of [1, 3]");
    if (rank == 3) RANK_CHECK(g13.rank() == 1, "group rank of 3 in [1, 3]");
    for (int iter = 0; iter < 3; ++iter) {
      if (g01.is_member()) gather_and_check(g01, 7, DType::Int64, DType::Float32, false, iter);
      if (g13.is_member()) gather_and_check(g13, 9, DType::Float32, DType::Float32, true, iter);
      if (solo.is_member()) gather_and_check(solo, 5, DType::Int16, DType::Int16, false, iter);
      gather_and_check({}, 3, DType::Float32, DType::Float32, false, iter);
    }
  }));
}

// A group made before destroy_process_group() must not reach the new transport (its eager
// slots lived in the old one's memory): a clear error, and the new world works.
TEST(AllGather, GroupFromADestroyedProcessGroupIsAClearError) {
  expect_all_ok(run_ranks(2, [](int, int) {
    Group g = new_group({0, 1});
    for (int iter = 0; iter < 3; ++iter)
      gather_and_check(g, 4, DType::Float32, DType::Float32, false, iter);
    destroy_process_group();
    init_process_group();
    Tensor in = zeros({4}), out = zeros({8});
    expect_throw_with<InvalidArgument>([&] { all_gather_into_tensor(out, in, g); },
                                       "belongs to a process group that was destroyed");
    Group fresh = new_group({0, 1});
    for (int iter = 0; iter < 3; ++iter) {
      gather_and_check(fresh, 4, DType::Float32, DType::Float32, false, iter);
      gather_and_check({}, 4, DType::Float32, DType::Float32, false, iter);
    }
  }));
}

TEST(AllGather, ListOutputAndBarrier) {
  expect_all_ok(run_ranks(3, [](int rank, int world) {
    Tensor in = zeros({4}, DType::Int64);
    for (int i = 0; i < 4; ++i)
      in.set(i, rank * 10 + i);
    std::vector<Tensor> outs;
    for (int r = 0; r < world; ++r)
      outs.push_back(zeros({4}, DType::Float64));
    all_gather(outs, in);
    for (int r = 0; r < world; ++r) {
      for (int i = 0; i < 4; ++i)
        RANK_CHECK(outs[r].item(i) == r * 10 + i, "list " << r);
    }
    barrier();
  }));
}

// The list form gathers through a buffer the group keeps: calls that grow and shrink it, async
// ones queued back to back, every element right each time.
TEST(AllGather, ListOutputsOfSizesThatGrowAndShrinkThroughTheKeptBuffer) {
  expect_all_ok(run_ranks(3, [](int rank, int world) {
    const int64_t sizes[] = {100000, 7, 300000, 0, 1, 50000};
    std::vector<std::vector<Tensor>> outs;
    std::vector<Tensor> ins;
    std::vector<Work> works;
    for (size_t k = 0; k < std::size(sizes); ++k) {
      const int64_t n = sizes[k];
      ins.push_back(zeros({n}, DType::Int32));
      for (int64_t i = 0; i < n; ++i)
        ins.back().set(i, static_cast<double>(rank * 1000 + i % 997 + k));
      outs.emplace_back();
      for (int r = 0; r < world; ++r)
        outs.back().push_back(zeros({n}, DType::Int32));
      for (Tensor& t : outs.back())
        for (int64_t i = 0; i < n; ++i)
          t.set(i, -1);
      works.push_back(all_gather(outs.back(), ins.back(), {}, /*async_op=*/true));
    }
    for (Work& w : works)
      w.wait();
    for (size_t k = 0; k < std::size(sizes); ++k) {
      for (int r = 0; r < world; ++r) {
        for (int64_t i = 0; i < sizes[k]; ++i) {
          RANK_CHECK(
              outs[k][r].item(i) == r * 1000 + i % 997 + static_cast<int64_t>(k),
              "call " << k << " list " << r << " element " << i << ": " << outs[k][r].item(i));
        }
      }
    }
  }));
}

TEST(AllGather, ThousandCallsReusedBuffers) {
  expect_all_ok(run_ranks(4, [](int rank, int world) {
    const int64_t n = 64;
    Tensor in = zeros({n}, DType::Float32);
    Tensor out = zeros({world * n}, DType::Float32);
    for (int iter = 0; iter < 1000; ++iter) {
      testing::fill_input(in, rank, iter);
      all_gather_into_tensor(out, in);
      testing::check_gathered(out, world, iter, DType::Float32);
    }
  }));
}

TEST(AllGather, ThousandCallsFreshBuffers) {
  expect_all_ok(run_ranks(4, [](int, int) {
    for (int iter = 0; iter < 1000; ++iter) {
      gather_and_check({}, 1 + iter % 50, DType::Int32, DType::Int32, iter % 2 == 1, iter);
    }
  }));
}

// Where the outputs together pass this host's last-level cache, each member copies its own
// chunk into its output with non-temporal stores (common/stream_copy.hpp): every element right,
// with a length that is no multiple of a cache line, in four calls (the reads take over from the
// group's third: peer_reads.hpp).
TEST(AllGather, ChunksWhoseOutputsPassTheLastLevelCacheAreCopiedPastTheCache) {
  const size_t cache = topology::probe().cache_bytes;
  if (cache == 0 || cache > (256u << 20)) GTEST_SKIP() << "last-level cache: " << cache << " bytes";
  expect_all_ok(run_ranks(2, [cache](int rank, int world) {
    const int64_t n = static_cast<int64_t>(cache / (world * world) / 4) + 1237;  // float32
    Tensor in = zeros({n}, DType::Float32);
    Tensor out = zeros({world * n}, DType::Float32);
    for (int iter = 0; iter < 4; ++iter) {
      testing::fill_input(in, rank, iter);
      all_gather_into_tensor(out, in);
      testing::check_gathered(out, world, iter, DType::Float32);
    }
  }));
}

// ---- the mailbox (shared memory; off over TCP) -----------------------------------------------

// The shm variant of this binary runs with UCX's default transports, the tcp variant with
// UCX_TLS=tcp, where there is no shared memory to put slots in.
bool slots_expected() {
  const char* tls = std::getenv("UCX_TLS");
  return !(tls && std::string(tls) == "tcp");
}

TEST(Mailbox, OnAfterTwoCallsAndCorrectAcrossSizesBarriersAndSubgroups) {
  expect_all_ok(run_ranks(4, [](int rank, int) {
    Group sub = new_group({1, 2, 3});
    // 64 KiB of float32 is the eager limit for 4 ranks; 16385 elements take the data path.
    const int64_t sizes[] = {1, 7, 1000, 16384, 16385, 0, 3};
    for (int iter = 0; iter < 120; ++iter) {
      const int64_t n = sizes[iter % 7];
      gather_and_check({}, n, DType::Float32, DType::Float32, iter % 2 == 0, iter);
      if (rank != 0) gather_and_check(sub, n + 1, DType::Int16, DType::Int16, false, iter);
      if (iter % 5 == 0) barrier();
      if (iter >= 2) {
        RANK_CHECK(detail::mailbox_active() == slots_expected(),
                   "mailbox active: " << detail::mailbox_active() << " at call " << iter);
      }
    }
    if (rank != 0) {
      RANK_CHECK(detail::mailbox_active(sub) == slots_expected(), "subgroup slots");
    }
  }));
}

TEST(Mailbox, ErrorsRaiseOnEveryRankOnceSlotsAreOn) {
  expect_all_ok(run_ranks(3, [](int rank, int world) {
    for (int iter = 0; iter < 3; ++iter)
      gather_and_check({}, 4, DType::Float32, DType::Float32, false, iter);
    RANK_CHECK(detail::mailbox_active() == slots_expected(), "slots before the errors");
    expect_size_mismatch_raises_and_writes_nothing(rank, world);
    // One rank's bad output shape: that rank says why, the others name it.
    Tensor in4 = zeros({4});
    Tensor out4 = zeros({rank == 1 ? world * 4 + 1 : world * 4});
    if (rank == 1) {
      expect_throw_with<InvalidArgument>([&] { all_gather_into_tensor(out4, in4); },
                                         "output has 13 elements (13,), expected group size 3");
    } else {
      expect_throw_with<InvalidArgument>([&] { all_gather_into_tensor(out4, in4); },
                                         "rank 1 rejected its arguments");
    }
    // The group stays usable.
    for (int iter = 3; iter < 6; ++iter)
      gather_and_check({}, 9, DType::Float32, DType::Float32, true, iter);
  }));
}

// A rank that arrives late finds its peer asleep (past its spin) and must wake it through the
// doorbell. Rank 1 is made late by burning CPU before each call; that is the scenario under
// test, not a wait for some condition.
TEST(Mailbox, LateRankRingsTheDoorbellOfASleepingPeer) {
  RunOptions opt;
  opt.env = {{"RDMACOLL_SPIN_US", "100"}};
  expect_all_ok(run_ranks(
      2,
      [](int rank, int) {
        for (int iter = 0; iter < 8; ++iter) {
          if (rank == 1 && iter >= 2) {
            const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
            while (std::chrono::steady_clock::now() < until) {
            }
          }
          gather_and_check({}, 5, DType::Int32, DType::Int32, false, iter);
        }
        if (rank == 1 && slots_expected()) {
          RANK_CHECK(detail::doorbells_rung() > 0, "the late rank never rang the doorbell");
        }
      },
      opt));
}

// Settings are read into each world when it is made: one set before a re-init takes effect in
// the new world (it was frozen by the first call's process-wide read). An eager limit of 0 makes
// a 4000-byte chunk a write; back at the default it travels inline, nothing written.
TEST(AllGather, AnEagerLimitChangedBeforeAReinitTakesEffectInTheNewWorld) {
  RunOptions opt;
  opt.init = false;
  expect_all_ok(run_ranks(
      2,
      [](int rank, int) {
        const int peer = 1 - rank;
        for (const bool forced : {true, false, true}) {
          if (forced) {
            ::setenv("RDMACOLL_EAGER_LIMIT", "0", 1);
          } else {
            ::unsetenv("RDMACOLL_EAGER_LIMIT");
          }
          init_process_group();
          const uint64_t before = detail::bytes_written_to(peer);
          gather_and_check({}, 1000, DType::Float32, DType::Float32, false);
          const uint64_t written = detail::bytes_written_to(peer) - before;
          RANK_CHECK(forced ? written >= 4000 : written == 0,
                     (forced ? "RDMACOLL_EAGER_LIMIT=0" : "the default limit")
                         << ": " << written << " bytes written");
          destroy_process_group();
        }
      },
      opt));
}

// ---- errors ------------------------------------------------------------------------------------

// Ranks that disagree on the eager limit would otherwise wait for writes that never come.
TEST(AllGatherErrors, EagerLimitThatDiffersBetweenRanksIsAClearErrorNotAHang) {
  RunOptions opt;
  opt.init = false;
  expect_all_ok(run_ranks(
      3,
      [](int rank, int) {
        // Caught at init now, where the ranks compare their settings (it used to surface at
        // the first collective, and before that as a hang).
        ::setenv("RDMACOLL_EAGER_LIMIT", rank == 1 ? "0" : "65536", 1);
        expect_throw_with<InvalidArgument>(
            [] { init_process_group(); },
            "ranks disagree on RDMACOLL_EAGER_LIMIT (rank 0 '65536', rank 1 '0', rank 2 '65536')");
      },
      opt));
}

TEST(AllGatherErrors, MismatchedSizesRaiseOnEveryRankAndGroupStaysUsable) {
  expect_all_ok(run_ranks(3, [](int rank, int world) {
    expect_size_mismatch_raises_and_writes_nothing(rank, world);
    gather_and_check({}, 6, DType::Float32, DType::Float32, false);
  }));
}

TEST(AllGatherErrors, MismatchedDtypesRaiseOnEveryRank) {
  expect_all_ok(run_ranks(3, [](int rank, int world) {
    const DType dt = rank == 1 ? DType::Float64 : DType::Float32;
    Tensor in = zeros({4}, dt);
    Tensor out = zeros({world * 4}, dt);
    expect_throw_with<InvalidArgument>([&] { all_gather_into_tensor(out, in); }, "torch.float64");
    gather_and_check({}, 2, DType::Float32, DType::Float32, false);
  }));
}

TEST(AllGatherErrors, WrongLocalOutputShapeRaisesBeforeAnyDataMoves) {
  expect_all_ok(run_ranks(3, [](int rank, int world) {
    Tensor in = zeros({4});
    Tensor out = zeros({rank == 1 ? world * 4 + 1 : world * 4});
    for (int64_t i = 0; i < out.numel(); ++i)
      out.set(i, -1);
    if (rank == 1) {
      expect_throw_with<InvalidArgument>([&] { all_gather_into_tensor(out, in); },
                                         "output has 13 elements (13,), expected group size 3");
      for (int64_t i = 0; i < out.numel(); ++i)
        RANK_CHECK(out.item(i) == -1, "element " << i);
    } else {
      expect_throw_with<InvalidArgument>([&] { all_gather_into_tensor(out, in); },
                                         "rank 1 rejected its arguments");
    }
    Tensor bad_shape = zeros({world, 2, 2});
    Tensor in2 = zeros({2, 2});
    gather_and_check({}, 3, DType::Float32, DType::Float32, true);
    all_gather_into_tensor(bad_shape, in2);  // stacked (3, 2, 2) of a (2, 2) input is fine
    Tensor wrong = zeros({world * 2, 1, 2});
    expect_throw_with<InvalidArgument>([&] { all_gather_into_tensor(wrong, in2); },
                                       "neither the flat");
  }));
}

TEST(AllGatherErrors, NonMemberGroupIsAClearError) {
  expect_all_ok(run_ranks(3, [](int rank, int) {
    Group g = new_group({0, 1});
    if (rank == 2) {
      Tensor in = zeros({1}), out = zeros({2});
      expect_throw_with<InvalidArgument>([&] { all_gather_into_tensor(out, in, g); },
                                         "not a member of group 1 (ranks [0, 1])");
    } else {
      gather_and_check(g, 3, DType::Float32, DType::Float32, false);
    }
  }));
}

TEST(Transport, AutoFallsBackToUcxAndForcedVerbsWithoutDeviceIsAClearError) {
  if (std::getenv("RDMACOLL_IN_VM")) GTEST_SKIP() << "this machine has an RDMA device";
  expect_all_ok(run_ranks(2, [](int, int) {
    RANK_CHECK(transport_name() == "ucx", "auto chose " << transport_name());
  }));
  RunOptions opt;
  opt.init = false;
  opt.env = {{"RDMACOLL_TRANSPORT", "verbs"}};
  expect_all_ok(run_ranks(
      2,
      [](int, int) {
        expect_throw_with<TransportError>([] { init_process_group(); },
                                          "RDMACOLL_TRANSPORT=verbs, but rank");
      },
      opt));
}

TEST(AllGatherErrors, RankThatNeverArrivesGivesTimeout) {
  RunOptions opt;
  opt.init = false;
  opt.skip_ranks = {2};
  opt.env = {{"RDMACOLL_TIMEOUT_S", "2"}};
  const auto t0 = std::chrono::steady_clock::now();
  auto results = run_ranks(
      3,
      [](int rank, int) {
        if (rank == 0) {
          expect_throw_with<Timeout>([] { init_process_group(); }, "ranks [2] did not join");
          return;
        }
        // Rank 1 times out too, unless rank 0 (the store's host) gave up first and left.
        try {
          init_process_group();
          RANK_CHECK(false, "init_process_group returned without rank 2");
        } catch (const Timeout& e) {
          // From the store, or (rank 0 gone first) from what this rank has heard.
          const std::string what = e.what();
          RANK_CHECK(what.find("ranks [2] did not join") != std::string::npos ||
                         what.find("ranks [2] were not heard from") != std::string::npos,
                     what);
        } catch (const PeerFailure& e) {
          RANK_CHECK(std::string(e.what()).find("rendezvous host") != std::string::npos, e.what());
        }
      },
      opt);
  EXPECT_EQ(results[0].exit_code, 0);
  EXPECT_EQ(results[1].exit_code, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
}

TEST(AllGatherErrors, ATimeoutSetOnAGroupLaterIsTheOneItsCallsTake) {
  expect_all_ok(run_ranks(2, [](int rank, int) {
    expect_throw_with<InvalidArgument>([] { set_timeout(std::chrono::milliseconds(0)); },
                                       "must be positive");
    if (rank == 0) {
      set_timeout(std::chrono::milliseconds(500));  // made with 120 s (the harness's)
      const auto start = std::chrono::steady_clock::now();
      Tensor in = zeros({4}), out = zeros({8});
      expect_throw_with<Timeout>([&] { all_gather_into_tensor(out, in); },
                                 "timed out after 500 ms");
      const auto took = std::chrono::steady_clock::now() - start;
      RANK_CHECK(took < std::chrono::seconds(10), "the call took the old timeout");
    }
    // Rank 1 never gathers: it goes to destroy_process_group, which waits for rank 0.
  }));
}

TEST(AllGatherErrors, KilledRankGivesPeerFailureOrTimeoutNeverAHang) {
  RunOptions opt;
  opt.env = {{"RDMACOLL_TIMEOUT_S", "5"}};
  opt.deadline = std::chrono::seconds(60);
  opt.kill_on_failure = false;  // rank 2 dies on purpose
  const auto t0 = std::chrono::steady_clock::now();
  auto results = run_ranks(
      3, [](int rank, int world) { testing::gather_until_a_peer_dies(rank, world, 1024, 2, 50); },
      opt);
  EXPECT_EQ(results[0].exit_code, 0) << testing::describe(results);
  EXPECT_EQ(results[1].exit_code, 0) << testing::describe(results);
  EXPECT_EQ(results[2].exit_code, 128 + SIGKILL);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(40));
}

}  // namespace
}  // namespace rdmacoll

// On the in-process fabric (src/transport/loopback, ctest's loopback. list): ranks as threads of
// this process, every group size and host layout in milliseconds, every element checked.
namespace rdmacoll::engine {
namespace {

TEST(AllGatherOnLoopback, EveryGroupSizeFromOneToSixteenOnOneHost) {
  for (int p = 1; p <= 16; ++p) {
    run_world(p, hosts_for(p, 0), [](RankContext& c) {
      int call = 0;
      for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{3000}, int64_t{70000}}) {
        for (int k = 0; k < 3; ++k)  // the mailbox takes over from the third call
          gather_checked(c, n, call++);
      }
    });
  }
}

TEST(AllGatherOnLoopback, EveryGroupSizeAcrossHostsInlineLogPAndRing) {
  for (int p = 2; p <= 16; ++p) {
    for (int per_host : {1, 2, 3}) {
      if (per_host >= p) continue;
      run_world(p, hosts_for(p, per_host), [](RankContext& c) {
        int call = 0;
        // Inline (2 KiB across hosts), the log p schedules, and the ring (1 MiB per rank).
        for (int64_t n : {int64_t{4}, int64_t{1000}, int64_t{1} << 18})
          gather_checked(c, n, call++);
      });
    }
  }
}

}  // namespace
}  // namespace rdmacoll::engine
