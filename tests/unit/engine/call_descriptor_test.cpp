#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <vector>

#include "engine/core/call_descriptor.hpp"
#include "engine/core/descriptor_fields.hpp"
#include "rdmacoll/errors.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::engine {
namespace {

TEST(CallDescriptor, RoundTrip) {
  CallDescriptor d;
  d.seq = 77;
  d.group = 3;
  d.rank = 2;
  d.ok = false;
  d.in_dtype = 5;
  d.out_dtype = 8;
  d.in_numel = 10;
  d.out_numel = 40;
  d.out_addr = 0x1234;
  d.out_bytes = 160;
  const std::vector<uint8_t> key = {1, 2, 3};
  const std::vector<uint8_t> chunk = {9, 8, 7, 6};
  d.key = key;
  d.error = "bad shape";
  d.inline_data = chunk;
  const std::vector<uint8_t> splits = {1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0};
  d.splits = splits;
  d.slot_addr = 0xabc0;
  d.slot_key = key;
  d.slot_capacity = 4224;
  d.slots_mapped = true;
  d.refused = CallDescriptor::Refusal::TransportError;
  d.group_broken = true;
  const auto bytes = d.serialize();
  CallDescriptor e = CallDescriptor::parse(bytes.data(), bytes.size());
  EXPECT_EQ(e.seq, 77u);
  EXPECT_EQ(e.group, 3u);
  EXPECT_EQ(e.rank, 2);
  EXPECT_FALSE(e.ok);
  EXPECT_EQ(e.out_numel, 40u);
  EXPECT_EQ(std::vector<uint8_t>(e.key.begin(), e.key.end()), key);
  EXPECT_EQ(e.error, "bad shape");
  EXPECT_EQ(std::vector<uint8_t>(e.inline_data.begin(), e.inline_data.end()), chunk);
  EXPECT_EQ(std::vector<uint8_t>(e.splits.begin(), e.splits.end()), splits);
  EXPECT_EQ(e.slot_addr, 0xabc0u);
  EXPECT_EQ(std::vector<uint8_t>(e.slot_key.begin(), e.slot_key.end()), key);
  EXPECT_EQ(e.slot_capacity, 4224u);
  EXPECT_TRUE(e.slots_mapped);
  EXPECT_EQ(e.refused, CallDescriptor::Refusal::TransportError);
  EXPECT_TRUE(e.group_broken);
}

// A value other than `value`: a bool toggled, an enum moved to its neighbour, a number from
// `next`, so no two fields hold the same.
template <typename T>
T another(T value, uint64_t& next) {
  if constexpr (std::is_same_v<T, bool>) {
    return !value;
  } else if constexpr (std::is_enum_v<T>) {
    return static_cast<T>(static_cast<uint64_t>(value) ^ 1);
  } else {
    return static_cast<T>(next++);
  }
}

// Every field of the table (engine/core/descriptor_fields.hpp) survives the wire, each changed from
// its default, so a field added later is covered too.
TEST(CallDescriptor, EveryFieldOfTheTableRoundTrips) {
  CallDescriptor d;
  uint64_t next = 2;
#define RDMACOLL_FIELD(member, wire, kind) d.member = another(d.member, next);
#define RDMACOLL_LENGTH(member)
  RDMACOLL_DESCRIPTOR_HEADER(RDMACOLL_FIELD, RDMACOLL_LENGTH)
  const auto bytes = d.serialize();
  const CallDescriptor e = CallDescriptor::parse(bytes.data(), bytes.size());
  const CallDescriptor defaults;
#undef RDMACOLL_FIELD
#define RDMACOLL_FIELD(member, wire, kind)  \
  EXPECT_EQ(e.member, d.member) << #member; \
  EXPECT_NE(e.member, defaults.member) << #member;
  RDMACOLL_DESCRIPTOR_HEADER(RDMACOLL_FIELD, RDMACOLL_LENGTH)
#undef RDMACOLL_FIELD
#undef RDMACOLL_LENGTH
}

TEST(CallDescriptor, SerializeIntoReusesTheBufferAndEnforcesTheLimit) {
  CallDescriptor d;
  const std::vector<uint8_t> chunk(100, 1);
  d.inline_data = chunk;
  std::vector<uint8_t> out;
  d.serialize_into(out, 4096);
  const size_t with_chunk = out.size();
  const uint8_t* storage = out.data();
  d.inline_data = {};
  d.serialize_into(out, 4096);
  EXPECT_EQ(out.size(), with_chunk - 100);
  EXPECT_EQ(out.data(), storage);  // shrank in place: no new allocation
  d.inline_data = chunk;
  EXPECT_THROW(d.serialize_into(out, with_chunk - 1), TransportError);
}

TEST(CallDescriptor, LongErrorsAreCutToTheLimit) {
  CallDescriptor d;
  const std::string long_error(5000, 'x');
  d.ok = false;
  d.error = long_error;
  const auto bytes = d.serialize();
  EXPECT_EQ(CallDescriptor::parse(bytes.data(), bytes.size()).error.size(), kMaxErrorBytes);
}

TEST(CallDescriptor, EagerLimitShrinksWithTheGroupButStaysUseful) {
  EXPECT_EQ(eager_limit(2), 64u << 10);
  EXPECT_EQ(eager_limit(16), 64u << 10);
  EXPECT_EQ(eager_limit(64), 16u << 10);
  EXPECT_EQ(eager_limit(4096), 2048u);
  EXPECT_EQ(eager_limit(4, 2), 2048u);        // spans hosts
  EXPECT_EQ(eager_limit(2, 1, 4096), 2048u);  // verbs: 4 KiB control messages
  EXPECT_LE(descriptor_capacity(eager_limit(2, 1, 4096)), 4096u);
}

TEST(CallDescriptor, RejectsMalformed) {
  CallDescriptor d;
  auto bytes = d.serialize();
  EXPECT_THROW(CallDescriptor::parse(bytes.data(), bytes.size() - 1), TransportError);
  bytes[0] ^= 0xff;
  EXPECT_THROW(CallDescriptor::parse(bytes.data(), bytes.size()), TransportError);
  EXPECT_THROW(CallDescriptor::parse(bytes.data(), 3), TransportError);
}

TEST(CallDescriptor, RejectsARefusalOfNoKnownKind) {
  CallDescriptor d;
  d.refused = CallDescriptor::Refusal::InvalidArgument;
  auto bytes = d.serialize();
  EXPECT_NO_THROW(CallDescriptor::parse(bytes.data(), bytes.size()));
  CallDescriptor e;
  e.refused = static_cast<CallDescriptor::Refusal>(3);
  bytes = e.serialize();
  EXPECT_THROW(CallDescriptor::parse(bytes.data(), bytes.size()), TransportError);
}

TEST(CallDescriptor, TagsAreDistinctPerKindGroupSeqIndex) {
  EXPECT_NE(make_tag(TagKind::Error, 0, 1, 0), make_tag(TagKind::Descriptor, 0, 1, 0));
  EXPECT_NE(make_tag(TagKind::Piece, 0, 1, 0), make_tag(TagKind::Descriptor, 0, 1, 0));
  EXPECT_NE(make_tag(TagKind::Piece, 0, 1, 0), make_tag(TagKind::Error, 0, 1, 0));
  EXPECT_NE(make_tag(TagKind::Descriptor, 1, 1, 0), make_tag(TagKind::Descriptor, 0, 1, 0));
  EXPECT_NE(make_tag(TagKind::Descriptor, 0, 2, 0), make_tag(TagKind::Descriptor, 0, 1, 0));
  EXPECT_NE(make_tag(TagKind::Descriptor, 0, 1, 1), make_tag(TagKind::Descriptor, 0, 1, 0));
}

// Data writes carry the receiver's token (transport::write_signal): never a control tag, and
// distinct per token and index.
TEST(CallDescriptor, WriteSignalsNeverLookLikeControlTags) {
  for (uint64_t token : {uint64_t{0}, uint64_t{1}, transport::kTokenMask}) {
    const uint64_t s = transport::write_signal(token, 5);
    EXPECT_EQ(s >> 62, 1u);
    EXPECT_NE(s >> 62, make_tag(TagKind::Descriptor, 3, 4, 5) >> 62);
    EXPECT_NE(s >> 62, make_tag(TagKind::Error, 3, 4, 5) >> 62);
    EXPECT_NE(s >> 62, make_tag(TagKind::Piece, 3, 4, 5) >> 62);
    EXPECT_EQ(transport::signal_token(s), token);
    EXPECT_EQ(transport::signal_index(s), 5u);
  }
  EXPECT_NE(transport::write_signal(1, 0), transport::write_signal(2, 0));
}

TEST(CallDescriptor, TheSignalTokenTravels) {
  CallDescriptor d;
  d.signal_token = 12345;
  const auto bytes = d.serialize();
  EXPECT_EQ(CallDescriptor::parse(bytes.data(), bytes.size()).signal_token, 12345u);
}

}  // namespace
}  // namespace rdmacoll::engine
