#pragma once
// What every rank knows about one group (the world or a new_group): members, this rank's place,
// the per-call sequence number and cached schedules. Internal: the public Group holds a pointer.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/call_descriptor.hpp"
#include "engine/eager_slots.hpp"
#include "engine/pending.hpp"
#include "engine/symmetric.hpp"
#include "engine/work_queue.hpp"
#include "engine/write_plan.hpp"
#include "schedule/schedule.hpp"
#include "schedule/service.hpp"

namespace rdmacoll::engine {
class PointToPoint;
}  // namespace rdmacoll::engine

namespace rdmacoll {

// Buffers every call of a group reuses, so that a small collective allocates nothing. Calls of
// one group never overlap (its GroupQueue runs them one at a time, and a failed call leaves
// the group unusable), so one set per group is enough.
struct CallScratch {
  std::vector<std::vector<uint8_t>> receive;  // descriptor buffers, one per member
  size_t receive_capacity = 0;
  std::vector<uint8_t> send;                        // our serialized descriptor
  std::vector<engine::CallDescriptor> descriptors;  // this call's, index = group rank
  std::vector<engine::Pending> recvs;
  std::vector<engine::Pending> sends;
  std::vector<const uint8_t*> incoming;  // where each member's descriptor is this call
  std::vector<size_t> incoming_lengths;
  std::vector<std::vector<uint8_t>> round_send;  // across hosts: each round's messages
  std::vector<uint8_t> round_receive;            // and the one being received
  std::vector<size_t> round_pieces;              // where each message of a round starts
  std::vector<int> round_chunks;                 // the group ranks a round moves
  // The descriptor rounds' service schedules (schedule/service.hpp), made once per group.
  std::map<schedule::ServiceRounds, schedule::Schedule> service_schedules;
  std::map<int, schedule::Schedule> rooted_schedules;  // by root: gather, scatter, reduce
  int rooted_pays = -1;  // whether they take the rooted rounds (-1: not decided yet)
  // The public API's list forms gather here before copying out (api/staging.hpp).
  std::vector<uint8_t> list_in, list_out;
  int order_position = -1;  // this rank's place in GroupState::order
  int ring_position = -1;   // and in GroupState::ring_order
  // A ring call saw only its successor's descriptor (group rank), else -1: all of them.
  int seen_only = -1;
  std::vector<uint8_t> neighbour_error[2];  // errors spread by the ring neighbours
  engine::EagerSlots slots;  // small calls on one host: descriptors through shared memory
  engine::WritePlan plan;    // the data phase's writes and arrivals (engine/write_steps.hpp)
  std::vector<std::unique_ptr<transport::RemoteRegion>> remotes;  // and the peers' keys
  std::vector<uint8_t> reduce;  // all_reduce: every member's copy of a segment
  std::vector<const void*> reduce_chunks;
  std::vector<uint8_t> rooted;       // reduce: a non-root's reduced piece
  std::vector<uint64_t> splits;      // all_to_all: our splits as they travel
  std::vector<uint64_t> pair_words;  // all_to_all's pair rounds: sizes out, in, findings
  std::vector<uint8_t> bruck;        // all_to_all's Bruck rounds: slots, message out, messages in
  std::vector<size_t> in_offsets;    // all_to_all: where each piece starts, bytes
  std::vector<size_t> out_offsets;
};

namespace detail {

class GroupState {
 public:
  ~GroupState() { release(); }
  // Finishes the group's outstanding work (point-to-point operations still in flight fail) and
  // frees what it holds in the transport (its eager slots); the group stays valid to describe,
  // not to call. Run by destroy_group() and when the last handle goes.
  void release();

  // A standalone group (new_standalone_group) holds its own world (store, transport, engine),
  // which lives as long as the group; declared first, so it goes last.
  std::shared_ptr<void> own_world;
  uint32_t id = 0;              // 0 is the world; new_group() numbers the rest in call order
  std::vector<int> members;     // global ranks, in group rank order
  int rank = -1;                // this process's group rank, -1 for a non-member
  std::vector<int> order;       // virtual order for rd/bruck: host index in the low bits
  std::vector<int> ring_order;  // ring order: each host's ranks contiguous
  int hosts = 1;                // hosts the group spans
  std::vector<int> host_of;     // group rank -> host index (0..hosts-1)
  std::map<schedule::Algorithm, bool> two_level_wins;  // per flat pick: two-level sends less
  std::chrono::milliseconds timeout{0};
  uint64_t next_seq = 0;              // calls so far; the same on every member
  uint64_t windows_made = 0;          // windows rdmacoll::empty() made; the same on every member
  uint64_t generation = 0;            // the init_process_group() that made it
  int global_rank = -1;               // this process's world rank
  uint64_t creation = 0;              // its new_group() call number (member groups: their id)
  uint64_t digest = 0;                // of creation and members: every member's must agree
  std::optional<std::string> broken;  // set after a failure that left ranks out of step
  bool destroyed = false;             // destroy_group() ran: other handles can no longer call
  // Expired once destroy_process_group() took the transport (which freed everything itself).
  std::weak_ptr<transport::Transport> transport;
  // Its world's point-to-point engine, once the group has sent or received (engine/p2p.hpp).
  std::weak_ptr<engine::PointToPoint> p2p;
  std::map<schedule::Algorithm, schedule::Schedule> schedules;
  // Windows this member dropped, for empty() to reuse; emptied when the group is released.
  std::shared_ptr<engine::WindowPool> windows = std::make_shared<engine::WindowPool>();
  CallScratch scratch;
  engine::GroupQueue queue;  // declared last: drained (its worker joined) before the rest goes

  int size() const { return static_cast<int>(members.size()); }
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
