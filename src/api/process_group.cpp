// The torch.distributed-shaped entry points around the worlds (api/world.hpp): initializing
// and ending the default world, the groups made in it, and standalone groups. The collectives'
// entry points are in collectives.cpp.

#include "rdmacoll/process_group.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "api/world.hpp"
#include "bootstrap/member_group.hpp"
#include "common/ranks.hpp"
#include "engine/collectives/registry.hpp"
#include "engine/core/group_factory.hpp"
#include "engine/leaving.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll {

using api::check_id_free;
using api::kFirstMemberGroupId;
using api::kGroupIds;
using api::require_world;
using api::resolve;
using api::World;

namespace {

// A group of `members` (world ranks, in group rank order) of the world `ctx`, but its id and
// creation number.
engine::GroupSpec member_spec(const World& ctx, const std::vector<int>& members,
                              std::optional<std::chrono::milliseconds> timeout) {
  engine::GroupSpec spec;
  spec.members = members;
  spec.global_rank = ctx.rank;
  for (int r : members)
    spec.placements.push_back(ctx.placements[static_cast<size_t>(r)]);
  spec.transport = ctx.transport;
  spec.generation = ctx.generation;
  spec.timeout = timeout ? *timeout : ctx.timeout;
  spec.tuning = ctx.tuning;
  spec.collectives = engine::collectives::registry();
  return spec;
}

}  // namespace

detail::GroupState* state_of(const Group& group) {
  return group.state_.get();
}

bool Group::is_member() const {
  return state_ ? state_->is_member() : require_world("Group::is_member").world->is_member();
}
int Group::rank() const {
  return resolve(*this, "Group::rank").rank;
}
int Group::size() const {
  return resolve(*this, "Group::size").size();
}
const std::vector<int>& Group::ranks() const {
  return resolve(*this, "Group::ranks").members;
}

namespace {
// init, destroy and abort of the default world, one at a time (the README's threading
// contract): a second thread's init raises "already initialized" instead of racing the first.
std::mutex& world_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

void init_process_group(const InitOptions& options) {
  std::lock_guard lock(world_mutex());
  if (api::default_world()) {
    throw InvalidArgument(
        "init_process_group: already initialized; call "
        "destroy_process_group() first");
  }
  api::default_world() = api::make_world(options);
}

Group new_standalone_group(const std::shared_ptr<Store>& store, int group_rank, int group_size,
                           std::optional<std::chrono::milliseconds> timeout) {
  if (!store) throw InvalidArgument("new_standalone_group: no store given");
  InitOptions o;
  o.store = store;
  o.rank = group_rank;
  o.world_size = group_size;
  o.timeout = timeout;
  std::shared_ptr<World> w = api::make_world(o);
  w->world->own_engine = w->engine.get();
  // The handle points at the group and owns its world (the aliasing constructor): the world
  // goes with the last handle, the group first among its parts.
  std::shared_ptr<GroupState> g(w, w->world.get());
  api::add_standalone(g, w);
  return Group(std::move(g));
}

bool is_initialized() {
  return api::default_world() != nullptr;
}

int get_rank(const Group& group) {
  const GroupState& g = resolve(group, "get_rank");
  return g.rank;
}

int get_world_size(const Group& group) {
  const GroupState& g = resolve(group, "get_world_size");
  return g.size();
}

std::string transport_name() {
  return require_world("transport_name").transport->name();
}

void set_timeout(std::chrono::milliseconds timeout, const Group& group) {
  if (timeout.count() <= 0) {
    throw InvalidArgument("set_timeout: the timeout must be positive, got " +
                          std::to_string(timeout.count()) + " ms");
  }
  resolve(group, "set_timeout").timeout = timeout;
}

Group new_group(const std::vector<int>& ranks, std::optional<std::chrono::milliseconds> timeout) {
  World& ctx = require_world("new_group");
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());  // as torch does: group rank order is sorted order
  if (sorted.empty()) throw InvalidArgument("new_group: ranks must not be empty");
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw InvalidArgument("new_group: ranks " + join_ranks(ranks) + " contain a duplicate");
  }
  if (sorted.front() < 0 || sorted.back() >= ctx.world_size) {
    throw InvalidArgument("new_group: ranks " + join_ranks(ranks) + " must lie in [0, " +
                          std::to_string(ctx.world_size) + ")");
  }
  engine::GroupSpec spec = member_spec(ctx, sorted, timeout);
  spec.id = static_cast<uint32_t>(1 + ctx.new_groups_made++ % (api::kFirstShrunkGroupId - 1));
  check_id_free(ctx, spec.id, "new_group");
  spec.creation = ctx.new_groups_made;  // this new_group call's number, from 1
  auto g = engine::make_group(std::move(spec));
  std::erase_if(ctx.groups, [](const auto& w) { return w.expired(); });
  ctx.groups.push_back(g);
  return Group(std::move(g));
}

