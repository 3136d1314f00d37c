// Resetting a pair's data QPs after an error that leaves the pair healthy (see
// VerbsTransport::kLaneResetTag). The case: a call on one rank fails (a timeout caused by a
// third rank, a disagreement) and drops its output's registration; a peer still in that call, or
// entering it late, finds the failed call's descriptor and writes into the output with a key the
// device no longer knows. The device refuses the write (remote access error) and both sides'
// data QPs go to ERR. That must not make a healthy pair unusable for every other group, as it
// did: the pair's data QPs are reset in place instead, the work posted on them failing (the
// late call's writes, and whatever else was in flight there), the control QP untouched.
//
// Protocol, over the control QP: the side that sees the error first resets its data QPs to
// generation g + 1 (RESET, then back to RTS with the same QP numbers and a starting PSN derived
// from the generation, so both sides agree without exchanging one) and sends "reset g + 1";
// work for the data QPs waits meanwhile. The other side, on "reset g" above its own generation,
// resets its QPs the same way and answers "done g"; both then post again. Two sides starting at
// once converge on the larger generation. A pair that keeps needing resets (kMaxLaneResets) is
// failed: something else is wrong.

#include "transport/verbs/transport_impl.hpp"

namespace rdmacoll::transport::verbs_impl {

namespace {
// Both sides' starting PSN for generation g (24 bits); 0 is the first connection's.
uint32_t generation_psn(uint32_t g) {
  return (g * 0x9E3779B1u) & 0xffffff;
}
}  // namespace

bool VerbsTransport::data_lane_recoverable(int peer, int lane, uint32_t number,
                                           ibv_wc_status status) {
  Peer& p = peers_[peer];
  if (lane >= lanes_ || p.failure) return false;
  Lane& l = p.lanes[lane];
  // Posted before the QP's last reset: its error (a flush) is that reset's, already handled.
  if (static_cast<int32_t>(number - l.reset_below) < 0) {
    sends_.complete_through(peer, lane, number, false);
    return true;
  }
  if (status != IBV_WC_REM_ACCESS_ERR && status != IBV_WC_WR_FLUSH_ERR) return false;
  // A process that died has its registrations gone too: if the liveness watch knows, that
  // is the failure to report (and the pair is not reset).
  if (peer_failure(peer)) return false;
  const std::string why = std::string("rank ") + std::to_string(peer) +
                          " refused a write (work completion error '" + ibv_wc_status_str(status) +
                          "'): the call it was for is over there (it failed or timed out), or "
                          "the process is gone";
  // The refused write's own request says so (Request::refuse); what the reset retires fails.
  if (status == IBV_WC_REM_ACCESS_ERR) {
    for (const Posted& x : p.lanes[lane].posted) {
      if (x.number != number) continue;
      if (VerbsRequest* req = sends_.find(x.request)) {
        if (req->state() == Request::State::Pending) req->refuse(why);
      }
    }
  }
  if (!p.data_paused) start_lane_reset(peer, why, status == IBV_WC_REM_ACCESS_ERR);
  sends_.complete_through(peer, lane, number, false);
  return true;
}

void VerbsTransport::start_lane_reset(int peer, const std::string& why, bool refused) {
  Peer& p = peers_[peer];
  if (p.failure) return;
  if (++p.resets > kMaxLaneResets) {
    mark_failed(peer, why + " (the pair's data QPs were reset " + std::to_string(kMaxLaneResets) +
                          " times already)");
    return;
  }
  log::info("verbs: resetting the data QPs to rank " + std::to_string(peer) + ": " + why);
  reset_data_lanes(peer, p.lane_generation + 1, why, refused);
  if (p.failure) return;
  const uint32_t g = p.lane_generation;
  send(peer, kLaneResetTag, &g, sizeof g);
}

void VerbsTransport::reset_data_lanes(int peer, uint32_t generation, const std::string& why,
                                      bool refused) {
  Peer& p = peers_[peer];
  p.lane_generation = generation;
  p.data_paused = true;
  ++counters_.lane_resets;
  try {
    for (int lane = 0; lane < lanes_; ++lane) {
      Lane& l = p.lanes[lane];
      // RESET drops what is queued without completions: it is retired here, its requests
      // failed, its caps and registrations given back.
      const std::vector<uint64_t> retired = sends_.drop(l, true);
      l.reset_below = l.next_number;
      for (uint64_t id : retired) {
        if (VerbsRequest* req = sends_.find(id)) {
          // Reset because the peer refused a write: the rest on these QPs went to that peer
          // too (a ring call's next pieces), refused as well.
          if (req->state() == Request::State::Pending) {
            if (refused) {
              req->refuse(why);
            } else {
              req->fail(why);
            }
          }
        }
        sends_.complete_one(peer, id, false);
      }
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_RESET;
      check_modify(l.qp, a, IBV_QP_STATE, peer, "RESET");
      bring_up(peer, lane, p.info, l.their_qpn, generation_psn(generation));
    }
  } catch (const std::exception& e) {
    mark_failed(peer, why + "; resetting the data QPs failed: " + e.what());
  }
}

void VerbsTransport::on_transport_message(int peer, uint64_t tag,
                                          std::span<const uint8_t> payload) {
  Peer& p = peers_[peer];
  uint32_t g = 0;
  if (payload.size() != sizeof g || (tag != kLaneResetTag && tag != kLaneResetDoneTag)) {
    mark_failed(peer, "rank " + std::to_string(peer) + " sent a transport message this rank " +
                          "does not know (tag " + std::to_string(tag) + ", " +
                          std::to_string(payload.size()) + " bytes)");
    return;
  }
  std::memcpy(&g, payload.data(), sizeof g);
  if (p.failure) return;
  if (tag == kLaneResetTag) {
    if (g > p.lane_generation) {
      reset_data_lanes(
          peer, g,
          "rank " + std::to_string(peer) + " reset the pair's data QPs (a write of a failed call)");
      if (p.failure) return;
    }
    // Both sides are at g now (the sender reset before it sent): work may go.
    if (g == p.lane_generation) p.data_paused = false;
    send(peer, kLaneResetDoneTag, &g, sizeof g);
  } else if (g == p.lane_generation) {
    p.data_paused = false;
  }
}

}  // namespace rdmacoll::transport::verbs_impl
