// Rank orders, the byte-counting simulator and NIC choice (hwloc XML), without a network.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "schedule/simulate.hpp"
#include "topology/topology.hpp"

namespace rdmacoll {
namespace {

using schedule::Algorithm;

std::vector<std::string> host_major_names(int hosts, int k) {
  std::vector<std::string> names;
  for (int r = 0; r < hosts * k; ++r)
    names.push_back("host" + std::to_string(r / k));
  return names;
}

// 1..64 ranks spread at random over up to 8 hosts.
topology::Layout random_layout(std::mt19937& rng) {
  const int p = 1 + static_cast<int>(rng() % 64);
  const int hosts = 1 + static_cast<int>(rng() % std::min(p, 8));
  std::vector<std::string> names;
  for (int r = 0; r < p; ++r)
    names.push_back(std::string("h") + std::to_string(rng() % hosts));
  return topology::layout_of(names);
}

TEST(Topology, LayoutAndOrders) {
  const auto l = topology::layout_of({"a", "a", "b", "b"});
  EXPECT_EQ(l.hosts, 2);
  EXPECT_EQ(l.host_of, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(l.local_of, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(topology::interleaved_order(l), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(topology::host_major_order(l), (std::vector<int>{0, 1, 2, 3}));
  // Uneven: 3 ranks on x, 1 on y (ranks interleaved by the launcher): deal round-robin.
  const auto u = topology::layout_of({"x", "y", "x", "x"});
  EXPECT_EQ(topology::interleaved_order(u), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(topology::host_major_order(u), (std::vector<int>{0, 2, 3, 1}));
}

// The ring's edges between hosts that join two different rails (the wrap-around included).
int rail_crossings(const topology::Layout& l, const std::vector<std::string>& rail,
                   const std::vector<int>& order) {
  int n = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const int a = order[i], b = order[(i + 1) % order.size()];
    n += l.host_of[a] != l.host_of[b] && rail[a] != rail[b];
  }
  return n;
}

// `hosts` hosts of `per_rail` x `rails` ranks, the local rank picking the rail round-robin (as
// the NIC choice does for unbound ranks).
std::pair<topology::Layout, std::vector<std::string>> railed(int hosts, int rails, int per_rail) {
  std::vector<std::string> names, rail;
  for (int h = 0; h < hosts; ++h) {
    for (int i = 0; i < rails * per_rail; ++i) {
      names.push_back("host" + std::to_string(h));
      rail.push_back("mlx5_" + std::to_string(i % rails));
    }
  }
  return {topology::layout_of(names), rail};
}

// Each host's ranks stay contiguous, hosts in host-major order, every rank once.
void expect_host_major_shape(const topology::Layout& l, const std::vector<int>& order) {
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    ASSERT_EQ(sorted[i], static_cast<int>(i));
  for (size_t i = 1; i < order.size(); ++i)
    ASSERT_LE(l.host_of[order[i - 1]], l.host_of[order[i]]) << "hosts not contiguous in order";
}

TEST(Topology, TheRingCrossesBetweenHostsOnOneRailWhereTheRailsAllowIt) {
  struct Case {
    int hosts, rails, per_rail, crossings;
  };
  for (const Case c :
       {Case{2, 2, 1, 0}, Case{4, 8, 1, 0}, Case{6, 2, 1, 0}, Case{3, 2, 1, 1}, Case{5, 4, 1, 1},
        Case{3, 2, 2, 0}, Case{5, 8, 4, 0}, Case{3, 1, 4, 0}, Case{1, 2, 1, 0}}) {
    const auto [l, rail] = railed(c.hosts, c.rails, c.per_rail);
    const auto order = topology::rail_ring_order(l, rail);
    expect_host_major_shape(l, order);
    EXPECT_EQ(rail_crossings(l, rail, order), c.crossings)
        << c.hosts << " hosts, " << c.rails << " rails, " << c.per_rail << " per rail";
    // Host-major order, rail-blind, crosses at nearly every host boundary.
    if (c.rails > 1 && c.hosts > 1) {
      EXPECT_GT(rail_crossings(l, rail, topology::host_major_order(l)), c.crossings);
    }
  }
  // No NICs, or one per host: host-major order itself.
  const auto l = topology::layout_of(host_major_names(3, 4));
  EXPECT_EQ(topology::rail_ring_order(l, std::vector<std::string>(12, "")),
            topology::host_major_order(l));
  EXPECT_EQ(topology::rail_ring_order(l, std::vector<std::string>(12, "mlx5_0")),
            topology::host_major_order(l));
}

// Random layouts and rails (some hosts lacking some rails): always a host-major permutation,
// and no crossing where every host has two ranks on the first rail all hosts share.
TEST(Topology, RailRingOrdersOfRandomLayoutsAreHostMajorPermutations) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const auto l = random_layout(rng);
    const int rails = 1 + static_cast<int>(rng() % 4);
    std::vector<std::string> rail;
    for (size_t r = 0; r < l.host_of.size(); ++r)
      rail.push_back("mlx5_" + std::to_string(rng() % rails));
    const auto order = topology::rail_ring_order(l, rail);
    expect_host_major_shape(l, order);
    std::map<std::pair<int, std::string>, int> count;
    for (size_t r = 0; r < rail.size(); ++r)
      ++count[{l.host_of[r], rail[r]}];
    bool two_everywhere = false;
    for (int k = 0; k < rails && !two_everywhere; ++k) {
      const std::string name = "mlx5_" + std::to_string(k);
      bool all = true;
      bool first_shared = true;
      for (int h = 0; h < l.hosts; ++h) {
        all = all && count[{h, name}] >= 2;
        first_shared = first_shared && count[{h, name}] >= 1;
      }
      if (first_shared) {
        two_everywhere = all;
        break;
      }
    }
    if (two_everywhere) {
      EXPECT_EQ(rail_crossings(l, rail, order), 0) << "trial " << trial;
    }
  }
}

TEST(Topology, PlacementRoundTrip) {
  topology::LocalPlacement p;
  p.host = "node 7";
  p.machine = "b00t-1d";
  p.numa_node = 1;
  p.package = 0;
  p.cache_bytes = size_t{32} << 20;
  p.nic = "mlx5_1";
  p.netdev = "ib1";
  const auto q = topology::LocalPlacement::parse(p.serialize());
  EXPECT_EQ(q.host, "node 7");
  EXPECT_EQ(q.machine, "b00t-1d");
  EXPECT_EQ(q.numa_node, 1);
  EXPECT_EQ(q.package, 0);
  EXPECT_EQ(q.cache_bytes, size_t{32} << 20);
  EXPECT_EQ(q.nic, "mlx5_1");
  EXPECT_EQ(q.netdev, "ib1");
  const auto empty = topology::LocalPlacement::parse(topology::LocalPlacement{}.serialize());
  EXPECT_EQ(empty.nic, "");
  EXPECT_EQ(empty.machine, "");
  EXPECT_FALSE(topology::probe().machine.empty());
}

// The claim the topology is for: recursive doubling with the host index in the low bits sends
// the minimum k (N-1) m bytes off each host; numbered host by host it sends k^2 (N-1) m.
TEST(Simulator, TopologyOrderedRecursiveDoublingMeetsTheMinimum) {
  const uint64_t m = 1000;
  for (int hosts : {1, 2, 4, 8, 16, 32}) {
    for (int k : {1, 2, 4, 8}) {
      const auto l = topology::layout_of(host_major_names(hosts, k));
      const auto good = schedule::simulate(Algorithm::RecursiveDoubling, l.host_of,
                                           topology::interleaved_order(l), m);
      const auto bad = schedule::simulate(Algorithm::RecursiveDoubling, l.host_of,
                                          topology::host_major_order(l), m);
      for (int h = 0; h < hosts; ++h) {
        EXPECT_EQ(good.offhost_bytes[h], static_cast<uint64_t>(k) * (hosts - 1) * m)
            << hosts << " hosts x " << k;
        EXPECT_EQ(bad.offhost_bytes[h], static_cast<uint64_t>(k) * k * (hosts - 1) * m)
            << hosts << " hosts x " << k;
      }
      if (k > 1 && hosts > 1) {
        EXPECT_GT(bad.total_offhost, good.total_offhost);
      }
      EXPECT_EQ(good.steps, __builtin_ctz(static_cast<unsigned>(hosts * k)));
    }
  }
}

TEST(Simulator, RingCrossesEachHostBoundaryOnce) {
  const uint64_t m = 10;
  const auto l = topology::layout_of(host_major_names(4, 3));
  const auto r = schedule::simulate(Algorithm::Ring, l.host_of, topology::host_major_order(l), m);
  EXPECT_EQ(r.steps, 11);
  for (uint64_t b : r.offhost_bytes)
    EXPECT_EQ(b, 11u * m);  // (p-1) m
}

TEST(Simulator, RandomLayoutsNeverBeatTheMinimum) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const auto l = random_layout(rng);
    std::vector<uint64_t> per_host(l.hosts, 0);
    for (int h : l.host_of)
      ++per_host[h];
    for (Algorithm a : {Algorithm::Bruck, Algorithm::Ring, Algorithm::Direct}) {
      const auto& order =
          a == Algorithm::Ring ? topology::host_major_order(l) : topology::interleaved_order(l);
      const auto r = schedule::simulate(a, l.host_of, order, 1);
      for (int h = 0; h < l.hosts; ++h) {
        // Every host must ship each of its k_h chunks off-host at least once (if others exist).
        if (l.hosts > 1) {
          EXPECT_GE(r.offhost_bytes[h], per_host[h]);
        }
      }
    }
  }
}

// The two-level schedule sends (p - k of the next host) chunks off each host: (h - 1) p in all,
// the least any schedule can (each host receives p - k_h). Where that beats the flat pick the
// selector takes it: 3 x 2 (Bruck 10 chunks per host, two-level 4) and 1 + 1 + 1 + 3; a power-of-
// two uniform layout keeps recursive doubling, which already meets the minimum in fewer steps.
TEST(Simulator, TwoLevelSendsTheMinimumOffHost) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const auto l = random_layout(rng);
    const auto two =
        schedule::simulate(Algorithm::TwoLevel, l.host_of, topology::interleaved_order(l), 1);
    EXPECT_EQ(two.total_offhost, static_cast<uint64_t>(l.hosts - 1) * l.host_of.size()) << trial;
    for (Algorithm a : {Algorithm::Bruck, Algorithm::Ring, Algorithm::Direct}) {
      const auto& order =
          a == Algorithm::Ring ? topology::host_major_order(l) : topology::interleaved_order(l);
      EXPECT_LE(two.total_offhost, schedule::simulate(a, l.host_of, order, 1).total_offhost);
    }
  }
  const auto l = topology::layout_of(host_major_names(3, 2));
  const auto order = topology::interleaved_order(l);
  EXPECT_EQ(schedule::simulate(Algorithm::Bruck, l.host_of, order, 1).offhost_bytes[0], 10u);
  EXPECT_EQ(schedule::simulate(Algorithm::TwoLevel, l.host_of, order, 1).offhost_bytes[0], 4u);
  EXPECT_TRUE(schedule::two_level_sends_less(Algorithm::Bruck, l.host_of, order));
  EXPECT_TRUE(
      schedule::two_level_sends_less(Algorithm::Ring, l.host_of, topology::host_major_order(l)));
  const auto uneven = topology::layout_of({"a", "b", "c", "d", "d", "d"});
  EXPECT_TRUE(schedule::two_level_sends_less(Algorithm::Bruck, uneven.host_of,
                                             topology::interleaved_order(uneven)));
  const auto even = topology::layout_of(host_major_names(4, 2));
  EXPECT_FALSE(schedule::two_level_sends_less(Algorithm::RecursiveDoubling, even.host_of,
                                              topology::interleaved_order(even)));
  const auto one_each = topology::layout_of(host_major_names(5, 1));  // no host to gather in
  EXPECT_FALSE(schedule::two_level_sends_less(Algorithm::Bruck, one_each.host_of,
                                              topology::interleaved_order(one_each)));
}

