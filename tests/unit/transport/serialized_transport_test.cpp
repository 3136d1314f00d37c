// The serialized transport (src/transport/serialized_transport.cpp): several threads share one
// transport, one blocking in it while the others wait for its news. A thread that waits must
// first look again when another thread's progress came after its own last look: that progress
// may have completed its request and consumed the event that would have woken it.

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>

#include "transport/transport.hpp"

namespace rdmacoll::transport {
namespace {

// An inner transport whose progress() says what the test tells it, and which counts how often
// a thread went on to block in it (prepare_wait). Nothing else is called.
class Scripted final : public Transport {
 public:
  bool next_progress = false;
  int prepare_waits = 0;

  std::string name() const override { return "scripted"; }
  std::string describe() const override { return "scripted"; }
  Bytes address(int, int) override { return {}; }
  void connect(int, const std::vector<Bytes>&) override {}
  std::shared_ptr<MemoryRegion> register_memory(void*, size_t) override { return nullptr; }
  std::unique_ptr<RemoteRegion> unpack_remote(int, uint64_t, size_t,
                                              std::span<const uint8_t>) override {
    return nullptr;
  }
  RequestPtr send(int, uint64_t, const void*, size_t) override { return nullptr; }
  RequestPtr recv(int, uint64_t, void*, size_t) override { return nullptr; }
  RequestPtr write(const MemoryRegion&, size_t, const RemoteRegion&, size_t, size_t,
                   uint64_t) override {
    return nullptr;
  }
  RequestPtr expect(int, MemoryRegion&, size_t, size_t, uint64_t) override { return nullptr; }
  void cancel(const RequestPtr&) override {}
  bool progress() override { return next_progress; }
  // false: "do not block, progress first", so a wait that gets this far returns at once.
  bool prepare_wait() override {
    ++prepare_waits;
    return false;
  }
  void wait_fds(std::vector<pollfd>&) override {}
  std::optional<std::string> peer_failure(int) override { return std::nullopt; }
};

TEST(SerializedTransport, AWaitAfterAnotherThreadsProgressLooksAgainFirst) {
  auto inner = std::make_unique<Scripted>();
  Scripted& s = *inner;
  auto t = make_serialized(std::move(inner));
  EXPECT_FALSE(t->progress());  // this thread looks: nothing yet
  std::thread([&] {
    s.next_progress = true;  // another thread's progress completes something
    EXPECT_TRUE(t->progress());
    s.next_progress = false;
  }).join();
  t->wait_for_event(Clock::now() + std::chrono::seconds(10));
  EXPECT_EQ(s.prepare_waits, 0) << "it blocked without looking at what the other thread did";
  // Nothing new since: now it goes on to block in the transport.
  t->wait_for_event(Clock::now() + std::chrono::seconds(10));
  EXPECT_EQ(s.prepare_waits, 1);
  // Its own progress is no news to it.
  s.next_progress = true;
  EXPECT_TRUE(t->progress());
  t->wait_for_event(Clock::now() + std::chrono::seconds(10));
  EXPECT_EQ(s.prepare_waits, 2);
}

}  // namespace
}  // namespace rdmacoll::transport
