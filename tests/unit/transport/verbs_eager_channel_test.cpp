// The verbs eager channel (src/transport/verbs/eager_channel.hpp) without a device: two ranks'
// channels joined by a simulated NIC that carries each write as a memcpy, so the protocol (slots,
// credits written back or carried by messages, sleep epochs and rings) runs in one thread.

#include "transport/verbs/eager_channel.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace rdmacoll::transport::verbs_impl {
namespace {

// "m17": built by append (GCC 12 warns falsely of an overlap in "m" + std::to_string(i)).
std::string label(char c, int i) {
  std::string s(1, c);
  s += std::to_string(i);
  return s;
}

// Two ranks' eager channels; the "NIC" runs each staged write at once: its bytes land in the
// other rank's block (a memcpy), and a WRITE WITH IMM counts as a ring at the other rank.
struct Ends : EagerChannel::Owner {
  explicit Ends(int me) : me(me), peer_table(2) {}
  void post_own_write(int peer, std::function<void(Staged&)> fill,
                      std::optional<Word> word) override {
    Staged st;
    fill(st);
    writes.push_back({peer, st, word});
  }
  bool take_receive_credit(int) override { return credit; }
  void on_message(int, uint64_t tag, std::span<const uint8_t> payload) override {
    got.emplace_back(tag, std::string(payload.begin(), payload.end()));
  }
  void ring_broken(int, std::string why) override { broken = why; }
  struct Write {
    int peer;
    Staged st;
    std::optional<Word> word;
  };
  int me;
  std::vector<Peer> peer_table;
  Transport::Counters counters;
  EagerChannel channel{*this, peer_table, counters, 4};
  std::deque<Write> writes;
  std::vector<std::pair<uint64_t, std::string>> got;
  std::string broken;
  int rings = 0;
  bool credit = true;  // a receive credit for a ring
};

void land(const Staged& st, Ends& to) {
  if (st.sge.length) {
    std::memcpy(reinterpret_cast<void*>(st.wr.wr.rdma.remote_addr),
                reinterpret_cast<const void*>(st.sge.addr), st.sge.length);
  }
  if (st.wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM && ntohl(st.wr.imm_data) == eager_ring::kImm)
    ++to.rings;
}

// Runs every write each side has posted (and those their landings post) to the end.
void deliver_all(Ends& a, Ends& b) {
  while (!a.writes.empty() || !b.writes.empty()) {
    for (Ends* from : {&a, &b}) {
      Ends& to = from == &a ? b : a;
      while (!from->writes.empty()) {
        const Ends::Write w = from->writes.front();
        from->writes.pop_front();
        land(w.st, to);
        if (w.word) from->channel.word_landed(w.peer, *w.word);
      }
    }
  }
}

// Each side's block for the other, as make_block makes it but unregistered: the "NIC" copies by
// address and checks no key.
void connect(Ends& a, Ends& b, int slots) {
  for (Ends* e : {&a, &b}) {
    Peer::Eager& mine = e->peer_table[1 - e->me].eager;
    const size_t bytes = eager_ring::block_bytes(slots);
    mine.block.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)));
    std::memset(mine.block.get(), 0, bytes);
    mine.slots = slots;
  }
  a.channel.joined(1, reinterpret_cast<uint64_t>(b.peer_table[0].eager.block.get()), 0, slots);
  b.channel.joined(0, reinterpret_cast<uint64_t>(a.peer_table[1].eager.block.get()), 0, slots);
}

