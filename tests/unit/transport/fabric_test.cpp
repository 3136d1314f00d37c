// The verbs transport's fabric decisions on tables of GIDs and P_Keys, as the device would
// report them (no RDMA device here: the tables stand in for the queries below the interface).

#include "transport/verbs/fabric.hpp"
#include "transport/verbs/port_watch.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstring>

namespace rdmacoll::transport::fabric {
namespace {

std::array<uint8_t, 16> v4(const char* a) {
  std::array<uint8_t, 16> g{};
  g[10] = g[11] = 0xff;
  in_addr x{};
  EXPECT_EQ(::inet_pton(AF_INET, a, &x), 1);
  std::memcpy(g.data() + 12, &x, 4);
  return g;
}
std::array<uint8_t, 16> v6(const char* a) {
  std::array<uint8_t, 16> g{};
  EXPECT_EQ(::inet_pton(AF_INET6, a, g.data()), 1);
  return g;
}

// A RoCE port as mlx5 reports it: v1 and v2 entries per address, link-local ones first.
std::vector<GidEntry> roce_table() {
  return {
      {0, v6("fe80::1"), GidType::RoCEv1},     {1, v6("fe80::1"), GidType::RoCEv2},
      {2, v4("10.1.0.5"), GidType::RoCEv1},    {3, v4("10.1.0.5"), GidType::RoCEv2},
      {4, v6("fd00::5"), GidType::RoCEv1},     {5, v6("fd00::5"), GidType::RoCEv2},
      {6, v4("192.168.7.5"), GidType::RoCEv2},
  };
}

TEST(FabricFromTables, RoCEPicksV2IPv4AndNeverLinkLocal) {
  EXPECT_EQ(select_gid(roce_table(), AddrFamily::Any, std::nullopt).index, 3);
}

TEST(FabricFromTables, AddressFamilyAndRangeSelectTheGid) {
  EXPECT_EQ(select_gid(roce_table(), AddrFamily::IPv6, std::nullopt).index, 5);
  std::string err;
  auto range = parse_addr_range("192.168.0.0/16", &err);
  ASSERT_TRUE(range) << err;
  EXPECT_EQ(select_gid(roce_table(), AddrFamily::Any, range).index, 6);
  range = parse_addr_range("fd00::/8", &err);
  ASSERT_TRUE(range) << err;
  EXPECT_EQ(select_gid(roce_table(), AddrFamily::Any, range).index, 5);
}

TEST(FabricFromTables, IPv6OnlyRoCEWorksAndNoFitSaysWhy) {
  std::vector<GidEntry> t = {{0, v6("fe80::2"), GidType::RoCEv2},
                             {1, v6("2001:db8::2"), GidType::RoCEv2}};
  EXPECT_EQ(select_gid(t, AddrFamily::Any, std::nullopt).index, 1);
  const GidChoice none = select_gid(t, AddrFamily::IPv4, std::nullopt);
  EXPECT_EQ(none.index, -1);
  EXPECT_NE(none.why_none.find("1 link-local"), std::string::npos) << none.why_none;
  EXPECT_NE(none.why_none.find("1 of the other address family"), std::string::npos);
}

TEST(FabricFromTables, InfiniBandUsesThePortGid) {
  std::vector<GidEntry> t = {{0, v6("fe80::2:c903:a:1"), GidType::IB}};
  EXPECT_EQ(select_gid(t, AddrFamily::Any, std::nullopt).index, 0);
}

TEST(FabricFromTables, BadRangesAndFamiliesAreRejected) {
  std::string err;
  EXPECT_FALSE(parse_addr_range("10.0.0.0/33", &err));
  EXPECT_NE(err.find("prefix length"), std::string::npos);
  EXPECT_FALSE(parse_addr_range("not-an-address", &err));
  EXPECT_FALSE(parse_addr_family("ipx"));
  EXPECT_EQ(parse_addr_family(""), AddrFamily::Any);
}

TEST(FabricFromTables, PKeyPrefersFullMembership) {
  const std::vector<uint16_t> table = {0xffff, 0x0012, 0x8012, 0x7fff};
  EXPECT_EQ(select_pkey_index(table, 0x8012), 2);
  EXPECT_EQ(select_pkey_index(table, 0x0012), 2);     // the partition, full member if offered
  EXPECT_EQ(select_pkey_index({0x0034}, 0x8034), 0);  // only a limited membership exists
  EXPECT_EQ(select_pkey_index(table, 0x8055), -1);
}

TEST(FabricFromTables, GrhWhenRoCERequiredNoLidOrAnotherSubnet) {
  const auto a = v6("fe80::1"), same = v6("fe80::2"), other = v6("fec0::2");
  EXPECT_FALSE(needs_grh(false, false, 7, a, same));
  EXPECT_TRUE(needs_grh(true, false, 7, a, same));
  EXPECT_TRUE(needs_grh(false, true, 7, a, same));  // IBV_QPF_GRH_REQUIRED (SR-IOV VF)
  EXPECT_TRUE(needs_grh(false, false, 0, a, same));
  EXPECT_TRUE(needs_grh(false, false, 7, a, other));
}

// A pair is checked at connect from what each published: link layer, GID type, partition
// and (InfiniBand) subnet; every refusal names both NICs. Before, all but the link layer showed
// up only as the QPs' exhausted retries, about 34 s later.
TEST(FabricFromTables, PairsThatCannotTalkAreRefusedNamingBothNics) {
  PortIdentity roce{"rxe0:1", IBV_LINK_LAYER_ETHERNET, GidType::RoCEv2, 0xffff, {}};
  PortIdentity peer = roce;
  peer.nic = "mlx5_3:1";
  EXPECT_EQ(incompatibility(roce, peer, "rank 1"), "");
  PortIdentity ib{"mlx5_0:1", IBV_LINK_LAYER_INFINIBAND, GidType::IB, 0xffff, {}};
  std::string e = incompatibility(ib, peer, "rank 1");
  EXPECT_NE(e.find("rank 1's mlx5_3:1 and this rank's mlx5_0:1 cannot be connected"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("its port is Ethernet (RoCE) but ours is InfiniBand"), std::string::npos) << e;
  peer.gid_type = GidType::RoCEv1;
  e = incompatibility(roce, peer, "rank 1");
  EXPECT_NE(e.find("its GID is RoCE v1 and ours RoCE v2"), std::string::npos) << e;
  peer.gid_type = GidType::RoCEv2;
  peer.pkey = 0x8001;
  e = incompatibility(roce, peer, "rank 1");
  EXPECT_NE(e.find("its P_Key is 0x8001 and ours 0xffff (different partitions)"), std::string::npos)
      << e;
  PortIdentity limited = roce;
  limited.pkey = 0x7fff;
  peer.pkey = 0x7fff;
  e = incompatibility(limited, peer, "rank 1");
  EXPECT_NE(e.find("two limited members"), std::string::npos) << e;
  peer.pkey = 0xffff;
  EXPECT_EQ(incompatibility(limited, peer, "rank 1"), "");  // a full member talks to a limited one
  PortIdentity ib_peer = ib;
  ib_peer.nic = "mlx5_1:1";
  ib.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
  ib_peer.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9};
  EXPECT_EQ(incompatibility(ib, ib_peer, "rank 2"), "");
  ib_peer.gid[7] = 1;
  e = incompatibility(ib, ib_peer, "rank 2");
  EXPECT_NE(e.find("different InfiniBand subnets (GID prefixes fe80:0000:0000:0001 and "
                   "fe80:0000:0000:0000)"),
            std::string::npos)
      << e;
}

TEST(FabricFromTables, GidTextShowsIPv4Dotted) {
  EXPECT_EQ(gid_text(v4("10.1.0.5")), "10.1.0.5");
  EXPECT_EQ(gid_text(v6("fd00::5")), "fd00::5");
}

// Both ends of a pair compute the path MTU from the same two advertised values: the same
// result on either side, and never above either end's cap.
TEST(FabricFromTables, APairAgreesOnTheSmallerMtuAndACapLowersIt) {
  EXPECT_EQ(advertised_mtu(IBV_MTU_4096, 0), IBV_MTU_4096);
  EXPECT_EQ(advertised_mtu(IBV_MTU_4096, 2048), IBV_MTU_2048);
  EXPECT_EQ(advertised_mtu(IBV_MTU_4096, 1024), IBV_MTU_1024);
  EXPECT_EQ(advertised_mtu(IBV_MTU_1024, 4096), IBV_MTU_1024);  // a cap never raises it
  EXPECT_EQ(advertised_mtu(IBV_MTU_4096, 256), IBV_MTU_256);
  for (int a = IBV_MTU_256; a <= IBV_MTU_4096; ++a) {
    for (int b = IBV_MTU_256; b <= IBV_MTU_4096; ++b) {
      EXPECT_EQ(path_mtu(a, b), path_mtu(b, a));
      EXPECT_EQ(path_mtu(a, b), std::min(a, b));
    }
  }
  // A value off the table from a peer still gives a valid ibv_mtu.
  EXPECT_EQ(path_mtu(IBV_MTU_4096, 0), IBV_MTU_256);
  EXPECT_EQ(path_mtu(IBV_MTU_4096, 9), IBV_MTU_4096);
}

// The IB spec's retry count 7 is seven retries, and a hardware NIC gets it as asked. SoftRoCE
// reads 7 as "retry forever" (rxe_comp.c): a peer that died on another host would then never
// fail its writes, so rxe gets at most 6; whatever is asked stays inside 0..7.
TEST(FabricFromTables, SoftRoCENeverGetsTheRetryCountItTakesAsForever) {
  constexpr uint32_t kMellanox = 0x02c9;
  for (int wanted = 0; wanted <= 7; ++wanted) {
    EXPECT_EQ(qp_retry_count(wanted, kMellanox), wanted);
    EXPECT_EQ(qp_retry_count(wanted, kRxeVendorId), std::min(wanted, 6));
  }
  EXPECT_EQ(qp_retry_count(9, kMellanox), 7);
  EXPECT_EQ(qp_retry_count(-1, kRxeVendorId), 0);
}

// A port that goes down is waited for up to the retry budget, and a flap inside it is no
// failure; repeated PORT_ERR events do not move the outage's start; after giving up, a new
// outage starts afresh.
TEST(PortWatch, ADownPortFailsThePeersOnlyPastTheRetryBudget) {
  using namespace std::chrono_literals;
  using verbs_impl::PortWatch;
  const PortWatch::Clock::time_point t0{};
  PortWatch w(1000ms);
  EXPECT_FALSE(w.down());
  EXPECT_FALSE(w.past_budget(t0 + 1h));
  EXPECT_FALSE(w.came_up(t0).has_value());
  EXPECT_TRUE(w.went_down(t0));
  EXPECT_FALSE(w.went_down(t0 + 500ms));  // the same outage
  EXPECT_TRUE(w.down());
  EXPECT_FALSE(w.past_budget(t0 + 999ms));
  EXPECT_TRUE(w.past_budget(t0 + 1000ms));
  const auto lasted = w.came_up(t0 + 1200ms);  // a flap: back before the peers were failed
  ASSERT_TRUE(lasted.has_value());
  EXPECT_EQ(*lasted, 1200ms);
  EXPECT_FALSE(w.down());
  EXPECT_FALSE(w.past_budget(t0 + 1h));
  EXPECT_TRUE(w.went_down(t0 + 2s));
  EXPECT_TRUE(w.past_budget(t0 + 3s));
  w.gave_up();
  EXPECT_FALSE(w.down());
  EXPECT_TRUE(w.went_down(t0 + 10s));
  EXPECT_FALSE(w.past_budget(t0 + 10s + 999ms));
}

}  // namespace
}  // namespace rdmacoll::transport::fabric
