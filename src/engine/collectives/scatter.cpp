// scatter: while the root's whole input fits the eager limit it rides inline in the root's
// descriptor (one round, no registration); beyond it every member exposes its output and the
// root writes piece j straight into member j's, one one-sided write each.

#include "engine/collectives/scatter.hpp"

#include <cstring>

#include "engine/call.hpp"
#include "engine/collectives/collectives.hpp"
#include "engine/control/agreement.hpp"
#include "engine/control/control_plane.hpp"
#include "engine/engine.hpp"
#include "engine/write_steps.hpp"

namespace rdmacoll::engine {

namespace {

// A rank whose eager limit put it on the other path is named on every rank, before anything
// is written (as in gather.cpp).
void check_paths(const Call& call, const std::vector<CallDescriptor>& all, int root,
                 bool inline_path) {
  for (size_t r = 0; r < all.size(); ++r) {
    const bool ok = static_cast<int>(r) == root ? all[r].inline_data.empty() != inline_path
                                                : (all[r].out_bytes > 0) != inline_path;
    if (!ok) {
      reject(call, "ranks disagree on the eager path: rank " +
                       std::to_string(call.global(static_cast<int>(r))) + " chose " +
                       (inline_path ? "the data path" : "the inline path") +
                       " for the same pieces; every rank must see the same RDMACOLL_EAGER_LIMIT");
    }
  }
}

}  // namespace

void scatter(Engine& e, GroupState& g, const ScatterArgs& args) {
  void* const out_ptr = args.out;
  const void* const in_ptr = args.in;
  const DType dtype = args.dtype;
  const int64_t n = args.n;
  const int root_rank = args.root;
  const std::string& local_error = args.local_error;
  check_usable(g, "scatter");
  const int p = g.size();
  const bool root = g.rank == root_rank;
  auto* out = static_cast<uint8_t*>(out_ptr);
  const auto* in = static_cast<const uint8_t*>(in_ptr);
  const size_t chunk = static_cast<size_t>(n) * element_size(dtype);
  const bool usable = local_error.empty();
  Call call(e.transport(), g, "scatter", e.spin());
  std::shared_ptr<transport::MemoryRegion> region;  // our output, once registered
  call.run(
      [&] {
        if (p == 1) {
          if (!usable) throw InvalidArgument(call.where() + ": " + local_error);
          if (chunk > 0 && out != in) std::memcpy(out, in, chunk);
          return;
        }
        transport::Transport& t = e.transport();
        const bool inline_path = chunk > 0 && p * chunk <= g.eager_limit(t.max_message_bytes());
        RoundArgs args;
        args.collective = &collectives::kScatter;
        args.in_dtype = args.out_dtype = dtype;
        args.in_numel = static_cast<int64_t>(p) * n;
        args.out_numel = n;
        args.root = root_rank;
        args.total_numel = static_cast<uint64_t>(n);
        args.local_error = local_error;
        CallDescriptor mine = make_descriptor(call, args);
        transport::Bytes key;
        DataPhase& data = g.scratch.get<DataPhase>();
        WritePlan& plan = data.plan;  // one step: the root's write to each member
        plan.clear("output");
        WriteSteps steps(call, t, plan, data.remotes);
        if (usable && chunk > 0) {
          if (inline_path && root) {
            mine.inline_data = {in, p * chunk};
          } else if (!inline_path && !root) {
            region = expose_target(call, mine, out, chunk, key);
            plan.arrive({root_rank, 0, chunk, 0, g.rank, 1});
            plan.end_step();
            steps.expect_all(*region);
          }
        }
        // The root judges every descriptor before anyone writes (exchange_rooted).
        const Verdict verdict = [&](const std::vector<CallDescriptor>& all) {
          check_descriptors(call, all);
          if (chunk == 0) return;
          check_paths(call, all, root_rank, inline_path);
          for (int j = 0; j < p && !inline_path; ++j) {
            // never write outside what a member advertised
            if (j == root_rank || chunk <= all[j].out_bytes) continue;
            throw TransportError(call.where() + ": refusing to write " + std::to_string(chunk) +
                                 " bytes into rank " + std::to_string(call.global(j)) +
                                 "'s output of " + std::to_string(all[j].out_bytes) + " bytes");
          }
        };
        const std::vector<CallDescriptor>& all = exchange_rooted(call, mine, root_rank, verdict);
        if (chunk == 0) return;
        if (!root) {
          if (inline_path) {
            const auto& data = all[root_rank].inline_data;
            if (data.size() != p * chunk) {
              throw TransportError(call.where() + ": the root, rank " +
                                   std::to_string(call.global(root_rank)) + ", sent " +
                                   std::to_string(data.size()) + " inline bytes, expected " +
                                   std::to_string(p * chunk));
            }
            std::memcpy(out, data.data() + static_cast<size_t>(g.rank) * chunk, chunk);
          } else {
            steps.run(all, {});
          }
          return;
        }
        // Our own piece only now: a refused call writes nothing.
        if (out != in + root_rank * chunk) std::memcpy(out, in + root_rank * chunk, chunk);
        if (inline_path) return;
        std::shared_ptr<transport::MemoryRegion> source;
        if (t.needs_registered_source()) {
          source = t.register_memory(const_cast<uint8_t*>(in), p * chunk);
        } else {
          source = std::make_shared<SourceView>(const_cast<uint8_t*>(in), p * chunk);
        }
        for (int i = 1; i < p; ++i) {
          const int j = (root_rank + i) % p;
          plan.write({j, 0, j * chunk, 0, chunk, 0, j, 1});
        }
        plan.end_step();
        const transport::MemoryRegion* sources[] = {source.get()};
        steps.run(all, sources);
      },
      &region);
}

}  // namespace rdmacoll::engine
