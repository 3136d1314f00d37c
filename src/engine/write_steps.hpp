#pragma once
// The one loop that runs a collective's data phase (engine/write_plan.hpp) over one-sided
// writes: arrivals posted into our advertised memory, each step's writes bounds-checked against
// what the peer advertised and posted once every arrival of the steps before it has landed (all
// that forwarding needs), then everything waited for. The collective keeps what is its own in
// two hooks: `before(s)` runs while step s - 1's transfers are in flight (all-gather copies its
// own chunk there), `arrived(s)` once step s's arrivals have landed (reduce-scatter folds them
// into what step s + 1 sends).

#include <memory>
#include <span>
#include <vector>

#include "engine/call.hpp"
#include "engine/core/call_descriptor.hpp"
#include "engine/write_plan.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::engine {

// The data phase's buffers, kept by the group (core/scratch_arena.hpp) and reused by each call:
// the plan a collective builds and the peers' unpacked keys.
struct DataPhase {
  WritePlan plan;
  std::vector<std::unique_ptr<transport::RemoteRegion>> remotes;
};

class WriteSteps {
 public:
  // `remotes` is the group's scratch list for the peers' unpacked keys (one per group rank).
  WriteSteps(Call& call, transport::Transport& t, const WritePlan& plan,
             std::vector<std::unique_ptr<transport::RemoteRegion>>& remotes)
      : call_(call), t_(t), plan_(plan), remotes_(remotes) {}
  // Drops the peers' keys (no network I/O); the call cancels what is still pending.
  ~WriteSteps() { remotes_.clear(); }
  WriteSteps(const WriteSteps&) = delete;
  WriteSteps& operator=(const WriteSteps&) = delete;

  // Posts every arrival of the plan into `local`, our advertised memory. Before the descriptor
  // leaves where a writer may write as soon as it has it (a ring step, a rooted call's root).
  void expect_all(transport::MemoryRegion& local);

  // Runs the steps with writes reading from `sources[w.source]`, into `peers[w.peer]`'s
  // advertised memory; expect_all must have run.
  template <typename Before, typename Arrived>
  void run(const std::vector<CallDescriptor>& peers,
           std::span<const transport::MemoryRegion* const> sources, Before&& before,
           Arrived&& arrived) {
    const size_t steps = plan_.steps();
    // From here on the call's sends are ours (the descriptor exchange clears what it sent).
    send_base_ = call_.sends().size();
    for (size_t s = 0; s <= steps; ++s) {
      if (s > 0) {
        before(s);
        wait_arrivals(s - 1);
        arrived(s - 1);
      }
      if (s < steps) post_writes(s, peers, sources);
    }
    call_.wait(call_.sends(), send_base_, call_.sends().size());
  }
  void run(const std::vector<CallDescriptor>& peers,
           std::span<const transport::MemoryRegion* const> sources) {
    run(
        peers, sources, [](size_t) {}, [](size_t) {});
  }

  // Waits for step s's writes to complete (its sources may then be reused).
  void wait_writes(size_t s) {
    call_.wait(call_.sends(), send_base_ + plan_.write_begin(s), send_base_ + plan_.write_end(s));
  }

 private:
  void wait_arrivals(size_t s) {  // every arrival up to step s's
    call_.wait(call_.recvs(), recv_base_, recv_base_ + plan_.arrival_end(s));
  }
  void post_writes(size_t s, const std::vector<CallDescriptor>& peers,
                   std::span<const transport::MemoryRegion* const> sources);

  Call& call_;
  transport::Transport& t_;
  const WritePlan& plan_;
  std::vector<std::unique_ptr<transport::RemoteRegion>>& remotes_;
  // Where our arrivals start in call.recvs() (set by expect_all; a plan without arrivals waits
  // for an empty range wherever it starts) and our writes in call.sends().
  size_t recv_base_ = 0;
  size_t send_base_ = 0;
};

}  // namespace rdmacoll::engine
