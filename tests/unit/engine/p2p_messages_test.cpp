#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "engine/core/call_descriptor.hpp"
#include "engine/p2p_messages.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::engine::p2p {
namespace {

TEST(P2PMessages, TagsAreDistinctFromEveryOtherKindAndPerGroupTagDirectionSender) {
  std::set<uint64_t> seen;
  for (uint32_t group : {0u, 1u, 0x3fffu})
    for (uint32_t user : {0u, 1u, static_cast<uint32_t>(kMaxUserTag)})
      for (Direction d : {Direction::Data, Direction::ClearToSend})
        for (uint32_t from : {0u, 5u, static_cast<uint32_t>(kMaxRank)})
          EXPECT_TRUE(seen.insert(tag(group, user, d, from)).second);
  for (uint64_t t : seen) {
    // Pieces (kind 3) have index < 2^23; descriptors, errors and write signals other kinds.
    EXPECT_NE(t, make_tag(TagKind::Piece, 0, 0, 0));
    EXPECT_EQ(t >> 62, 3u);
    EXPECT_EQ((t >> 23) & 1, 1u);
    EXPECT_EQ(make_tag(TagKind::Piece, 3, 4, (1u << 23) - 1) >> 23 & 1, 0u);
  }
}

// A refusal's tag is per group and receiver, and no error report (kind 2, sender rank < 2^22)
// or point-to-point message (kind 3) has it.
TEST(P2PMessages, RefusalTagsAreDistinctPerGroupAndReceiverAndFromErrorReports) {
  std::set<uint64_t> seen;
  for (uint32_t group : {0u, 1u, 0x3fffu})
    for (uint32_t from : {0u, 5u, static_cast<uint32_t>(kMaxRank)})
      EXPECT_TRUE(seen.insert(refusal_tag(group, from)).second);
  for (uint64_t t : seen) {
    EXPECT_EQ(t >> 62, 2u);
    EXPECT_EQ((t >> 23) & 1, 1u);
    for (uint32_t from : {0u, 5u, static_cast<uint32_t>(kMaxRank)}) {
      EXPECT_NE(t, make_tag(TagKind::Error, 0, 0, from));
      EXPECT_NE(t, make_tag(TagKind::Error, 0x3fff, 0xffffff, from));
    }
  }
}

TEST(P2PMessages, DataHeadersRoundTripAndLengthsAreChecked) {
  std::vector<uint8_t> m(kDataHeaderBytes + 3);
  encode(DataHeader{DataKind::Inline, 3, 42}, m.data());
  auto h = parse_data(m);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->kind, DataKind::Inline);
  EXPECT_EQ(h->bytes, 3u);
  EXPECT_EQ(h->seq, 42u);
  m.pop_back();  // an inline message must carry exactly its bytes
  EXPECT_FALSE(parse_data(m));
  std::vector<uint8_t> rts(kDataHeaderBytes);
  encode(DataHeader{DataKind::RequestToSend, 1 << 20, 7}, rts.data());
  EXPECT_TRUE(parse_data(rts));
  rts.push_back(0);  // a request to send carries nothing more
  EXPECT_FALSE(parse_data(rts));
  EXPECT_FALSE(parse_data(std::vector<uint8_t>(5)));
  std::vector<uint8_t> junk(kDataHeaderBytes, 0xab);
  EXPECT_FALSE(parse_data(junk));
}

TEST(P2PMessages, ClearToSendRoundTripsAndRejectsBadLengths) {
  const std::vector<uint8_t> key = {1, 2, 3, 4};
  ClearToSend c;
  c.bytes = 1 << 20;
  c.seq = 9;
  c.addr = 0x1000;
  c.token = 77;
  c.key = key;
  const auto m = encode(c);
  auto d = parse_clear_to_send(m);
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->ok);
  EXPECT_EQ(d->bytes, c.bytes);
  EXPECT_EQ(d->seq, 9u);
  EXPECT_EQ(d->addr, 0x1000u);
  EXPECT_EQ(d->token, 77u);
  EXPECT_EQ(std::vector<uint8_t>(d->key.begin(), d->key.end()), key);
  ClearToSend refusal;
  refusal.ok = false;
  refusal.error = "sizes must agree";
  const auto refused = encode(refusal);  // the parse views it
  auto r = parse_clear_to_send(refused);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error, "sizes must agree");
  auto cut = m;
  cut.pop_back();
  EXPECT_FALSE(parse_clear_to_send(cut));
  for (size_t n = 0; n < m.size(); ++n)
    EXPECT_FALSE(parse_clear_to_send({m.data(), n}));
}

}  // namespace
}  // namespace rdmacoll::engine::p2p
