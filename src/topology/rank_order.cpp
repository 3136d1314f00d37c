// Pure functions from placements to layouts and virtual rank orders (see topology.hpp).

#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>

#include "topology/topology.hpp"

namespace rdmacoll::topology {

std::string LocalPlacement::serialize() const {
  std::ostringstream os;
  os << numa_node << ' ' << package << ' ' << cache_bytes << ' ' << (nic.empty() ? "-" : nic) << ' '
     << (netdev.empty() ? "-" : netdev) << ' ' << (machine.empty() ? "-" : machine) << ' ' << host;
  return os.str();
}

LocalPlacement LocalPlacement::parse(const std::string& text) {
  LocalPlacement p;
  std::istringstream is(text);
  is >> p.numa_node >> p.package >> p.cache_bytes >> p.nic >> p.netdev >> p.machine;
  if (p.machine == "-") p.machine.clear();
  if (p.nic == "-") p.nic.clear();
  if (p.netdev == "-") p.netdev.clear();
  std::getline(is >> std::ws, p.host);
  return p;
}

Layout layout_of(const std::vector<std::string>& host_of_rank) {
  Layout l;
  std::map<std::string, int> index;
  std::vector<int> count;
  for (const auto& h : host_of_rank) {
    auto [it, fresh] = index.emplace(h, static_cast<int>(index.size()));
    if (fresh) count.push_back(0);
    l.host_of.push_back(it->second);
    l.local_of.push_back(count[it->second]++);
  }
  l.hosts = static_cast<int>(index.size());
  return l;
}

namespace {
std::vector<int> sorted_ranks(const Layout& l, bool local_first) {
  std::vector<int> order(l.host_of.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const auto ka = local_first ? std::make_pair(l.local_of[a], l.host_of[a])
                                : std::make_pair(l.host_of[a], l.local_of[a]);
    const auto kb = local_first ? std::make_pair(l.local_of[b], l.host_of[b])
                                : std::make_pair(l.host_of[b], l.local_of[b]);
    return ka < kb;
  });
  return order;
}
}  // namespace

std::vector<int> interleaved_order(const Layout& layout) {
  return sorted_ranks(layout, true);
}

std::vector<int> host_major_order(const Layout& layout) {
  return sorted_ranks(layout, false);
}

std::vector<int> rail_ring_order(const Layout& layout, const std::vector<std::string>& rail_of) {
  const int hosts = layout.hosts;
  // Each host's ranks by rail (rail name -> ranks in local order).
  std::vector<std::map<std::string, std::vector<int>>> rails(static_cast<size_t>(hosts));
  for (int r : host_major_order(layout))
    rails[layout.host_of[r]][rail_of[r]].push_back(r);
  // The rail every host has (the first by name), where the ring enters host 0.
  std::string common;
  bool found = false;
  if (!rails.empty()) {
    for (const auto& candidate : rails[0]) {
      const std::string& rail = candidate.first;
      const bool everywhere = std::all_of(rails.begin(), rails.end(),
                                          [&](const auto& host) { return host.count(rail) > 0; });
      if (everywhere) {
        common = rail;
        found = true;
        break;
      }
    }
  }
  if (!found ||
      std::all_of(rails.begin(), rails.end(), [](const auto& h) { return h.size() == 1; }))
    return host_major_order(layout);

  std::vector<int> order;
  std::string entry = common;
  for (int h = 0; h < hosts; ++h) {
    auto& by_rail = rails[h];
    if (!by_rail.count(entry)) entry = by_rail.begin()->first;  // a crossing: no rank on it
    const bool last = h + 1 == hosts;
    const std::string want = last ? common : "";
    const auto room = [&](const std::string& rail) {  // a rank to leave by, besides the entry
      const size_t n = by_rail.at(rail).size();
      return rail == entry ? n >= 2 || by_rail.size() == 1 : n >= 1;
    };
    // The rail to leave by: the one host 0 was entered by, for the last host; else the entry's
    // own where it has a second rank (any number of hosts stays on one rail), else another rail
    // the next host has (the snake).
    std::string exit;
    if (last) {
      exit = by_rail.count(want) && room(want) ? want : "";
    } else if (room(entry)) {
      exit = entry;
    } else {
      for (const auto& [rail, ranks] : by_rail) {
        if (rail != entry && rails[h + 1].count(rail)) {
          exit = rail;
          break;
        }
      }
    }
    if (exit.empty()) {  // a crossing
      for (const auto& [rail, ranks] : by_rail) {
        if (room(rail)) {
          exit = rail;
          break;
        }
      }
    }
    // Entry rail first, exit rail last, the rest between; one rank of the entry rail kept
    // first when both are the same rail.
    std::vector<int> host_order(by_rail.at(entry).begin(), by_rail.at(entry).end());
    std::vector<int> tail;
    if (exit == entry && by_rail.size() > 1) {
      tail.assign(host_order.begin() + 1, host_order.end());
      host_order.resize(1);
    }
    for (const auto& [rail, ranks] : by_rail) {
      if (rail != entry && rail != exit)
        host_order.insert(host_order.end(), ranks.begin(), ranks.end());
    }
    if (exit != entry) tail = by_rail.at(exit);
    host_order.insert(host_order.end(), tail.begin(), tail.end());
    order.insert(order.end(), host_order.begin(), host_order.end());
    entry = exit;
  }
  return order;
}

}  // namespace rdmacoll::topology
