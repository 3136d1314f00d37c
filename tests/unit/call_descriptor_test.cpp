#include <gtest/gtest.h>

#include "engine/call_descriptor.hpp"
#include "rdmacoll/errors.hpp"

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
  d.key = {1, 2, 3};
  d.error = "bad shape";
  const auto bytes = d.serialize();
  CallDescriptor e = CallDescriptor::parse(bytes.data(), bytes.size());
  EXPECT_EQ(e.seq, 77u);
  EXPECT_EQ(e.group, 3u);
  EXPECT_EQ(e.rank, 2);
  EXPECT_FALSE(e.ok);
  EXPECT_EQ(e.out_numel, 40u);
  EXPECT_EQ(e.key, d.key);
  EXPECT_EQ(e.error, "bad shape");
}

TEST(CallDescriptor, RejectsMalformed) {
  CallDescriptor d;
  auto bytes = d.serialize();
  EXPECT_THROW(CallDescriptor::parse(bytes.data(), bytes.size() - 1), TransportError);
  bytes[0] ^= 0xff;
  EXPECT_THROW(CallDescriptor::parse(bytes.data(), bytes.size()), TransportError);
  EXPECT_THROW(CallDescriptor::parse(bytes.data(), 3), TransportError);
}

TEST(CallDescriptor, TagsAreDistinctPerKindGroupSeqIndex) {
  EXPECT_NE(make_tag(TagKind::Data, 0, 1, 0), make_tag(TagKind::Descriptor, 0, 1, 0));
  EXPECT_NE(make_tag(TagKind::Data, 1, 1, 0), make_tag(TagKind::Data, 0, 1, 0));
  EXPECT_NE(make_tag(TagKind::Data, 0, 2, 0), make_tag(TagKind::Data, 0, 1, 0));
  EXPECT_NE(make_tag(TagKind::Data, 0, 1, 1), make_tag(TagKind::Data, 0, 1, 0));
}

}  // namespace
}  // namespace rdmacoll::engine
