#pragma once
// The one way a group is made (the world's at init, new_group's, new_member_group's, a shrunk
// group's, the engine tests'): what says who it is, which every member computes alike, and its
// orders, from where its members run.

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/tuning.hpp"
#include "engine/group_state.hpp"
#include "topology/topology.hpp"

namespace rdmacoll::engine {

struct GroupSpec {
  uint32_t id = 0;           // in its tags: unique among the live groups of its world
  uint64_t creation = 0;     // the call that made it; with the members, the digest all check
  std::vector<int> members;  // world ranks, in group rank order
  int global_rank = -1;      // this process's world rank (the group rank follows)
  std::vector<topology::LocalPlacement> placements;  // the members', in group rank order
  std::weak_ptr<transport::Transport> transport;
  uint64_t generation = 0;  // the init_process_group() that made its world
  std::chrono::milliseconds timeout{0};
  Tuning tuning;                             // its world's (a default one: every choice automatic)
  CollectiveTable collectives;               // the registry (collectives/registry.hpp)
  Engine* own_engine = nullptr;              // a standalone world's (GroupState::own_engine)
  std::shared_ptr<const GroupState> parent;  // a shrunk group's (GroupState::parent)
};

std::shared_ptr<GroupState> make_group(GroupSpec spec);

// The group's virtual orders for members whose placements are these (g.tuning.flat_topology).
void apply_topology(GroupState& g, const std::vector<topology::LocalPlacement>& members);

}  // namespace rdmacoll::engine
