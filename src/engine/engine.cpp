#include "engine/engine.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>

#include "common/log.hpp"
#include "engine/call_descriptor.hpp"
#include "engine/eager_slots.hpp"
#include "engine/reduce.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll {

std::string GroupState::describe() const {
  std::ostringstream os;
  os << "group " << id << " (ranks [";
  for (size_t i = 0; i < members.size(); ++i)
    os << (i ? ", " : "") << members[i];
  os << "])";
  return os.str();
}

}  // namespace rdmacoll

namespace rdmacoll::engine {

using transport::Clock;
using transport::RequestPtr;

schedule::Algorithm choose_algorithm(int p, size_t bytes_per_rank, int hosts) {
  // RDMACOLL_ALGO is read once per process; every call of every group consults it.
  static const std::optional<schedule::Algorithm> forced =
      []() -> std::optional<schedule::Algorithm> {
    const char* v = std::getenv("RDMACOLL_ALGO");
    const std::string s = v ? v : "auto";
    if (s == "auto" || s.empty()) return std::nullopt;
    return schedule::parse_algorithm(s);
  }();
  if (!forced) return schedule::choose_algorithm(p, bytes_per_rank, hosts);
  if (*forced == schedule::Algorithm::RecursiveDoubling && !schedule::is_power_of_two(p)) {
    throw InvalidArgument("RDMACOLL_ALGO=rd needs a power-of-two group, got " + std::to_string(p) +
                          " ranks");
  }
  return *forced;
}

namespace {

// One collective call in flight: owns its requests and cancels whatever is still pending
// when the call ends early, so no receive lands in memory the caller may free.
class Call {
 public:
  Call(transport::Transport& t, GroupState& g, const char* op, SpinPolicy spin)
      : t_(t),
        g_(g),
        op_(op),
        seq_(g.next_seq++),
        deadline_(Clock::now() + g.timeout),
        spin_(spin),
        recvs_(g.scratch.recvs),
        sends_(g.scratch.sends) {
    recvs_.clear();
    sends_.clear();
  }

  ~Call() {
    for (auto* list : {&recvs_, &sends_}) {
      for (auto& p : *list) {
        if (p.req && !p.req->done()) t_.cancel(p.req);
      }
      list->clear();  // keeps the capacity for the group's next call
    }
  }

  uint64_t seq() const { return seq_; }

  std::string where() const {
    return std::string(op_) + " (" + g_.describe() + ", call #" + std::to_string(seq_) + ", rank " +
           std::to_string(g_.rank) + " of " + std::to_string(g_.size()) + ")";
  }

  // Runs a transport call; a failure it throws gets this call's context and breaks the group.
  template <typename F>
  auto guarded(F&& f) {
    try {
      return f();
    } catch (const PeerFailure& e) {
      fail<PeerFailure>(where() + ": " + e.what());
    } catch (const TransportError& e) {
      fail<TransportError>(where() + ": " + e.what());
    }
  }

  std::vector<Pending>& recvs() { return recvs_; }
  std::vector<Pending>& sends() { return sends_; }

  int global(int group_rank) const { return g_.members[group_rank]; }

  // Waits until list[begin, end) is complete; throws PeerFailure or Timeout (and marks the
  // group broken, since ranks may now be out of step).
  void wait(std::vector<Pending>& list, size_t begin, size_t end) {
    int idle = 0;
    for (;;) {
      bool all_done = true;
      for (size_t i = begin; i < end; ++i) {
        const Pending& p = list[i];
        if (p.req->done()) continue;
        if (p.req->failed()) {
          fail<PeerFailure>(where() + ": " + p.what() + " with rank " +
                            std::to_string(global(p.peer)) + " failed: " + p.req->error());
        }
        all_done = false;
      }
      if (all_done) return;
      if (t_.progress()) {
        idle = 0;
        continue;
      }
      if (keep_spinning(idle)) continue;
      for (size_t i = begin; i < end; ++i) {
        if (!list[i].req->done()) check_alive(list[i].peer);
      }
      if (Clock::now() >= deadline_) fail<Timeout>(timeout_message(list, begin, end));
      t_.wait_for_event(deadline_);
    }
  }

