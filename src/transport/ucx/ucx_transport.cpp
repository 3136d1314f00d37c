#include "transport/ucx/ucx_transport.hpp"

#include <poll.h>
#include <sys/syscall.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "common/settings.hpp"
#include "rdmacoll/errors.hpp"
#include "transport/peer_liveness.hpp"

namespace rdmacoll::transport {

namespace {

std::string status_str(ucs_status_t s) {
  return ucs_status_string(s);
}

void check(ucs_status_t s, const std::string& what) {
  if (s != UCS_OK) throw TransportError("UCX: " + what + " failed: " + status_str(s));
}

enum class Protocol { Auto, Tag, Put };

Protocol protocol_from_env() {
  const std::string s = settings::choice("RDMACOLL_UCX_PROTOCOL");
  return s == "put" ? Protocol::Put : s == "tag" ? Protocol::Tag : Protocol::Auto;
}

// UCX_TLS that leaves out every shared-memory transport (e.g. "tcp") forces the network even
// between processes of one host.
bool shared_memory_allowed() {
  const char* v = std::getenv("UCX_TLS");
  if (!v || !*v) return true;
  const std::string tls = v;
  for (const char* t : {"all", "sm", "shm", "posix", "sysv", "cma", "xpmem", "knem"}) {
    if (tls.find(t) != std::string::npos) return true;
  }
  return false;
}

// Measured on 2 local ranks (scripts/measure-core.sh): over shared memory put + flush + notify
// beats tagged messages for small writes (8 B: 5.6 vs 16.9 us; 64 KiB: 15 vs 95 us), is close
// at 1 MiB (272 vs 314 us) and loses at 16 MiB (5.0 vs 3.5 ms); with 4 ranks on 2 cores, puts
// of 256 KiB and up collapse (16 ms vs 0.3 ms per call) because their completion needs the
// sleeping peer to progress. Over TCP UCX emulates put and tagged messages win at every size.
constexpr size_t kPutMaxBytes = 64u << 10;

constexpr unsigned kDoorbellAm = 1;  // active-message id of doorbell()

class UcxTransport;

class UcxRequest final : public Request {
 public:
  UcxRequest(UcxTransport* owner, int peer) : Request(peer), owner(owner) {}
  UcxTransport* owner;
  void* ucx = nullptr;  // UCX's request handle while in flight
  Bytes payload;        // owned copy of a control message, or the 8-byte put notification
  uint64_t signal = 0;  // put protocol: notification to send after the flush
  size_t expected_length = 0;
  size_t slot = SIZE_MAX;  // index in the transport's in-flight list
};

class UcxMemoryRegion final : public MemoryRegion {
 public:
  UcxMemoryRegion(ucp_context_h ctx, void* base, size_t length)
      : MemoryRegion(base, length), ctx_(ctx) {}
  // Takes over memory UCX allocated (ucp_mem_map with ALLOCATE), already packed.
  UcxMemoryRegion(ucp_context_h ctx, void* base, size_t length, ucp_mem_h memh, void* packed,
                  size_t packed_size)
      : MemoryRegion(base, length),
        ctx_(ctx),
        memh_(memh),
        packed_(packed),
        packed_size_(packed_size) {}
  ~UcxMemoryRegion() override { release(); }
  // Also called by the transport's destructor for regions that may outlive it.
  void release() {
    if (packed_) ucp_rkey_buffer_release(packed_);
    if (memh_) ucp_mem_unmap(ctx_, memh_);
    packed_ = nullptr;
    memh_ = nullptr;
  }
  void map() {
    ucp_mem_map_params_t p{};
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    p.address = base();
    p.length = length();
    check(ucp_mem_map(ctx_, &p, &memh_), "ucp_mem_map of " + std::to_string(length()) + " bytes");
    check(ucp_rkey_pack(ctx_, memh_, &packed_, &packed_size_), "ucp_rkey_pack");
  }
  Bytes packed_key() const override {
    const auto* p = static_cast<const uint8_t*>(packed_);
    return p ? Bytes(p, p + packed_size_) : Bytes{};
  }

