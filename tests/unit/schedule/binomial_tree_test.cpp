#include "schedule/binomial_tree.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace rdmacoll::schedule {
namespace {

// Simulates the tree step by step: every rank receives exactly once, only after its parent
// has the data, from the parent that lists it as a child, within ceil(log2 p) steps.
TEST(BinomialTree, EveryRankReceivesOnceWithinLogSteps) {
  for (int p = 1; p <= 70; ++p) {
    int log2p = 0;
    while ((1 << log2p) < p)
      ++log2p;
    for (int root = 0; root < p; ++root) {
      std::vector<TreeNode> nodes;
      for (int r = 0; r < p; ++r)
        nodes.push_back(binomial_tree(p, root, r));
      EXPECT_EQ(nodes[root].parent, -1);
      std::vector<int> arrival(p, -1);  // step at which each rank holds the data
      arrival[root] = 0;
      std::vector<int> received(p, 0);
      // A rank's k-th child gets the data k+1 steps after the rank got it.
      for (int step = 0; step <= log2p; ++step) {
        for (int r = 0; r < p; ++r) {
          if (arrival[r] < 0) continue;
          for (size_t k = 0; k < nodes[r].children.size(); ++k) {
            const int c = nodes[r].children[k];
            if (arrival[r] + static_cast<int>(k) + 1 != step + 1) continue;
            EXPECT_EQ(nodes[c].parent, r) << "p " << p << " root " << root << " child " << c;
            ++received[c];
            arrival[c] = step + 1;
          }
        }
      }
      for (int r = 0; r < p; ++r) {
        if (r == root) continue;
        EXPECT_EQ(received[r], 1) << "p " << p << " root " << root << " rank " << r;
        EXPECT_LE(arrival[r], log2p) << "p " << p << " root " << root << " rank " << r;
      }
      EXPECT_EQ(nodes[root].children.size(), static_cast<size_t>(log2p));
    }
  }
}

}  // namespace
}  // namespace rdmacoll::schedule
