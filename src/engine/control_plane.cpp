// The control plane: each call's descriptors all-gathered on a service schedule
// (schedule/service.hpp) over control messages, or through the group's mailbox (eager slots)
// on one host once it is up. The agreement checks run on what arrives (agreement.cpp).

#include "engine/control_plane.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "common/settings.hpp"
#include "engine/agreement.hpp"
#include "engine/descriptor_round.hpp"
#include "schedule/schedule.hpp"
#include "schedule/service.hpp"

namespace rdmacoll::engine {

DescriptorExchange descriptor_exchange() {
  static const DescriptorExchange mode = [] {
    const std::string s = settings::choice("RDMACOLL_DESCRIPTORS");
    return s == "direct"  ? DescriptorExchange::Direct
           : s == "bruck" ? DescriptorExchange::Bruck
                          : DescriptorExchange::Auto;
  }();
  return mode;
}

namespace {

// Parses and checks one peer's descriptor of this call; views `data`.
CallDescriptor parse_one(GroupState& g, Call& call, int peer, const uint8_t* data, size_t length) {
  CallDescriptor d = CallDescriptor::parse(data, length);
  if (d.group_digest != g.digest) {
    // Nothing was written yet, but the ranks hold different groups under one id: no later
    // call on it can be trusted either.
    const std::string why =
        "ranks disagree on the group: world rank " + std::to_string(d.global_rank) +
        " sent this call as group rank " + std::to_string(d.rank) + " of " +
        std::to_string(d.group_size) + " in the group of its new_group call #" +
        std::to_string(d.group_creation) + ", this rank (world rank " +
        std::to_string(g.global_rank) + ") is in " + g.describe() + " of its new_group call #" +
        std::to_string(g.creation) +
        "; every rank must call new_group with the same ranks, in the same order";
    g.broken = why;
    throw InvalidArgument(call.where() + ": " + why);
  }
  if (d.seq != call.seq() || d.group != g.id || d.rank != peer) {
    throw TransportError(call.where() + ": descriptor from rank " +
                         std::to_string(call.global(peer)) + " is for another call (group " +
                         std::to_string(d.group) + ", call #" + std::to_string(d.seq) + ")");
  }
  return d;
}

// Parses and checks every peer's descriptor of this call (index = group rank; ours is `mine`),
// but `parsed`'s, already in the scratch (the ring step's look at the successor), if >= 0.
// The result lives in the group's scratch and views the buffers the messages arrived in (receive
// buffers or eager slots): valid until the group's next call.
const std::vector<CallDescriptor>& parse_descriptors(GroupState& g, Call& call,
                                                     const CallDescriptor& mine,
                                                     const uint8_t* const* messages,
                                                     const size_t* lengths, int parsed = -1) {
  const int p = g.size();
  CallScratch& s = g.scratch;
  s.descriptors.resize(p);
  s.descriptors[g.rank] = mine;
  for (int peer = 0; peer < p; ++peer) {
    if (peer == g.rank || peer == parsed) continue;
    s.descriptors[peer] = parse_one(g, call, peer, messages[peer], lengths[peer]);
  }
  return s.descriptors;
}

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
void wake_sleepers(transport::Transport& t, GroupState& g, Call& call, uint64_t flag) {
  const int p = g.size();
  const EagerSlots& slots = g.scratch.slots;
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

// Eager slots are on: store our descriptor into every peer's slot, then read theirs from ours.
// Sleepers are woken after our own wait, not before it: the fence that orders our flag stores
// before reading their `sleeping` words waits for the stores' cache lines, which the peers
// hold (they polled them), and ahead of the wait it sat on the critical path of every call
// (measured: the fence's instruction took 78% of exchange_descriptors' samples at 8 B on
// 2 ranks). It cannot deadlock: every rank stores all its flags before it waits, so the last
// rank to store finds every flag present at once and wakes everyone asleep.
const std::vector<CallDescriptor>& exchange_through_slots(transport::Transport& t, GroupState& g,
                                                          Call& call, const CallDescriptor& mine) {
  const int p = g.size();
  const EagerSlots& slots = g.scratch.slots;
  const uint64_t seq = call.seq();
  const uint64_t flag = seq + 1;
  for (int i = 1; i < p; ++i) {
    const int peer = (g.rank + i) % p;
    uint8_t* slot = slots.remote_slot(peer, g.rank, seq);
    EagerSlots::length(slot) = mine.serialize_to(slot + EagerSlots::kLine, slots.capacity());
    EagerSlots::flag(slot).store(flag, kFlagStore);
  }
  try {
    call.wait_slots(slots);
  } catch (...) {
    // A peer may still be asleep on our flag: wake it rather than leave it to its deadline.
    try {
      wake_sleepers(t, g, call, flag);
    } catch (...) {
    }
    throw;
  }
  wake_sleepers(t, g, call, flag);
  auto& s = g.scratch;
  s.incoming.resize(p);
  s.incoming_lengths.resize(p);
  for (int peer = 0; peer < p; ++peer) {
    if (peer == g.rank) continue;
    uint8_t* slot = slots.local_slot(peer, seq);
    s.incoming[peer] = slot + EagerSlots::kLine;
    s.incoming_lengths[peer] = EagerSlots::length(slot);
    if (s.incoming_lengths[peer] > slots.capacity()) {
      throw TransportError(call.where() + ": eager slot of rank " +
                           std::to_string(call.global(peer)) + " claims " +
                           std::to_string(s.incoming_lengths[peer]) + " bytes, more than its " +
                           std::to_string(slots.capacity()));
    }
  }
  return parse_descriptors(g, call, mine, s.incoming.data(), s.incoming_lengths.data());
}

// The service schedule of a group's descriptor rounds (schedule/service.hpp), made once.
const schedule::Schedule& service_schedule(GroupState& g, schedule::ServiceRounds rounds) {
  auto& cached = g.scratch.service_schedules;
  auto it = cached.find(rounds);
  if (it == cached.end()) {
    const std::vector<int>& order =
        rounds == schedule::ServiceRounds::RecursiveDoubling ? g.order : g.ring_order;
    it = cached.emplace(rounds, schedule::descriptor_schedule(rounds, order, g.rank)).first;
  }
  return it->second;
}

// A round larger than a control message goes as several (engine/descriptor_round.hpp). Tags
// must be unique per receiver and call (UCX matches tags across senders): message j of sender
// r carries index r + j p, below 2^24 while p times the largest round's descriptors (the most
// messages a round can take) is.
constexpr uint64_t kTagIndexLimit = uint64_t{1} << 24;

uint32_t piece_index(int sender, uint32_t piece, int p) {
  return static_cast<uint32_t>(sender) + piece * static_cast<uint32_t>(p);
}

// The ring check of the rooted rounds (exchange_rooted) takes the top p indices, above every
// piece's while p (largest round + 1) is below 2^24.
uint32_t ring_index(int sender) {
  return static_cast<uint32_t>(kTagIndexLimit - 1) - static_cast<uint32_t>(sender);
}

// How a call's descriptors travel when no eager slots carry them.
enum class Rounds { Direct, Bruck, RecursiveDoubling };

// Across hosts the descriptors take log-p rounds of an all-gather, where the direct round
// sends p - 1 messages (at 1024 ranks an 8-byte call sent 1023 per rank): recursive doubling
// where p is a power of two, so a rank talks only to rank xor 2^k in its virtual order, the
// peers of the recursive-doubling all-gather itself; Bruck's all-gather (ring position +- 2^k)
// otherwise. Over verbs, where QPs are made on first use, those are the peers a rank connects.
// On one host the direct round stays while the group's eager slots may carry the descriptors:
// its messages are parallel copies through shared memory with no chain of dependent rounds,
// and after the group's first calls the slots replace them. Where the slots are off (UCX
// without shared memory, verbs) the messages are real ones and the rounds' fewer win: 4 ranks
// over TCP on one host, 32 B, 54-55 us per call direct, 34-45 us Bruck (Open MPI 33-52); on
// one host the rounds are taken only where each is one message, as it was measured.
// Every rank decides alike (group size, hosts, the slots' agreed state, the message limit).
Rounds descriptor_rounds(const transport::Transport& t, GroupState& g, size_t capacity) {
  const int p = g.size();
  const DescriptorExchange mode = descriptor_exchange();
  if (p <= 2 || mode == DescriptorExchange::Direct) return Rounds::Direct;
  // Bruck's rounds are the largest of the two (recursive doubling's are at most as large).
  const auto largest = static_cast<size_t>(
      schedule::largest_round(service_schedule(g, schedule::ServiceRounds::Bruck)));
  if (static_cast<uint64_t>(p) * (largest + 1) >= kTagIndexLimit) return Rounds::Direct;
  const bool fits =
      mode == DescriptorExchange::Auto && g.hosts <= 1
          ? g.scratch.slots.state() == EagerSlots::State::Off &&
                kRoundMessageHeader + largest * (capacity + 4) <= t.max_message_bytes()
          : kRoundMessageHeader + capacity + 4 <= t.max_message_bytes();
  if (!fits) return Rounds::Direct;
  return schedule::is_power_of_two(p) && mode != DescriptorExchange::Bruck
             ? Rounds::RecursiveDoubling
             : Rounds::Bruck;
}

// The chunks (group ranks) a step moves to or from `peer`, in the order both sides pack them.
std::vector<int>& chunks_with(const std::vector<schedule::Transfer>& transfers, int peer,
                              std::vector<int>& out) {
  out.clear();
  for (const schedule::Transfer& t : transfers) {
    if (t.peer != peer) continue;
    for (int c = t.first; c < t.first + t.count; ++c)
      out.push_back(c);
  }
  return out;
}

// Sends the descriptors of group ranks `chunks` to `to`.
void send_round(transport::Transport& t, GroupState& g, Call& call, int to,
                const std::vector<int>& chunks, std::vector<uint8_t>& out) {
  CallScratch& s = g.scratch;
  std::vector<size_t>& starts = s.round_pieces;
  pack_round(
      static_cast<int>(chunks.size()),
      [&](int i) {
        const int r = chunks[static_cast<size_t>(i)];
        return std::span<const uint8_t>(s.incoming[r], s.incoming_lengths[r]);
      },
      t.max_message_bytes(), out, starts);
  for (size_t j = 0; j < starts.size(); ++j) {
    const size_t end = j + 1 < starts.size() ? starts[j + 1] : out.size();
    RequestPtr req = call.guarded([&] {
      return t.send(call.global(to),
                    make_tag(TagKind::Descriptor, g.id, call.seq(),
                             piece_index(g.rank, static_cast<uint32_t>(j), g.size())),
                    out.data() + starts[j], end - starts[j]);
    });
    if (!req->done()) call.sends().push_back({std::move(req), to, Pending::Kind::Descriptor});
  }
}

// Receives the descriptors of group ranks `chunks` from `from`; a message that is not one the
// sender could have packed fails the call.
void receive_round(transport::Transport& t, GroupState& g, Call& call, int from,
                   const std::vector<int>& chunks, size_t capacity) {
  CallScratch& s = g.scratch;
  const int p = g.size();
  const int n = static_cast<int>(chunks.size());
  int received = 0;
  auto take = [&](int i, std::span<const uint8_t> d) {
    const int r = chunks[static_cast<size_t>(i)];
    std::memcpy(s.receive[r].data(), d.data(), d.size());  // capacity long
    s.incoming[r] = s.receive[r].data();
    s.incoming_lengths[r] = d.size();
  };
  for (uint32_t piece = 0;; ++piece) {
    const size_t recv_at = call.recvs().size();
    call.recvs().push_back({call.guarded([&] {
                              return t.recv(call.global(from),
                                            make_tag(TagKind::Descriptor, g.id, call.seq(),
                                                     piece_index(from, piece, p)),
                                            s.round_receive.data(), s.round_receive.size());
                            }),
                            from, Pending::Kind::Descriptor});
    call.wait(call.recvs(), recv_at, recv_at + 1);
    const std::span<const uint8_t> message(s.round_receive.data(),
                                           call.recvs()[recv_at].req->length());
    // A round a failed call sent to a rank that had left it (ring-step mode) stays unreceived;
    // its tag comes back 2^24 calls later. Such a leftover is dropped, and the receive posted
    // again for this call's message.
    uint64_t seq = 0;
    if (message.size() > kRoundMessageHeader + 4 &&
        CallDescriptor::peek_seq(message.data() + kRoundMessageHeader + 4,
                                 message.size() - kRoundMessageHeader - 4, seq) &&
        seq < call.seq()) {
      call.recvs().pop_back();
      --piece;
      continue;
    }
    bool more = false;
    try {
      more = parse_round_message(message, n, received, capacity, take);
    } catch (const TransportError& e) {
      throw TransportError(call.where() + ": malformed descriptor round from rank " +
                           std::to_string(call.global(from)) + " (message " +
                           std::to_string(piece) + ", the round carries " + std::to_string(n) +
                           " descriptors): " + e.what());
    }
    if (!more) break;
  }
  if (received != n) {
    throw TransportError(call.where() + ": descriptor round from rank " +
                         std::to_string(call.global(from)) + " carried " +
                         std::to_string(received) + " descriptors, not " + std::to_string(n));
  }
}

// The all-gather of the serialized descriptors in log-p rounds, run on its service schedule:
// Bruck's in the group's ring order, whose first round is the ring step (our descriptor to the
// ring predecessor, the successor's to us: all a ring all-gather needs), or recursive doubling
// in the group's virtual order. Each round is one message (or several, if larger than a control
// message) to one peer and one from another.
// In ring-step mode (Bruck with the eager slots off, as across hosts) ranks may stop after the
// first round (DescriptorsNeeded::Successor) while others go on, if their arguments differ. So
// every rank checks the successor's descriptor against its own right after that round, and
// errors spread along the ring (Call::watch_neighbours): the ranks on either side of a
// disagreement find it, and the ranks stuck waiting hear of it.
// Returns the successor's group rank once its descriptor is parsed into the scratch (ring-step
// mode), else -1.
int exchange_rounds(transport::Transport& t, GroupState& g, Call& call, size_t capacity,
                    Rounds kind, const CallDescriptor& mine, DescriptorsNeeded needed) {
  const int p = g.size();
  CallScratch& s = g.scratch;
  const size_t recvs_before = call.recvs().size();  // a ring call's arrivals, posted already
  s.incoming.assign(p, nullptr);
  s.incoming_lengths.assign(p, 0);
  s.incoming[g.rank] = s.send.data();
  s.incoming_lengths[g.rank] = s.send.size();
  const bool rd = kind == Rounds::RecursiveDoubling;
  const schedule::Schedule& sched = service_schedule(
      g, rd ? schedule::ServiceRounds::RecursiveDoubling : schedule::ServiceRounds::Bruck);
  s.round_receive.resize(std::min(
      t.max_message_bytes(),
      kRoundMessageHeader + static_cast<size_t>(schedule::largest_round(sched)) * (capacity + 4)));
  const bool ring_step = !rd && s.slots.state() == EagerSlots::State::Off;
  // Bruck's first round in ring order: to the predecessor, from the successor.
  const int pred = sched.steps.front().sends.front().peer;
  const int succ = sched.steps.front().recvs.front().peer;
  if (ring_step) call.watch_neighbours(pred, succ);
  std::vector<int>& chunks = s.round_chunks;
  for (size_t round = 0; round < sched.steps.size(); ++round) {
    if (s.round_send.size() <= round) s.round_send.emplace_back();
    const schedule::Step& step = sched.steps[round];
    const int to = step.sends.front().peer;
    const int from = step.recvs.front().peer;
    send_round(t, g, call, to, chunks_with(step.sends, to, chunks), s.round_send[round]);
    receive_round(t, g, call, from, chunks_with(step.recvs, from, chunks), capacity);
    if (!ring_step || round != 0) continue;
    if (!mine.ok) {
      call.note_error(rejected_arguments(call, g.rank, mine));
      throw InvalidArgument(call.where() + ": " + std::string(mine.error));
    }
    s.descriptors.resize(p);
    s.descriptors[succ] = parse_one(g, call, succ, s.incoming[succ], s.incoming_lengths[succ]);
    check_pair(call, g.rank, mine, succ, s.descriptors[succ]);
    if (needed == DescriptorsNeeded::Successor) {
      s.descriptors[g.rank] = mine;
      s.seen_only = succ;
      break;
    }
  }
  call.wait(call.sends(), 0, call.sends().size());
  call.sends().clear();
  call.recvs().resize(recvs_before);
  return ring_step ? succ : -1;
}

// Our descriptor as every member sends it: the group it means stamped in.
CallDescriptor stamped(const GroupState& g, const CallDescriptor& in) {
  CallDescriptor mine = in;
  mine.global_rank = g.global_rank;
  mine.group_size = static_cast<uint32_t>(g.size());
  mine.group_creation = g.creation;
  mine.group_digest = g.digest;
  return mine;
}

// Sized for the largest descriptor any member may send: header, key, error and an eager chunk.
// Allocated once per group. Returns that capacity.
size_t ready_receive_buffers(const transport::Transport& t, GroupState& g) {
  const int p = g.size();
  CallScratch& s = g.scratch;
  const size_t capacity = descriptor_capacity(eager_limit(p, g.hosts, t.max_message_bytes()));
  if (s.receive.size() != static_cast<size_t>(p) || s.receive_capacity != capacity) {
    s.receive.assign(p, std::vector<uint8_t>(capacity));
    s.receive_capacity = capacity;
  }
  if (g.hosts > 1) s.slots.off_across_hosts();
  return capacity;
}

// Runs steps [first, end) of a service schedule whose steps each send to at most one peer and
// receive from at most one (the rooted rounds), moving the serialized descriptors in
// scratch.incoming.
void run_steps(transport::Transport& t, GroupState& g, Call& call, const schedule::Schedule& sched,
               size_t first, size_t end, size_t capacity) {
  CallScratch& s = g.scratch;
  std::vector<int>& chunks = s.round_chunks;
  for (size_t k = first; k < end; ++k) {
    if (s.round_send.size() <= k) s.round_send.resize(k + 1);
    const schedule::Step& step = sched.steps[k];
    if (!step.sends.empty()) {
      const int to = step.sends.front().peer;
      send_round(t, g, call, to, chunks_with(step.sends, to, chunks), s.round_send[k]);
    }
    if (!step.recvs.empty()) {
      const int from = step.recvs.front().peer;
      receive_round(t, g, call, from, chunks_with(step.recvs, from, chunks), capacity);
    }
  }
}

// What a refusal says to the members: the reason reject() noted, else the error without this
// call's prefix.
std::string refusal_reason(const Call& call, const Error& e) {
  if (!call.noted_error().empty()) return call.noted_error();
  const std::string what = e.what();
  const std::string prefix = call.where() + ": ";
  return what.starts_with(prefix) ? what.substr(prefix.size()) : what;
}

// The rooted rounds for `root` (schedule/service.hpp), made once per group and root.
const schedule::Schedule& rooted_rounds(GroupState& g, int root) {
  auto& cached = g.scratch.rooted_schedules;
  auto it = cached.find(root);
  if (it == cached.end()) {
    it = cached.emplace(root, schedule::rooted_schedule(g.ring_order, root, g.rank)).first;
  }
  return it->second;
}

}  // namespace

const std::vector<CallDescriptor>& exchange_descriptors(transport::Transport& t, GroupState& g,
                                                        Call& call, const CallDescriptor& mine_in,
                                                        DescriptorsNeeded needed) {
  const int p = g.size();
  CallScratch& s = g.scratch;
  s.seen_only = -1;
  CallDescriptor mine = stamped(g, mine_in);
  if (s.slots.active()) return exchange_through_slots(t, g, call, mine);
  const size_t capacity = ready_receive_buffers(t, g);
  s.slots.annotate(t, p, capacity, mine);
  mine.serialize_into(s.send, capacity);
  if (const Rounds kind = descriptor_rounds(t, g, capacity); kind != Rounds::Direct) {
    const int parsed = exchange_rounds(t, g, call, capacity, kind, mine, needed);
    if (s.seen_only >= 0) return s.descriptors;  // the slots are off: nothing to advance
    const auto& all =
        parse_descriptors(g, call, mine, s.incoming.data(), s.incoming_lengths.data(), parsed);
    s.slots.advance(t, g.members, g.rank, all);
    return all;
  }
  // The direct round (schedule/service.hpp): every member's descriptor straight to every member.
  const size_t recvs_before = call.recvs().size();  // a ring call's arrivals, posted already
  const schedule::Schedule& direct = service_schedule(g, schedule::ServiceRounds::Direct);
  static const schedule::Step kAlone{};  // a group of one exchanges nothing
  const schedule::Step& round = direct.steps.empty() ? kAlone : direct.steps.front();
  for (const schedule::Transfer& from : round.recvs) {
    const int peer = from.peer;
    const uint64_t tag = make_tag(TagKind::Descriptor, g.id, call.seq(), peer);
    call.recvs().push_back({call.guarded([&] {
                              return t.recv(call.global(peer), tag, s.receive[peer].data(),
                                            capacity);
                            }),
                            peer, Pending::Kind::Descriptor});
  }
  for (const schedule::Transfer& to : round.sends) {
    const int peer = to.peer;
    const uint64_t tag = make_tag(TagKind::Descriptor, g.id, call.seq(), g.rank);
    // The transport owns the copy of a control message until it is sent, but only its
    // progress sends it: a send still queued (a large inline descriptor over TCP) when this
    // rank leaves the library, to compute or to destroy_process_group, would stall the peer.
    RequestPtr req =
        call.guarded([&] { return t.send(call.global(peer), tag, s.send.data(), s.send.size()); });
    if (!req->done()) call.sends().push_back({std::move(req), peer, Pending::Kind::Descriptor});
  }
  call.wait(call.recvs(), recvs_before, call.recvs().size());
  call.wait(call.sends(), 0, call.sends().size());
  call.sends().clear();
  s.incoming.resize(p);
  s.incoming_lengths.resize(p);
  for (size_t i = recvs_before; i < call.recvs().size(); ++i) {
    const Pending& pr = call.recvs()[i];
    s.incoming[pr.peer] = s.receive[pr.peer].data();
    s.incoming_lengths[pr.peer] = pr.req->length();
  }
  call.recvs().resize(recvs_before);
  const auto& all = parse_descriptors(g, call, mine, s.incoming.data(), s.incoming_lengths.data());
  s.slots.advance(t, g.members, g.rank, all);
  return all;
}

const std::vector<CallDescriptor>& exchange_rooted(transport::Transport& t, GroupState& g,
                                                   Call& call, const CallDescriptor& mine_in,
                                                   int root, const Verdict& verdict) {
  const int p = g.size();
  CallScratch& s = g.scratch;
  const CallDescriptor mine = stamped(g, mine_in);
  auto own_error = [&] {
    if (!mine.ok) throw InvalidArgument(call.where() + ": " + std::string(mine.error));
  };
  size_t capacity = 0;
  bool rooted = !s.slots.active() && descriptor_exchange() == DescriptorExchange::Auto;
  if (rooted) {
    capacity = ready_receive_buffers(t, g);
    rooted = s.slots.state() == EagerSlots::State::Off &&
             descriptor_rounds(t, g, capacity) != Rounds::Direct;
  }
  if (!rooted) {  // the mailbox, or the slots still coming up (they need every descriptor)
    const std::vector<CallDescriptor>& all = exchange_descriptors(t, g, call, mine_in);
    own_error();
    verdict(all);
    return all;
  }
  s.seen_only = -1;
  const size_t recvs_before = call.recvs().size();  // the root's arrivals, posted already
  mine.serialize_into(s.send, capacity);
  s.incoming.assign(p, nullptr);
  s.incoming_lengths.assign(p, 0);
  s.incoming[g.rank] = s.send.data();
  s.incoming_lengths[g.rank] = s.send.size();
  // The tree is the root's: a rank that names another root would wait for children that never
  // send. So ring neighbours check each other's descriptors first (around the ring, every pair
  // agreeing is every rank agreeing, the root included); the ranks beside a disagreement raise
  // and it spreads along the ring (Call::watch_neighbours) to the ranks stuck in the tree.
  const schedule::Step& ring = service_schedule(g, schedule::ServiceRounds::Bruck).steps.front();
  const int pred = ring.sends.front().peer;
  const int succ = ring.recvs.front().peer;
  call.watch_neighbours(pred, succ);
  {
    RequestPtr req = call.guarded([&] {
      return t.send(call.global(pred),
                    make_tag(TagKind::Descriptor, g.id, call.seq(), ring_index(g.rank)),
                    s.send.data(), s.send.size());
    });
    if (!req->done()) call.sends().push_back({std::move(req), pred, Pending::Kind::Descriptor});
    if (!mine.ok) {  // our predecessor finds it in what we sent; we raise our own words now
      call.note_error(rejected_arguments(call, g.rank, mine));
      own_error();
    }
    const size_t at = call.recvs().size();
    call.recvs().push_back({call.guarded([&] {
                              return t.recv(
                                  call.global(succ),
                                  make_tag(TagKind::Descriptor, g.id, call.seq(), ring_index(succ)),
                                  s.receive[succ].data(), capacity);
                            }),
                            succ, Pending::Kind::Descriptor});
    call.wait(call.recvs(), at, at + 1);
    const CallDescriptor next =
        parse_one(g, call, succ, s.receive[succ].data(), call.recvs()[at].req->length());
    check_pair(call, g.rank, mine, succ, next);
  }
  const schedule::Schedule& sched = rooted_rounds(g, root);
  s.round_receive.resize(std::min(
      t.max_message_bytes(),
      kRoundMessageHeader + static_cast<size_t>(schedule::largest_round(sched)) * (capacity + 4)));
  const size_t levels = sched.steps.size() / 2;
  run_steps(t, g, call, sched, 0, levels, capacity);  // up to the root

  // The root judges; a refusal goes down in place of its descriptor.
  std::exception_ptr refused;
  std::vector<uint8_t> refusal_bytes;
  if (g.rank == root) {
    CallDescriptor refusal = mine;
    std::string reason;
    try {
      const std::vector<CallDescriptor>& all =
          parse_descriptors(g, call, mine, s.incoming.data(), s.incoming_lengths.data());
      verdict(all);
      if (!mine.ok) reject(call, rejected_arguments(call, g.rank, mine));
    } catch (const InvalidArgument& e) {
      refused = std::current_exception();
      refusal.refused = CallDescriptor::Refusal::InvalidArgument;
      reason = refusal_reason(call, e);
    } catch (const TransportError& e) {
      refused = std::current_exception();
      refusal.refused = CallDescriptor::Refusal::TransportError;
      reason = refusal_reason(call, e);
    }
    if (refused) {
      refusal.error = reason;
      refusal.group_broken = g.broken.has_value();
      refusal.key = {};
      refusal.inline_data = {};
      refusal.splits = {};
      refusal.serialize_into(refusal_bytes, capacity);
      s.incoming[g.rank] = refusal_bytes.data();
      s.incoming_lengths[g.rank] = refusal_bytes.size();
    }
  }
  run_steps(t, g, call, sched, levels, sched.steps.size(), capacity);  // and back down
  call.wait(call.sends(), 0, call.sends().size());
  call.sends().clear();
  call.recvs().resize(recvs_before);
  if (g.rank == root) {
    if (refused) {
      own_error();
      std::rethrow_exception(refused);
    }
    return s.descriptors;
  }
  own_error();
  s.descriptors.assign(p, CallDescriptor{});
  s.descriptors[g.rank] = mine;
  const CallDescriptor d = parse_one(g, call, root, s.incoming[root], s.incoming_lengths[root]);
  if (d.refused != CallDescriptor::Refusal::None) {
    const std::string reason(d.error);
    call.note_error(reason);
    const std::string found =
        reason + " (found by the root, rank " + std::to_string(call.global(root)) + ")";
    if (d.group_broken) g.broken = found;
    if (d.refused == CallDescriptor::Refusal::TransportError) {
      throw TransportError(call.where() + ": " + found);
    }
    throw InvalidArgument(call.where() + ": " + found);
  }
  s.descriptors[root] = d;
  return s.descriptors;
}

}  // namespace rdmacoll::engine
