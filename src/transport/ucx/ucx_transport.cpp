// The UCX transport (transport_impl.hpp says which file holds what): the Transport interface.
#include "transport/ucx/transport_impl.hpp"

namespace rdmacoll::transport {
namespace ucx_impl {

UcxTransport::UcxTransport(CreateHints hints)
    : protocol_(protocol_from_env()),
      shm_(shared_memory_allowed()),
      peer_reads_(settings::read(settings::kPeerReads) != settings::kPeerReads.value("0")) {
  ucp_config_t* config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  // Over TCP, UCX's "auto" rendezvous threshold (about 8 KiB) costs two extra round trips
  // per message: eager wins up to 512 KiB, rendezvous from 2 MiB. Shared memory keeps its
  // single-copy CMA rendezvous for large messages, but not below 128 KiB: a point-to-point
  // message inline (up to 64 KiB) would pay UCX's handshake on top of ours (the figures:
  // docs/performance.md, the code's thresholds). UCX_RNDV_THRESH wins. A job on one machine
  // with a core per rank has no TCP peer and a peer ready to answer: there the rendezvous wins
  // from kSingleCopyBytes, and chunks that large leave the inline path (single_copy_bytes()).
  if (!std::getenv("UCX_RNDV_THRESH")) {
    const bool single_copy = shm_ && hints.one_uncrowded_machine;
    rndv_thresh_ = single_copy ? std::to_string(kSingleCopyBytes) : shm_ ? "128K" : "512K";
    if (single_copy) {
      single_copy_ = kSingleCopyBytes;
      // Tagged messages then win at every size a write has: one CMA copy without put's
      // registration, rkey, flush and notification; below 16 KiB the engine sends inline.
      if (protocol_ == Protocol::Auto) protocol_ = Protocol::Tag;
    }
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

UcxTransport::~UcxTransport() {
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
    p.flags = slot->failure || close_without_flush_ ? UCP_EP_CLOSE_FLAG_FORCE : 0;
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

std::string UcxTransport::describe() const {
  const char* tls = std::getenv("UCX_TLS");
  return std::string("ucx ") + ucp_get_version_string() + " protocol=" +
         (protocol_ == Protocol::Tag   ? "tag"
          : protocol_ == Protocol::Put ? "put"
                                       : "auto") +
         " UCX_TLS=" + (tls ? tls : "(default)") +
         (rndv_thresh_.empty() ? "" : " RNDV_THRESH=" + rndv_thresh_);
}

void UcxTransport::connect(int my_rank, const std::vector<Bytes>& addresses) {
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

void UcxTransport::doorbell(int peer) {
  count_doorbell();
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_EAGER;
  void* r = ucp_am_send_nbx(ep(peer), kDoorbellAm, nullptr, 0, nullptr, 0, &p);
  // Fire and forget: UCX completes a freed request in the background.
  if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);
}

RequestPtr UcxTransport::send(int peer, uint64_t tag, const void* data, size_t length) {
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

RequestPtr UcxTransport::recv(int peer, uint64_t tag, void* buffer, size_t capacity) {
  auto req = std::make_shared<UcxRequest>(this, peer);
  post_recv(req, buffer, capacity, tag);
  return req;
}

RequestPtr UcxTransport::write(const MemoryRegion& src, size_t src_offset, const RemoteRegion& dst,
                               size_t dst_offset, size_t length, uint64_t signal) {
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
    ++flushes_in_flight_;
    hold(req);
  }
  return req;
}

RequestPtr UcxTransport::expect(int peer, MemoryRegion& region, size_t offset, size_t length,
                                uint64_t signal) {
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

void UcxTransport::cancel(const RequestPtr& request) {
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

bool UcxTransport::progress() {
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

bool UcxTransport::prepare_wait() {
  if (efd_ < 0) {  // no wakeup support: yield instead of blocking
    sched_yield();
    return false;
  }
  // Work that completes only by progress, with nothing to wake the fd: yield, then look again.
  if (flushes_in_flight_ > 0 || !pending_notifications_.empty()) {
    sched_yield();
    return false;
  }
  return ucp_worker_arm(worker_) != UCS_ERR_BUSY;  // busy: events are pending
}

void UcxTransport::wait_fds(std::vector<pollfd>& fds) {
  fds.push_back({efd_, POLLIN, 0});
  for (int fd : liveness_.fds())
    fds.push_back({fd, POLLIN, 0});
}

std::optional<std::string> UcxTransport::peer_failure(int peer) {
  if (peer < 0 || static_cast<size_t>(peer) >= peers_.size()) return std::nullopt;
  PeerSlot& slot = *peers_[peer];
  // Which process exited says more than the connection's error that may have come first.
  if (auto exited = liveness_.failure(peer); exited && slot.failure != exited) {
    slot.failure = std::move(exited);
    close_failed_ = true;
  } else if (!exited && slot.failure && liveness_.gone_or_exiting(peer)) {
    // Its connections close before its pidfd reports the exit (the address space goes in
    // between: long under ASan), so the connection's error can come while it is still exiting.
    slot.failure = "process " + std::to_string(liveness_.pid_of(peer)) + " of rank " +
                   std::to_string(peer) + " on this host is exiting";
  }
  return slot.failure;
}

bool UcxTransport::peer_exited(int peer) {
  if (peer < 0 || static_cast<size_t>(peer) >= peers_.size()) return false;
  return liveness_.failure(peer).has_value() || peers_[peer]->reset_by_peer;
}

Transport::Footprint UcxTransport::footprint() const {
  Footprint f;
  f.connected_peers = endpoints_created_;
  return f;
}

}  // namespace ucx_impl

using ucx_impl::UcxTransport;

std::unique_ptr<Transport> create_ucx_transport(CreateHints hints) {
  return std::make_unique<UcxTransport>(hints);
}

}  // namespace rdmacoll::transport