TEST(Selector, PicksByGroupSizeBytesAndHosts) {
  EXPECT_EQ(schedule::choose_algorithm(2, 8, 1), Algorithm::RecursiveDoubling);
  EXPECT_EQ(schedule::choose_algorithm(8, 8, 1), Algorithm::Direct);  // one host, <= 16 ranks
  EXPECT_EQ(schedule::choose_algorithm(3, 4 << 20, 1), Algorithm::Direct);
  EXPECT_EQ(schedule::choose_algorithm(16, 1024, 1), Algorithm::Direct);
  EXPECT_EQ(schedule::choose_algorithm(32, 1024, 1), Algorithm::RecursiveDoubling);
  EXPECT_EQ(schedule::choose_algorithm(8, 64 << 20, 2), Algorithm::RecursiveDoubling);
  EXPECT_EQ(schedule::choose_algorithm(24, 1024, 1), Algorithm::Bruck);
  EXPECT_EQ(schedule::choose_algorithm(24, 4 << 20, 1), Algorithm::Bruck);
  EXPECT_EQ(schedule::choose_algorithm(6, 4 << 20, 2), Algorithm::Ring);
  EXPECT_EQ(schedule::choose_algorithm(6, 1024, 2), Algorithm::Bruck);
  EXPECT_EQ(schedule::parse_algorithm("ring"), Algorithm::Ring);
  EXPECT_THROW(schedule::parse_algorithm("fast"), std::exception);
}

