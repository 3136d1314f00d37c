#pragma once
// Broadcast as plain data: the binomial tree rooted at `root`. In virtual ranks v = (rank -
// root) mod p, v receives from v minus its highest set bit, at step log2(that bit), and then
// forwards to v + 2^k for every 2^k above its highest bit, smallest first: ceil(log2 p) steps,
// the root sending ceil(log2 p) copies instead of p - 1.

#include <vector>

namespace rdmacoll::schedule {

struct TreeNode {
  int parent = -1;            // group rank we receive from; -1 at the root
  std::vector<int> children;  // group ranks we forward to, in step order
};

TreeNode binomial_tree(int p, int root, int rank);

}  // namespace rdmacoll::schedule
