// The verbs transport's footprint plan (src/transport/verbs/footprint.hpp) for p = 2..4096. What
// the peers share does not grow with p: the shared receive queue, one pool of send buffers and
// a CQ bounded by the send work requests allowed in flight. Each peer used to cost 32 receive
// and 64 send buffers (394 KB), later 8 send buffers (32 KiB), and 96 then 64 CQ entries. QPs
// are made on first use, so with the connection plan (src/schedule/connection_plan.hpp) as the
// peers a rank touches, the footprint grows as log p for recursive doubling and stays flat for
// the ring, whose calls exchange descriptors with its two neighbours only. Each connected peer adds
// its ring of eager slots (35 KB), so that part grows with the peers a rank touches, not with p.
// The SoftRoCE suite checks the live transport reports this plan.

#include "transport/verbs/footprint.hpp"

#include <gtest/gtest.h>

#include <random>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "schedule/binomial_tree.hpp"
#include "schedule/connection_plan.hpp"

namespace rdmacoll::transport::verbs_plan {
namespace {

using schedule::Algorithm;
using schedule::connection_plan;
using schedule::DescriptorPeers;
using schedule::GroupPlan;

int ceil_log2(int p) {
  int k = 0;
  while ((1 << k) < p)
    ++k;
  return k;
}

std::vector<int> identity(int p) {
  std::vector<int> order(p);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

// A few ranks of each size: the first, the last, and two in between.
std::vector<int> sample_ranks(int p) {
  return {0, p / 3, p / 2, p - 1};
}

// The transport before on-demand connections: a QP to every peer at init, 8 send buffers per
// peer beside the 512 shared receives, and a CQ of 64 entries per peer (its figures in the
// notes).
Footprint every_peer_at_init(uint64_t peers) {
  constexpr uint64_t kOldReceives = 512;
  return {peers, (kOldReceives + peers * 8) * kCtrlBytes, peers * kSendDepth + kOldReceives + 16,
          peers};
}

std::vector<int> sizes_up_to_4096() {
  std::vector<int> v;
  for (int p = 2; p <= 4096; p *= 2)
    v.push_back(p);
  for (int p : {3, 5, 6, 7, 12, 100, 1000, 1023, 4095})
    v.push_back(p);
  return v;
}

// Where p is a power of two the descriptors take recursive doubling's rounds in the virtual
// order (src/engine/control/descriptor_messages.cpp): the recursive-doubling all-gather's own
// peers, so they add none.
TEST(ConnectionPlan, RecursiveDoublingDescriptorsAddNoPeer) {
  for (int p = 4; p <= 4096; p *= 2) {
    std::vector<int> interleaved(p);  // two "hosts": even positions one, odd the other
    for (int i = 0; i < p; ++i)
      interleaved[i] = i % 2 == 0 ? i / 2 : p / 2 + i / 2;
    for (const auto& order : {identity(p), interleaved}) {
      for (int rank : sample_ranks(p)) {
        EXPECT_EQ(
            connection_plan(
                {Algorithm::RecursiveDoubling, true, false, DescriptorPeers::RecursiveDoubling},
                order, rank),
            connection_plan({Algorithm::RecursiveDoubling, true, false, DescriptorPeers::Schedule},
                            order, rank))
            << p << " ranks, rank " << rank;
      }
    }
  }
}

TEST(ConnectionPlan, BroadcastPeersAreTheTreesOfEveryRoot) {
  for (int p = 2; p <= 33; ++p) {
    for (int rank = 0; rank < p; ++rank) {
      std::vector<int> want;
      for (int root = 0; root < p; ++root) {
        const schedule::TreeNode n = schedule::binomial_tree(p, root, rank);
        if (n.parent >= 0) want.push_back(n.parent);
        want.insert(want.end(), n.children.begin(), n.children.end());
      }
      std::sort(want.begin(), want.end());
      want.erase(std::unique(want.begin(), want.end()), want.end());
      EXPECT_EQ(schedule::broadcast_peers(p, rank), want) << p << " ranks, rank " << rank;
    }
  }
}

TEST(ConnectionPlan, RecursiveDoublingConnectsLog2PAndTheRingTwo) {
  for (int p : sizes_up_to_4096()) {
    for (int rank : sample_ranks(p)) {
      const std::vector<int> ring = connection_plan(
          {Algorithm::Ring, true, false, DescriptorPeers::Schedule}, identity(p), rank);
      const std::vector<int> want_ring =
          p == 2 ? std::vector<int>{1 - rank}
                 : std::vector<int>{std::min((rank + 1) % p, (rank + p - 1) % p),
                                    std::max((rank + 1) % p, (rank + p - 1) % p)};
      EXPECT_EQ(ring, want_ring) << p << " ranks, rank " << rank;
      if (!schedule::is_power_of_two(p)) continue;
      const std::vector<int> rd =
          connection_plan({Algorithm::RecursiveDoubling, true, false, DescriptorPeers::Schedule},
                          identity(p), rank);
      std::vector<int> want_rd;
      for (int d = 1; d < p; d <<= 1)
        want_rd.push_back(rank ^ d);
      std::sort(want_rd.begin(), want_rd.end());
      want_rd.insert(want_rd.end(), ring.begin(), ring.end());  // the ring reduce-scatter
      std::sort(want_rd.begin(), want_rd.end());
      want_rd.erase(std::unique(want_rd.begin(), want_rd.end()), want_rd.end());
      EXPECT_EQ(rd, want_rd) << p << " ranks, rank " << rank;
    }
  }
}

// The assertion: from p = 2 to 4096 the footprint of the planned connections grows at
// most as log p for recursive doubling (with Bruck descriptors and broadcasts: rank xor 2^k,
// rank +- 2^k and the ring's two neighbours) and not at all for the ring; the direct descriptor
// round (one host, where p is the host's ranks) connects every peer.
TEST(VerbsFootprintPlan, GrowsAsLogPForRecursiveDoublingAndStaysFlatForTheRing) {
  const Footprint ring_at_4 = plan(2, 1);
  for (int p : sizes_up_to_4096()) {
    const uint64_t log_p = static_cast<uint64_t>(ceil_log2(p));
    for (int rank : sample_ranks(p)) {
      const auto ring = connection_plan({Algorithm::Ring, true, false, DescriptorPeers::Schedule},
                                        identity(p), rank);
      const Footprint fr = plan(ring.size(), 1);
      EXPECT_LE(fr.queue_pairs, ring_at_4.queue_pairs) << p << " ranks";
      EXPECT_LE(fr.pinned_control_bytes, ring_at_4.pinned_control_bytes) << p << " ranks";
      EXPECT_LE(fr.cq_entries, ring_at_4.cq_entries) << p << " ranks";
      // The ring as the engine runs it (call.cpp): its descriptors take the ring step only,
      // to and from the two ring neighbours it writes to and receives from, so the plan is
      // the ring's own. A group that also makes small calls adds Bruck's rounds (rank +- 2^k):
      // at most 2 ceil(log2 p) + 2 peers.
      const auto ring_calls = connection_plan(
          {Algorithm::Ring, true, false, DescriptorPeers::RingStep}, identity(p), rank);
      EXPECT_EQ(ring_calls, ring) << p << " ranks, rank " << rank;
      EXPECT_EQ(ring_calls.size(), static_cast<size_t>(std::min(p - 1, 2)))
          << p << " ranks, rank " << rank;
      const auto ring_and_small = connection_plan(
          {Algorithm::Ring, true, false, DescriptorPeers::Bruck}, identity(p), rank);
      EXPECT_LE(ring_and_small.size(), 2 * log_p + 2) << p << " ranks, rank " << rank;
      if (!schedule::is_power_of_two(p)) continue;
      const auto rd = connection_plan(
          {Algorithm::RecursiveDoubling, true, true, DescriptorPeers::RecursiveDoubling},
          identity(p), rank);
      const uint64_t bound = 3 * log_p + 2;  // xor 2^k, +- 2^k, the ring's neighbours
      EXPECT_LE(rd.size(), bound) << p << " ranks, rank " << rank;
      const Footprint f = plan(rd.size(), 1);
      EXPECT_LE(f.queue_pairs, 2 * bound) << p << " ranks";  // a data QP and a control QP
      EXPECT_LE(f.pinned_control_bytes, plan(bound, 1).pinned_control_bytes) << p << " ranks";
      EXPECT_LE(f.cq_entries, plan(bound, 1).cq_entries) << p << " ranks";
      const auto every = connection_plan(
          {Algorithm::RecursiveDoubling, true, true, DescriptorPeers::Every}, identity(p), rank);
      EXPECT_EQ(every.size(), static_cast<size_t>(p - 1)) << p << " ranks";
    }
  }
  // The figures for the notes: one rank of 1024 and of 4096, recursive doubling with Bruck
  // descriptors and broadcasts, against every peer connected at init as before.
  for (int p : {1024, 4096}) {
    const auto rd = connection_plan(
        {Algorithm::RecursiveDoubling, true, true, DescriptorPeers::RecursiveDoubling}, identity(p),
        5);
    const auto no_broadcast = connection_plan(
        {Algorithm::RecursiveDoubling, true, false, DescriptorPeers::RecursiveDoubling},
        identity(p), 5);
    const Footprint planned =
        plan(rd.size(), 1, eager_ring::kDefaultSlots, static_cast<uint64_t>(p - 1));
    const Footprint before = every_peer_at_init(static_cast<uint64_t>(p - 1));
    std::printf(
        "p=%d: on demand %zu peers (%zu without broadcasts), %llu pinned control bytes, %llu CQ "
        "entries; every peer at init: %llu bytes, %llu CQ entries\n",
        p, rd.size(), no_broadcast.size(),
        static_cast<unsigned long long>(planned.pinned_control_bytes),
        static_cast<unsigned long long>(planned.cq_entries),
        static_cast<unsigned long long>(before.pinned_control_bytes),
        static_cast<unsigned long long>(before.cq_entries));
    EXPECT_LT(planned.pinned_control_bytes * 10, before.pinned_control_bytes);
    // The CQ holds every receive the shared queue may hold, which the grants need at this p
    // (8192 at 64 B an entry): still a fifth or less of before.
    EXPECT_LT(planned.cq_entries * 5, before.cq_entries);
  }
}

TEST(VerbsFootprintPlan, WhatThePeersShareDoesNotGrowWithP) {
  const Footprint none = plan(0, 1);
  EXPECT_EQ(none.queue_pairs, 0u);
  EXPECT_EQ(none.pinned_control_bytes, (kReceiveChunk + kSendBuffers) * kCtrlBytes);
  for (uint64_t p = 2; p <= 4096; p *= 2) {
    for (uint64_t lanes : {1u, 2u, 4u}) {
      const uint64_t peers = p - 1;
      const Footprint f = plan(peers, lanes);
      EXPECT_EQ(f.queue_pairs, peers * (lanes + 1));  // and a control QP each
      EXPECT_EQ(f.connected_peers, peers);
      // Each connected peer adds its block and the receives it is granted (in whole chunks),
      // and the receives stop growing at the queue's capacity.
      const uint64_t capacity = receive_capacity(peers);
      const uint32_t grant = grant_per_peer(peers, capacity);
      EXPECT_GE(grant, 1u);
      EXPECT_LE(peers * grant, std::max(capacity, peers)) << p << " ranks: grants past capacity";
      const uint64_t receives = receives_posted(peers, grant, capacity);
      EXPECT_GE(receives, std::min(peers * grant, capacity)) << p << " ranks";
      EXPECT_LE(receives, capacity) << p << " ranks";
      EXPECT_EQ(receives % kReceiveChunk, 0u);
      EXPECT_EQ(capacity % kReceiveChunk, 0u);
      EXPECT_EQ(plan(peers, lanes, 0).pinned_control_bytes,
                (receives + kSendBuffers) * kCtrlBytes + peers * eager_ring::block_bytes(0));
      EXPECT_EQ(f.pinned_control_bytes,
                (receives + kSendBuffers) * kCtrlBytes +
                    peers * eager_ring::block_bytes(eager_ring::kDefaultSlots));
      // Room for every send work request that may be in flight, and every receive.
      EXPECT_EQ(f.cq_entries, std::min<uint64_t>(peers * (lanes + 1) * kSendDepth, kSendsInFlight) +
                                  capacity + 16);
      EXPECT_LE(f.cq_entries, kSendsInFlight + kMaxReceives + 16);
    }
  }
  // Even with every peer connected (1024 and 4096 ranks, one QP per peer): the receives and
  // send buffers are under 10% of the old per-peer buffers, and with the blocks under 20%.
  const uint64_t old_per_peer = (32 + 64) * kCtrlBytes;
  EXPECT_LT(plan(1023, 1, 0).pinned_control_bytes, 1023 * old_per_peer / 10);
  EXPECT_LT(plan(4095, 1, 0).pinned_control_bytes, 4095 * old_per_peer / 10);
  EXPECT_LT(plan(1023, 1).pinned_control_bytes, 1023 * old_per_peer / 5);
  EXPECT_LT(plan(4095, 1).pinned_control_bytes, 4095 * old_per_peer / 5);
}

// Receive credits (receive_credits.hpp): a sender and a receiver whose queue holds exactly the
// grants, driven in random order. The queue never runs dry, the sender is never stuck while
// the receiver keeps reading, and a sender that ignores its credits is caught.
TEST(ReceiveCredits, TheSharedQueueNeverRunsDryAndSendersNeverWaitForever) {
  std::mt19937 rng(7);
  for (uint32_t grant = 1; grant <= kReceiveCredits; ++grant) {
    for (int peers = 1; peers <= 5; ++peers) {
      std::vector<ReceiveCredits> sender(peers), receiver(peers);
      std::vector<uint64_t> in_flight(peers, 0), word(peers, 0);  // word: the credit line
      for (int i = 0; i < peers; ++i) {
        sender[i].their_grant = grant;
        receiver[i].our_grant = grant;
      }
      int64_t queue = static_cast<int64_t>(grant) * peers;  // receives posted
      uint64_t sent = 0;
      for (int step = 0; step < 20000; ++step) {
        const int i = static_cast<int>(rng() % peers);
        switch (rng() % 3) {
          case 0:  // peer i posts a receive-taking request if it holds a credit
            if (sender[i].may_take(word[i])) {
              ++sender[i].used;
              ++in_flight[i];
              --queue;  // it lands and takes a receive
              ++sent;
              ASSERT_GE(queue, 0) << "the queue ran dry";
            }
            break;
          case 1:  // the receiver reads one of i's arrivals and posts its receive again
            if (in_flight[i] > 0) {
              --in_flight[i];
              ++receiver[i].arrived;
              ++queue;
              ASSERT_FALSE(receiver[i].overran());
              if (receiver[i].owes_credits()) {
                receiver[i].handed_back = receiver[i].arrived;
                word[i] = receiver[i].handed_back;  // the credit write lands
              }
            }
            break;
          default:  // with nothing in flight from i, i always holds a credit
            if (in_flight[i] == 0) {
              ASSERT_TRUE(sender[i].may_take(word[i])) << grant;
            }
        }
      }
      EXPECT_GT(sent, 1000u);
    }
  }
  // A sender past its grant is seen on the receiver's side.
  ReceiveCredits r;
  r.our_grant = 4;
  r.arrived = 4;
  EXPECT_FALSE(r.overran());
  r.arrived = 5;
  EXPECT_TRUE(r.overran());
  r.handed_back = 2;
  EXPECT_FALSE(r.overran());
}

// Two writes of the credit word in flight can be placed in reverse order where the fabric routes
// adaptively (InfiniBand AR, RoCE packet spraying): the word goes 16 -> 8. A sender that read
// it fresh each time would see 8 credits back for 16 used and wait for ever, since the receiver
// owes nothing more; it keeps the largest value it has seen.
TEST(ReceiveCredits, ACreditWordThatGoesBackwardsKeepsTheLargestValueSeen) {
  ReceiveCredits s;
  s.their_grant = 8;
  s.used = 16;
  EXPECT_FALSE(s.may_take(8));  // 8 granted and 8 back: all 16 used
  EXPECT_TRUE(s.may_take(16));
  EXPECT_TRUE(s.may_take(8));  // the late write of 8 landed over the 16
  s.used = 24;
  EXPECT_FALSE(s.may_take(8));
  EXPECT_TRUE(s.may_take(24));
}

// The sleep epoch and the eager credit are read the same way: a word that goes back reads as
// the largest value seen, and a later larger one still counts.
TEST(CountWord, AWordThatGoesBackwardsReadsAsTheLargestValueSeen) {
  CountWord epoch;
  EXPECT_EQ(epoch.read(5), 5u);
  EXPECT_EQ(epoch.read(3), 5u);
  EXPECT_EQ(epoch.read(0), 5u);
  EXPECT_EQ(epoch.read(6), 6u);
}

// The writer keeps one write of a word in flight: a change while one is in flight is written
// when it lands, once however many changes came, and never two at a time.
TEST(WordWriter, OneWriteOfAWordInFlightAndTheNewestValueWrittenWhenItLands) {
  WordWriter w;
  EXPECT_TRUE(w.changed());   // posted
  EXPECT_FALSE(w.changed());  // in flight: later
  EXPECT_FALSE(w.changed());
  EXPECT_TRUE(w.landed());    // the newest value, posted now
  EXPECT_FALSE(w.changed());  // that one is in flight
  EXPECT_TRUE(w.landed());
  EXPECT_FALSE(w.landed());  // nothing changed since: nothing more in flight
  EXPECT_FALSE(w.in_flight);
  EXPECT_TRUE(w.changed());
}

// The grant shrinks as the world grows so that every peer's fits the queue, down to one each.
TEST(ReceiveCredits, GrantsFitTheQueueForEveryWorldSize) {
  for (uint64_t peers : {1u, 2u, 63u, 64u, 65u, 1023u, 1024u, 1025u, 4095u, 8191u}) {
    for (uint64_t device_max : {256u, 4096u, 16384u}) {
      const uint64_t capacity = receive_capacity(peers, device_max);
      EXPECT_LE(capacity, device_max);
      EXPECT_TRUE(capacity % kReceiveChunk == 0 || capacity == device_max) << capacity;
      EXPECT_LE(receives_posted(peers, grant_per_peer(peers, capacity), capacity), capacity);
      const uint32_t g = grant_per_peer(peers, capacity);
      EXPECT_GE(g, 1u);
      EXPECT_LE(g, kReceiveCredits);
      if (capacity >= peers) {
        EXPECT_LE(peers * g, capacity) << peers << " peers";
      }
      if (peers * kReceiveCredits <= capacity) {
        EXPECT_EQ(g, kReceiveCredits);
      }
    }
  }
}

}  // namespace
}  // namespace rdmacoll::transport::verbs_plan
