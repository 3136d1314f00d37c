// shrink_group: after a rank dies, the survivors make a group of themselves, each alone, and
// carry on over the same connections; every element of every survivor's output is checked.
// Real processes over UCX; the dead rank is SIGKILLed.

#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "bootstrap/prefixed_store.hpp"
#include "bootstrap/store.hpp"
#include "gather_check.hpp"
#include "reduce_check.hpp"

namespace rdmacoll {
namespace {

using testing::expect_all_ok;
using testing::expect_throw_with;
using testing::run_ranks;
using namespace std::chrono_literals;

// Rank `victim` (a rank of `g`, whose ranks are the world's) dies once every other rank has
// finished its warm-up on `g` (a rank killed right after a call can take that call's last
// message with it; the survivors tell it over `g` that they are done, and it only receives, so
// nothing of its own is in flight).
void kill_after_warm_up(const Group& g, int victim, int rank, int world) {
  for (int i = 0; i < 2; ++i)
    testing::gather_and_check(g, 64, DType::Float32, DType::Float32, false, i);
  Tensor done = zeros({1});
  if (rank == victim) {
    for (int r = 0; r < world; ++r) {
      if (r != victim) recv(done, r, g);
    }
    ::raise(SIGKILL);
  }
  send(done, victim, g);
}

// What the survivors run on the shrunk group: gathers small and large, reductions, and (in the
// default world, whose ranks the check names) a broadcast from its last rank, each checked
// element by element.
void carry_on(const Group& s, bool broadcast_too = true) {
  for (int i = 0; i < 3; ++i) {
    testing::gather_and_check(s, 8, DType::Int64, DType::Float32, false, i);
    testing::gather_and_check(s, 70000, DType::Float32, DType::Float32, true, i);
    testing::reduction::reduce_scatter_and_check(s, 1000, DType::Float32, ReduceOp::Sum, i,
                                                 testing::reduction::Layout::Flat);
  }
  if (broadcast_too)
    testing::reduction::broadcast_and_check(s, s.ranks().back(), 5000, DType::Float64, 0);
}

// The victim died of SIGKILL and every other rank ended well.
void expect_only_victim_killed(const std::vector<testing::RankResult>& results, int victim) {
  for (int r = 0; r < static_cast<int>(results.size()); ++r) {
    EXPECT_EQ(results[r].exit_code, r == victim ? 128 + SIGKILL : 0)
        << "rank " << r << "; " << testing::describe(results);
  }
}

testing::RunOptions survivors_exit_zero() {
  testing::RunOptions opt;
  opt.kill_on_failure = false;
  opt.env = {{"RDMACOLL_TIMEOUT_S", "20"}};
  return opt;
}

TEST(Shrink, SurvivorsOfAKilledRankShrinkTheWorldAndEveryCallAfterIsRight) {
  const auto results = run_ranks(
      4,
      [](int rank, int world) {
        kill_after_warm_up(Group(), 2, rank, world);
        // The world's next call fails on every survivor, soon: rank 2 is gone, and a survivor
        // waiting on another survivor (which failed the call and sends nothing) looks at every
        // member, not only the one it waits for.
        const auto failing = std::chrono::steady_clock::now();
        testing::expect_peer_failure_or_timeout([&] {
          testing::gather_and_check(Group(), 64, DType::Float32, DType::Float32, false, 9);
        });
        RANK_CHECK(std::chrono::steady_clock::now() - failing < 5s,
                   "the failure took the 20 s timeout, not a moment");
        const auto start = std::chrono::steady_clock::now();
        Group s = shrink_group(Group(), {2});
        RANK_CHECK(std::chrono::steady_clock::now() - start < 1s, "shrinking sends nothing");
        RANK_CHECK(s.size() == 3, "3 survivors, got " << s.size());
        const std::vector<int> want = {0, 1, 3};
        RANK_CHECK(s.ranks() == want, "the survivors in their order");
        RANK_CHECK(s.rank() == (rank == 3 ? 2 : rank), "group rank " << s.rank());
        carry_on(s);
        // And again: the shrunk group shrinks as any group does (rank 3 leaves, alive).
        if (rank == 3) {
          destroy_group(s);
          return;
        }
        Group pair = shrink_group(s, {2});
        RANK_CHECK(pair.ranks() == std::vector<int>({0, 1}), "ranks 0 and 1");
        carry_on(pair);
        destroy_group(pair);
        destroy_group(s);
      },
      survivors_exit_zero());
  expect_only_victim_killed(results, 2);
}

TEST(Shrink, SurvivorsOfAGroupShrinkItWhileTheRestOfTheWorldGoesOn) {
  const auto results = run_ranks(
      4,
      [](int rank, int world) {
        Group all = new_group({0, 1, 2, 3});
        Group outside = new_group({0, 1});
        kill_after_warm_up(all, 3, rank, world);
        Group s = shrink_group(all, {3});
        carry_on(s);
        // A group the dead rank was never in is untouched by it.
        if (rank < 2) testing::gather_and_check(outside, 1000, DType::Int32, DType::Int32, false);
        destroy_group(s);
      },
      survivors_exit_zero());
  expect_only_victim_killed(results, 3);
}

TEST(Shrink, AStandaloneGroupsSurvivorsCarryOnOnItsWorld) {
  testing::RunOptions opt = survivors_exit_zero();
  opt.init = false;
  const auto results = run_ranks(
      3,
      [](int rank, int world) {
        const int port = std::atoi(std::getenv("MASTER_PORT"));
        std::unique_ptr<bootstrap::StoreServer> server;
        if (rank == 0) server = std::make_unique<bootstrap::StoreServer>("127.0.0.1", port);
        auto store = std::make_shared<bootstrap::PrefixedStore>(
            "torch/", std::make_shared<bootstrap::StoreClient>("127.0.0.1", port,
                                                               bootstrap::Clock::now() + 60s));
        Group g = new_standalone_group(store, rank, world);
        kill_after_warm_up(g, 1, rank, world);
        Group s = shrink_group(g, {1});
        destroy_group(g);  // the shrunk group keeps the world it runs on
        RANK_CHECK(s.ranks() == std::vector<int>({0, 2}), "ranks 0 and 2 of the standalone world");
        carry_on(s, false);
        destroy_group(s);
      },
      opt);
  expect_only_victim_killed(results, 1);
}

TEST(Shrink, AbortingTheParentFailsItsWorkOnAHungRankAtOnceAndTheSurvivorsCarryOn) {
  const auto results = run_ranks(
      3,
      [](int rank, int world) {
        Tensor pid = zeros({1}, DType::Int64);
        if (rank == 2) {
          pid.set(0, static_cast<double>(::getpid()));
          send(pid, 0);
          ::raise(SIGSTOP);  // hung, not dead: its pidfd stays quiet, its connections open
        }
        if (rank == 0) recv(pid, 2);
        (void)world;
        // Work waiting on the hung rank: it would wait the whole timeout (20 s).
        Tensor t = zeros({1000});
        Work w = all_reduce(t, ReduceOp::Sum, Group(), true);
        const auto start = std::chrono::steady_clock::now();
        Group s = shrink_group(Group(), {2}, ShrinkMode::AbortParent);
        testing::expect_peer_failure_or_timeout([&] { w.wait(); });
        const auto took = std::chrono::steady_clock::now() - start;
        RANK_CHECK(took < 5s, "the parent's work failed at once, not at the 20 s timeout");
        expect_throw_with<InvalidArgument>([&] { all_reduce(t); }, "abandoned (shrink_group");
        carry_on(s);
        // The test's end: killed only now, when carry_on's calls show that every survivor is
        // past its checks (a rank that finds the victim dead first says so, not "abandoned"),
        // and before the world's destroy, which would wait for a stopped rank.
        if (rank == 0) ::kill(static_cast<pid_t>(pid.item(0)), SIGKILL);
        destroy_group(s);
      },
      survivors_exit_zero());
  expect_only_victim_killed(results, 2);
}

TEST(Shrink, AnExclusionThatCannotBeRaisesOnTheCallerWithoutTouchingAnyPeer) {
  expect_all_ok(run_ranks(2, [](int rank, int) {
    const auto refused = [](std::vector<int> excluded, const std::string& needle) {
      expect_throw_with<InvalidArgument>([&] { (void)shrink_group(Group(), excluded); }, needle);
    };
    refused({}, "no rank to exclude");
    refused({2}, "rank 2 is not a group rank (0 to 1)");
    refused({-1}, "rank -1 is not a group rank");
    refused({1 - rank, 1 - rank}, "excluded twice");
    refused({rank}, "this rank (" + std::to_string(rank) + ") is among the excluded");
    // Nothing was made or sent: the world runs on, and a real shrink still works.
    testing::gather_and_check(Group(), 100, DType::Float32, DType::Float32, false);
    Group alone = shrink_group(Group(), {1 - rank});
    RANK_CHECK(alone.size() == 1 && alone.rank() == 0, "a group of one");
    testing::gather_and_check(alone, 100, DType::Float32, DType::Float32, false);
    destroy_group(alone);
  }));
}

}  // namespace
}  // namespace rdmacoll