  // Waits until every other member's eager slot for this call is complete: polls our own
  // memory, then (as wait() does) checks on the missing peers and blocks, after telling
  // writers through the `sleeping` word to ring the doorbell.
  void wait_slots(const EagerSlots& slots) {
    const int p = g_.size();
    const uint64_t flag = seq_ + 1;
    auto arrived = [&](int peer) {
      return EagerSlots::flag(slots.local_slot(peer, seq_)).load(std::memory_order_seq_cst) == flag;
    };
    auto missing = [&]() {
      for (int i = 1; i < p; ++i) {
        const int peer = (g_.rank + p - i) % p;
        if (!arrived(peer)) return peer;
      }
      return -1;
    };
    int idle = 0;
    while (missing() >= 0) {
      if (keep_spinning(idle)) {
        if (idle % 16 == 0) t_.progress();
        continue;
      }
      t_.progress();
      for (int peer = 0; peer < p; ++peer) {
        if (peer != g_.rank && !arrived(peer)) check_alive(peer);
      }
      if (Clock::now() >= deadline_) {
        fail<Timeout>(where() + ": timed out after " + std::to_string(g_.timeout.count()) +
                      " ms; still waiting for the call descriptor (eager slot) of rank " +
                      std::to_string(global(missing())));
      }
      // Dekker with the writers (exchange_through_slots): either they see `sleeping` and
      // ring, or we see their flag here and do not block.
      // (All four accesses are seq_cst, which orders each store before the later load.)
      slots.local_sleeping().store(flag, std::memory_order_seq_cst);
      if (missing() >= 0) t_.wait_for_event(deadline_);
      slots.local_sleeping().store(0, std::memory_order_relaxed);
    }
  }

 private:
  std::string timeout_message(const std::vector<Pending>& list, size_t begin, size_t end) const {
    std::ostringstream os;
    os << where() << ": timed out after " << g_.timeout.count() << " ms; still waiting for";
    bool first = true;
    for (size_t i = begin; i < end; ++i) {
      if (list[i].req->done()) continue;
      os << (first ? " " : ", ") << list[i].what() << " with rank " << global(list[i].peer);
      first = false;
    }
    return os.str();
  }

  // One idle round: true while the wait should keep polling. Polling first saves a wake-up
  // from poll() (tens of us); when ranks outnumber cores every round yields, since the rank
  // we wait for may be queued behind us on this core.
  bool keep_spinning(int& idle) {
    if (++idle <= 64) {
      if (spin_.yield) sched_yield();
      return true;
    }
    if (idle == 65) spin_until_ = Clock::now() + spin_.duration;
    if (Clock::now() < spin_until_) {
      if (spin_.yield) sched_yield();
      return true;
    }
    return false;
  }

  void check_alive(int peer) {
    if (auto why = t_.peer_failure(global(peer))) {
      fail<PeerFailure>(where() + ": rank " + std::to_string(global(peer)) + " is gone: " + *why);
    }
  }

  template <typename E>
  [[noreturn]] void fail(const std::string& message) {
    g_.broken = message;
    throw E(message);
  }

