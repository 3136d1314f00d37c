// Whether the ranks agree on a call: the same collective, no rank that refused its own
// arguments, the same sizes, dtypes, lengths, root, operator and path. Every rank sees the same
// descriptors, so every rank raises the same error; a ring call that saw only its successor's
// checks that pair (around the ring, every pair agreeing is every rank agreeing).

#include "engine/control/agreement.hpp"

#include <optional>
#include <string>

#include "engine/control/exchange_scratch.hpp"

namespace rdmacoll::engine {

namespace {

std::string describe_args(const CallDescriptor& d) {
  return "input " + std::to_string(d.in_numel) + " x " +
         dtype_name(static_cast<DType>(d.in_dtype)) + ", output " + std::to_string(d.out_numel) +
         " x " + dtype_name(static_cast<DType>(d.out_dtype));
}

// Why ranks a and b (group ranks) disagree on the collective, or nullopt.
std::optional<std::string> collective_differs(const Call& call, int a, const CallDescriptor& da,
                                              int b, const CallDescriptor& db) {
  if (da.collective == db.collective) return std::nullopt;
  const CollectiveTable& table = call.group().collectives;
  return "ranks called different collectives: rank " + std::to_string(call.global(a)) + " " +
         table.name(da.collective) + ", rank " + std::to_string(call.global(b)) + " " +
         table.name(db.collective) +
         "; every member must call the same collectives in the same order";
}

}  // namespace

std::string rejected_arguments(const Call& call, int r, const CallDescriptor& d) {
  return "rank " + std::to_string(call.global(r)) +
         " rejected its arguments: " + std::string(d.error);
}

namespace {

// Why the arguments of ranks a and b (group ranks) of one collective disagree, or nullopt.
std::string describe_window(const CallDescriptor& d) {
  if (d.window == 0) return "not in symmetric memory";
  return "at byte " + std::to_string(d.window_offset) + " of symmetric tensor #" +
         std::to_string(d.window);
}

std::optional<std::string> arguments_differ(const Call& call, int a, const CallDescriptor& da,
                                            int b, const CallDescriptor& db) {
  const std::string ra = std::to_string(call.global(a));
  const std::string rb = std::to_string(call.global(b));
  // The collective's rules: the same for both, as collective_differs checked first. A code no
  // row has gets the strictest.
  const Collective* row = call.group().collectives.find(da.collective);
  const bool same_lengths = !row || row->same_lengths;  // else its file checks its lengths
  if (db.in_dtype != da.in_dtype || db.out_dtype != da.out_dtype ||
      (same_lengths && (db.in_numel != da.in_numel || db.out_numel != da.out_numel))) {
    return "ranks disagree: rank " + ra + " has " + describe_args(da) + ", rank " + rb + " has " +
           describe_args(db) + "; every rank must pass the same sizes and dtypes";
  }
  if (db.total_numel != da.total_numel) {
    return "ranks disagree: rank " + ra + " reduces " + std::to_string(da.total_numel) +
           " elements, rank " + rb + " " + std::to_string(db.total_numel) +
           "; every rank must pass the same sizes and dtypes";
  }
  if (db.root != da.root) {
    return std::string("ranks disagree on the ") + call.group().collectives.name(da.collective) +
           "'s root: rank " + ra + " names group rank " + std::to_string(da.root) + ", rank " + rb +
           " group rank " + std::to_string(db.root);
  }
  // A collective stores into the members' symmetric memory only when all name the same place.
  if (db.window != da.window || db.window_offset != da.window_offset) {
    return "ranks disagree on symmetric memory: rank " + ra + "'s tensor is " +
           describe_window(da) + ", rank " + rb + "'s " + describe_window(db) +
           "; every member passes the same part of a tensor from rdmacoll::empty on this group, "
           "or none does";
  }
  if (db.reduce_op != da.reduce_op) {
    return "ranks disagree on the reduce op: rank " + ra + " " +
           reduce_op_name(static_cast<ReduceOp>(da.reduce_op)) + ", rank " + rb + " " +
           reduce_op_name(static_cast<ReduceOp>(db.reduce_op));
  }
  // Peers read the chunks only where every member offered its own (all_gather.cpp); a member
  // that did not waits for writes that would never come.
  if ((db.source_addr == 0) != (da.source_addr == 0)) {
    const bool a_offers = da.source_addr != 0;
    return "ranks disagree on the data path: rank " + (a_offers ? ra : rb) +
           " offered its chunk for its peers to read, rank " + (a_offers ? rb : ra) +
           " did not; every member must see the same RDMACOLL_PEER_READS";
  }
  // Same sizes but not the same path: the eager limit differs between ranks (it can only be
  // RDMACOLL_EAGER_LIMIT). Going on would leave the inline ranks' peers waiting for writes.
  // (Rooted collectives and all_to_all inline on some ranks only; their files check the paths.)
  if (row && row->every_rank_inlines && db.inline_data.empty() != da.inline_data.empty()) {
    const bool a_inline = !da.inline_data.empty();
    return "ranks disagree on the eager path: rank " + (a_inline ? ra : rb) +
           " sent its chunk inline, rank " + (a_inline ? rb : ra) +
           " did not; every rank must see the same RDMACOLL_EAGER_LIMIT";
  }
  return std::nullopt;
}

}  // namespace

// The checks of check_descriptors for one pair, ours first: the ring step's early look.
void check_pair(const Call& call, int a, const CallDescriptor& da, int b,
                const CallDescriptor& db) {
  if (auto why = collective_differs(call, a, da, b, db)) reject(call, *why);
  if (!db.ok) reject(call, rejected_arguments(call, b, db));
  if (auto why = arguments_differ(call, a, da, b, db)) reject(call, *why);
}

void reject(const Call& call, const std::string& reason) {
  call.note_error(reason);
  throw InvalidArgument(call.where() + ": " + reason);
}

namespace {
// The one peer whose descriptor a ring call saw (ExchangeScratch::seen_only), else -1.
int seen_only(const Call& call) {
  const ExchangeScratch* s = call.group().scratch.find<ExchangeScratch>();
  return s ? s->seen_only : -1;
}
}  // namespace

// Every rank sees the same descriptors, so every rank raises the same error.
void check_same_collective(const Call& call, const std::vector<CallDescriptor>& all) {
  const int only = seen_only(call);
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
  const int only = seen_only(call);
  for (size_t r = 0; r < all.size(); ++r) {
    if (only >= 0 && static_cast<int>(r) != only) continue;
    if (!all[r].ok) reject(call, rejected_arguments(call, static_cast<int>(r), all[r]));
  }
}

void check_descriptors(const Call& call, const std::vector<CallDescriptor>& all) {
  const int only = seen_only(call);
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
