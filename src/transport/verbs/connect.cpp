// Connections: a pair's QPs are made when either side first uses the other, through the store
// (see Link in transport_impl.hpp); our address; the fabric settings the QPs take.

#include "transport/verbs/transport_impl.hpp"

namespace rdmacoll::transport::verbs_impl {

Bytes VerbsTransport::address(int my_rank, int world_size) {
  me_ = my_rank;
  world_ = world_size;
  const uint64_t peers = static_cast<uint64_t>(std::max(world_size - 1, 0));
  cq_size_ = verbs_plan::cq_entries(peers, static_cast<uint64_t>(qps_per_peer()));
  dev_.create_cq(cq_size_, my_rank);
  // Every QP takes its receives from one shared queue, as UCX's RC transports do; each peer is
  // granted its share when it connects (receive_credits.hpp).
  const uint64_t device_max =
      verbs_test_hooks::receive_queue_cap(static_cast<uint64_t>(std::max(dev_.attr.max_srq_wr, 1)));
  receive_capacity_ = verbs_plan::receive_capacity(peers, device_max);
  grant_ = verbs_plan::grant_per_peer(peers, receive_capacity_);
  if (peers * grant_ > receive_capacity_) {
    log::warn("verbs: the shared receive queue holds " + std::to_string(receive_capacity_) +
              " receives for " + std::to_string(peers) +
              " peers; a peer that takes its one credit while many others do may see the "
              "receiver not ready");
  }
  ibv_srq_init_attr srq_attr{};
  srq_attr.attr.max_wr = static_cast<uint32_t>(receive_capacity_);
  srq_attr.attr.max_sge = 1;
  srq_ = ibv_create_srq(dev_.pd, &srq_attr);
  if (!srq_) throw TransportError("verbs: ibv_create_srq failed: " + errno_text(errno));
  sends_.make_buffers(dev_.pd);
  peers_.resize(world_size);
  Bytes wire(sizeof(WireInfo));
  WireInfo info{};
  std::memcpy(info.gid, dev_.gid.raw, 16);
  info.lid = dev_.port.lid;
  info.mtu = static_cast<uint8_t>(dev_.mtu);
  info.link_layer = dev_.port.link_layer;
  info.lanes = static_cast<uint8_t>(lanes_);
  info.piece_bytes = static_cast<uint32_t>(piece_bytes_);
  info.gid_type = static_cast<uint8_t>(dev_.fabric.gid_type);
  info.pkey = dev_.fabric.pkey;
  const std::string device = dev_.choice.device + ":" + std::to_string(dev_.choice.port);
  std::snprintf(info.device, sizeof info.device, "%s", device.c_str());
  std::memcpy(wire.data(), &info, sizeof info);
  return encode_peer_address(static_cast<uint32_t>(::getpid()), host_key(), wire);
}

void VerbsTransport::connect(int my_rank, const std::vector<Bytes>& addresses) {
  if (!store_) throw TransportError("verbs: no store to connect peers through");
  connector_ = std::make_unique<Connector>(store_);
  std::vector<std::pair<std::string, pid_t>> hosts;
  for (int r = 0; r < world_; ++r) {
    PeerAddress a = decode_peer_address(addresses[r], r);
    hosts.emplace_back(a.host, static_cast<pid_t>(a.pid));
    if (r == my_rank) continue;
    WireInfo info{};
    if (a.payload.size() != sizeof info) {
      throw TransportError("verbs: rank " + std::to_string(r) +
                           " published no verbs address (is it using another transport?)");
    }
    std::memcpy(&info, a.payload.data(), sizeof info);
    if (info.lanes != lanes_) {
      throw TransportError("verbs: rank " + std::to_string(r) + " uses " +
                           std::to_string(info.lanes) + " QPs per peer and this rank " +
                           std::to_string(lanes_) +
                           "; set RDMACOLL_IB_QPS_PER_PEER the same on every rank");
    }
    if (info.piece_bytes < 4096) {
      throw TransportError("verbs: rank " + std::to_string(r) + " cuts writes into pieces of " +
                           std::to_string(info.piece_bytes) + " bytes (RDMACOLL_IB_CHUNK)");
    }
    const std::string clash =
        fabric::incompatibility(dev_.identity(), identity_of(info), "rank " + std::to_string(r));
    if (!clash.empty()) throw TransportError("verbs: " + clash);
    peers_[r].info = info;
  }
  grow_receives();
  liveness_.reset(hosts);
  for (int r = 0; r < world_; ++r) {
    if (r == my_rank) continue;
    if (auto gone = liveness_.watch(r)) mark_failed(r, *gone);
  }
}

uint32_t VerbsTransport::create_qp(Lane& lane) {
  ibv_qp_init_attr a{};
  a.send_cq = dev_.cq;
  a.recv_cq = dev_.cq;
  a.qp_type = IBV_QPT_RC;
  a.srq = srq_;
  a.cap.max_send_wr = kSendDepth;
  a.cap.max_send_sge = 1;
  a.cap.max_inline_data = inline_max_ == 0 ? 0 : kWantInline;
  lane.qp = ibv_create_qp(dev_.pd, &a);
  if (!lane.qp && a.cap.max_inline_data > 0) {  // the device offers no inline data
    a.cap.max_inline_data = 0;
    lane.qp = ibv_create_qp(dev_.pd, &a);
  }
  if (!lane.qp) throw TransportError("verbs: ibv_create_qp failed: " + errno_text(errno));
  inline_max_ = std::min(inline_max_, a.cap.max_inline_data);
  if (!placement_logged_) {
    // Eager slots check a checksum, so they do not depend on the answer; it is logged for
    // whoever compares fabrics (adaptive routing, packet spraying).
    placement_logged_ = true;
    const int in_order = ibv_query_qp_data_in_order(lane.qp, IBV_WR_RDMA_WRITE, 0);
    log::info(std::string("verbs: RDMA WRITE data ") +
              (in_order == 1 ? "lands in order" : "may land out of order") +
              " on this device (ibv_query_qp_data_in_order); eager slots verify each "
              "message's checksum either way");
  }
  return lane.qp->qp_num;
}

fabric::PortIdentity VerbsTransport::identity_of(const WireInfo& info) {
  fabric::PortIdentity id;
  id.nic = std::string(info.device, strnlen(info.device, sizeof info.device));
  id.link_layer = info.link_layer;
  id.gid_type = static_cast<fabric::GidType>(std::min<uint8_t>(info.gid_type, 2));
  id.pkey = info.pkey;
  std::memcpy(id.gid.data(), info.gid, 16);
  return id;
}

std::string VerbsTransport::store_key(const char* what, int from, int to) const {
  return std::string("rdmacoll/verbs/") + what + "/" + std::to_string(from) + "/" +
         std::to_string(to);
}

void VerbsTransport::touch(int peer) {
  Peer& p = peers_[peer];
  if (p.link != Link::Down || p.failure) return;
  if (auto why = peer == me_ ? std::nullopt : unreachable(peer)) {
    // The peer may find the route fine (each side resolves from its own port): it learns of
    // the refusal where it waits for our QP numbers, so the pair fails on both sides.
    const std::string refusal = std::string(kRefusal) + *why;
    connector_->post(store_key("qp", me_, peer), Bytes(refusal.begin(), refusal.end()));
    mark_failed(peer, "verbs: " + *why);
    return;
  }
  try {
    p.lanes.resize(static_cast<size_t>(qps_per_peer()));
    Bytes qpns(4 * static_cast<size_t>(qps_per_peer()) + kEagerWire);
    for (int l = 0; l < qps_per_peer(); ++l) {
      const uint32_t qpn = create_qp(p.lanes[l]);
      completions_.add_qp(qpn, peer, l);
      std::memcpy(qpns.data() + 4 * l, &qpn, 4);
    }
    eager_.make_block(peer, dev_.pd);
    const uint64_t ring = reinterpret_cast<uint64_t>(p.eager.block.get());
    const uint32_t rkey = p.eager.mr->rkey;
    const uint32_t slots = static_cast<uint32_t>(p.eager.slots);
    uint8_t* e = qpns.data() + 4 * qps_per_peer();
    std::memcpy(e, &ring, 8);
    std::memcpy(e + 8, &rkey, 4);
    std::memcpy(e + 12, &slots, 4);
    std::memcpy(e + 16, &grant_, 4);
    p.credits.our_grant = grant_;
    p.link = Link::Offered;
    ++connected_;
    grow_receives();  // before the peer can learn its grant
    connecting_.push_back(peer);
    connector_->post(store_key("qp", me_, peer), std::move(qpns));
    connector_->watch(store_key("qp", peer, me_));
  } catch (const std::exception& e) {
    mark_failed(peer, "connecting to rank " + std::to_string(peer) + ": " + e.what());
  }
}

// Only when the connector brought something: everything a connection waits for comes through
// it (or is a failure, which the next look finds).
bool VerbsTransport::advance_connections() {
  if (connecting_.empty()) return false;
  const uint64_t now = connector_->generation();
  if (now == connect_seen_) return false;
  connect_seen_ = now;
  bool any = false;
  std::erase_if(connecting_, [&](int peer) {
    const Link before = peers_[peer].link;
    const bool finished = advance(peer);
    any = any || finished || peers_[peer].link != before;
    return finished;
  });
  return any;
}

bool VerbsTransport::advance(int peer) {
  Peer& p = peers_[peer];
  if (p.failure) return true;  // mark_failed stopped the connector's watch
  try {
    if (p.link == Link::Offered) {
      const std::optional<Bytes> got = connector_->take(store_key("qp", peer, me_));
      if (!got) return false;
      const Bytes& qpns = *got;
      if (qpns.size() > kRefusal.size() &&
          std::equal(kRefusal.begin(), kRefusal.end(), qpns.begin())) {
        mark_failed(peer,
                    "verbs: rank " + std::to_string(peer) + " refused the pair: " +
                        std::string(qpns.begin() + static_cast<long>(kRefusal.size()), qpns.end()));
        return true;
      }
      const size_t want = 4 * static_cast<size_t>(qps_per_peer()) + kEagerWire;
      uint32_t their_slots = 0;
      uint32_t their_grant = 0;
      if (qpns.size() == want) {
        std::memcpy(&their_slots, qpns.data() + want - 8, 4);
        std::memcpy(&their_grant, qpns.data() + want - 4, 4);
      }
      if (qpns.size() != want || their_slots > eager_ring::kMaxSlots || their_grant == 0 ||
          their_grant > verbs_plan::kReceiveCredits) {
        mark_failed(peer, "rank " + std::to_string(peer) + " published " +
                              std::to_string(qpns.size()) + " bytes of QP numbers, " +
                              std::to_string(their_slots) + " eager slots and " +
                              std::to_string(their_grant) + " receive credits, not " +
                              std::to_string(want) + " bytes, at most " +
                              std::to_string(eager_ring::kMaxSlots) + " and 1 to " +
                              std::to_string(verbs_plan::kReceiveCredits) +
                              " (is it another build of rdmacoll?)");
        return true;
      }
      uint64_t their_ring = 0;
      uint32_t their_rkey = 0;
      std::memcpy(&their_ring, qpns.data() + 4 * qps_per_peer(), 8);
      std::memcpy(&their_rkey, qpns.data() + 4 * qps_per_peer() + 8, 4);
      // The peer writes into our ring only after it has seen our "up", published below.
      eager_.joined(peer, their_ring, their_rkey, static_cast<int>(their_slots));
      p.credits.their_grant = their_grant;
      verbs_test_hooks::delay_first_connection(me_);
      for (int l = 0; l < qps_per_peer(); ++l) {
        uint32_t qpn = 0;
        std::memcpy(&qpn, qpns.data() + 4 * l, 4);
        p.lanes[l].their_qpn = qpn;
        bring_up(peer, l, p.info, qpn);
      }
      p.link = Link::Up;
      connector_->post(store_key("up", me_, peer), Bytes{1});
      connector_->watch(store_key("up", peer, me_));
    }
    if (!connector_->take(store_key("up", peer, me_))) return false;
    p.link = Link::Ready;
    log::trace("verbs: connected to rank " + std::to_string(peer));
    return true;
  } catch (const std::exception& e) {
    mark_failed(peer, "connecting to rank " + std::to_string(peer) + ": " + e.what());
    return true;
  }
}

void VerbsTransport::bring_up(int r, int lane, const WireInfo& info, uint32_t their_qpn,
                              uint32_t psn) {
  ibv_qp* qp = peers_[r].lanes[lane].qp;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = static_cast<uint16_t>(dev_.fabric.pkey_index);
  a.port_num = static_cast<uint8_t>(dev_.choice.port);
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  check_modify(qp, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, r,
               "INIT");
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(fabric::path_mtu(dev_.mtu, info.mtu));
  a.dest_qp_num = their_qpn;
  a.rq_psn = psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = static_cast<uint8_t>(dev_.choice.port);
  a.ah_attr.dlid = info.lid;
  a.ah_attr.sl = static_cast<uint8_t>(dev_.fabric.service_level);
  std::array<uint8_t, 16> mine{}, theirs{};
  std::memcpy(mine.data(), dev_.gid.raw, 16);
  std::memcpy(theirs.data(), info.gid, 16);
  if (fabric::needs_grh(dev_.port.link_layer == IBV_LINK_LAYER_ETHERNET, dev_.fabric.grh_required,
                        info.lid, mine, theirs)) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, info.gid, 16);
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(dev_.choice.gid_index);
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.traffic_class = static_cast<uint8_t>(dev_.fabric.traffic_class);
  }
  check_modify(qp, a,
               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
               r, "RTR");
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = static_cast<uint8_t>(dev_.fabric.timeout);
  a.retry_cnt = static_cast<uint8_t>(dev_.fabric.retry_count);
  // Finite: with receive credits the shared queue never runs dry, so a peer that keeps saying
  // "receiver not ready" is broken, and the exhausted retry marks it failed (7 would retry
  // forever and stall everything behind it on the QP, keepalives included).
  a.rnr_retry = kRnrRetry;
  a.sq_psn = psn;
  a.max_rd_atomic = 1;
  check_modify(qp, a,
               IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                   IBV_QP_MAX_QP_RD_ATOMIC,
               r, "RTS");
}

void VerbsTransport::check_modify(ibv_qp* qp, ibv_qp_attr& a, int mask, int r, const char* state) {
  if (const int e = ibv_modify_qp(qp, &a, mask)) {
    throw TransportError("verbs: QP to rank " + std::to_string(r) + " on " + dev_.choice.device +
                         " cannot reach " + state + ": " + errno_text(e));
  }
}

}  // namespace rdmacoll::transport::verbs_impl
