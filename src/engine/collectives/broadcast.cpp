// broadcast by one-sided writes: inline in the root's call descriptor up to the eager limit
// (one round; through the mailbox on one host), a binomial tree of whole-tensor writes up
// to kTreeMaxBytes (kTreeMaxBytesOneHost on one host; always on 2 ranks; on one host where the
// members read each other's memory, every member copies the root's at once), and beyond that a
// scatter of p pieces from the root followed by an in-place all-gather of the pieces, so the root
// sends the tensor about once instead of log p times. A tensor in symmetric memory on every member
// is copied by each member straight out of the root's part, all at once. On 2 ranks the scatter's
// two rounds lose to one write, so the tree's single write stays (measured:
// docs/performance.md#the-measurements-behind-the-codes-thresholds).

#include "engine/collectives/broadcast.hpp"

#include <cstring>

#include "engine/call.hpp"
#include "engine/collectives/collectives.hpp"
#include "engine/collectives/peer_reads.hpp"
#include "engine/control/agreement.hpp"
#include "engine/control/control_plane.hpp"
#include "engine/engine.hpp"
#include "engine/symmetric.hpp"
#include "engine/write_steps.hpp"
#include "schedule/binomial_tree.hpp"

namespace rdmacoll::engine {

namespace {

// Across hosts the scatter spares the root's link from 256 KiB; on one host the tree's fewer
// copies win up to 2 MiB (docs/performance.md, the code's thresholds).
constexpr size_t kTreeMaxBytes = 256u << 10;
constexpr size_t kTreeMaxBytesOneHost = 2u << 20;

// Every rank sees the same descriptors: a rank whose eager limit (RDMACOLL_EAGER_LIMIT) put it
// on another path than ours is named on every rank, before anything is written.
void check_same_path(const Call& call, const std::vector<CallDescriptor>& all, bool inline_path) {
  for (size_t r = 0; r < all.size(); ++r) {
    if ((all[r].out_bytes == 0 && all[r].source_addr == 0) != inline_path) {
      reject(call, "ranks disagree on the eager path: rank " +
                       std::to_string(call.global(static_cast<int>(r))) + " chose " +
                       (inline_path ? "the data path" : "the inline path") +
                       " for the same tensor; every rank must see the same RDMACOLL_EAGER_LIMIT");
    }
  }
}

// Each rank registers its tensor; the root writes it whole to its children, and every rank
// forwards it to its own children once it has landed.
void broadcast_tree(Engine& e, GroupState& g, uint8_t* data, size_t bytes, const RoundArgs& a,
                    int root) {
  transport::Transport& t = e.transport();
  Call call(t, g, "broadcast", e.spin());
  std::shared_ptr<transport::MemoryRegion> region;  // our tensor, once registered
  call.run(
      [&] {
        const int p = g.size();
        transport::Bytes key;
        CallDescriptor mine = make_descriptor(call, a);
        if (mine.ok) {
          region = expose_target(call, mine, data, bytes, key);
        }
        const std::vector<CallDescriptor>& all = exchange_descriptors(call, mine);
        if (!mine.ok) throw InvalidArgument(call.where() + ": " + std::string(a.local_error));
        check_descriptors(call, all);
        check_same_path(call, all, false);
        // Two steps: the tensor arrives from the parent, then goes whole to every child.
        const schedule::TreeNode node = schedule::binomial_tree(p, root, g.rank);
        DataPhase& data = g.scratch.get<DataPhase>();
        WritePlan& plan = data.plan;
        plan.clear("tensor");
        if (node.parent >= 0) plan.arrive({node.parent, 0, bytes, 0, 0, 1});
        plan.end_step();
        for (int child : node.children)
          plan.write({child, 0, 0, 0, bytes, 0, 0, 1});
        plan.end_step();
        WriteSteps steps(call, t, plan, data.remotes);
        steps.expect_all(*region);
        const transport::MemoryRegion* sources[] = {region.get()};
        steps.run(all, sources);
      },
      &region);
}

// Where the members read each other's memory (peer_reads.hpp): every member offers its tensor
// and every member but the root copies the root's straight into its own, all at once, where
// the tree takes log p rounds of writes.
void broadcast_by_reads(Engine& e, GroupState& g, uint8_t* data, size_t bytes, const RoundArgs& a,
                        int root) {
  Call call(e.transport(), g, "broadcast", e.spin());
  PeerReads reads;
  call.run([&] {
    CallDescriptor mine = make_descriptor(call, a);
    mine.source_addr = reinterpret_cast<uint64_t>(data);
    const std::vector<CallDescriptor>& all = exchange_descriptors(call, mine);
    check_descriptors(call, all);
    check_same_path(call, all, false);
    reads.offered();
    if (g.rank != root) reads.read(call, root, all[root], 0, data, bytes);
  });
  reads.finish(e, g);
}

// The root writes piece j (m elements) into rank j's tensor at its final offset, and the tail
// (numel mod p elements) to every rank; then every rank's piece is its slot of an in-place
// all-gather over the first p x m elements.
void broadcast_scatter(Engine& e, GroupState& g, uint8_t* data, const RoundArgs& a, int root) {
  transport::Transport& t = e.transport();
  const int p = g.size();
  const size_t es = element_size(a.out_dtype);
  const int64_t m = a.out_numel / p;
  const size_t piece = static_cast<size_t>(m) * es;
  const size_t bytes = static_cast<size_t>(a.out_numel) * es;
  const size_t tail = bytes - p * piece;
  {
    Call call(t, g, "broadcast", e.spin());
    std::shared_ptr<transport::MemoryRegion> region;  // our tensor, once registered
    call.run(
        [&] {
          transport::Bytes key;
          CallDescriptor mine = make_descriptor(call, a);
          if (mine.ok) {
            region = expose_target(call, mine, data, bytes, key);
          }
          const std::vector<CallDescriptor>& all = exchange_descriptors(call, mine);
          if (!mine.ok) throw InvalidArgument(call.where() + ": " + std::string(a.local_error));
          check_descriptors(call, all);
          check_same_path(call, all, false);
          // One step: the root writes piece j (signal 0) and the tail (signal 1) into rank j.
          DataPhase& data = g.scratch.get<DataPhase>();
          WritePlan& plan = data.plan;
          plan.clear("tensor");
          for (int i = 1; i < p && g.rank == root; ++i) {
            const int j = (root + i) % p;
            plan.write({j, 0, j * piece, j * piece, piece, 0, j, 1});
            if (tail > 0) plan.write({j, 0, p * piece, p * piece, tail, 1, p, 1});
          }
          if (g.rank != root) {
            plan.arrive({root, g.rank * piece, piece, 0, g.rank, 1});
            if (tail > 0) plan.arrive({root, p * piece, tail, 1, p, 1});
          }
          plan.end_step();
          WriteSteps steps(call, t, plan, data.remotes);
          steps.expect_all(*region);
          const transport::MemoryRegion* sources[] = {region.get()};
          steps.run(all, sources);
        },
        &region);
  }
  RoundArgs gather = a;
  gather.out_numel = static_cast<int64_t>(p) * m;
  gather.in = data + g.rank * piece;
  gather.in_numel = m;
  all_gather(e, g, gather);
}

}  // namespace

void broadcast(Engine& e, GroupState& g, const BroadcastArgs& args) {
  void* const data = args.data;
  const DType dtype = args.dtype;
  const int64_t numel = args.numel;
  const int root = args.root;
  const std::string& local_error = args.local_error;
  check_usable(g, "broadcast");
  const int p = g.size();
  const size_t bytes = static_cast<size_t>(numel) * element_size(dtype);
  RoundArgs a;
  a.collective = &collectives::kBroadcast;
  a.out = data;
  a.in = data;
  a.in_dtype = a.out_dtype = dtype;
  a.in_numel = a.out_numel = numel;
  a.total_numel = static_cast<uint64_t>(numel);
  a.root = root;
  a.local_error = local_error;
  auto* bytes_at = static_cast<uint8_t*>(data);
  // A tensor the transport moves with one copy goes as writes, not inline; its crossover is
  // twice the all-gather's, as measured (docs/performance.md, the code's thresholds).
  if (p > 1 && (bytes > g.eager_limit(e.transport().max_message_bytes()) ||
                bytes / 2 >= e.transport().single_copy_bytes())) {
    // In symmetric memory: the tree's and the scatter's descriptor plus the window (a member
    // whose tensor is elsewhere makes every member raise); each member reads the root's part.
    if (run_on_window(
            e, g, "broadcast", data, bytes, local_error,
            [&](Call& call) { return make_descriptor(call, a); },
            [&](const Window& w, size_t offset) {
              if (g.rank != root)
                std::memcpy(w.base[g.rank] + offset, w.base[root] + offset, bytes);
            })) {
      return;
    }
    // Two ranks: the tree is one write of the whole tensor, which no scatter beats.
    const size_t tree_max = g.hosts > 1 ? kTreeMaxBytes : kTreeMaxBytesOneHost;
    if (p > 2 && bytes > tree_max && numel >= p) return broadcast_scatter(e, g, bytes_at, a, root);
    // Every rank decides alike: a rank with a local error takes the tree, and every rank raises
    // it once the descriptors are in.
    if (local_error.empty() && g.mailbox.peer_reads())
      return broadcast_by_reads(e, g, bytes_at, bytes, a, root);
    return broadcast_tree(e, g, bytes_at, bytes, a, root);
  }
  Call call(e.transport(), g, "broadcast", e.spin());
  call.run([&] {
    if (p == 1) {
      if (!local_error.empty()) throw InvalidArgument(call.where() + ": " + local_error);
      return;
    }
    CallDescriptor mine = make_descriptor(call, a);
    if (mine.ok && g.rank == root) mine.inline_data = {bytes_at, bytes};
    const std::vector<CallDescriptor>& all = exchange_descriptors(call, mine);
    if (!mine.ok) throw InvalidArgument(call.where() + ": " + local_error);
    check_descriptors(call, all);
    check_same_path(call, all, true);
    if (g.rank == root || bytes == 0) return;
    if (all[root].inline_data.size() != bytes) {
      throw TransportError(call.where() + ": the source, rank " +
                           std::to_string(call.global(root)) + ", sent " +
                           std::to_string(all[root].inline_data.size()) +
                           " inline bytes, expected " + std::to_string(bytes));
    }
    std::memcpy(bytes_at, all[root].inline_data.data(), bytes);
  });
}

}  // namespace rdmacoll::engine