  transport::Transport& t_;
  GroupState& g_;
  const char* op_;
  uint64_t seq_;
  Clock::time_point deadline_;
  SpinPolicy spin_;
  Clock::time_point spin_until_{};
  std::vector<Pending>& recvs_;  // the group's scratch lists
  std::vector<Pending>& sends_;
};

// A source range outside any registration, for transports that read any memory.
class SourceView final : public transport::MemoryRegion {
 public:
  using MemoryRegion::MemoryRegion;
  transport::Bytes packed_key() const override { return {}; }
};

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

std::string describe_args(const CallDescriptor& d) {
  return "input " + std::to_string(d.in_numel) + " x " +
         dtype_name(static_cast<DType>(d.in_dtype)) + ", output " + std::to_string(d.out_numel) +
         " x " + dtype_name(static_cast<DType>(d.out_dtype));
}

// Parses and checks every peer's descriptor of this call (index = group rank; ours is `mine`).
// The result lives in the group's scratch and views the buffers the messages arrived in (receive
// buffers or eager slots): valid until the group's next call.
const std::vector<CallDescriptor>& parse_descriptors(GroupState& g, Call& call,
                                                     const CallDescriptor& mine,
                                                     const uint8_t* const* messages,
                                                     const size_t* lengths) {
  const int p = g.size();
  CallScratch& s = g.scratch;
  s.descriptors.resize(p);
  s.descriptors[g.rank] = mine;
  for (int peer = 0; peer < p; ++peer) {
    if (peer == g.rank) continue;
    CallDescriptor d = CallDescriptor::parse(messages[peer], lengths[peer]);
    if (d.seq != call.seq() || d.group != g.id || d.rank != peer) {
      throw TransportError(call.where() + ": descriptor from rank " +
                           std::to_string(call.global(peer)) + " is for another call (group " +
                           std::to_string(d.group) + ", call #" + std::to_string(d.seq) + ")");
    }
    s.descriptors[peer] = d;
  }
  return s.descriptors;
}

// Eager slots are on: store our descriptor into every peer's slot, then read theirs from ours.
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
    EagerSlots::flag(slot).store(flag, std::memory_order_seq_cst);
  }
  // Dekker with Call::wait_slots: a peer that went to sleep before our flag landed is woken.
  for (int i = 1; i < p; ++i) {
    const int peer = (g.rank + i) % p;
    if (slots.remote_sleeping(peer).load(std::memory_order_seq_cst) == flag) {
      call.guarded([&] {
        t.doorbell(call.global(peer));
        return 0;
      });
    }
  }
  call.wait_slots(slots);
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

// Sends our descriptor to every other member and collects theirs: through eager slots once the
// group has them, else as messages (which also carry the slots' set-up).
const std::vector<CallDescriptor>& exchange_descriptors(transport::Transport& t, GroupState& g,
                                                        Call& call, const CallDescriptor& mine_in) {
  const int p = g.size();
  CallScratch& s = g.scratch;
  if (s.slots.active()) return exchange_through_slots(t, g, call, mine_in);
  CallDescriptor mine = mine_in;
  // Sized for the largest descriptor any member may send: header, key, error and an eager
  // chunk. Allocated once per group.
  const size_t capacity = descriptor_capacity(eager_limit(p, g.hosts, t.max_message_bytes()));
  if (s.receive.size() != static_cast<size_t>(p) || s.receive_capacity != capacity) {
    s.receive.assign(p, std::vector<uint8_t>(capacity));
    s.receive_capacity = capacity;
  }
  s.slots.annotate(t, p, capacity, mine);
  mine.serialize_into(s.send, capacity);
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
    // The transport owns the copy of a control message until it is sent; nothing to track.
    call.guarded([&] { return t.send(call.global(peer), tag, s.send.data(), s.send.size()); });
  }
  call.wait(call.recvs(), 0, call.recvs().size());
  s.incoming.resize(p);
  s.incoming_lengths.resize(p);
  for (const Pending& pr : call.recvs()) {
    s.incoming[pr.peer] = s.receive[pr.peer].data();
    s.incoming_lengths[pr.peer] = pr.req->length();
  }
  call.recvs().clear();
  const auto& all = parse_descriptors(g, call, mine, s.incoming.data(), s.incoming_lengths.data());
  s.slots.advance(t, g.members, g.rank, all);
  return all;
}

// Every rank sees the same descriptors, so every rank raises the same error.
void check_same_collective(const Call& call, const std::vector<CallDescriptor>& all) {
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r].op != all[0].op) {
      throw InvalidArgument(call.where() + ": ranks called different collectives: rank " +
                            std::to_string(call.global(0)) + " " + collective_name(all[0].op) +
                            ", rank " + std::to_string(call.global(r)) + " " +
                            collective_name(all[r].op) +
                            "; every member must call the same collectives in the same order");
    }
  }
}

