// Keys a store client holds (StoreClient::hold): tied to its connection, deleted by the server
// when that closes. How a rank's death on another host reaches the others at destroy.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "bootstrap/store.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::bootstrap {
namespace {

using namespace std::chrono_literals;

Clock::time_point soon() {
  return Clock::now() + 5s;
}

// A held key is there while its client's connection lives, and the server deletes it when the
// connection closes (how a rank's death on another host reaches the others at destroy); keys
// it set plainly stay. The close reaches the server on its own time: polled, with a deadline.
TEST(Store, AHeldKeyLastsAsLongAsItsClientsConnection) {
  StoreServer server("127.0.0.1", 0);
  StoreClient watcher("127.0.0.1", server.port(), soon());
  {
    StoreClient holder("127.0.0.1", server.port(), soon());
    holder.hold("alive/1", Bytes{1});
    holder.set("plain", std::string("v"));
    EXPECT_EQ(watcher.get("alive/1", 1s), Bytes{1});
  }
  const auto deadline = Clock::now() + 10s;
  while (watcher.check("alive/1") && Clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_FALSE(watcher.check("alive/1"));
  EXPECT_EQ(watcher.get_string("plain", 1s), "v");
}

// A client may tie at most 16 keys to its connection: the 17th ends it, not the server.
TEST(StoreServer, HeldKeysPerConnectionAreCapped) {
  StoreServer server("127.0.0.1", 0);
  {
    StoreClient c("127.0.0.1", server.port(), soon());
    c.set_op_timeout(2s);
    for (int i = 0; i < 16; ++i)
      c.hold("held/" + std::to_string(i), Bytes{1});
    c.hold("held/0", Bytes{2});  // held again: not one more
    EXPECT_THROW(c.hold("held/16", Bytes{1}), Error);
  }
  StoreClient d("127.0.0.1", server.port(), soon());
  d.set("k", std::string("v"));
  EXPECT_EQ(d.get_string("k", 1s), "v");
  EXPECT_EQ(server.rejected_connections(), 1u);
}

}  // namespace
}  // namespace rdmacoll::bootstrap
