// reduce_scatter_tensor, and the direct reduce-scatter that large all_reduces start with.

#include "engine/collectives/reduce_scatter.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/call.hpp"
#include "engine/collectives/collectives.hpp"
#include "engine/collectives/peer_reads.hpp"
#include "engine/collectives/reduce_scratch.hpp"
#include "engine/control/agreement.hpp"
#include "engine/control/control_plane.hpp"
#include "engine/engine.hpp"
#include "engine/reduce.hpp"
#include "engine/symmetric.hpp"
#include "engine/write_steps.hpp"
#include "schedule/reduce_scatter.hpp"

namespace rdmacoll::engine {

namespace {

// Reduce-scatter rounds move pieces of at most this many bytes.
constexpr size_t kRoundBytes = 4u << 20;

// Whether a reduce-scatter of `input` bytes (p pieces) rides inline in its descriptors: up to
// the eager limit where each member receives only its piece (descriptors_go_direct), and where
// descriptor rounds relay whole inputs, only while the (p - 1) inputs each rank then moves stay
// small; past that the direct round's pieces are faster (docs/performance.md, "reduce_scatter
// over TCP").
constexpr size_t kRelayedInlineBytes = 48u << 10;
bool goes_inline(Engine& e, GroupState& g, size_t input) {
  const transport::Transport& t = e.transport();
  if (!g.is_member() || g.size() < 2 || input > g.eager_limit(t.max_message_bytes())) return false;
  return (g.size() - 1) * input <= kRelayedInlineBytes || descriptors_go_direct(t, g);
}

// The p slots of `piece` bytes in the group's scratch that a direct round's copies land in.
uint8_t* round_slots(GroupState& g, size_t piece) {
  auto& scratch = g.scratch.get<ReduceScratch>().gathered;
  if (scratch.size() < g.size() * piece) scratch.resize(g.size() * piece);
  return scratch.data();
}

// A direct round's fold: the p copies of our piece in rank order into `out`, peer r's in slot r,
// our own read in place from the input.
void fold_round(GroupState& g, const ReduceScatterRound& a, const uint8_t* slots, size_t piece) {
  const int p = g.size();
  auto& chunks = g.scratch.get<ReduceScratch>().chunks;
  chunks.resize(p);
  for (int r = 0; r < p; ++r)
    chunks[r] = r == g.rank ? a.in + r * a.stride : slots + r * piece;
  reduce_chunks(a.out, chunks.data(), a.dtype, a.op, p, static_cast<size_t>(a.m));
}

// A reduce-scatter round's descriptor: m elements per piece, p pieces, the whole call's
// length and the operator, so every disagreement raises on every rank.
CallDescriptor make_round_descriptor(Call& call, const ReduceScatterRound& a) {
  const GroupState& g = call.group();
  RoundArgs args;
  args.collective = &a.collective;
  args.reduce_op = a.op;
  args.total_numel = a.total_numel;
  args.local_error = a.local_error;
  args.in_dtype = args.out_dtype = a.dtype;
  args.in_numel = a.m;
  args.out_numel = static_cast<int64_t>(g.size()) * a.m;
  return make_descriptor(call, args);
}

// The ring (schedule/reduce_scatter.hpp) with one-sided writes: each step's partial sum goes
// into its own slot of the next rank's scratch (p - 1 slots, so no step overwrites an unread
// one), from one of two send buffers that alternate (a step reuses one once the write from
// two steps back has completed). Intermediate folds of an AVG are sums; the last divides.
void reduce_scatter_ring(Engine& e, GroupState& g, const ReduceScatterRound& a) {
  const char* name = a.collective.name;
  check_usable(g, name);
  transport::Transport& t = e.transport();
  Call call(t, g, name, e.spin());
  call.run([&] {
    const int p = g.size();
    const size_t piece = static_cast<size_t>(a.m) * element_size(a.dtype);
    auto& scratch = g.scratch.get<ReduceScratch>().gathered;
    if (scratch.size() < (p + 1) * piece) scratch.resize((p + 1) * piece);
    uint8_t* const slots = scratch.data();
    uint8_t* const acc = slots + (p - 1) * piece;
    const size_t in_span = (p - 1) * a.stride + piece;
    std::shared_ptr<transport::MemoryRegion> region, input_region, acc_region;
    transport::Bytes key;
    CallDescriptor mine = make_round_descriptor(call, a);
    if (mine.ok) {
      region = expose_target(call, mine, slots, (p - 1) * piece, key);
      if (t.needs_registered_source()) {
        input_region = t.register_memory(const_cast<uint8_t*>(a.in), in_span);
        acc_region = t.register_memory(acc, 2 * piece);
      }
    }
    const schedule::Schedule sched = schedule::ring_reduce_scatter(g.ring_order, g.rank);
    const int next = sched.steps[0].sends[0].peer;
    const int prev = sched.steps[0].recvs[0].peer;
    // Step s writes slot s of the successor's scratch: from our input at step 0, then from the
    // send buffer (s % 2) that the fold of step s - 1's arrival filled.
    DataPhase& data = g.scratch.get<DataPhase>();
    WritePlan& plan = data.plan;
    plan.clear("scratch");
    for (int s = 0; s + 1 < p; ++s) {
      const int out_piece = sched.steps[s].sends[0].first;
      plan.arrive(
          {prev, s * piece, piece, static_cast<uint32_t>(s), sched.steps[s].recvs[0].first, 1});
      plan.write({next, s == 0 ? 0 : 1, s == 0 ? out_piece * a.stride : (s % 2) * piece, s * piece,
                  piece, static_cast<uint32_t>(s), out_piece, 1});
      plan.end_step();
    }
    WriteSteps steps(call, t, plan, data.remotes);
    // As a ring all-gather: the arrivals are posted before our descriptor leaves, and only the
    // successor's descriptor comes back (all_gather.cpp, call.hpp).
    if (mine.ok) steps.expect_all(*region);
    const std::vector<CallDescriptor>& all = exchange_descriptors(
        call, mine, mine.ok ? DescriptorsNeeded::Successor : DescriptorsNeeded::All);
    if (!mine.ok) throw InvalidArgument(call.where() + ": " + a.local_error);
    check_descriptors(call, all);
    const SourceView input_view(const_cast<uint8_t*>(a.in), in_span);
    const SourceView acc_view(acc, 2 * piece);
    const transport::MemoryRegion* sources[] = {input_region ? input_region.get() : &input_view,
                                                acc_region ? acc_region.get() : &acc_view};
    const ReduceOp partial = a.op == ReduceOp::Avg ? ReduceOp::Sum : a.op;
    steps.run(
        all, sources,
        [&](size_t s) {  // the send buffer the next fold fills was read by step s - 2's write
          if (s >= 2 && s + 1 < static_cast<size_t>(p)) steps.wait_writes(s - 2);
        },
        [&](size_t s) {  // the partial sum that arrived at step s with our own copy of its piece
          const void* chunks[2] = {slots + s * piece,
                                   a.in + sched.steps[s].recvs[0].first * a.stride};
          uint8_t* into = s + 2 == static_cast<size_t>(p) ? a.out : acc + ((s + 1) % 2) * piece;
          reduce_chunks(into, chunks, a.dtype, partial, 2, static_cast<size_t>(a.m));
        });
    // the last fold made our own piece complete
    if (a.op == ReduceOp::Avg) divide_elements(a.out, a.dtype, static_cast<size_t>(a.m), p);
  });
}

// Rank r writes piece j straight to rank j's scratch, at slot r; rank j then folds the p
// copies of its piece in rank order into `out`. Descriptors go first, as for every call, so
// sizes, dtypes, the operator and local errors are checked on every rank before anything is
// written.
void reduce_scatter_direct(Engine& e, GroupState& g, const ReduceScatterRound& a) {
  const char* name = a.collective.name;
  check_usable(g, name);
  transport::Transport& t = e.transport();
  Call call(t, g, name, e.spin());
  call.run([&] {
    const int p = g.size();
    const size_t piece = static_cast<size_t>(a.m) * element_size(a.dtype);
    uint8_t* const slots = round_slots(g, piece);
    std::shared_ptr<transport::MemoryRegion> region;
    std::shared_ptr<transport::MemoryRegion> source;  // transports that read registered memory only
    const size_t in_span = (p - 1) * a.stride + piece;
    transport::Bytes key;
    CallDescriptor mine = make_round_descriptor(call, a);
    if (mine.ok) {
      region = expose_target(call, mine, slots, p * piece, key);
      if (t.needs_registered_source()) {
        source = t.register_memory(const_cast<uint8_t*>(a.in), in_span);
      }
    }
    const std::vector<CallDescriptor>& all = exchange_descriptors(call, mine);
    if (!mine.ok) throw InvalidArgument(call.where() + ": " + a.local_error);
    check_descriptors(call, all);
    // One step: piece j of our input to rank j's scratch at our slot; theirs into ours.
    DataPhase& data = g.scratch.get<DataPhase>();
    WritePlan& plan = data.plan;
    plan.clear("scratch");
    const size_t offset = static_cast<size_t>(g.rank) * piece;
    for (int i = 1; i < p; ++i) {
      const int j = (g.rank + i) % p;
      plan.arrive({j, j * piece, piece, static_cast<uint32_t>(j), j, 1});
      plan.write({j, 0, j * a.stride, offset, piece, static_cast<uint32_t>(g.rank), g.rank, 1});
    }
    plan.end_step();
    WriteSteps steps(call, t, plan, data.remotes);
    steps.expect_all(*region);
    const SourceView input(const_cast<uint8_t*>(a.in), in_span);
    const transport::MemoryRegion* sources[] = {source ? source.get() : &input};
    steps.run(all, sources);
    fold_round(g, a, slots, piece);
  });
}

// Where the members read each other's memory (peer_reads.hpp): rank j copies piece j of every
// peer's input straight into its scratch, at the peer's slot, and folds the p copies in rank
// order (the direct round's rule, so the bits match). Nothing is exposed or written.
void reduce_scatter_by_reads(Engine& e, GroupState& g, const ReduceScatterRound& a) {
  const char* name = a.collective.name;
  check_usable(g, name);
  Call call(e.transport(), g, name, e.spin());
  PeerReads reads;
  call.run([&] {
    const int p = g.size();
    const size_t piece = static_cast<size_t>(a.m) * element_size(a.dtype);
    uint8_t* const slots = round_slots(g, piece);
    CallDescriptor mine = make_round_descriptor(call, a);
    mine.source_addr = reinterpret_cast<uint64_t>(a.in);
    const std::vector<CallDescriptor>& all = exchange_descriptors(call, mine);
    check_descriptors(call, all);
    if (piece == 0) return;
    reads.offered();
    const size_t offset = static_cast<size_t>(g.rank) * a.stride;
    for (int i = 1; i < p; ++i) {
      const int r = (g.rank + i) % p;  // members start at different peers
      if (!reads.read(call, r, all[r], offset, slots + r * piece, piece)) return;
    }
    fold_round(g, a, slots, piece);
  });
  reads.finish(e, g);
}

// reduce_scatter_tensor whose input is in symmetric memory on every member
// (engine/symmetric.hpp): member r folds piece r straight out of every member's input, in rank
// order (the ordinary path's fold rule, so the bits match it), into its output. Nothing crosses
// the transport and nothing is stored into a peer; run_on_window orders the reads. False when
// the input is in no window of the group.
bool symmetric_reduce_scatter(Engine& e, GroupState& g, uint8_t* out, const uint8_t* in,
                              DType dtype, int64_t n, ReduceOp op, const std::string& local_error) {
  const size_t es = element_size(dtype);
  const size_t piece = static_cast<size_t>(n) * es;
  return run_on_window(
      e, g, collectives::kReduceScatter.name, in, piece * g.size(), local_error,
      [&](Call& call) {
        // The ordinary path's first round's descriptor plus the window, so a member whose input
        // is not in the window makes every member raise that, whatever the sizes.
        const int64_t m = std::min(n, static_cast<int64_t>(std::max<size_t>(1, kRoundBytes / es)));
        return make_round_descriptor(call, {collectives::kReduceScatter, in, piece, out, dtype, m,
                                            op, static_cast<uint64_t>(n), local_error});
      },
      [&](const Window& w, size_t offset) {
        fold_members(g, w, offset + static_cast<size_t>(g.rank) * piece, out, dtype, op,
                     static_cast<size_t>(n));
      });
}

// A round whose whole input fits the eager limit: the input rides inline in its descriptor.
// Through the mailbox each peer's slot takes only its own piece (CallDescriptor::inline_piece),
// so a rank receives p - 1 pieces instead of p - 1 whole inputs and folds its piece straight
// out of the slots; as messages (across hosts, a group's first two calls) every peer gets the
// whole input and takes its piece from it. One round instead of a descriptor round and a data
// round.
void reduce_scatter_inline(Engine& e, GroupState& g, const ReduceScatterRound& a) {
  const char* name = a.collective.name;
  check_usable(g, name);
  Call call(e.transport(), g, name, e.spin());
  call.run([&] {
    const int p = g.size();
    const size_t es = element_size(a.dtype);
    const size_t piece = static_cast<size_t>(a.m) * es;
    CallDescriptor mine = make_round_descriptor(call, a);
    if (mine.ok && piece > 0) {
      mine.inline_data = {a.in, p * piece};
      mine.inline_piece = piece;
    }
    const std::vector<CallDescriptor>& all = exchange_descriptors(call, mine);
    if (!mine.ok) throw InvalidArgument(call.where() + ": " + a.local_error);
    check_descriptors(call, all);
    if (piece == 0) return;
    ReduceScratch& s = g.scratch.get<ReduceScratch>();
    auto& chunks = s.chunks;
    chunks.resize(p);
    for (int r = 0; r < p; ++r) {
      const std::span<const uint8_t> got = all[r].inline_data;
      const uint8_t* at = nullptr;
      if (r == g.rank) {
        at = a.in + static_cast<size_t>(r) * piece;
      } else if (got.size() == piece) {
        at = got.data();
      } else if (got.size() == p * piece) {
        at = got.data() + static_cast<size_t>(g.rank) * piece;
      } else {
        throw TransportError(call.where() + ": rank " + std::to_string(call.global(r)) + " sent " +
                             std::to_string(got.size()) + " inline bytes, expected " +
                             std::to_string(piece) + " or " + std::to_string(p * piece));
      }
      chunks[r] = s.aligned(r, p, at, piece, es);
    }
    reduce_chunks(a.out, chunks.data(), a.dtype, a.op, p, static_cast<size_t>(a.m));
  });
}

}  // namespace

// Across hosts the reduce-scatter follows the host-major ring (p - 1 pieces off each host
// instead of k (p - k) for the direct round); RDMACOLL_ALGO=ring forces it on one host too.
void reduce_scatter_round(Engine& e, GroupState& g, const ReduceScatterRound& a) {
  const size_t piece = static_cast<size_t>(a.m) * element_size(a.dtype);
  if (a.stride == piece && goes_inline(e, g, g.size() * piece))
    return reduce_scatter_inline(e, g, a);
  const auto& forced = g.tuning.algorithm;
  if (g.is_member() && g.size() > 2 &&
      (forced ? *forced == schedule::Algorithm::Ring : g.hosts > 1)) {
    return reduce_scatter_ring(e, g, a);
  }
  // Every rank decides alike: a rank with a local error takes the direct round, and every rank
  // raises it once the descriptors are in.
  if (g.is_member() && g.size() > 1 && a.local_error.empty() && g.mailbox.peer_reads())
    return reduce_scatter_by_reads(e, g, a);
  reduce_scatter_direct(e, g, a);
}

// reduce_scatter_tensor. Up to the eager limit (goes_inline) one round of inline inputs
// (reduce_scatter_inline) instead of a descriptor round plus a data round. Beyond it, direct
// reduce-scatter rounds of at most 4 MiB pieces: each rank receives (p-1)/p of its output's worth
// from every peer, no more.
void reduce_scatter(Engine& e, GroupState& g, const ReduceScatterArgs& args) {
  void* const out = args.out;
  const void* const in = args.in;
  const DType dtype = args.dtype;
  const int64_t n = args.n;
  const ReduceOp op = args.op;
  const std::string& local_error = args.local_error;
  const size_t es = element_size(dtype);
  const int p = g.is_member() ? g.size() : 1;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  const uint64_t total = static_cast<uint64_t>(n);
  if (p > 1 && !goes_inline(e, g, static_cast<size_t>(n) * p * es)) {
    if (symmetric_reduce_scatter(e, g, dst, src, dtype, n, op, local_error)) return;
    const int64_t per_piece = static_cast<int64_t>(std::max<size_t>(1, kRoundBytes / es));
    for (int64_t done = 0; done < n;) {
      const int64_t m = std::min(per_piece, n - done);
      reduce_scatter_round(e, g,
                           {collectives::kReduceScatter, src + done * es, n * es, dst + done * es,
                            dtype, m, op, total, local_error});
      done += m;
    }
    return;
  }
  if (p > 1) {
    return reduce_scatter_inline(
        e, g, {collectives::kReduceScatter, src, n * es, dst, dtype, n, op, total, local_error});
  }
  // A group of one, or a caller outside the group (whose gather raises): the fold of one input.
  auto& scratch = g.scratch.get<ReduceScratch>().gathered;
  const size_t whole = static_cast<size_t>(n) * es;
  if (scratch.size() < whole) scratch.resize(whole);
  RoundArgs a = reduction_round(scratch.data(), in, dtype, 1, n, op, n, local_error);
  a.collective = &collectives::kReduceScatter;
  all_gather(e, g, a);
  if (n == 0) return;
  const void* only[1] = {scratch.data()};
  reduce_chunks(dst, only, dtype, op, 1, static_cast<size_t>(n));
}

}  // namespace rdmacoll::engine
