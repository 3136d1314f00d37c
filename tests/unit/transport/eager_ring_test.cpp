// The framing of verbs' eager slots (src/transport/verbs/eager_ring.hpp), without a device: what a
// sender packs reads back whole, a slot that has not fully landed (in any packet order) reads as
// not yet, and a slot whose head claims a length no slot holds raises.

#include "transport/verbs/eager_ring.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::transport::eager_ring {
namespace {

std::vector<uint8_t> payload_of(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

TEST(VerbsEagerSlot, PacksAndReadsBackEveryLength) {
  std::vector<uint8_t> slot(kSlotBytes, 0);
  uint64_t number = 0;
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{300}, size_t{4152},
                   kMaxPayload}) {
    ++number;
    const auto data = payload_of(n, static_cast<uint8_t>(number));
    ASSERT_LE(framed_bytes(n), kSlotBytes) << n;
    pack(slot.data(), number, 0xabcdef0000 + n, data.data(), n, static_cast<uint32_t>(n * 3),
         static_cast<uint16_t>(0xfff0 + number));
    EXPECT_FALSE(read(slot.data(), number - 1)) << "the previous number must not match";
    EXPECT_FALSE(read(slot.data(), number + 1)) << "the next number must not match yet";
    const auto m = read(slot.data(), number);
    ASSERT_TRUE(m) << n;
    EXPECT_EQ(m->tag, 0xabcdef0000 + n);
    EXPECT_EQ(m->credit, n * 3);
    EXPECT_EQ(m->receives, static_cast<uint16_t>(0xfff0 + number));
    ASSERT_EQ(m->payload.size(), n);
    EXPECT_TRUE(std::equal(data.begin(), data.end(), m->payload.begin())) << n;
  }
}

// The NIC is still writing: the head has landed but not the trailer (or the head is the old
// message's), so the reader waits.
TEST(VerbsEagerSlot, HalfLandedSlotIsNotYetAMessage) {
  std::vector<uint8_t> sender(kSlotBytes, 0), slot(kSlotBytes, 0);
  const auto data = payload_of(100, 3);
  pack(sender.data(), 9, 42, data.data(), data.size());  // the slot's previous message
  slot = sender;
  pack(sender.data(), 17, 43, data.data(), data.size());
  std::memcpy(slot.data(), sender.data(), kHeaderBytes);  // only the head has landed
  EXPECT_FALSE(read(slot.data(), 17));
  std::memcpy(slot.data(), sender.data(), framed_bytes(100) - kTrailerBytes);  // all but trailer
  EXPECT_FALSE(read(slot.data(), 17));
  slot = sender;
  const auto m = read(slot.data(), 17);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->tag, 43u);
  // A trailer alone (head still old) is not a message either.
  std::vector<uint8_t> tail_only(kSlotBytes, 0);
  std::memcpy(tail_only.data() + kHeaderBytes, sender.data() + kHeaderBytes,
              framed_bytes(100) - kHeaderBytes);
  EXPECT_FALSE(read(tail_only.data(), 17));
}

// Adaptive routing delivers a write's packets in any order: here the head packet and the last
// (trailer) packet have landed while a middle one still holds the previous message's bytes.
// The reader must refuse the slot until the middle lands, at every packet size and position.
TEST(VerbsEagerSlot, TrailerLandedBeforeAMiddlePacketIsNotYetAMessage) {
  const auto old_data = payload_of(kMaxPayload, 1);
  for (size_t mtu : {size_t{256}, size_t{1024}}) {
    for (size_t n : {size_t{600}, size_t{2500}, kMaxPayload}) {
      std::vector<uint8_t> sender(kSlotBytes, 0), slot(kSlotBytes, 0);
      pack(slot.data(), 3, 7, old_data.data(), old_data.size());  // the slot's previous message
      auto data = payload_of(n, 5);
      pack(sender.data(), 11, 8, data.data(), n);
      const size_t framed = framed_bytes(n);
      const size_t packets = (framed + mtu - 1) / mtu;
      for (size_t missing = 1; missing + 1 < packets; ++missing) {
        std::vector<uint8_t> landed = slot;
        for (size_t k = 0; k < packets; ++k) {
          if (k == missing) continue;
          const size_t at = k * mtu, len = std::min(mtu, framed - at);
          std::memcpy(landed.data() + at, sender.data() + at, len);
        }
        EXPECT_FALSE(read(landed.data(), 11))
            << "packet " << missing << " of " << packets << " (MTU " << mtu << ", " << n
            << " bytes) has not landed";
        const size_t at = missing * mtu;
        std::memcpy(landed.data() + at, sender.data() + at, std::min(mtu, framed - at));
        const auto m = read(landed.data(), 11);
        ASSERT_TRUE(m) << "every packet landed";
        EXPECT_TRUE(std::equal(data.begin(), data.end(), m->payload.begin()));
      }
    }
  }
}

