// The rooted descriptor rounds (schedule/service.hpp) simulated for every group size 1..64, every
// root, identity and shuffled orders: the root ends with every chunk exactly once, every rank
// ends with the root's, a rank sends only what it holds, every send meets its receive, in
// 2 ceil(log2 p) steps, each descriptor moving once per level it climbs.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "schedule/service.hpp"

namespace rdmacoll::schedule {
namespace {

void prove_rooted(const std::vector<int>& order, int root) {
  const int p = static_cast<int>(order.size());
  std::vector<Schedule> all;
  for (int r = 0; r < p; ++r)
    all.push_back(rooted_schedule(order, root, r));
  int levels = 0;
  while ((1 << levels) < p)
    ++levels;
  std::vector<std::vector<int>> holds(p, std::vector<int>(p, 0));
  for (int r = 0; r < p; ++r) {
    ASSERT_EQ(all[r].steps.size(), 2 * static_cast<size_t>(levels));
    holds[r][r] = 1;
  }
  int moved = 0;
  for (size_t k = 0; k < all[0].steps.size(); ++k) {
    const auto before = holds;  // a step forwards only what arrived in earlier steps
    for (int r = 0; r < p; ++r) {
      const Step& step = all[r].steps[k];
      for (const Transfer& t : step.sends) {
        ASSERT_NE(t.peer, r);
        ASSERT_GT(t.count, 0);
        ASSERT_LE(t.first + t.count, p);
        for (int c = t.first; c < t.first + t.count; ++c) {
          ASSERT_EQ(before[r][c], 1) << "rank " << r << " sends chunk " << c << " it lacks";
          ++holds[t.peer][c];
          ++moved;
        }
        const auto& recvs = all[t.peer].steps[k].recvs;
        ASSERT_NE(std::find(recvs.begin(), recvs.end(), Transfer{r, t.first, t.count}), recvs.end())
            << "no receive at rank " << t.peer << " for rank " << r << "'s send at step " << k;
      }
      for (const Transfer& t : step.recvs) {
        const auto& sends = all[t.peer].steps[k].sends;
        ASSERT_NE(std::find(sends.begin(), sends.end(), Transfer{r, t.first, t.count}), sends.end())
            << "no send from rank " << t.peer << " for rank " << r << "'s receive at step " << k;
      }
    }
    if (k + 1 == static_cast<size_t>(levels)) {  // the gather is over
      for (int c = 0; c < p; ++c)
        ASSERT_EQ(holds[root][c], 1)
            << "the root holds chunk " << c << " " << holds[root][c] << "x";
    }
  }
  for (int r = 0; r < p; ++r) {
    ASSERT_EQ(holds[r][root], 1) << "rank " << r << " holds the root's chunk " << holds[r][root]
                                 << " times";
    for (int c = 0; c < p; ++c)
      ASSERT_LE(holds[r][c], 1) << "rank " << r << " got chunk " << c << " twice";
  }
  // A descriptor moves once per level it climbs (v's set bits), the root's once per rank.
  int climbs = 0;
  for (int v = 0; v < p; ++v)
    climbs += __builtin_popcount(static_cast<unsigned>(v));
  EXPECT_EQ(moved, climbs + p - 1);
}

TEST(RootedRounds, TheRootGetsEveryDescriptorOnceAndEveryRankTheRootsForEveryGroupSize) {
  std::mt19937 rng(7);
  for (int p = 1; p <= 64; ++p) {
    for (int trial = 0; trial < 2; ++trial) {
      std::vector<int> order(p);
      std::iota(order.begin(), order.end(), 0);
      if (trial > 0) std::shuffle(order.begin(), order.end(), rng);
      for (int root = 0; root < p; ++root) {
        SCOPED_TRACE("p=" + std::to_string(p) + " trial " + std::to_string(trial) + " root " +
                     std::to_string(root));
        prove_rooted(order, root);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The peers of every root's rounds are Bruck's (position +- 2^k in the order), so the
// connection plan that holds Bruck's descriptor peers holds these.
TEST(RootedRounds, EveryRootsPeersAreBrucks) {
  for (int p = 2; p <= 40; ++p) {
    std::vector<int> order(p);
    std::iota(order.begin(), order.end(), 0);
    std::reverse(order.begin(), order.end());
    for (int r = 0; r < p; ++r) {
      std::vector<int> bruck_peers;
      for (const Step& s : descriptor_schedule(ServiceRounds::Bruck, order, r).steps) {
        for (const Transfer& t : s.sends)
          bruck_peers.push_back(t.peer);
        for (const Transfer& t : s.recvs)
          bruck_peers.push_back(t.peer);
      }
      for (int root = 0; root < p; ++root) {
        for (const Step& s : rooted_schedule(order, root, r).steps) {
          for (const auto* list : {&s.sends, &s.recvs}) {
            for (const Transfer& t : *list) {
              EXPECT_NE(std::find(bruck_peers.begin(), bruck_peers.end(), t.peer),
                        bruck_peers.end())
                  << "p " << p << " root " << root << " rank " << r << " peer " << t.peer;
            }
          }
        }
      }
    }
  }
}

// The tree pays where many ranks share a NIC or groups are large, never on one host, and the
// answer grows monotonically with ranks per host.
TEST(RootedRounds, PayWhereTheAllGathersBytesThroughANicOutweighTheExtraRounds) {
  EXPECT_FALSE(rooted_rounds_pay(8, 1, 8, 4096));    // one host
  EXPECT_FALSE(rooted_rounds_pay(4, 4, 1, 4096));    // few ranks, one per host
  EXPECT_FALSE(rooted_rounds_pay(64, 64, 1, 4096));  // latency still wins
  EXPECT_TRUE(rooted_rounds_pay(256, 256, 1, 4096));
  EXPECT_TRUE(rooted_rounds_pay(16, 2, 8, 4096));
  for (int p = 3; p <= 512; p += 7) {
    bool before = false;
    for (int per_host = 1; per_host <= 16; ++per_host) {
      const bool pays = rooted_rounds_pay(p, 2, per_host, 4096);
      EXPECT_TRUE(pays || !before) << "p " << p << " per host " << per_host;
      before = pays;
    }
  }
}

}  // namespace
}  // namespace rdmacoll::schedule
