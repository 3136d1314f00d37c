// The verbs transport's footprint plan (transports/verbs/footprint.hpp) for p = 2..4096: with
// the shared receive queue the pinned control memory per connected peer is 8 send buffers
// (32 KiB), where each peer used to cost 32 receive and 64 send buffers (394 KB); the shared
// part does not grow with p. The SoftRoCE suite checks the live transport reports this plan.

#include "transports/verbs/footprint.hpp"

#include <gtest/gtest.h>

namespace rdmacoll::transport::verbs_plan {
namespace {

TEST(VerbsFootprintPlan, ControlMemoryPerPeerIsEightSendBuffers) {
  const Footprint none = plan(0, 1);
  EXPECT_EQ(none.queue_pairs, 0u);
  EXPECT_EQ(none.pinned_control_bytes, kSrqDepth * kCtrlBytes);  // the shared receives
  for (uint64_t p = 2; p <= 4096; p *= 2) {
    for (uint64_t lanes : {1u, 2u, 4u}) {
      const Footprint f = plan(p - 1, lanes);
      EXPECT_EQ(f.queue_pairs, (p - 1) * lanes);
      EXPECT_EQ(f.pinned_control_bytes - none.pinned_control_bytes,
                (p - 1) * kSendBuffers * kCtrlBytes)
          << p << " ranks: the receive side must not grow with p";
      EXPECT_GE(f.cq_entries, (p - 1) * lanes * kSendDepth + kSrqDepth);
    }
  }
  // The figures the scale issue asks for (one QP per peer): 1024 and 4096 ranks.
  const uint64_t old_per_peer = (32 + 64) * kCtrlBytes;
  EXPECT_LT(plan(1023, 1).pinned_control_bytes, 1023 * old_per_peer / 10);
  EXPECT_LT(plan(4095, 1).pinned_control_bytes, 4095 * old_per_peer / 10);
}

}  // namespace
}  // namespace rdmacoll::transport::verbs_plan
