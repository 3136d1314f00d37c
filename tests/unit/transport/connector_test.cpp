// The verbs connector (store I/O of connection setup on its own thread) over a store in this
// process: what one side posts the other takes, in order; take() never waits on the store, even
// while the store holds every request up; a failed store raises on take; the wake fd turns
// readable when something comes.
#include "transport/verbs/connector.hpp"

#include <gtest/gtest.h>
#include <poll.h>

#include <thread>

#include "rdmacoll/errors.hpp"
#include "support/memory_store.hpp"

namespace rdmacoll::transport::verbs_impl {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;

using testing::MemoryStore;

// Waits (in poll, not a sleep) until the connector's fd says something came, up to 10 s.
bool woken(Connector& c) {
  pollfd fd{c.wake_fd(), POLLIN, 0};
  const bool readable = ::poll(&fd, 1, 10'000) == 1;
  c.clear_wake();
  return readable;
}

TEST(Connector, WhatOneSidePostsTheOtherTakesOnceAndTheFdWakesIt) {
  auto store = std::make_shared<MemoryStore>();
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
  auto store = std::make_shared<MemoryStore>();
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

TEST(Connector, AStoreThatKeepsFailingRaisesOnTakeNamingIt) {
  auto store = std::make_shared<MemoryStore>();
  Connector c(store, 300ms);
  c.watch("qp/1/0");
  store->go_away();
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

// A store that fails for a moment (overloaded, a request timed out) is asked again: what is
// posted meanwhile still reaches it and what is watched still comes, and nothing raises. A
// failure that stuck would fail every connection of the process not yet made.
TEST(Connector, AStoreThatFailsForAMomentIsAskedAgainAndNothingRaises) {
  auto store = std::make_shared<MemoryStore>();
  Connector c(store, 60s);
  store->go_away();
  c.watch("qp/1/0");
  c.post("qp/0/1", Bytes{5});
  // Until the connector has met the failure more than once (a poll, not a sleep).
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (c.store_errors() < 3) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the store was not asked again";
    EXPECT_EQ(c.take("qp/1/0"), std::nullopt);
    std::this_thread::yield();
  }
  store->come_back();
  store->set("qp/1/0", Bytes{9});
  std::optional<Bytes> got;
  while (!got) {
    ASSERT_TRUE(woken(c)) << "no wake-up within 10 s";
    got = c.take("qp/1/0");
  }
  EXPECT_EQ(*got, Bytes{9});
  while (!store->has("qp/0/1")) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline + 10s)
        << "the post made while the store failed never reached it";
    std::this_thread::yield();
  }
}

TEST(Connector, AnUnwatchedKeyIsNeitherLookedForNorKept) {
  auto store = std::make_shared<MemoryStore>();
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
