// SharedSegment (transport/shared_segment.hpp): a memfd mapped again through pidfd_getfd, as a
// peer maps it; this process plays the peer.

#include "transport/shared_segment.hpp"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>

#include <string>

namespace rdmacoll::transport {
namespace {

TEST(SharedSegment, StoresThroughOneMappingAreSeenThroughTheOther) {
  std::string why;
  auto own = SharedSegment::create(10000, why);
  ASSERT_TRUE(own) << why;
  EXPECT_GE(own->size(), 10000u);
  for (size_t i = 0; i < own->size(); ++i)
    ASSERT_EQ(own->data()[i], 0) << "not zeroed at " << i;
  auto peer = SharedSegment::map_peer(::getpid(), own->fd(), 10000, why);
  ASSERT_TRUE(peer) << why;
  ASSERT_NE(peer->data(), own->data());
  for (size_t i = 0; i < 10000; ++i)
    peer->data()[i] = static_cast<uint8_t>(i * 7);
  for (size_t i = 0; i < 10000; ++i)
    ASSERT_EQ(own->data()[i], static_cast<uint8_t>(i * 7)) << i;
  // The peer's mapping outlives the owner's: the memory stays until the last unmaps.
  own.reset();
  EXPECT_EQ(peer->data()[9999], static_cast<uint8_t>(9999 * 7));
}

// A peer that claims more than its segment holds would make us fault past its end: refused.
TEST(SharedSegment, ASegmentShorterThanClaimedIsRefused) {
  std::string why;
  auto own = SharedSegment::create(4096, why);
  ASSERT_TRUE(own) << why;
  auto peer = SharedSegment::map_peer(::getpid(), own->fd(), 1 << 20, why);
  EXPECT_FALSE(peer);
  EXPECT_NE(why.find("holds"), std::string::npos) << why;
}

// A peer that names a file (or any descriptor but our segment) is refused: the collective's
// stores would write into it.
TEST(SharedSegment, ADescriptorThatIsNotOurSegmentIsRefused) {
  char path[] = "/tmp/rdmacoll-segment-XXXXXX";
  const int file = ::mkstemp(path);
  ASSERT_GE(file, 0);
  ::unlink(path);
  ASSERT_EQ(::ftruncate(file, 1 << 20), 0);
  std::string why;
  EXPECT_FALSE(SharedSegment::map_peer(::getpid(), file, 4096, why));
  EXPECT_NE(why.find("not an rdmacoll symmetric-memory segment"), std::string::npos) << why;
  const int other = static_cast<int>(::syscall(SYS_memfd_create, "someone-else", 0));
  ASSERT_GE(other, 0);
  ASSERT_EQ(::ftruncate(other, 1 << 20), 0);
  EXPECT_FALSE(SharedSegment::map_peer(::getpid(), other, 4096, why));
  ::close(other);
  ::close(file);
}

TEST(SharedSegment, ABadDescriptorOrProcessSaysWhy) {
  std::string why;
  EXPECT_FALSE(SharedSegment::map_peer(::getpid(), 987654, 4096, why));
  EXPECT_NE(why.find("pidfd_getfd"), std::string::npos) << why;
  EXPECT_FALSE(SharedSegment::map_peer(0x7ffffff0, 3, 4096, why));
  EXPECT_NE(why.find("pidfd_open"), std::string::npos) << why;
}

}  // namespace
}  // namespace rdmacoll::transport
