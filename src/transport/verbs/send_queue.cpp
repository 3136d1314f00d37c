// The send side: work is staged per lane, posted in chains with one doorbell, and retired by
// the completion that names it (RC completes in order).

#include "transport/verbs/transport_impl.hpp"

namespace rdmacoll::transport::verbs_impl {

uint64_t VerbsTransport::track(const std::shared_ptr<VerbsRequest>& req) {
  const uint64_t id = next_id_++;
  inflight_[id] = req;
  return id;
}

void VerbsTransport::submit(int peer, int lane, std::function<bool(Staged&)> build, bool urgent) {
  Peer& p = peers_[peer];
  touch(peer);
  if (p.failure) {
    fail_all_of(peer);
    return;
  }
  Lane& l = p.lanes[lane];
  auto& queue = urgent ? l.urgent : l.backlog;
  if (p.link == Link::Ready && !data_lane_paused(peer, lane) && queue.empty() &&
      stage(peer, lane, build, urgent))
    return;
  if (!l.waiting()) backlogged_.emplace_back(peer, lane);
  queue.push_back(std::move(build));
}

bool VerbsTransport::stage(int peer, int lane, std::function<bool(Staged&)>& build, bool urgent) {
  Lane& l = peers_[peer].lanes[lane];
  // Nothing new goes to a port that is down: it waits in its queue until the port is back
  // (or fails with the peers past the retry budget). Posting would only spend the QP's
  // retries, and a software device (rxe) fails a QP whose send finds no route at once.
  if (port_.down()) return false;
  const int depth = urgent ? kSendDepth : kSendDepth - kUrgentPerQp;
  const int cap = urgent ? kSendsInFlight : kSendsInFlight - kUrgentInFlight;
  if (l.in_queue() >= static_cast<size_t>(depth) || sends_in_flight_ >= cap) return false;
  Staged st;
  if (!build(st)) return false;
  if (l.staged.empty()) staged_lanes_.emplace_back(peer, lane);
  l.staged.push_back(std::move(st));
  ++sends_in_flight_;
  return true;
}

bool VerbsTransport::flush(int peer, int lane) {
  Lane& p = peers_[peer].lanes[lane];
  const size_t n = p.staged.size();
  if (n == 0) return false;
  for (size_t i = 0; i < n; ++i) {
    Staged& st = p.staged[i];
    if (!st.inline_bytes.empty()) st.sge.addr = reinterpret_cast<uint64_t>(st.inline_bytes.data());
    st.wr.sg_list = st.sge.length ? &st.sge : nullptr;  // a zero-byte write has no sge
    st.wr.num_sge = st.sge.length ? 1 : 0;
    st.wr.next = i + 1 < n ? &p.staged[i + 1].wr : nullptr;
    const bool signal = i + 1 == n || ++p.since_signal >= kSignalEvery;
    if (signal) {
      st.wr.send_flags |= IBV_SEND_SIGNALED;
      p.since_signal = 0;
      ++counters_.signaled;
    }
    const uint32_t number = p.next_number++;
    // The lane and number are the queue's to set: a builder knows neither.
    constexpr uint64_t kLaneAndNumber = (uint64_t{0x3f} << 56) | 0xffffffff;
    st.wr.wr_id = (st.wr.wr_id & ~kLaneAndNumber) | (static_cast<uint64_t>(lane) << 56) | number;
    p.posted.push_back({st.request, number, signal});
  }
  ++counters_.doorbells;
  counters_.work_requests += n;
  ibv_send_wr* bad = nullptr;
  const int e = ibv_post_send(p.qp, &p.staged[0].wr, &bad);
  if (e) {
    // Work requests from `bad` on were not posted: they leave `posted` and go back with
    // their send buffers and caps below (mark_failed retires what is left).
    size_t unposted = n;
    for (size_t i = 0; i < n; ++i) {
      if (&p.staged[i].wr == bad) unposted = n - i;
    }
    std::vector<uint64_t> requests;
    for (size_t i = 0; i < unposted && !p.posted.empty(); ++i) {
      requests.push_back(p.posted.back().request);
      p.posted.pop_back();
      --sends_in_flight_;
    }
    p.staged.clear();
    mark_failed(peer, "ibv_post_send to rank " + std::to_string(peer) + " on " +
                          dev_.choice.device + " failed: " + errno_text(e));
    for (uint64_t r : requests)
      complete_one(peer, r, false);
    return true;
  }
  p.staged.clear();
  return true;
}

void VerbsTransport::keepalive() {
  std::vector<bool> waited(world_, false);
  for (const auto& [key, req] : pending_recvs_)
    waited[key.first] = true;
  for (const auto& [key, req] : expects_)
    waited[key.first] = true;
  for (int r = 0; r < world_; ++r) {
    Peer& p = peers_[r];
    if (!waited[r] || r == me_ || p.failure || p.link != Link::Ready || !p.idle()) continue;
    ++counters_.keepalives;
    log::trace("verbs: keepalive write to rank " + std::to_string(r));
    post_unawaited_write(r, [](Staged& st) {
      st.wr.opcode = IBV_WR_RDMA_WRITE;  // zero bytes: no address or key is checked
    });
  }
}

bool VerbsTransport::flush_all() {
  if (staged_lanes_.empty()) return false;
  std::vector<std::pair<int, int>> lanes;
  lanes.swap(staged_lanes_);
  for (const auto& [peer, lane] : lanes)
    flush(peer, lane);
  return true;
}

void VerbsTransport::drain_backlogs() {
  if (backlogged_.empty()) return;
  std::erase_if(backlogged_, [&](const std::pair<int, int>& pl) {
    const auto [peer, lane] = pl;
    Peer& p = peers_[peer];
    Lane& l = p.lanes[lane];
    if (p.link == Link::Ready && !p.failure && !data_lane_paused(peer, lane)) {
      while (!l.urgent.empty() && stage(peer, lane, l.urgent.front(), true))
        l.urgent.pop_front();
      while (!l.backlog.empty() && stage(peer, lane, l.backlog.front()))
        l.backlog.pop_front();
    }
    return !l.waiting();
  });
}

void VerbsTransport::complete_through(int peer, int lane, uint32_t number, bool ok) {
  Lane& p = peers_[peer].lanes[lane];
  auto end = std::find_if(p.posted.begin(), p.posted.end(), [&](const Posted& x) {
    return x.number == number && (x.signaled || !ok);
  });
  if (end == p.posted.end()) return;
  std::vector<uint64_t> done;
  for (auto it = p.posted.begin(); it != std::next(end); ++it)
    done.push_back(it->request);
  p.posted.erase(p.posted.begin(), std::next(end));
  sends_in_flight_ -= static_cast<int>(done.size());
  for (uint64_t d : done)
    complete_one(peer, d, ok);
}

void VerbsTransport::complete_one(int peer, uint64_t id, bool ok) {
  Peer& p = peers_[peer];
  auto it = inflight_.find(id);
  if (it == inflight_.end()) return;
  auto* req = static_cast<VerbsRequest*>(it->second.get());
  if (req->send_slot >= 0) {
    free_send_.push_back(req->send_slot);
    req->send_slot = -1;
  }
  if (--req->pieces > 0 && ok) return;
  // Out of inflight_ first: what follows may post (and so insert into it).
  const std::shared_ptr<VerbsRequest> done = std::move(it->second);
  inflight_.erase(it);
  if (ok && done->state() == Request::State::Pending) done->complete();
  if (!ok && done->state() == Request::State::Pending) {
    done->fail(p.failure.value_or("send to rank " + std::to_string(peer) + " failed"));
  }
  if (ok && done->eager) wake_if_asleep(peer);  // it has landed: now look at the epoch
  if (ok && done->word) word_landed(peer, *done->word);
}

}  // namespace rdmacoll::transport::verbs_impl
