// The group work queue on its own (no network): issue order, inline blocking calls, errors.

#include "engine/work_queue.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <vector>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::engine {
namespace {

TEST(GroupQueue, AsyncAndBlockingOperationsRunInIssueOrder) {
  GroupQueue q;
  std::vector<int> order;  // touched only by the operations, which never overlap
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto first = q.submit(
      [&] {
        released.wait();  // holds the queue until the blocking call below is queued behind it
        order.push_back(1);
      },
      "first");
  auto second = q.submit([&] { order.push_back(2); }, "second");
  std::thread blocking([&] { q.run([&] { order.push_back(3); }, "third"); });
  EXPECT_FALSE(first->completed());
  release.set_value();
  blocking.join();
  second->wait(std::nullopt);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  // Idle again: a blocking call runs on this thread.
  std::thread::id ran_on;
  q.run([&] { ran_on = std::this_thread::get_id(); }, "inline");
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(GroupQueue, ErrorsReachWaitAndTimeoutsSaySo) {
  GroupQueue q;
  auto failing = q.submit([] { throw PeerFailure("rank 3 is gone"); }, "all_reduce");
  EXPECT_THROW(failing->wait(std::nullopt), PeerFailure);
  EXPECT_TRUE(failing->completed());
  EXPECT_TRUE(failing->error());
  EXPECT_THROW(q.run([] { throw InvalidArgument("bad"); }, "x"), InvalidArgument);
  std::promise<void> release;
  auto blocked = q.submit([f = release.get_future().share()] { f.wait(); }, "barrier");
  try {
    blocked->wait(std::chrono::milliseconds(10));
    ADD_FAILURE() << "no timeout";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("barrier: not completed within"), std::string::npos);
  }
  release.set_value();
  blocked->wait(std::nullopt);
}

TEST(GroupQueue, DrainFinishesQueuedWork) {
  std::atomic<int> done{0};
  {
    GroupQueue q;
    for (int i = 0; i < 50; ++i)
      q.submit([&] { ++done; }, "op");
  }  // the destructor drains
  EXPECT_EQ(done.load(), 50);
}

}  // namespace
}  // namespace rdmacoll::engine
