#pragma once
// What every rank knows about one group (the world or a new_group): members, this rank's place,
// the per-call sequence number and cached schedules. Internal: the public Group holds a pointer.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/control/mailbox.hpp"
#include "engine/core/call_descriptor.hpp"
#include "engine/core/collective.hpp"
#include "engine/core/scratch_arena.hpp"
#include "engine/core/tuning.hpp"
#include "engine/pending.hpp"
#include "engine/symmetric.hpp"
#include "engine/work_queue.hpp"
#include "engine/write_plan.hpp"
#include "schedule/schedule.hpp"
#include "schedule/service.hpp"

namespace rdmacoll::engine {
class Engine;
class PointToPoint;
}  // namespace rdmacoll::engine

namespace rdmacoll {

// A group's timeout: set when the group is made, and by set_timeout() from any thread while its
// calls run (a call reads it when its wait first stalls).
class GroupTimeout {
 public:
  GroupTimeout& operator=(std::chrono::milliseconds t) {
    ms_.store(t.count(), std::memory_order_relaxed);
    return *this;
  }
  std::chrono::milliseconds get() const {
    return std::chrono::milliseconds(ms_.load(std::memory_order_relaxed));
  }
  int64_t count() const { return get().count(); }

 private:
  std::atomic<int64_t> ms_{0};
};

namespace detail {

class GroupState {
 public:
  ~GroupState() { release(); }
  // Finishes the group's outstanding work (point-to-point operations still in flight fail) and
  // frees what it holds in the transport (its mailbox); the group stays valid to describe,
  // not to call. Run by destroy_group() and when the last handle goes.
  void release();

  // A shrunk group keeps the group it was shrunk from, and so that group's world, alive;
  // declared first, so it goes last.
  std::shared_ptr<const GroupState> parent;
  // A standalone group (new_standalone_group) runs on an engine of its own: its world's, which
  // owns the group and which the group's handles keep alive. Null for every other group.
  engine::Engine* own_engine = nullptr;
  uint32_t id = 0;              // 0 is the world; new_group() numbers the rest in call order
  std::vector<int> members;     // global ranks, in group rank order
  int rank = -1;                // this process's group rank, -1 for a non-member
  std::vector<int> order;       // virtual order for rd/bruck: host index in the low bits
  std::vector<int> ring_order;  // ring order: each host's ranks contiguous
  int hosts = 1;                // hosts the group spans
  std::vector<int> host_of;     // group rank -> host index (0..hosts-1)
  size_t cache_bytes = 0;       // this member's last-level cache (topology), 0 unknown
  std::map<schedule::Algorithm, bool> two_level_wins;  // per flat pick: two-level sends less
  GroupTimeout timeout;
  engine::Tuning tuning;                // its world's, read when the world was made
  engine::CollectiveTable collectives;  // its world's registry: names a peer's call
  uint64_t next_seq = 0;                // calls so far; the same on every member
  uint64_t windows_made = 0;            // windows rdmacoll::empty() made; the same on every member
  uint64_t generation = 0;              // the init_process_group() that made it
  int global_rank = -1;                 // this process's world rank
  uint64_t creation = 0;                // its new_group() call number (member groups: their id)
  uint64_t digest = 0;                  // of creation and members: every member's must agree
  uint64_t shrinks = 0;                 // shrink_group() calls with it as the parent
  std::optional<std::string> broken;    // set after a failure that left ranks out of step
  bool destroyed = false;               // destroy_group() ran: other handles can no longer call
  // shrink_group(ShrinkMode::AbortParent) gave it up: its running call fails now.
  std::atomic<bool> abandoned{false};
  // Expired once destroy_process_group() took the transport (which freed everything itself).
  std::weak_ptr<transport::Transport> transport;
  // Its world's point-to-point engine, once the group has sent or received (engine/p2p.hpp).
  std::weak_ptr<engine::PointToPoint> p2p;
  std::map<schedule::Algorithm, schedule::Schedule> schedules;
  // Windows this member dropped, for empty() to reuse; emptied when the group is released.
  std::shared_ptr<engine::WindowPool> windows = std::make_shared<engine::WindowPool>();
  // Small calls on one host: descriptors through shared memory (engine/control/mailbox.hpp).
  engine::Mailbox mailbox;
  engine::ScratchArena scratch;  // what its calls reuse, each owner's own struct
  engine::GroupQueue queue;      // declared last: drained (its worker joined) before the rest goes

  int size() const { return static_cast<int>(members.size()); }
  // The largest chunk its calls send inline (engine::eager_limit, with its world's
  // RDMACOLL_EAGER_LIMIT), over a transport whose control messages carry `max_message` bytes.
  size_t eager_limit(size_t max_message) const {
    return engine::eager_limit(size(), hosts, max_message, tuning.eager_limit);
  }
  // Sets creation and digest (FNV-1a over the creation number and the member list).
  void set_identity(uint64_t creation_number) {
    creation = creation_number;
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) {
      for (int i = 0; i < 8; ++i) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 1099511628211ull;
      }
    };
    mix(creation);
    mix(members.size());
    for (int m : members)
      mix(static_cast<uint64_t>(m));
    digest = h;
  }
  bool is_member() const { return rank >= 0; }
  std::string describe() const { return describe(id, members); }  // "group 1 (ranks [0, 1])"
  static std::string describe(uint32_t id, const std::vector<int>& members);
};

}  // namespace detail

using detail::GroupState;

}  // namespace rdmacoll
