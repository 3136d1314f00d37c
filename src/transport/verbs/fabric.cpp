#include "transport/verbs/fabric.hpp"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rdmacoll::transport::fabric {

std::optional<AddrFamily> parse_addr_family(const std::string& text) {
  if (text.empty()) return AddrFamily::Any;
  if (text == "ipv4" || text == "IPv4" || text == "AF_INET") return AddrFamily::IPv4;
  if (text == "ipv6" || text == "IPv6" || text == "AF_INET6") return AddrFamily::IPv6;
  return std::nullopt;
}

std::optional<AddrRange> parse_addr_range(const std::string& text, std::string* error) {
  const auto slash = text.find('/');
  const std::string addr = text.substr(0, slash);
  AddrRange r;
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, addr.c_str(), &v4) == 1) {
    r.ipv4 = true;
    std::memcpy(r.prefix.data() + 12, &v4, 4);
  } else if (::inet_pton(AF_INET6, addr.c_str(), &v6) == 1) {
    r.ipv4 = false;
    std::memcpy(r.prefix.data(), &v6, 16);
  } else {
    if (error) *error = "'" + text + "' is not an IPv4 or IPv6 address range (a.b.c.d/n, x::/n)";
    return std::nullopt;
  }
  const int max_bits = r.ipv4 ? 32 : 128;
  r.bits = max_bits;
  if (slash != std::string::npos) {
    const std::string b = text.substr(slash + 1);
    char* end = nullptr;
    const long v = std::strtol(b.c_str(), &end, 10);
    if (b.empty() || *end || v < 0 || v > max_bits) {
      if (error)
        *error = "'" + text + "' has a bad prefix length (0.." + std::to_string(max_bits) + ")";
      return std::nullopt;
    }
    r.bits = static_cast<int>(v);
  }
  return r;
}

bool is_ipv4_mapped(const std::array<uint8_t, 16>& g) {
  return std::all_of(g.begin(), g.begin() + 10, [](uint8_t b) { return b == 0; }) &&
         g[10] == 0xff && g[11] == 0xff;
}

bool is_link_local(const std::array<uint8_t, 16>& g) {
  return g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
}

std::string gid_text(const std::array<uint8_t, 16>& g) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (is_ipv4_mapped(g)) {
    ::inet_ntop(AF_INET, g.data() + 12, buf, sizeof buf);
  } else {
    ::inet_ntop(AF_INET6, g.data(), buf, sizeof buf);
  }
  return buf;
}

namespace {
bool in_range(const std::array<uint8_t, 16>& g, const AddrRange& r) {
  if (r.ipv4 != is_ipv4_mapped(g)) return false;
  const int first = r.ipv4 ? 12 : 0;  // where the address starts in the GID
  for (int bit = 0; bit < r.bits; ++bit) {
    const int byte = first + bit / 8;
    const uint8_t mask = static_cast<uint8_t>(0x80 >> (bit % 8));
    if ((g[byte] & mask) != (r.prefix[byte] & mask)) return false;
  }
  return true;
}
}  // namespace

GidChoice select_gid(const std::vector<GidEntry>& table, AddrFamily family,
                     const std::optional<AddrRange>& range) {
  const bool roce = std::any_of(table.begin(), table.end(),
                                [](const GidEntry& e) { return e.type != GidType::IB; });
  if (!roce) {
    if (table.empty()) return {-1, "the port has no GIDs"};
    return {table.front().index, ""};
  }
  // Lower score wins: RoCE v2 first, then the address family rdma_cm prefers (IPv4).
  int best = -1, best_score = 1 << 30;
  int skipped_link_local = 0, skipped_family = 0, skipped_range = 0;
  for (const GidEntry& e : table) {
    if (e.type == GidType::IB) continue;
    if (std::all_of(e.gid.begin(), e.gid.end(), [](uint8_t b) { return b == 0; })) continue;
    if (is_link_local(e.gid)) {
      ++skipped_link_local;
      continue;
    }
    const bool v4 = is_ipv4_mapped(e.gid);
    if ((family == AddrFamily::IPv4 && !v4) || (family == AddrFamily::IPv6 && v4)) {
      ++skipped_family;
      continue;
    }
    if (range && !in_range(e.gid, *range)) {
      ++skipped_range;
      continue;
    }
    const int score = (e.type == GidType::RoCEv2 ? 0 : 2) + (v4 ? 0 : 1);
    if (score < best_score) {
      best_score = score;
      best = e.index;
    }
  }
  if (best >= 0) return {best, ""};
  return {-1, "no RoCE GID fits (" + std::to_string(skipped_link_local) + " link-local, " +
                  std::to_string(skipped_family) + " of the other address family, " +
                  std::to_string(skipped_range) + " outside RDMACOLL_IB_ADDR_RANGE)"};
}

