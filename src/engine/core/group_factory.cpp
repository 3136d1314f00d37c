// The one way a group is made (group_factory.hpp).

#include "engine/core/group_factory.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

namespace rdmacoll::engine {

void apply_topology(GroupState& g, const std::vector<topology::LocalPlacement>& members) {
  std::vector<std::string> hosts;
  for (const auto& m : members)
    hosts.push_back(m.host);
  const topology::Layout layout = topology::layout_of(hosts);
  g.hosts = layout.hosts;
  g.host_of = layout.host_of;
  if (g.rank >= 0 && static_cast<size_t>(g.rank) < members.size())
    g.cache_bytes = members[static_cast<size_t>(g.rank)].cache_bytes;
  if (g.tuning.flat_topology) {
    g.order.resize(members.size());
    std::iota(g.order.begin(), g.order.end(), 0);
    g.ring_order = g.order;
    g.host_of.assign(members.size(), 0);  // flat: no schedule knows hosts
  } else {
    g.order = topology::interleaved_order(layout);
    std::vector<std::string> rails;
    for (const auto& m : members)
      rails.push_back(m.nic);
    g.ring_order = topology::rail_ring_order(layout, rails);
  }
}

std::shared_ptr<GroupState> make_group(GroupSpec spec) {
  auto g = std::make_shared<GroupState>();
  g->parent = std::move(spec.parent);
  g->own_engine = spec.own_engine;
  g->id = spec.id;
  g->members = std::move(spec.members);
  g->global_rank = spec.global_rank;
  const auto me = std::find(g->members.begin(), g->members.end(), spec.global_rank);
  g->rank = me == g->members.end() ? -1 : static_cast<int>(me - g->members.begin());
  g->set_identity(spec.creation);
  g->tuning = spec.tuning;
  g->collectives = spec.collectives;
  apply_topology(*g, spec.placements);
  g->transport = std::move(spec.transport);
  g->generation = spec.generation;
  g->timeout = spec.timeout;
  return g;
}

}  // namespace rdmacoll::engine
