// The shared receive queue: receives posted in registered chunks as peers connect, posted again
// in one chain per progress(), and the credits that keep it from running dry (the arithmetic and
// why: receive_credits.hpp).

#include "transport/verbs/transport_impl.hpp"

namespace rdmacoll::transport::verbs_impl {

using verbs_plan::kReceiveChunk;

uint8_t* VerbsTransport::recv_buffer(int slot) {
  const auto s = static_cast<uint64_t>(slot);
  return receive_chunks_[s / kReceiveChunk].bytes.data() + (s % kReceiveChunk) * kCtrlBytes;
}

uint32_t VerbsTransport::recv_lkey(int slot) const {
  return receive_chunks_[static_cast<uint64_t>(slot) / kReceiveChunk].mr->lkey;
}

void VerbsTransport::grow_receives() {
  const uint64_t want = verbs_plan::receives_posted(connected_, grant_, receive_capacity_);
  while (receives_posted_ < want) {
    ReceiveChunk chunk;
    chunk.bytes.assign(kReceiveChunk * kCtrlBytes, 0);
    constexpr int kReceiveAccess = IBV_ACCESS_LOCAL_WRITE;  // an int: the macro ORs in another enum
    chunk.mr = ibv_reg_mr(dev_.pd, chunk.bytes.data(), chunk.bytes.size(), kReceiveAccess);
    if (!chunk.mr) throw registration_error(chunk.bytes.size(), errno);
    receive_chunks_.push_back(std::move(chunk));
    // All of it, or what a device with a smaller queue holds.
    const uint64_t n = std::min(kReceiveChunk, want - receives_posted_);
    for (uint64_t i = 0; i < n; ++i)
      repost_.push_back(static_cast<int>(receives_posted_ + i));
    receives_posted_ += n;
    repost_receives();
  }
}

void VerbsTransport::repost_receives() {
  if (repost_.empty()) return;
  // One chain (one call, one doorbell where the provider rings one), built in arrays the
  // transport keeps: this runs on every progress() that took a receive.
  const size_t n = repost_.size();
  repost_sges_.resize(n);
  repost_wrs_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int slot = repost_[i];
    repost_sges_[i] = {reinterpret_cast<uint64_t>(recv_buffer(slot)),
                       static_cast<uint32_t>(kCtrlBytes), recv_lkey(slot)};
    repost_wrs_[i] = {};
    repost_wrs_[i].wr_id = make_wr_id(kRecvWr, 0, static_cast<uint32_t>(slot));
    repost_wrs_[i].sg_list = &repost_sges_[i];
    repost_wrs_[i].num_sge = 1;
    repost_wrs_[i].next = i + 1 < n ? &repost_wrs_[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  const int e = ibv_post_srq_recv(srq_, repost_wrs_.data(), &bad);
  repost_.clear();
  if (e) {
    for (int r = 0; r < world_; ++r) {
      if (r != me_) mark_failed(r, "ibv_post_srq_recv failed: " + errno_text(e));
    }
    return;
  }
  arm_receive_limit();
}

// The device reports (IBV_EVENT_SRQ_LIMIT_REACHED) when the queue falls to kReceiveLimit: with
// every peer within its credits that happens only when nearly all of them hold every credit at
// once, or when the queue is oversubscribed (more peers than it holds). It is counted and logged
// once for whoever sizes a job; armed again once the queue has been refilled.
void VerbsTransport::arm_receive_limit() {
  if (receive_limit_armed_ || receives_posted_ <= kReceiveLimit) return;
  ibv_srq_attr a{};
  a.srq_limit = kReceiveLimit;
  if (ibv_modify_srq(srq_, &a, IBV_SRQ_LIMIT) == 0) receive_limit_armed_ = true;
}

void VerbsTransport::on_receive_limit() {
  receive_limit_armed_ = false;
  ++counters_.receive_queue_low;
  if (counters_.receive_queue_low == 1) {
    log::info("verbs: the shared receive queue fell to " + std::to_string(kReceiveLimit) + " of " +
              std::to_string(receives_posted_) + " receives (" + std::to_string(connected_) +
              " peers connected, " + std::to_string(grant_) + " credits each)");
  }
}

bool VerbsTransport::take_receive_credit(int peer) {
  Peer& p = peers_[peer];
  uint64_t word = 0;
  __atomic_load(reinterpret_cast<const uint64_t*>(p.eager.block.get() +
                                                  eager_ring::receives_in_offset(p.eager.slots)),
                &word, __ATOMIC_ACQUIRE);
  if (!p.credits.may_take(word)) {
    ++counters_.credit_waits;
    return false;
  }
  ++p.credits.used;
  return true;
}

void VerbsTransport::hand_back_credits() {
  std::erase_if(owing_, [&](int peer) {
    Peer& p = peers_[peer];
    auto& c = p.credits;
    // Nothing owed any more: a message to the peer carried the credits (eager_ring.hpp).
    if (!p.failure && c.arrived > c.handed_back && !c.owes_credits()) return false;
    if (!p.failure && c.arrived > c.handed_back) {
      c.handed_back = c.arrived;
      // A peer asleep with work waiting for these credits is rung once they have landed.
      eager_.write_word(peer, Word::ReceiveCredit, c.handed_back);
    }
    c.listed_owing = false;
    return true;
  });
}

}  // namespace rdmacoll::transport::verbs_impl
