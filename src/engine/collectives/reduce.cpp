// reduce: up to the eager limit a gather to the root (inline) and a fold there, in group rank
// order as all_reduce folds; beyond it rounds of a direct reduce-scatter (each member reduces
// its piece, the root's in place) and a gather of the reduced pieces into the root's tensor,
// so the root receives about the tensor once instead of p - 1 times. The others' tensors are
// only read.

#include "engine/collectives/reduce.hpp"

#include <algorithm>

#include "engine/call.hpp"
#include "engine/collectives/collectives.hpp"
#include "engine/collectives/reduce_scratch.hpp"
#include "engine/engine.hpp"
#include "engine/reduce.hpp"

namespace rdmacoll::engine {

void reduce(Engine& e, GroupState& g, const ReduceArgs& args) {
  void* const data = args.data;
  const DType dtype = args.dtype;
  const int64_t numel = args.numel;
  const ReduceOp op = args.op;
  const int root = args.root;
  const std::string& local_error = args.local_error;
  constexpr size_t kSegmentBytes = 4u << 20;
  check_usable(g, "reduce");
  const size_t es = element_size(dtype);
  const int p = g.size();
  uint8_t* const bytes = static_cast<uint8_t*>(data);
  const int64_t per_piece = static_cast<int64_t>(std::max<size_t>(1, kSegmentBytes / es));
  const uint64_t total = static_cast<uint64_t>(numel);
  int64_t done = 0;
  if (p > 1 && static_cast<size_t>(numel) * es > g.eager_limit(e.transport().max_message_bytes())) {
    auto& piece = g.scratch.get<ReduceScratch>().piece;
    while (numel - done >= p) {
      const int64_t m = std::min<int64_t>((numel - done) / p, per_piece);
      uint8_t* const base = bytes + done * es;
      const size_t piece_bytes = static_cast<size_t>(m) * es;
      uint8_t* out = base + static_cast<size_t>(root) * piece_bytes;  // the root: in place
      if (g.rank != root) {
        if (piece.size() < piece_bytes) piece.resize(piece_bytes);
        out = piece.data();
      }
      reduce_scatter_round(
          e, g, {collectives::kReduce, base, piece_bytes, out, dtype, m, op, total, local_error});
      gather_round(e, g, {collectives::kReduce, base, out, dtype, m, root, op, total, ""});
      done += p * m;
    }
    if (done == numel) return;
  }
  auto& scratch = g.scratch.get<ReduceScratch>().gathered;
  do {
    const int64_t n = std::min(per_piece, numel - done);
    const size_t need = g.rank == root ? static_cast<size_t>(p) * n * es : 0;
    if (scratch.size() < need) scratch.resize(need);
    gather_round(e, g,
                 {collectives::kReduce, scratch.data(), bytes + done * es, dtype, n, root, op,
                  total, local_error});
    if (g.rank == root && n > 0 && local_error.empty()) {
      reduce_chunks(bytes + done * es, scratch.data(), dtype, op, p, static_cast<size_t>(n));
    }
    done += n;
  } while (done < numel);
}

}  // namespace rdmacoll::engine
