// Opening the RDMA device a rank uses: which device, port and GID (fabric.hpp decides the GID),
// fork safety, and the verbs settings read before any QP exists.
#include "transport/verbs/device.hpp"

#include <arpa/inet.h>
#include <fcntl.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>

#include "common/log.hpp"
#include "common/settings.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::transport::verbs_device {

std::string errno_text(int e) {
  return std::strerror(e) + std::string(" (errno ") + std::to_string(e) + ")";
}

TransportError registration_error(size_t length, int err) {
  std::string msg =
      "verbs: ibv_reg_mr of " + std::to_string(length) + " bytes failed: " + errno_text(err);
  if (err == ENOMEM || err == EPERM) {
    msg +=
        "; the locked-memory limit is probably too low: raise it (ulimit -l unlimited, or "
        "memlock in /etc/security/limits.d)";
  }
  return TransportError(msg);
}

// Fork safety, once per process, before any registration. Kernels from 5.13 keep pinned pages
// of a forked parent correct by themselves (ibv_is_fork_initialized() says UNNEEDED); there
// ibv_fork_init() would only mark every registered range MADV_DONTFORK at page granularity, and
// heap tensors share pages with other objects, so a forked child (torch's DataLoader workers)
// would crash touching them. As UCX does: call it only when the kernel needs it, or when
// RDMACOLL_FORK_INIT=1 asks; RDMACOLL_FORK_INIT=0 never calls it.
void init_fork_safety() {
  static std::once_flag once;
  std::call_once(once, [] {
    using settings::kForkInit;
    const auto setting = settings::read(kForkInit);
    const bool forced = setting == kForkInit.value("1");
    const bool refused = setting == kForkInit.value("0");
    const ibv_fork_status status = ibv_is_fork_initialized();
    if (status == IBV_FORK_ENABLED) return;
    if (refused || (status == IBV_FORK_UNNEEDED && !forced)) {
      log::info(
          status == IBV_FORK_UNNEEDED
              ? "verbs: the kernel keeps registered memory fork-safe; ibv_fork_init not needed"
              : "verbs: ibv_fork_init skipped (RDMACOLL_FORK_INIT=0): a forked child may "
                "corrupt registered buffers");
      return;
    }
    if (const int e = ibv_fork_init()) {
      const std::string why = "verbs: ibv_fork_init failed: " + errno_text(e);
      if (forced) throw TransportError(why + " (RDMACOLL_FORK_INIT=1)");
      log::warn(why + "; registered buffers are not fork-safe on this kernel");
      return;
    }
    log::info("verbs: ibv_fork_init done (this kernel needs it for fork safety)");
  });
}

// RDMACOLL_IB_PKEY, written in hex (0x8012) as P_Keys are, or decimal; 0 when unset.
uint16_t env_pkey() {
  const auto v = settings::read(settings::kIbPkey);
  if (!v) return 0;
  char* end = nullptr;
  const long x = std::strtol(v->c_str(), &end, 0);
  if (*end || x < 1 || x > 0xffff) {
    throw InvalidArgument(
        std::string("RDMACOLL_IB_PKEY: expected a P_Key from 0x1 to 0xffff, got '") +
        settings::shown(*v) + "'");
  }
  return static_cast<uint16_t>(x);
}

// The traffic class the administrator set for the port (the mlx5 sysfs knob, "Global
// tclass=106" or a number), or -1.
int sysfs_traffic_class(const std::string& device, int port) {
  std::ifstream f("/sys/class/infiniband/" + device + "/tc/" + std::to_string(port) +
                  "/traffic_class");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto digits = text.find_last_of("0123456789");
  if (digits == std::string::npos) return -1;
  auto first = text.find_last_not_of("0123456789", digits);
  first = first == std::string::npos ? 0 : first + 1;
  int tc = -1;  // from_chars: a run of digits too long for an int is refused, not undefined
  const char* begin = text.data() + first;
  const char* end = text.data() + digits + 1;
  if (std::from_chars(begin, end, tc).ptr != end) return -1;
  return tc >= 0 && tc <= 255 ? tc : -1;
}

