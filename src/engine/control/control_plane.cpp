// The control plane: each call's descriptors all-gathered on a service schedule
// (schedule/service.hpp) over control messages, or through the group's mailbox
// on one host once it is up. The agreement checks run on what arrives (agreement.cpp).

#include "engine/control/control_plane.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "engine/control/agreement.hpp"
#include "engine/control/descriptor_messages.hpp"
#include "engine/control/descriptor_round.hpp"
#include "engine/message_steps.hpp"
#include "schedule/schedule.hpp"
#include "schedule/service.hpp"

namespace rdmacoll::engine {

namespace {

// ThreadSanitizer does not model fences (GCC refuses them under -fsanitize=thread). There the
// flags are seq_cst stores and the `sleeping` words seq_cst loads, which order the two
// without a fence (the protocol before the fence moved after the wait).
#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif
#else
constexpr bool kTsan = false;
#endif
constexpr std::memory_order kFlagStore =
    kTsan ? std::memory_order_seq_cst : std::memory_order_release;
constexpr std::memory_order kSleepingLoad =
    kTsan ? std::memory_order_seq_cst : std::memory_order_relaxed;

// Rings the doorbell of every peer asleep on this call's slots (Dekker with Call::wait_slots:
// either it sees our flag, or we see its `sleeping` word).
void wake_sleepers(Call& call, uint64_t flag) {
  transport::Transport& t = call.transport();
  GroupState& g = call.group();
  const int p = g.size();
  const Mailbox& slots = g.mailbox;
  if constexpr (!kTsan) {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // our flag stores before these loads
  }
  for (int i = 1; i < p; ++i) {
    const int peer = (g.rank + i) % p;
    if (slots.remote_sleeping(peer).load(kSleepingLoad) == flag) {
      call.guarded([&] {
        t.doorbell(call.global(peer));
        return 0;
      });
    }
  }
}

// Inline data in pieces (CallDescriptor::inline_piece) is one piece per member.
void check_pieces(const Call& call, const CallDescriptor& mine) {
  const size_t p = static_cast<size_t>(call.group().size());
  if (mine.inline_data.size() != p * mine.inline_piece) {
    throw TransportError(call.where() + ": inline data of " +
                         std::to_string(mine.inline_data.size()) + " bytes is not " +
                         std::to_string(p) + " pieces of " + std::to_string(mine.inline_piece));
  }
}

// The mailbox is on: store our descriptor into every peer's slot, then read theirs from ours.
// Sleepers are woken after our own wait, not before it: the fence that orders our flag stores
// before reading their `sleeping` words waits for the stores' cache lines, which the peers
// hold (they polled them), and ahead of the wait it sat on the critical path of every call
// (measured: the fence's instruction took 78% of exchange_descriptors' samples at 8 B on
// 2 ranks). It cannot deadlock: every rank stores all its flags before it waits, so the last
// rank to store finds every flag present at once and wakes everyone asleep.
const std::vector<CallDescriptor>& exchange_through_slots(Call& call, const CallDescriptor& mine) {
  GroupState& g = call.group();
  const int p = g.size();
  const Mailbox& slots = g.mailbox;
  const uint64_t seq = call.seq();
  const uint64_t flag = seq + 1;
  auto store = [&](int peer, const CallDescriptor& d, bool record) {
    uint8_t* slot = slots.remote_slot(peer, g.rank, seq);
    if (record) {
      Mailbox::write_record(slot, d);
    } else {
      Mailbox::length(slot) = d.serialize_to(slot + Mailbox::kLine, slots.capacity());
    }
    Mailbox::flag(slot).store(flag, kFlagStore);
  };
  // A small call's descriptor goes as a record in the flag's line (mailbox.hpp).
  if (const size_t piece = mine.inline_piece; piece == 0) {
    const bool record = Mailbox::fits_record(mine, slots.capacity());
    for (int i = 1; i < p; ++i)
      store((g.rank + i) % p, mine, record);
  } else {  // inline data in pieces (CallDescriptor::inline_piece): each peer's slot takes its own
    check_pieces(call, mine);
    CallDescriptor each = mine;
    each.inline_data = mine.inline_data.first(piece);
    const bool record = Mailbox::fits_record(each, slots.capacity());
    for (int i = 1; i < p; ++i) {
      const int peer = (g.rank + i) % p;
      each.inline_data = mine.inline_data.subspan(static_cast<size_t>(peer) * piece, piece);
      store(peer, each, record);
    }
  }
  try {
    call.wait_slots(slots);
  } catch (...) {
    // A peer may still be asleep on our flag: wake it rather than leave it to its deadline.
    try {
      wake_sleepers(call, flag);
    } catch (...) {
    }
    throw;
  }
  wake_sleepers(call, flag);
  ExchangeScratch& s = g.scratch.get<ExchangeScratch>();
  s.descriptors.resize(p);
  s.descriptors[g.rank] = mine;
  for (int peer = 0; peer < p; ++peer) {
    if (peer == g.rank) continue;
    const uint8_t* slot = slots.local_slot(peer, seq);
    const uint64_t length = Mailbox::length(slot);
    const uint64_t bytes = length & ~Mailbox::kRecordBit;
    auto claims_too_much = [&] {
      return TransportError(call.where() + ": mailbox slot of rank " +
                            std::to_string(call.global(peer)) + " claims " + std::to_string(bytes) +
                            " bytes, more than its " + std::to_string(slots.capacity()));
    };
    if (length & Mailbox::kRecordBit) {
      // The rest of a record's descriptor is the group's: the slots are the group's own.
      static const CallDescriptor kBlank{};  // copied: zeroing a temporary cost a rep stos per peer
      CallDescriptor& d = s.descriptors[peer];
      d = kBlank;
      if (!Mailbox::read_record(slot, slots.capacity(), d)) throw claims_too_much();
      d.seq = seq;
      d.group = g.id;
      d.rank = peer;
      d.global_rank = call.global(peer);
      d.group_size = static_cast<uint32_t>(p);
      d.group_creation = g.creation;
      d.group_digest = g.digest;
    } else {
      if (bytes > slots.capacity()) throw claims_too_much();
      s.descriptors[peer] = parse_one(call, peer, slot + Mailbox::kLine, bytes);
    }
  }
  return s.descriptors;
}

// The all-gather of the serialized descriptors in log-p rounds, run on its service schedule:
// Bruck's in the group's ring order, whose first round is the ring step (our descriptor to the
// ring predecessor, the successor's to us: all a ring all-gather needs), or recursive doubling
// in the group's virtual order. Each round is one message (or several, if larger than a control
// message) to one peer and one from another.
// In ring-step mode (Bruck with the mailbox off, as across hosts) ranks may stop after the
// first round (DescriptorsNeeded::Successor) while others go on, if their arguments differ: so
// that round is the ring step (descriptor_messages.hpp, RingStep), whose checks find it.
// Returns the successor's group rank once its descriptor is parsed into the scratch (ring-step
// mode), else -1.
int exchange_rounds(Call& call, size_t capacity, Rounds kind, const CallDescriptor& mine,
                    DescriptorsNeeded needed) {
  transport::Transport& t = call.transport();
  GroupState& g = call.group();
  ExchangeScratch& s = g.scratch.get<ExchangeScratch>();
  const size_t recvs_before = call.recvs().size();  // a ring call's arrivals, posted already
  const bool rd = kind == Rounds::RecursiveDoubling;
  const schedule::Schedule& sched = service_schedule(
      g, rd ? schedule::ServiceRounds::RecursiveDoubling : schedule::ServiceRounds::Bruck);
  ready_rounds(t, g, sched, capacity);
  const bool ring_step = !rd && g.mailbox.state() == Mailbox::State::Off;
  RoundHooks hooks;
  int succ = -1;
  if (ring_step) {
    succ = watch_ring(call).succ;
    hooks = ring_step_hooks(call, mine, succ, [&] {
      if (needed != DescriptorsNeeded::Successor) return true;
      s.descriptors[g.rank] = mine;
      s.seen_only = succ;
      return false;
    });
  }
  run_rounds(call, sched, 0, sched.steps.size(), capacity, RoundTags::Pieces, hooks);
  call.wait(call.sends(), 0, call.sends().size());
  call.sends().clear();
  call.recvs().resize(recvs_before);
  return ring_step ? succ : -1;
}

}  // namespace

bool descriptors_go_direct(const transport::Transport& t, GroupState& g) {
  if (g.mailbox.active()) return true;
  return descriptor_rounds(t, g, ready_receive_buffers(t, g)) == Rounds::Direct;
}

const std::vector<CallDescriptor>& exchange_descriptors(Call& call, const CallDescriptor& mine_in,
                                                        DescriptorsNeeded needed) {
  transport::Transport& t = call.transport();
  GroupState& g = call.group();
  const int p = g.size();
  ExchangeScratch& s = g.scratch.get<ExchangeScratch>();
  s.seen_only = -1;
  CallDescriptor mine = stamped(g, mine_in);
  if (g.mailbox.active()) return exchange_through_slots(call, mine);
  const size_t capacity = ready_receive_buffers(t, g);
  g.mailbox.annotate(t, p, capacity, mine);
  const Rounds kind = descriptor_rounds(t, g, capacity);
  if (kind != Rounds::Direct || mine.inline_piece == 0) mine.serialize_into(s.send, capacity);
  if (kind != Rounds::Direct) {
    const int parsed = exchange_rounds(call, capacity, kind, mine, needed);
    if (s.seen_only >= 0) return s.descriptors;  // the slots are off: nothing to advance
    const auto& all =
        parse_descriptors(call, mine, s.incoming.data(), s.incoming_lengths.data(), parsed);
    g.mailbox.advance(t, g.members, g.rank, all);
    return all;
  }
  // The direct round (schedule/service.hpp): every member's descriptor straight to every member.
  // Its receives go after a ring call's arrivals, posted already, and leave with release().
  const schedule::Schedule& direct = service_schedule(g, schedule::ServiceRounds::Direct);
  static const schedule::Step kAlone{};  // a group of one exchanges nothing
  const schedule::Step& round = direct.steps.empty() ? kAlone : direct.steps.front();
  MessageSteps messages(call, TagKind::Descriptor, MessageSteps::Carries::Control);
  for (const schedule::Transfer& from : round.recvs) {
    messages.expect(from.peer, static_cast<uint32_t>(from.peer), s.receive[from.peer].data(),
                    capacity);
  }
  if (const size_t piece = mine.inline_piece; piece == 0) {
    for (const schedule::Transfer& to : round.sends)
      messages.send(to.peer, static_cast<uint32_t>(g.rank), s.send.data(), s.send.size());
  } else {  // inline data in pieces, as through the slots: each peer's message takes only its own
    check_pieces(call, mine);
    s.send_each.resize(p);
    CallDescriptor each = mine;
    for (const schedule::Transfer& to : round.sends) {
      each.inline_data = mine.inline_data.subspan(static_cast<size_t>(to.peer) * piece, piece);
      each.serialize_into(s.send_each[to.peer], capacity);
      messages.send(to.peer, static_cast<uint32_t>(g.rank), s.send_each[to.peer].data(),
                    s.send_each[to.peer].size());
    }
  }
  messages.wait_all();
  s.incoming.resize(p);
  s.incoming_lengths.resize(p);
  for (size_t i = 0; i < messages.arrivals(); ++i) {
    const Pending& pr = messages.arrival(i);
    s.incoming[pr.peer] = s.receive[pr.peer].data();
    s.incoming_lengths[pr.peer] = pr.req->length();
  }
  messages.release();
  const auto& all = parse_descriptors(call, mine, s.incoming.data(), s.incoming_lengths.data());
  g.mailbox.advance(t, g.members, g.rank, all);
  return all;
}

}  // namespace rdmacoll::engine
