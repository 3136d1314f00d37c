// The send side (send_queue.hpp): staging, doorbells, retiring completions.

#include "transport/verbs/send_queue.hpp"

#include <algorithm>
#include <cerrno>
#include <iterator>

#include "transport/verbs/device.hpp"  // registration_error

namespace rdmacoll::transport::verbs_impl {

void SendQueue::make_buffers(ibv_pd* pd) {
  pool_.assign(static_cast<size_t>(kSendBuffers) * kCtrlBytes, 0);
  // An int: verbs.h's ibv_reg_mr macro ANDs the flags with another enum's, which clang rejects
  // in C++20 (-Wdeprecated-enum-enum-conversion).
  constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE;
  buffers_mr_ = ibv_reg_mr(pd, pool_.data(), pool_.size(), kAccess);
  if (!buffers_mr_) throw verbs_device::registration_error(pool_.size(), errno);
  for (int s = 0; s < kSendBuffers; ++s)
    free_.push_back(s);
}

int SendQueue::take_buffer(VerbsRequest& req) {
  if (free_.empty()) return -1;
  req.send_slot = free_.front();
  free_.pop_front();
  return req.send_slot;
}

uint64_t SendQueue::track(const std::shared_ptr<VerbsRequest>& req) {
  const uint64_t id = next_id_++;
  inflight_[id] = req;
  return id;
}

VerbsRequest* SendQueue::find(uint64_t id) {
  const auto it = inflight_.find(id);
  return it == inflight_.end() ? nullptr : it->second.get();
}

void SendQueue::submit(int peer, int lane, Build build, bool urgent) {
  Lane& l = peers_[peer].lanes[lane];
  auto& queue = urgent ? l.urgent : l.backlog;
  if (queue.empty() && owner_.lane_open(peer, lane) && stage(peer, lane, build, urgent)) return;
  if (!l.waiting()) backlogged_.emplace_back(peer, lane);
  queue.push_back(std::move(build));
}

bool SendQueue::stage(int peer, int lane, Build& build, bool urgent) {
  Lane& l = peers_[peer].lanes[lane];
  const int depth = urgent ? kSendDepth : kSendDepth - kUrgentPerQp;
  const int cap = urgent ? kSendsInFlight : kSendsInFlight - kUrgentInFlight;
  if (l.in_queue() >= static_cast<size_t>(depth) || in_flight_ >= cap) return false;
  Staged st;
  if (!build(st)) return false;
  if (l.staged.empty()) staged_.emplace_back(peer, lane);
  l.staged.push_back(std::move(st));
  ++in_flight_;
  return true;
}

void SendQueue::flush(int peer, int lane) {
  Lane& p = peers_[peer].lanes[lane];
  const size_t n = p.staged.size();
  if (n == 0) return;
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
  if (e == 0) {
    p.staged.clear();
    return;
  }
  // Work requests from `bad` on were not posted: they leave `posted` and go back with their
  // send buffers and caps below (the failure retires what is left).
  size_t unposted = n;
  for (size_t i = 0; i < n; ++i) {
    if (&p.staged[i].wr == bad) unposted = n - i;
  }
  std::vector<uint64_t> requests;
  for (size_t i = 0; i < unposted && !p.posted.empty(); ++i) {
    requests.push_back(p.posted.back().request);
    p.posted.pop_back();
    --in_flight_;
  }
  p.staged.clear();
  owner_.post_failed(peer, e);
  for (uint64_t r : requests)
    complete_one(peer, r, false);
}

bool SendQueue::flush_all() {
  if (staged_.empty()) return false;
  std::vector<std::pair<int, int>> lanes;
  lanes.swap(staged_);
  for (const auto& [peer, lane] : lanes)
    flush(peer, lane);
  return true;
}

void SendQueue::drain_backlogs() {
  if (backlogged_.empty()) return;
  std::erase_if(backlogged_, [&](const std::pair<int, int>& pl) {
    const auto [peer, lane] = pl;
    Lane& l = peers_[peer].lanes[lane];
    if (owner_.lane_open(peer, lane)) {
      while (!l.urgent.empty() && stage(peer, lane, l.urgent.front(), true))
        l.urgent.pop_front();
      while (!l.backlog.empty() && stage(peer, lane, l.backlog.front(), false))
        l.backlog.pop_front();
    }
    return !l.waiting();
  });
}

void SendQueue::complete_through(int peer, int lane, uint32_t number, bool ok) {
  Lane& p = peers_[peer].lanes[lane];
  auto end = std::find_if(p.posted.begin(), p.posted.end(), [&](const Posted& x) {
    return x.number == number && (x.signaled || !ok);
  });
  if (end == p.posted.end()) return;
  std::vector<uint64_t> done;
  for (auto it = p.posted.begin(); it != std::next(end); ++it)
    done.push_back(it->request);
  p.posted.erase(p.posted.begin(), std::next(end));
  in_flight_ -= static_cast<int>(done.size());
  for (uint64_t d : done)
    complete_one(peer, d, ok);
}

void SendQueue::complete_one(int peer, uint64_t id, bool ok) {
  auto it = inflight_.find(id);
  if (it == inflight_.end()) return;
  VerbsRequest& req = *it->second;
  if (req.send_slot >= 0) {
    free_.push_back(req.send_slot);
    req.send_slot = -1;
  }
  if (--req.pieces > 0 && ok) return;
  // Out of inflight_ first: what follows may post (and so insert into it).
  const std::shared_ptr<VerbsRequest> done = std::move(it->second);
  inflight_.erase(it);
  if (done->state() == Request::State::Pending) {
    if (ok) {
      done->complete();
    } else {
      done->fail(peers_[peer].failure.value_or("send to rank " + std::to_string(peer) + " failed"));
    }
  }
  if (ok) owner_.landed(peer, *done);
}

std::vector<uint64_t> SendQueue::drop(Lane& lane, bool posted) {
  std::vector<uint64_t> ids;
  if (posted) {
    for (const Posted& x : lane.posted)
      ids.push_back(x.request);
    in_flight_ -= static_cast<int>(lane.posted.size());
    lane.posted.clear();
  }
  for (const Staged& st : lane.staged)
    ids.push_back(st.request);
  in_flight_ -= static_cast<int>(lane.staged.size());
  lane.staged.clear();
  return ids;
}

void SendQueue::fail_peer(int peer, const std::string& why) {
  for (auto& [id, req] : inflight_) {
    if (req->peer() == peer && req->state() == Request::State::Pending) req->fail(why);
  }
  for (Lane& lane : peers_[peer].lanes) {
    lane.backlog.clear();
    lane.urgent.clear();
  }
}

}  // namespace rdmacoll::transport::verbs_impl
