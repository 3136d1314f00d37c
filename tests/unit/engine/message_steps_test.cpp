// The messages' executor (engine/message_steps.hpp) on the in-process fabric: every message
// reaches the buffer its receiver posted for it, a message of another length than its sender
// must send fails the call naming the sender, and a round leaves the call's lists as it found
// them.

#include "engine/message_steps.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/call.hpp"
#include "rdmacoll/errors.hpp"
#include "support/inprocess_world.hpp"

namespace rdmacoll::engine {
namespace {

// What rank `from` sends rank `to`: from + 1 bytes, so that every pair's length differs.
std::vector<uint8_t> message(int from, int to) {
  std::vector<uint8_t> m(static_cast<size_t>(from) + 1);
  for (size_t i = 0; i < m.size(); ++i)
    m[i] = static_cast<uint8_t>(from * 31 + to * 7 + i);
  return m;
}

TEST(MessageSteps, EveryMemberGetsEachPeersMessageWhereItPostedItsReceive) {
  for (int p : {2, 3, 5}) {
    std::vector<std::vector<std::vector<uint8_t>>> got(p);
    run_world(p, hosts_for(p, 1), [&](RankContext& c) {
      Call call(c.engine.transport(), c.group, "message_steps_test", c.engine.spin());
      std::vector<std::vector<uint8_t>> in(p, std::vector<uint8_t>(64, 0xEE));
      std::vector<std::vector<uint8_t>> out(p);
      MessageSteps messages(call, TagKind::Piece, MessageSteps::Carries::Data);
      for (int r = 0; r < p; ++r) {
        if (r != c.rank) messages.expect(r, static_cast<uint32_t>(r), in[r].data(), in[r].size());
      }
      for (int j = 0; j < p; ++j) {
        if (j == c.rank) continue;
        out[j] = message(c.rank, j);
        messages.send(j, static_cast<uint32_t>(c.rank), out[j].data(), out[j].size());
      }
      for (size_t i = 0; i < messages.arrivals(); ++i) {
        const int r = messages.arrival(i).peer;
        messages.wait_exactly(i, static_cast<size_t>(r) + 1, "the test's round");
        in[r].resize(static_cast<size_t>(r) + 1);
      }
      messages.wait_all();
      messages.release();
      check(call.recvs().empty() && call.sends().empty(), "the round left requests behind");
      got[c.rank] = in;
    });
    for (int to = 0; to < p; ++to) {
      for (int from = 0; from < p; ++from) {
        if (from != to) {
          EXPECT_EQ(got[to][from], message(from, to)) << from << " -> " << to;
        }
      }
    }
  }
}

TEST(MessageSteps, AMessageOfAnotherLengthThanItsSenderMustSendFailsNamingTheSender) {
  std::string error;
  run_world(2, hosts_for(2, 1), [&](RankContext& c) {
    Call call(c.engine.transport(), c.group, "message_steps_test", c.engine.spin());
    MessageSteps messages(call, TagKind::Piece, MessageSteps::Carries::Control);
    std::vector<uint8_t> buf(8, 0);
    if (c.rank == 1) {
      messages.send(0, 1, buf.data(), 3);  // rank 0 expects 4
      messages.wait_all();
      return;
    }
    messages.expect(1, 1, buf.data(), buf.size());
    try {
      messages.wait_exactly(0, 4, "the test's round");
    } catch (const TransportError& e) {
      error = e.what();
    }
  });
  EXPECT_NE(error.find("rank 1 sent 3 bytes in message 0 of the test's round, expected 4"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace rdmacoll::engine