// Two packages with one NIC each (tests/unit/topology/data/two_packages_two_nics.xml): each rank
// uses the NIC of the package its CPUs are bound to.
TEST(NicChoice, NearestNicPerPackageFromHwlocXml) {
  unsetenv("RDMACOLL_IB_DEVICE");
  const std::string xml = std::string(TEST_DATA_DIR) + "/two_packages_two_nics.xml";
  auto p0 = topology::probe({xml, {0}});
  EXPECT_EQ(p0.nic, "mlx5_0");
  EXPECT_EQ(p0.netdev, "ib0");
  EXPECT_EQ(p0.numa_node, 0);
  EXPECT_EQ(p0.package, 0);
  auto p1 = topology::probe({xml, {3}});
  EXPECT_EQ(p1.nic, "mlx5_1");
  EXPECT_EQ(p1.netdev, "ib1");
  EXPECT_EQ(p1.numa_node, 1);
  EXPECT_EQ(p1.package, 1);
  auto both = topology::probe({xml, {2, 3}});
  EXPECT_EQ(both.nic, "mlx5_1");
  auto spanning = topology::probe({xml, {1, 2}});
  EXPECT_EQ(p0.cache_bytes, size_t{16} << 20);  // each package's L3
  EXPECT_EQ(p1.cache_bytes, size_t{32} << 20);
  EXPECT_EQ(spanning.cache_bytes, size_t{32} << 20);  // the larger of the two it touches
  EXPECT_EQ(spanning.numa_node, -1);                  // bound across both packages
  EXPECT_EQ(spanning.nic, "mlx5_0");                  // equal cover: the lower name
  setenv("RDMACOLL_IB_DEVICE", "mlx5_1", 1);
  EXPECT_EQ(topology::probe({xml, {0}}).nic, "mlx5_1");
  unsetenv("RDMACOLL_IB_DEVICE");
}

