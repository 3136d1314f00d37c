// all_reduce: a direct reduce-scatter plus an in-place all-gather for tensors past the eager
// limit, one gather-and-fold round below it.

#include <algorithm>
#include <cstring>

#include "engine/call.hpp"
#include "engine/engine.hpp"
#include "engine/reduce.hpp"

namespace rdmacoll::engine {

namespace {

// One gather of an all_reduce: our n elements at `in` into p x n at `out`, with the whole
// length and the operator in the descriptors.
AllGatherArgs round_args(void* out, const void* in, DType dtype, int p, int64_t n, ReduceOp op,
                         int64_t total_numel, const std::string& local_error) {
  AllGatherArgs a;
  a.out = out;
  a.out_dtype = dtype;
  a.out_numel = p * n;
  a.in = in;
  a.in_dtype = dtype;
  a.in_numel = n;
  a.local_error = local_error;
  a.op = CollectiveOp::AllReduce;
  a.reduce_op = op;
  a.total_numel = static_cast<uint64_t>(total_numel);
  return a;
}

}  // namespace

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
      // In place: our reduced piece is our own slot of the output.
      all_gather(g, round_args(base, base + static_cast<size_t>(g.rank) * m * es, dtype, p, m, op,
                               numel, ""));
      done += p * m;
    }
    if (done == numel) return;
  }
  auto& scratch = g.scratch.reduce;
  do {
    const int64_t n = std::min(per_piece, numel - done);
    if (scratch.size() < static_cast<size_t>(p) * n * es) scratch.resize(p * n * es);
    all_gather(g,
               round_args(scratch.data(), bytes + done * es, dtype, p, n, op, numel, local_error));
    auto& chunks = g.scratch.reduce_chunks;  // reused: nothing allocated per call
    chunks.resize(p);
    for (int r = 0; r < p; ++r)
      chunks[r] = scratch.data() + static_cast<size_t>(r) * n * es;
    reduce_chunks(bytes + done * es, chunks.data(), dtype, op, p, static_cast<size_t>(n));
    done += n;
  } while (done < numel);
}

}  // namespace rdmacoll::engine
