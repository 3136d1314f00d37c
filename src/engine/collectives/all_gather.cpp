// all_gather_into_tensor: one round with the chunks inline in the descriptors up to the eager
// limit; beyond it, the selected schedule (selection.cpp) run by one-sided writes of chunk ranges
// at their final offsets, each step forwarding what the earlier steps brought, or, on one host
// where the members may read each other's memory, each member copying its peers' chunks out of
// their memory (peer_reads.hpp). An output in symmetric memory (rdmacoll::empty,
// engine/symmetric.hpp) on every member takes none of these: each member stores its chunk
// straight into every member's output, then all meet in a barrier.

#include "engine/collectives/all_gather.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/stream_copy.hpp"
#include "engine/call.hpp"
#include "engine/collectives/collectives.hpp"
#include "engine/collectives/peer_reads.hpp"
#include "engine/control/agreement.hpp"
#include "engine/control/control_plane.hpp"
#include "engine/symmetric.hpp"
#include "engine/write_steps.hpp"

namespace rdmacoll::engine {

namespace {

// Our chunk into our own slot of the output, converted; past the cache (stream_gather_stores)
// with non-temporal stores.
void copy_own_chunk(const GroupState& g, uint8_t* own_slot, const RoundArgs& a, size_t chunk) {
  if (a.in_dtype == a.out_dtype && stream_gather_stores(g.size(), chunk, g.cache_bytes)) {
    stream_copy(own_slot, a.in, chunk);
    stream_fence();  // before the caller, or a thread it tells, reads the output
    return;
  }
  convert_elements(own_slot, a.out_dtype, a.in, a.in_dtype, static_cast<size_t>(a.in_numel));
}

constexpr size_t kWindowMinBytes = 1024;
constexpr size_t kWindowBlockFrom = 2u << 20;
constexpr size_t kWindowBlockBytes = 16u << 10;
// What a call leaves to do after its body: the members meet once the peers have stored into
// our output (symmetric memory) or read our chunk, whichever the call did.
struct After {
  bool stored = false;  // symmetric memory: every member stored into every output
  PeerReads reads;      // peers read our chunk out of our memory
};
void gather(Call& call, const RoundArgs& a, std::shared_ptr<transport::MemoryRegion>& region,
            After& after);
void gather_inline(Call& call, const RoundArgs& a, size_t chunk, uint8_t* own_slot);
void gather_by_reads(Call& call, const RoundArgs& a, size_t chunk, uint8_t* own_slot, After& after);
}  // namespace

void all_gather(Engine& e, GroupState& g, const RoundArgs& a) {
  const char* name = a.title ? a.title : a.collective->name;
  check_usable(g, name);
  Call call(e.transport(), g, name, e.spin());
  std::shared_ptr<transport::MemoryRegion> region;  // our output, once registered
  After after;
  call.run([&] { gather(call, a, region, after); }, &region);
  // The peers' stores land in outputs their owners read once they return: none returns before
  // every member has stored. Likewise for their reads (peer_reads.hpp).
  if (after.stored) barrier(e, g);
  after.reads.finish(e, g);
}

namespace {

void gather(Call& call, const RoundArgs& a, std::shared_ptr<transport::MemoryRegion>& region,
            After& after) {
  transport::Transport& t = call.transport();
  GroupState& g = call.group();
  const int p = g.size();
  const size_t chunk = static_cast<size_t>(a.in_numel) * element_size(a.out_dtype);
  const size_t out_bytes = static_cast<size_t>(a.out_numel) * element_size(a.out_dtype);
  uint8_t* out = static_cast<uint8_t*>(a.out);
  uint8_t* const own_slot = out + static_cast<size_t>(g.rank) * chunk;
  // An output in a window of symmetric memory: offered to the members (nothing registered).
  // From 1 KiB (kWindowMinBytes) its stores beat the inline path (docs/performance.md, the
  // code's thresholds).
  size_t window_offset = 0;
  std::shared_ptr<Window> window;
  if (a.collective == &collectives::kAllGather && a.local_error.empty() && p > 1 &&
      chunk >= kWindowMinBytes) {
    window = find_window(&g, g.digest, out, out_bytes, window_offset);
  }
  // Inline: copied into the descriptor and out of it at every peer; a chunk the transport
  // moves with one copy goes as a write instead.
  const bool inline_path = a.local_error.empty() && chunk > 0 && p > 1 && !window &&
                           chunk <= g.eager_limit(t.max_message_bytes()) &&
                           chunk < t.single_copy_bytes();
  // Our own chunk goes out straight from the input where the transport allows (UCX): a peer
  // that reads our output slot (a CMA read on one host) takes those cache lines from us, and
  // the next call's local copy into the slot must take them back, which doubled the
  // out-of-place time at 256 KiB on 2 ranks. The input is only ever read. The local copy
  // then waits until the first sends are posted, so peers start reading meanwhile.
  // Over verbs the input is registered for it (the cache keeps it for the next call), so the
  // NIC reads our chunk while the CPU copies it; an input that cannot be registered (read-only
  // pages) is copied first, as before.
  bool own_from_input = a.local_error.empty() && !inline_path && p > 1 &&
                        a.in_dtype == a.out_dtype && a.in != own_slot && chunk > 0;
  std::shared_ptr<transport::MemoryRegion> input_region;
  bool own_copied = !a.local_error.empty() || (own_slot == a.in && a.in_dtype == a.out_dtype);
  auto copy_own = [&] {
    if (own_copied) return;
    copy_own_chunk(g, own_slot, a, chunk);
    own_copied = true;
  };
  if (p == 1) {
    if (!a.local_error.empty())
      throw InvalidArgument(call.where() + ": " + std::string(a.local_error));
    copy_own();
    return;
  }
  if (inline_path) return gather_inline(call, a, chunk, own_slot);
  if (a.local_error.empty() && chunk > 0 && !window && g.mailbox.peer_reads() &&
      a.in_dtype == a.out_dtype)
    return gather_by_reads(call, a, chunk, own_slot, after);

  if (own_from_input && !window && t.needs_registered_source()) {
    try {
      input_region = t.register_memory(const_cast<void*>(a.in), chunk);
    } catch (const TransportError&) {
      own_from_input = false;  // copied from the output once the descriptors agree
    }
  }

  transport::Bytes key;
  CallDescriptor mine = make_descriptor(call, a);
  if (window) {
    mine.window = window->id;
    mine.window_offset = window_offset;
  } else if (mine.ok) {
    region = expose_target(call, mine, out, out_bytes, key);
  }
  // A ring writes only to its successor, so it needs only the successor's descriptor: one
  // message per rank and call, to and from its ring neighbours (engine/call.hpp).
  const bool ring =
      !window && chunk > 0 && mine.ok && algorithm_for(g, chunk) == schedule::Algorithm::Ring;
  // The data phase as plain data (engine/write_steps.hpp): the schedule's ranges of chunks as
  // byte ranges at their final offsets, our own chunk read from the input where it may be.
  DataPhase& data = g.scratch.get<DataPhase>();
  WritePlan& plan = data.plan;
  WriteSteps steps(call, t, plan, data.remotes);
  bool copy_first = false;  // a first-step write carries our chunk from the output
  auto plan_steps = [&] {
    plan.clear("output");
    const schedule::Schedule& sched = schedule_for(g, chunk);
    for (size_t s = 0; s < sched.steps.size(); ++s) {
      for (const auto& r : sched.steps[s].recvs) {
        plan.arrive({r.peer, r.first * chunk, r.count * chunk, static_cast<uint32_t>(r.first),
                     r.first, r.count});
      }
      for (const auto& w : sched.steps[s].sends) {
        const bool own = own_from_input && w.first == g.rank && w.count == 1;
        if (s == 0 && !own && w.first <= g.rank && g.rank < w.first + w.count) copy_first = true;
        plan.write({w.peer, own ? 1 : 0, own ? 0 : w.first * chunk, w.first * chunk,
                    w.count * chunk, static_cast<uint32_t>(w.first), w.first, w.count});
      }
      plan.end_step();
    }
    steps.expect_all(*region);
  };
  // A ring call posts its arrivals before its descriptor leaves: the predecessor writes once it
  // has the descriptor, before anyone has seen every rank's, and if this rank then leaves with
  // an error the writes must still land somewhere it owns and then be waited for
  // (RingGuard::spread). Over UCX's tag protocol a write lands only into a posted receive; one
  // never posted would stay pending at the writer, its message unreceived for a later call.
  if (ring) plan_steps();
  const std::vector<CallDescriptor>& all = exchange_descriptors(
      call, mine, ring ? DescriptorsNeeded::Successor : DescriptorsNeeded::All);
  if (!mine.ok) throw InvalidArgument(call.where() + ": " + std::string(a.local_error));
  check_descriptors(call, all);
  if (chunk == 0) return;
  // The window's stores take our chunk from the input themselves.
  if (!own_from_input && !window) copy_own();

  // check_descriptors saw every member name the same window and offset, or none.
  if (window) {
    // A chunk past the cache goes block by block, each block into every member's output while
    // it is still in our cache: the input is read from memory once, not once per member (from
    // 2 MiB; below, whole copies win: docs/performance.md, the code's thresholds).
    const size_t es = element_size(a.out_dtype);
    const size_t in_es = element_size(a.in_dtype);
    const auto* in = static_cast<const uint8_t*>(a.in);
    const size_t n = static_cast<size_t>(a.in_numel);
    const size_t block_elems =
        chunk < kWindowBlockFrom ? n : std::max<size_t>(1, kWindowBlockBytes / es);
    const bool stream = a.in_dtype == a.out_dtype && stream_gather_stores(p, chunk, g.cache_bytes);
    for (size_t first = 0; first < n; first += block_elems) {
      const size_t count = std::min(block_elems, n - first);
      for (int i = 0; i < p; ++i) {
        const int r = (g.rank + i) % p;  // members start at different peers
        if (r == g.rank && own_copied) continue;
        uint8_t* to =
            window->base[r] + window_offset + static_cast<size_t>(g.rank) * chunk + first * es;
        if (stream) {
          stream_copy(to, in + first * in_es, count * es);
        } else {
          convert_elements(to, a.out_dtype, in + first * in_es, a.in_dtype, count);
        }
      }
    }
    if (stream) stream_fence();  // before `after` tells the members
    after.stored = true;
    return;
  }

  const SourceView input_view(const_cast<void*>(a.in), chunk);
  const transport::MemoryRegion& input =
      input_region ? *input_region : static_cast<const transport::MemoryRegion&>(input_view);

  if (!ring) plan_steps();  // every expected arrival up front
  if (copy_first) copy_own();
  const transport::MemoryRegion* sources[] = {region.get(), &input};
  // Each later step forwards what the earlier ones brought; our own chunk is copied into the
  // output while the first step's transfers move.
  steps.run(
      all, sources, [&](size_t) { copy_own(); }, [](size_t) {});
}

// Small chunks ride inline in the descriptors (the eager path): one all-to-all message round, no
// registration, no data phase. Every rank decides alike (same chunk size, same limit); a rank
// whose sizes differ is caught by check_descriptors either way. Nothing is written into the
// output before every rank's descriptor has been checked (a mismatch raises with the output
// untouched): an inline chunk rides from the input, or from its conversion, and our own chunk
// is copied in once the descriptors agree. Apart from gather(): none of its data-phase set-up
// runs for the small calls.
void gather_inline(Call& call, const RoundArgs& a, size_t chunk, uint8_t* own_slot) {
  GroupState& g = call.group();
  const int p = g.size();
  uint8_t* const out = static_cast<uint8_t*>(a.out);
  CallDescriptor mine = make_descriptor(call, a);
  std::vector<uint8_t> converted;
  const uint8_t* own = static_cast<const uint8_t*>(a.in);
  if (a.in_dtype != a.out_dtype) {
    converted.resize(chunk);
    convert_elements(converted.data(), a.out_dtype, a.in, a.in_dtype,
                     static_cast<size_t>(a.in_numel));
    own = converted.data();
  }
  mine.inline_data = {own, chunk};
  const std::vector<CallDescriptor>& all = exchange_descriptors(call, mine);
  check_descriptors(call, all);
  if (own_slot != own) std::memcpy(own_slot, own, chunk);
  for (int r = 0; r < p; ++r) {
    if (r == g.rank) continue;
    if (all[r].inline_data.size() != chunk) {
      throw TransportError(call.where() + ": rank " + std::to_string(call.global(r)) + " sent " +
                           std::to_string(all[r].inline_data.size()) + " inline bytes, expected " +
                           std::to_string(chunk));
    }
    std::memcpy(out + static_cast<size_t>(r) * chunk, all[r].inline_data.data(), chunk);
  }
}

// Past the inline path, where every member can copy out of every other's memory
// (peer_reads.hpp): each member offers where its chunk lies (its input, or its slot of an
// in-place output) and copies its peers' chunks straight into its output. An input whose dtype
// the output converts takes the writes, so that the output stays untouched until the
// descriptors agree. Only a call without a local error takes it (as the inline path), and
// every rank decides alike; a peer that did not offer is refused by check_descriptors.
void gather_by_reads(Call& call, const RoundArgs& a, size_t chunk, uint8_t* own_slot,
                     After& after) {
  const int p = call.group().size();
  const int rank = call.group().rank;
  uint8_t* const out = static_cast<uint8_t*>(a.out);
  CallDescriptor mine = make_descriptor(call, a);
  mine.source_addr = reinterpret_cast<uint64_t>(a.in);
  const std::vector<CallDescriptor>& all = exchange_descriptors(call, mine);
  check_descriptors(call, all);
  after.reads.offered();
  for (int i = 1; i < p; ++i) {
    const int r = (rank + i) % p;  // members start at different peers
    if (!after.reads.read(call, r, all[r], 0, out + static_cast<size_t>(r) * chunk, chunk)) return;
  }
  if (own_slot != a.in) copy_own_chunk(call.group(), own_slot, a, chunk);
}

}  // namespace

}  // namespace rdmacoll::engine
