// Which of the NICs that tie on locality a rank may take: a pure filter over their ports' states
// (unit-tested with made-up port tables) and the sysfs reader that feeds it.

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "topology/topology.hpp"

namespace rdmacoll::topology {

std::vector<std::string> usable_nics(const std::vector<std::string>& tied,
                                     const std::map<std::string, NicPorts>& ports,
                                     std::string* left_out) {
  std::vector<std::string> active, down;
  std::map<std::string, int> layers;
  for (const std::string& nic : tied) {
    const auto it = ports.find(nic);
    if (it != ports.end() && !it->second.active) {
      down.push_back(nic);
      continue;
    }
    active.push_back(nic);
    if (it != ports.end()) ++layers[it->second.link_layer];
  }
  std::string layer;
  for (const auto& [name, count] : layers) {
    const bool more =
        layer.empty() || count > layers[layer] || (count == layers[layer] && name == "InfiniBand");
    if (more) layer = name;
  }
  std::vector<std::string> usable, other_layer;
  for (const std::string& nic : active) {
    const auto it = ports.find(nic);
    if (it == ports.end() || layers.size() < 2 || it->second.link_layer == layer) {
      usable.push_back(nic);
    } else {
      other_layer.push_back(nic);
    }
  }
  if (left_out) {
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (const std::string& n : v)
        s += (s.empty() ? "" : ", ") + n;
      return s;
    };
    std::string why;
    if (!down.empty()) why = "left out, no port ACTIVE: " + list(down);
    if (!other_layer.empty()) {
      why += (why.empty() ? "left out, not " : "; not ") + layer + ": " + list(other_layer);
    }
    *left_out = why;
  }
  return usable;
}

std::map<std::string, NicPorts> read_nic_ports(const std::string& sysfs,
                                               const std::vector<std::string>& devices) {
  namespace fs = std::filesystem;
  std::map<std::string, NicPorts> out;
  for (const std::string& dev : devices) {
    std::error_code ec;
    const fs::path dir = fs::path(sysfs) / dev / "ports";
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> port_dirs;
    for (const auto& e : fs::directory_iterator(dir, ec))
      port_dirs.push_back(e.path());
    std::sort(port_dirs.begin(), port_dirs.end());
    NicPorts n;
    for (const fs::path& port : port_dirs) {
      std::string state, layer;
      std::ifstream(port / "state") >> state >> state;  // "4: ACTIVE"
      std::getline(std::ifstream(port / "link_layer") >> std::ws, layer);
      if (n.link_layer.empty()) n.link_layer = layer;
      if (state == "ACTIVE" && !n.active) {
        n.active = true;
        n.link_layer = layer;
      }
    }
    if (!port_dirs.empty()) out[dev] = n;
  }
  return out;
}

}  // namespace rdmacoll::topology
