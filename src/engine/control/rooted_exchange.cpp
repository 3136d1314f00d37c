// The rooted rounds of gather, scatter and reduce (control_plane.hpp, exchange_rooted): the
// ring check, the binomial gather of descriptors to the root, its verdict back down.

#include <algorithm>
#include <exception>
#include <map>
#include <string>

#include "engine/control/agreement.hpp"
#include "engine/control/control_plane.hpp"
#include "engine/control/descriptor_messages.hpp"
#include "engine/control/descriptor_round.hpp"
#include "schedule/service.hpp"

namespace rdmacoll::engine {

namespace {

// What a refusal says to the members: the reason reject() noted, else the error without this
// call's prefix.
std::string refusal_reason(const Call& call, const Error& e) {
  if (!call.noted_error().empty()) return call.noted_error();
  const std::string what = e.what();
  const std::string prefix = call.where() + ": ";
  return what.starts_with(prefix) ? what.substr(prefix.size()) : what;
}

// What the rooted rounds keep per group (core/scratch_arena.hpp): their schedules by root, and
// whether they pay for this group (-1: not decided yet).
struct RootedScratch {
  std::map<int, schedule::Schedule> schedules;
  int pays = -1;
};

// The rooted rounds for `root` (schedule/service.hpp), made once per group and root.
const schedule::Schedule& rooted_rounds(GroupState& g, int root) {
  auto& cached = g.scratch.get<RootedScratch>().schedules;
  auto it = cached.find(root);
  if (it == cached.end()) {
    it = cached.emplace(root, schedule::rooted_schedule(g.ring_order, root, g.rank)).first;
  }
  return it->second;
}

// schedule::rooted_rounds_pay for the group, decided once.
bool rooted_rounds_pay(GroupState& g, size_t capacity) {
  int& pays = g.scratch.get<RootedScratch>().pays;
  if (pays < 0) {
    std::vector<int> on_host(static_cast<size_t>(g.hosts), 0);
    int per_host = 0;
    for (int h : g.host_of)
      per_host = std::max(per_host, ++on_host[static_cast<size_t>(h)]);
    pays = schedule::rooted_rounds_pay(g.size(), g.hosts, per_host, capacity) ? 1 : 0;
  }
  return pays == 1;
}

}  // namespace

const std::vector<CallDescriptor>& exchange_rooted(Call& call, const CallDescriptor& mine_in,
                                                   int root, const Verdict& verdict) {
  transport::Transport& t = call.transport();
  GroupState& g = call.group();
  const int p = g.size();
  ExchangeScratch& s = g.scratch.get<ExchangeScratch>();
  const CallDescriptor mine = stamped(g, mine_in);
  auto own_error = [&] {
    if (!mine.ok) throw InvalidArgument(call.where() + ": " + std::string(mine.error));
  };
  size_t capacity = 0;
  const DescriptorExchange mode = g.tuning.descriptors;
  bool rooted = !g.mailbox.active() &&
                (mode == DescriptorExchange::Rooted || mode == DescriptorExchange::Auto);
  if (rooted) {
    capacity = ready_receive_buffers(t, g);
    rooted = g.mailbox.state() == Mailbox::State::Off &&
             descriptor_rounds(t, g, capacity) != Rounds::Direct &&
             (mode == DescriptorExchange::Rooted || rooted_rounds_pay(g, capacity));
  }
  if (!rooted) {  // the mailbox, or the slots still coming up (they need every descriptor)
    const std::vector<CallDescriptor>& all = exchange_descriptors(call, mine_in);
    own_error();
    verdict(all);
    return all;
  }
  s.seen_only = -1;
  const size_t recvs_before = call.recvs().size();  // the root's arrivals, posted already
  mine.serialize_into(s.send, capacity);
  const schedule::Schedule& sched = rooted_rounds(g, root);
  ready_rounds(t, g, sched, capacity);
  // The tree is the root's: a rank that names another root would wait for children that never
  // send. So the ring step comes first (RingStep); past it mine.ok holds, and the successor
  // agrees with us.
  {
    const RoundHooks ring = ring_step_hooks(call, mine, watch_ring(call).succ, [] { return true; });
    const schedule::Schedule& bruck = service_schedule(g, schedule::ServiceRounds::Bruck);
    run_rounds(call, bruck, 0, 1, capacity, RoundTags::RingCheck, ring);
  }
  const size_t levels = sched.steps.size() / 2;
  run_rounds(call, sched, 0, levels, capacity);  // up to the root

  // The root judges; a refusal goes down in place of its descriptor.
  std::exception_ptr refused;
  std::vector<uint8_t> refusal_bytes;
  if (g.rank == root) {
    CallDescriptor refusal = mine;
    std::string reason;
    auto refuse = [&](CallDescriptor::Refusal kind, const Error& e) {
      refused = std::current_exception();
      refusal.refused = kind;
      reason = refusal_reason(call, e);
    };
    try {
      verdict(parse_descriptors(call, mine, s.incoming.data(), s.incoming_lengths.data()));
    } catch (const InvalidArgument& e) {
      refuse(CallDescriptor::Refusal::InvalidArgument, e);
    } catch (const TransportError& e) {
      refuse(CallDescriptor::Refusal::TransportError, e);
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
  run_rounds(call, sched, levels, sched.steps.size(), capacity);  // and back down
  call.wait(call.sends(), 0, call.sends().size());
  call.sends().clear();
  call.recvs().resize(recvs_before);
  if (g.rank == root) {
    if (refused) std::rethrow_exception(refused);
    return s.descriptors;
  }
  s.descriptors.assign(p, CallDescriptor{});
  s.descriptors[g.rank] = mine;
  const CallDescriptor d = parse_one(call, root, s.incoming[root], s.incoming_lengths[root]);
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
