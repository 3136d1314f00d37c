// Simulates every schedule for every group size 1..64 (identity and shuffled virtual orders)
// and proves: each rank ends with every chunk exactly once, sends only chunks it already holds,
// every send has a matching receive, no write leaves the output, and recursive doubling takes
// log2(p) steps.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "rdmacoll/errors.hpp"
#include "schedule/schedule.hpp"

namespace rdmacoll::schedule {
namespace {

void simulate(Algorithm a, const std::vector<int>& order, const std::vector<int>& host_of = {}) {
  const int p = static_cast<int>(order.size());
  std::vector<Schedule> all;
  for (int r = 0; r < p; ++r)
    all.push_back(make_schedule(a, order, r, host_of));
  size_t steps = all[0].steps.size();
  for (const auto& s : all)
    ASSERT_EQ(s.steps.size(), steps) << "ranks disagree on step count";
  // holds[r][c]: how many times chunk c has landed in rank r's output (own chunk counts once).
  std::vector<std::vector<int>> holds(p, std::vector<int>(p, 0));
  for (int r = 0; r < p; ++r)
    holds[r][r] = 1;
  for (size_t k = 0; k < steps; ++k) {
    auto before = holds;  // a step may forward only what arrived in earlier steps
    for (int r = 0; r < p; ++r) {
      for (const Transfer& t : all[r].steps[k].sends) {
        ASSERT_GE(t.first, 0);
        ASSERT_GT(t.count, 0);
        ASSERT_LE(t.first + t.count, p) << "write leaves the output";
        ASSERT_NE(t.peer, r);
        for (int c = t.first; c < t.first + t.count; ++c) {
          ASSERT_EQ(before[r][c], 1)
              << "rank " << r << " sends chunk " << c << " it does not hold at step " << k;
          holds[t.peer][c] += 1;
        }
        const auto& recvs = all[t.peer].steps[k].recvs;
        ASSERT_NE(std::find(recvs.begin(), recvs.end(), Transfer{r, t.first, t.count}), recvs.end())
            << "no matching receive at rank " << t.peer;
      }
    }
    // Every receive is matched by a send.
    for (int r = 0; r < p; ++r) {
      for (const Transfer& t : all[r].steps[k].recvs) {
        const auto& sends = all[t.peer].steps[k].sends;
        ASSERT_NE(std::find(sends.begin(), sends.end(), Transfer{r, t.first, t.count}),
                  sends.end());
      }
    }
  }
  for (int r = 0; r < p; ++r) {
    for (int c = 0; c < p; ++c) {
      ASSERT_EQ(holds[r][c], 1) << algorithm_name(a) << " p=" << p << ": rank " << r
                                << " got chunk " << c << " " << holds[r][c] << " times";
    }
  }
  if (a == Algorithm::RecursiveDoubling) {
    EXPECT_EQ(1 << steps, p);
  }
  if (a == Algorithm::Bruck && p > 1) {
    EXPECT_EQ(steps, static_cast<size_t>(std::ceil(std::log2(p))));
  }
}

std::vector<int> identity(int p) {
  std::vector<int> v(p);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(Schedule, EveryAlgorithmEveryGroupSize) {
  std::mt19937 rng(42);
  for (int p = 1; p <= 64; ++p) {
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<int> order = identity(p);
      if (trial > 0) std::shuffle(order.begin(), order.end(), rng);
      SCOPED_TRACE("p=" + std::to_string(p) + " trial " + std::to_string(trial));
      if (is_power_of_two(p)) simulate(Algorithm::RecursiveDoubling, order);
      simulate(Algorithm::Bruck, order);
      simulate(Algorithm::Ring, order);
      simulate(Algorithm::Direct, order);
    }
  }
}

// Random layouts of 1..8 hosts with 1..5 ranks each, hosts' ranks interleaved in group rank
// order (as new_group can make them): every chunk lands once, only held chunks are forwarded,
// the leaders alone cross hosts.
TEST(Schedule, TwoLevelOnRandomLayouts) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int hosts = 1 + static_cast<int>(rng() % 8);
    std::vector<int> host_of;
    for (int h = 0; h < hosts; ++h) {
      const int k = 1 + static_cast<int>(rng() % 5);
      host_of.insert(host_of.end(), k, h);
    }
    if (trial % 2) std::shuffle(host_of.begin(), host_of.end(), rng);
    // Host indices by first appearance, as topology::layout_of numbers them.
    std::vector<int> seen(hosts, -1);
    int next = 0;
    for (int& h : host_of) {
      if (seen[h] < 0) seen[h] = next++;
      h = seen[h];
    }
    const int p = static_cast<int>(host_of.size());
    SCOPED_TRACE("trial " + std::to_string(trial) + ", p=" + std::to_string(p));
    simulate(Algorithm::TwoLevel, identity(p), host_of);
    for (int r = 0; r < p; ++r) {
      const Schedule s = two_level(host_of, r);
      EXPECT_EQ(s.steps.size(), static_cast<size_t>(hosts + 1));
      const bool leader =
          std::find(host_of.begin(), host_of.end(), host_of[r]) - host_of.begin() == r;
      for (const Step& st : s.steps) {
        for (const Transfer& t : st.sends) {
          if (host_of[t.peer] != host_of[r]) {
            EXPECT_TRUE(leader) << "rank " << r << " crossed hosts";
          }
        }
      }
    }
  }
}

TEST(Schedule, TwoLevelNeedsTheHosts) {
  EXPECT_THROW(make_schedule(Algorithm::TwoLevel, identity(4), 0), InvalidArgument);
  EXPECT_EQ(parse_algorithm("two_level"), Algorithm::TwoLevel);
}

TEST(Schedule, RecursiveDoublingRejectsNonPowerOfTwo) {
  EXPECT_THROW(make_schedule(Algorithm::RecursiveDoubling, identity(6), 0), std::exception);
}

TEST(Schedule, RecursiveDoublingDoublesTheBlock) {
  // p = 8, rank 5: partners 4, 7, 1 with blocks of 1, 2, 4 chunks.
  Schedule s = recursive_doubling(identity(8), 5);
  ASSERT_EQ(s.steps.size(), 3u);
  EXPECT_EQ(s.steps[0].sends, (std::vector<Transfer>{{4, 5, 1}}));
  EXPECT_EQ(s.steps[1].sends, (std::vector<Transfer>{{7, 4, 2}}));
  EXPECT_EQ(s.steps[2].sends, (std::vector<Transfer>{{1, 4, 4}}));
  EXPECT_EQ(s.steps[2].recvs, (std::vector<Transfer>{{1, 0, 4}}));
}

TEST(Schedule, BruckWrapsAroundWithAbsoluteOffsets) {
  // p = 5, rank 3, step 1 (d = 2): holds chunks 3, 4; sends them to rank 1.
  Schedule s = bruck(identity(5), 3);
  ASSERT_EQ(s.steps.size(), 3u);
  EXPECT_EQ(s.steps[1].sends, (std::vector<Transfer>{{1, 3, 2}}));
  // Step 2 (d = 4, n = 1): sends chunk 3 to rank 4, receives chunk 2 from rank 2.
  EXPECT_EQ(s.steps[2].sends, (std::vector<Transfer>{{4, 3, 1}}));
  EXPECT_EQ(s.steps[2].recvs, (std::vector<Transfer>{{2, 2, 1}}));
}

TEST(Schedule, CoalesceMergesRuns) {
  EXPECT_EQ(coalesce(1, {5, 2, 3, 7, 6}), (std::vector<Transfer>{{1, 2, 2}, {1, 5, 3}}));
}

}  // namespace
}  // namespace rdmacoll::schedule