int select_pkey_index(const std::vector<uint16_t>& table, uint16_t want) {
  int limited = -1;
  for (size_t i = 0; i < table.size(); ++i) {
    if ((table[i] & 0x7fff) != (want & 0x7fff) || (table[i] & 0x7fff) == 0) continue;
    if (table[i] & 0x8000) return static_cast<int>(i);
    if (limited < 0) limited = static_cast<int>(i);
  }
  return limited;
}

bool needs_grh(bool roce, bool port_requires_grh, uint16_t peer_lid,
               const std::array<uint8_t, 16>& my_gid, const std::array<uint8_t, 16>& peer_gid) {
  if (roce || port_requires_grh || peer_lid == 0) return true;
  return !std::equal(my_gid.begin(), my_gid.begin() + 8, peer_gid.begin());  // subnet prefix
}

std::string incompatibility(const PortIdentity& mine, const PortIdentity& peer,
                            const std::string& peer_name) {
  auto layer = [](int ll) {
    return ll == IBV_LINK_LAYER_ETHERNET ? std::string("Ethernet (RoCE)")
                                         : std::string("InfiniBand");
  };
  auto type = [](GidType t) {
    return t == GidType::RoCEv2 ? "RoCE v2" : t == GidType::RoCEv1 ? "RoCE v1" : "IB";
  };
  auto hex = [](uint16_t v) {
    char b[8];
    std::snprintf(b, sizeof b, "0x%04x", v);
    return std::string(b);
  };
  const std::string both =
      peer_name + "'s " + peer.nic + " and this rank's " + mine.nic + " cannot be connected: ";
  if (mine.link_layer != peer.link_layer) {
    return both + "its port is " + layer(peer.link_layer) + " but ours is " +
           layer(mine.link_layer) +
           " (pick ports of one fabric with RDMACOLL_IB_DEVICE and RDMACOLL_IB_PORT)";
  }
  if (mine.link_layer == IBV_LINK_LAYER_ETHERNET && mine.gid_type != peer.gid_type) {
    return both + "its GID is " + type(peer.gid_type) + " and ours " + type(mine.gid_type) +
           " (choose the same type on every host: RDMACOLL_GID_INDEX, or RoCE v2 everywhere)";
  }
  const bool full_mine = (mine.pkey & 0x8000) != 0, full_peer = (peer.pkey & 0x8000) != 0;
  if ((mine.pkey & 0x7fff) != (peer.pkey & 0x7fff) || (!full_mine && !full_peer)) {
    return both + "its P_Key is " + hex(peer.pkey) + " and ours " + hex(mine.pkey) +
           ((mine.pkey & 0x7fff) == (peer.pkey & 0x7fff)
                ? " (two limited members of a partition cannot talk)"
                : " (different partitions)") +
           "; set RDMACOLL_IB_PKEY to one partition both are full members of";
  }
  if (mine.link_layer != IBV_LINK_LAYER_ETHERNET &&
      !std::equal(mine.gid.begin(), mine.gid.begin() + 8, peer.gid.begin())) {
    auto prefix = [](const std::array<uint8_t, 16>& g) {
      char b[24];
      std::snprintf(b, sizeof b, "%02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0], g[1], g[2], g[3],
                    g[4], g[5], g[6], g[7]);
      return std::string(b);
    };
    return both + "they are in different InfiniBand subnets (GID prefixes " + prefix(peer.gid) +
           " and " + prefix(mine.gid) + "), and rdmacoll does not route between subnets";
  }
  return "";
}

int advertised_mtu(int active_mtu, uint64_t cap_bytes) {
  int mtu = std::clamp(active_mtu, 1, 5);
  while (cap_bytes && mtu > 1 && (uint64_t{128} << mtu) > cap_bytes)
    --mtu;
  return mtu;
}

int path_mtu(int mine, int theirs) {
  return std::clamp(std::min(mine, theirs), 1, 5);
}

int qp_retry_count(int wanted, uint32_t vendor_id) {
  const int count = std::clamp(wanted, 0, 7);
  return vendor_id == kRxeVendorId ? std::min(count, 6) : count;
}

}  // namespace rdmacoll::transport::fabric
