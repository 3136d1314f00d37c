// reduce_scatter_tensor, and the direct reduce-scatter that large all_reduces start with.

#include <algorithm>
#include <cstring>

#include "engine/call.hpp"
#include "engine/engine.hpp"
#include "engine/reduce.hpp"

namespace rdmacoll::engine {

// Rank r writes piece j straight to rank j's scratch, at slot r; rank j then folds the p
// copies of its piece in rank order into `out`. Descriptors go first, as for every call, so
// sizes, dtypes, the operator and local errors are checked on every rank before anything is
// written.
void Engine::reduce_scatter_direct(GroupState& g, const ReduceScatterRound& a) {
  const char* name = collective_name(a.collective);
  check_usable(g, name);
  Call call(transport_, g, name, spin_);
  const int p = g.size();
  const size_t piece = static_cast<size_t>(a.m) * element_size(a.dtype);
  auto& scratch = g.scratch.reduce;
  if (scratch.size() < p * piece) scratch.resize(p * piece);
  uint8_t* const slots = scratch.data();
  std::shared_ptr<transport::MemoryRegion> region;
  std::shared_ptr<transport::MemoryRegion> source;  // transports that read registered memory only
  const size_t in_span = (p - 1) * a.stride + piece;
  transport::Bytes key;
  CallDescriptor mine;
  mine.seq = call.seq();
  mine.group = g.id;
  mine.rank = g.rank;
  mine.op = a.collective;
  mine.reduce_op = static_cast<uint8_t>(a.op);
  mine.total_numel = a.total_numel;
  mine.ok = a.local_error.empty();
  mine.error = a.local_error;
  mine.in_dtype = mine.out_dtype = static_cast<uint8_t>(a.dtype);
  mine.in_numel = static_cast<uint64_t>(a.m);
  mine.out_numel = static_cast<uint64_t>(p) * a.m;
  if (mine.ok) {
    region = transport_.register_memory(slots, p * piece);
    if (transport_.needs_registered_source()) {
      source = transport_.register_memory(const_cast<uint8_t*>(a.in), in_span);
    }
    mine.out_addr = reinterpret_cast<uint64_t>(slots);
    mine.out_bytes = p * piece;
    key = region->packed_key();
    mine.key = key;
  }
  const std::vector<CallDescriptor>& all = exchange_descriptors(transport_, g, call, mine);
  if (!mine.ok) throw InvalidArgument(call.where() + ": " + a.local_error);
  check_descriptors(call, all);
  const SourceView input(const_cast<uint8_t*>(a.in), in_span);
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
                              return transport_.write(src, j * a.stride, *remotes[j], offset, piece,
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
    chunks[r] = r == g.rank ? a.in + r * a.stride : slots + r * piece;
  reduce_chunks(a.out, chunks.data(), a.dtype, a.op, p, static_cast<size_t>(a.m));
}

// reduce_scatter_tensor. Up to the eager limit every rank gathers every member's whole input in
// one round (inline, through the slots on one host) and folds its own piece: one round instead
// of a descriptor round plus a data round. Beyond it, direct reduce-scatter rounds of at most
// 4 MiB pieces: each rank receives (p-1)/p of its output's worth from every peer, no more.
void Engine::reduce_scatter(GroupState& g, void* out, const void* in, DType dtype, int64_t n,
                            ReduceOp op, const std::string& local_error) {
  constexpr size_t kSegmentBytes = 4u << 20;
  const size_t es = element_size(dtype);
  const int p = g.is_member() ? g.size() : 1;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  const uint64_t total = static_cast<uint64_t>(n);
  if (p > 1 &&
      static_cast<size_t>(n) * p * es > eager_limit(p, g.hosts, transport_.max_message_bytes())) {
    const int64_t per_piece = static_cast<int64_t>(std::max<size_t>(1, kSegmentBytes / es));
    for (int64_t done = 0; done < n;) {
      const int64_t m = std::min(per_piece, n - done);
      reduce_scatter_direct(g, {CollectiveOp::ReduceScatter, src + done * es, n * es,
                                dst + done * es, dtype, m, op, total, local_error});
      done += m;
    }
    return;
  }
  // One gather of the whole inputs (p x n elements each) into the scratch, then the fold.
  auto& scratch = g.scratch.reduce;
  const size_t whole = static_cast<size_t>(n) * p * es;
  if (scratch.size() < p * whole) scratch.resize(p * whole);
  AllGatherArgs a = round_args(scratch.data(), in, dtype, p, n * p, op, n, local_error);
  a.op = CollectiveOp::ReduceScatter;
  all_gather(g, a);
  if (n == 0) return;
  const int rank = g.rank;
  auto& chunks = g.scratch.reduce_chunks;
  chunks.resize(p);
  for (int r = 0; r < p; ++r)
    chunks[r] = scratch.data() + r * whole + static_cast<size_t>(rank) * n * es;
  reduce_chunks(dst, chunks.data(), dtype, op, p, static_cast<size_t>(n));
}

}  // namespace rdmacoll::engine
