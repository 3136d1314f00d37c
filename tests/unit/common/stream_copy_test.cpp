// stream_copy (common/stream_copy.hpp) and the rule that picks it for symmetric memory's stores
// (engine/collectives/all_gather.hpp).

#include "common/stream_copy.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/collectives/all_gather.hpp"

namespace rdmacoll {
namespace {

// Every byte lands, at every alignment of the destination and the source and at lengths around
// whole lines (the streamed part, its plain head and tail), and not one byte beside it.
TEST(StreamCopy, CopiesEveryByteAtEveryAlignmentAndLengthAndNothingBeside) {
  constexpr uint8_t kUntouched = 0xEE;
  std::vector<uint8_t> src(8192);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<uint8_t>(i * 31 + 7);
  std::vector<uint8_t> dst(8192 + 256);
  for (size_t dst_at = 0; dst_at < 64; ++dst_at) {
    for (size_t src_at : {0, 1, 13, 64}) {
      for (size_t bytes : {0, 1, 63, 64, 65, 127, 128, 129, 191, 255, 256, 1000, 4097, 8000}) {
        std::fill(dst.begin(), dst.end(), kUntouched);
        stream_copy(dst.data() + dst_at, src.data() + src_at, bytes);
        stream_fence();
        for (size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= dst_at && i < dst_at + bytes;
          const uint8_t want = inside ? src[src_at + i - dst_at] : kUntouched;
          ASSERT_EQ(dst[i], want) << "destination +" << dst_at << ", source +" << src_at << ", "
                                  << bytes << " bytes: byte " << i;
        }
      }
    }
  }
}

// A member streams its copies into outputs only where the group's outputs (p chunks each)
// together pass its last-level cache; never where the cache is unknown.
TEST(StreamCopy, GatherStoresStreamWhereTheOutputsPassTheLastLevelCache) {
  constexpr size_t kMiB = size_t{1} << 20;
  EXPECT_FALSE(engine::stream_gather_stores(2, 4 * kMiB, 32 * kMiB));  // 16 MiB of outputs
  EXPECT_TRUE(engine::stream_gather_stores(2, 8 * kMiB, 32 * kMiB));
  EXPECT_FALSE(engine::stream_gather_stores(4, 1 * kMiB, 32 * kMiB));
  EXPECT_TRUE(engine::stream_gather_stores(4, 2 * kMiB, 32 * kMiB));
  EXPECT_FALSE(engine::stream_gather_stores(64, 1024 * kMiB, 0));
}

}  // namespace
}  // namespace rdmacoll
