// Mistakes in gather, scatter, reduce and all_to_all: every rank raises, the group stays usable.
// Across real processes over the UCX transport (shared memory, and again with UCX_TLS=tcp).

#include <gtest/gtest.h>

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gather_check.hpp"
#include "reduce_check.hpp"
#include "rooted_check.hpp"

namespace rdmacoll {
namespace {

using namespace testing::rooted;
using testing::expect_all_ok;
using testing::expect_throw_with;
using testing::run_ranks;

TEST(RootedErrors, MistakesRaiseOnEveryRankAndTheGroupStaysUsable) {
  expect_all_ok(run_ranks(3, [](int rank, int) {
    Tensor in = zeros({4});
    // Splits that disagree between two ranks: everyone names the pair.
    {
      Tensor out = zeros({rank == 1 ? 4 : 3});
      std::vector<int64_t> in_splits = {1, 1, 2}, out_splits = {1, 1, 1};
      if (rank == 1) out_splits = {2, 1, 1};
      if (rank == 0) in_splits = {1, 1, 2};
      expect_throw_with<InvalidArgument>([&] { all_to_all_single(out, in, out_splits, in_splits); },
                                         "disagree on the all_to_all's splits");
    }
    // A mistake one rank sees: it says why, the others name it.
    {
      Tensor out = zeros({4});
      std::vector<int64_t> splits = rank == 2 ? std::vector<int64_t>{4} : std::vector<int64_t>{};
      if (rank == 2) {
        expect_throw_with<InvalidArgument>([&] { all_to_all_single(out, in, {}, splits); },
                                           "input_split_sizes has 1 entries");
      } else {
        Tensor ok_in = zeros({3}), ok_out = zeros({3});
        expect_throw_with<InvalidArgument>([&] { all_to_all_single(ok_out, ok_in); },
                                           "rank 2 rejected its arguments");
      }
    }
    {
      Tensor out = zeros({rank == 0 ? 11 : 12});
      expect_throw_with<InvalidArgument>(
          [&] { gather(rank == 0 ? &out : nullptr, in, 0); },
          rank == 0 ? "output has 11 elements" : "rank 0 rejected its arguments");
    }
    expect_throw_with<InvalidArgument>([&] { gather(nullptr, in, 5); }, "dst 5 is not a member");
    expect_throw_with<InvalidArgument>([&] { reduce(in, rank == 2 ? 1 : 0); },
                                       "disagree on the reduce's root");
    Tensor whole = zeros({12});
    Tensor wrong = zeros({rank == 1 ? 5 : 4});
    expect_throw_with<InvalidArgument>([&] { scatter(wrong, rank == 0 ? &whole : nullptr, 0); },
                                       "ranks disagree");
    // Still in step: every collective works afterwards.
    gather_and_check({}, 1, 100, DType::Float32, 7);
    scatter_and_check({}, 2, 100, DType::Float32, 8);
    reduce_and_check({}, 0, 100, DType::Float32, ReduceOp::Sum, 9);
    all_to_all_and_check(
        {}, [](int i, int j) { return int64_t{i + j}; }, 2, DType::Float32, 10);
  }));
}

}  // namespace
}  // namespace rdmacoll
