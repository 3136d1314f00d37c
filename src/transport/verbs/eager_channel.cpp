// The eager channel: control messages written into the peer's ring of slots (eager_ring.hpp),
// credits, and the sleep epochs that tell a writer to ring.

#include "transport/verbs/transport_impl.hpp"

namespace rdmacoll::transport::verbs_impl {

// Every connected peer has a block: its receive credits come through it, with or without
// eager slots (RDMACOLL_IB_EAGER_SLOTS=0 makes a block of the lines alone).
void VerbsTransport::make_eager_ring(int peer) {
  Peer::Eager& e = peers_[peer].eager;
  const size_t bytes = eager_ring::block_bytes(eager_slots_);
  e.block = static_cast<uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
  if (!e.block)
    throw TransportError("verbs: no memory for the block of rank " + std::to_string(peer));
  std::memset(e.block, 0, bytes);
  // No relaxed ordering: the receiver trusts a slot by its trailer, so it must land last.
  constexpr int kRingAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  e.mr = ibv_reg_mr(pd_, e.block, bytes, kRingAccess);
  if (!e.mr) throw registration_error(bytes, errno);
  e.slots = eager_slots_;
}

bool VerbsTransport::eager_slot_free(const Peer& p) {
  const Peer::Eager& e = p.eager;
  if (e.their_slots == 0 || p.failure) return false;
  uint64_t credit = 0;
  __atomic_load(reinterpret_cast<const uint64_t*>(e.block + eager_ring::credit_in_offset(e.slots)),
                &credit, __ATOMIC_ACQUIRE);
  return e.sent - std::max(credit, e.credit) < static_cast<uint64_t>(e.their_slots);
}

bool VerbsTransport::poll_eager(int peer) {
  Peer& p = peers_[peer];
  Peer::Eager& e = p.eager;
  if (p.failure) return false;
  bool any = false;
  try {
    for (;;) {
      const uint8_t* slot =
          e.block + (e.taken % static_cast<uint64_t>(e.slots)) * eager_ring::kSlotBytes;
      const auto m = eager_ring::read(slot, e.taken + 1);
      if (!m) break;
      ++e.taken;
      any = true;
      // A credit above what we sent is a lie that would only cost the peer its own slots;
      // it is ignored all the same.
      const uint64_t credit = eager_ring::widen_credit(m->credit, e.sent);
      if (credit <= e.sent) e.credit = std::max(e.credit, credit);
      if (slept_to_timeout_) ++counters_.eager_late;  // it landed and no ring woke us
      dispatch_control(peer, m->tag, m->payload);
    }
  } catch (const std::exception& ex) {
    mark_failed(peer,
                "rank " + std::to_string(peer) + " wrote into its eager slots here: " + ex.what());
    return true;
  }
  if (e.taken - e.credited >= credit_every_ && !hold_credits_) return_credit(peer);
  return any;
}

void VerbsTransport::return_credit(int peer) {
  Peer::Eager& e = peers_[peer].eager;
  e.credited = e.taken;
  ++counters_.eager_credit_writes;
  write_word(peer, eager_ring::credit_out_offset(e.slots), e.taken,
             eager_ring::credit_in_offset(e.their_slots));
}

void VerbsTransport::announce_sleep() {
  sleep_announced_ = true;
  ++sleep_epoch_;
  ++counters_.eager_sleeps;
  for (int peer : eager_peers_) {
    const Peer::Eager& e = peers_[peer].eager;
    if (peers_[peer].failure) continue;
    write_word(peer, eager_ring::epoch_out_offset(e.slots), sleep_epoch_,
               eager_ring::epoch_in_offset(e.their_slots));
  }
}

void VerbsTransport::wake_if_asleep(int peer) {
  Peer& p = peers_[peer];
  Peer::Eager& e = p.eager;
  uint64_t epoch = 0;
  __atomic_load(reinterpret_cast<const uint64_t*>(e.block + eager_ring::epoch_in_offset(e.slots)),
                &epoch, __ATOMIC_ACQUIRE);
  if (epoch <= e.rung || p.failure) return;
  // The ring takes one of the peer's receives. Without a credit the peer has our earlier
  // receive-taking requests unread in its CQ, and they wake it.
  if (!take_receive_credit(peer)) return;
  e.rung = epoch;
  ++counters_.eager_rings;
  post_unawaited_write(peer, [](Staged& st) {
    st.wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;  // zero bytes: no address or key is checked
    st.wr.imm_data = htonl(eager_ring::kImm);
  });
}

void VerbsTransport::write_word(int peer, size_t our_offset, uint64_t value, size_t their_offset) {
  const Peer::Eager& e = peers_[peer].eager;
  uint8_t* out = e.block + our_offset;
  __atomic_store(reinterpret_cast<uint64_t*>(out), &value, __ATOMIC_RELEASE);
  const uint64_t from = reinterpret_cast<uint64_t>(out);
  const uint32_t lkey = e.mr->lkey;
  const uint64_t to = e.their_ring + their_offset;
  const uint32_t rkey = e.their_rkey;
  post_unawaited_write(peer, [=](Staged& st) {
    st.sge = {from, 8, lkey};
    st.wr.opcode = IBV_WR_RDMA_WRITE;
    st.wr.wr.rdma.remote_addr = to;
    st.wr.wr.rdma.rkey = rkey;
  });
}

}  // namespace rdmacoll::transport::verbs_impl
