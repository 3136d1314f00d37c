// The verbs send queue (src/transport/verbs/send_queue.hpp) without a device: its room rules,
// its order and its failures on lanes with no QP (nothing is flushed).

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "transport/verbs/send_queue.hpp"

namespace rdmacoll::transport::verbs_impl {
namespace {

struct OpenLanes : SendQueue::Owner {
  bool open = true;
  bool lane_open(int, int) const override { return open; }
  void post_failed(int, int) override {}
  void landed(int, const VerbsRequest&) override {}
};

struct Queue {
  explicit Queue(int peers) : peer_table(static_cast<size_t>(peers)) {
    for (Peer& p : peer_table)
      p.lanes.resize(2);
  }
  // A request of one work request, and its builder; `order` records the order of builds.
  Build work(int peer, std::vector<int>* order = nullptr, int label = 0) {
    auto req = std::make_shared<VerbsRequest>(peer);
    req->pieces = 1;
    const uint64_t id = queue.track(req);
    requests.push_back(req);
    return [id, order, label](Staged& st) {
      st.request = id;
      if (order) order->push_back(label);
      return true;
    };
  }
  OpenLanes owner;
  Transport::Counters counters;
  std::vector<Peer> peer_table;
  SendQueue queue{owner, peer_table, counters};
  std::vector<std::shared_ptr<VerbsRequest>> requests;
};

TEST(VerbsSendQueue, OrdinaryWorkLeavesEachLaneRoomForTheTransportsOwnWrites) {
  Queue q(1);
  Lane& lane = q.peer_table[0].lanes[0];
  for (int i = 0; i < kSendDepth; ++i)
    q.queue.submit(0, 0, q.work(0), false);
  EXPECT_EQ(lane.staged.size(), static_cast<size_t>(kSendDepth - kUrgentPerQp));
  EXPECT_EQ(lane.backlog.size(), static_cast<size_t>(kUrgentPerQp));
  // A credit write, say: it does not wait behind the messages that wait for credits.
  for (int i = 0; i < kUrgentPerQp; ++i)
    q.queue.submit(0, 0, q.work(0), true);
  EXPECT_EQ(lane.staged.size(), static_cast<size_t>(kSendDepth));
  EXPECT_TRUE(lane.urgent.empty());
  q.queue.submit(0, 0, q.work(0), true);  // the queue itself is full now
  EXPECT_EQ(lane.urgent.size(), 1u);
}

TEST(VerbsSendQueue, OrdinaryWorkLeavesTheCapOnSendsInFlightRoomForTheTransportsOwnWrites) {
  const int ordinary_cap = kSendsInFlight - kUrgentInFlight;
  const int per_lane = kSendDepth - kUrgentPerQp;
  const int peers = ordinary_cap / per_lane + 2;
  Queue q(peers);
  for (int p = 0; p < peers; ++p) {
    for (int i = 0; i < per_lane; ++i)
      q.queue.submit(p, 0, q.work(p), false);
  }
  EXPECT_EQ(q.queue.in_flight(), ordinary_cap);
  const int last = peers - 1;
  EXPECT_FALSE(q.peer_table[last].lanes[0].backlog.empty());
  q.queue.submit(last, 0, q.work(last), true);
  EXPECT_EQ(q.queue.in_flight(), ordinary_cap + 1);
  EXPECT_TRUE(q.peer_table[last].lanes[0].urgent.empty());
}

TEST(VerbsSendQueue, WorkQueuedOnAClosedLaneStagesOnceItOpensTheTransportsOwnFirstThenInOrder) {
  Queue q(1);
  q.owner.open = false;
  std::vector<int> order;
  q.queue.submit(0, 0, q.work(0, &order, 1), false);
  q.queue.submit(0, 0, q.work(0, &order, 2), false);
  q.queue.submit(0, 0, q.work(0, &order, 3), true);
  EXPECT_TRUE(order.empty());
  q.queue.drain_backlogs();
  EXPECT_TRUE(order.empty()) << "still closed";
  q.owner.open = true;
  q.queue.drain_backlogs();
  EXPECT_EQ(order, (std::vector<int>{3, 1, 2}));
  q.queue.submit(0, 0, q.work(0, &order, 4), false);
  EXPECT_EQ(order.back(), 4) << "an empty backlog lets new work stage at once";
}

TEST(VerbsSendQueue, WorkThatCannotBuildYetHoldsBackWhatCameAfterIt) {
  Queue q(1);
  bool credit = false;
  std::vector<int> order;
  auto req = std::make_shared<VerbsRequest>(0);
  const uint64_t id = q.queue.track(req);
  q.queue.submit(
      0, 0,
      [&, id](Staged& st) {
        if (!credit) return false;
        st.request = id;
        order.push_back(1);
        return true;
      },
      false);
  q.queue.submit(0, 0, q.work(0, &order, 2), false);
  EXPECT_TRUE(order.empty()) << "the second message may not overtake the first";
  credit = true;
  q.queue.drain_backlogs();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(VerbsSendQueue, DroppedWorkGivesBackItsCapsAndFailsWithThePeersFailure) {
  Queue q(1);
  for (int i = 0; i < 5; ++i)
    q.queue.submit(0, 0, q.work(0), false);
  q.peer_table[0].failure = "rank 0 is gone: test";
  const std::vector<uint64_t> ids = q.queue.drop(q.peer_table[0].lanes[0], true);
  EXPECT_EQ(ids.size(), 5u);
  EXPECT_EQ(q.queue.in_flight(), 0);
  for (uint64_t id : ids)
    q.queue.complete_one(0, id, false);
  for (const auto& r : q.requests) {
    ASSERT_TRUE(r->failed());
    EXPECT_NE(r->error().find("rank 0 is gone: test"), std::string::npos) << r->error();
  }
}

}  // namespace
}  // namespace rdmacoll::transport::verbs_impl
