#include "engine/call.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "common/settings.hpp"
#include "engine/descriptor_round.hpp"
#include "schedule/schedule.hpp"

namespace rdmacoll::engine {

void check_usable(const GroupState& g, const char* op) {
  if (!g.is_member()) {
    throw InvalidArgument(std::string(op) + ": this process is not a member of " + g.describe() +
                          "; only members may call collectives on it");
  }
  if (g.broken) {
    throw InvalidArgument(std::string(op) + ": " + g.describe() +
                          " is unusable after an earlier failure: " + *g.broken);
  }
}

CallDescriptor make_descriptor(const GroupState& g, Call& call, const AllGatherArgs& a) {
  CallDescriptor d;
  d.seq = call.seq();
  d.signal_token = call.token();
  d.group = g.id;
  d.rank = g.rank;
  d.op = a.op;
  d.reduce_op = static_cast<uint8_t>(a.reduce_op);
  d.total_numel = a.total_numel;
  d.root = a.root;
  d.ok = a.local_error.empty();
  d.error = a.local_error;
  d.in_dtype = static_cast<uint8_t>(a.in_dtype);
  d.out_dtype = static_cast<uint8_t>(a.out_dtype);
  d.in_numel = static_cast<uint64_t>(a.in_numel);
  d.out_numel = static_cast<uint64_t>(a.out_numel);
  return d;
}

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

std::string describe_args(const CallDescriptor& d) {
  return "input " + std::to_string(d.in_numel) + " x " +
         dtype_name(static_cast<DType>(d.in_dtype)) + ", output " + std::to_string(d.out_numel) +
         " x " + dtype_name(static_cast<DType>(d.out_dtype));
}

// Why ranks a and b (group ranks) disagree on the collective, or nullopt.
std::optional<std::string> collective_differs(const Call& call, int a, const CallDescriptor& da,
                                              int b, const CallDescriptor& db) {
  if (da.op == db.op) return std::nullopt;
  return "ranks called different collectives: rank " + std::to_string(call.global(a)) + " " +
         collective_name(da.op) + ", rank " + std::to_string(call.global(b)) + " " +
         collective_name(db.op) + "; every member must call the same collectives in the same order";
}

std::string rejected_arguments(const Call& call, int r, const CallDescriptor& d) {
  return "rank " + std::to_string(call.global(r)) +
         " rejected its arguments: " + std::string(d.error);
}

// Why the arguments of ranks a and b (group ranks) of one collective disagree, or nullopt.
std::optional<std::string> arguments_differ(const Call& call, int a, const CallDescriptor& da,
                                            int b, const CallDescriptor& db) {
  const std::string ra = std::to_string(call.global(a));
  const std::string rb = std::to_string(call.global(b));
  if (db.in_numel != da.in_numel || db.in_dtype != da.in_dtype || db.out_dtype != da.out_dtype ||
      db.out_numel != da.out_numel) {
    return "ranks disagree: rank " + ra + " has " + describe_args(da) + ", rank " + rb + " has " +
           describe_args(db) + "; every rank must pass the same sizes and dtypes";
  }
  if (db.total_numel != da.total_numel) {
    return "ranks disagree: rank " + ra + " reduces " + std::to_string(da.total_numel) +
           " elements, rank " + rb + " " + std::to_string(db.total_numel) +
           "; every rank must pass the same sizes and dtypes";
  }
  if (db.root != da.root) {
    return "ranks disagree on the broadcast source: rank " + ra + " names group rank " +
           std::to_string(da.root) + ", rank " + rb + " group rank " + std::to_string(db.root);
  }
  if (db.reduce_op != da.reduce_op) {
    return "ranks disagree on the reduce op: rank " + ra + " " +
           reduce_op_name(static_cast<ReduceOp>(da.reduce_op)) + ", rank " + rb + " " +
           reduce_op_name(static_cast<ReduceOp>(db.reduce_op));
  }
  // Same sizes but not the same path: the eager limit differs between ranks (it can only be
  // RDMACOLL_EAGER_LIMIT). Going on would leave the inline ranks' peers waiting for writes.
  // (A broadcast's inline round carries the root's data only; its paths are checked there.)
  if (da.op != CollectiveOp::Broadcast && db.inline_data.empty() != da.inline_data.empty()) {
    const bool a_inline = !da.inline_data.empty();
    return "ranks disagree on the eager path: rank " + (a_inline ? ra : rb) +
           " sent its chunk inline, rank " + (a_inline ? rb : ra) +
           " did not; every rank must see the same RDMACOLL_EAGER_LIMIT";
  }
  return std::nullopt;
}

// The checks of check_descriptors for one pair, ours first: the ring step's early look.
void check_pair(const Call& call, int a, const CallDescriptor& da, int b,
                const CallDescriptor& db) {
  if (auto why = collective_differs(call, a, da, b, db)) reject(call, *why);
  if (!db.ok) reject(call, rejected_arguments(call, b, db));
  if (auto why = arguments_differ(call, a, da, b, db)) reject(call, *why);
}

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

// Round k of Bruck's all-gather carries min(2^k, p - 2^k) descriptors.
size_t bruck_largest_round(int p) {
  size_t most = 0;
  for (int d = 1; d < p; d <<= 1)
    most = std::max(most, static_cast<size_t>(std::min(d, p - d)));
  return most;
}

// A round larger than a control message goes as several (engine/descriptor_round.hpp). Tags
// must be unique per receiver and call (UCX matches tags across senders): message j of sender
// r carries index r + j p, below 2^24 while p times the largest round's descriptors (the most
// messages a round can take) is.
constexpr uint64_t kTagIndexLimit = uint64_t{1} << 24;

uint32_t piece_index(int sender, uint32_t piece, int p) {
  return static_cast<uint32_t>(sender) + piece * static_cast<uint32_t>(p);
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
Rounds descriptor_rounds(const transport::Transport& t, const GroupState& g, size_t capacity) {
  const int p = g.size();
  const DescriptorExchange mode = descriptor_exchange();
  if (p <= 2 || mode == DescriptorExchange::Direct) return Rounds::Direct;
  if (static_cast<uint64_t>(p) * bruck_largest_round(p) >= kTagIndexLimit) return Rounds::Direct;
  const bool fits = mode == DescriptorExchange::Auto && g.hosts <= 1
                        ? g.scratch.slots.state() == EagerSlots::State::Off &&
                              kRoundMessageHeader + bruck_largest_round(p) * (capacity + 4) <=
                                  t.max_message_bytes()
                        : kRoundMessageHeader + capacity + 4 <= t.max_message_bytes();
  if (!fits) return Rounds::Direct;
  return schedule::is_power_of_two(p) && mode != DescriptorExchange::Bruck
             ? Rounds::RecursiveDoubling
             : Rounds::Bruck;
}

// Sends the descriptors of group ranks rank_at(first), ..., rank_at(first + n - 1) to `to`.
template <typename RankAt>
void send_round(transport::Transport& t, GroupState& g, Call& call, int to, int first, int n,
                RankAt rank_at, std::vector<uint8_t>& out) {
  CallScratch& s = g.scratch;
  std::vector<size_t>& starts = s.round_pieces;
  pack_round(
      n,
      [&](int i) {
        const int r = rank_at(first + i);
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

// Receives the descriptors of group ranks rank_at(first), ..., rank_at(first + n - 1) from
// `from`; a message that is not one the sender could have packed fails the call.
template <typename RankAt>
void receive_round(transport::Transport& t, GroupState& g, Call& call, int from, int first, int n,
                   RankAt rank_at, size_t capacity) {
  CallScratch& s = g.scratch;
  const int p = g.size();
  int received = 0;
  auto take = [&](int i, std::span<const uint8_t> d) {
    const int r = rank_at(first + i);
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

// The all-gather of the serialized descriptors in log-p rounds (d = 2^k):
//  - Bruck, in the group's ring order: a rank sends the min(d, p - d) descriptors it holds,
//    its own and the next positions', to position - d, and receives those of position + d
//    onwards from position + d. Its first round is the ring step: our descriptor to the ring
//    predecessor, the successor's to us, which is all a ring all-gather needs;
//  - recursive doubling (p a power of two), in the group's virtual order: a rank swaps the d
//    descriptors of its aligned block of positions with position xor d.
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
  s.round_receive.resize(std::min(t.max_message_bytes(),
                                  kRoundMessageHeader + bruck_largest_round(p) * (capacity + 4)));
  const bool rd = kind == Rounds::RecursiveDoubling;
  const std::vector<int>& order = rd ? g.order : g.ring_order;
  int& position = rd ? s.order_position : s.ring_position;
  if (position < 0) {  // the orders are fixed for the group: found once
    position = static_cast<int>(std::find(order.begin(), order.end(), g.rank) - order.begin());
  }
  const int me = position;
  auto at = [&](int i) { return order[static_cast<size_t>(i % p)]; };
  const bool ring_step = !rd && s.slots.state() == EagerSlots::State::Off;
  const int succ = at(me + 1);
  if (ring_step) call.watch_neighbours(at(me + p - 1), succ);
  int round = 0;
  for (int d = 1; d < p; d <<= 1, ++round) {
    if (s.round_send.size() <= static_cast<size_t>(round)) s.round_send.emplace_back();
    std::vector<uint8_t>& out = s.round_send[round];
    if (rd) {
      const int partner = me ^ d;
      send_round(t, g, call, at(partner), me & ~(d - 1), d, at, out);
      receive_round(t, g, call, at(partner), partner & ~(d - 1), d, at, capacity);
      continue;
    }
    const int n = std::min(d, p - d);
    send_round(t, g, call, at(me + p - d), me, n, at, out);
    receive_round(t, g, call, at(me + d), me + d, n, at, capacity);
    if (!ring_step || d != 1) continue;
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

}  // namespace

const std::vector<CallDescriptor>& exchange_descriptors(transport::Transport& t, GroupState& g,
                                                        Call& call, const CallDescriptor& mine_in,
                                                        DescriptorsNeeded needed) {
  const int p = g.size();
  CallScratch& s = g.scratch;
  s.seen_only = -1;
  CallDescriptor mine = mine_in;
  mine.global_rank = g.global_rank;
  mine.group_size = static_cast<uint32_t>(p);
  mine.group_creation = g.creation;
  mine.group_digest = g.digest;
  if (s.slots.active()) return exchange_through_slots(t, g, call, mine);
  // Sized for the largest descriptor any member may send: header, key, error and an eager
  // chunk. Allocated once per group.
  const size_t capacity = descriptor_capacity(eager_limit(p, g.hosts, t.max_message_bytes()));
  if (s.receive.size() != static_cast<size_t>(p) || s.receive_capacity != capacity) {
    s.receive.assign(p, std::vector<uint8_t>(capacity));
    s.receive_capacity = capacity;
  }
  if (g.hosts > 1) s.slots.off_across_hosts();
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
  const size_t recvs_before = call.recvs().size();  // a ring call's arrivals, posted already
  for (int i = 1; i < p; ++i) {
    const int peer = (g.rank + p - i) % p;
    const uint64_t tag = make_tag(TagKind::Descriptor, g.id, call.seq(), peer);
    call.recvs().push_back({call.guarded([&] {
                              return t.recv(call.global(peer), tag, s.receive[peer].data(),
                                            capacity);
                            }),
                            peer, Pending::Kind::Descriptor});
  }
  for (int i = 1; i < p; ++i) {
    const int peer = (g.rank + i) % p;
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

void Call::post_watch() {
  for (int i = 0; i < 2; ++i) {
    std::vector<uint8_t>& buffer = g_.scratch.neighbour_error[i];
    buffer.resize(kMaxErrorBytes);
    const int from = neighbour_[i];
    watch_.push_back({guarded([&] {
                        return t_.recv(
                            global(from),
                            make_tag(TagKind::Error, g_.id, seq_, static_cast<uint32_t>(from)),
                            buffer.data(), buffer.size());
                      }),
                      from, Pending::Kind::Error});
  }
}

void Call::check_neighbours() {
  for (size_t i = 0; i < watch_.size(); ++i) {
    if (!watch_[i].req->done()) continue;
    const std::vector<uint8_t>& buffer = g_.scratch.neighbour_error[i];
    const std::string reason(reinterpret_cast<const char*>(buffer.data()),
                             std::min(watch_[i].req->length(), buffer.size()));
    note_error(reason);  // passed on as it came, so every rank raises the finder's words
    throw InvalidArgument(where() + ": " + reason + " (found by another rank; reported by rank " +
                          std::to_string(global(watch_[i].peer)) + ")");
  }
}

void Call::spread_error() noexcept {
  spreading_ = true;
  try {
    if (watch_.empty()) post_watch();
    std::string reason = error_text_.empty() ? "rank " + std::to_string(g_.global_rank) +
                                                   " left the call with an error"
                                             : error_text_;
    reason.resize(std::min(reason.size(), kMaxErrorBytes));
    auto report = [&](int to) {
      RequestPtr req = guarded([&] {
        return t_.send(global(to),
                       make_tag(TagKind::Error, g_.id, seq_, static_cast<uint32_t>(g_.rank)),
                       reason.data(), reason.size());
      });
      if (!req->done()) sends_.push_back({std::move(req), to, Pending::Kind::Error});
    };
    report(neighbour_[0]);           // the predecessor: stop writing to us
    wait(sends_, 0, sends_.size());  // our writes to the successor have landed
    report(neighbour_[1]);
    wait(sends_, 0, sends_.size());
    wait(watch_, 0, watch_.size());  // the predecessor's writes to us have landed
    // Their completions (verbs: immediates) may still wait in a queue: take them now, while
    // the expects they match are posted, so none is left over for a later call.
    while (t_.progress()) {
    }
  } catch (...) {
    // fail() marked the group broken, or an unexpected error did: say so.
    if (!g_.broken) g_.broken = "a ring neighbour did not confirm the end of a failed call";
  }
}

void reject(const Call& call, const std::string& reason) {
  call.note_error(reason);
  throw InvalidArgument(call.where() + ": " + reason);
}

// Every rank sees the same descriptors, so every rank raises the same error.
void check_same_collective(const Call& call, const std::vector<CallDescriptor>& all) {
  const int only = call.group().scratch.seen_only;
  if (only >= 0) {
    const int me = call.group().rank;
    if (auto why = collective_differs(call, me, all[me], only, all[only])) reject(call, *why);
    return;
  }
  for (size_t r = 1; r < all.size(); ++r) {
    if (auto why = collective_differs(call, 0, all[0], static_cast<int>(r), all[r])) {
      reject(call, *why);
    }
  }
}

void check_rejections(const Call& call, const std::vector<CallDescriptor>& all) {
  const int only = call.group().scratch.seen_only;
  for (size_t r = 0; r < all.size(); ++r) {
    if (only >= 0 && static_cast<int>(r) != only) continue;
    if (!all[r].ok) reject(call, rejected_arguments(call, static_cast<int>(r), all[r]));
  }
}

void check_descriptors(const Call& call, const std::vector<CallDescriptor>& all) {
  const int only = call.group().scratch.seen_only;
  if (only >= 0) {
    const int me = call.group().rank;
    check_pair(call, me, all[me], only, all[only]);
    return;
  }
  check_same_collective(call, all);
  check_rejections(call, all);
  for (size_t r = 1; r < all.size(); ++r) {
    if (auto why = arguments_differ(call, 0, all[0], static_cast<int>(r), all[r])) {
      reject(call, *why);
    }
  }
}

}  // namespace rdmacoll::engine