 private:
  ucp_context_h ctx_;
  ucp_mem_h memh_ = nullptr;
  void* packed_ = nullptr;
  size_t packed_size_ = 0;
};

class UcxRemoteRegion final : public RemoteRegion {
 public:
  UcxRemoteRegion(int peer, uint64_t base, size_t length, ucp_rkey_h rkey)
      : RemoteRegion(peer, base, length), rkey(rkey) {}
  ~UcxRemoteRegion() override {
    if (rkey) ucp_rkey_destroy(rkey);
  }
  ucp_rkey_h rkey;
};

struct PeerSlot {
  UcxTransport* owner = nullptr;
  int rank = -1;
  ucp_ep_h ep = nullptr;
  bool same_host = false;
  std::optional<std::string> failure;
  bool close_pending = false;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport() : protocol_(protocol_from_env()), shm_(shared_memory_allowed()) {
    ucp_config_t* config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    // Over TCP, UCX's "auto" rendezvous threshold (about 8 KiB) costs two extra round trips
    // per message: measured on 2 ranks, 8 KiB took 42 us against 7 us eager, and eager wins
    // up to 512 KiB (153 vs 180 us); from 2 MiB rendezvous wins (758 vs 1356 us). Shared
    // memory keeps "auto": its rendezvous is a single-copy CMA read. UCX_RNDV_THRESH wins.
    if (!shm_ && !std::getenv("UCX_RNDV_THRESH")) {
      rndv_thresh_ = "512K";
      check(ucp_config_modify(config, "RNDV_THRESH", rndv_thresh_.c_str()), "setting RNDV_THRESH");
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP | UCP_FEATURE_AM;
    ucs_status_t s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    check(s, "ucp_init");
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    s = ucp_worker_create(context_, &wp, &worker_);
    if (s != UCS_OK) {
      ucp_cleanup(context_);
      check(s, "ucp_worker_create");
    }
    // Doorbells only wake a blocked worker; their handler has nothing to do.
    ucp_am_handler_param_t am{};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
    am.id = kDoorbellAm;
    am.cb = [](void*, const void*, size_t, void*, size_t, const ucp_am_recv_param_t*) {
      return UCS_OK;
    };
    check(ucp_worker_set_am_recv_handler(worker_, &am), "ucp_worker_set_am_recv_handler");
    s = ucp_worker_get_efd(worker_, &efd_);
    if (s != UCS_OK) efd_ = -1;  // no wakeup support: wait_for_event() then yields instead
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    check(ucp_worker_get_address(worker_, &addr, &len), "ucp_worker_get_address");
    host_ = host_key();
    address_ = encode_peer_address(
        static_cast<uint32_t>(::getpid()), host_,
        Bytes(reinterpret_cast<uint8_t*>(addr), reinterpret_cast<uint8_t*>(addr) + len));
    ucp_worker_release_address(worker_, addr);
  }

  ~UcxTransport() override {
    // Cancel what is still posted so no callback runs into freed memory. Cancelling may
    // complete a request at once, which edits the in-flight list: walk a copy.
    const auto posted = inflight_;
    for (const auto& req : posted) {
      if (req->ucx) ucp_request_cancel(worker_, req->ucx);
    }
    for (int i = 0; i < 1000 && !inflight_.empty(); ++i)
      ucp_worker_progress(worker_);
    for (const auto& [mapped, k] : mapped_keys_)
      ucp_rkey_destroy(k);
    mapped_keys_.clear();
    // A group may hold its eager slots past destroy_process_group(): free them while the
    // context still exists.
    for (auto& region : allocated_)
      region->release();
    allocated_.clear();
    std::vector<void*> closing;
    for (auto& slot : peers_) {
      if (!slot->ep) continue;
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = slot->failure ? UCP_EP_CLOSE_FLAG_FORCE : 0;
      void* r = ucp_ep_close_nbx(slot->ep, &p);
      if (UCS_PTR_IS_PTR(r)) closing.push_back(r);
    }
    // Bounded: a peer that went away must not hold up our exit.
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    for (void* r : closing) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < deadline) {
        ucp_worker_progress(worker_);
      }
      if (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_request_cancel(worker_, r);
      ucp_request_free(r);
    }
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }

  std::string name() const override { return "ucx"; }
  // Any length; RDMACOLL_TEST_MAX_MESSAGE caps it in tests, so that the engine's paths for a
  // transport with a limit (verbs: 4 KiB) run over TCP in CI too.
  size_t max_message_bytes() const override { return max_message_; }

  std::string describe() const override {
    const char* tls = std::getenv("UCX_TLS");
    return std::string("ucx ") + ucp_get_version_string() + " protocol=" +
           (protocol_ == Protocol::Tag   ? "tag"
            : protocol_ == Protocol::Put ? "put"
                                         : "auto") +
           " UCX_TLS=" + (tls ? tls : "(default)") +
           (rndv_thresh_.empty() ? "" : " RNDV_THRESH=" + rndv_thresh_);
  }