// A single word of the payload (or the tag, or the credit) still old: refused.
TEST(VerbsEagerSlot, OneStaleWordIsNotYetAMessage) {
  const auto data = payload_of(512, 9);
  std::vector<uint8_t> sender(kSlotBytes, 0);
  pack(sender.data(), 5, 77, data.data(), data.size(), 4);
  for (size_t at = 8; at < framed_bytes(512) - kTrailerBytes; at += 8) {
    std::vector<uint8_t> slot = sender;
    slot[at] ^= 0x40;
    EXPECT_FALSE(read(slot.data(), 5)) << "byte " << at << " differs";
  }
  EXPECT_TRUE(read(sender.data(), 5));
}

// A credit travels as its low 32 bits; the sender, having sent `sent`, widens it back from
// anywhere in [sent - slots, sent], across the 2^32 boundary too. A credit from beyond `sent`
// (a lie) never widens into that range.
TEST(VerbsEagerSlot, CreditWidensBackAcrossTheWrap) {
  for (uint64_t sent : {uint64_t{0}, uint64_t{5}, uint64_t{1} << 32, (uint64_t{1} << 32) + 3,
                        (uint64_t{7} << 32) - 2, ~uint64_t{0} >> 1}) {
    for (uint64_t back = 0; back <= static_cast<uint64_t>(kMaxSlots) && back <= sent; ++back) {
      const uint64_t count = sent - back;
      EXPECT_EQ(widen_credit(static_cast<uint32_t>(count), sent), count) << sent << " " << back;
    }
    // A lie lands outside [sent - slots, sent]: above `sent` (ignored) or 2^32 back (below
    // the credit already known, which only grows).
    const uint64_t lie = widen_credit(static_cast<uint32_t>(sent + 1), sent);
    EXPECT_TRUE(lie > sent || lie + kMaxSlots < sent) << sent << " widened a lie to " << lie;
  }
}

// Receive credits ride on messages as their low 16 bits; the sender, having made `used`
// receive-taking requests, widens them back from anywhere within 256 below `used` (its grant
// is at most 8), across the 2^16 boundary too; a lie from above `used` widens out of that range.
TEST(VerbsEagerSlot, ReceiveCreditsWidenBackAcrossTheWrap) {
  for (uint64_t used : {uint64_t{0}, uint64_t{3}, uint64_t{1} << 16, (uint64_t{1} << 16) + 2,
                        (uint64_t{9} << 32) - 1, ~uint64_t{0} >> 1}) {
    for (uint64_t back = 0; back <= 256 && back <= used; ++back) {
      const uint64_t count = used - back;
      EXPECT_EQ(widen_receives(static_cast<uint16_t>(count), used), count) << used << " " << back;
    }
    const uint64_t lie = widen_receives(static_cast<uint16_t>(used + 1), used);
    EXPECT_TRUE(lie > used || lie + 256 < used) << used << " widened a lie to " << lie;
  }
}

// A peer's write claims more than a slot holds: the reader must not read past the slot.
TEST(VerbsEagerSlot, LengthBeyondTheSlotRaises) {
  std::vector<uint8_t> slot(kSlotBytes, 0);
  const uint64_t number = 5;
  std::memcpy(slot.data(), &number, 8);
  for (uint32_t len : {static_cast<uint32_t>(kMaxPayload + 1), uint32_t{0xffffffff}}) {
    std::memcpy(slot.data() + 8, &len, 4);
    try {
      (void)read(slot.data(), number);
      ADD_FAILURE() << len << ": no error";
    } catch (const TransportError& e) {
      EXPECT_NE(std::string(e.what()).find("a slot holds"), std::string::npos) << e.what();
    }
  }
  // A sender never packs more than a slot holds.
  std::vector<uint8_t> big(kMaxPayload + 1);
  std::vector<uint8_t> out(framed_bytes(big.size()));
  EXPECT_THROW(pack(out.data(), 1, 0, big.data(), big.size()), TransportError);
}

// The words peers write (credit, sleep epoch and receive credits in) and the sources of ours
// (out) each have a line of their own after the slots, so no NIC write shares a line with a slot
// being polled. Without slots a block is those lines alone (receive credits need them).
TEST(VerbsEagerSlot, BlockLayoutKeepsCreditsAndEpochsOnTheirOwnLines) {
  for (int slots : {0, 1, kDefaultSlots, kMaxSlots}) {
    EXPECT_EQ(credit_in_offset(slots), static_cast<size_t>(slots) * kSlotBytes);
    EXPECT_EQ(credit_in_offset(slots) % kLine, 0u);
    EXPECT_EQ(credit_out_offset(slots), credit_in_offset(slots) + kLine);
    EXPECT_EQ(epoch_in_offset(slots), credit_out_offset(slots) + kLine);
    EXPECT_EQ(epoch_out_offset(slots), epoch_in_offset(slots) + kLine);
    EXPECT_EQ(receives_in_offset(slots), epoch_out_offset(slots) + kLine);
    EXPECT_EQ(receives_out_offset(slots), receives_in_offset(slots) + kLine);
    EXPECT_EQ(block_bytes(slots), receives_out_offset(slots) + kLine);
  }
  EXPECT_EQ(kSlotBytes % kLine, 0u);
}

}  // namespace
}  // namespace rdmacoll::transport::eager_ring
