// Completions: the CQ's work completions, shared receives and control messages, peer failures
// (QPs to ERR, what was in flight retired) and async events.

#include "transport/verbs/transport_impl.hpp"

namespace rdmacoll::transport::verbs_impl {

void VerbsTransport::deliver(VerbsRequest& req, std::span<const uint8_t> payload) {
  if (payload.size() > req.recv_capacity) {
    req.fail("control message of " + std::to_string(payload.size()) + " bytes from rank " +
             std::to_string(req.peer()) + " exceeds the receive buffer of " +
             std::to_string(req.recv_capacity));
    return;
  }
  if (!payload.empty()) std::memcpy(req.recv_buffer, payload.data(), payload.size());
  req.complete(payload.size());
}

void VerbsTransport::on_receive(const ibv_wc& wc, int peer, int lane, uint32_t slot) {
  // A shared receive: the QP it arrived on says from whom. Its slot goes back to the shared
  // queue whatever happened to the message (once this progress() is through with its buffer),
  // and the peer is owed a credit for it.
  repost_.push_back(static_cast<int>(slot));
  if (peer < 0) return;
  ReceiveCredits& c = peers_[peer].credits;
  ++c.arrived;
  if (c.overran() && !peers_[peer].failure) {
    mark_failed(peer, "rank " + std::to_string(peer) + " sent " + std::to_string(c.arrived) +
                          " messages that take a receive where it held credits for " +
                          std::to_string(c.our_grant + c.handed_back) +
                          " (a broken or hostile peer)");
    return;
  }
  if (!c.listed_owing) {
    c.listed_owing = true;
    owing_.push_back(peer);
  }
  if (wc.status != IBV_WC_SUCCESS && lane < lanes_ && !peers_[peer].failure) {
    // A data QP's receive flushed: that QP went to ERR under a refused write (see
    // data_lane_recoverable); the pair's data QPs are reset, the peer stays.
    if (!peers_[peer].data_paused) {
      start_lane_reset(peer, std::string("receive completion error '") +
                                 ibv_wc_status_str(wc.status) + "' on a data QP from rank " +
                                 std::to_string(peer));
    }
    return;
  }
  if (wc.status != IBV_WC_SUCCESS) {
    mark_failed(peer, std::string("receive completion error '") + ibv_wc_status_str(wc.status) +
                          "' (status " + std::to_string(wc.status) + ") on " + dev_.choice.device +
                          " " + qp_name(lane) + " from rank " + std::to_string(peer));
    return;
  }
  handle_receive(wc, peer, lane, slot);
}

void VerbsTransport::on_send(const ibv_wc& wc, int peer, int lane, uint32_t id) {
  if (wc.status != IBV_WC_SUCCESS && data_lane_recoverable(peer, lane, id, wc.status)) return;
  if (wc.status != IBV_WC_SUCCESS) {
    const char* hint =
        wc.status == IBV_WC_RNR_RETRY_EXC_ERR
            ? ": the peer had no receive posted through every retry, which its credits rule out "
              "(a broken peer, or a queue oversubscribed past its capacity)"
            : "";
    mark_failed(peer, std::string("work completion error '") + ibv_wc_status_str(wc.status) +
                          "' (status " + std::to_string(wc.status) + ") on " + dev_.choice.device +
                          " " + qp_name(lane) + " to rank " + std::to_string(peer) + hint);
    sends_.complete_through(peer, lane, id, false);
    return;
  }
  sends_.complete_through(peer, lane, id, true);
}

void VerbsTransport::handle_receive(const ibv_wc& wc, int peer, int lane, uint32_t slot) {
  if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (ntohl(wc.imm_data) & eager_ring::kImm)) {
    // A ring: a peer found our sleep epoch. It will not ring again for that epoch, so the
    // next sleep announces a new one.
    eager_.rung();
  } else if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    const auto key = std::make_pair(peer, ntohl(wc.imm_data));
    auto it = expects_.find(key);
    if (it == expects_.end()) {
      // A write for a call that is over (it failed; its token is fenced or given out again
      // after a full turn) completes nothing; one for a live call that has not posted its
      // expect yet waits for it.
      if (tokens_.live(verbs_imm::token_of(key.second))) ++arrived_[key];
    } else if (--it->second.remaining == 0) {
      it->second.request->complete();
      expects_.erase(it);
    }
  } else if (lane != control_lane()) {  // control messages travel on the control QP only
    mark_failed(peer, "rank " + std::to_string(peer) + " sent a control message on data lane " +
                          std::to_string(lane));
  } else {
    const uint8_t* buf = recv_buffer(static_cast<int>(slot));
    uint64_t tag = 0;
    std::memcpy(&tag, buf, 8);
    dispatch_control(peer, tag,
                     std::span<const uint8_t>(buf + 8, std::max<uint32_t>(wc.byte_len, 8) - 8));
  }
}