// A message from `from` to the other side as the transport's send builds it; false when no
// slot is free (the transport would queue it).
bool send(Ends& from, Ends& to, const std::string& text, uint64_t tag) {
  const int peer = 1 - from.me;
  if (!from.channel.slot_free(peer)) return false;
  const Bytes framed = from.channel.frame(
      peer, tag,
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  Staged st;
  from.channel.take_slot(peer, st);
  st.sge = {reinterpret_cast<uint64_t>(framed.data()), static_cast<uint32_t>(framed.size()), 0};
  land(st, to);
  from.channel.wake_if_asleep(peer);  // what the transport does once the write has landed
  return true;
}

TEST(VerbsEagerChannel, OneWayTrafficGetsItsCreditsBackByWritesAndNeverStalls) {
  Ends a(0), b(1);
  connect(a, b, 4);
  int sent = 0;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(send(a, b, label('m', i), 7)) << "message " << i << " found no slot";
    ++sent;
    b.channel.poll();
    deliver_all(a, b);
  }
  ASSERT_EQ(b.got.size(), 100u);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(b.got[i].second, label('m', i));
  EXPECT_GT(b.counters.eager_credit_writes, 0u) << "b never sends: its credits went as writes";
  EXPECT_TRUE(a.broken.empty() && b.broken.empty());
}

TEST(VerbsEagerChannel, AWriterWithoutCreditsWaitsUntilTheReaderTakesItsMessages) {
  Ends a(0), b(1);
  connect(a, b, 4);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(send(a, b, "x", 1));
  EXPECT_FALSE(send(a, b, "y", 1)) << "four slots, four messages unread";
  b.channel.poll();
  deliver_all(a, b);
  EXPECT_TRUE(send(a, b, "y", 1));
}

TEST(VerbsEagerChannel, TrafficBothWaysCarriesTheCreditsWithNoCreditWrites) {
  Ends a(0), b(1);
  connect(a, b, 4);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(send(a, b, label('a', i), 1)) << i;
    ASSERT_TRUE(send(b, a, label('b', i), 2)) << i;
    a.channel.poll();
    b.channel.poll();
    deliver_all(a, b);
  }
  EXPECT_EQ(a.got.size(), 50u);
  EXPECT_EQ(b.got.size(), 50u);
  EXPECT_EQ(a.counters.eager_credit_writes + b.counters.eager_credit_writes, 0u);
}

TEST(VerbsEagerChannel, AReaderThatAnnouncedASleepIsRungOnceForItsEpoch) {
  Ends a(0), b(1);
  connect(a, b, 4);
  EXPECT_FALSE(b.channel.may_sleep()) << "its ring peer has not heard of a sleep yet";
  b.channel.announce_sleep();
  deliver_all(a, b);  // the epoch lands in a's block
  EXPECT_TRUE(b.channel.may_sleep());
  ASSERT_TRUE(send(a, b, "wake", 1));
  deliver_all(a, b);
  EXPECT_EQ(b.rings, 1) << "the writer found the epoch and rang";
  ASSERT_TRUE(send(a, b, "again", 1));
  deliver_all(a, b);
  EXPECT_EQ(b.rings, 1) << "one ring per epoch";
  b.channel.rung();
  EXPECT_FALSE(b.channel.may_sleep()) << "after a ring the next sleep announces a new epoch";
}

TEST(VerbsEagerChannel, AnEpochSeenOnceIsRungForEvenIfAnOlderWriteLandsOverIt) {
  Ends a(0), b(1);
  connect(a, b, 4);
  b.channel.announce_sleep();  // epoch 1
  deliver_all(a, b);
  ASSERT_TRUE(send(a, b, "m", 1));
  deliver_all(a, b);
  ASSERT_EQ(b.rings, 1);
  b.channel.rung();
  b.channel.announce_sleep();  // epoch 2
  deliver_all(a, b);
  a.credit = false;  // a sees epoch 2 but cannot ring yet
  ASSERT_TRUE(send(a, b, "n", 1));
  deliver_all(a, b);
  EXPECT_EQ(b.rings, 1);
  // Adaptive routing placed an older write of the word last: the block says 1 again.
  const uint64_t one = 1;
  std::memcpy(a.peer_table[1].eager.block.get() + eager_ring::epoch_in_offset(4), &one, 8);
  a.credit = true;
  ASSERT_TRUE(send(a, b, "o", 1));
  deliver_all(a, b);
  EXPECT_EQ(b.rings, 2) << "the largest epoch seen (2) holds; reading 1 would leave b asleep";
}

}  // namespace
}  // namespace rdmacoll::transport::verbs_impl
