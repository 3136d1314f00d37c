// The data phase's executor (engine/write_steps.hpp) on the in-process fabric: a step forwards
// only what the steps before it brought, every write lands at its final offset, and a write
// outside what the peer advertised is refused before anything moves.

#include "engine/write_steps.hpp"

#include <gtest/gtest.h>

#include <barrier>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/call.hpp"
#include "rdmacoll/errors.hpp"
#include "support/inprocess_world.hpp"

namespace rdmacoll::engine {
namespace {

constexpr size_t kChunk = 4096;

uint8_t byte_of(int chunk, size_t i) {
  return static_cast<uint8_t>(chunk * 37 + i * 11 + 1);
}

// Rank 0 writes its chunk 0 into rank 1 (step 0); rank 1 forwards chunks 0 and 1 (what arrived
// and its own) to rank 2 (step 1). The link 0 -> 1 is held until rank 1 is in the executor, so a
// forward that did not wait for step 0's arrival would carry rank 1's stale bytes.
TEST(WriteSteps, AStepForwardsOnlyWhatTheStepsBeforeItBroughtAtTheFinalOffsets) {
  std::vector<CallDescriptor> descriptors(3);
  std::barrier<> described(3);
  std::mutex mu;
  std::condition_variable cv;
  bool rank1_waiting = false;
  std::vector<std::vector<uint8_t>> got(3);
  run_world(
      3, hosts_for(3, 1),
      [&](RankContext& c) {
        if (c.rank == 0) c.fabric.hold(0, 1);  // before anyone has our descriptor
        std::vector<uint8_t> buf(2 * kChunk, 0xEE);
        for (size_t i = 0; i < kChunk && c.rank < 2; ++i)  // our own chunk at its final offset
          buf[c.rank * kChunk + i] = byte_of(c.rank, i);
        transport::Transport& t = c.engine.transport();
        Call call(t, c.group, "write_steps_test", c.engine.spin());
        auto region = t.register_memory(buf.data(), buf.size());
        const transport::Bytes key = region->packed_key();
        CallDescriptor& mine = descriptors[c.rank];
        mine.out_addr = reinterpret_cast<uint64_t>(buf.data());
        mine.out_bytes = buf.size();
        mine.key = key;
        mine.signal_token = call.token();
        WritePlan& plan = c.group.scratch.get<DataPhase>().plan;
        plan.clear("output");
        if (c.rank == 0) plan.write({1, 0, 0, 0, kChunk, 0, 0, 1});
        if (c.rank == 1) plan.arrive({0, 0, kChunk, 0, 0, 1});
        plan.end_step();
        if (c.rank == 1) plan.write({2, 0, 0, 0, 2 * kChunk, 0, 0, 2});
        if (c.rank == 2) plan.arrive({1, 0, 2 * kChunk, 0, 0, 2});
        plan.end_step();
        WriteSteps steps(call, t, plan, c.group.scratch.get<DataPhase>().remotes);
        steps.expect_all(*region);
        described.arrive_and_wait();
        const transport::MemoryRegion* sources[] = {region.get()};
        steps.run(
            descriptors, sources,
            [&](size_t s) {
              if (c.rank != 1 || s != 1) return;
              std::lock_guard lock(mu);
              rank1_waiting = true;
              cv.notify_all();
            },
            [&](size_t s) {
              if (c.rank == 1 && s == 0) {
                for (size_t i = 0; i < kChunk; ++i)
                  ASSERT_EQ(buf[i], byte_of(0, i)) << "rank 1 byte " << i << " before its forward";
              }
            });
        got[c.rank] = buf;
        described.arrive_and_wait();  // no rank leaves while a peer may still read its memory
      },
      SIZE_MAX,
      [&](Fabric& fabric) {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return rank1_waiting; });
        fabric.release(0, 1);
      });
  for (int r = 1; r < 3; ++r)
    for (int k = 0; k < r; ++k)
      for (size_t i = 0; i < kChunk; ++i)
        ASSERT_EQ(got[r][k * kChunk + i], byte_of(k, i)) << "rank " << r << " chunk " << k;
}

// A peer that advertised less than the plan writes (a hostile or mistaken descriptor): the
// write is refused with the range, the peer and its size, and nothing is posted.
TEST(WriteSteps, AWriteOutsideWhatThePeerAdvertisedIsRefusedNamingTheRange) {
  std::string error;
  run_world(2, hosts_for(2, 0), [&](RankContext& c) {
    if (c.rank != 1) return;
    std::vector<uint8_t> buf(256, 1);
    transport::Transport& t = c.engine.transport();
    Call call(t, c.group, "write_steps_test", c.engine.spin());
    auto region = t.register_memory(buf.data(), buf.size());
    std::vector<CallDescriptor> descriptors(2);
    descriptors[0].out_addr = 0x1000;
    descriptors[0].out_bytes = 128;
    WritePlan& plan = c.group.scratch.get<DataPhase>().plan;
    plan.clear("output");
    plan.write({0, 0, 0, 96, 64, 0, 0, 1});
    plan.end_step();
    WriteSteps steps(call, t, plan, c.group.scratch.get<DataPhase>().remotes);
    const transport::MemoryRegion* sources[] = {region.get()};
    try {
      steps.run(descriptors, sources);
    } catch (const TransportError& e) {
      error = e.what();
    }
    EXPECT_TRUE(call.sends().empty());
  });
  EXPECT_NE(error.find("refusing to write bytes [96, 160) into rank 0's output of 128 bytes"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace rdmacoll::engine