Group new_member_group(const std::shared_ptr<Store>& store, int group_rank, int group_size,
                       std::optional<std::chrono::milliseconds> timeout) {
  World& ctx = require_world("new_member_group");
  if (!store) throw InvalidArgument("new_member_group: no store given");
  if (group_size < 1 || group_size > ctx.world_size || group_rank < 0 || group_rank >= group_size) {
    throw InvalidArgument("new_member_group: group rank " + std::to_string(group_rank) +
                          " of size " + std::to_string(group_size) +
                          " is impossible in a world of " + std::to_string(ctx.world_size));
  }
  const auto wait = timeout ? *timeout : ctx.timeout;
  const std::string where = "new_member_group (group rank " + std::to_string(group_rank) + " of " +
                            std::to_string(group_size) + ", world rank " +
                            std::to_string(ctx.rank) + ")";
  if (!ctx.rendezvous->store()) {
    throw InvalidArgument(where +
                          ": member groups take their ids from the world's store, and this world "
                          "met through the launcher's PMIx server, which needs none; use "
                          "new_group(ranks), called by every rank");
  }
  const bootstrap::MemberGroup met = bootstrap::meet_member_group(
      *store, *ctx.rendezvous->store(), group_rank, group_size, ctx.rank, ctx.world_size,
      {kFirstMemberGroupId, kGroupIds}, wait, where);
  check_id_free(ctx, met.id, where.c_str());
  engine::GroupSpec spec = member_spec(ctx, met.members, wait);
  spec.id = met.id;
  spec.creation = met.id;
  auto g = engine::make_group(std::move(spec));
  std::erase_if(ctx.groups, [](const auto& w) { return w.expired(); });
  ctx.groups.push_back(g);
  return Group(std::move(g));
}

void destroy_group(Group& group) {
  if (group.is_default()) {
    throw InvalidArgument("destroy_group: the default group goes with destroy_process_group()");
  }
  GroupState& g = *state_of(group);
  if (!g.destroyed) {
    g.destroyed = true;
    g.release();
  }
  group = Group();
}

void destroy_process_group() {
  std::lock_guard lock(world_mutex());
  auto& w = api::default_world();
  if (!w) return;
  api::end_world(*w, false);
  w.reset();
}

void abort_process_group() {
  // Running and queued work fails at its next idle round instead of waiting for peers.
  engine::process_leaving().store(true);
  {
    std::lock_guard lock(api::standalone_mutex());
    for (const auto& s : api::standalone_groups()) {
      if (auto g = s.group.lock()) {
        g->queue.drain();
        if (!g->broken) g->broken = "this process left (abort_process_group)";
      }
    }
  }
  // An init or destroy under way on another thread finishes the world itself (the flag above,
  // left raised, makes its waits end): this exit path does not wait for it.
  std::unique_lock lock(world_mutex(), std::try_to_lock);
  if (!lock.owns_lock()) return;
  if (auto& w = api::default_world()) {
    api::end_world(*w, true);
    w.reset();
  }
  engine::process_leaving().store(false);
}

}  // namespace rdmacoll
