// The mailbox's layout and the record a small call's descriptor travels as: pure code,
// checked without any transport.

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string_view>
#include <vector>

#include "engine/control/mailbox.hpp"
#include "engine/core/call_descriptor.hpp"
#include "engine/core/descriptor_fields.hpp"

namespace rdmacoll::engine {
namespace {

TEST(MailboxLayout, SlotsAreLineAlignedDisjointAndInsideTheRegion) {
  for (int p : {2, 3, 4, 16, 64}) {
    const size_t capacity = descriptor_capacity(eager_limit(p));
    const size_t slot = Mailbox::slot_bytes(capacity);
    const size_t region = Mailbox::region_bytes(p, capacity);
    EXPECT_GE(slot, Mailbox::kLine + capacity);
    std::set<size_t> offsets;
    for (int sender = 0; sender < p; ++sender) {
      for (uint64_t seq : {0u, 1u}) {
        const size_t off = Mailbox::slot_offset(sender, seq, capacity);
        EXPECT_EQ(off % Mailbox::kLine, 0u) << "p " << p << " sender " << sender;
        EXPECT_GE(off, Mailbox::kLine) << "overlaps the control line";
        EXPECT_LE(off + slot, region) << "p " << p << " sender " << sender << " seq " << seq;
        offsets.insert(off);
      }
      // Calls two apart share a slot; consecutive calls never do.
      EXPECT_EQ(Mailbox::slot_offset(sender, 2, capacity),
                Mailbox::slot_offset(sender, 0, capacity));
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

// A descriptor of a small inline call, as make_descriptor fills it.
CallDescriptor small_call(const std::vector<uint8_t>& chunk) {
  CallDescriptor d;
  d.seq = 7;
  d.rank = 1;
  d.collective = 3;  // all_reduce
  d.in_dtype = 3;
  d.out_dtype = 4;
  d.reduce_op = 2;
  d.root = 5;
  d.in_numel = 0x1234567890ull;
  d.out_numel = 0x2234567890ull;
  d.total_numel = 0x3234567890ull;
  d.signal_token = 99;  // nobody writes to a rank that exposed nothing
  d.inline_data = chunk;
  return d;
}

TEST(MailboxRecord, ASmallCallsDescriptorComesBackWithEveryFieldTheRecordCarries) {
  const size_t capacity = descriptor_capacity(eager_limit(2));
  for (size_t n : {size_t{0}, size_t{1}, size_t{8}, size_t{9}, size_t{64}, size_t{4096}}) {
    std::vector<uint8_t> chunk(n);
    for (size_t i = 0; i < n; ++i)
      chunk[i] = static_cast<uint8_t>(i * 7 + 3);
    const CallDescriptor d = small_call(chunk);
    ASSERT_TRUE(Mailbox::fits_record(d, capacity)) << n;
    std::vector<uint8_t> slot(Mailbox::slot_bytes(capacity), 0xAB);
    Mailbox::flag(slot.data()).store(17);
    // Parity 0's `mapped` word, at 16 in the header (Mailbox::mapped takes the region).
    auto& mapped = *reinterpret_cast<uint64_t*>(slot.data() + 16);
    mapped = 1;
    Mailbox::write_record(slot.data(), d);
    EXPECT_EQ(Mailbox::flag(slot.data()).load(), 17u) << "the flag is the caller's";
    EXPECT_EQ(mapped, 1u) << "the mapped word is kept";
    EXPECT_EQ(Mailbox::length(slot.data()), Mailbox::kRecordBit | n);
    CallDescriptor got;
    ASSERT_TRUE(Mailbox::read_record(slot.data(), capacity, got));
    EXPECT_EQ(got.collective, d.collective);
    EXPECT_EQ(got.in_dtype, d.in_dtype);
    EXPECT_EQ(got.out_dtype, d.out_dtype);
    EXPECT_EQ(got.reduce_op, d.reduce_op);
    EXPECT_EQ(got.root, d.root);
    EXPECT_EQ(got.in_numel, d.in_numel);
    EXPECT_EQ(got.out_numel, d.out_numel);
    EXPECT_EQ(got.total_numel, d.total_numel);
    ASSERT_EQ(got.inline_data.size(), n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(got.inline_data[i], chunk[i]) << "byte " << i << " of " << n;
    // Up to 8 bytes the chunk rides in the flag's own line.
    EXPECT_EQ(got.inline_data.data() < slot.data() + Mailbox::kLine, n <= 8) << n;
  }
}

TEST(MailboxRecord, OnlyDescriptorsTheGroupCanRebuildTravelAsRecords) {
  const size_t capacity = 4096;
  const std::vector<uint8_t> chunk(16, 1), key(8, 2), big(capacity + 1, 3);
  const uint8_t splits[16] = {};
  auto refused = [&](auto change) {
    CallDescriptor d = small_call(chunk);
    change(d);
    return !Mailbox::fits_record(d, capacity);
  };
  EXPECT_TRUE(refused([](CallDescriptor& d) { d.ok = false; }));
  EXPECT_TRUE(refused([](CallDescriptor& d) { d.error = "bad"; }));
  EXPECT_TRUE(
      refused([](CallDescriptor& d) { d.refused = CallDescriptor::Refusal::TransportError; }));
  EXPECT_TRUE(refused([](CallDescriptor& d) { d.group_broken = true; }));
  EXPECT_TRUE(refused([&](CallDescriptor& d) { d.key = key; }));
  EXPECT_TRUE(refused([](CallDescriptor& d) { d.out_bytes = 64; }));
  EXPECT_TRUE(refused([](CallDescriptor& d) { d.out_addr = 64; }));
  EXPECT_TRUE(refused([](CallDescriptor& d) { d.window = 1; }));
  EXPECT_TRUE(refused([&](CallDescriptor& d) { d.splits = splits; }));
  EXPECT_TRUE(refused([&](CallDescriptor& d) { d.slot_key = key; }));
  EXPECT_TRUE(refused([](CallDescriptor& d) { d.slots_mapped = true; }));
  EXPECT_TRUE(refused([&](CallDescriptor& d) { d.inline_data = big; }));
  EXPECT_FALSE(refused([](CallDescriptor&) {}));
}

// A field's value changed from its default: the low bit flipped (a bool toggles, an enum moves
// to its neighbour).
template <typename T>
T changed(T value) {
  return static_cast<T>(static_cast<uint64_t>(value) ^ 1);
}

bool in_record(std::string_view field) {
#define RDMACOLL_RECORD(member) \
  if (field == #member) return true;
  RDMACOLL_DESCRIPTOR_RECORD(RDMACOLL_RECORD)
#undef RDMACOLL_RECORD
  return false;
}

// Table-driven (engine/core/descriptor_fields.hpp), so a field added later is covered too: a Data
// field the record leaves out keeps the descriptor from travelling as one, and every field the
// record carries comes back.
TEST(MailboxRecord, EveryFieldTheRecordLeavesOutKeepsTheDescriptorOutOfIt) {
  const size_t capacity = 4096;
  const std::vector<uint8_t> chunk(16, 1);
  std::vector<uint8_t> slot(Mailbox::slot_bytes(capacity));
  int data_fields = 0, carried = 0;
#define RDMACOLL_FIELD(member, wire, kind)                                                   \
  if (FieldKind::kind == FieldKind::Data) {                                                  \
    ++data_fields;                                                                           \
    CallDescriptor d = small_call(chunk);                                                    \
    d.member = changed(d.member);                                                            \
    if (in_record(#member)) {                                                                \
      ++carried;                                                                             \
      EXPECT_TRUE(Mailbox::fits_record(d, capacity)) << #member;                             \
      Mailbox::write_record(slot.data(), d);                                                 \
      CallDescriptor got;                                                                    \
      ASSERT_TRUE(Mailbox::read_record(slot.data(), capacity, got));                         \
      EXPECT_EQ(got.member, d.member) << #member;                                            \
    } else {                                                                                 \
      EXPECT_FALSE(Mailbox::fits_record(d, capacity)) << #member << " is not in the record"; \
    }                                                                                        \
  }
#define RDMACOLL_LENGTH(member)
  RDMACOLL_DESCRIPTOR_HEADER(RDMACOLL_FIELD, RDMACOLL_LENGTH)
#undef RDMACOLL_FIELD
#undef RDMACOLL_LENGTH
  EXPECT_EQ(carried, 8);
  EXPECT_GT(data_fields, carried);
}

TEST(MailboxRecord, AChunkLongerThanTheSlotIsRefusedByTheReader) {
  const size_t capacity = 4096;
  std::vector<uint8_t> slot(Mailbox::slot_bytes(capacity), 0);
  Mailbox::length(slot.data()) = Mailbox::kRecordBit | (capacity + 1);
  CallDescriptor got;
  EXPECT_FALSE(Mailbox::read_record(slot.data(), capacity, got));
}

}  // namespace
}  // namespace rdmacoll::engine