void VerbsTransport::dispatch_control(int peer, uint64_t tag, std::span<const uint8_t> payload) {
  if (tag >> 62 == 1) {  // kind 1 is the transport's own (engine tags never use it)
    on_transport_message(peer, tag, payload);
    return;
  }
  const auto key = std::make_pair(peer, tag);
  auto it = pending_recvs_.find(key);
  if (it != pending_recvs_.end()) {
    deliver(static_cast<VerbsRequest&>(*it->second.front()), payload);
    it->second.pop_front();
    if (it->second.empty()) pending_recvs_.erase(it);
  } else {
    unexpected_[key].emplace_back(payload.begin(), payload.end());
  }
}

void VerbsTransport::mark_failed(int peer, std::string why) {
  if (peer < 0 || peer >= world_) return;
  Peer& p = peers_[peer];
  const bool first = !p.failure;
  if (first) {
    p.failure = std::move(why);
    p.failed_at = Clock::now();
  }
  if (first && peer != me_) {
    // What was staged never reached the device: it is retired now. What was posted stays
    // counted (its cap, its send buffer, the registration it reads) until the QP's flush
    // completions retire it: until then the device may still read it, and each flush takes a
    // CQ entry, which the cap on sends in flight is what bounds. Its requests fail now.
    std::vector<uint64_t> retired;
    for (Lane& l : p.lanes) {
      if (l.qp) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_ERR;
        ibv_modify_qp(l.qp, &a, IBV_QP_STATE);
      }
      const std::vector<uint64_t> dropped = sends_.drop(l, !l.qp);
      retired.insert(retired.end(), dropped.begin(), dropped.end());
    }
    for (uint64_t r : retired)
      sends_.complete_one(peer, r, false);
    // Its connection, if one was under way, will not finish: the store need not be asked.
    if (connector_ && (p.link == Link::Offered || p.link == Link::Up)) {
      connector_->unwatch(store_key("qp", peer, me_));
      connector_->unwatch(store_key("up", peer, me_));
    }
  }
  fail_all_of(peer);
}

void VerbsTransport::retire_unflushed(Clock::time_point now) {
  for (int r = 0; r < world_; ++r) {
    Peer& p = peers_[r];
    if (!p.failure || r == me_ || now - p.failed_at < kFlushGrace) continue;
    for (int lane = 0; lane < static_cast<int>(p.lanes.size()); ++lane) {
      Lane& l = p.lanes[lane];
      if (l.posted.empty()) continue;
      log::warn("verbs: " + std::to_string(l.posted.size()) + " work requests to failed rank " +
                std::to_string(r) + " had no flush completion after " +
                std::to_string(kFlushGrace.count()) + " s; retired without one");
      sends_.complete_through(r, lane, l.posted.back().number, false);
    }
  }
}

void VerbsTransport::fail_all_of(int peer) {
  sends_.fail_peer(peer, *peers_[peer].failure);
}