void check_descriptors(const Call& call, const std::vector<CallDescriptor>& all) {
  check_same_collective(call, all);
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r].ok) {
      throw InvalidArgument(call.where() + ": rank " + std::to_string(call.global(r)) +
                            " rejected its arguments: " + std::string(all[r].error));
    }
  }
  const CallDescriptor& ref = all[0];
  for (size_t r = 1; r < all.size(); ++r) {
    const CallDescriptor& d = all[r];
    if (d.in_numel != ref.in_numel || d.in_dtype != ref.in_dtype || d.out_dtype != ref.out_dtype ||
        d.out_numel != ref.out_numel) {
      throw InvalidArgument(call.where() + ": ranks disagree: rank " +
                            std::to_string(call.global(0)) + " has " + describe_args(ref) +
                            ", rank " + std::to_string(call.global(r)) + " has " +
                            describe_args(d) + "; every rank must pass the same sizes and dtypes");
    }
    if (d.total_numel != ref.total_numel) {
      throw InvalidArgument(
          call.where() + ": ranks disagree: rank " + std::to_string(call.global(0)) + " reduces " +
          std::to_string(ref.total_numel) + " elements, rank " + std::to_string(call.global(r)) +
          " " + std::to_string(d.total_numel) + "; every rank must pass the same sizes and dtypes");
    }
    if (d.reduce_op != ref.reduce_op) {
      throw InvalidArgument(call.where() + ": ranks disagree on the reduce op: rank " +
                            std::to_string(call.global(0)) + " " +
                            reduce_op_name(static_cast<ReduceOp>(ref.reduce_op)) + ", rank " +
                            std::to_string(call.global(r)) + " " +
                            reduce_op_name(static_cast<ReduceOp>(d.reduce_op)));
    }
  }
  // Same sizes but not the same path: the eager limit differs between ranks (it can only be
  // RDMACOLL_EAGER_LIMIT). Going on would leave the inline ranks' peers waiting for writes.
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r].inline_data.empty() != ref.inline_data.empty()) {
      const size_t inl = ref.inline_data.empty() ? r : 0;
      throw InvalidArgument(call.where() + ": ranks disagree on the eager path: rank " +
                            std::to_string(call.global(inl)) + " sent its chunk inline, rank " +
                            std::to_string(call.global(inl == 0 ? r : 0)) +
                            " did not; every rank must see the same RDMACOLL_EAGER_LIMIT");
    }
  }
}

const schedule::Schedule& schedule_for(GroupState& g, size_t bytes_per_rank) {
  const schedule::Algorithm a = choose_algorithm(g.size(), bytes_per_rank, g.hosts);
  auto it = g.schedules.find(a);
  if (it == g.schedules.end()) {
    const auto& order = a == schedule::Algorithm::Ring ? g.ring_order : g.order;
    it = g.schedules.emplace(a, schedule::make_schedule(a, order, g.rank)).first;
    log::info(g.describe() + ": all_gather algorithm " + schedule::algorithm_name(a) + ", " +
              std::to_string(it->second.steps.size()) + " steps, " +
              std::to_string(bytes_per_rank) + " bytes per rank, " + std::to_string(g.hosts) +
              " host(s)");
  }
  return it->second;
}

}  // namespace

