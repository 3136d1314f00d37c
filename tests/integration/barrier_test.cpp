// barrier across real processes over the UCX transport (shared memory, and again with
// UCX_TLS=tcp), and on the in-process fabric.

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "engine/collectives/barrier.hpp"
#include "gather_check.hpp"
#include "support/inprocess_world.hpp"

namespace rdmacoll {
namespace {

using testing::expect_all_ok;
using testing::run_ranks;

// Each rank marks the round in a page the ranks share, then enters the barrier; the last rank
// marks only once it sees every other rank's mark, so a barrier that let a rank leave early
// would show it an unmarked last rank.
TEST(Barrier, NoRankLeavesBeforeEveryRankHasEntered) {
  if (testing::launched()) GTEST_SKIP() << "the ranks share a page inherited through fork";
  for (int world : {2, 3, 5}) {
    void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(page, MAP_FAILED);
    auto* marks = static_cast<std::atomic<int>*>(page);  // zeroed by mmap
    expect_all_ok(run_ranks(world, [marks](int rank, int p) {
      for (int round = 1; round <= 20; ++round) {
        if (rank == p - 1) {
          for (int r = 0; r < p - 1; ++r) {
            // A rank that failed never marks: give up rather than spin for ever.
            const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
            while (marks[r].load() < round) {
              RANK_CHECK(std::chrono::steady_clock::now() < give_up,
                         "round " << round << ": rank " << r << " never entered");
              ::sched_yield();
            }
          }
        }
        marks[rank].store(round);
        barrier();
        for (int r = 0; r < p; ++r)
          RANK_CHECK(marks[r].load() >= round,
                     "round " << round << ": rank " << r << " had not entered");
      }
    }));
    ::munmap(page, 4096);
  }
}

}  // namespace
}  // namespace rdmacoll

// On the in-process fabric (src/transport/loopback, ctest's loopback. list): ranks as threads of
// this process, every group size and host layout in milliseconds.
namespace rdmacoll::engine {
namespace {

// As above, with the ranks as threads: the last rank enters once every other rank has.
TEST(BarrierOnLoopback, NoRankLeavesBeforeEveryRankHasEntered) {
  for (int p : {1, 2, 3, 4, 5, 8, 13}) {
    for (int per_host : {0, 1, 2}) {
      std::vector<std::atomic<int>> marks(static_cast<size_t>(p));
      run_world(p, hosts_for(p, per_host), [&marks](RankContext& c) {
        for (int round = 1; round <= 5; ++round) {
          if (c.rank == c.p - 1) {
            for (int r = 0; r < c.p - 1; ++r) {
              const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
              while (marks[r].load() < round) {
                check(std::chrono::steady_clock::now() < give_up,
                      "round " + std::to_string(round) + ": rank " + std::to_string(r) +
                          " never entered");
                std::this_thread::yield();
              }
            }
          }
          marks[c.rank].store(round);
          barrier(c.engine, c.group);
          for (int r = 0; r < c.p; ++r) {
            check(marks[r].load() >= round, "round " + std::to_string(round) + ": rank " +
                                                std::to_string(r) + " had not entered");
          }
        }
      });
    }
  }
}

}  // namespace
}  // namespace rdmacoll::engine