// The port's outages: port_watch.hpp says why a down port is a warning first.
void VerbsTransport::on_port_down() {
  ++counters_.port_down_events;
  if (!port_.went_down(Clock::now())) return;
  log::warn(
      "verbs: " + dev_.port_name() + " went down; work waits for it up to the retry budget of " +
      std::to_string(port_.budget().count()) + " ms (RDMACOLL_IB_TIMEOUT, RDMACOLL_IB_RETRY_CNT)");
}

void VerbsTransport::on_port_active() {
  if (const auto lasted = port_.came_up(Clock::now())) {
    log::warn("verbs: " + dev_.port_name() + " is active again after " +
              std::to_string(lasted->count()) + " ms");
  }
}

void VerbsTransport::check_port(Clock::time_point now) {
  if (!port_.past_budget(now)) return;
  ibv_port_attr a{};
  if (ibv_query_port(dev_.ctx, dev_.choice.port, &a) == 0 && a.state == IBV_PORT_ACTIVE) {
    on_port_active();  // its event was missed
    return;
  }
  const std::string why = dev_.port_name() + " has been down for longer than the retry budget of " +
                          std::to_string(port_.budget().count()) +
                          " ms (RDMACOLL_IB_TIMEOUT, RDMACOLL_IB_RETRY_CNT): check the link "
                          "(ibv_devinfo, the switch port)";
  port_.gave_up();
  for (int r = 0; r < world_; ++r) {
    if (r != me_) mark_failed(r, why);
  }
}

bool VerbsTransport::drain_async() {
  ibv_async_event ev;
  bool any = false;
  for (;;) {
    ++counters_.event_syscalls;
    if (ibv_get_async_event(dev_.ctx, &ev) != 0) break;
    any = true;
    std::string what = ibv_event_type_str(ev.event_type);
    const bool qp_event = ev.event_type == IBV_EVENT_QP_FATAL ||
                          ev.event_type == IBV_EVENT_QP_REQ_ERR ||
                          ev.event_type == IBV_EVENT_QP_ACCESS_ERR;
    for (int r = 0; r < world_ && qp_event; ++r) {
      const auto& lanes = peers_[r].lanes;
      const auto it = std::find_if(lanes.begin(), lanes.end(),
                                   [&](const Lane& l) { return l.qp == ev.element.qp; });
      if (it == lanes.end()) continue;
      const std::string why = "async event '" + what + "' on " + dev_.choice.device +
                              " QP to rank " + std::to_string(r);
      // A write the peer made with a key we no longer hold (its call outlived ours): the
      // responder's QP went to ERR, the pair is healthy.
      const bool data_lane = it - lanes.begin() < lanes_;
      if (ev.event_type == IBV_EVENT_QP_ACCESS_ERR && data_lane) {
        if (!peers_[r].data_paused && !peers_[r].failure) start_lane_reset(r, why);
      } else {
        mark_failed(r, why);
      }
    }
    // A port event concerns us only on our port (a dual-port HCA's other port may go down).
    const bool our_port = ev.element.port_num == dev_.choice.port;
    if (ev.event_type == IBV_EVENT_PORT_ERR && our_port) on_port_down();
    if (ev.event_type == IBV_EVENT_PORT_ACTIVE && our_port) on_port_active();
    const bool our_cq_lost = ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == dev_.cq;
    const bool our_srq_lost = ev.event_type == IBV_EVENT_SRQ_ERR && ev.element.srq == srq_;
    if (ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq_) on_receive_limit();
    if (ev.event_type == IBV_EVENT_DEVICE_FATAL || our_cq_lost || our_srq_lost) {
      for (int r = 0; r < world_; ++r) {
        if (r != me_) mark_failed(r, "async event '" + what + "' on " + dev_.choice.device);
      }
    }
    ibv_ack_async_event(&ev);
  }
  return any;
}

}  // namespace rdmacoll::transport::verbs_impl
