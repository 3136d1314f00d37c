#pragma once
// The RDMA device a rank uses (device.cpp): opening it (the topology's nearest device first,
// then any with an ACTIVE port on the same link layer; the port and GID the fabric settings ask
// for), and the Device that owns it with what the transport makes on it first.

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/settings.hpp"
#include "rdmacoll/errors.hpp"
#include "transport/verbs/fabric.hpp"
#include "transport/verbs/handles.hpp"
#include "transport/verbs/verbs_transport.hpp"

namespace rdmacoll::transport::verbs_device {

// RDMACOLL_IB_PKEY, written in hex (0x8012) as P_Keys are, or decimal; 0 when unset.
uint16_t env_pkey();
std::string errno_text(int e);
// ibv_reg_mr's failure, with what to do about the usual cause (the locked-memory limit).
TransportError registration_error(size_t length, int err);

// The verbs settings given as text (RDMACOLL_IB_PKEY, RDMACOLL_IB_ADDR_FAMILY,
// RDMACOLL_IB_ADDR_RANGE), parsed; InvalidArgument naming the one that is wrong.
void check_settings();

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
  ibv_device_attr device_attr{};
};
// Opens the chosen device (the caller closes ctx) or says in choice.reason why there is none.
OpenDevice open_device(const std::string& preferred = "");

// Slow fabrics (SoftRoCE under emulation) need a long ACK timeout: 4.096 us * 2^20 = 4.3 s.
// RDMACOLL_IB_TIMEOUT and RDMACOLL_IB_RETRY_CNT override them (NCCL_IB_TIMEOUT's meaning).
constexpr int kQpTimeout = static_cast<int>(settings::kIbAckTimeout.value);
constexpr int kRetryCount = static_cast<int>(settings::kIbRetryCount.value);

// What the fabric asks of our QPs: traffic class and SL (lossless RoCE classes ride on them),
// the P_Key index, GRH, timeouts. Logged at info with the GID, for `ibv_devinfo` and
// `show_gids` to be checked against.
struct FabricSettings {
  int traffic_class = 0;
  int service_level = 0;
  int pkey_index = 0;
  uint16_t pkey = 0xffff;  // the table's entry at pkey_index
  fabric::GidType gid_type = fabric::GidType::IB;
  int timeout = kQpTimeout;
  int retry_count = kRetryCount;
  bool grh_required = false;
};

// The device a transport runs on and what is made on it once: its context, port, GID and
// fabric settings, the protection domain, and the completion queue with its channel. Freed in
// the order verbs requires (the CQ, with its events acknowledged, before its channel, then the
// PD, the device last), after everything made on them (QPs, the SRQ, registrations): the
// transport declares it first, so it goes last.
class Device {
 public:
  // Opens the device (after fork safety), reads its port, GID and the fabric settings, and
  // makes the PD and the completion channel; throws TransportError saying why it cannot.
  explicit Device(const std::string& preferred);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // The CQ, on the channel, at completion vector `vector` (modulo the device's count).
  void create_cq(uint64_t entries, int vector);
  // The CQ's wake-ups through the channel. Armed once per sleep (the caller polls once more
  // after arming, so no completion slips between its last poll and the sleep); after a sleep,
  // take_event() says whether a completion ended it (events acknowledged 64 at a time).
  bool armed() const { return armed_; }
  void arm();
  bool take_event();
  // "rxe0:1".
  std::string port_name() const;
  // What our port says of itself in our address, for the pair to be checked at connect.
  fabric::PortIdentity identity() const;
  // The port's retry budget: RDMACOLL_IB_TIMEOUT x (RDMACOLL_IB_RETRY_CNT + 1).
  std::chrono::milliseconds retry_budget() const;

  verbs_handles::Context ctx;
  VerbsDeviceChoice choice;
  ibv_port_attr port{};
  ibv_device_attr attr{};  // ibv_query_device's, read once at open
  ibv_gid gid{};
  int mtu = 1;  // advertised (fabric::advertised_mtu); a pair's path takes the smaller
  FabricSettings fabric;
  verbs_handles::ProtectionDomain pd;
  verbs_handles::CompletionChannel channel;
  verbs_handles::CompletionQueue cq;

 private:
  void read_fabric_settings();

  bool armed_ = false;
  unsigned unacked_events_ = 0;  // CQ events taken and not yet acknowledged
};

}  // namespace rdmacoll::transport::verbs_device
