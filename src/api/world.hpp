#pragma once
// A world: the ranks that met in one rendezvous, their placements, the one transport every group
// of the world shares, and the engine. init_process_group() makes the default world, and
// new_standalone_group() a world of its own for one group. Internal to src/api.

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bootstrap/rendezvous.hpp"
#include "engine/core/tuning.hpp"
#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/process_group.hpp"
#include "topology/topology.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::api {

struct World {
  int rank = -1;
  int world_size = 0;
  std::chrono::milliseconds timeout{0};
  engine::Tuning tuning;  // read at init; every group of this world carries it
  std::unique_ptr<bootstrap::Rendezvous> rendezvous;
  std::shared_ptr<transport::Transport> transport;  // groups hold it weakly, to free their slots
  std::unique_ptr<engine::Engine> engine;
  std::shared_ptr<GroupState> world;              // the default group (a standalone group's own)
  std::vector<std::weak_ptr<GroupState>> groups;  // new_group()'s, drained at the end
  uint64_t new_groups_made = 0;  // new_group() calls so far: the same on every rank
  std::vector<topology::LocalPlacement> placements;  // every rank's, index = global rank
  uint64_t generation = 0;                           // which world of this process it is
};

// Rendezvous, settings, topology, transport and engine of a world, and its default group.
std::unique_ptr<World> make_world(const InitOptions& options);
// Ends a world: outstanding work finishes, every rank is done with the transport before rank 0
// takes the store away; after a failure within one short grace. `abort`: without waiting for
// anyone (running and queued work fails at once).
void end_world(World& world, bool abort);

// The process's default world (init_process_group).
std::unique_ptr<World>& default_world();
World& require_world(const char* what);
// The group a handle means (the default group for a default handle), checked usable by handles.
GroupState& resolve(const Group& group, const char* what);
engine::Engine& engine_of(const GroupState& group, const char* what);

// Group ids (14 bits, in every tag): new_group() numbers its groups 1..7167, in the order every
// rank calls it; shrink_group() takes 7168..8191 from what every survivor knows alike (the
// parent, the excluded ranks, how often the parent was shrunk); member groups take 8192..16383
// from a counter in the world's store. new_group's and the member groups' wrap around: an id is
// reused only once its earlier group is gone (destroyed, or its last handle dropped), so a job
// may make any number of groups, 7167 and 8192 alive at once.
constexpr long kFirstMemberGroupId = 8192;
constexpr long kGroupIds = 8192;
constexpr long kFirstShrunkGroupId = 7168;
// Ids wrap around (kGroupIds): the group that had this id before must be gone.
void check_id_free(World& ctx, uint32_t id, const char* where);

// Standalone groups (new_standalone_group) and the groups shrunk from them, with the world each
// runs on: abort_process_group() ends them, shrink_group() finds a group's world.
struct Standalone {
  std::weak_ptr<GroupState> group;
  std::weak_ptr<World> world;
};
std::vector<Standalone>& standalone_groups();
std::mutex& standalone_mutex();
void add_standalone(const std::shared_ptr<GroupState>& group, const std::shared_ptr<World>& world);
// A standalone group (or one shrunk from it): a handle to it, which keeps its world alive, and
// that world; nulls if it is not registered or gone.
struct StandaloneHandle {
  std::shared_ptr<GroupState> group;
  std::shared_ptr<World> world;
};
StandaloneHandle standalone_of(const GroupState& group);

std::string shape_string(const std::vector<int64_t>& sizes);  // "(4, 2)", "(4,)"

}  // namespace rdmacoll::api
