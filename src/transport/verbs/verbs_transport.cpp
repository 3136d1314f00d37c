#include "transport/verbs/verbs_transport.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/timerfd.h>
#include <ucm/api/ucm.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "common/log.hpp"
#include "common/settings.hpp"
#include "rdmacoll/errors.hpp"
#include "rdmacoll/store.hpp"
#include "transport/peer_liveness.hpp"
#include "transport/verbs/device.hpp"
#include "transport/verbs/eager_ring.hpp"
#include "transport/verbs/fabric.hpp"
#include "transport/verbs/footprint.hpp"
#include "transport/verbs/immediates.hpp"
#include "transport/verbs/mr_cache.hpp"

namespace rdmacoll::transport {

namespace {

using verbs_device::env;
using verbs_device::env_int;
using verbs_device::env_pkey;
using verbs_device::errno_text;
using verbs_device::gid_table;
using verbs_device::init_fork_safety;
using verbs_device::open_device;
using verbs_device::OpenDevice;
using verbs_device::sysfs_traffic_class;

using verbs_plan::kCtrlBytes;
using verbs_plan::kSendBuffers;
using verbs_plan::kSendDepth;
using verbs_plan::kSendsInFlight;
using verbs_plan::kSrqDepth;
constexpr size_t kMaxWrite = size_t{1} << 30;
static_assert(eager_ring::kMaxPayload >= kCtrlBytes - 8, "every control message fits a slot");
// Data path, after NCCL's net_ib and UCX's uct/ib: control messages up to kWantInline bytes go
// inside the work request (no DMA read of a send buffer) where the device offers it; work
// requests built between two progress() calls are chained and posted with one doorbell, and only
// the last of a batch (and every kSignalEvery-th) asks for a completion: RC completes in order,
// so one completion retires everything posted before it.
constexpr uint32_t kWantInline = 256;
constexpr int kSignalEvery = 16;
// Async events (port, QP, CQ errors) are read at most this often while busy, and after every
// sleep (their fd is among those waited on): not with a read(2) per progress() call.
constexpr std::chrono::milliseconds kAsyncEventInterval{10};
// A remote host that dies while we only wait for it (nothing of ours on its QP) sends no error;
// every this often a peer we wait on gets a zero-byte RDMA write (no memory touched, nothing
// completes at the peer). Its ACK proves the peer's NIC alive; a dead host makes it fail after
// RDMACOLL_IB_TIMEOUT x (RDMACOLL_IB_RETRY_CNT + 1), which marks the peer failed.
constexpr std::chrono::milliseconds kKeepaliveInterval{1000};
// Slow fabrics (SoftRoCE under emulation) need a long ACK timeout: 4.096 us * 2^20 = 4.3 s.
// RDMACOLL_IB_TIMEOUT and RDMACOLL_IB_RETRY_CNT override them (NCCL_IB_TIMEOUT's meaning).
constexpr int kQpTimeout = 20;
constexpr int kRetryCount = 7;
// A peer's QPs are made on its first use, through the store (see Link). The store is asked
// whether the peer's half has arrived after this delay, doubling to the maximum while nothing
// comes: a first call pays a few store round trips, and a peer that is late costs the store
// one request per peer every 10 ms.
constexpr std::chrono::microseconds kConnectPollFirst{100};
constexpr std::chrono::microseconds kConnectPollMax{10'000};

// RDMACOLL_IB_QPS_PER_PEER: QPs ("lanes") per peer pair. Lane 0 carries control messages and
// the pieces of small writes; a write of several pieces is striped over the lanes, each lane's
// last piece carrying the immediate, and the receiver counts one arrival per lane used. On
// fabrics that hash flows per QP (RoCE ECMP, adaptive routing) and NICs with several engines,
// one QP per peer caps a pair at one path (NCCL_IB_QPS_PER_CONNECTION for the same reason).
constexpr int kMaxLanes = 16;

// wr_id: kind (2 bits) | lane (6) | peer (24) | the lane's work-request number, or receive slot
// (32). Every work request has a number of its own, so a completion names exactly one; the
// lane's Posted entry maps it to its request (64-bit ids, which never wrap).
enum WrKind : uint64_t { kRecvWr = 0, kSendWr = 1, kWriteWr = 2 };
uint64_t make_wr_id(WrKind kind, uint32_t peer, uint32_t id, uint32_t lane = 0) {
  return (static_cast<uint64_t>(kind) << 62) | (static_cast<uint64_t>(lane) << 56) |
         (static_cast<uint64_t>(peer) << 32) | id;
}

class VerbsRequest final : public Request {
 public:
  explicit VerbsRequest(int peer) : Request(peer) {}
  int pieces = 0;      // outstanding work requests of a write
  int send_slot = -1;  // control send buffer in use
  bool eager = false;  // a control message written into the peer's eager slots
  void* recv_buffer = nullptr;
  size_t recv_capacity = 0;
};

// The control buffers' registration.
struct MrEntry {
  ibv_mr* mr = nullptr;
  ~MrEntry() {
    if (mr) ibv_dereg_mr(mr);
  }
};

// A buffer inside a registration from the cache (which may cover more than the buffer).
class VerbsMemoryRegion final : public MemoryRegion {
 public:
  VerbsMemoryRegion(void* base, size_t length, std::shared_ptr<const MrCache::Region> r)
      : MemoryRegion(base, length), registration(std::move(r)) {}
  Bytes packed_key() const override {
    Bytes b(4);
    const uint32_t rkey = mr() ? mr()->rkey : 0;
    std::memcpy(b.data(), &rkey, 4);
    return b;
  }
  uint32_t lkey() const { return mr() ? mr()->lkey : 0; }
  ibv_mr* mr() const { return static_cast<ibv_mr*>(registration->handle); }
  std::shared_ptr<const MrCache::Region> registration;
};

class VerbsRemoteRegion final : public RemoteRegion {
 public:
  VerbsRemoteRegion(int peer, uint64_t base, size_t length, uint32_t rkey)
      : RemoteRegion(peer, base, length), rkey(rkey) {}
  uint32_t rkey;
};

// Payload of our published address after the pid/host framing.
struct WireInfo {
  uint8_t gid[16];
  uint16_t lid;
  uint8_t mtu;
  uint8_t link_layer;
  uint8_t lanes;  // RDMACOLL_IB_QPS_PER_PEER: must match on every rank
  uint8_t pad[3];
  uint32_t piece_bytes;  // RDMACOLL_IB_CHUNK: how the sender cuts (the receiver counts lanes)
  // A peer's QP numbers travel later, through the store, when the pair first talks.
};

// How many lanes a write of `length` bytes, cut into pieces of `piece` bytes, uses: the
// sender stripes and the receiver counts arrivals by the same rule.
int lanes_used(size_t length, size_t piece, int lanes) {
  const size_t pieces = std::max<size_t>(1, (length + piece - 1) / piece);
  return static_cast<int>(std::min<size_t>(pieces, static_cast<size_t>(lanes)));
}

// RDMACOLL_IB_CHUNK: the largest RDMA write (default 1 MiB); bigger chunks go as several,
// so a NIC with several engines or QPs works on them side by side.
size_t write_piece_bytes() {
  static_assert(kMaxWrite == size_t{1} << 30, "RDMACOLL_IB_CHUNK's registered maximum");
  return settings::count("RDMACOLL_IB_CHUNK", size_t{1} << 20);
}

int lanes_per_peer() {
  static_assert(kMaxLanes == 16, "RDMACOLL_IB_QPS_PER_PEER's registered maximum");
  return static_cast<int>(settings::count("RDMACOLL_IB_QPS_PER_PEER", 1));
}

// RDMACOLL_IB_EAGER_SLOTS: eager slots per connected peer (0: control messages go as SENDs).
int eager_slots_per_peer() {
  static_assert(eager_ring::kMaxSlots == 64, "RDMACOLL_IB_EAGER_SLOTS's registered maximum");
  return static_cast<int>(settings::count("RDMACOLL_IB_EAGER_SLOTS", eager_ring::kDefaultSlots));
}

// RDMACOLL_MR_CACHE_MB: how much registered memory the cache keeps (default 2 GiB).
size_t mr_cache_bytes() {
  return settings::count("RDMACOLL_MR_CACHE_MB", 2048) << 20;
}

class VerbsTransport final : public Transport {
 public:
  explicit VerbsTransport(const std::string& preferred_device) {
    init_fork_safety();
    OpenDevice dev = open_device(preferred_device);
    if (!dev.ctx) throw TransportError("verbs: " + dev.choice.reason);
    ctx_ = dev.ctx;
    choice_ = dev.choice;
    port_attr_ = dev.port_attr;
    if (ibv_query_gid(ctx_, choice_.port, choice_.gid_index, &gid_) != 0) {
      throw TransportError("verbs: cannot read GID " + std::to_string(choice_.gid_index) + " of " +
                           choice_.device);
    }
    piece_bytes_ = write_piece_bytes();
    lanes_ = lanes_per_peer();
    eager_slots_ = eager_slots_per_peer();
    // A credit write goes back after half a ring taken without a message to carry it. The
    // fallback test's hook (RDMACOLL_TEST_EAGER_HOLD_CREDITS=1) gives no credit at all.
    credit_every_ = static_cast<uint64_t>(std::max(1, eager_slots_ / 2));
    hold_credits_ = settings::choice("RDMACOLL_TEST_EAGER_HOLD_CREDITS") == "1";
    read_fabric_settings();
    pd_ = ibv_alloc_pd(ctx_);
    channel_ = ibv_create_comp_channel(ctx_);
    if (!pd_ || !channel_)
      throw TransportError("verbs: cannot allocate a PD or completion channel");
    ::fcntl(channel_->fd, F_SETFL, ::fcntl(channel_->fd, F_GETFL) | O_NONBLOCK);
    connect_timer_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (connect_timer_ < 0)
      throw TransportError("verbs: timerfd_create failed: " + errno_text(errno));
    ::fcntl(ctx_->async_fd, F_SETFL, ::fcntl(ctx_->async_fd, F_GETFL) | O_NONBLOCK);
    // An int: verbs.h's ibv_reg_mr macro ANDs the flags with another enum's, which clang
    // rejects in C++20 (-Wdeprecated-enum-enum-conversion).
    // Relaxed ordering lets PCIe reorder the NIC's writes where the device supports it (an
    // optional flag: ignored by devices without it); completions still order what we read.
    constexpr int kDataAccess =
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_RELAXED_ORDERING;
    ibv_pd* pd = pd_;
    cache_ = std::make_unique<MrCache>(
        mr_cache_bytes(), true,
        [pd](void* base, size_t length) -> void* {
          // Remote peers may write into it; we read it locally as the source of our writes.
          ibv_mr* mr = ibv_reg_mr(pd, base, length, kDataAccess);
          if (!mr) throw registration_error(length, errno);
          return mr;
        },
        [](void* mr) { ibv_dereg_mr(static_cast<ibv_mr*>(mr)); });
    // Drop cached registrations whose memory is unmapped, so a later buffer at the same
    // address never reuses a registration of pages that are gone. Without the events the
    // cache cannot be kept correct: register per call instead. UCX_MEM_EVENTS=no asks for no
    // memory hooks; otherwise a probe unmap checks that the hook really fires (as UCX's own
    // ucm_test_events does): a static link or another hooking library can defeat it.
    std::string no_events;
    const char* ucx_events = env("UCX_MEM_EVENTS");
    if (ucx_events && (std::string(ucx_events) == "no" || std::string(ucx_events) == "n" ||
                       std::string(ucx_events) == "0")) {
      no_events = "UCX_MEM_EVENTS=" + std::string(ucx_events);
    } else if (const ucs_status_t st = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, 1000,
                                                             &VerbsTransport::on_unmap, this);
               st != UCS_OK) {
      no_events = std::string("ucm_set_event_handler: ") + ucs_status_string(st);
    } else {
      hooked_ = true;
      if (!probe_unmap_event()) no_events = "a probe munmap raised no event";
    }
    if (!no_events.empty()) {
      cache_->disable();
      log::info("verbs: no memory events (" + no_events +
                "): registration cache off, every call registers its buffers");
    }
  }

  ~VerbsTransport() override {
    // ucm holds its handler lock while a handler runs: none runs once this returns.
    if (hooked_) ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, &VerbsTransport::on_unmap, this);
    cache_->clear();
    for (auto& p : peers_) {
      for (auto& lane : p.lanes) {
        if (lane.qp) ibv_destroy_qp(lane.qp);
      }
      if (p.eager.mr) ibv_dereg_mr(p.eager.mr);
      std::free(p.eager.block);
    }
    if (srq_) ibv_destroy_srq(srq_);
    if (cq_) {
      if (unacked_events_) ibv_ack_cq_events(cq_, unacked_events_);
      ibv_destroy_cq(cq_);
    }
    ctrl_mr_.reset();
    if (channel_) ibv_destroy_comp_channel(channel_);
    if (pd_) ibv_dealloc_pd(pd_);
    if (ctx_) ibv_close_device(ctx_);
    if (connect_timer_ >= 0) ::close(connect_timer_);
  }

