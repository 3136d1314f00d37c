// Reduce-scatter schedules as data: folding every rank's sends symbolically, each rank ends with
// every rank's contribution to its own piece exactly once; the simulator's off-host bytes are
// (p - 1) pieces per host for the host-major ring and k (p - k) for the direct round.

#include "schedule/reduce_scatter.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "schedule/simulate.hpp"
#include "topology/topology.hpp"

namespace rdmacoll::schedule {
namespace {

// held[r][piece][c]: how often rank c's contribution is in rank r's partial sum of `piece`.
void fold_and_check(const std::vector<Schedule>& all, int p, const char* what) {
  std::vector<std::vector<std::vector<int>>> held(p, std::vector<std::vector<int>>(p));
  for (int r = 0; r < p; ++r) {
    for (int j = 0; j < p; ++j) {
      held[r][j].assign(p, 0);
      held[r][j][r] = 1;
    }
  }
  const size_t steps = all[0].steps.size();
  for (size_t s = 0; s < steps; ++s) {
    // Every rank sends what it holds at the start of the step, then folds what arrives.
    std::vector<std::vector<std::vector<int>>> before = held;
    for (int r = 0; r < p; ++r) {
      ASSERT_EQ(all[r].steps.size(), steps) << what;
      for (const Transfer& t : all[r].steps[s].sends) {
        ASSERT_NE(t.first, r) << what << ": rank " << r << " sends its own piece away";
        bool expected = false;  // the receiver lists the matching receive
        for (const Transfer& in : all[t.peer].steps[s].recvs)
          expected |= in.peer == r && in.first == t.first;
        ASSERT_TRUE(expected) << what << ": p " << p << " step " << s << " " << r << "->" << t.peer
                              << " piece " << t.first << " unexpected";
        for (int c = 0; c < p; ++c)
          held[t.peer][t.first][c] += before[r][t.first][c];
      }
    }
  }
  for (int r = 0; r < p; ++r) {
    for (int c = 0; c < p; ++c) {
      EXPECT_EQ(held[r][r][c], 1) << what << ": p " << p << ", rank " << r << " holds rank " << c
                                  << "'s contribution " << held[r][r][c] << " times";
    }
  }
}

TEST(ReduceScatterSchedule, EveryContributionFoldedOnce) {
  for (int p = 1; p <= 17; ++p) {
    std::vector<int> identity(p), reversed(p);
    std::iota(identity.begin(), identity.end(), 0);
    std::iota(reversed.rbegin(), reversed.rend(), 0);
    for (const auto* order : {&identity, &reversed}) {
      std::vector<Schedule> ring, direct;
      for (int r = 0; r < p; ++r) {
        ring.push_back(ring_reduce_scatter(*order, r));
        direct.push_back(direct_reduce_scatter(p, r));
      }
      if (p > 1) {
        fold_and_check(ring, p, "ring");
        fold_and_check(direct, p, "direct");
        EXPECT_EQ(ring[0].steps.size(), static_cast<size_t>(p - 1));
      }
    }
  }
}

TEST(ReduceScatterSchedule, OffHostBytesOfRingAndDirect) {
  const uint64_t m = 1000;
  // Ranks numbered host by host: 2x2, 3x2, 4x1, and the uneven 3x1 + 1x3.
  const std::vector<std::vector<std::string>> layouts = {{"a", "a", "b", "b"},
                                                         {"a", "a", "b", "b", "c", "c"},
                                                         {"a", "b", "c", "d"},
                                                         {"a", "b", "c", "d", "d", "d"}};
  for (const auto& hosts : layouts) {
    const topology::Layout layout = topology::layout_of(hosts);
    const int p = static_cast<int>(hosts.size());
    const auto ring = simulate_reduce_scatter(Algorithm::Ring, layout.host_of,
                                              topology::host_major_order(layout), m);
    std::vector<int> identity(p);
    std::iota(identity.begin(), identity.end(), 0);
    const auto direct = simulate_reduce_scatter(Algorithm::Direct, layout.host_of, identity, m);
    for (int h = 0; h < layout.hosts; ++h) {
      int k = 0;
      for (int r = 0; r < p; ++r)
        k += layout.host_of[r] == h;
      EXPECT_EQ(ring.offhost_bytes[h], (p - 1) * m) << "host " << h << " of " << p << " ranks";
      EXPECT_EQ(direct.offhost_bytes[h], static_cast<uint64_t>(k) * (p - k) * m) << "host " << h;
    }
  }
}

}  // namespace
}  // namespace rdmacoll::schedule
