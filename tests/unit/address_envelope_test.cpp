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

}  // namespace
}  // namespace rdmacoll::bootstrap
