// gather: up to the eager limit every member's chunk rides inline in its descriptor (one round,
// no registration); beyond it the root exposes its output and every member writes its chunk
// there at its final offset, one one-sided write each. reduce's rounds gather through here too.

#include "engine/collectives/gather.hpp"

#include <cstring>

#include "engine/call.hpp"
#include "engine/collectives/collectives.hpp"
#include "engine/control/agreement.hpp"
#include "engine/control/control_plane.hpp"
#include "engine/engine.hpp"
#include "engine/write_steps.hpp"

namespace rdmacoll::engine {

namespace {

// Every rank sees the same descriptors, so a rank whose eager limit (RDMACOLL_EAGER_LIMIT) put
// it on the other path is named on every rank, before anything is written.
void check_paths(const Call& call, const std::vector<CallDescriptor>& all, int root,
                 bool inline_path) {
  for (size_t r = 0; r < all.size(); ++r) {
    const bool sent_inline = !all[r].inline_data.empty();
    const bool exposed = all[r].out_bytes > 0;
    const bool ok =
        static_cast<int>(r) == root ? exposed != inline_path : sent_inline == inline_path;
    if (!ok) {
      reject(call, "ranks disagree on the eager path: rank " +
                       std::to_string(call.global(static_cast<int>(r))) + " chose " +
                       (inline_path ? "the data path" : "the inline path") +
                       " for the same chunk; every rank must see the same RDMACOLL_EAGER_LIMIT");
    }
  }
}

}  // namespace

void gather_round(Engine& e, GroupState& g, const GatherRound& a) {
  const char* name = a.collective.name;
  check_usable(g, name);
  transport::Transport& t = e.transport();
  const int p = g.size();
  const bool root = g.rank == a.root;
  const size_t chunk = static_cast<size_t>(a.n) * element_size(a.dtype);
  const bool usable = a.local_error.empty();
  Call call(t, g, name, e.spin());
  std::shared_ptr<transport::MemoryRegion> region;  // the root's output, once registered
  call.run(
      [&] {
        if (p == 1) {
          if (!usable) throw InvalidArgument(call.where() + ": " + a.local_error);
          if (chunk > 0 && a.in != a.out) std::memcpy(a.out, a.in, chunk);
          return;
        }
        const bool inline_path = chunk > 0 && chunk <= g.eager_limit(t.max_message_bytes());
        RoundArgs args;
        args.collective = &a.collective;
        args.in_dtype = args.out_dtype = a.dtype;
        args.in_numel = a.n;
        args.out_numel = static_cast<int64_t>(p) * a.n;
        args.root = a.root;
        args.reduce_op = a.op;
        args.total_numel = a.total_numel;
        args.local_error = a.local_error;
        CallDescriptor mine = make_descriptor(call, args);
        transport::Bytes key;
        DataPhase& data = g.scratch.get<DataPhase>();
        WritePlan& plan = data.plan;  // one step: a write from each member to the root
        plan.clear("output");
        WriteSteps steps(call, t, plan, data.remotes);
        if (usable && chunk > 0) {
          if (inline_path && !root) {
            mine.inline_data = {a.in, chunk};
          } else if (!inline_path && root) {
            region = expose_target(call, mine, a.out, p * chunk, key);
            // Posted before the descriptor leaves: the writes may come as soon as it lands.
            for (int r = 0; r < p; ++r) {
              if (r != a.root) plan.arrive({r, r * chunk, chunk, static_cast<uint32_t>(r), r, 1});
            }
            plan.end_step();
            steps.expect_all(*region);
          }
        }
        // The root judges every descriptor before anyone writes (exchange_rooted).
        const Verdict verdict = [&](const std::vector<CallDescriptor>& all) {
          check_descriptors(call, all);
          if (chunk == 0) return;
          check_paths(call, all, a.root, inline_path);
          if (!inline_path) return;
          for (int r = 0; r < p; ++r) {
            if (r == a.root || all[r].inline_data.size() == chunk) continue;
            throw TransportError(call.where() + ": rank " + std::to_string(call.global(r)) +
                                 " sent " + std::to_string(all[r].inline_data.size()) +
                                 " inline bytes, expected " + std::to_string(chunk));
          }
        };
        const std::vector<CallDescriptor>& all = exchange_rooted(call, mine, a.root, verdict);
        if (chunk == 0) return;
        if (root) {  // our own chunk only now: a refused call writes nothing
          if (a.in != a.out + a.root * chunk) std::memcpy(a.out + a.root * chunk, a.in, chunk);
          if (inline_path) {
            for (int r = 0; r < p; ++r) {
              if (r != a.root) std::memcpy(a.out + r * chunk, all[r].inline_data.data(), chunk);
            }
          } else {
            steps.run(all, {});
          }
          return;
        }
        if (inline_path) return;
        std::shared_ptr<transport::MemoryRegion> source;
        if (t.needs_registered_source()) {
          source = t.register_memory(const_cast<uint8_t*>(a.in), chunk);
        } else {
          source = std::make_shared<SourceView>(const_cast<uint8_t*>(a.in), chunk);
        }
        const size_t offset = static_cast<size_t>(g.rank) * chunk;
        plan.write({a.root, 0, 0, offset, chunk, static_cast<uint32_t>(g.rank), g.rank, 1});
        plan.end_step();
        const transport::MemoryRegion* sources[] = {source.get()};
        steps.run(all, sources);
      },
      &region);
}

void gather(Engine& e, GroupState& g, const GatherArgs& a) {
  gather_round(
      e, g,
      {collectives::kGather, static_cast<uint8_t*>(a.out), static_cast<const uint8_t*>(a.in),
       a.dtype, a.n, a.root, ReduceOp::Sum, static_cast<uint64_t>(a.n), a.local_error});
}

}  // namespace rdmacoll::engine