// An 8-rail node (tests/unit/topology/data/two_sockets_eight_nics.xml: two sockets of 4 cores,
// mlx5_0-3 on socket 0, mlx5_4-7 on socket 1). Unbound ranks (torchrun binds none) tie over all
// eight and spread by local rank; ranks bound to a core or a socket tie over its socket's four and
// spread over those; RDMACOLL_IB_DEVICE still wins.
TEST(NicChoice, RanksSpreadOverTheRailsTheirBindingReaches) {
  unsetenv("RDMACOLL_IB_DEVICE");
  const std::string xml = std::string(TEST_DATA_DIR) + "/two_sockets_eight_nics.xml";
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int local = 0; local < 8; ++local) {
    const auto unbound = topology::probe({xml, all, local});
    EXPECT_EQ(unbound.nic, "mlx5_" + std::to_string(local)) << "unbound local rank " << local;
    EXPECT_EQ(unbound.netdev, "ib" + std::to_string(local));
    EXPECT_NE(unbound.nic_why.find("8 equally near"), std::string::npos) << unbound.nic_why;
    // Bound to its own core (ranks 0-3 on socket 0, 4-7 on socket 1, as --bind-to core does).
    const auto core = topology::probe({xml, {local}, local});
    EXPECT_EQ(core.nic, "mlx5_" + std::to_string(local)) << "bound local rank " << local;
    // Bound to socket 1 whatever its local rank: one of socket 1's four.
    const auto socket1 = topology::probe({xml, {4, 5, 6, 7}, local});
    EXPECT_EQ(socket1.nic, "mlx5_" + std::to_string(4 + local % 4));
  }
  // The launcher's local rank when none is given.
  setenv("LOCAL_RANK", "6", 1);
  EXPECT_EQ(topology::probe({xml, all}).nic, "mlx5_6");
  unsetenv("LOCAL_RANK");
  setenv("SLURM_LOCALID", "3", 1);
  EXPECT_EQ(topology::probe({xml, all}).nic, "mlx5_3");
  unsetenv("SLURM_LOCALID");
  setenv("RDMACOLL_IB_DEVICE", "mlx5_7", 1);
  EXPECT_EQ(topology::probe({xml, {0}, 0}).nic, "mlx5_7");
  unsetenv("RDMACOLL_IB_DEVICE");
}

