#pragma once
// libibverbs implementation of the transport interface: RC queue pairs to a peer, made when
// the pair first talks and connected through the rendezvous store (QP numbers; GIDs travel in
// the address published at init). Data moves with RDMA WRITE WITH IMM straight into the peer's
// registered output; the immediate (verbs/immediates.hpp: the receiver's token for the call, and
// the chunk) tells the receiver which call and chunk landed. Control messages (call descriptors)
// are SENDs into one shared receive queue.

#include <memory>
#include <optional>
#include <string>

#include "transport/transport.hpp"

namespace rdmacoll::transport {

// What device/port/GID the verbs transport would use, or why none is usable.
struct VerbsDeviceChoice {
  bool usable = false;
  std::string reason;  // when not usable
  std::string device;
  int port = 0;
  int gid_index = -1;
};

// Honours RDMACOLL_IB_DEVICE, RDMACOLL_IB_PORT and RDMACOLL_GID_INDEX; else the first ACTIVE
// port, and on RoCE its RoCE v2 IPv4-mapped GID.
VerbsDeviceChoice probe_verbs_device();

// Checks the verbs settings that are set (address family and range, P_Key), whichever transport
// the job takes: a mistake raises InvalidArgument at init on every run, not first on the
// cluster where verbs is used.
void check_verbs_settings();

// Throws TransportError naming the reason when no usable device/port exists.
std::unique_ptr<Transport> create_verbs_transport(const std::string& preferred_device = "");

}  // namespace rdmacoll::transport
