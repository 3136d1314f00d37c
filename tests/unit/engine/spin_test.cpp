// The polling rule every engine wait shares (engine/spin.hpp): 64 rounds, then polling for the
// policy's duration, then blocking; once spent, the budget stays spent until something moves.
// And the one wait loop that applies it (engine/executor.hpp).
#include "engine/executor.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace rdmacoll::engine {
namespace {

using transport::Clock;

TEST(Spin, WithNoDurationAWaitPollsSixtyFourRoundsThenBlocks) {
  const SpinPolicy spin{std::chrono::microseconds(0), false};
  int idle = 0;
  Clock::time_point until{};
  for (int i = 0; i < 64; ++i)
    EXPECT_TRUE(keep_spinning(spin, idle, until)) << "round " << i;
  for (int i = 0; i < 20; ++i)
    EXPECT_FALSE(keep_spinning(spin, idle, until)) << "round " << 64 + i << " polled again";
  idle = 0;  // something moved: the next wait polls again
  EXPECT_TRUE(keep_spinning(spin, idle, until));
}

TEST(Spin, AWaitPollsForItsDurationAndThenStaysBlocking) {
  const SpinPolicy spin{std::chrono::microseconds(2000), false};
  int idle = 0;
  Clock::time_point until{};
  const auto start = Clock::now();
  int rounds = 0;
  while (keep_spinning(spin, idle, until))
    ++rounds;
  const auto spent = Clock::now() - start;
  EXPECT_GE(spent, std::chrono::microseconds(2000)) << rounds << " rounds";
  EXPECT_GT(rounds, 64);
  for (int i = 0; i < 20; ++i)
    EXPECT_FALSE(keep_spinning(spin, idle, until)) << "polled again after the budget was spent";
}

TEST(Spin, ALongDurationKeepsPolling) {
  const SpinPolicy spin{std::chrono::hours(1), false};
  int idle = 0;
  Clock::time_point until{};
  for (int i = 0; i < 10000; ++i)
    ASSERT_TRUE(keep_spinning(spin, idle, until)) << "round " << i;
}

// The executor's wait (engine/executor.hpp): polls until done; an idle poll spins first, and
// only once the policy's rounds are spent does it check for failures and block, every idle poll
// after that; anything that moves starts the spinning over.
TEST(Executor, AWaitChecksAndBlocksOnlyOnceItsSpinningIsSpentAndSpinsAgainAfterAMove) {
  const SpinPolicy spin{std::chrono::microseconds(0), false};
  Clock::time_point until{};
  std::vector<char> trace;  // p: poll, s: spun round, c: stalled checks, b: blocked
  int polls = 0;
  run_wait(
      spin, until,
      [&] {
        trace.push_back('p');
        ++polls;
        if (polls == 70) return Poll::Moved;
        return polls == 140 ? Poll::Done : Poll::Idle;
      },
      [&](int) { trace.push_back('s'); }, [&] { trace.push_back('c'); },
      [&] { trace.push_back('b'); });
  std::string want;
  auto idle_run = [&](int polls_in_run) {
    for (int i = 0; i < polls_in_run; ++i)
      want += i < 64 ? "ps" : "pcb";
  };
  idle_run(69);  // polls 1..69 idle
  want += "p";   // 70 moved
  idle_run(69);  // 71..139 idle
  want += "p";   // 140 done
  EXPECT_EQ(std::string(trace.begin(), trace.end()), want);
}

TEST(Executor, AFailureFoundWhenStalledEndsTheWaitWithoutBlocking) {
  const SpinPolicy spin{std::chrono::microseconds(0), false};
  Clock::time_point until{};
  int blocked = 0;
  EXPECT_THROW(run_wait(
                   spin, until, [] { return Poll::Idle; }, [](int) {},
                   [] { throw std::runtime_error("peer gone"); }, [&] { ++blocked; }),
               std::runtime_error);
  EXPECT_EQ(blocked, 0);
}

}  // namespace
}  // namespace rdmacoll::engine
