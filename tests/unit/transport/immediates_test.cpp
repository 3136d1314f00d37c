// Receiver-chosen immediates (src/transport/verbs/immediates.hpp): every token and index survive
// the 32 bits, the write ring's wake-up bit is never set by a write, and a receiver's live
// tokens are distinct; a failed call's token stays fenced while free ones remain.

#include "transport/verbs/immediates.hpp"

#include <gtest/gtest.h>

#include <set>

namespace rdmacoll::transport::verbs_imm {
namespace {

TEST(Immediates, EveryTokenAndIndexRoundTripWithoutTheWakeUpBit) {
  for (uint32_t t = 0; t < kTokens; ++t) {
    for (uint32_t index : {0u, 1u, 4095u, 65535u}) {
      const uint32_t imm = immediate(write_signal(t, index));
      EXPECT_EQ(imm & eager_ring::kImm, 0u) << t;
      ASSERT_EQ(token_of(imm), t);
      ASSERT_EQ(imm & 0xffff, index);
    }
  }
}

TEST(Immediates, LiveTokensAreDistinctAndFencedOnesWaitTheirTurn) {
  TokenTable table;
  std::set<uint32_t> live;
  for (int i = 0; i < 1000; ++i)
    EXPECT_TRUE(live.insert(table.reserve()).second);
  table.release(5, true);  // a failed call
  table.release(6, false);
  EXPECT_FALSE(table.live(5));
  EXPECT_FALSE(table.live(6));
  // The free ones come first, in turn: the fenced token only once nothing else is left.
  for (uint32_t i = 1000; i < kTokens; ++i) {
    const uint32_t t = table.reserve();
    EXPECT_NE(t, 5u);
    EXPECT_TRUE(table.live(t));
  }
  EXPECT_EQ(table.reserve(), 6u);          // the released one, at its turn's end
  EXPECT_EQ(table.reserve(), 5u);          // then the longest-fenced
  EXPECT_EQ(table.reserve(), UINT32_MAX);  // every token live
  EXPECT_EQ(table.live_count(), kTokens);
}

}  // namespace
}  // namespace rdmacoll::transport::verbs_imm
