// Which algorithm a call runs: RDMACOLL_ALGO (the group's tuning), else the selector
// (schedule/selector.cpp) and the simulator's second opinion across hosts, cached per group; and
// the schedules, made once.

#include "engine/engine.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>

#include "common/log.hpp"
#include "engine/collectives/collectives.hpp"
#include "rdmacoll/errors.hpp"
#include "schedule/simulate.hpp"

namespace rdmacoll::engine {

schedule::Algorithm choose_algorithm(int p, size_t bytes_per_rank, int hosts,
                                     const std::optional<schedule::Algorithm>& forced) {
  if (!forced) return schedule::choose_algorithm(p, bytes_per_rank, hosts);
  if (*forced == schedule::Algorithm::RecursiveDoubling && !schedule::is_power_of_two(p)) {
    throw InvalidArgument("RDMACOLL_ALGO=rd needs a power-of-two group, got " + std::to_string(p) +
                          " ranks");
  }
  return *forced;
}

schedule::Algorithm choose_algorithm(size_t bytes_per_rank, const std::vector<int>& host_of,
                                     const std::vector<int>& order,
                                     const std::vector<int>& ring_order,
                                     const std::optional<schedule::Algorithm>& forced) {
  const int p = static_cast<int>(host_of.size());
  const int hosts = p ? *std::max_element(host_of.begin(), host_of.end()) + 1 : 1;
  const schedule::Algorithm a = choose_algorithm(p, bytes_per_rank, hosts, forced);
  if (forced || hosts == 1) return a;
  const bool fewer = schedule::two_level_sends_less(
      a, host_of, a == schedule::Algorithm::Ring ? ring_order : order);
  return fewer ? schedule::Algorithm::TwoLevel : a;
}

schedule::Algorithm algorithm_for(GroupState& g, size_t bytes_per_rank) {
  const schedule::Algorithm a =
      choose_algorithm(g.size(), bytes_per_rank, g.hosts, g.tuning.algorithm);
  if (g.tuning.algorithm || g.hosts == 1) return a;
  // The simulation runs once per group and flat pick, not per call.
  auto it = g.two_level_wins.find(a);
  if (it == g.two_level_wins.end()) {
    const bool fewer = schedule::two_level_sends_less(
        a, g.host_of, a == schedule::Algorithm::Ring ? g.ring_order : g.order);
    it = g.two_level_wins.emplace(a, fewer).first;
  }
  return it->second ? schedule::Algorithm::TwoLevel : a;
}

const schedule::Schedule& schedule_for(GroupState& g, size_t bytes_per_rank) {
  const schedule::Algorithm a = algorithm_for(g, bytes_per_rank);
  auto it = g.schedules.find(a);
  if (it == g.schedules.end()) {
    const auto& order = a == schedule::Algorithm::Ring ? g.ring_order : g.order;
    it = g.schedules.emplace(a, schedule::make_schedule(a, order, g.rank, g.host_of)).first;
    log::info(g.describe() + ": all_gather algorithm " + schedule::algorithm_name(a) + ", " +
              std::to_string(it->second.steps.size()) + " steps, " +
              std::to_string(bytes_per_rank) + " bytes per rank, " + std::to_string(g.hosts) +
              " host(s)");
  }
  return it->second;
}

}  // namespace rdmacoll::engine
