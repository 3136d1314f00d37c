#pragma once
// The verbs transport's class, which wires together the objects that own the state (as Gloo's
// ibverbs/{device,pair,buffer,memory_region}): the device with its PD and CQ (device.hpp), each
// peer's connection (peer.hpp), the send queue (send_queue.hpp), the CQ's reader
// (completion_dispatcher.hpp), the eager channel (eager_channel.hpp), the port's outages
// (port_watch.hpp), the registration cache (mr_cache.hpp), the store I/O of connecting
// (connector.hpp); test-only hooks stay outside it (test_hooks.hpp). Its own files:
// verbs_transport.cpp (the Transport interface), connect.cpp (QPs made on first use through the
// store), completions.cpp (what a completion means, failures, async events), receives.cpp (the
// shared receive queue and its credits), lane_reset.cpp (data QPs reset after a refused write),
// route.cpp (RoCE reachability). Nothing outside src/transport/verbs includes it.

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
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include "common/log.hpp"
#include "common/settings.hpp"
#include "rdmacoll/errors.hpp"
#include "rdmacoll/store.hpp"
#include "transport/peer_liveness.hpp"
#include "transport/verbs/completion_dispatcher.hpp"
#include "transport/verbs/connector.hpp"
#include "transport/verbs/device.hpp"
#include "transport/verbs/eager_channel.hpp"
#include "transport/verbs/eager_ring.hpp"
#include "transport/verbs/fabric.hpp"
#include "transport/verbs/footprint.hpp"
#include "transport/verbs/handles.hpp"
#include "transport/verbs/immediates.hpp"
#include "transport/verbs/mr_cache.hpp"
#include "transport/verbs/peer.hpp"
#include "transport/verbs/port_watch.hpp"
#include "transport/verbs/send_queue.hpp"
#include "transport/verbs/test_hooks.hpp"

