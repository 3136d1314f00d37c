// destroy_process_group after a point-to-point failure, over real processes: a survivor leaves
// within the cleanup grace (min(timeout, 10 s)) plus a second, whatever was outstanding, and
// the error names the process that exited. It once waited the timeout twice (once for the dead
// rank to arrive, once more for it to close), and an unmatched irecv a third time.

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "gather_check.hpp"

namespace rdmacoll {
namespace {

using testing::expect_throw_with;
using testing::run_ranks;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs `body` on 3 ranks at RDMACOLL_TIMEOUT_S=`timeout_s`, then times destroy_process_group on
// every rank that is left, then runs `after`; `victim` ends killed by SIGKILL. The promise is
// the grace plus a second; a rank known dead is not waited for at all (0.1-0.3 s here), which
// the bound of 3 s tells from waiting out the grace (8 s).
void expect_destroy_within(
    int timeout_s, int victim, const std::function<void(int)>& body,
    const std::function<void(int)>& after = [](int) {}) {
  testing::RunOptions opt;
  opt.init = false;
  opt.kill_on_failure = false;
  opt.deadline = std::chrono::seconds(120);
  opt.env = {{"RDMACOLL_TIMEOUT_S", std::to_string(timeout_s)}};
  const double bound = std::min(3.0, std::min(timeout_s, 10) + 1.0);
  const auto results = run_ranks(
      3,
      [&](int rank, int) {
        init_process_group();
        body(rank);
        const auto t0 = std::chrono::steady_clock::now();
        destroy_process_group();
        const double took = seconds_since(t0);
        RANK_CHECK(took < bound,
                   "destroy_process_group took " << took << " s; the bound is " << bound << " s");
        after(rank);
      },
      opt);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(results[r].exit_code, r == victim ? 128 + SIGKILL : 0) << testing::describe(results);
  }
}

TEST(Teardown, ASenderKilledMidMessageIsNamedAndDestroyTakesAtMostTheGrace) {
  expect_destroy_within(8, 2, [](int rank) {
    constexpr int64_t n = 16 << 20;  // 64 MiB: written after a clear-to-send, never inline
    if (rank == 2) {
      Tensor big = zeros({n});
      Work w = send(big, 0, {}, 0, /*async_op=*/true);
      ::raise(SIGKILL);
    }
    if (rank == 0) {
      Tensor t = zeros({n});
      expect_throw_with<PeerFailure>([&] { recv(t, 2); }, "of rank 2 on this host");
    }
  });
}

TEST(Teardown, AnUnmatchedIrecvFromARankThatDiedFailsAndDestroyTakesAtMostTheGrace) {
  Tensor t = zeros({4});
  std::optional<Work> w;
  expect_destroy_within(
      8, 2,
      [&](int rank) {
        if (rank == 2) ::raise(SIGKILL);
        if (rank == 1) w = recv(t, 2, {}, 0, /*async_op=*/true);
      },
      [&](int rank) {
        if (rank == 1) expect_throw_with<PeerFailure>([&] { w->wait(); }, "of rank 2 on this host");
      });
}

}  // namespace
}  // namespace rdmacoll
