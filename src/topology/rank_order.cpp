// Pure functions from placements to layouts and virtual rank orders (see topology.hpp).

#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>

#include "topology/topology.hpp"

namespace rdmacoll::topology {

std::string LocalPlacement::serialize() const {
  std::ostringstream os;
  os << numa_node << ' ' << package << ' ' << (nic.empty() ? "-" : nic) << ' '
     << (netdev.empty() ? "-" : netdev) << ' ' << (machine.empty() ? "-" : machine) << ' ' << host;
  return os.str();
}

LocalPlacement LocalPlacement::parse(const std::string& text) {
  LocalPlacement p;
  std::istringstream is(text);
  is >> p.numa_node >> p.package >> p.nic >> p.netdev >> p.machine;
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

}  // namespace rdmacoll::topology
