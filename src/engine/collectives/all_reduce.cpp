// all_reduce: a direct reduce-scatter (reduce_scatter.cpp) plus an in-place all-gather for
// tensors past the eager limit, one round of inline tensors folded where they arrive below it.

#include "engine/collectives/all_reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>

#include "engine/call.hpp"
#include "engine/collectives/collectives.hpp"
#include "engine/collectives/reduce_scratch.hpp"
#include "engine/control/agreement.hpp"
#include "engine/control/control_plane.hpp"
#include "engine/engine.hpp"
#include "engine/reduce.hpp"
#include "engine/symmetric.hpp"

namespace rdmacoll::engine {

RoundArgs reduction_round(void* out, const void* in, DType dtype, int p, int64_t n, ReduceOp op,
                          int64_t total_numel, const std::string& local_error) {
  RoundArgs a;
  a.out = out;
  a.out_dtype = dtype;
  a.out_numel = p * n;
  a.in = in;
  a.in_dtype = dtype;
  a.in_numel = n;
  a.local_error = local_error;
  a.collective = &collectives::kAllReduce;
  a.reduce_op = op;
  a.total_numel = static_cast<uint64_t>(total_numel);
  return a;
}

namespace {

// all_reduce of a tensor in symmetric memory on every member (engine/symmetric.hpp): member r
// folds segment r straight out of every member's tensor, in rank order, into its own, then
// stores the result into every member's segment r. Only member r reads or writes segment r, so
// nothing is needed between the reads and the stores; run_on_window orders the rest. False when
// the tensor is in no window of the group.
bool symmetric_all_reduce(Engine& e, GroupState& g, uint8_t* data, DType dtype, int64_t numel,
                          ReduceOp op, const std::string& local_error) {
  const size_t es = element_size(dtype);
  const int p = g.size();
  return run_on_window(
      e, g, "all_reduce", data, static_cast<size_t>(numel) * es, local_error,
      [&](Call& call) {
        return make_descriptor(
            call, reduction_round(data, data, dtype, 1, numel, op, numel, local_error));
      },
      [&](const Window& w, size_t offset) {
        const int64_t base = numel / p, extra = numel % p;
        const int64_t first = g.rank * base + std::min<int64_t>(g.rank, extra);
        const size_t n = static_cast<size_t>(base + (g.rank < extra ? 1 : 0));
        if (n == 0) return;
        const size_t at = offset + static_cast<size_t>(first) * es;
        fold_members(g, w, at, w.base[g.rank] + at, dtype, op, n);
        for (int i = 1; i < p; ++i) {
          const int r = (g.rank + i) % p;
          std::memcpy(w.base[r] + at, w.base[g.rank] + at, n * es);
        }
      });
}

// A tensor within the eager limit: every member's whole tensor rides inline in its
// descriptor (through the mailbox on one host) and each member folds the p copies straight out
// of the slots or messages into its own, in rank order. The descriptor is the gather round's;
// this saves the gather's copies into scratch and its data-phase set-up, which were most of an
// 8-byte call's own time. Every rank takes it alike (same tensor, same limit).
// `data` holds n elements of a tensor of total_numel (the tail the split rounds leave). Only for
// a call without a local error (as the gather's inline path).
void all_reduce_inline(Engine& e, GroupState& g, uint8_t* data, DType dtype, int64_t n,
                       int64_t total_numel, ReduceOp op) {
  const char* name = collectives::kAllReduce.name;
  check_usable(g, name);
  Call call(e.transport(), g, name, e.spin());
  call.run([&] {
    const int p = g.size();
    const size_t es = element_size(dtype);
    const size_t whole = static_cast<size_t>(n) * es;
    CallDescriptor mine =
        make_descriptor(call, reduction_round(data, data, dtype, p, n, op, total_numel, ""));
    mine.inline_data = {data, whole};
    const std::vector<CallDescriptor>& all = exchange_descriptors(call, mine);
    check_descriptors(call, all);
    ReduceScratch& s = g.scratch.get<ReduceScratch>();
    auto& chunks = s.chunks;
    chunks.resize(p);
    for (int r = 0; r < p; ++r) {
      const uint8_t* at = data;
      if (r != g.rank) {
        const std::span<const uint8_t> got = all[r].inline_data;
        if (got.size() != whole) {
          throw TransportError(call.where() + ": rank " + std::to_string(call.global(r)) +
                               " sent " + std::to_string(got.size()) + " inline bytes, expected " +
                               std::to_string(whole));
        }
        at = s.aligned(r, p, got.data(), whole, es);
      }
      chunks[r] = at;
    }
    reduce_chunks(data, chunks.data(), dtype, op, p, static_cast<size_t>(n));
  });
}

}  // namespace

// all_reduce. Tensors above the eager limit run as a direct reduce-scatter then an in-place
// all-gather of the reduced pieces, in rounds of at most 4 MiB pieces: each rank receives
// 2 (p-1)/p of the tensor, the bandwidth optimum. Small tensors (and the last < p elements)
// ride inline in one round (through the slots on one host) and every member folds the p
// copies where they arrived (all_reduce_inline). Either way each element is folded by one rule in
// rank order (16-bit floats in float), so every rank ends with the same bits. The whole length and
// the operator ride in every call's descriptors, so a disagreement raises on every rank before
// anything is written.
void all_reduce(Engine& e, GroupState& g, const AllReduceArgs& args) {
  void* const data = args.data;
  const DType dtype = args.dtype;
  const int64_t numel = args.numel;
  const ReduceOp op = args.op;
  const std::string& local_error = args.local_error;
  constexpr size_t kSegmentBytes = 4u << 20;
  constexpr size_t kSplitFrom = 8u << 10;
  const size_t es = element_size(dtype);
  const int p = g.is_member() ? g.size() : 1;
  uint8_t* const bytes = static_cast<uint8_t*>(data);
  const int64_t per_piece = static_cast<int64_t>(std::max<size_t>(1, kSegmentBytes / es));
  int64_t done = 0;
  // Beyond the eager limit the gather would leave the one-round path anyway, and then moving
  // (p-1)/p of the tensor twice beats moving all of it p-1 times; below it the gather wins
  // (measured: docs/performance.md, the code's thresholds).
  const size_t whole = static_cast<size_t>(numel) * es;
  const bool large = whole > g.eager_limit(e.transport().max_message_bytes());
  // Through the mailbox from kSplitFrom, a reduce-scatter whose peers take only their pieces
  // (reduce_scatter_inline) and a gather of the results beat one gather of whole tensors.
  if (p > 1 && (large || (whole >= kSplitFrom && numel >= p && g.mailbox.active()))) {
    if (large && symmetric_all_reduce(e, g, bytes, dtype, numel, op, local_error)) return;
    while (numel - done >= p) {
      const int64_t m = std::min<int64_t>((numel - done) / p, per_piece);
      uint8_t* const base = bytes + done * es;
      reduce_scatter_round(e, g,
                           {collectives::kAllReduce, base, m * es, base + g.rank * m * es, dtype, m,
                            op, static_cast<uint64_t>(numel), local_error});
      // In place: our reduced piece is our own slot of the output.
      all_gather(e, g,
                 reduction_round(base, base + static_cast<size_t>(g.rank) * m * es, dtype, p, m, op,
                                 numel, ""));
      done += p * m;
    }
    if (done == numel) return;
  }
  // The gather's inline condition (all_gather.cpp): then one round folds out of the slots.
  const transport::Transport& t = e.transport();
  const size_t left = static_cast<size_t>(numel - done) * es;
  if (p > 1 && left > 0 && local_error.empty() && left <= g.eager_limit(t.max_message_bytes()) &&
      left < t.single_copy_bytes()) {
    return all_reduce_inline(e, g, bytes + done * es, dtype, numel - done, numel, op);
  }
  auto& scratch = g.scratch.get<ReduceScratch>().gathered;
  do {
    const int64_t n = std::min(per_piece, numel - done);
    if (scratch.size() < static_cast<size_t>(p) * n * es) scratch.resize(p * n * es);
    all_gather(
        e, g,
        reduction_round(scratch.data(), bytes + done * es, dtype, p, n, op, numel, local_error));
    auto& chunks = g.scratch.get<ReduceScratch>().chunks;  // reused: nothing allocated per call
    chunks.resize(p);
    for (int r = 0; r < p; ++r)
      chunks[r] = scratch.data() + static_cast<size_t>(r) * n * es;
    reduce_chunks(bytes + done * es, chunks.data(), dtype, op, p, static_cast<size_t>(n));
    done += n;
  } while (done < numel);
}

}  // namespace rdmacoll::engine
