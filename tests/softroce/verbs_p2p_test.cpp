// Over SoftRoCE (tests/softroce/run-suite.sh): point-to-point, gather, scatter, reduce and
// all-to-all between ranks that are hosts of their own.

#include <gtest/gtest.h>

#include "rooted_check.hpp"
#include "verbs_common.hpp"

namespace rdmacoll {
namespace {

// Issue 24's collectives over verbs, as hosts of their own: inline (in the descriptors) and
// past the inline limit (one-sided writes into the receivers' registered outputs), uneven
// all-to-all splits with zeros, every element of every rank checked.
TEST(Verbs, GatherScatterReduceAndAllToAll) {
  RunOptions opt;
  opt.init = false;
  expect_all_ok(run_ranks(
      3,
      [](int rank, int) {
        init_as_own_host(rank);
        require_verbs();
        using namespace testing::rooted;
        int iter = 0;
        for (int64_t n : {int64_t{5}, int64_t{40000}}) {
          testing::rooted::gather_and_check({}, 1, n, DType::Float32, iter++);
          testing::rooted::gather_and_check({}, 0, n, DType::Int64, iter++, true);
          scatter_and_check({}, 2, n, DType::Float32, iter++);
          reduce_and_check({}, 0, n, DType::Float32, ReduceOp::Sum, iter++);
          reduce_and_check({}, 2, n, DType::Int32, ReduceOp::Max, iter++);
        }
        auto uneven = [](int i, int j) { return int64_t{(i + 2 * j) % 3}; };
        all_to_all_and_check({}, uneven, 1, DType::Float32, iter++);
        all_to_all_and_check({}, uneven, 20000, DType::Float32, iter++);
        all_to_all_and_check(
            {}, [](int, int) { return int64_t{4}; }, 3, DType::Int8, iter++, true);
        destroy_process_group();
      },
      opt));
}

// send/recv over verbs: only the two ranks talk. Several outstanding sends with different tags
// received in the other order, a ring of isends, and a recv from any source; inline and
// written sizes.
TEST(Verbs, SendRecvTagsRingAndAnySource) {
  RunOptions opt;
  opt.init = false;
  expect_all_ok(run_ranks(
      3,
      [](int rank, int p) {
        init_as_own_host(rank);
        require_verbs();
        auto filled = [](int64_t n, int from, int iter) {
          Tensor t = zeros({n});
          for (int64_t i = 0; i < n; ++i)
            t.set(i, input_value(from, i, iter, DType::Float32));
          return t;
        };
        auto check_from = [](const Tensor& t, int from, int iter, const char* what) {
          for (int64_t i = 0; i < t.numel(); ++i)
            RANK_CHECK(t.item(i) == input_value(from, i, iter, DType::Float32),
                       what << ": element " << i << " of " << t.numel() << ": got " << t.item(i));
        };
        for (int64_t n : {int64_t{7}, int64_t{50000}}) {
          if (rank == 0) {
            std::vector<Tensor> keep;
            std::vector<Work> works;
            for (int tag = 0; tag < 3; ++tag) {
              keep.push_back(filled(n, tag, 1));
              works.push_back(send(keep.back(), 1, {}, tag, true));
            }
            when_all(works).wait();
          } else if (rank == 1) {
            for (int tag = 2; tag >= 0; --tag) {
              Tensor t = zeros({n});
              recv(t, 0, {}, tag);
              check_from(t, tag, 1, "tagged send");
            }
          }
          Tensor out = filled(n, rank, 2);
          Work w = send(out, (rank + 1) % p, {}, 5, true);
          Tensor in = zeros({n});
          recv(in, (rank + p - 1) % p, {}, 5);
          w.wait();
          check_from(in, (rank + p - 1) % p, 2, "ring");
          if (rank == 2) {
            for (int k = 0; k < 2; ++k) {
              Tensor t = zeros({n});
              Work r = recv(t, kAnySource, {}, 6);
              check_from(t, r.source_rank(), 3, "any source");
            }
          } else {
            send(filled(n, rank, 3), 2, {}, 6);
          }
        }
        destroy_process_group();
      },
      opt));
}

}  // namespace
}  // namespace rdmacoll