  std::string name() const override { return "verbs"; }
  std::string describe() const override {
    return "verbs on " + choice_.device + ":" + std::to_string(choice_.port) + " gid_index " +
           std::to_string(choice_.gid_index) + " (" +
           (port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand") +
           ", active_mtu " + std::to_string(128 << port_attr_.active_mtu) + ")";
  }

  Bytes address(int my_rank, int world_size) override {
    me_ = my_rank;
    world_ = world_size;
    const uint64_t peers = static_cast<uint64_t>(std::max(world_size - 1, 0));
    // Ranks of a host spread their completion interrupts over the device's vectors.
    const int vector = my_rank % std::max(1, ctx_->num_comp_vectors);
    cq_size_ = verbs_plan::cq_entries(peers, static_cast<uint64_t>(lanes_));
    cq_ = ibv_create_cq(ctx_, static_cast<int>(cq_size_), nullptr, channel_, vector);
    if (!cq_) throw TransportError("verbs: ibv_create_cq failed: " + errno_text(errno));
    // Every QP takes its receives from one shared queue, as UCX's RC transports do.
    ibv_srq_init_attr srq_attr{};
    srq_attr.attr.max_wr = kSrqDepth;
    srq_attr.attr.max_sge = 1;
    srq_ = ibv_create_srq(pd_, &srq_attr);
    if (!srq_) throw TransportError("verbs: ibv_create_srq failed: " + errno_text(errno));
    // One registered pool for control buffers: the shared receives, then the shared sends.
    ctrl_pool_.assign(verbs_plan::plan(0, 1).pinned_control_bytes, 0);
    ctrl_mr_ = std::make_unique<MrEntry>();
    constexpr int kCtrlAccess = IBV_ACCESS_LOCAL_WRITE;
    ctrl_mr_->mr = ibv_reg_mr(pd_, ctrl_pool_.data(), ctrl_pool_.size(), kCtrlAccess);
    if (!ctrl_mr_->mr) throw registration_error(ctrl_pool_.size(), errno);
    for (int s = 0; s < kSendBuffers; ++s)
      free_send_.push_back(s);
    peers_.resize(world_size);
    Bytes wire(sizeof(WireInfo));
    WireInfo info{};
    std::memcpy(info.gid, gid_.raw, 16);
    info.lid = port_attr_.lid;
    info.mtu = static_cast<uint8_t>(port_attr_.active_mtu);
    info.link_layer = port_attr_.link_layer;
    info.lanes = static_cast<uint8_t>(lanes_);
    info.piece_bytes = static_cast<uint32_t>(piece_bytes_);
    std::memcpy(wire.data(), &info, sizeof info);
    return encode_peer_address(static_cast<uint32_t>(::getpid()), host_key(), wire);
  }

  void set_connection_store(std::shared_ptr<Store> store) override { store_ = std::move(store); }

  // Checks every rank's device against ours; QPs come later, on first use (see Link).
  void connect(int my_rank, const std::vector<Bytes>& addresses) override {
    if (!store_) throw TransportError("verbs: no store to connect peers through");
    std::vector<std::pair<std::string, pid_t>> hosts;
    for (int r = 0; r < world_; ++r) {
      PeerAddress a = decode_peer_address(addresses[r], r);
      hosts.emplace_back(a.host, static_cast<pid_t>(a.pid));
      if (r == my_rank) continue;
      WireInfo info{};
      if (a.payload.size() != sizeof info) {
        throw TransportError("verbs: rank " + std::to_string(r) +
                             " published no verbs address (is it using another transport?)");
      }
      std::memcpy(&info, a.payload.data(), sizeof info);
      if (info.lanes != lanes_) {
        throw TransportError("verbs: rank " + std::to_string(r) + " uses " +
                             std::to_string(info.lanes) + " QPs per peer and this rank " +
                             std::to_string(lanes_) +
                             "; set RDMACOLL_IB_QPS_PER_PEER the same on every rank");
      }
      if (info.piece_bytes < 4096) {
        throw TransportError("verbs: rank " + std::to_string(r) + " cuts writes into pieces of " +
                             std::to_string(info.piece_bytes) + " bytes (RDMACOLL_IB_CHUNK)");
      }
      const std::string clash = fabric::incompatibility(port_attr_.link_layer, info.link_layer,
                                                        "rank " + std::to_string(r));
      if (!clash.empty()) throw TransportError("verbs: " + clash);
      peers_[r].info = info;
    }
    for (int s = 0; s < kSrqDepth; ++s)
      post_recv(s);
    liveness_.reset(hosts);
    for (int r = 0; r < world_; ++r) {
      if (r == my_rank) continue;
      if (auto gone = liveness_.watch(r)) mark_failed(r, *gone);
    }
  }

  std::shared_ptr<MemoryRegion> register_memory(void* base, size_t length) override {
    return std::make_shared<VerbsMemoryRegion>(base, length, cache_->get(base, length));
  }

  void forget_registration(const MemoryRegion& region) override {
    cache_->evict(reinterpret_cast<uintptr_t>(region.base()), region.length());
  }

  std::unique_ptr<RemoteRegion> unpack_remote(int peer, uint64_t base, size_t length,
                                              std::span<const uint8_t> packed_key) override {
    uint32_t rkey = 0;
    if (packed_key.size() == 4) std::memcpy(&rkey, packed_key.data(), 4);
    return std::make_unique<VerbsRemoteRegion>(peer, base, length, rkey);
  }

  RequestPtr send(int peer, uint64_t tag, const void* data, size_t length) override {
    auto req = std::make_shared<VerbsRequest>(peer);
    count_control_message();
    if (length + 8 > kCtrlBytes) {
      req->fail("control message of " + std::to_string(length) + " bytes exceeds " +
                std::to_string(kCtrlBytes - 8));
      return req;
    }
    Bytes msg(8 + length);
    std::memcpy(msg.data(), &tag, 8);
    if (length) std::memcpy(msg.data() + 8, data, length);
    const uint64_t id = track(req);
    // inflight_ holds the request until its completion, and a failed peer's backlog is dropped,
    // so the raw pointer outlives every call of the builder (no lookup per message).
    VerbsRequest* const r = req.get();
    // Into the peer's eager slots while it has one free, else a SEND (decided when the work
    // request is built: the peer's slots are known once the pair has connected).
    submit(peer, 0, [this, peer, id, r, msg = std::move(msg)](Staged& st) mutable {
      Peer& p = peers_[peer];
      const bool eager = eager_slot_free(p);
      Bytes framed;
      if (eager) {
        uint64_t tag = 0;
        std::memcpy(&tag, msg.data(), 8);
        framed.resize(eager_ring::framed_bytes(msg.size() - 8));
        // It carries our credit to the peer: no separate credit write while we both send.
        eager_ring::pack(framed.data(), p.eager.sent + 1, tag, msg.data() + 8, msg.size() - 8,
                         hold_credits_ ? 0 : static_cast<uint32_t>(p.eager.taken));
      }
      Bytes& bytes = eager ? framed : msg;
      if (bytes.size() <= inline_max_) {
        // Inline: the post copies the bytes into the work request; no send buffer.
        st.sge.length = static_cast<uint32_t>(bytes.size());
        st.inline_bytes = std::move(bytes);  // built once: a backlog never retries this branch
        st.wr.send_flags = IBV_SEND_INLINE;
        ++counters_.inline_sends;
      } else {
        if (free_send_.empty()) return false;
        const int slot = free_send_.front();
        free_send_.pop_front();
        r->send_slot = slot;
        uint8_t* buf = send_buffer(slot);
        std::memcpy(buf, bytes.data(), bytes.size());
        st.sge = {reinterpret_cast<uint64_t>(buf), static_cast<uint32_t>(bytes.size()),
                  ctrl_mr_->mr->lkey};
      }
      st.wr.wr_id = make_wr_id(kSendWr, peer, 0);
      st.request = id;
      if (eager) {
        // A plain write: the receiver polls its ring (and is rung if it sleeps, eager_ring.hpp).
        r->eager = true;
        st.wr.opcode = IBV_WR_RDMA_WRITE;
        st.wr.wr.rdma.remote_addr =
            p.eager.their_ring +
            (p.eager.sent % static_cast<uint64_t>(p.eager.their_slots)) * eager_ring::kSlotBytes;
        st.wr.wr.rdma.rkey = p.eager.their_rkey;
        ++p.eager.sent;
        p.eager.credited = p.eager.taken;
        ++counters_.eager_writes;
      } else {
        st.wr.opcode = IBV_WR_SEND;
        if (p.eager.their_slots > 0) ++counters_.eager_fallbacks;
      }
      return true;
    });
    return req;
  }

  size_t max_message_bytes() const override { return kCtrlBytes - 8; }

  RequestPtr recv(int peer, uint64_t tag, void* buffer, size_t capacity) override {
    auto req = std::make_shared<VerbsRequest>(peer);
    req->recv_buffer = buffer;
    req->recv_capacity = capacity;
    touch(peer);
    const auto key = std::make_pair(peer, tag);
    auto it = unexpected_.find(key);
    if (it != unexpected_.end()) {
      deliver(*req, it->second.front());
      it->second.pop_front();
      if (it->second.empty()) unexpected_.erase(it);
    } else {
      pending_recvs_[key].push_back(req);
    }
    return req;
  }

  RequestPtr write(const MemoryRegion& src, size_t src_offset, const RemoteRegion& dst,
                   size_t dst_offset, size_t length, uint64_t signal) override {
    const int peer = dst.peer();
    auto req = std::make_shared<VerbsRequest>(peer);
    count_write(peer, length);
    const auto& local = static_cast<const VerbsMemoryRegion&>(src);
    const auto& remote = static_cast<const VerbsRemoteRegion&>(dst);
    const uint64_t id = track(req);
    const uint32_t imm = verbs_imm::immediate(signal);
    // Pieces of at most RDMACOLL_IB_CHUNK, dealt to the lanes in turn; on each lane only the
    // last piece carries the immediate (RC keeps a lane's pieces in order), so the receiver
    // counts one arrival per lane used.
    const size_t pieces = std::max<size_t>(1, (length + piece_bytes_ - 1) / piece_bytes_);
    const int used = lanes_used(length, piece_bytes_, lanes_);
    if (used > 1) ++counters_.striped_writes;
    for (size_t i = 0; i < pieces; ++i) {
      const size_t off = i * piece_bytes_;
      const size_t n = std::min(piece_bytes_, length - off);
      const bool last = i + static_cast<size_t>(used) >= pieces;
      const int lane = static_cast<int>(i % static_cast<size_t>(used));
      ++req->pieces;
      const uint64_t from = reinterpret_cast<uint64_t>(src.base()) + src_offset + off;
      const uint64_t to = remote.base() + dst_offset + off;
      const uint32_t lkey = local.lkey();
      const uint32_t rkey = remote.rkey;
      submit(peer, lane, [=](Staged& st) {
        st.sge = {from, static_cast<uint32_t>(n), lkey};
        st.wr.wr_id = make_wr_id(kWriteWr, peer, 0, static_cast<uint32_t>(lane));
        st.request = id;
        st.wr.opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
        st.wr.imm_data = htonl(imm);
        st.wr.wr.rdma.remote_addr = to;
        st.wr.wr.rdma.rkey = rkey;
        return true;
      });
    }
    return req;
  }

  uint64_t reserve_token() override {
    const uint32_t t = tokens_.reserve();
    if (t == UINT32_MAX) {
      throw TransportError("verbs: " + std::to_string(verbs_imm::kTokens) +
                           " calls expect writes at once; no token is left for another");
    }
    return t;
  }

  void release_token(uint64_t token, bool failed) override {
    const auto t = static_cast<uint32_t>(token);
    tokens_.release(t, failed);
    // Early arrivals kept for the token's expects (a failed call never posted them) go with it.
    std::erase_if(arrived_,
                  [t](const auto& kv) { return verbs_imm::token_of(kv.first.second) == t; });
  }

  RequestPtr expect(int peer, MemoryRegion&, size_t, size_t length, uint64_t signal) override {
    auto req = std::make_shared<VerbsRequest>(peer);
    const auto key = std::make_pair(peer, verbs_imm::immediate(signal));
    if (expects_.count(key)) {
      throw TransportError("verbs: a second expect of immediate " + std::to_string(key.second) +
                           " from rank " + std::to_string(peer) + " while the first is live");
    }
    int remaining = 1;
    if (peer >= 0 && peer < world_ && peer != me_) {
      remaining = lanes_used(length, peers_[peer].info.piece_bytes, lanes_);
      touch(peer);
    }
    if (auto it = arrived_.find(key); it != arrived_.end()) {
      remaining -= it->second;
      arrived_.erase(it);
    }
    if (remaining <= 0) {
      req->complete();
    } else {
      expects_[key] = {req, remaining};
    }
    return req;
  }

  void cancel(const RequestPtr& request) override {
    if (request->state() != Request::State::Pending) return;
    std::erase_if(expects_, [&](const auto& kv) { return kv.second.request == request; });
    for (auto it = pending_recvs_.begin(); it != pending_recvs_.end();) {
      std::erase(it->second, request);
      it = it->second.empty() ? pending_recvs_.erase(it) : std::next(it);
    }
    // Posted writes cannot be recalled; the group is broken after a cancel anyway.
    request->fail("cancelled");
  }

  bool progress() override {
    bool any = flush_all();
    cache_->collect();  // deregisters what unmapped memory invalidated (not in the hook)
    const auto now = Clock::now();
    if (async_due_ || now >= next_async_check_) {
      async_due_ = false;
      next_async_check_ = now + kAsyncEventInterval;
      any = drain_async() || any;
    }
    ibv_wc wc[32];
    for (;;) {
      const int n = ibv_poll_cq(cq_, 32, wc);
      if (n <= 0) break;
      counters_.completions += static_cast<uint64_t>(n);
      any = true;
      for (int i = 0; i < n; ++i)
        handle(wc[i]);
    }
    for (int peer : eager_peers_)
      any = poll_eager(peer) || any;
    slept_to_timeout_ = false;
    any = advance_connections(now) || any;
    if (now >= next_keepalive_) {
      next_keepalive_ = now + kKeepaliveInterval;
      keepalive();
    }
    drain_backlogs();  // completions, connections and send buffers may have made room
    return flush_all() || any;
  }

  bool prepare_wait() override {
    if (flush_all()) return false;  // nothing staged may wait for the next wake-up
    if (!connecting_.empty()) {
      // The store has no way to wake us: a timer does, when the next look at it is due.
      const auto now = Clock::now();
      if (now >= next_connect_poll_) return false;
      itimerspec t{};
      const auto ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(next_connect_poll_ - now);
      t.it_value.tv_sec = static_cast<time_t>(ns.count() / 1'000'000'000);
      t.it_value.tv_nsec = static_cast<long>(std::max<int64_t>(ns.count() % 1'000'000'000, 1000));
      ::timerfd_settime(connect_timer_, 0, &t, nullptr);
    }
    if (!eager_peers_.empty() && !sleep_announced_) {
      // Eager writes complete nothing here: tell the ring peers first (eager_ring.hpp). The
      // writes' completions wake us, and progress() looks at the rings after them.
      announce_sleep();
      return false;
    }
    if (armed_) {
      sleep_began_ = Clock::now();
      return true;
    }
    ibv_req_notify_cq(cq_, 0);
    armed_ = true;
    return false;  // the caller progresses once more before sleeping: no lost wakeup
  }

  void wait_fds(std::vector<pollfd>& fds) override {
    fds.push_back({channel_->fd, POLLIN, 0});
    fds.push_back({ctx_->async_fd, POLLIN, 0});
    fds.push_back({connect_timer_, POLLIN, 0});
    for (int fd : liveness_.fds())
      fds.push_back({fd, POLLIN, 0});
  }

  void after_wait() override {
    async_due_ = true;  // the async-event fd may be what woke us
    uint64_t expirations = 0;
    if (::read(connect_timer_, &expirations, sizeof expirations) < 0) expirations = 0;
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    const bool completion = ibv_get_cq_event(channel_, &ev_cq, &ev_ctx) == 0;
    if (completion) {  // the channel fd is non-blocking
      if (++unacked_events_ >= 64) {
        ibv_ack_cq_events(cq_, unacked_events_);
        unacked_events_ = 0;
      }
      armed_ = false;
    }
    // poll() gives up after 100 ms: a sleep that long which no completion or timer ended.
    slept_to_timeout_ = !completion && expirations == 0 &&
                        Clock::now() - sleep_began_ >= std::chrono::milliseconds(90);
  }

  uint64_t registrations() const override { return cache_->stats().registrations; }
  Counters counters() const override { return counters_; }
  // The plan for the peers connected so far; the CQ was sized in address() for every peer,
  // which the cap on sends in flight bounds (verbs_plan::cq_entries).
  Footprint footprint() const override {
    Footprint f = verbs_plan::plan(connected_, static_cast<uint64_t>(lanes_), eager_slots_);
    f.cq_entries = cq_size_;
    f.sends_in_flight = static_cast<uint64_t>(sends_in_flight_);
    f.send_buffers_in_use = kSendBuffers - free_send_.size();
    return f;
  }

  std::optional<std::string> peer_failure(int peer) override {
    if (peer < 0 || peer >= world_) return std::nullopt;
    Peer& p = peers_[peer];
    if (!p.failure) p.failure = liveness_.failure(peer);
    return p.failure;
  }

 private:
  // A work request built and waiting for its batch's doorbell (flush).
  struct Staged {
    ibv_send_wr wr{};
    ibv_sge sge{};
    Bytes inline_bytes;    // an inline send's bytes, copied into the work request by the post
    uint64_t request = 0;  // inflight_'s key (a write's pieces share it)
  };
  struct Posted {
    uint64_t request;
    uint32_t number;  // the work request's own number on its lane (its wr_id's low half)
    bool signaled;
  };
  // One QP to a peer and its send queue's bookkeeping.
  struct Lane {
    ibv_qp* qp = nullptr;
    std::deque<Posted> posted;   // on the send queue, in post order
    std::vector<Staged> staged;  // built since the last flush
    int since_signal = 0;
    uint32_t next_number = 0;  // for the next posted work request
    // Work waiting for send-queue room or a send buffer: fills a Staged, false when it cannot.
    std::deque<std::function<bool(Staged&)>> backlog;
    size_t in_queue() const { return posted.size() + staged.size(); }
  };
  // A pair's QPs are made when either side first uses the other (a send, a write, a receive
  // or an expected write: every transfer has two ends in the same call, so the other side
  // comes too). Each side publishes its QP numbers in the store (key qp/<from>/<to>), brings
  // its QPs to RTS with the peer's, and publishes up/<from>/<to>; work for the peer waits in
  // the lanes' backlogs until the peer's "up" is seen, since a QP not yet at RTR drops what
  // arrives without a NAK and the sender retries only after the QP timeout (seconds), as
  // perftest and NCCL's net_ib note. Nothing blocks: progress() looks at the store.
  enum class Link : uint8_t { Down, Offered, Up, Ready };
  struct Peer {
    std::vector<Lane> lanes;  // lane 0 carries control messages; made on first use
    Link link = Link::Down;
    WireInfo info{};  // from the address published at init (its piece size: how it cuts writes)
    std::optional<std::string> failure;
    // Eager slots (eager_ring.hpp): our ring, which the peer writes, and where we write in its
    // ring. Both sides use them only when both published a ring.
    struct Eager {
      uint8_t* block = nullptr;  // our ring, then the credit and epoch lines
      ibv_mr* mr = nullptr;
      int slots = 0;
      uint64_t taken = 0;     // messages taken from our ring
      uint64_t credited = 0;  // `taken` as last written back to the peer
      uint64_t rung = 0;      // the peer's sleep epoch we last rang it for
      uint64_t credit = 0;    // the highest credit the peer's messages carried
      uint64_t their_ring = 0;
      uint32_t their_rkey = 0;
      int their_slots = 0;
      uint64_t sent = 0;  // messages written into the peer's ring
    } eager;
    bool idle() const {
      return std::all_of(lanes.begin(), lanes.end(),
                         [](const Lane& l) { return l.in_queue() == 0 && l.backlog.empty(); });
    }
  };
  // An expected write's request and the lanes' immediates still to come.
  struct Expected {
    RequestPtr request;
    int remaining = 1;
  };

  bool placement_logged_ = false;

  // One RC QP on our CQ; its number.
  uint32_t create_qp(Lane& lane) {
    ibv_qp_init_attr a{};
    a.send_cq = cq_;
    a.recv_cq = cq_;
    a.qp_type = IBV_QPT_RC;
    a.srq = srq_;
    a.cap.max_send_wr = kSendDepth;
    a.cap.max_send_sge = 1;
    a.cap.max_inline_data = inline_max_ == 0 ? 0 : kWantInline;
    lane.qp = ibv_create_qp(pd_, &a);
    if (!lane.qp && a.cap.max_inline_data > 0) {  // the device offers no inline data
      a.cap.max_inline_data = 0;
      lane.qp = ibv_create_qp(pd_, &a);
    }
    if (!lane.qp) throw TransportError("verbs: ibv_create_qp failed: " + errno_text(errno));
    inline_max_ = std::min(inline_max_, a.cap.max_inline_data);
    if (!placement_logged_) {
      // Eager slots check a checksum, so they do not depend on the answer; it is logged for
      // whoever compares fabrics (adaptive routing, packet spraying).
      placement_logged_ = true;
      const int in_order = ibv_query_qp_data_in_order(lane.qp, IBV_WR_RDMA_WRITE, 0);
      log::info(std::string("verbs: RDMA WRITE data ") +
                (in_order == 1 ? "lands in order" : "may land out of order") +
                " on this device (ibv_query_qp_data_in_order); eager slots verify each "
                "message's checksum either way");
    }
    return lane.qp->qp_num;
  }

  // Test-only hook: RDMACOLL_TEST_QP_DELAY_MS holds this rank's first QP transitions back when
  // RDMACOLL_TEST_QP_DELAY_RANK names it (the handshake test's late peer).
  static void delay_for_test(int my_rank) {
    static std::once_flag once;
    bool first = false;
    std::call_once(once, [&] { first = true; });
    if (!first) return;
    const uint64_t ms = settings::count("RDMACOLL_TEST_QP_DELAY_MS", 0);
    const uint64_t rank = settings::count("RDMACOLL_TEST_QP_DELAY_RANK", UINT64_MAX);
    if (!ms || rank != static_cast<uint64_t>(my_rank)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }

  static TransportError registration_error(size_t length, int err) {
    std::string msg =
        "verbs: ibv_reg_mr of " + std::to_string(length) + " bytes failed: " + errno_text(err);
    if (err == ENOMEM || err == EPERM) {
      msg +=
          "; the locked-memory limit is probably too low: raise it (ulimit -l unlimited, or "
          "memlock in /etc/security/limits.d)";
    }
    return TransportError(msg);
  }

  // What the fabric asks of our QPs: traffic class and SL (lossless RoCE classes ride on
  // them), the P_Key index, GRH, timeouts. Logged at info with the GID, for `ibv_devinfo` and
  // `show_gids` to be checked against.
  struct FabricSettings {
    int traffic_class = 0;
    int service_level = 0;
    int pkey_index = 0;
    int timeout = kQpTimeout;
    int retry_count = kRetryCount;
    bool grh_required = false;
  };

  void read_fabric_settings() {
    FabricSettings f;
    const int sysfs_tc = sysfs_traffic_class(choice_.device, choice_.port);
    f.traffic_class = env_int("RDMACOLL_IB_TC", std::max(sysfs_tc, 0));
    f.service_level = env_int("RDMACOLL_IB_SL", 0);
    f.timeout = env_int("RDMACOLL_IB_TIMEOUT", kQpTimeout);
    f.retry_count = env_int("RDMACOLL_IB_RETRY_CNT", kRetryCount);
    f.grh_required = (port_attr_.flags & IBV_QPF_GRH_REQUIRED) != 0;
    if (const uint16_t want = env_pkey()) {
      std::vector<uint16_t> table;
      for (int i = 0; i < port_attr_.pkey_tbl_len; ++i) {
        __be16 pkey = 0;
        if (ibv_query_pkey(ctx_, choice_.port, i, &pkey) != 0) break;
        table.push_back(ntohs(pkey));
      }
      f.pkey_index = fabric::select_pkey_index(table, want);
      if (f.pkey_index < 0) {
        throw TransportError("verbs: P_Key " + std::string(env("RDMACOLL_IB_PKEY")) +
                             " (RDMACOLL_IB_PKEY) is not in " + choice_.device + ":" +
                             std::to_string(choice_.port) + "'s P_Key table of " +
                             std::to_string(table.size()) + " entries");
      }
    }
    fabric_ = f;
    std::array<uint8_t, 16> g{};
    std::memcpy(g.data(), gid_.raw, 16);
    ibv_gid_entry entry{};
    const bool typed = ibv_query_gid_ex(ctx_, choice_.port, choice_.gid_index, &entry, 0) == 0;
    const char* type = !typed                                   ? "?"
                       : entry.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2"
                       : entry.gid_type == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1"
                                                                : "IB";
    log::info("verbs: " + choice_.device + ":" + std::to_string(choice_.port) + " GID index " +
              std::to_string(choice_.gid_index) + " " + fabric::gid_text(g) + " (" + type +
              "), traffic class " + std::to_string(f.traffic_class) +
              (env("RDMACOLL_IB_TC") ? " (RDMACOLL_IB_TC)"
               : sysfs_tc >= 0       ? " (sysfs)"
                                     : "") +
              ", SL " + std::to_string(f.service_level) + ", P_Key index " +
              std::to_string(f.pkey_index) + ", MTU " +
              std::to_string(128 << port_attr_.active_mtu) + ", timeout " +
              std::to_string(f.timeout) + ", retry " + std::to_string(f.retry_count) +
              ", writes in pieces of " + std::to_string(piece_bytes_) + " B over " +
              std::to_string(lanes_) + (lanes_ == 1 ? " QP" : " QPs") + " per peer" +
              (f.grh_required ? ", GRH required" : ""));
  }

  // Maps and unmaps a page; true when the hook saw it.
  bool probe_unmap_event() {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    void* p = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    const uint64_t before = cache_->stats().unmaps_seen;
    ::munmap(p, page);
    return cache_->stats().unmaps_seen > before;
  }

  // Inside munmap, or glibc's free/trim with the arena lock held: only records the range.
  static void on_unmap(ucm_event_type_t, ucm_event_t* event, void* self) {
    static_cast<VerbsTransport*>(self)->cache_->invalidate(
        reinterpret_cast<uintptr_t>(event->vm_unmapped.address), event->vm_unmapped.size);
  }

  uint8_t* recv_buffer(int slot) {
    return ctrl_pool_.data() + static_cast<size_t>(slot) * kCtrlBytes;
  }
  // The shared send buffers follow the shared receives.
  uint8_t* send_buffer(int slot) { return recv_buffer(kSrqDepth + slot); }

  std::string store_key(const char* what, int from, int to) const {
    return std::string("rdmacoll/verbs/") + what + "/" + std::to_string(from) + "/" +
           std::to_string(to);
  }

  // The first use of `peer`: our QPs to it, their numbers published (see Link).
  void touch(int peer) {
    Peer& p = peers_[peer];
    if (p.link != Link::Down || p.failure) return;
    try {
      p.lanes.resize(static_cast<size_t>(lanes_));
      Bytes qpns(4 * static_cast<size_t>(lanes_) + kEagerWire);
      for (int l = 0; l < lanes_; ++l) {
        const uint32_t qpn = create_qp(p.lanes[l]);
        lane_of_qpn_[qpn] = {peer, l};
        std::memcpy(qpns.data() + 4 * l, &qpn, 4);
      }
      make_eager_ring(peer);
      const uint64_t ring = reinterpret_cast<uint64_t>(p.eager.block);
      const uint32_t rkey = p.eager.mr ? p.eager.mr->rkey : 0;
      const uint32_t slots = static_cast<uint32_t>(p.eager.slots);
      uint8_t* e = qpns.data() + 4 * lanes_;
      std::memcpy(e, &ring, 8);
      std::memcpy(e + 8, &rkey, 4);
      std::memcpy(e + 12, &slots, 4);
      p.link = Link::Offered;
      ++connected_;
      connecting_.push_back(peer);
      next_connect_poll_ = Clock::now();
      connect_poll_ = kConnectPollFirst;
      store_->set(store_key("qp", me_, peer), qpns);
    } catch (const std::exception& e) {
      mark_failed(peer, "connecting to rank " + std::to_string(peer) + ": " + e.what());
    }
  }

  // Moves every connection in progress on as far as the store allows; true if any moved.
  bool advance_connections(Clock::time_point now) {
    if (connecting_.empty() || now < next_connect_poll_) return false;
    bool any = false;
    std::erase_if(connecting_, [&](int peer) {
      const Link before = peers_[peer].link;
      const bool finished = advance(peer);
      any = any || finished || peers_[peer].link != before;
      return finished;
    });
    connect_poll_ = any ? kConnectPollFirst : std::min(connect_poll_ * 2, kConnectPollMax);
    next_connect_poll_ = Clock::now() + connect_poll_;
    return any;
  }

  // One look at the store for `peer`'s half of the connection; true once it is ready or failed.
  bool advance(int peer) {
    Peer& p = peers_[peer];
    if (p.failure) return true;
    try {
      if (p.link == Link::Offered) {
        const std::string theirs = store_key("qp", peer, me_);
        if (!store_->check(theirs)) return false;
        const Bytes qpns = store_->get(theirs, std::chrono::seconds(10));
        const size_t want = 4 * static_cast<size_t>(lanes_) + kEagerWire;
        uint32_t their_slots = 0;
        if (qpns.size() == want) std::memcpy(&their_slots, qpns.data() + want - 4, 4);
        if (qpns.size() != want || their_slots > eager_ring::kMaxSlots) {
          mark_failed(peer, "rank " + std::to_string(peer) + " published " +
                                std::to_string(qpns.size()) + " bytes of QP numbers and " +
                                std::to_string(their_slots) + " eager slots, not " +
                                std::to_string(want) + " bytes and at most " +
                                std::to_string(eager_ring::kMaxSlots));
          return true;
        }
        if (p.eager.slots > 0 && their_slots > 0) {
          std::memcpy(&p.eager.their_ring, qpns.data() + 4 * lanes_, 8);
          std::memcpy(&p.eager.their_rkey, qpns.data() + 4 * lanes_ + 8, 4);
          p.eager.their_slots = static_cast<int>(their_slots);
          // The peer writes into our ring only after it has seen our "up", published below; it
          // has no sleep epoch of ours yet, so the next sleep announces one to all.
          eager_peers_.push_back(peer);
          sleep_announced_ = false;
        }
        delay_for_test(me_);
        for (int l = 0; l < lanes_; ++l) {
          uint32_t qpn = 0;
          std::memcpy(&qpn, qpns.data() + 4 * l, 4);
          bring_up(peer, l, p.info, qpn);
        }
        p.link = Link::Up;
        store_->set(store_key("up", me_, peer), Bytes{1});
      }
      if (!store_->check(store_key("up", peer, me_))) return false;
      p.link = Link::Ready;
      log::trace("verbs: connected to rank " + std::to_string(peer));
      return true;
    } catch (const std::exception& e) {
      mark_failed(peer, "connecting to rank " + std::to_string(peer) + " through the " +
                            store_->describe() + ": " + e.what());
      return true;
    }
  }

  void bring_up(int r, int lane, const WireInfo& info, uint32_t their_qpn) {
    ibv_qp* qp = peers_[r].lanes[lane].qp;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = static_cast<uint16_t>(fabric_.pkey_index);
    a.port_num = static_cast<uint8_t>(choice_.port);
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    check_modify(qp, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, r,
                 "INIT");
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = static_cast<ibv_mtu>(std::min<int>(info.mtu, port_attr_.active_mtu));
    a.dest_qp_num = their_qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = static_cast<uint8_t>(choice_.port);
    a.ah_attr.dlid = info.lid;
    a.ah_attr.sl = static_cast<uint8_t>(fabric_.service_level);
    std::array<uint8_t, 16> mine{}, theirs{};
    std::memcpy(mine.data(), gid_.raw, 16);
    std::memcpy(theirs.data(), info.gid, 16);
    if (fabric::needs_grh(port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET, fabric_.grh_required,
                          info.lid, mine, theirs)) {
      a.ah_attr.is_global = 1;
      std::memcpy(a.ah_attr.grh.dgid.raw, info.gid, 16);
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(choice_.gid_index);
      a.ah_attr.grh.hop_limit = 64;
      a.ah_attr.grh.traffic_class = static_cast<uint8_t>(fabric_.traffic_class);
    }
    check_modify(qp, a,
                 IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                 r, "RTR");
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = static_cast<uint8_t>(fabric_.timeout);
    a.retry_cnt = static_cast<uint8_t>(fabric_.retry_count);
    a.rnr_retry = 7;  // infinite: a receiver between reposts is not an error
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    check_modify(qp, a,
                 IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
                 r, "RTS");
  }

  void check_modify(ibv_qp* qp, ibv_qp_attr& a, int mask, int r, const char* state) {
    if (const int e = ibv_modify_qp(qp, &a, mask)) {
      throw TransportError("verbs: QP to rank " + std::to_string(r) + " on " + choice_.device +
                           " cannot reach " + state + ": " + errno_text(e));
    }
  }

  // A shared receive: a control message from any peer, or any lane's write immediate. The
  // completion names the QP (wc.qp_num), hence the peer and lane.
  void post_recv(int slot) {
    ibv_sge sge{reinterpret_cast<uint64_t>(recv_buffer(slot)), kCtrlBytes, ctrl_mr_->mr->lkey};
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = make_wr_id(kRecvWr, 0, static_cast<uint32_t>(slot));
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (const int e = ibv_post_srq_recv(srq_, &wr, &bad)) {
      for (int r = 0; r < world_; ++r) {
        if (r != me_) mark_failed(r, "ibv_post_srq_recv failed: " + errno_text(e));
      }
    }
  }

  uint64_t track(const std::shared_ptr<VerbsRequest>& req) {
    const uint64_t id = next_id_++;
    inflight_[id] = req;
    return id;
  }

  // Stages `build` now if the peer is connected and its send queue has room, else when the
  // connection comes up or completions make room; the next flush posts it.
  void submit(int peer, int lane, std::function<bool(Staged&)> build) {
    Peer& p = peers_[peer];
    touch(peer);
    if (p.failure) {
      fail_all_of(peer);
      return;
    }
    Lane& l = p.lanes[lane];
    if (p.link == Link::Ready && l.backlog.empty() && stage(peer, lane, build)) return;
    if (l.backlog.empty()) backlogged_.emplace_back(peer, lane);
    l.backlog.push_back(std::move(build));
  }

  // Room: the lane's send queue and the cap on sends in flight over all QPs (the CQ's size).
  bool stage(int peer, int lane, std::function<bool(Staged&)>& build) {
    Lane& l = peers_[peer].lanes[lane];
    if (l.in_queue() >= static_cast<size_t>(kSendDepth) || sends_in_flight_ >= kSendsInFlight)
      return false;
    Staged st;
    if (!build(st)) return false;
    if (l.staged.empty()) staged_lanes_.emplace_back(peer, lane);
    l.staged.push_back(std::move(st));
    ++sends_in_flight_;
    return true;
  }

  // Posts what is staged for `peer` as one chain: one doorbell; the last work request, and
  // every kSignalEvery-th, asks for a completion.
  bool flush(int peer, int lane) {
    Lane& p = peers_[peer].lanes[lane];
    const size_t n = p.staged.size();
    if (n == 0) return false;
    for (size_t i = 0; i < n; ++i) {
      Staged& st = p.staged[i];
      if (!st.inline_bytes.empty())
        st.sge.addr = reinterpret_cast<uint64_t>(st.inline_bytes.data());
      st.wr.sg_list = st.sge.length ? &st.sge : nullptr;  // a zero-byte write has no sge
      st.wr.num_sge = st.sge.length ? 1 : 0;
      st.wr.next = i + 1 < n ? &p.staged[i + 1].wr : nullptr;
      const bool signal = i + 1 == n || ++p.since_signal >= kSignalEvery;
      if (signal) {
        st.wr.send_flags |= IBV_SEND_SIGNALED;
        p.since_signal = 0;
        ++counters_.signaled;
      }
      const uint32_t number = p.next_number++;
      st.wr.wr_id = (st.wr.wr_id & ~uint64_t{0xffffffff}) | number;
      p.posted.push_back({st.request, number, signal});
    }
    ++counters_.doorbells;
    counters_.work_requests += n;
    ibv_send_wr* bad = nullptr;
    const int e = ibv_post_send(p.qp, &p.staged[0].wr, &bad);
    if (e) {
      // Work requests from `bad` on were not posted: they leave `posted` and go back with
      // their send buffers and caps below (mark_failed retires what is left).
      size_t unposted = n;
      for (size_t i = 0; i < n; ++i) {
        if (&p.staged[i].wr == bad) unposted = n - i;
      }
      std::vector<uint64_t> requests;
      for (size_t i = 0; i < unposted && !p.posted.empty(); ++i) {
        requests.push_back(p.posted.back().request);
        p.posted.pop_back();
        --sends_in_flight_;
      }
      p.staged.clear();
      mark_failed(peer, "ibv_post_send to rank " + std::to_string(peer) + " on " + choice_.device +
                            " failed: " + errno_text(e));
      for (uint64_t r : requests)
        complete_one(peer, r, false);
      return true;
    }
    p.staged.clear();
    return true;
  }

  // A zero-byte write to every peer we wait on and have nothing posted to (see
  // kKeepaliveInterval); its completion is a request nobody waits for.
  void keepalive() {
    std::vector<bool> waited(world_, false);
    for (const auto& [key, req] : pending_recvs_)
      waited[key.first] = true;
    for (const auto& [key, req] : expects_)
      waited[key.first] = true;
    for (int r = 0; r < world_; ++r) {
      Peer& p = peers_[r];
      if (!waited[r] || r == me_ || p.failure || p.link != Link::Ready || !p.idle()) continue;
      ++counters_.keepalives;
      log::trace("verbs: keepalive write to rank " + std::to_string(r));
      post_unawaited_write(r, [](Staged& st) {
        st.wr.opcode = IBV_WR_RDMA_WRITE;  // zero bytes: no address or key is checked
      });
    }
  }

  // Only the lanes that have staged work: progress() runs this twice per call, and a scan of
  // every peer would cost O(p) on the hot path.
  bool flush_all() {
    if (staged_lanes_.empty()) return false;
    std::vector<std::pair<int, int>> lanes;
    lanes.swap(staged_lanes_);
    for (const auto& [peer, lane] : lanes)
      flush(peer, lane);
    return true;
  }

  // Stages what the backlogs of connected peers can now; forgets the lanes left empty.
  void drain_backlogs() {
    if (backlogged_.empty()) return;
    std::erase_if(backlogged_, [&](const std::pair<int, int>& pl) {
      const auto [peer, lane] = pl;
      Peer& p = peers_[peer];
      Lane& l = p.lanes[lane];
      if (p.link == Link::Ready && !p.failure) {
        while (!l.backlog.empty() && stage(peer, lane, l.backlog.front()))
          l.backlog.pop_front();
      }
      return l.backlog.empty();
    });
  }

  void deliver(VerbsRequest& req, std::span<const uint8_t> payload) {
    if (payload.size() > req.recv_capacity) {
      req.fail("control message of " + std::to_string(payload.size()) + " bytes from rank " +
               std::to_string(req.peer()) + " exceeds the receive buffer of " +
               std::to_string(req.recv_capacity));
      return;
    }
    if (!payload.empty()) std::memcpy(req.recv_buffer, payload.data(), payload.size());
    req.complete(payload.size());
  }

  void handle(const ibv_wc& wc) {
    const auto kind = static_cast<WrKind>(wc.wr_id >> 62);
    int lane = static_cast<int>((wc.wr_id >> 56) & 0x3f);
    int peer = static_cast<int>((wc.wr_id >> 32) & 0xffffff);
    const uint32_t id = static_cast<uint32_t>(wc.wr_id);  // receive slot, or the lane's number
    if (kind == kRecvWr) {
      // A shared receive: the QP it arrived on says from whom. Its slot goes back to the
      // shared queue whatever happened to the message.
      struct Repost {
        VerbsTransport* self;
        int slot;
        ~Repost() { self->post_recv(slot); }
      } repost{this, static_cast<int>(id)};
      const auto from = lane_of_qpn_.find(wc.qp_num);
      if (from == lane_of_qpn_.end()) return;
      peer = from->second.first;
      lane = from->second.second;
      if (wc.status != IBV_WC_SUCCESS) {
        mark_failed(peer, std::string("receive completion error '") + ibv_wc_status_str(wc.status) +
                              "' (status " + std::to_string(wc.status) + ") on " + choice_.device +
                              " QP from rank " + std::to_string(peer));
        return;
      }
      handle_receive(wc, peer, lane, id);
      return;
    }
    if (wc.status != IBV_WC_SUCCESS) {
      mark_failed(peer, std::string("work completion error '") + ibv_wc_status_str(wc.status) +
                            "' (status " + std::to_string(wc.status) + ") on " + choice_.device +
                            " QP to rank " + std::to_string(peer));
      complete_through(peer, lane, id, false);
      return;
    }
    complete_through(peer, lane, id, true);
  }

  void handle_receive(const ibv_wc& wc, int peer, int lane, uint32_t slot) {
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (ntohl(wc.imm_data) & eager_ring::kImm)) {
      // A ring: a peer found our sleep epoch. It will not ring again for that epoch, so the
      // next sleep announces a new one.
      sleep_announced_ = false;
    } else if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      const auto key = std::make_pair(peer, ntohl(wc.imm_data));
      auto it = expects_.find(key);
      if (it == expects_.end()) {
        // A write for a call that is over (it failed; its token is fenced or given out again
        // after a full turn) completes nothing; one for a live call that has not posted its
        // expect yet waits for it.
        if (tokens_.live(verbs_imm::token_of(key.second))) ++arrived_[key];
      } else if (--it->second.remaining == 0) {
        it->second.request->complete();
        expects_.erase(it);
      }
    } else if (lane != 0) {  // control messages travel on lane 0 only
      mark_failed(peer, "rank " + std::to_string(peer) + " sent a control message on data lane " +
                            std::to_string(lane));
    } else {
      const uint8_t* buf = recv_buffer(static_cast<int>(slot));
      uint64_t tag = 0;
      std::memcpy(&tag, buf, 8);
      dispatch_control(peer, tag,
                       std::span<const uint8_t>(buf + 8, std::max<uint32_t>(wc.byte_len, 8) - 8));
    }
  }

  // A control message from `peer`: to its receive if posted (one copy, into place), else kept.
  void dispatch_control(int peer, uint64_t tag, std::span<const uint8_t> payload) {
    const auto key = std::make_pair(peer, tag);
    auto it = pending_recvs_.find(key);
    if (it != pending_recvs_.end()) {
      deliver(static_cast<VerbsRequest&>(*it->second.front()), payload);
      it->second.pop_front();
      if (it->second.empty()) pending_recvs_.erase(it);
    } else {
      unexpected_[key].emplace_back(payload.begin(), payload.end());
    }
  }

  // Size of the eager part of what a peer publishes with its QP numbers: our ring's address,
  // its rkey and its slot count.
  static constexpr size_t kEagerWire = 16;

  // Our ring for `peer`, registered for its writes; none (and SENDs only) if the setting says
  // 0 or the registration fails.
  void make_eager_ring(int peer) {
    Peer::Eager& e = peers_[peer].eager;
    if (eager_slots_ == 0) return;
    const size_t bytes = eager_ring::block_bytes(eager_slots_);
    e.block = static_cast<uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
    if (!e.block) return;
    std::memset(e.block, 0, bytes);
    // No relaxed ordering: the receiver trusts a slot by its trailer, so it must land last.
    constexpr int kRingAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    e.mr = ibv_reg_mr(pd_, e.block, bytes, kRingAccess);
    if (!e.mr) {
      log::warn("verbs: no eager slots for rank " + std::to_string(peer) + ": " +
                registration_error(bytes, errno).what());
      std::free(e.block);
      e.block = nullptr;
      return;
    }
    e.slots = eager_slots_;
  }

  // Whether the next control message to `p` can go into its eager slots: both sides have a
  // ring and the peer has given back the credit for the slot we would write.
  static bool eager_slot_free(const Peer& p) {
    const Peer::Eager& e = p.eager;
    if (e.their_slots == 0 || p.failure) return false;
    uint64_t credit = 0;
    __atomic_load(
        reinterpret_cast<const uint64_t*>(e.block + eager_ring::credit_in_offset(e.slots)), &credit,
        __ATOMIC_ACQUIRE);
    return e.sent - std::max(credit, e.credit) < static_cast<uint64_t>(e.their_slots);
  }

  // Takes the messages that have landed whole in our ring for `peer`, in order; true if any.
  bool poll_eager(int peer) {
    Peer& p = peers_[peer];
    Peer::Eager& e = p.eager;
    if (p.failure) return false;
    bool any = false;
    try {
      for (;;) {
        const uint8_t* slot =
            e.block + (e.taken % static_cast<uint64_t>(e.slots)) * eager_ring::kSlotBytes;
        const auto m = eager_ring::read(slot, e.taken + 1);
        if (!m) break;
        ++e.taken;
        any = true;
        // A credit above what we sent is a lie that would only cost the peer its own slots;
        // it is ignored all the same.
        const uint64_t credit = eager_ring::widen_credit(m->credit, e.sent);
        if (credit <= e.sent) e.credit = std::max(e.credit, credit);
        if (slept_to_timeout_) ++counters_.eager_late;  // it landed and no ring woke us
        dispatch_control(peer, m->tag, m->payload);
      }
    } catch (const std::exception& ex) {
      mark_failed(
          peer, "rank " + std::to_string(peer) + " wrote into its eager slots here: " + ex.what());
      return true;
    }
    if (e.taken - e.credited >= credit_every_ && !hold_credits_) return_credit(peer);
    return any;
  }

  // Tells `peer` how many of its messages we have taken: a plain 8-byte write into its credit
  // line. A later one carries a larger count, so two in flight are harmless.
  void return_credit(int peer) {
    Peer::Eager& e = peers_[peer].eager;
    e.credited = e.taken;
    ++counters_.eager_credit_writes;
    write_word(peer, eager_ring::credit_out_offset(e.slots), e.taken,
               eager_ring::credit_in_offset(e.their_slots));
  }

  // Before a sleep: a new epoch into every ring peer's block (eager_ring.hpp).
  void announce_sleep() {
    sleep_announced_ = true;
    ++sleep_epoch_;
    ++counters_.eager_sleeps;
    for (int peer : eager_peers_) {
      const Peer::Eager& e = peers_[peer].eager;
      if (peers_[peer].failure) continue;
      write_word(peer, eager_ring::epoch_out_offset(e.slots), sleep_epoch_,
                 eager_ring::epoch_in_offset(e.their_slots));
    }
  }

  // After an eager write to `peer` has landed: ring it if it announced a sleep we have not rung
  // for (a zero-byte write whose immediate completes at the peer and wakes it).
  void wake_if_asleep(int peer) {
    Peer& p = peers_[peer];
    Peer::Eager& e = p.eager;
    uint64_t epoch = 0;
    __atomic_load(reinterpret_cast<const uint64_t*>(e.block + eager_ring::epoch_in_offset(e.slots)),
                  &epoch, __ATOMIC_ACQUIRE);
    if (epoch <= e.rung || p.failure) return;
    e.rung = epoch;
    ++counters_.eager_rings;
    post_unawaited_write(peer, [](Staged& st) {
      st.wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;  // zero bytes: no address or key is checked
      st.wr.imm_data = htonl(eager_ring::kImm);
    });
  }

  // Writes `value` into the peer's block at `their_offset`, from our block's line at
  // `our_offset` (registered with the ring); a request nobody waits for.
  void write_word(int peer, size_t our_offset, uint64_t value, size_t their_offset) {
    const Peer::Eager& e = peers_[peer].eager;
    uint8_t* out = e.block + our_offset;
    __atomic_store(reinterpret_cast<uint64_t*>(out), &value, __ATOMIC_RELEASE);
    const uint64_t from = reinterpret_cast<uint64_t>(out);
    const uint32_t lkey = e.mr->lkey;
    const uint64_t to = e.their_ring + their_offset;
    const uint32_t rkey = e.their_rkey;
    post_unawaited_write(peer, [=](Staged& st) {
      st.sge = {from, 8, lkey};
      st.wr.opcode = IBV_WR_RDMA_WRITE;
      st.wr.wr.rdma.remote_addr = to;
      st.wr.wr.rdma.rkey = rkey;
    });
  }

  // A one-piece write on lane 0 that no caller waits for (keepalives, rings, credits, sleep
  // epochs): `fill` sets the opcode and what it writes; its completion only retires it.
  template <typename Fill>
  void post_unawaited_write(int peer, Fill fill) {
    auto req = std::make_shared<VerbsRequest>(peer);
    const uint64_t id = track(req);
    ++req->pieces;
    submit(peer, 0, [peer, id, fill](Staged& st) {
      st.wr.wr_id = make_wr_id(kWriteWr, peer, 0);
      st.request = id;
      fill(st);
      return true;
    });
  }

  // A completion for work request `number` on `peer`'s lane: RC completes in order, so it also
  // retires every unsignaled one posted before it. An error completion may name an unsignaled
  // one (flushed); one already retired (mark_failed retires all) is ignored.
  void complete_through(int peer, int lane, uint32_t number, bool ok) {
    Lane& p = peers_[peer].lanes[lane];
    auto end = std::find_if(p.posted.begin(), p.posted.end(), [&](const Posted& x) {
      return x.number == number && (x.signaled || !ok);
    });
    if (end == p.posted.end()) return;
    std::vector<uint64_t> done;
    for (auto it = p.posted.begin(); it != std::next(end); ++it)
      done.push_back(it->request);
    p.posted.erase(p.posted.begin(), std::next(end));
    sends_in_flight_ -= static_cast<int>(done.size());
    for (uint64_t d : done)
      complete_one(peer, d, ok);
  }

  void complete_one(int peer, uint64_t id, bool ok) {
    Peer& p = peers_[peer];
    auto it = inflight_.find(id);
    if (it != inflight_.end()) {
      auto* req = static_cast<VerbsRequest*>(it->second.get());
      if (req->send_slot >= 0) {
        free_send_.push_back(req->send_slot);
        req->send_slot = -1;
      }
      if (--req->pieces <= 0 || !ok) {
        if (ok && req->state() == Request::State::Pending) req->complete();
        if (ok && req->eager) wake_if_asleep(peer);  // it has landed: now look at the epoch
        if (!ok && req->state() == Request::State::Pending) {
          req->fail(p.failure.value_or("send to rank " + std::to_string(peer) + " failed"));
        }
        inflight_.erase(it);
      }
    }
  }

  // The first failure of a peer moves its QPs to ERR, so nothing posted keeps reading our
  // buffers (a user's tensor after its call returned), and retires what was staged or posted
  // there: the caps on sends in flight and the send buffers come back now, not with flush
  // completions that unsignaled work requests may never produce.
  void mark_failed(int peer, std::string why) {
    if (peer < 0 || peer >= world_) return;
    Peer& p = peers_[peer];
    const bool first = !p.failure;
    if (first) p.failure = std::move(why);
    if (first && peer != me_) {
      std::vector<uint64_t> retired;
      for (Lane& l : p.lanes) {
        if (l.qp) {
          ibv_qp_attr a{};
          a.qp_state = IBV_QPS_ERR;
          ibv_modify_qp(l.qp, &a, IBV_QP_STATE);
        }
        for (const Posted& x : l.posted)
          retired.push_back(x.request);
        for (const Staged& st : l.staged)
          retired.push_back(st.request);
        sends_in_flight_ -= static_cast<int>(l.posted.size() + l.staged.size());
        l.posted.clear();
        l.staged.clear();
      }
      for (uint64_t r : retired)
        complete_one(peer, r, false);
    }
    fail_all_of(peer);
  }

  void fail_all_of(int peer) {
    const std::string why = *peers_[peer].failure;
    for (auto& [id, req] : inflight_) {
      if (req->peer() == peer && req->state() == Request::State::Pending) req->fail(why);
    }
    for (auto& lane : peers_[peer].lanes)
      lane.backlog.clear();
  }

  bool drain_async() {
    ibv_async_event ev;
    bool any = false;
    for (;;) {
      ++counters_.event_syscalls;
      if (ibv_get_async_event(ctx_, &ev) != 0) break;
      any = true;
      std::string what = ibv_event_type_str(ev.event_type);
      const bool qp_event = ev.event_type == IBV_EVENT_QP_FATAL ||
                            ev.event_type == IBV_EVENT_QP_REQ_ERR ||
                            ev.event_type == IBV_EVENT_QP_ACCESS_ERR;
      for (int r = 0; r < world_ && qp_event; ++r) {
        const auto& lanes = peers_[r].lanes;
        if (std::any_of(lanes.begin(), lanes.end(),
                        [&](const Lane& l) { return l.qp == ev.element.qp; })) {
          mark_failed(r, "async event '" + what + "' on " + choice_.device + " QP to rank " +
                             std::to_string(r));
        }
      }
      // A port event concerns us only on our port (a dual-port HCA's other port may go down).
      const bool our_port_down =
          ev.event_type == IBV_EVENT_PORT_ERR && ev.element.port_num == choice_.port;
      const bool our_cq_lost = ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == cq_;
      const bool our_srq_lost = ev.event_type == IBV_EVENT_SRQ_ERR && ev.element.srq == srq_;
      if (ev.event_type == IBV_EVENT_DEVICE_FATAL || our_port_down || our_cq_lost || our_srq_lost) {
        for (int r = 0; r < world_; ++r) {
          if (r != me_) mark_failed(r, "async event '" + what + "' on " + choice_.device);
        }
      }
      ibv_ack_async_event(&ev);
    }
    return any;
  }

  ibv_context* ctx_ = nullptr;
  VerbsDeviceChoice choice_;
  ibv_port_attr port_attr_{};
  ibv_gid gid_{};
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  bool armed_ = false;
  unsigned unacked_events_ = 0;
  int me_ = -1;
  int world_ = 0;
  std::vector<uint8_t> ctrl_pool_;
  std::unique_ptr<MrEntry> ctrl_mr_;
  std::vector<Peer> peers_;
  ibv_srq* srq_ = nullptr;
  std::unordered_map<uint32_t, std::pair<int, int>> lane_of_qpn_;  // QP number -> (peer, lane)
  uint64_t cq_size_ = 0;
  std::deque<int> free_send_;  // the shared send buffers not in use
  int sends_in_flight_ = 0;    // staged or posted on any QP, at most kSendsInFlight
  std::vector<std::pair<int, int>> backlogged_;  // (peer, lane) with a backlog, each once
  std::shared_ptr<Store> store_;
  uint64_t connected_ = 0;       // peers with QPs (connected or connecting)
  std::vector<int> connecting_;  // peers whose connection is in progress
  Clock::time_point next_connect_poll_{};
  std::chrono::microseconds connect_poll_ = kConnectPollFirst;
  int connect_timer_ = -1;  // timerfd: wakes a sleeper when the store is due a look
  PeerLiveness liveness_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<VerbsRequest>> inflight_;
  std::map<std::pair<int, uint32_t>, Expected> expects_;
  std::map<std::pair<int, uint32_t>, int> arrived_;  // immediates that came before their expect
  verbs_imm::TokenTable tokens_;                     // which calls expect writes
  // Per (peer, tag), in order: a tag may carry several messages (point-to-point), matched first
  // come, first served, as UCX and MPI match them.
  std::map<std::pair<int, uint64_t>, std::deque<RequestPtr>> pending_recvs_;
  std::map<std::pair<int, uint64_t>, std::deque<Bytes>> unexpected_;
  std::unique_ptr<MrCache> cache_;
  bool hooked_ = false;
  FabricSettings fabric_;
  Counters counters_;
  size_t piece_bytes_ = size_t{1} << 20;
  int lanes_ = 1;
  int eager_slots_ = eager_ring::kDefaultSlots;  // RDMACOLL_IB_EAGER_SLOTS
  uint64_t credit_every_ = 1;                    // messages taken per credit write
  bool hold_credits_ = false;                    // a test's: credits never go back
  std::vector<int> eager_peers_;                 // peers whose messages come by eager slots
  uint64_t sleep_epoch_ = 0;                     // our last sleep epoch announced to the ring peers
  bool sleep_announced_ = false;                 // and no peer has rung for it since
  Clock::time_point sleep_began_{};
  bool slept_to_timeout_ = false;      // the last sleep ended by poll()'s timeout
  uint32_t inline_max_ = kWantInline;  // what every QP took (0: the device has no inline data)
  std::vector<std::pair<int, int>> staged_lanes_;  // (peer, lane) with staged work, each once
  bool async_due_ = true;
  Clock::time_point next_async_check_{};
  Clock::time_point next_keepalive_{Clock::now() + kKeepaliveInterval};
};

}  // namespace

VerbsDeviceChoice probe_verbs_device() {
  init_fork_safety();
  OpenDevice dev = open_device();
  if (dev.ctx) ibv_close_device(dev.ctx);
  return dev.choice;
}

std::unique_ptr<Transport> create_verbs_transport(const std::string& preferred_device) {
  return std::make_unique<VerbsTransport>(preferred_device);
}

}  // namespace rdmacoll::transport