namespace rdmacoll::transport::verbs_impl {

using verbs_device::Device;
using verbs_device::env_pkey;
using verbs_device::errno_text;
using verbs_device::gid_table;
using verbs_device::init_fork_safety;
using verbs_device::open_device;
using verbs_device::OpenDevice;
using verbs_device::registration_error;
using verbs_device::sysfs_traffic_class;

constexpr size_t kMaxWrite = settings::kIbChunk.max;
static_assert(eager_ring::kMaxPayload >= kCtrlBytes - 8, "every control message fits a slot");
// Data path, after NCCL's net_ib and UCX's uct/ib: control messages up to kWantInline bytes go
// inside the work request (no DMA read of a send buffer) where the device offers it.
constexpr uint32_t kWantInline = 256;
// Async events (port, QP, CQ errors) are read at most this often while busy, and after every
// sleep (their fd is among those waited on): not with a read(2) per progress() call.
constexpr std::chrono::milliseconds kAsyncEventInterval{10};
// A remote host that dies while we only wait for it (nothing of ours on its QP) sends no error;
// every this often a peer we wait on gets a zero-byte RDMA write (no memory touched, nothing
// completes at the peer). Its ACK proves the peer's NIC alive; a dead host makes it fail after
// RDMACOLL_IB_TIMEOUT x (RDMACOLL_IB_RETRY_CNT + 1), which marks the peer failed.
constexpr std::chrono::milliseconds kKeepaliveInterval{1000};
// RNR retries before a QP fails (7 would mean without end): see bring_up.
constexpr int kRnrRetry = 6;
// RDMACOLL_IB_QPS_PER_PEER: data QPs ("lanes") per peer pair. A write of several pieces is
// striped over the lanes, each lane's last piece carrying the immediate, and the receiver counts
// one arrival per lane used. Control messages (descriptors, point-to-point headers, credits,
// rings, keepalives) take a QP of their own after the data lanes: on one QP a small call's
// descriptor waited behind every megabyte posted before it (RC keeps a QP's order), and the
// NIC serves QPs side by side. Nothing relies on control following data: data is complete by
// its immediates, and the one message that vouches for earlier writes (a ring call's error
// report, RingGuard::spread) is sent only once they have completed. On
// fabrics that hash flows per QP (RoCE ECMP, adaptive routing) and NICs with several engines,
// one QP per peer caps a pair at one path (NCCL_IB_QPS_PER_CONNECTION for the same reason).
constexpr int kMaxLanes = static_cast<int>(settings::kIbQpsPerPeer.max);
// RDMACOLL_IB_CHUNK: the largest RDMA write; bigger chunks go as several,
// so a NIC with several engines or QPs works on them side by side.
inline size_t write_piece_bytes() {
  return settings::read(settings::kIbChunk);
}

inline int lanes_per_peer() {
  return static_cast<int>(settings::read(settings::kIbQpsPerPeer));
}

// RDMACOLL_IB_EAGER_SLOTS: eager slots per connected peer (0: control messages go as SENDs).
inline int eager_slots_per_peer() {
  return static_cast<int>(settings::read(settings::kIbEagerSlots));
}

// RDMACOLL_MR_CACHE_MB: how much registered memory the cache keeps.
inline size_t mr_cache_bytes() {
  return settings::read(settings::kMrCacheMb) << 20;
}

class VerbsTransport final : public Transport,
                             private SendQueue::Owner,
                             private EagerChannel::Owner,
                             private CompletionDispatcher::Handler {
 public:
  explicit VerbsTransport(const std::string& preferred_device);

  ~VerbsTransport() override;

  std::string name() const override { return "verbs"; }
  std::string describe() const override;

  Bytes address(int my_rank, int world_size) override;

  void set_connection_store(std::shared_ptr<Store> store) override { store_ = std::move(store); }
  bool needs_connection_store() const override { return true; }

  // Checks every rank's device against ours; QPs come later, on first use (see Link).
  void connect(int my_rank, const std::vector<Bytes>& addresses) override;

  std::shared_ptr<MemoryRegion> register_memory(void* base, size_t length) override;
  std::shared_ptr<MemoryRegion> pin_memory(void* base, size_t length) override;

  void forget_registration(const MemoryRegion& region) override;

  std::unique_ptr<RemoteRegion> unpack_remote(int peer, uint64_t base, size_t length,
                                              std::span<const uint8_t> packed_key) override;

  RequestPtr send(int peer, uint64_t tag, const void* data, size_t length) override;

  size_t max_message_bytes() const override { return kCtrlBytes - 8; }

  RequestPtr recv(int peer, uint64_t tag, void* buffer, size_t capacity) override;

  RequestPtr write(const MemoryRegion& src, size_t src_offset, const RemoteRegion& dst,
                   size_t dst_offset, size_t length, uint64_t signal) override;

  uint64_t reserve_token() override;

  void release_token(uint64_t token, bool failed) override;

  RequestPtr expect(int peer, MemoryRegion&, size_t, size_t length, uint64_t signal) override;

  void cancel(const RequestPtr& request) override;

  bool progress() override;

  bool prepare_wait() override;

  void wait_fds(std::vector<pollfd>& fds) override;

  void after_wait() override;

  Statistics statistics() const override {
    Statistics s = Transport::statistics();
    s.registrations = cache_->stats().registrations;
    s.counters = counters_;
    s.footprint = footprint();
    return s;
  }
  // The plan for the peers connected so far; the CQ was sized in address() for every peer,
  // which the cap on sends in flight bounds (verbs_plan::cq_entries).
  Footprint footprint() const;

  std::optional<std::string> peer_failure(int peer) override;
  bool peer_exited(int peer) override {
    return peer >= 0 && peer < world_ && liveness_.failure(peer).has_value();
  }
  int peer_pid(int peer) const override { return liveness_.pid_of(peer); }

 private:
  bool placement_logged_ = false;

  // One RC QP on our CQ; its number.
  uint32_t create_qp(Lane& lane);

  // Maps and unmaps a page; true when the hook saw it.
  bool probe_unmap_event();

  // Inside munmap, or glibc's free/trim with the arena lock held: only records the range.
  static void on_unmap(ucm_event_type_t, ucm_event_t* event, void* self);

  // A receive's buffer and key: slot s is in chunk s / kReceiveChunk.
  uint8_t* recv_buffer(int slot);
  uint32_t recv_lkey(int slot) const;

  // Posts receives (with new chunks of buffers) until the connected peers' grants are covered.
  void grow_receives();
  // Posts the receives whose completions this progress() handled, as one chain.
  void repost_receives();
  // Takes a credit for a receive-taking work request to `peer`; false when it holds none.
  bool take_receive_credit(int peer) override;
  // Writes credits back to the peers that are owed half their grant.
  void hand_back_credits();
  // The queue's low-water event (receives.cpp).
  static constexpr uint32_t kReceiveLimit = 16;
  void arm_receive_limit();
  void on_receive_limit();

  std::string store_key(const char* what, int from, int to) const;

  // What a peer's port says of itself in its address (fabric::incompatibility).
  static fabric::PortIdentity identity_of(const WireInfo& info);

  // The first use of `peer`: our QPs to it, their numbers published (see Link).
  void touch(int peer);

  // What a rank publishes instead of its QP numbers when it refuses a pair (route.cpp).
  static constexpr std::string_view kRefusal = "refused:";
  // RoCE: why the peer cannot be reached through our port (route.cpp), or nullopt.
  std::optional<std::string> unreachable(int peer);
  bool route_check_off_logged_ = false;

  // Moves every connection in progress on as far as the store allows; true if any moved.
  bool advance_connections();

  // One look at the store for `peer`'s half of the connection; true once it is ready or failed.
  bool advance(int peer);

  // From RESET to RTS, paired with the peer's QP `their_qpn`, both sides starting at `psn`.
  void bring_up(int r, int lane, const WireInfo& info, uint32_t their_qpn, uint32_t psn = 0);

  void check_modify(ibv_qp* qp, ibv_qp_attr& a, int mask, int r, const char* state);

  // Queues `build` on `peer`'s lane (SendQueue::submit) once the pair is touched; work for a
  // failed peer fails at once. `urgent`: one of the transport's own writes (kUrgentPerQp).
  void submit(int peer, int lane, Build build, bool urgent = false);

  // SendQueue::Owner: whether the lane takes work now, a refused post, a request that landed.
  bool lane_open(int peer, int lane) const override;
  void post_failed(int peer, int err) override;
  void landed(int peer, const VerbsRequest& req) override;

  // A zero-byte write to every peer we wait on, or whose queued work waits, with nothing
  // posted (see kKeepaliveInterval); its completion is a request nobody waits for.
  void keepalive();

  void deliver(VerbsRequest& req, std::span<const uint8_t> payload);

  // CompletionDispatcher::Handler: a shared receive's completion, a send's or write's.
  void on_receive(const ibv_wc& wc, int peer, int lane, uint32_t slot) override;
  void on_send(const ibv_wc& wc, int peer, int lane, uint32_t number) override;

  void handle_receive(const ibv_wc& wc, int peer, int lane, uint32_t slot);

  // A control message from `peer`: to its receive if posted (one copy, into place), else kept.
  void dispatch_control(int peer, uint64_t tag, std::span<const uint8_t> payload);

  // Size of the block part of what a peer publishes with its QP numbers: our block's address,
  // its rkey, its eager slot count and the receives we grant the peer.
  static constexpr size_t kEagerWire = 20;

  // EagerChannel::Owner: its writes, a message from a ring, a ring written with garbage.
  void post_own_write(int peer, std::function<void(Staged&)> fill,
                      std::optional<Word> word) override {
    post_unawaited_write(peer, std::move(fill), word);
  }
  void on_message(int peer, uint64_t tag, std::span<const uint8_t> payload) override {
    dispatch_control(peer, tag, payload);
  }
  void ring_broken(int peer, std::string why) override { mark_failed(peer, std::move(why)); }

  // A one-piece write on the control QP that no caller waits for (keepalives, rings, credits,
  // sleep epochs), an urgent one: `fill` sets the opcode and what it writes; its completion only
  // retires it (and a word's completion calls word_landed).
  template <typename Fill>
  void post_unawaited_write(int peer, Fill fill, std::optional<Word> word = std::nullopt) {
    auto req = std::make_shared<VerbsRequest>(peer);
    req->word = word;
    const uint64_t id = sends_.track(req);
    ++req->pieces;
    submit(
        peer, control_lane(),
        [peer, id, fill](Staged& st) {
          st.wr.wr_id = make_wr_id(kWriteWr, peer, 0);
          st.request = id;
          fill(st);
          return true;
        },
        true);
  }

  // The first failure of a peer moves its QPs to ERR, so nothing posted keeps reading our
  // buffers (a user's tensor after its call returned), and retires what was staged or posted
  // there: the caps on sends in flight and the send buffers come back now, not with flush
  // completions that unsignaled work requests may never produce.
  void mark_failed(int peer, std::string why);

  void fail_all_of(int peer);

  // A data QP's error that leaves the pair healthy (lane_reset.cpp): a write refused because
  // the receiver's region is gone (its call failed and dropped the registration) moves both
  // sides' QPs to ERR. Instead of failing the peer for every group, the pair's data QPs are
  // reset in place (same QP numbers, a new starting PSN per generation), agreed over the
  // control QP, which the error did not touch; only the work posted on them fails.
  static constexpr uint64_t kLaneResetTag = (uint64_t{1} << 62) | 1;
  static constexpr uint64_t kLaneResetDoneTag = (uint64_t{1} << 62) | 2;
  static constexpr int kMaxLaneResets = 16;
  bool data_lane_recoverable(int peer, int lane, uint32_t number, ibv_wc_status status);
  void start_lane_reset(int peer, const std::string& why, bool refused = false);
  void reset_data_lanes(int peer, uint32_t generation, const std::string& why,
                        bool refused = false);
  void on_transport_message(int peer, uint64_t tag, std::span<const uint8_t> payload);
  bool data_lane_paused(int peer, int lane) const {
    return lane < lanes_ && peers_[peer].data_paused;
  }

  // A failed peer's posted work requests are retired by the flush completions its QPs in ERR
  // produce (one per request, signalled or not); ones still unflushed this long after the
  // failure are retired here, so a device that drops a flush cannot keep their caps for ever.
  static constexpr std::chrono::seconds kFlushGrace{10};
  void retire_unflushed(Clock::time_point now);

  bool drain_async();

  // Our port went down (IBV_EVENT_PORT_ERR) or came back: a warning, not a failure, unless it
  // stays down past the QPs' retry budget (check_port, with the async events; port_watch.hpp).
  void on_port_down();
  void on_port_active();
  void check_port(Clock::time_point now);

  // Before everything made on it (below): those go first, the device last.
  Device dev_;
  PortWatch port_;  // our port's outages
  int me_ = -1;
  int world_ = 0;
  // Receive buffers, a registered chunk of kReceiveChunk at a time; the queue's capacity, each
  // peer's grant, how many are posted, and the slots to post again after this progress().
  struct ReceiveChunk {
    std::vector<uint8_t> bytes;
    verbs_handles::Registration mr;
  };
  std::vector<ReceiveChunk> receive_chunks_;
  uint64_t receive_capacity_ = 0;
  uint32_t grant_ = 0;
  uint64_t receives_posted_ = 0;
  std::vector<int> repost_;
  std::vector<ibv_sge> repost_sges_;  // repost_receives' chain, kept between calls
  std::vector<ibv_recv_wr> repost_wrs_;
  std::vector<int> owing_;  // peers a receive came from since credits were last handed back
  bool receive_limit_armed_ = false;
  std::vector<Peer> peers_;
  verbs_handles::SharedReceiveQueue srq_;
  uint64_t cq_size_ = 0;
  std::shared_ptr<Store> store_;
  uint64_t connected_ = 0;                // peers with QPs (connected or connecting)
  std::vector<int> connecting_;           // peers whose connection is in progress
  std::unique_ptr<Connector> connector_;  // the store I/O of connecting, off this lock
  uint64_t connect_seen_ = 0;             // the connector's generation last looked at
  PeerLiveness liveness_;
  Counters counters_;
  SendQueue sends_{*this, peers_, counters_};  // the send buffers, requests in flight, caps
  CompletionDispatcher completions_{counters_};
  std::map<std::pair<int, uint32_t>, Expected> expects_;
  std::map<std::pair<int, uint32_t>, int> arrived_;  // immediates that came before their expect
  verbs_imm::TokenTable tokens_;                     // which calls expect writes
  // Per (peer, tag), in order: a tag may carry several messages (point-to-point), matched first
  // come, first served, as UCX and MPI match them.
  std::map<std::pair<int, uint64_t>, std::deque<RequestPtr>> pending_recvs_;
  std::map<std::pair<int, uint64_t>, std::deque<Bytes>> unexpected_;
  std::unique_ptr<MrCache> cache_;
  bool hooked_ = false;
  size_t piece_bytes_ = size_t{1} << 20;
  int lanes_ = 1;                  // data lanes
  bool adaptive_routing_ = false;  // RDMACOLL_IB_ADAPTIVE_ROUTING
  int control_lane() const { return lanes_; }
  int qps_per_peer() const { return lanes_ + 1; }
  // How errors name a lane's QP: which one failed says what was on it.
  std::string qp_name(int lane) const {
    return lane == control_lane() ? "control QP" : "data QP " + std::to_string(lane);
  }
  EagerChannel eager_{*this, peers_, counters_, eager_slots_per_peer()};
  Clock::time_point sleep_began_{};
  uint32_t inline_max_ = kWantInline;  // what every QP took (0: the device has no inline data)
  bool async_due_ = true;
  Clock::time_point next_async_check_{};
  Clock::time_point next_keepalive_{Clock::now() + kKeepaliveInterval};
};

}  // namespace rdmacoll::transport::verbs_impl
