#include "schedule/bruck_all_to_all.hpp"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace rdmacoll::schedule {
namespace {

// Runs every rank's steps in lockstep with every piece labelled (source, destination): each
// message goes where its receiver expects it (same step, same slots), ceil(log2 p) steps of at
// most p/2 slots each, and at the end every rank holds every member's piece for it, exactly at
// final_slot().
TEST(BruckAllToAll, EveryPieceReachesItsDestinationInLogSteps) {
  for (int p = 1; p <= 130; ++p) {
    int log2p = 0;
    while ((1 << log2p) < p)
      ++log2p;
    std::vector<std::vector<SlotStep>> plan(p);
    std::vector<std::vector<std::pair<int, int>>> slots(p, std::vector<std::pair<int, int>>(p));
    for (int r = 0; r < p; ++r) {
      plan[r] = bruck_all_to_all(p, r);
      ASSERT_EQ(static_cast<int>(plan[r].size()), log2p) << "p " << p;
      for (int j = 0; j < p; ++j)
        slots[r][initial_slot(p, r, j)] = {r, j};
    }
    for (int k = 0; k < log2p; ++k) {
      std::vector<std::vector<std::pair<int, int>>> sent(p);
      for (int r = 0; r < p; ++r) {
        const SlotStep& s = plan[r][k];
        const SlotStep& peer = plan[s.to][k];
        ASSERT_EQ(peer.from, r) << "p " << p << " step " << k << " rank " << r;
        // The receiver reads the same runs of slots (only the peer named differs).
        ASSERT_EQ(peer.slots.size(), s.slots.size());
        for (size_t i = 0; i < s.slots.size(); ++i) {
          EXPECT_EQ(peer.slots[i].first, s.slots[i].first);
          EXPECT_EQ(peer.slots[i].count, s.slots[i].count);
        }
        int count = 0;
        for (const Transfer& t : s.slots) {
          EXPECT_EQ(t.peer, s.to);
          for (int i = t.first; i < t.first + t.count; ++i) {
            ASSERT_GT(i, 0);  // slot 0 (the rank's own piece) never travels
            ASSERT_LT(i, p);
            sent[s.to].push_back(slots[r][i]);
            ++count;
          }
        }
        EXPECT_LE(count, p / 2) << "p " << p << " step " << k;
      }
      for (int r = 0; r < p; ++r) {
        size_t next = 0;
        for (const Transfer& t : plan[r][k].slots)
          for (int i = t.first; i < t.first + t.count; ++i)
            slots[r][i] = sent[r][next++];
        ASSERT_EQ(next, sent[r].size());
      }
    }
    for (int r = 0; r < p; ++r) {
      for (int src = 0; src < p; ++src) {
        EXPECT_EQ(slots[r][final_slot(p, r, src)], std::make_pair(src, r))
            << "p " << p << " rank " << r << " piece from " << src;
      }
    }
  }
}

}  // namespace
}  // namespace rdmacoll::schedule
