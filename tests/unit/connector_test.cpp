// The verbs connector (store I/O of connection setup on its own thread) over a store in this
// process: what one side posts the other takes, in order; take() never waits on the store, even
// while the store holds every request up; a failed store raises on take; the wake fd turns
// readable when something comes.
#include "transport/verbs/connector.hpp"

#include <gtest/gtest.h>
#include <poll.h>

#include <condition_variable>
#include <map>
#include <mutex>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::transport::verbs_impl {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;

// A store in this process; `hold` makes every request wait until released, `broken` fail.
class SlowStore final : public Store {
 public:
  using Store::set;
  void set(const std::string& key, const Bytes& value) override {
    std::unique_lock lock(mu_);
    enter(lock);
    kv_[key] = value;
  }
  Bytes get(const std::string& key, std::chrono::milliseconds) override {
    std::unique_lock lock(mu_);
    enter(lock);
    const auto it = kv_.find(key);
    if (it == kv_.end()) throw Timeout("no " + key);
    return it->second;
  }
  int64_t add(const std::string&, int64_t) override { return 0; }
  bool check(const std::string& key) override {
    std::unique_lock lock(mu_);
    enter(lock);
    return kv_.count(key) > 0;
  }
  void hold(bool on) {
    std::lock_guard lock(mu_);
    held_ = on;
    cv_.notify_all();
  }
  void break_it() {
    std::lock_guard lock(mu_);
    broken_ = true;
    cv_.notify_all();
  }
  bool has(const std::string& key) {
    std::lock_guard lock(mu_);
    return kv_.count(key) > 0;
  }

 private:
  void enter(std::unique_lock<std::mutex>& lock) {
    cv_.wait(lock, [&] { return !held_ || broken_; });
    if (broken_) throw PeerFailure("the store went away");
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
  bool broken_ = false;
  std::map<std::string, Bytes> kv_;
};

// Waits (in poll, not a sleep) until the connector's fd says something came, up to 10 s.
bool woken(Connector& c) {
  pollfd fd{c.wake_fd(), POLLIN, 0};
  const bool readable = ::poll(&fd, 1, 10'000) == 1;
  c.clear_wake();
  return readable;
}

TEST(Connector, WhatOneSidePostsTheOtherTakesOnceAndTheFdWakesIt) {
  auto store = std::make_shared<SlowStore>();
  Connector a(store), b(store);
  b.watch("qp/0/1");
  EXPECT_EQ(b.take("qp/0/1"), std::nullopt);
  const uint64_t before = b.generation();
  a.post("qp/0/1", Bytes{1, 2, 3});
  std::optional<Bytes> got;
  while (!got) {
    ASSERT_TRUE(woken(b)) << "no wake-up within 10 s";
    got = b.take("qp/0/1");
  }
  EXPECT_EQ(*got, (Bytes{1, 2, 3}));
  EXPECT_GT(b.generation(), before);
  EXPECT_EQ(b.take("qp/0/1"), std::nullopt) << "taken twice";
}

TEST(Connector, TakeNeverWaitsOnAStoreThatHoldsEveryRequest) {
  auto store = std::make_shared<SlowStore>();
  Connector c(store);
  store->hold(true);
  c.post("up/0/1", Bytes{1});
  c.watch("up/1/0");
  // The connector's thread is stuck in the store; the transport's side still answers.
  for (int i = 0; i < 1000; ++i)
    EXPECT_EQ(c.take("up/1/0"), std::nullopt);
  store->hold(false);
  store->set("up/1/0", Bytes{1});
  std::optional<Bytes> got;
  while (!got) {
    ASSERT_TRUE(woken(c));
    got = c.take("up/1/0");
  }
  EXPECT_TRUE(store->has("up/0/1"));
}

TEST(Connector, AStoreThatFailsRaisesOnTakeNamingIt) {
  auto store = std::make_shared<SlowStore>();
  Connector c(store);
  c.watch("qp/1/0");
  store->break_it();
  for (;;) {
    ASSERT_TRUE(woken(c));
    try {
      if (c.take("qp/1/0")) FAIL() << "a value from a broken store";
    } catch (const TransportError& e) {
      EXPECT_NE(std::string(e.what()).find("the store went away"), std::string::npos) << e.what();
      break;
    }
  }
}

TEST(Connector, AnUnwatchedKeyIsNeitherLookedForNorKept) {
  auto store = std::make_shared<SlowStore>();
  Connector c(store);
  c.watch("qp/1/0");
  c.unwatch("qp/1/0");
  store->set("qp/1/0", Bytes{7});
  c.watch("other");
  store->set("other", Bytes{8});
  std::optional<Bytes> got;
  while (!got) {
    ASSERT_TRUE(woken(c));
    got = c.take("other");
  }
  EXPECT_EQ(c.take("qp/1/0"), std::nullopt);
}

}  // namespace
}  // namespace rdmacoll::transport::verbs_impl