// The same 8-rail node with a port table: mlx5_2 and mlx5_5 down, mlx5_3 and mlx5_7 Ethernet
// (storage ports beside the IB rails). Unbound ranks spread over the four usable IB rails only;
// a socket's ranks over that socket's usable ones. Without the filter local rank 2 would take a
// rail that is down and rank 3 an Ethernet port whose peers are all InfiniBand.
TEST(NicChoice, RailsThatAreDownOrOfAnotherLinkLayerAreNotCounted) {
  unsetenv("RDMACOLL_IB_DEVICE");
  const std::string xml = std::string(TEST_DATA_DIR) + "/two_sockets_eight_nics.xml";
  const std::string sysfs = ::testing::TempDir() + "/nic_choice_sysfs";
  std::filesystem::remove_all(sysfs);
  for (int i = 0; i < 8; ++i) {
    const auto port = std::filesystem::path(sysfs) / ("mlx5_" + std::to_string(i)) / "ports/1";
    std::filesystem::create_directories(port);
    const bool down = i == 2 || i == 5;
    const bool ethernet = i == 3 || i == 7;
    std::ofstream(port / "state") << (down ? "1: DOWN\n" : "4: ACTIVE\n");
    std::ofstream(port / "link_layer") << (ethernet ? "Ethernet\n" : "InfiniBand\n");
  }
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<std::string> usable = {"mlx5_0", "mlx5_1", "mlx5_4", "mlx5_6"};
  for (int local = 0; local < 8; ++local) {
    topology::ProbeOptions o{xml, all, local};
    o.ib_sysfs = sysfs;
    const auto unbound = topology::probe(o);
    EXPECT_EQ(unbound.nic, usable[local % 4]) << "unbound local rank " << local;
    EXPECT_NE(unbound.nic_why.find("no port ACTIVE: mlx5_2, mlx5_5"), std::string::npos)
        << unbound.nic_why;
    EXPECT_NE(unbound.nic_why.find("not InfiniBand: mlx5_3, mlx5_7"), std::string::npos)
        << unbound.nic_why;
    o.bind_pus = {4, 5, 6, 7};  // socket 1: mlx5_4-7, of which 4 and 6 are usable
    EXPECT_EQ(topology::probe(o).nic, local % 2 ? "mlx5_6" : "mlx5_4") << local;
  }
  std::filesystem::remove_all(sysfs);
}

// The filter itself: most ports' link layer wins (InfiniBand on a tie), a NIC with no port
// table is kept, and nothing is dropped where all agree.
TEST(NicChoice, UsableNicsKeepTheActivePortsOfTheCommonLinkLayer) {
  using topology::NicPorts;
  const std::vector<std::string> tied = {"a", "b", "c", "d"};
  EXPECT_EQ(topology::usable_nics(tied, {}), tied);
  std::map<std::string, NicPorts> roce = {{"a", {true, "Ethernet"}},
                                          {"b", {true, "Ethernet"}},
                                          {"c", {true, "Ethernet"}},
                                          {"d", {true, "InfiniBand"}}};
  EXPECT_EQ(topology::usable_nics(tied, roce), (std::vector<std::string>{"a", "b", "c"}));
  std::map<std::string, NicPorts> tie = {{"a", {true, "Ethernet"}}, {"b", {true, "InfiniBand"}}};
  EXPECT_EQ(topology::usable_nics({"a", "b"}, tie), (std::vector<std::string>{"b"}));
  std::map<std::string, NicPorts> all_down = {{"a", {false, "InfiniBand"}},
                                              {"b", {false, "InfiniBand"}}};
  std::string why;
  EXPECT_TRUE(topology::usable_nics({"a", "b"}, all_down, &why).empty());
  EXPECT_EQ(why, "left out, no port ACTIVE: a, b");
}

TEST(NicChoice, LiveMachineProbeWorks) {
  const auto p = topology::probe();
  EXPECT_FALSE(p.host.empty());
}

}  // namespace
}  // namespace rdmacoll
