// shrink_group (rdmacoll/process_group.hpp): a group of the survivors, made by each alone.

#include <algorithm>
#include <string>

#include "api/world.hpp"
#include "common/ranks.hpp"
#include "engine/core/group_factory.hpp"
#include "engine/p2p.hpp"
#include "rdmacoll/errors.hpp"
#include "rdmacoll/process_group.hpp"

namespace rdmacoll {

using api::World;

namespace {

// Which group ranks stay: `excluded` checked against a group of `size` that this rank (`me`)
// is a member of.
std::vector<bool> survivors(const std::vector<int>& excluded, int size, int me,
                            const std::string& where) {
  if (excluded.empty()) {
    throw InvalidArgument(where + ": no rank to exclude; pass the group ranks that are gone");
  }
  std::vector<bool> stays(static_cast<size_t>(size), true);
  for (int r : excluded) {
    if (r < 0 || r >= size) {
      throw InvalidArgument(where + ": rank " + std::to_string(r) + " is not a group rank (0 to " +
                            std::to_string(size - 1) + ")");
    }
    if (!stays[static_cast<size_t>(r)]) {
      throw InvalidArgument(where + ": rank " + std::to_string(r) + " is excluded twice");
    }
    stays[static_cast<size_t>(r)] = false;
  }
  if (!stays[static_cast<size_t>(me)]) {
    throw InvalidArgument(where + ": this rank (" + std::to_string(me) +
                          ") is among the excluded; only the survivors call shrink_group");
  }
  return stays;
}

// The parent's running call fails at its next idle round (Call::check_leaving), the queued ones
// as they start, its point-to-point operations now; then it is unusable.
void abandon(GroupState& g, const std::string& where) {
  const std::string why = where + ": abandoned by shrink_group (ShrinkMode::AbortParent)";
  g.abandoned.store(true, std::memory_order_relaxed);
  g.queue.drain();
  if (auto p = g.p2p.lock()) p->abandon(g, why);
  if (!g.broken) g.broken = why;
}

}  // namespace

Group shrink_group(const Group& group, const std::vector<int>& excluded_ranks, ShrinkMode mode,
                   std::optional<std::chrono::milliseconds> timeout) {
  GroupState& g = api::resolve(group, "shrink_group");
  const std::string where = "shrink_group of " + g.describe();
  if (!g.is_member()) throw InvalidArgument(where + ": this rank is not a member");
  const std::vector<bool> stays = survivors(excluded_ranks, g.size(), g.rank, where);
  if (mode == ShrinkMode::AbortParent) abandon(g, where);
  // A standalone group's world is its own, kept alive by the shrunk group through its parent.
  api::StandaloneHandle standalone;
  if (g.own_engine) {
    standalone = api::standalone_of(g);
    if (!standalone.world) throw InvalidArgument(where + ": its world is gone");
  }
  const std::shared_ptr<World>& own = standalone.world;
  World& ctx = own ? *own : api::require_world("shrink_group");
  engine::GroupSpec spec;
  for (int r = 0; r < g.size(); ++r) {
    if (stays[static_cast<size_t>(r)]) spec.members.push_back(g.members[static_cast<size_t>(r)]);
  }
  // Identified by what every survivor knows alike, whatever else each did before the failure
  // (one may have made groups that another, failing earlier, never reached): the parent, the
  // excluded ranks and how often the parent was shrunk before.
  uint64_t h = g.digest ^ 0x9e3779b97f4a7c15ull * (1 + g.shrinks++);
  for (int r = 0; r < g.size(); ++r) {
    if (!stays[static_cast<size_t>(r)]) h = (h ^ static_cast<uint64_t>(r)) * 1099511628211ull;
  }
  constexpr uint64_t kShrunkIds = api::kGroupIds - api::kFirstShrunkGroupId;
  spec.id = static_cast<uint32_t>(api::kFirstShrunkGroupId + h % kShrunkIds);
  api::check_id_free(ctx, spec.id, where.c_str());
  spec.creation = h;
  spec.global_rank = ctx.rank;
  for (int m : spec.members)
    spec.placements.push_back(ctx.placements[static_cast<size_t>(m)]);
  spec.transport = ctx.transport;
  spec.generation = ctx.generation;
  spec.tuning = g.tuning;
  spec.collectives = g.collectives;
  spec.timeout = timeout ? *timeout : g.timeout.get();
  spec.own_engine = g.own_engine;
  spec.parent = standalone.group;
  auto shrunk = engine::make_group(std::move(spec));
  std::erase_if(ctx.groups, [](const auto& w) { return w.expired(); });
  ctx.groups.push_back(shrunk);
  if (own) api::add_standalone(shrunk, own);
  return Group(std::move(shrunk));
}

}  // namespace rdmacoll