void Engine::all_gather(GroupState& g, const AllGatherArgs& a) {
  const char* name = collective_name(a.op);
  check_usable(g, name);
  Call call(transport_, g, name, spin_);
  const int p = g.size();
  const size_t chunk = static_cast<size_t>(a.in_numel) * element_size(a.out_dtype);
  const size_t out_bytes = static_cast<size_t>(a.out_numel) * element_size(a.out_dtype);
  uint8_t* out = static_cast<uint8_t*>(a.out);
  uint8_t* const own_slot = out + static_cast<size_t>(g.rank) * chunk;
  const bool inline_path = a.local_error.empty() && chunk > 0 && p > 1 &&
                           chunk <= eager_limit(p, g.hosts, transport_.max_message_bytes());
  // Our own chunk goes out straight from the input where the transport allows (UCX): a peer
  // that reads our output slot (a CMA read on one host) takes those cache lines from us, and
  // the next call's local copy into the slot must take them back: at 256 KiB on 2 ranks that
  // doubled the out-of-place time (40 vs 20 us). The input is only ever read. The local copy
  // then waits until the first sends are posted, so peers start reading meanwhile.
  const bool own_from_input = a.local_error.empty() && !inline_path && p > 1 &&
                              a.in_dtype == a.out_dtype && a.in != own_slot &&
                              !transport_.needs_registered_source();
  bool own_copied = !a.local_error.empty() || (own_slot == a.in && a.in_dtype == a.out_dtype);
  auto copy_own = [&] {
    if (own_copied) return;
    convert_elements(own_slot, a.out_dtype, a.in, a.in_dtype, static_cast<size_t>(a.in_numel));
    own_copied = true;
  };
  if (!own_from_input) copy_own();
  if (p == 1) {
    if (!a.local_error.empty()) throw InvalidArgument(call.where() + ": " + a.local_error);
    return;
  }

  std::shared_ptr<transport::MemoryRegion> region;
  transport::Bytes key;
  CallDescriptor mine;
  mine.seq = call.seq();
  mine.group = g.id;
  mine.rank = g.rank;
  mine.op = a.op;
  mine.reduce_op = static_cast<uint8_t>(a.reduce_op);
  mine.total_numel = a.total_numel;
  mine.ok = a.local_error.empty();
  mine.error = a.local_error;
  mine.in_dtype = static_cast<uint8_t>(a.in_dtype);
  mine.out_dtype = static_cast<uint8_t>(a.out_dtype);
  mine.in_numel = static_cast<uint64_t>(a.in_numel);
  mine.out_numel = static_cast<uint64_t>(a.out_numel);
  // Small chunks ride inline in the descriptors (the eager path): one all-to-all message
  // round, no registration, no data phase. Every rank decides alike (same chunk size, same
  // limit); a rank whose sizes differ is caught by check_descriptors either way.
  if (inline_path) {
    mine.inline_data = {out + static_cast<size_t>(g.rank) * chunk, chunk};
  } else if (mine.ok) {
    region = transport_.register_memory(out, out_bytes);
    mine.out_addr = reinterpret_cast<uint64_t>(out);
    mine.out_bytes = out_bytes;
    key = region->packed_key();
    mine.key = key;
  }
  const std::vector<CallDescriptor>& all = exchange_descriptors(transport_, g, call, mine);
  if (!mine.ok) throw InvalidArgument(call.where() + ": " + a.local_error);
  check_descriptors(call, all);
  if (chunk == 0) return;
  if (inline_path) {
    for (int r = 0; r < p; ++r) {
      if (r == g.rank) continue;
      if (all[r].inline_data.size() != chunk) {
        throw TransportError(call.where() + ": rank " + std::to_string(call.global(r)) + " sent " +
                             std::to_string(all[r].inline_data.size()) +
                             " inline bytes, expected " + std::to_string(chunk));
      }
      std::memcpy(out + static_cast<size_t>(r) * chunk, all[r].inline_data.data(), chunk);
    }
    return;
  }

  const SourceView input(const_cast<void*>(a.in), chunk);

  const schedule::Schedule& sched = schedule_for(g, chunk);
  // Post every expected arrival up front; remember where each step's arrivals end.
  std::vector<size_t> recv_end;
  for (const auto& step : sched.steps) {
    for (const auto& r : step.recvs) {
      const uint64_t tag =
          make_tag(TagKind::Data, g.id, call.seq(), static_cast<uint32_t>(r.first));
      call.recvs().push_back({call.guarded([&] {
                                return transport_.expect(call.global(r.peer), *region,
                                                         r.first * chunk, r.count * chunk, tag);
                              }),
                              r.peer, Pending::Kind::Arrival, r.first, r.count});
    }
    recv_end.push_back(call.recvs().size());
  }
  std::vector<std::unique_ptr<transport::RemoteRegion>> remotes(p);
  for (size_t s = 0; s < sched.steps.size(); ++s) {
    // A step forwards chunks that arrived in earlier steps.
    if (s > 0) {
      copy_own();  // overlaps the first step's transfers
      call.wait(call.recvs(), 0, recv_end[s - 1]);
    }
    for (const auto& w : sched.steps[s].sends) {
      const CallDescriptor& dst = all[w.peer];
      if (!remotes[w.peer]) {
        remotes[w.peer] = call.guarded([&] {
          return transport_.unpack_remote(call.global(w.peer), dst.out_addr, dst.out_bytes,
                                          dst.key);
        });
      }
      const size_t offset = w.first * chunk;
      const size_t length = w.count * chunk;
      if (offset + length > dst.out_bytes) {  // never write outside what the peer advertised
        throw TransportError(call.where() + ": refusing to write bytes [" + std::to_string(offset) +
                             ", " + std::to_string(offset + length) + ") into rank " +
                             std::to_string(call.global(w.peer)) + "'s output of " +
                             std::to_string(dst.out_bytes) + " bytes");
      }
      const uint64_t tag =
          make_tag(TagKind::Data, g.id, call.seq(), static_cast<uint32_t>(w.first));
      const bool own = own_from_input && w.first == g.rank && w.count == 1;
      if (!own && w.first <= g.rank && g.rank < w.first + w.count) copy_own();
      call.sends().push_back(
          {call.guarded([&] {
             const transport::MemoryRegion& src =
                 own ? static_cast<const transport::MemoryRegion&>(input) : *region;
             return transport_.write(src, own ? 0 : offset, *remotes[w.peer], offset, length, tag);
           }),
           w.peer, Pending::Kind::Write, w.first, w.count});
    }
  }
  copy_own();
  call.wait(call.recvs(), 0, call.recvs().size());
  call.wait(call.sends(), 0, call.sends().size());
}

