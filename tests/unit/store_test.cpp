// The rendezvous store against real TCP sockets on loopback (server thread + clients).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "bootstrap/store.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::bootstrap {
namespace {

using namespace std::chrono_literals;

Clock::time_point soon() {
  return Clock::now() + 5s;
}

TEST(Store, SetGetAddCheck) {
  StoreServer server("127.0.0.1", 0);
  StoreClient a("127.0.0.1", server.port(), soon());
  StoreClient b("127.0.0.1", server.port(), soon());
  a.set("k", std::string("v1"));
  EXPECT_EQ(b.get_string("k", 1s), "v1");
  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(b.add("n", 3), 5);
  EXPECT_TRUE(b.check("k"));
  EXPECT_FALSE(b.check("missing"));
  a.erase("k");
  EXPECT_FALSE(b.check("k"));
}

// destroy_process_group() closes the old store to newcomers, so that a rank re-initializing on
// the same port waits for the next store instead of talking to this one.
TEST(Store, StopAcceptingRefusesNewcomersButServesExistingClients) {
  StoreServer server("127.0.0.1", 0);
  StoreClient a("127.0.0.1", server.port(), soon());
  a.set("k", std::string("v"));
  server.stop_accepting();
  EXPECT_EQ(a.get_string("k", 1s), "v");
  EXPECT_EQ(a.add("n", 1), 1);
  EXPECT_THROW(StoreClient("127.0.0.1", server.port(), Clock::now() + 300ms), Error);
  // The port is free again: a new store can bind it while the old one still serves `a`.
  StoreServer next("127.0.0.1", server.port());
  StoreClient b("127.0.0.1", next.port(), soon());
  EXPECT_FALSE(b.check("k"));
  EXPECT_EQ(a.add("n", 1), 2);
}

TEST(Store, GetWaitsForALaterSet) {
  StoreServer server("127.0.0.1", 0);
  StoreClient a("127.0.0.1", server.port(), soon());
  std::thread setter([&] {
    StoreClient b("127.0.0.1", server.port(), soon());
    b.set("late", std::string("here"));
  });
  EXPECT_EQ(a.get_string("late", 10s), "here");
  setter.join();
}

TEST(Store, MissingKeyTimesOutAndConnectionStaysUsable) {
  StoreServer server("127.0.0.1", 0);
  StoreClient a("127.0.0.1", server.port(), soon());
  const auto t0 = Clock::now();
  try {
    a.get("never", 200ms);
    FAIL();
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos);
  }
  EXPECT_LT(Clock::now() - t0, 5s);
  a.set("x", std::string("1"));
  EXPECT_EQ(a.get_string("x", 1s), "1");
}

TEST(Store, PortInUseIsAClearError) {
  StoreServer first("127.0.0.1", 0);
  try {
    StoreServer second("0.0.0.0", first.port());
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("already in use"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(first.port())), std::string::npos);
  }
}

TEST(Store, NoServerGivesTimeoutNotHang) {
  uint16_t port;
  {
    StoreServer s("127.0.0.1", 0);
    port = s.port();
  }
  const auto t0 = Clock::now();
  EXPECT_THROW(StoreClient("127.0.0.1", port, Clock::now() + 300ms), Timeout);
  EXPECT_LT(Clock::now() - t0, 5s);
}

TEST(Store, GarbageIsRejectedAndServerKeepsServing) {
  StoreServer server("127.0.0.1", 0);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(server.port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(::send(fd, garbage, sizeof garbage, 0), 0);
  // The server drops us: recv sees EOF (or reset) rather than hanging.
  char buf[16];
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  EXPECT_LE(::recv(fd, buf, sizeof buf, 0), 0);
  ::close(fd);
  EXPECT_EQ(server.rejected_connections(), 1u);
  StoreClient ok("127.0.0.1", server.port(), soon());
  ok.set("still", std::string("fine"));
  EXPECT_EQ(ok.get_string("still", 1s), "fine");
}

}  // namespace
}  // namespace rdmacoll::bootstrap