  Bytes address(int, int) override { return address_; }

  void connect(int my_rank, const std::vector<Bytes>& addresses) override {
    my_rank_ = my_rank;
    addresses_.clear();
    peers_.clear();
    std::vector<std::pair<std::string, pid_t>> hosts;
    for (size_t r = 0; r < addresses.size(); ++r) {
      PeerAddress a = decode_peer_address(addresses[r], static_cast<int>(r));
      auto slot = std::make_unique<PeerSlot>();
      slot->owner = this;
      slot->rank = static_cast<int>(r);
      slot->same_host = a.host == host_;
      hosts.emplace_back(a.host, static_cast<pid_t>(a.pid));
      addresses_.push_back(std::move(a.payload));
      peers_.push_back(std::move(slot));
    }
    liveness_.reset(hosts);
  }

  std::shared_ptr<MemoryRegion> register_memory(void* base, size_t length) override {
    auto region = std::make_shared<UcxMemoryRegion>(context_, base, length);
    if (length > 0 && (protocol_ == Protocol::Put || (protocol_ == Protocol::Auto && shm_))) {
      region->map();
    }
    return region;
  }

  std::unique_ptr<RemoteRegion> unpack_remote(int peer, uint64_t base, size_t length,
                                              std::span<const uint8_t> packed_key) override {
    ucp_rkey_h rkey = nullptr;
    if (!packed_key.empty() && (protocol_ == Protocol::Put ||
                                (protocol_ == Protocol::Auto && shm_ && peers_[peer]->same_host))) {
      check(ucp_ep_rkey_unpack(ep(peer), packed_key.data(), &rkey),
            "ucp_ep_rkey_unpack for peer " + std::to_string(peer));
    }
    return std::make_unique<UcxRemoteRegion>(peer, base, length, rkey);
  }

  std::shared_ptr<MemoryRegion> allocate_mappable(size_t length) override {
    if (!shm_ || length == 0) return nullptr;
    ucp_mem_map_params_t p{};
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                   UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    p.address = nullptr;
    p.length = length;
    p.flags = UCP_MEM_MAP_ALLOCATE;
    ucp_mem_h memh = nullptr;
    if (ucp_mem_map(context_, &p, &memh) != UCS_OK) return nullptr;
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    void* packed = nullptr;
    size_t packed_size = 0;
    if (ucp_mem_query(memh, &attr) != UCS_OK || attr.length < length ||
        ucp_rkey_pack(context_, memh, &packed, &packed_size) != UCS_OK) {
      ucp_mem_unmap(context_, memh);
      return nullptr;
    }
    std::memset(attr.address, 0, length);
    auto region = std::make_shared<UcxMemoryRegion>(context_, attr.address, length, memh, packed,
                                                    packed_size);
    allocated_.push_back(region);
    return region;
  }

  // Works when UCX reached the peer's memory through a shared-memory transport that maps
  // it (sysv or posix); otherwise (cma, tcp) there is no pointer and the caller falls back.
  void* map_remote(int peer, uint64_t base, size_t length,
                   std::span<const uint8_t> packed_key) override {
    if (!shm_ || packed_key.empty() || length == 0 || !peers_.at(peer)->same_host) return nullptr;
    // A peer that is gone or exiting may have taken its segment with it, and UCX 1.13 crashes
    // on such a key (peer_liveness.hpp). Without a mapping the group's slots stay off.
    if (liveness_.gone_or_exiting(peer)) return nullptr;
    ucp_rkey_h rkey = nullptr;
    if (ucp_ep_rkey_unpack(ep(peer), packed_key.data(), &rkey) != UCS_OK) return nullptr;
    void* first = nullptr;
    void* last = nullptr;
    if (ucp_rkey_ptr(rkey, base, &first) != UCS_OK ||
        ucp_rkey_ptr(rkey, base + length - 1, &last) != UCS_OK ||
        static_cast<uint8_t*>(last) != static_cast<uint8_t*>(first) + length - 1) {
      ucp_rkey_destroy(rkey);
      return nullptr;
    }
    mapped_keys_[first] = rkey;  // the mapping lives as long as the rkey
    return first;
  }

  void free_mappable(const std::shared_ptr<MemoryRegion>& region) override {
    std::erase_if(allocated_, [&](const auto& r) { return r == region; });
  }

