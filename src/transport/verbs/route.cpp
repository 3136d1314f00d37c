// Reachability of a RoCE peer, asked of librdmacm before a pair's QPs are made: on multi-homed
// and rail-isolated hosts (one subnet per rail, no routing between rails) a pair whose GIDs are
// in subnets our port cannot reach used to fail only when its QPs exhausted their retries
// (about 34 s, as PeerFailure). rdma_resolve_addr resolves the peer's address the way rdma_cm
// users (UCX, NCCL's RoCE path) do, through the kernel's routes and neighbours; it tells which
// RDMA device and port the route leaves through, and that must be ours.

#include <rdma/rdma_cma.h>

#include "transport/verbs/transport_impl.hpp"

namespace rdmacoll::transport::verbs_impl {

namespace {

// The address a RoCE GID carries (IPv4-mapped or IPv6).
sockaddr_storage gid_address(const uint8_t* gid) {
  sockaddr_storage s{};
  std::array<uint8_t, 16> g{};
  std::memcpy(g.data(), gid, 16);
  if (fabric::is_ipv4_mapped(g)) {
    auto* in = reinterpret_cast<sockaddr_in*>(&s);
    in->sin_family = AF_INET;
    std::memcpy(&in->sin_addr, gid + 12, 4);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&s);
    in6->sin6_family = AF_INET6;
    std::memcpy(&in6->sin6_addr, gid, 16);
  }
  return s;
}

struct CmId {
  rdma_cm_id* id = nullptr;
  ~CmId() {
    if (id) rdma_destroy_id(id);
  }
};

}  // namespace

std::optional<std::string> VerbsTransport::unreachable(int peer) {
  // InfiniBand: subnets are compared at connect (fabric::incompatibility).
  if (dev_.port.link_layer != IBV_LINK_LAYER_ETHERNET) return std::nullopt;
  const WireInfo& info = peers_[peer].info;
  std::array<uint8_t, 16> mine{}, theirs{};
  std::memcpy(mine.data(), dev_.gid.raw, 16);
  std::memcpy(theirs.data(), info.gid, 16);
  // Worded the same for both ranks: the peer gets this text too (the pair's refusal).
  const std::string ours = dev_.choice.device + ":" + std::to_string(dev_.choice.port);
  const std::string theirs_named = "rank " + std::to_string(peer) + "'s " + identity_of(info).nic +
                                   " (" + fabric::gid_text(theirs) + ")";
  const std::string ours_named =
      "rank " + std::to_string(me_) + "'s " + ours + " (" + fabric::gid_text(mine) + ")";
  if (fabric::is_ipv4_mapped(mine) != fabric::is_ipv4_mapped(theirs)) {
    return theirs_named + " and " + ours_named +
           " use GIDs of different address families; set RDMACOLL_IB_ADDR_FAMILY the same on "
           "every rank";
  }
  CmId cm;
  // No event channel: synchronous operation (rdma_create_id(3)).
  if (rdma_create_id(nullptr, &cm.id, nullptr, RDMA_PS_TCP) != 0) {
    if (!route_check_off_logged_) {
      route_check_off_logged_ = true;
      log::info("verbs: peers' routes not checked (rdma_create_id: " + errno_text(errno) +
                "; is the rdma_ucm module loaded?)");
    }
    return std::nullopt;
  }
  sockaddr_storage src = gid_address(dev_.gid.raw), dst = gid_address(info.gid);
  if (rdma_resolve_addr(cm.id, reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst),
                        2000) != 0) {
    return theirs_named + " is not reachable from " + ours_named +
           ": rdma_resolve_addr failed: " + errno_text(errno) +
           " (check the subnets and routes of both ports, or pick ports of one rail with "
           "RDMACOLL_IB_DEVICE)";
  }
  const std::string via = cm.id->verbs ? std::string(ibv_get_device_name(cm.id->verbs->device)) +
                                             ":" + std::to_string(cm.id->port_num)
                                       : std::string("no RDMA device");
  if (via != ours) {
    return theirs_named + " is not reachable from " + ours_named +
           ": the route to it leaves through " + via +
           " (rail-isolated or multi-homed hosts: pick ports of one rail with RDMACOLL_IB_DEVICE, "
           "or route between the rails)";
  }
  return std::nullopt;
}

}  // namespace rdmacoll::transport::verbs_impl
