// The control plane's messages: see descriptor_messages.hpp.

#include "engine/control/descriptor_messages.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/control/agreement.hpp"
#include "engine/control/control_plane.hpp"
#include "engine/control/descriptor_round.hpp"
#include "engine/message_steps.hpp"
#include "schedule/schedule.hpp"

namespace rdmacoll::engine {

// Parses and checks one peer's descriptor of this call; views `data`.
CallDescriptor parse_one(Call& call, int peer, const uint8_t* data, size_t length) {
  GroupState& g = call.group();
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
// buffers or mailbox): valid until the group's next call.
const std::vector<CallDescriptor>& parse_descriptors(Call& call, const CallDescriptor& mine,
                                                     const uint8_t* const* messages,
                                                     const size_t* lengths, int parsed) {
  GroupState& g = call.group();
  const int p = g.size();
  ExchangeScratch& s = g.scratch.get<ExchangeScratch>();
  s.descriptors.resize(p);
  s.descriptors[g.rank] = mine;
  for (int peer = 0; peer < p; ++peer) {
    if (peer == g.rank || peer == parsed) continue;
    s.descriptors[peer] = parse_one(call, peer, messages[peer], lengths[peer]);
  }
  return s.descriptors;
}

// The service schedule of a group's descriptor rounds (schedule/service.hpp), made once.
const schedule::Schedule& service_schedule(GroupState& g, schedule::ServiceRounds rounds) {
  auto& cached = g.scratch.get<ExchangeScratch>().service_schedules;
  auto it = cached.find(rounds);
  if (it == cached.end()) {
    const std::vector<int>& order =
        rounds == schedule::ServiceRounds::RecursiveDoubling ? g.order : g.ring_order;
    it = cached.emplace(rounds, schedule::descriptor_schedule(rounds, order, g.rank)).first;
  }
  return it->second;
}

// Across hosts the descriptors take log-p rounds of an all-gather, where the direct round
// sends p - 1 messages (at 1024 ranks an 8-byte call sent 1023 per rank): recursive doubling
// where p is a power of two, so a rank talks only to rank xor 2^k in its virtual order, the
// peers of the recursive-doubling all-gather itself; Bruck's all-gather (ring position +- 2^k)
// otherwise. Over verbs, where QPs are made on first use, those are the peers a rank connects.
// On one host the direct round stays while the group's mailbox may carry the descriptors:
// its messages are parallel copies through shared memory with no chain of dependent rounds,
// and after the group's first calls the slots replace them. Where the slots are off (UCX
// without shared memory, verbs) the messages are real ones and the rounds' fewer win (4 ranks
// over TCP on one host, docs/performance.md, the code's thresholds); on one host the rounds
// are taken only where each is one message, as it was measured.
// Every rank decides alike (group size, hosts, the slots' agreed state, the message limit).
Rounds descriptor_rounds(const transport::Transport& t, GroupState& g, size_t capacity) {
  const int p = g.size();
  const DescriptorExchange mode = g.tuning.descriptors;
  if (p <= 2 || mode == DescriptorExchange::Direct) return Rounds::Direct;
  // Bruck's rounds are the largest of the two (recursive doubling's are at most as large).
  const auto largest = static_cast<size_t>(
      schedule::largest_round(service_schedule(g, schedule::ServiceRounds::Bruck)));
  if (static_cast<uint64_t>(p) * (largest + 1) >= kTagIndexLimit) return Rounds::Direct;
  const bool fits =
      mode != DescriptorExchange::Bruck && g.hosts <= 1
          ? g.mailbox.state() == Mailbox::State::Off &&
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

namespace {

uint32_t round_index(RoundTags tags, int sender, uint32_t piece, int p) {
  return tags == RoundTags::RingCheck ? ring_index(sender, piece, p)
                                      : piece_index(sender, piece, p);
}

}  // namespace

// Sends the descriptors of group ranks `chunks` to `to`.
void send_round(Call& call, int to, const std::vector<int>& chunks, std::vector<uint8_t>& out,
                RoundTags tags) {
  transport::Transport& t = call.transport();
  GroupState& g = call.group();
  ExchangeScratch& s = g.scratch.get<ExchangeScratch>();
  std::vector<size_t>& starts = s.round_pieces;
  pack_round(
      static_cast<int>(chunks.size()),
      [&](int i) {
        const int r = chunks[static_cast<size_t>(i)];
        return std::span<const uint8_t>(s.incoming[r], s.incoming_lengths[r]);
      },
      t.max_message_bytes(), out, starts);
  // Its sends stay in the call's list, which the exchange waits for once its rounds are done.
  MessageSteps messages(call, TagKind::Descriptor, MessageSteps::Carries::Control);
  for (size_t j = 0; j < starts.size(); ++j) {
    const size_t end = j + 1 < starts.size() ? starts[j + 1] : out.size();
    messages.send(to, round_index(tags, g.rank, static_cast<uint32_t>(j), g.size()),
                  out.data() + starts[j], end - starts[j]);
  }
}

// Receives the descriptors of group ranks `chunks` from `from`; a message that is not one the
// sender could have packed fails the call.
void receive_round(Call& call, int from, const std::vector<int>& chunks, size_t capacity,
                   RoundTags tags) {
  GroupState& g = call.group();
  ExchangeScratch& s = g.scratch.get<ExchangeScratch>();
  const int p = g.size();
  const int n = static_cast<int>(chunks.size());
  int received = 0;
  auto take = [&](int i, std::span<const uint8_t> d) {
    const int r = chunks[static_cast<size_t>(i)];
    std::memcpy(s.receive[r].data(), d.data(), d.size());  // capacity long
    s.incoming[r] = s.receive[r].data();
    s.incoming_lengths[r] = d.size();
  };
  MessageSteps messages(call, TagKind::Descriptor, MessageSteps::Carries::Control);
  for (uint32_t piece = 0;; ++piece) {
    const size_t at = messages.expect(from, round_index(tags, from, piece, p),
                                      s.round_receive.data(), s.round_receive.size());
    const std::span<const uint8_t> message(s.round_receive.data(), messages.wait(at));
    // A round a failed call sent to a rank that had left it (ring-step mode) stays unreceived;
    // its tag comes back 2^24 calls later. Such a leftover is dropped, and the receive posted
    // again for this call's message.
    uint64_t seq = 0;
    if (message.size() > kRoundMessageHeader + 4 &&
        CallDescriptor::peek_seq(message.data() + kRoundMessageHeader + 4,
                                 message.size() - kRoundMessageHeader - 4, seq) &&
        seq < call.seq()) {
      messages.forget_last_arrival();
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

void run_rounds(Call& call, const schedule::Schedule& sched, size_t first, size_t end,
                size_t capacity, RoundTags tags, const RoundHooks& hooks) {
  GroupState& g = call.group();
  ExchangeScratch& s = g.scratch.get<ExchangeScratch>();
  std::vector<int>& chunks = s.round_chunks;
  for (size_t k = first; k < end; ++k) {
    if (s.round_send.size() <= k) s.round_send.resize(k + 1);
    const schedule::Step& step = sched.steps[k];
    if (!step.sends.empty()) {
      const int to = step.sends.front().peer;
      send_round(call, to, chunks_with(step.sends, to, chunks), s.round_send[k], tags);
    }
    if (hooks.sent) hooks.sent(k);
    if (!step.recvs.empty()) {
      const int from = step.recvs.front().peer;
      receive_round(call, from, chunks_with(step.recvs, from, chunks), capacity, tags);
    }
    if (hooks.received && !hooks.received(k)) return;
  }
}

RingStep watch_ring(Call& call) {
  GroupState& g = call.group();
  const schedule::Step& ring = service_schedule(g, schedule::ServiceRounds::Bruck).steps.front();
  RingStep r{ring.sends.front().peer, ring.recvs.front().peer};
  call.watch_neighbours(r.pred, r.succ);
  return r;
}

namespace {

void leave_if_rejected(Call& call, const CallDescriptor& mine) {
  GroupState& g = call.group();
  if (mine.ok) return;
  call.note_error(rejected_arguments(call, g.rank, mine));
  throw InvalidArgument(call.where() + ": " + std::string(mine.error));
}

void check_successor(Call& call, const CallDescriptor& mine, int succ) {
  GroupState& g = call.group();
  ExchangeScratch& s = g.scratch.get<ExchangeScratch>();
  s.descriptors.resize(g.size());
  s.descriptors[succ] = parse_one(call, succ, s.incoming[succ], s.incoming_lengths[succ]);
  check_pair(call, g.rank, mine, succ, s.descriptors[succ]);
}

}  // namespace

RoundHooks ring_step_hooks(Call& call, const CallDescriptor& mine, int succ,
                           std::function<bool()> after_check) {
  RoundHooks hooks;
  hooks.sent = [&call, &mine](size_t round) {
    if (round == 0) leave_if_rejected(call, mine);
  };
  hooks.received = [&call, &mine, succ, after = std::move(after_check)](size_t round) {
    if (round != 0) return true;
    check_successor(call, mine, succ);
    return after();
  };
  return hooks;
}

void ready_rounds(const transport::Transport& t, GroupState& g, const schedule::Schedule& sched,
                  size_t capacity) {
  ExchangeScratch& s = g.scratch.get<ExchangeScratch>();
  const int p = g.size();
  s.incoming.assign(p, nullptr);
  s.incoming_lengths.assign(p, 0);
  s.incoming[g.rank] = s.send.data();
  s.incoming_lengths[g.rank] = s.send.size();
  s.round_receive.resize(std::min(
      t.max_message_bytes(),
      kRoundMessageHeader + static_cast<size_t>(schedule::largest_round(sched)) * (capacity + 4)));
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
  ExchangeScratch& s = g.scratch.get<ExchangeScratch>();
  const size_t capacity = descriptor_capacity(g.eager_limit(t.max_message_bytes()));
  if (s.receive.size() != static_cast<size_t>(p) || s.receive_capacity != capacity) {
    s.receive.assign(p, std::vector<uint8_t>(capacity));
    s.receive_capacity = capacity;
  }
  if (g.hosts > 1) g.mailbox.off_across_hosts();
  return capacity;
}

}  // namespace rdmacoll::engine