// The port's GID table, as fabric::select_gid takes it.
std::vector<fabric::GidEntry> gid_table(ibv_context* ctx, int port, int table_len) {
  std::vector<fabric::GidEntry> t;
  for (int i = 0; i < table_len; ++i) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, port, i, &e, 0) != 0) continue;
    fabric::GidEntry g;
    g.index = i;
    std::memcpy(g.gid.data(), e.gid.raw, 16);
    g.type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? fabric::GidType::RoCEv2
             : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? fabric::GidType::RoCEv1
                                                  : fabric::GidType::IB;
    t.push_back(g);
  }
  return t;
}

OpenDevice open_device(const std::string& preferred) {
  OpenDevice out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    if (list) ibv_free_device_list(list);
    out.choice.reason = "no RDMA devices (ibv_get_device_list found none)";
    return out;
  }
  const auto want_dev = settings::read(settings::kIbDevice);
  // The topology's nearest NIC goes first when it has an ACTIVE port; the others follow.
  if (!want_dev && !preferred.empty()) {
    std::stable_partition(list, list + n,
                          [&](ibv_device* d) { return preferred == ibv_get_device_name(d); });
  }
  const int want_port = static_cast<int>(settings::read(settings::kIbPort).value_or(0));
  const int want_gid =
      static_cast<int>(settings::read(settings::kGidIndex).value_or(UINT16_MAX + 1));
  const std::string family_text = settings::read(settings::kIbAddrFamily).value_or("");
  const auto family = fabric::parse_addr_family(family_text);
  std::optional<fabric::AddrRange> range;
  std::string range_error;
  if (const auto r = settings::read(settings::kIbAddrRange)) {
    range = fabric::parse_addr_range(*r, &range_error);
    if (!range) {
      ibv_free_device_list(list);
      out.choice.reason = "RDMACOLL_IB_ADDR_RANGE: " + range_error;
      return out;
    }
  }
  if (!family) {
    ibv_free_device_list(list);
    out.choice.reason =
        std::string("RDMACOLL_IB_ADDR_FAMILY=") + family_text + " is neither ipv4 nor ipv6";
    return out;
  }
  std::string seen;
  // A rank whose nearest NIC has no ACTIVE port may use another only on the same kind of
  // fabric (link layer): an Ethernet port beside an InfiniBand rail is another network.
  int preferred_link_layer = -1;
  for (int d = 0; d < n && !out.ctx; ++d) {
    const std::string name = ibv_get_device_name(list[d]);
    if (want_dev && name != *want_dev) continue;
    ibv_context* ctx = ibv_open_device(list[d]);
    if (!ctx) {
      seen += " " + name + "(cannot open: " + errno_text(errno) + ")";
      continue;
    }
    ibv_device_attr dattr{};
    ibv_query_device(ctx, &dattr);
    for (int p = 1; p <= dattr.phys_port_cnt; ++p) {
      if (want_port && want_port != p) continue;
      ibv_port_attr pa{};
      if (ibv_query_port(ctx, p, &pa) != 0) continue;
      if (!want_dev && name == preferred && preferred_link_layer < 0)
        preferred_link_layer = pa.link_layer;
      if (preferred_link_layer >= 0 && name != preferred && pa.link_layer != preferred_link_layer) {
        seen += " " + name + ":" + std::to_string(p) + "(another link layer than " + preferred +
                ", the nearest device)";
        continue;
      }
      if (pa.state != IBV_PORT_ACTIVE) {
        seen += " " + name + ":" + std::to_string(p) + "(" + ibv_port_state_str(pa.state) + ")";
        continue;
      }
      int gid = want_gid <= UINT16_MAX ? want_gid : -1;
      if (gid >= pa.gid_tbl_len) {
        seen += " " + name + ":" + std::to_string(p) + "(RDMACOLL_GID_INDEX " +
                std::to_string(gid) + " is past its GID table of " +
                std::to_string(pa.gid_tbl_len) + ")";
        continue;
      }
      if (gid < 0) {
        const fabric::GidChoice c =
            fabric::select_gid(gid_table(ctx, p, pa.gid_tbl_len), *family, range);
        if (c.index < 0) {
          seen += " " + name + ":" + std::to_string(p) + "(" + c.why_none + ")";
          continue;
        }
        gid = c.index;
      }
      out.ctx = ctx;
      out.port_attr = pa;
      out.device_attr = dattr;
      out.choice = {true, "", name, p, gid < 0 ? 0 : gid};
      break;
    }
    if (!out.ctx) ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  if (out.ctx && !want_dev && !preferred.empty() && out.choice.device != preferred) {
    log::warn("verbs: " + preferred + ", the RDMA device nearest this rank, has no usable port (" +
              seen + " ); using " + out.choice.device +
              " on the same link layer. Set RDMACOLL_IB_DEVICE to choose.");
  }
  if (!out.ctx) {
    out.choice.reason = std::string("no ACTIVE RDMA port") +
                        (want_dev ? std::string(" on RDMACOLL_IB_DEVICE=") + *want_dev : "") +
                        (seen.empty() ? "" : "; seen:" + seen);
  }
  return out;
}