  void unmap_remote(void* mapped) override {
    auto it = mapped_keys_.find(mapped);
    if (it == mapped_keys_.end()) return;
    ucp_rkey_destroy(it->second);
    mapped_keys_.erase(it);
  }

  void doorbell(int peer) override {
    count_doorbell();
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    void* r = ucp_am_send_nbx(ep(peer), kDoorbellAm, nullptr, 0, nullptr, 0, &p);
    // Fire and forget: UCX completes a freed request in the background.
    if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);
  }

  RequestPtr send(int peer, uint64_t tag, const void* data, size_t length) override {
    auto req = std::make_shared<UcxRequest>(this, peer);
    count_control_message();
    // Small messages usually leave at once (UCX copies them into the shared-memory FIFO or
    // the socket buffer); only when UCX must keep the buffer do we make our own copy.
    ucp_request_param_t imm{};
    imm.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    void* r = ucp_tag_send_nbx(ep(peer), data, length, tag, &imm);
    if (r == nullptr) {
      req->complete();
      return req;
    }
    if (UCS_PTR_STATUS(r) != UCS_ERR_NO_RESOURCE) {
      track(req, r, "send to");
      return req;
    }
    req->payload.assign(static_cast<const uint8_t*>(data),
                        static_cast<const uint8_t*>(data) + length);
    post_send(req, req->payload.data(), length, tag);
    return req;
  }

  RequestPtr recv(int peer, uint64_t tag, void* buffer, size_t capacity) override {
    auto req = std::make_shared<UcxRequest>(this, peer);
    post_recv(req, buffer, capacity, tag);
    return req;
  }

  bool needs_registered_source() const override { return false; }

  RequestPtr write(const MemoryRegion& src, size_t src_offset, const RemoteRegion& dst,
                   size_t dst_offset, size_t length, uint64_t signal) override {
    const int peer = dst.peer();
    auto req = std::make_shared<UcxRequest>(this, peer);
    count_write(peer, length);
    const auto* from = static_cast<const uint8_t*>(src.base()) + src_offset;
    if (!use_put(peer, length)) {
      post_send(req, from, length, signal);
      return req;
    }
    // Put protocol: data, then flush (remote completion), then the notification.
    const auto& remote = static_cast<const UcxRemoteRegion&>(dst);
    if (length > 0) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.send = [](void* r, ucs_status_t, void*) { ucp_request_free(r); };
      void* r = ucp_put_nbx(ep(peer), from, length, remote.base() + dst_offset, remote.rkey, &p);
      if (UCS_PTR_IS_ERR(r)) {
        req->fail("UCX put to rank " + std::to_string(peer) + ": " + status_str(UCS_PTR_STATUS(r)));
        return req;
      }
    }
    req->signal = signal;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = [](void* r, ucs_status_t status, void* user) {
      auto* q = static_cast<UcxRequest*>(user);
      ucp_request_free(r);
      q->ucx = nullptr;
      q->owner->flushed(q, status);
    };
    p.user_data = req.get();
    void* r = ucp_ep_flush_nbx(ep(peer), &p);
    if (UCS_PTR_IS_ERR(r)) {
      req->fail("UCX flush to rank " + std::to_string(peer) + ": " + status_str(UCS_PTR_STATUS(r)));
    } else if (r == nullptr) {
      send_notification(req);
    } else {
      req->ucx = r;
      hold(req);
    }
    return req;
  }

  RequestPtr expect(int peer, MemoryRegion& region, size_t offset, size_t length,
                    uint64_t signal) override {
    auto req = std::make_shared<UcxRequest>(this, peer);
    if (!use_put(peer, length)) {
      req->expected_length = length;
      post_recv(req, static_cast<uint8_t*>(region.base()) + offset, length, signal);
    } else {
      req->payload.resize(sizeof(uint64_t));
      req->expected_length = sizeof(uint64_t);
      post_recv(req, req->payload.data(), req->payload.size(), signal);
    }
    return req;
  }

  void cancel(const RequestPtr& request) override {
    auto* req = static_cast<UcxRequest*>(request.get());
    if (req->state() != Request::State::Pending) return;
    if (req->ucx) {
      ucp_request_cancel(worker_, req->ucx);
      // Cancellation completes through the callback; drive it so the buffer is released now.
      const auto deadline = Clock::now() + std::chrono::seconds(1);
      while (req->ucx && Clock::now() < deadline)
        ucp_worker_progress(worker_);
    }
    if (req->state() == Request::State::Pending) req->fail("cancelled");
  }

