#pragma once
// Fabric settings of the verbs transport as pure decisions on tables read from the device, so
// they are unit-tested without one: which GID to use, which P_Key index, whether a peer needs a
// GRH, and whether two ports can talk at all. The device queries stay in device.cpp.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rdmacoll::transport::fabric {

enum class GidType { IB, RoCEv1, RoCEv2 };

struct GidEntry {
  int index = 0;
  std::array<uint8_t, 16> gid{};
  GidType type = GidType::IB;
};

enum class AddrFamily { Any, IPv4, IPv6 };

// An address range (RDMACOLL_IB_ADDR_RANGE): "10.1.0.0/16" or "fd00:1::/64".
struct AddrRange {
  bool ipv4 = true;
  std::array<uint8_t, 16> prefix{};  // IPv4 in the last four bytes (as in a v4-mapped GID)
  int bits = 0;                      // of the address: up to 32 (IPv4) or 128
};
// Parses a range; nullopt and `error` set when it is not one.
std::optional<AddrRange> parse_addr_range(const std::string& text, std::string* error);
// Parses RDMACOLL_IB_ADDR_FAMILY ("ipv4", "ipv6", empty: any); nullopt when it is neither.
std::optional<AddrFamily> parse_addr_family(const std::string& text);

bool is_ipv4_mapped(const std::array<uint8_t, 16>& gid);
bool is_link_local(const std::array<uint8_t, 16>& gid);    // fe80::/10
std::string gid_text(const std::array<uint8_t, 16>& gid);  // IPv4 dotted when v4-mapped

struct GidChoice {
  int index = -1;        // -1: none suits
  std::string why_none;  // when none
};
// RoCE: the GID rdma_cm would pick for the address asked. RoCE v2 before v1, never a link-local
// one (unroutable), in `family` (Any: IPv4 before IPv6) and inside `range` when given.
// InfiniBand (no RoCE entries): index 0, the port GID.
GidChoice select_gid(const std::vector<GidEntry>& table, AddrFamily family,
                     const std::optional<AddrRange>& range);

// The P_Key table index for `want` (RDMACOLL_IB_PKEY; its low 15 bits name the partition): the
// full-member entry (bit 15 set) first, else a limited one; -1 when the partition is absent.
int select_pkey_index(const std::vector<uint16_t>& table, uint16_t want);

// Whether the address vector to a peer needs a GRH: always on RoCE, when the port requires one
// (IBV_QPF_GRH_REQUIRED, SR-IOV virtual functions), when the peer has no LID, and when the peer
// is in another subnet (the GID's upper 64 bits differ).
bool needs_grh(bool roce, bool port_requires_grh, uint16_t peer_lid,
               const std::array<uint8_t, 16>& my_gid, const std::array<uint8_t, 16>& peer_gid);

// What a rank's port says of itself in its address, for the pair to be checked at connect.
struct PortIdentity {
  std::string nic;     // "mlx5_0:1"
  int link_layer = 0;  // IBV_LINK_LAYER_*
  GidType gid_type = GidType::IB;
  uint16_t pkey = 0xffff;         // the P_Key its QPs use (bit 15: full member)
  std::array<uint8_t, 16> gid{};  // InfiniBand: the upper 8 bytes are the subnet prefix
};
// Why two ports cannot be connected, naming both (`peer` names the rank), or empty: their link
// layers differ; RoCE v1 against v2 (different packets: each would drop the other's); different
// partitions, or both limited members of one (the switch and the HCAs drop what crosses); on
// InfiniBand, different subnet prefixes (rdmacoll addresses the peer's LID, not a router's).
// Without this such a pair fails only when its QPs exhaust their retries (about 34 s). MTUs may
// differ: the path uses the smaller (path_mtu).
std::string incompatibility(const PortIdentity& mine, const PortIdentity& peer,
                            const std::string& peer_name);

// MTUs as ibv_mtu numbers (1..5: 256..4096 bytes). A rank advertises its port's active MTU,
// capped by RDMACOLL_IB_MTU (`cap_bytes`, 0: none; a fabric whose switches carry less than the
// ports report, or a RoCE path with a smaller Ethernet MTU); both ends of a pair take the smaller
// of the two advertised, so they agree, as a receiver drops packets above its own path MTU.
int advertised_mtu(int active_mtu, uint64_t cap_bytes);
int path_mtu(int mine, int theirs);

// The QPs' retry_cnt for a wanted count of 0..7. The IB spec makes 7 seven retries; SoftRoCE
// (rxe, vendor_id 0xFFFFFF) takes 7 as "retry forever", so a write to a peer whose process
// died on another host never fails and waits out the job's timeout: there 7 becomes 6.
constexpr uint32_t kRxeVendorId = 0xFFFFFF;
int qp_retry_count(int wanted, uint32_t vendor_id);

}  // namespace rdmacoll::transport::fabric