void Engine::barrier(GroupState& g) {
  check_usable(g, "barrier");
  if (g.size() == 1) {
    ++g.next_seq;
    return;
  }
  Call call(transport_, g, "barrier", spin_);
  CallDescriptor mine;
  mine.seq = call.seq();
  mine.group = g.id;
  mine.rank = g.rank;
  mine.op = CollectiveOp::Barrier;
  check_same_collective(call, exchange_descriptors(transport_, g, call, mine));
}

// Phase one of a large all_reduce (a direct reduce-scatter): rank r sends piece j (m elements
// of data) straight to rank j's scratch, at slot r; rank j then folds the p copies of its piece
// in rank order into its own piece of data. Descriptors go first, as for every call, so sizes,
// dtypes, the operator and local errors are checked on every rank before anything is written.
void Engine::reduce_scatter_direct(GroupState& g, uint8_t* data, DType dtype, int64_t m,
                                   ReduceOp op, uint64_t total_numel,
                                   const std::string& local_error) {
  check_usable(g, "all_reduce");
  Call call(transport_, g, "all_reduce", spin_);
  const int p = g.size();
  const size_t piece = static_cast<size_t>(m) * element_size(dtype);
  auto& scratch = g.scratch.reduce;
  if (scratch.size() < p * piece) scratch.resize(p * piece);
  uint8_t* const slots = scratch.data();
  std::shared_ptr<transport::MemoryRegion> region;
  std::shared_ptr<transport::MemoryRegion> source;  // transports that read registered memory only
  transport::Bytes key;
  CallDescriptor mine;
  mine.seq = call.seq();
  mine.group = g.id;
  mine.rank = g.rank;
  mine.op = CollectiveOp::AllReduce;
  mine.reduce_op = static_cast<uint8_t>(op);
  mine.total_numel = total_numel;
  mine.ok = local_error.empty();
  mine.error = local_error;
  mine.in_dtype = mine.out_dtype = static_cast<uint8_t>(dtype);
  mine.in_numel = static_cast<uint64_t>(m);
  mine.out_numel = static_cast<uint64_t>(p) * m;
  if (mine.ok) {
    region = transport_.register_memory(slots, p * piece);
    if (transport_.needs_registered_source()) source = transport_.register_memory(data, p * piece);
    mine.out_addr = reinterpret_cast<uint64_t>(slots);
    mine.out_bytes = p * piece;
    key = region->packed_key();
    mine.key = key;
  }
  const std::vector<CallDescriptor>& all = exchange_descriptors(transport_, g, call, mine);
  if (!mine.ok) throw InvalidArgument(call.where() + ": " + local_error);
  check_descriptors(call, all);
  const SourceView input(data, p * piece);
  const transport::MemoryRegion& src =
      source ? *source : static_cast<const transport::MemoryRegion&>(input);
  for (int j = 0; j < p; ++j) {
    if (j == g.rank) continue;
    const uint64_t tag = make_tag(TagKind::Data, g.id, call.seq(), static_cast<uint32_t>(j));
    call.recvs().push_back({call.guarded([&] {
                              return transport_.expect(call.global(j), *region, j * piece, piece,
                                                       tag);
                            }),
                            j, Pending::Kind::Arrival, j, 1});
  }
  std::vector<std::unique_ptr<transport::RemoteRegion>> remotes(p);
  const uint64_t tag = make_tag(TagKind::Data, g.id, call.seq(), static_cast<uint32_t>(g.rank));
  for (int i = 1; i < p; ++i) {
    const int j = (g.rank + i) % p;
    const CallDescriptor& dst = all[j];
    const size_t offset = static_cast<size_t>(g.rank) * piece;
    if (offset + piece > dst.out_bytes) {  // never write outside what the peer advertised
      throw TransportError(call.where() + ": refusing to write bytes [" + std::to_string(offset) +
                           ", " + std::to_string(offset + piece) + ") into rank " +
                           std::to_string(call.global(j)) + "'s scratch of " +
                           std::to_string(dst.out_bytes) + " bytes");
    }
    remotes[j] = call.guarded([&] {
      return transport_.unpack_remote(call.global(j), dst.out_addr, dst.out_bytes, dst.key);
    });
    call.sends().push_back({call.guarded([&] {
                              return transport_.write(src, j * piece, *remotes[j], offset, piece,
                                                      tag);
                            }),
                            j, Pending::Kind::Write, g.rank, 1});
  }
  call.wait(call.recvs(), 0, call.recvs().size());
  call.wait(call.sends(), 0, call.sends().size());
  // Our own copy stays where it is: the fold reads it in place, in its rank-order position.
  auto& chunks = g.scratch.reduce_chunks;
  chunks.resize(p);
  for (int r = 0; r < p; ++r)
    chunks[r] = r == g.rank ? data + r * piece : slots + r * piece;
  reduce_chunks(data + g.rank * piece, chunks.data(), dtype, op, p, static_cast<size_t>(m));
}