  bool progress() override {
    bool any = ucp_worker_progress(worker_) != 0;
    while (!pending_notifications_.empty()) {
      auto req = std::move(pending_notifications_.front());
      pending_notifications_.pop_front();
      send_notification(req);
      any = true;
    }
    // Only after a peer was marked failed: a scan of every peer per progress() would cost O(p)
    // on the hot path. (A failure marked during the scan sets the flag again.)
    if (close_failed_) {
      close_failed_ = false;
      for (auto& slot : peers_) {
        if (slot->failure && slot->ep && !slot->close_pending) {
          slot->close_pending = true;
          ucp_request_param_t p{};
          p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
          p.flags = UCP_EP_CLOSE_FLAG_FORCE;
          void* r = ucp_ep_close_nbx(slot->ep, &p);
          if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);
          slot->ep = nullptr;
          any = true;
        }
      }
    }
    return any;
  }

  bool prepare_wait() override {
    if (efd_ < 0) {  // no wakeup support: yield instead of blocking
      sched_yield();
      return false;
    }
    return ucp_worker_arm(worker_) != UCS_ERR_BUSY;  // busy: events are pending
  }

  // Also wake when a same-host peer exits.
  void wait_fds(std::vector<pollfd>& fds) override {
    fds.push_back({efd_, POLLIN, 0});
    for (int fd : liveness_.fds())
      fds.push_back({fd, POLLIN, 0});
  }

  std::optional<std::string> peer_failure(int peer) override {
    if (peer < 0 || static_cast<size_t>(peer) >= peers_.size()) return std::nullopt;
    PeerSlot& slot = *peers_[peer];
    if (!slot.failure) {
      slot.failure = liveness_.failure(peer);
      if (slot.failure) close_failed_ = true;
    }
    return slot.failure;
  }

  // UCX owns its endpoints' resources; what we report is how many we opened (on first use).
  Footprint footprint() const override {
    Footprint f;
    f.connected_peers = endpoints_created_;
    return f;
  }

  void flushed(UcxRequest* req, ucs_status_t status) {
    auto keep = release(req);
    if (!keep) return;
    if (status != UCS_OK) {
      req->fail("UCX flush to rank " + std::to_string(req->peer()) + ": " + status_str(status));
      return;
    }
    pending_notifications_.push_back(std::move(keep));
  }

 private:
  // Both sides of a write evaluate this alike, so writer and receiver agree on the protocol.
  bool use_put(int peer, size_t length) const {
    if (protocol_ == Protocol::Put) return true;
    if (protocol_ == Protocol::Tag) return false;
    return shm_ && peers_[peer]->same_host && length <= kPutMaxBytes;
  }

  ucp_ep_h ep(int peer) {
    if (peer < 0 || static_cast<size_t>(peer) >= peers_.size()) {
      throw InvalidArgument("UCX transport: no such peer rank " + std::to_string(peer));
    }
    PeerSlot& slot = *peers_[peer];
    if (slot.failure) throw PeerFailure("rank " + std::to_string(peer) + ": " + *slot.failure);
    if (slot.ep) return slot.ep;
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = reinterpret_cast<const ucp_address_t*>(addresses_[peer].data());
    // UCX 1.13 drops its shared-memory transports from endpoints that ask for peer failure
    // handling (it would use tcp over loopback: 3-6x slower). Peers on this host are watched
    // through a pidfd instead, so only remote peers need UCX's error handling.
    p.err_mode = slot.same_host ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t status) {
      auto* s = static_cast<PeerSlot*>(arg);
      s->owner->close_failed_ = true;
      s->failure =
          "connection to rank " + std::to_string(s->rank) + " failed (" + status_str(status) + ")";
    };
    p.err_handler.arg = &slot;
    check(ucp_ep_create(worker_, &p, &slot.ep), "ucp_ep_create to rank " + std::to_string(peer));
    ++endpoints_created_;
    if (auto gone = liveness_.watch(peer)) {
      slot.failure = gone;
      close_failed_ = true;
    }
    return slot.ep;
  }

  // In-flight requests: kept alive until UCX's callback, and cancelled at shutdown. A vector
  // with each request's index (swap-remove) costs no hashing or allocation per message.
  void hold(const std::shared_ptr<UcxRequest>& req) {
    req->slot = inflight_.size();
    inflight_.push_back(req);
  }

  std::shared_ptr<UcxRequest> release(UcxRequest* req) {
    const size_t i = req->slot;
    if (i >= inflight_.size() || inflight_[i].get() != req) return nullptr;
    std::shared_ptr<UcxRequest> keep = std::move(inflight_[i]);
    if (i + 1 != inflight_.size()) {
      inflight_[i] = std::move(inflight_.back());
      inflight_[i]->slot = i;
    }
    inflight_.pop_back();
    req->slot = SIZE_MAX;
    return keep;
  }

  // `what` ("send to", "receive from"): the error message is built only on failure.
  void track(const std::shared_ptr<UcxRequest>& req, void* r, const char* what) {
    if (r == nullptr) {
      req->complete(req->expected_length);
    } else if (UCS_PTR_IS_ERR(r)) {
      req->fail(std::string(what) + " rank " + std::to_string(req->peer()) + ": " +
                status_str(UCS_PTR_STATUS(r)));
    } else {
      req->ucx = r;
      hold(req);
    }
  }

  void finish(UcxRequest* req, ucs_status_t status, size_t length, const char* what) {
    const std::shared_ptr<UcxRequest> keep = release(req);
    if (status == UCS_OK) {
      if (req->expected_length && length != req->expected_length) {
        req->fail(std::string(what) + " from rank " + std::to_string(req->peer()) + ": expected " +
                  std::to_string(req->expected_length) + " bytes, got " + std::to_string(length));
      } else {
        req->complete(length);
      }
    } else if (status == UCS_ERR_CANCELED) {
      req->fail("cancelled");
    } else {
      req->fail(std::string(what) + " with rank " + std::to_string(req->peer()) + ": " +
                status_str(status));
    }
  }

  void post_send(const std::shared_ptr<UcxRequest>& req, const void* data, size_t length,
                 uint64_t tag) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = [](void* r, ucs_status_t status, void* user) {
      auto* q = static_cast<UcxRequest*>(user);
      ucp_request_free(r);
      q->ucx = nullptr;
      q->owner->finish(q, status, 0, "send");
    };
    p.user_data = req.get();
    void* r = ucp_tag_send_nbx(ep(req->peer()), data, length, tag, &p);
    track(req, r, "send to");
  }

  void post_recv(const std::shared_ptr<UcxRequest>& req, void* buffer, size_t capacity,
                 uint64_t tag) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv = [](void* r, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
      auto* q = static_cast<UcxRequest*>(user);
      ucp_request_free(r);
      q->ucx = nullptr;
      q->owner->finish(q, status, status == UCS_OK ? info->length : 0, "receive");
    };
    p.user_data = req.get();
    // UCX 1.13 can complete a receive at once without filling recv_info's length, so always
    // take the callback path, which reports it.
    p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    void* r = ucp_tag_recv_nbx(worker_, buffer, capacity, tag, ~uint64_t{0}, &p);
    track(req, r, "receive from");
  }

  void send_notification(const std::shared_ptr<UcxRequest>& req) {
    req->payload.resize(sizeof(uint64_t));
    std::memcpy(req->payload.data(), &req->signal, sizeof(uint64_t));
    try {
      post_send(req, req->payload.data(), req->payload.size(), req->signal);
    } catch (const Error& e) {
      req->fail(e.what());
    }
  }

  Protocol protocol_;
  bool close_failed_ = false;  // a peer was marked failed: progress() closes its endpoint
  size_t max_message_ = settings::count("RDMACOLL_TEST_MAX_MESSAGE", SIZE_MAX);
  uint64_t endpoints_created_ = 0;
  bool shm_;
  std::string rndv_thresh_;  // set by us, when not by the user
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::string host_;
  PeerLiveness liveness_;
  Bytes address_;
  int my_rank_ = -1;
  std::vector<Bytes> addresses_;
  std::vector<std::unique_ptr<PeerSlot>> peers_;
  std::vector<std::shared_ptr<UcxRequest>> inflight_;
  std::map<void*, ucp_rkey_h> mapped_keys_;  // map_remote()'s pointers
  // Mappable regions live as long as the transport until free_mappable(): a peer may map ours
  // after we are done with the group (it maps during its own call), and UCX 1.13 crashes
  // when unpacking the key of shared memory that is already gone.
  std::vector<std::shared_ptr<UcxMemoryRegion>> allocated_;
  std::deque<std::shared_ptr<UcxRequest>> pending_notifications_;
};

}  // namespace

std::unique_ptr<Transport> create_ucx_transport() {
  return std::make_unique<UcxTransport>();
}

}  // namespace rdmacoll::transport
