// The eager slots' layout: pure arithmetic, checked without any transport.

#include <gtest/gtest.h>

#include <set>

#include "engine/call_descriptor.hpp"
#include "engine/eager_slots.hpp"

namespace rdmacoll::engine {
namespace {

TEST(EagerSlotsLayout, SlotsAreLineAlignedDisjointAndInsideTheRegion) {
  for (int p : {2, 3, 4, 16, 64}) {
    const size_t capacity = descriptor_capacity(eager_limit(p));
    const size_t slot = EagerSlots::slot_bytes(capacity);
    const size_t region = EagerSlots::region_bytes(p, capacity);
    EXPECT_GE(slot, EagerSlots::kLine + capacity);
    std::set<size_t> offsets;
    for (int sender = 0; sender < p; ++sender) {
      for (uint64_t seq : {0u, 1u}) {
        const size_t off = EagerSlots::slot_offset(sender, seq, capacity);
        EXPECT_EQ(off % EagerSlots::kLine, 0u) << "p " << p << " sender " << sender;
        EXPECT_GE(off, EagerSlots::kLine) << "overlaps the control line";
        EXPECT_LE(off + slot, region) << "p " << p << " sender " << sender << " seq " << seq;
        offsets.insert(off);
      }
      // Calls two apart share a slot; consecutive calls never do.
      EXPECT_EQ(EagerSlots::slot_offset(sender, 2, capacity),
                EagerSlots::slot_offset(sender, 0, capacity));
    }
    ASSERT_EQ(offsets.size(), static_cast<size_t>(2 * p));
    size_t prev = 0;
    bool first = true;
    for (size_t off : offsets) {  // sorted: neighbours at least a slot apart
      if (!first) {
        EXPECT_GE(off - prev, slot);
      }
      prev = off;
      first = false;
    }
  }
}

}  // namespace
}  // namespace rdmacoll::engine
