// The eager channel (eager_channel.hpp): rings of slots, their credits, sleep epochs and rings.

#include "transport/verbs/eager_channel.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "transport/verbs/device.hpp"  // registration_error

namespace rdmacoll::transport::verbs_impl {

EagerChannel::EagerChannel(Owner& owner, std::vector<Peer>& peers, Transport::Counters& counters,
                           int slots)
    : owner_(owner),
      peers_(peers),
      counters_(counters),
      slots_(slots),
      // A credit write goes back after half a ring taken without a message to carry it.
      credit_every_(static_cast<uint64_t>(std::max(1, slots / 2))) {}

void EagerChannel::make_block(int peer, ibv_pd* pd) {
  Peer::Eager& e = peers_[peer].eager;
  const size_t bytes = eager_ring::block_bytes(slots_);
  e.block.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)));
  if (!e.block)
    throw TransportError("verbs: no memory for the block of rank " + std::to_string(peer));
  std::memset(e.block.get(), 0, bytes);
  // No relaxed ordering: the receiver trusts a slot by its trailer, so it must land last.
  constexpr int kRingAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  e.mr = ibv_reg_mr(pd, e.block.get(), bytes, kRingAccess);
  if (!e.mr) throw verbs_device::registration_error(bytes, errno);
  e.lkey = e.mr->lkey;
  e.slots = slots_;
}

void EagerChannel::joined(int peer, uint64_t ring, uint32_t rkey, int their_slots) {
  Peer::Eager& e = peers_[peer].eager;
  e.their_ring = ring;
  e.their_rkey = rkey;
  e.their_block_slots = their_slots;
  if (e.slots > 0 && their_slots > 0) {
    e.their_slots = their_slots;
    // The peer writes into our ring only after it has seen our "up"; it has no sleep epoch
    // of ours yet, so the next sleep announces one to all.
    ring_peers_.push_back(peer);
    announced_ = false;
  }
}

bool EagerChannel::slot_free(int peer) {
  Peer& p = peers_[peer];
  Peer::Eager& e = p.eager;
  if (e.their_slots == 0 || p.failure) return false;
  uint64_t word = 0;
  __atomic_load(
      reinterpret_cast<const uint64_t*>(e.block.get() + eager_ring::credit_in_offset(e.slots)),
      &word, __ATOMIC_ACQUIRE);
  // A credit above what we sent is a lie that would only cost the peer its own slots.
  const uint64_t credit = e.credit.read(std::min(word, e.sent));
  if (e.sent - credit < static_cast<uint64_t>(e.their_slots)) return true;
  ++counters_.eager_slot_waits;
  return false;
}

Bytes EagerChannel::frame(int peer, uint64_t tag, std::span<const uint8_t> payload) const {
  const Peer& p = peers_[peer];
  Bytes framed(eager_ring::framed_bytes(payload.size()));
  // It carries our credits to the peer, for its messages and its receive-taking requests: no
  // separate credit write while we both send.
  eager_ring::pack(framed.data(), p.eager.sent + 1, tag, payload.data(), payload.size(),
                   static_cast<uint32_t>(p.eager.taken), static_cast<uint16_t>(p.credits.arrived));
  return framed;
}

void EagerChannel::take_slot(int peer, Staged& st) {
  Peer& p = peers_[peer];
  Peer::Eager& e = p.eager;
  // A plain write: the receiver polls its ring (and is rung if it sleeps, eager_ring.hpp).
  st.wr.opcode = IBV_WR_RDMA_WRITE;
  st.wr.wr.rdma.remote_addr =
      e.their_ring + (e.sent % static_cast<uint64_t>(e.their_slots)) * eager_ring::kSlotBytes;
  st.wr.wr.rdma.rkey = e.their_rkey;
  ++e.sent;
  e.credited = e.taken;
  p.credits.handed_back = p.credits.arrived;
  ++counters_.eager_writes;
}

bool EagerChannel::poll() {
  bool any = false;
  for (int peer : ring_peers_)
    any = poll(peer) || any;
  slept_to_timeout_ = false;
  return any;
}

bool EagerChannel::poll(int peer) {
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
      owner_.on_message(peer, m->tag, m->payload);
    }
  } catch (const std::exception& ex) {
    owner_.ring_broken(
        peer, "rank " + std::to_string(peer) + " wrote into its eager slots here: " + ex.what());
    return true;
  }
  if (e.taken - e.credited >= credit_every_) {
    e.credited = e.taken;
    write_word(peer, Word::EagerCredit, e.taken);
  }
  return any;
}

void EagerChannel::announce_sleep() {
  announced_ = true;
  ++epoch_;
  ++counters_.eager_sleeps;
  for (int peer : ring_peers_) {
    if (!peers_[peer].failure) write_word(peer, Word::SleepEpoch, epoch_);
  }
}

void EagerChannel::wake_if_asleep(int peer) {
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
  if (!owner_.take_receive_credit(peer)) return;
  e.rung = epoch;
  ++counters_.eager_rings;
  owner_.post_own_write(
      peer,
      [](Staged& st) {
        st.wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;  // zero bytes: no address or key is checked
        st.wr.imm_data = htonl(eager_ring::kImm);
      },
      std::nullopt);
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

void EagerChannel::write_word(int peer, Word word, uint64_t value) {
  Peer::Eager& e = peers_[peer].eager;
  __atomic_store(reinterpret_cast<uint64_t*>(e.block.get() + lines_of(word, e.slots).out), &value,
                 __ATOMIC_RELEASE);
  if (e.writers[static_cast<int>(word)].changed()) post_word(peer, word);
}

void EagerChannel::post_word(int peer, Word word) {
  const Peer::Eager& e = peers_[peer].eager;
  if (word == Word::EagerCredit) ++counters_.eager_credit_writes;
  if (word == Word::ReceiveCredit) ++counters_.receive_credit_writes;
  const uint64_t from = reinterpret_cast<uint64_t>(e.block.get() + lines_of(word, e.slots).out);
  const uint32_t lkey = e.lkey;
  const uint64_t to = e.their_ring + lines_of(word, e.their_block_slots).in;
  const uint32_t rkey = e.their_rkey;
  owner_.post_own_write(
      peer,
      [=](Staged& st) {
        st.sge = {from, 8, lkey};
        st.wr.opcode = IBV_WR_RDMA_WRITE;
        st.wr.wr.rdma.remote_addr = to;
        st.wr.wr.rdma.rkey = rkey;
      },
      word);
}

void EagerChannel::word_landed(int peer, Word word) {
  Peer& p = peers_[peer];
  if (p.failure) return;
  if (p.eager.writers[static_cast<int>(word)].landed()) post_word(peer, word);
  if (word != Word::SleepEpoch) wake_if_asleep(peer);
}

}  // namespace rdmacoll::transport::verbs_impl
