#include "schedule/binomial_tree.hpp"

namespace rdmacoll::schedule {

TreeNode binomial_tree(int p, int root, int rank) {
  TreeNode node;
  const int v = (rank - root + p) % p;
  int high = 0;  // v's highest set bit (0 for the root)
  for (int bit = 1; bit <= v; bit <<= 1) {
    if (v & bit) high = bit;
  }
  if (v > 0) node.parent = (v - high + root) % p;
  for (int bit = high ? high << 1 : 1; v + bit < p; bit <<= 1)
    node.children.push_back((v + bit + root) % p);
  return node;
}

}  // namespace rdmacoll::schedule