void check_settings() {
  (void)env_pkey();
  if (const auto f = settings::read(settings::kIbAddrFamily); f && !fabric::parse_addr_family(*f)) {
    throw InvalidArgument(std::string("RDMACOLL_IB_ADDR_FAMILY: expected ipv4 or ipv6, got '") +
                          settings::shown(*f) + "'");
  }
  if (const auto r = settings::read(settings::kIbAddrRange)) {
    std::string why;
    if (!fabric::parse_addr_range(*r, &why))
      throw InvalidArgument("RDMACOLL_IB_ADDR_RANGE: " + why);
  }
}

Device::Device(const std::string& preferred) {
  init_fork_safety();
  OpenDevice dev = open_device(preferred);
  if (!dev.ctx) throw TransportError("verbs: " + dev.choice.reason);
  ctx = dev.ctx;
  choice = dev.choice;
  port = dev.port_attr;
  attr = dev.device_attr;
  if (ibv_query_gid(ctx, choice.port, choice.gid_index, &gid) != 0) {
    throw TransportError("verbs: cannot read GID " + std::to_string(choice.gid_index) + " of " +
                         choice.device);
  }
  const auto cap = settings::read(settings::kIbMtu);
  mtu = fabric::advertised_mtu(
      port.active_mtu, cap == settings::kIbMtu.value("auto") ? 0 : std::stoull(std::string(cap)));
  read_fabric_settings();
  pd = ibv_alloc_pd(ctx);
  channel = ibv_create_comp_channel(ctx);
  if (!pd || !channel) throw TransportError("verbs: cannot allocate a PD or completion channel");
  ::fcntl(channel->fd, F_SETFL, ::fcntl(channel->fd, F_GETFL) | O_NONBLOCK);
  ::fcntl(ctx->async_fd, F_SETFL, ::fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
}

Device::~Device() {
  if (cq && unacked_events_) ibv_ack_cq_events(cq, unacked_events_);
  cq.reset();
  channel.reset();
  pd.reset();
  ctx.reset();
}

void Device::create_cq(uint64_t entries, int vector) {
  // Ranks of a host spread their completion interrupts over the device's vectors.
  vector %= std::max(1, ctx->num_comp_vectors);
  cq = ibv_create_cq(ctx, static_cast<int>(entries), nullptr, channel, vector);
  if (!cq) throw TransportError("verbs: ibv_create_cq failed: " + errno_text(errno));
}

void Device::arm() {
  ibv_req_notify_cq(cq, 0);
  armed_ = true;
}

bool Device::take_event() {
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  if (ibv_get_cq_event(channel, &ev_cq, &ev_ctx) != 0) return false;  // the fd is non-blocking
  if (++unacked_events_ >= 64) {
    ibv_ack_cq_events(cq, unacked_events_);
    unacked_events_ = 0;
  }
  armed_ = false;
  return true;
}

std::string Device::port_name() const {
  return choice.device + ":" + std::to_string(choice.port);
}

fabric::PortIdentity Device::identity() const {
  fabric::PortIdentity id;
  id.nic = port_name();
  id.link_layer = port.link_layer;
  id.gid_type = fabric.gid_type;
  id.pkey = fabric.pkey;
  std::memcpy(id.gid.data(), gid.raw, 16);
  return id;
}

std::chrono::milliseconds Device::retry_budget() const {
  const double seconds =
      4.096e-6 * static_cast<double>(uint64_t{1} << fabric.timeout) * (fabric.retry_count + 1);
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

void Device::read_fabric_settings() {
  FabricSettings f;
  const int sysfs_tc = sysfs_traffic_class(choice.device, choice.port);
  const auto tc = settings::read(settings::kIbTrafficClass);
  f.traffic_class = tc ? static_cast<int>(*tc) : std::max(sysfs_tc, 0);
  f.service_level = static_cast<int>(settings::read(settings::kIbServiceLevel));
  f.timeout = static_cast<int>(settings::read(settings::kIbAckTimeout));
  const int wanted_retries = static_cast<int>(settings::read(settings::kIbRetryCount));
  f.retry_count = fabric::qp_retry_count(wanted_retries, attr.vendor_id);
  if (f.retry_count != wanted_retries) {
    log::info("verbs: " + port_name() + " is SoftRoCE (rxe), which retries forever at retry " +
              "count 7: using " + std::to_string(f.retry_count) +
              ", so a peer that died on another host fails within the retry budget");
  }
  f.grh_required = (port.flags & IBV_QPF_GRH_REQUIRED) != 0;
  if (const uint16_t want = env_pkey()) {
    std::vector<uint16_t> table;
    for (int i = 0; i < port.pkey_tbl_len; ++i) {
      __be16 pkey = 0;
      if (ibv_query_pkey(ctx, choice.port, i, &pkey) != 0) break;
      table.push_back(ntohs(pkey));
    }
    f.pkey_index = fabric::select_pkey_index(table, want);
    if (f.pkey_index < 0) {
      throw TransportError("verbs: P_Key " + settings::read(settings::kIbPkey).value_or("") +
                           " (RDMACOLL_IB_PKEY) is not in " + port_name() + "'s P_Key table of " +
                           std::to_string(table.size()) + " entries");
    }
  }
  __be16 pkey = 0;
  if (ibv_query_pkey(ctx, choice.port, f.pkey_index, &pkey) == 0) f.pkey = ntohs(pkey);
  std::array<uint8_t, 16> g{};
  std::memcpy(g.data(), gid.raw, 16);
  ibv_gid_entry entry{};
  const bool typed = ibv_query_gid_ex(ctx, choice.port, choice.gid_index, &entry, 0) == 0;
  if (typed) {
    f.gid_type = entry.gid_type == IBV_GID_TYPE_ROCE_V2   ? fabric::GidType::RoCEv2
                 : entry.gid_type == IBV_GID_TYPE_ROCE_V1 ? fabric::GidType::RoCEv1
                                                          : fabric::GidType::IB;
  }
  fabric = f;
  const char* type = !typed                                   ? "?"
                     : entry.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2"
                     : entry.gid_type == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1"
                                                              : "IB";
  log::info(
      "verbs: " + port_name() + " GID index " + std::to_string(choice.gid_index) + " " +
      fabric::gid_text(g) + " (" + type + "), traffic class " + std::to_string(f.traffic_class) +
      (settings::read(settings::kIbTrafficClass) ? " (RDMACOLL_IB_TC)"
       : sysfs_tc >= 0                           ? " (sysfs)"
                                                 : "") +
      ", SL " + std::to_string(f.service_level) + ", P_Key index " + std::to_string(f.pkey_index) +
      ", MTU " + std::to_string(128 << mtu) + ", timeout " + std::to_string(f.timeout) +
      ", retry " + std::to_string(f.retry_count) + (f.grh_required ? ", GRH required" : ""));
}

}  // namespace rdmacoll::transport::verbs_device
