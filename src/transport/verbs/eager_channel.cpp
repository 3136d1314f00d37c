// The eager channel: control messages written into the peer's ring of slots (eager_ring.hpp),
// credits, and the sleep epochs that tell a writer to ring.

#include "transport/verbs/transport_impl.hpp"

namespace rdmacoll::transport::verbs_impl {

// Every connected peer has a block: its receive credits come through it, with or without
// eager slots (RDMACOLL_IB_EAGER_SLOTS=0 makes a block of the lines alone).
void VerbsTransport::make_eager_ring(int peer) {
  Peer::Eager& e = peers_[peer].eager;
  const size_t bytes = eager_ring::block_bytes(eager_slots_);
  e.block.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)));
  if (!e.block)
    throw TransportError("verbs: no memory for the block of rank " + std::to_string(peer));
  std::memset(e.block.get(), 0, bytes);
  // No relaxed ordering: the receiver trusts a slot by its trailer, so it must land last.
  constexpr int kRingAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  e.mr = ibv_reg_mr(dev_.pd, e.block.get(), bytes, kRingAccess);
  if (!e.mr) throw registration_error(bytes, errno);
  e.slots = eager_slots_;
}

bool VerbsTransport::eager_slot_free(Peer& p) {
  Peer::Eager& e = p.eager;
  if (e.their_slots == 0 || p.failure) return false;
  uint64_t word = 0;
  __atomic_load(
      reinterpret_cast<const uint64_t*>(e.block.get() + eager_ring::credit_in_offset(e.slots)),
      &word, __ATOMIC_ACQUIRE);
  // A credit above what we sent is a lie that would only cost the peer its own slots.
  const uint64_t credit = e.credit.read(std::min(word, e.sent));
  return e.sent - credit < static_cast<uint64_t>(e.their_slots);
}

bool VerbsTransport::poll_eager(int peer) {
  Peer& p = peers_[peer];
  Peer::Eager& e = p.eager;
  if (p.failure) return false;
  bool any = false;
  try {
    for (;;) {
      const uint8_t* slot =
          e.block.get() + (e.taken % static_cast<uint64_t>(e.slots)) * eager_ring::kSlotBytes;
      const auto m = eager_ring::read(slot, e.taken + 1);
      if (!m) break;
      ++e.taken;
      any = true;
      // A credit above what we sent is a lie that would only cost the peer its own slots;
      // it is ignored all the same.
      const uint64_t credit = eager_ring::widen_credit(m->credit, e.sent);
      if (credit <= e.sent) e.credit.read(credit);
      const uint64_t receives = eager_ring::widen_receives(m->receives, p.credits.used);
      if (receives <= p.credits.used) p.credits.returned.read(receives);
      if (slept_to_timeout_) ++counters_.eager_late;  // it landed and no ring woke us
      dispatch_control(peer, m->tag, m->payload);
    }
  } catch (const std::exception& ex) {
    mark_failed(peer,
                "rank " + std::to_string(peer) + " wrote into its eager slots here: " + ex.what());
    return true;
  }
  if (e.taken - e.credited >= credit_every_) return_credit(peer);
  return any;
}

void VerbsTransport::return_credit(int peer) {
  Peer::Eager& e = peers_[peer].eager;
  e.credited = e.taken;
  write_word(peer, Word::EagerCredit, e.taken);
}

void VerbsTransport::announce_sleep() {
  sleep_announced_ = true;
  ++sleep_epoch_;
  ++counters_.eager_sleeps;
  for (int peer : eager_peers_) {
    if (!peers_[peer].failure) write_word(peer, Word::SleepEpoch, sleep_epoch_);
  }
}

void VerbsTransport::wake_if_asleep(int peer) {
  Peer& p = peers_[peer];
  Peer::Eager& e = p.eager;
  uint64_t word = 0;
  __atomic_load(
      reinterpret_cast<const uint64_t*>(e.block.get() + eager_ring::epoch_in_offset(e.slots)),
      &word, __ATOMIC_ACQUIRE);
  const uint64_t epoch = e.epoch.read(word);
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

namespace {
// A word's lines in a block of `slots` slots: where the peer writes it in (`in`) and where ours
// is kept as the source of our writes of it (`out`).
struct WordLines {
  size_t in, out;
};
WordLines lines_of(Word w, int slots) {
  switch (w) {
    case Word::EagerCredit:
      return {eager_ring::credit_in_offset(slots), eager_ring::credit_out_offset(slots)};
    case Word::SleepEpoch:
      return {eager_ring::epoch_in_offset(slots), eager_ring::epoch_out_offset(slots)};
    case Word::ReceiveCredit:
      break;
  }
  return {eager_ring::receives_in_offset(slots), eager_ring::receives_out_offset(slots)};
}
}  // namespace

void VerbsTransport::write_word(int peer, Word word, uint64_t value) {
  const Peer::Eager& e = peers_[peer].eager;
  __atomic_store(reinterpret_cast<uint64_t*>(e.block.get() + lines_of(word, e.slots).out), &value,
                 __ATOMIC_RELEASE);
  if (peers_[peer].eager.writers[static_cast<int>(word)].changed()) post_word(peer, word);
}

void VerbsTransport::post_word(int peer, Word word) {
  const Peer::Eager& e = peers_[peer].eager;
  if (word == Word::EagerCredit) ++counters_.eager_credit_writes;
  if (word == Word::ReceiveCredit) ++counters_.receive_credit_writes;
  const uint64_t from = reinterpret_cast<uint64_t>(e.block.get() + lines_of(word, e.slots).out);
  const uint32_t lkey = e.mr->lkey;
  const uint64_t to = e.their_ring + lines_of(word, e.their_block_slots).in;
  const uint32_t rkey = e.their_rkey;
  post_unawaited_write(
      peer,
      [=](Staged& st) {
        st.sge = {from, 8, lkey};
        st.wr.opcode = IBV_WR_RDMA_WRITE;
        st.wr.wr.rdma.remote_addr = to;
        st.wr.wr.rdma.rkey = rkey;
      },
      word);
}

void VerbsTransport::word_landed(int peer, Word word) {
  Peer& p = peers_[peer];
  if (p.failure) return;
  if (p.eager.writers[static_cast<int>(word)].landed()) post_word(peer, word);
  if (word != Word::SleepEpoch) wake_if_asleep(peer);
}

}  // namespace rdmacoll::transport::verbs_impl
