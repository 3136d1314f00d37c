#pragma once
// Opening the RDMA device a rank uses (device.cpp): the topology's nearest device first, then
// any with an ACTIVE port on the same link layer; the port and GID the fabric settings ask for.

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

#include "transport/verbs/fabric.hpp"
#include "transport/verbs/verbs_transport.hpp"

namespace rdmacoll::transport::verbs_device {

// A registered setting's value (common/settings), nullptr when unset or empty.
const char* env(const char* name);
// A verbs setting within its registered bounds (common/settings).
int env_int(const char* name, int fallback);
// RDMACOLL_IB_PKEY, written in hex (0x8012) as P_Keys are, or decimal; 0 when unset.
uint16_t env_pkey();
std::string errno_text(int e);

// ibv_fork_init when this kernel needs it (or RDMACOLL_FORK_INIT=1), once per process.
void init_fork_safety();

// The traffic class the administrator set for the port (mlx5's sysfs knob), or -1.
int sysfs_traffic_class(const std::string& device, int port);
// The port's GID table, as fabric::select_gid takes it.
std::vector<fabric::GidEntry> gid_table(ibv_context* ctx, int port, int table_len);

struct OpenDevice {
  ibv_context* ctx = nullptr;
  VerbsDeviceChoice choice;
  ibv_port_attr port_attr{};
};
// Opens the chosen device (the caller closes ctx) or says in choice.reason why there is none.
OpenDevice open_device(const std::string& preferred = "");

}  // namespace rdmacoll::transport::verbs_device
