#pragma once
// Checked gather, scatter, reduce and all_to_all calls, shared by the host tests and the
// SoftRoCE (verbs) tests. Outputs start with values no correct call leaves, and every element
// of every rank's result is checked.

#include <cmath>
#include <cstdint>
#include <vector>

#include <rdmacoll/rdmacoll.hpp>

#include "gather_check.hpp"
#include "reduce_check.hpp"

namespace rdmacoll::testing::rooted {

// Sizes on every path: empty, one element, inline, just past the eager limit (64 KiB up to 16
// ranks), and 16 MiB in all.
inline std::vector<int64_t> chunk_sizes(int p) {
  return {0, 1, 1000, (100 << 10) / 4, (16 << 20) / 4 / p};
}

// The groups of an 8-rank world the tests run on: 1 to 8 ranks, non-powers of two, and members
// that are not the world's first ranks.
inline std::vector<std::vector<int>> groups_of_eight() {
  return {
      {0},      {0, 1}, {0, 1, 2}, {3, 5, 6, 7, 1}, {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5, 6, 7},
      {6, 2, 4}};
}

inline int size_of(const Group& g) {
  return g.is_default() ? get_world_size() : g.size();
}
inline int rank_of(const Group& g) {
  return g.is_default() ? get_rank() : g.rank();
}
inline int global_of(const Group& g, int group_rank) {
  return g.is_default() ? group_rank : g.ranks()[group_rank];
}
// A value no correct call writes where `want` belongs.
inline double poison(double want, DType dt) {
  return dt == DType::Bool ? 1.0 - want : want + 1;
}

// gather of n elements to group rank `root`; the root's output flat or stacked.
inline void gather_and_check(const Group& g, int root, int64_t n, DType dt, int iter,
                             bool stacked = false) {
  const int p = size_of(g), me = rank_of(g);
  Tensor in = zeros({n}, dt);
  fill_input(in, me, iter);
  Tensor out;
  if (me == root) {
    out = stacked ? zeros({p, n}, dt) : zeros({p * n}, dt);
    for (int r = 0; r < p; ++r)
      for (int64_t i = 0; i < n; ++i)
        out.set(r * n + i, poison(input_value(r, i, iter, dt), dt));
  }
  gather(me == root ? &out : nullptr, in, global_of(g, root), g);
  for (int64_t i = 0; i < n; ++i) {
    RANK_CHECK(in.item(i) == input_value(me, i, iter, dt), "gather changed its input");
  }
  if (me != root) return;
  for (int r = 0; r < p; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const double want = input_value(r, i, iter, dt);
      RANK_CHECK(out.item(r * n + i) == want,
                 "gather to " << root << " of " << p << " " << dtype_name(dt) << " n " << n
                              << ": chunk " << r << " element " << i << ": got "
                              << out.item(r * n + i) << ", want " << want);
    }
  }
}

// scatter of n elements per rank from group rank `root`.
inline void scatter_and_check(const Group& g, int root, int64_t n, DType dt, int iter) {
  const int p = size_of(g), me = rank_of(g);
  Tensor in;
  if (me == root) {
    in = zeros({p * n}, dt);
    for (int r = 0; r < p; ++r)
      for (int64_t i = 0; i < n; ++i)
        in.set(r * n + i, input_value(r, i, iter, dt));
  }
  Tensor out = zeros({n}, dt);
  for (int64_t i = 0; i < n; ++i)
    out.set(i, poison(input_value(me, i, iter, dt), dt));
  scatter(out, me == root ? &in : nullptr, global_of(g, root), g);
  for (int64_t i = 0; i < n; ++i) {
    const double want = input_value(me, i, iter, dt);
    RANK_CHECK(out.item(i) == want, "scatter from " << root << " of " << p << " " << dtype_name(dt)
                                                    << " n " << n << ": rank " << me << " element "
                                                    << i << ": got " << out.item(i) << ", want "
                                                    << want);
  }
}

// reduce of n elements to group rank `root`; the others' tensors must stay as they were.
inline void reduce_and_check(const Group& g, int root, int64_t n, DType dt, ReduceOp op, int iter) {
  using namespace reduction;
  const int p = size_of(g), me = rank_of(g);
  Tensor t = zeros({n}, dt);
  for (int64_t i = 0; i < n; ++i)
    t.set(i, value(me, i, iter, dt));
  reduce(t, global_of(g, root), op, g);
  for (int64_t i = 0; i < n; ++i) {
    const double want = me == root ? expected(p, i, iter, dt, op) : value(me, i, iter, dt);
    const double tol = me == root && op == ReduceOp::Avg ? std::abs(want) * 1e-2 : 0;
    RANK_CHECK(std::abs(t.item(i) - want) <= tol,
               "reduce to " << root << " of " << p << " " << dtype_name(dt) << " "
                            << reduce_op_name(op) << " n " << n << ": rank " << me << " element "
                            << i << ": got " << t.item(i) << ", want " << want);
  }
}

// Rows rank i sends rank j: `rows(i, j)`; every row has `width` elements. Element e of row k
// of the piece from i to j carries a value made of (i, j, k, e), so a piece in the wrong place
// or from the wrong rank is caught.
inline double piece_value(int from, int to, int64_t row, int64_t e, int iter, DType dt) {
  const int64_t raw = (from * 37 + to * 11 + row * 5 + e * 3 + iter) % 97;
  return dt == DType::Bool ? static_cast<double>(raw % 2) : static_cast<double>(1 + raw);
}

template <typename Rows>
void all_to_all_and_check(const Group& g, Rows rows, int64_t width, DType dt, int iter,
                          bool equal_splits = false) {
  const int p = size_of(g), me = rank_of(g);
  std::vector<int64_t> in_splits(p), out_splits(p);
  int64_t in_rows = 0, out_rows = 0;
  for (int j = 0; j < p; ++j) {
    in_splits[j] = rows(me, j);
    out_splits[j] = rows(j, me);
    in_rows += in_splits[j];
    out_rows += out_splits[j];
  }
  Tensor in = zeros({in_rows, width}, dt);
  Tensor out = zeros({out_rows, width}, dt);
  int64_t row = 0;
  for (int j = 0; j < p; ++j)
    for (int64_t k = 0; k < in_splits[j]; ++k, ++row)
      for (int64_t e = 0; e < width; ++e)
        in.set(row * width + e, piece_value(me, j, k, e, iter, dt));
  row = 0;
  for (int i = 0; i < p; ++i)
    for (int64_t k = 0; k < out_splits[i]; ++k, ++row)
      for (int64_t e = 0; e < width; ++e)
        out.set(row * width + e, poison(piece_value(i, me, k, e, iter, dt), dt));
  if (equal_splits) {
    all_to_all_single(out, in, {}, {}, g);
  } else {
    all_to_all_single(out, in, out_splits, in_splits, g);
  }
  row = 0;
  for (int i = 0; i < p; ++i) {
    for (int64_t k = 0; k < out_splits[i]; ++k, ++row) {
      for (int64_t e = 0; e < width; ++e) {
        const double want = piece_value(i, me, k, e, iter, dt);
        const double got = out.item(row * width + e);
        RANK_CHECK(got == want, "all_to_all of " << p << " " << dtype_name(dt) << " width " << width
                                                 << ": rank " << me << ", from rank " << i
                                                 << " row " << k << " element " << e << ": got "
                                                 << got << ", want " << want);
      }
    }
  }
}

}  // namespace rdmacoll::testing::rooted
