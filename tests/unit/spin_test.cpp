// The polling rule every engine wait shares (engine/spin.hpp): 64 rounds, then polling for the
// policy's duration, then blocking; once spent, the budget stays spent until something moves.
#include "engine/spin.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace rdmacoll::engine