// all_reduce. Tensors above the eager limit run as a direct reduce-scatter then an in-place
// all-gather of the reduced pieces, in rounds of at most 4 MiB pieces: each rank receives
// 2 (p-1)/p of the tensor, the bandwidth optimum. Small tensors (and the last < p elements)
// gather every member's copy in one round (eager, through the slots on one host) and fold
// locally. Either way each element is folded by one rule in rank order (16-bit floats in float),
// so every rank ends with the same bits. The whole length and the operator ride in every call's
// descriptors, so a disagreement raises on every rank before anything is written.
void Engine::all_reduce(GroupState& g, void* data, DType dtype, int64_t numel, ReduceOp op,
                        const std::string& local_error) {
  constexpr size_t kSegmentBytes = 4u << 20;
  const size_t es = element_size(dtype);
  const int p = g.is_member() ? g.size() : 1;
  uint8_t* const bytes = static_cast<uint8_t*>(data);
  const int64_t per_piece = static_cast<int64_t>(std::max<size_t>(1, kSegmentBytes / es));
  int64_t done = 0;
  // Beyond the eager limit the gather would leave the one-round path anyway, and then moving
  // (p-1)/p of the tensor twice beats moving all of it p-1 times (measured on 4 ranks, 128 KiB:
  // 92-95 us against 190-209; at 64 KiB the gather still wins on 2 ranks, 19 against 24-26 us).
  if (p > 1 &&
      static_cast<size_t>(numel) * es > eager_limit(p, g.hosts, transport_.max_message_bytes())) {
    while (numel - done >= p) {
      const int64_t m = std::min<int64_t>((numel - done) / p, per_piece);
      uint8_t* const base = bytes + done * es;
      reduce_scatter_direct(g, base, dtype, m, op, static_cast<uint64_t>(numel), local_error);
      AllGatherArgs a;  // in place: our reduced piece is our own slot of the output
      a.out = base;
      a.out_dtype = dtype;
      a.out_numel = p * m;
      a.in = base + static_cast<size_t>(g.rank) * m * es;
      a.in_dtype = dtype;
      a.in_numel = m;
      a.op = CollectiveOp::AllReduce;
      a.reduce_op = op;
      a.total_numel = static_cast<uint64_t>(numel);
      all_gather(g, a);
      done += p * m;
    }
    if (done == numel) return;
  }
  auto& scratch = g.scratch.reduce;
  do {
    const int64_t n = std::min(per_piece, numel - done);
    if (scratch.size() < static_cast<size_t>(p) * n * es) scratch.resize(p * n * es);
    AllGatherArgs a;
    a.out = scratch.data();
    a.out_dtype = dtype;
    a.out_numel = p * n;
    a.in = bytes + done * es;
    a.in_dtype = dtype;
    a.in_numel = n;
    a.local_error = local_error;
    a.op = CollectiveOp::AllReduce;
    a.reduce_op = op;
    a.total_numel = static_cast<uint64_t>(numel);
    all_gather(g, a);
    reduce_chunks(bytes + done * es, scratch.data(), dtype, op, p, static_cast<size_t>(n));
    done += n;
  } while (done < numel);
}

}  // namespace rdmacoll::engine
