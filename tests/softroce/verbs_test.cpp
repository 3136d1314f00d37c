// The verbs test list, run inside the SoftRoCE VM (tests/softroce/run-suite.sh) with
// RDMACOLL_TRANSPORT=verbs: real libibverbs against rdma_rxe. Sizes stay at MiB scale because
// SoftRoCE under TCG moves a few MB/s.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>

#include <thread>

#include "api/debug.hpp"
#include "gather_check.hpp"
#include "reduce_check.hpp"

namespace rdmacoll {
namespace {

using testing::expect_all_ok;
using testing::expect_throw_with;
using testing::gather_and_check;
using testing::input_value;
using testing::run_ranks;
using testing::RunOptions;

void require_verbs() {
  RANK_CHECK(transport_name() == "verbs", "transport is " << transport_name());
}

class VerbsGroupSize : public ::testing::TestWithParam<int> {};

TEST_P(VerbsGroupSize, OneElementToOneMiBFlatAndStacked) {
  expect_all_ok(run_ranks(GetParam(), [](int, int) {
    require_verbs();
    gather_and_check({}, 1, DType::Float32, DType::Float32, false);
    gather_and_check({}, 13, DType::Int8, DType::Int8, true);
    gather_and_check({}, 1001, DType::Int64, DType::Float32, false);
    gather_and_check({}, 16384, DType::Float32, DType::Float32, true);           // 64 KiB
    gather_and_check({}, (1 << 20) / 4, DType::Float32, DType::Float32, false);  // 1 MiB
  }));
}

INSTANTIATE_TEST_SUITE_P(Verbs, VerbsGroupSize, ::testing::Values(2, 3, 4));

TEST(Verbs, Subgroup) {
  expect_all_ok(run_ranks(3, [](int rank, int) {
    require_verbs();
    Group g = new_group({0, 2});
    if (g.is_member()) gather_and_check(g, 100, DType::Float64, DType::Float64, false);
    gather_and_check({}, 5, DType::Int32, DType::Int32, false);
    (void)rank;
  }));
}

TEST(Verbs, HundredCallsOnReusedBuffersHitTheRegistrationCache) {
  expect_all_ok(run_ranks(2, [](int rank, int world) {
    require_verbs();
    const int64_t n = 4096;  // 16 KiB: above the inline limit, so the data path registers
    Tensor in = zeros({n}, DType::Float32);
    Tensor out = zeros({world * n}, DType::Float32);
    all_gather_into_tensor(out, in);
    const uint64_t before = detail::memory_registrations();
    RANK_CHECK(before > 0, "the first call registered nothing");
    for (int iter = 0; iter < 100; ++iter) {
      testing::fill_input(in, rank, iter);
      all_gather_into_tensor(out, in);
      testing::check_gathered(out, world, iter, DType::Float32);
    }
    RANK_CHECK(
        detail::memory_registrations() == before,
        "registered " << detail::memory_registrations() - before << " times for reused buffers");
  }));
}

// Fresh mappings each call, often at the address just unmapped: a stale registration would
// point the peer's write at the old pages and the check would see the sentinel.
TEST(Verbs, HundredCallsOnFreshlyMappedBuffers) {
  expect_all_ok(run_ranks(2, [](int rank, int world) {
    require_verbs();
    const int64_t n = 4096;
    const size_t bytes = static_cast<size_t>(world * n) * 4;
    for (int iter = 0; iter < 100; ++iter) {
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      RANK_CHECK(p != MAP_FAILED, "mmap");
      Tensor out = Tensor::view(p, DType::Float32, {world * n});
      for (int64_t i = 0; i < out.numel(); ++i)
        out.set(i, -1);
      Tensor in = zeros({n}, DType::Float32);
      testing::fill_input(in, rank, iter);
      all_gather_into_tensor(out, in);
      testing::check_gathered(out, world, iter, DType::Float32);
      ::munmap(p, bytes);
    }
  }));
}

TEST(Verbs, MismatchedSizesRaiseOnEveryRank) {
  expect_all_ok(run_ranks(3, [](int rank, int world) {
    require_verbs();
    const int64_t n = rank == 1 ? 3 : 2;
    Tensor in = zeros({n}), out = zeros({world * n});
    expect_throw_with<InvalidArgument>([&] { all_gather_into_tensor(out, in); }, "disagree");
    gather_and_check({}, 4, DType::Float32, DType::Float32, false);
  }));
}

// all_reduce rides the same gathers: small (inline in the descriptors) and 256 KiB (RDMA writes).
TEST(Verbs, AllReduceSmallAndLarge) {
  expect_all_ok(run_ranks(3, [](int rank, int world) {
    require_verbs();
    for (int64_t n : {int64_t{5}, int64_t{65536}}) {
      Tensor t = zeros({n});
      for (int64_t i = 0; i < n; ++i)
        t.set(i, rank * 10 + i % 7);
      all_reduce(t);
      for (int64_t i = 0; i < n; ++i) {
        double want = 0;
        for (int r = 0; r < world; ++r)
          want += r * 10 + i % 7;
        RANK_CHECK(t.item(i) == want, "n " << n << " element " << i << ": got " << t.item(i));
      }
    }
  }));
}

// reduce_scatter_tensor: one gather round (small) and a direct round of RDMA writes from the
// registered input into the owners' scratch (48 KiB per rank); broadcast inline, down the
// binomial tree (160 KiB) and scattered then gathered (400 KiB, with a tail).
TEST(Verbs, ReduceScatterAndBroadcast) {
  expect_all_ok(run_ranks(3, [](int, int) {
    require_verbs();
    using namespace testing::reduction;
    reduce_scatter_and_check({}, 7, DType::Float32, ReduceOp::Sum, 0, Layout::Flat);
    reduce_scatter_and_check({}, 12288, DType::Float32, ReduceOp::Sum, 1, Layout::Stacked);
    reduce_scatter_and_check({}, 6144, DType::Int64, ReduceOp::Max, 2, Layout::InPlace);
    broadcast_and_check({}, 1, 9, DType::Int32, 0);
    broadcast_and_check({}, 2, 40000, DType::Float32, 1);
    broadcast_and_check({}, 0, 100001, DType::Float32, 2);
  }));
}

// Async work and a second thread on another group, over verbs: the serialized transport's
// leader/follower waits on the completion channel.
TEST(Verbs, AsyncWorkAndTwoThreads) {
  expect_all_ok(run_ranks(2, [](int rank, int world) {
    require_verbs();
    Group other = new_group({0, 1});
    std::exception_ptr error;
    std::thread side([&] {
      try {
        for (int iter = 0; iter < 20; ++iter)
          gather_and_check(other, 5000, DType::Float32, DType::Float32, false, iter);
      } catch (...) {
        error = std::current_exception();
      }
    });
    std::vector<Tensor> ts;
    std::vector<Work> works;
    for (int i = 0; i < 10; ++i) {
      ts.push_back(zeros({3000}));
      for (int64_t j = 0; j < 3000; ++j)
        ts.back().set(j, rank + j + i);
      works.push_back(all_reduce(ts.back(), ReduceOp::Sum, {}, true));
    }
    for (int i = 0; i < 10; ++i) {
      works[i].wait();
      for (int64_t j = 0; j < 3000; ++j) {
        RANK_CHECK(ts[i].item(j) == world * (j + i) + 1, "work " << i << " element " << j);
      }
    }
    side.join();
    if (error) std::rethrow_exception(error);
  }));
}

TEST(Verbs, KilledRankGivesPeerFailureOrTimeout) {
  RunOptions opt;
  opt.env = {{"RDMACOLL_TIMEOUT_S", "20"}};
  opt.kill_on_failure = false;
  auto results = run_ranks(
      3,
      [](int rank, int world) {
        require_verbs();
        testing::gather_until_a_peer_dies(rank, world, 64, 2, 5);
      },
      opt);
  EXPECT_EQ(results[0].exit_code, 0) << testing::describe(results);
  EXPECT_EQ(results[1].exit_code, 0) << testing::describe(results);
  EXPECT_EQ(results[2].exit_code, 128 + SIGKILL);
}

}  // namespace
}  // namespace rdmacoll
