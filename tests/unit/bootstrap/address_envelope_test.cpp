// The envelope around transport addresses read from the store (bootstrap/address_envelope):
// what a rank publishes comes back intact; anything else is refused with a reason that names
// the rank, before a transport parses it.
#include <gtest/gtest.h>

#include "bootstrap/address_envelope.hpp"

namespace rdmacoll::bootstrap {
namespace {

const std::vector<uint8_t> kAddress(40, 0x5a);

TEST(AddressEnvelope, WhatARankPublishesComesBackIntact) {
  std::string why;
  const auto out = unwrap_address(wrap_address(3, "ucx", kAddress), 3, "ucx", why);
  ASSERT_TRUE(out.has_value()) << why;
  EXPECT_EQ(*out, kAddress);
}

TEST(AddressEnvelope, RefusesWhatNoRankOfThisVersionPublishes) {
  std::string why;
  EXPECT_FALSE(unwrap_address({1, 2, 3}, 1, "ucx", why));
  EXPECT_NE(why.find("published for rank 1 is malformed (3 bytes)"), std::string::npos) << why;
  std::vector<uint8_t> wrong_version = wrap_address(1, "ucx", kAddress);
  wrong_version[4] = 9;
  EXPECT_FALSE(unwrap_address(wrong_version, 1, "ucx", why));
  std::vector<uint8_t> cut = wrap_address(1, "ucx", kAddress);
  cut.resize(16 + 3 + 4);  // header and name, too short for any transport's address
  EXPECT_FALSE(unwrap_address(cut, 1, "ucx", why));
  EXPECT_NE(why.find("malformed"), std::string::npos) << why;
}

TEST(AddressEnvelope, RefusesAnotherRanksAddressAndAnotherTransport) {
  std::string why;
  EXPECT_FALSE(unwrap_address(wrap_address(2, "ucx", kAddress), 1, "ucx", why));
  EXPECT_EQ(why, "the transport address under rank 1's key names rank 2");
  EXPECT_FALSE(unwrap_address(wrap_address(1, "verbs", kAddress), 1, "ucx", why));
  EXPECT_NE(why.find("rank 1 uses the verbs transport, this rank ucx"), std::string::npos) << why;
}

// With the job's token the envelope is signed: it reads back under the same token, and an
// envelope a stranger made (no token, another token, or one byte changed) is refused with a
// reason, as is a signed one read by a rank without a token.
TEST(AddressEnvelope, WithATokenOnlyWhatTheJobSignedIsAccepted) {
  std::string why;
  const auto signed_one = wrap_address(2, "ucx", kAddress, "secret");
  const auto out = unwrap_address(signed_one, 2, "ucx", why, "secret");
  ASSERT_TRUE(out.has_value()) << why;
  EXPECT_EQ(*out, kAddress);

  EXPECT_FALSE(unwrap_address(wrap_address(2, "ucx", kAddress), 2, "ucx", why, "secret"));
  EXPECT_NE(why.find("is not signed with this job's RDMACOLL_AUTH_TOKEN"), std::string::npos)
      << why;
  EXPECT_FALSE(unwrap_address(wrap_address(2, "ucx", kAddress, "guess"), 2, "ucx", why, "secret"));
  EXPECT_NE(why.find("does not carry this job's signature"), std::string::npos) << why;
  for (size_t at : {size_t{8}, size_t{20}, signed_one.size() - 40, signed_one.size() - 1}) {
    auto tampered = signed_one;
    tampered[at] ^= 1;
    EXPECT_FALSE(unwrap_address(tampered, 2, "ucx", why, "secret")) << "byte " << at;
  }
  EXPECT_FALSE(unwrap_address(signed_one, 2, "ucx", why));
  EXPECT_NE(why.find("this rank has no RDMACOLL_AUTH_TOKEN"), std::string::npos) << why;
  auto cut = signed_one;
  cut.resize(16 + 3 + 8 + 31);
  EXPECT_FALSE(unwrap_address(cut, 2, "ucx", why, "secret"));
}

}  // namespace
}  // namespace rdmacoll::bootstrap
