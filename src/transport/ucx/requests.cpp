// UCX requests: posting tagged sends and receives, their completions, endpoints.

#include "transport/ucx/transport_impl.hpp"

namespace rdmacoll::transport::ucx_impl {

void UcxTransport::flushed(UcxRequest* req, ucs_status_t status) {
  --flushes_in_flight_;
  auto keep = release(req);
  if (!keep) return;
  if (status != UCS_OK) {
    req->fail("UCX flush to rank " + std::to_string(req->peer()) + ": " + status_str(status));
    return;
  }
  pending_notifications_.push_back(std::move(keep));
}

bool UcxTransport::use_put(int peer, size_t length) const {
  if (protocol_ == Protocol::Put) return true;
  if (protocol_ == Protocol::Tag) return false;
  return shm_ && peers_[peer]->same_host && length <= kPutMaxBytes;
}

ucp_ep_h UcxTransport::ep(int peer) {
  if (peer < 0 || static_cast<size_t>(peer) >= peers_.size()) {
    throw InvalidArgument("UCX transport: no such peer rank " + std::to_string(peer));
  }
  PeerSlot& slot = *peers_[peer];
  if (slot.failure)
    throw PeerFailure("rank " + std::to_string(peer) + " is gone: " + *slot.failure);
  if (slot.ep) return slot.ep;
  // A peer on this host that has exited took its shared memory along: UCX would fail the
  // endpoint with "Shared memory error" (or crash unpacking its segment's key).
  const auto gone = [&] {
    slot.failure = liveness_.failure(peer).value_or(
        "process " + std::to_string(liveness_.pid_of(peer)) + " of rank " + std::to_string(peer) +
        " on this host is exiting");
    close_failed_ = true;
    return PeerFailure("rank " + std::to_string(peer) + " is gone: " + *slot.failure);
  };
  if (liveness_.gone_or_exiting(peer)) throw gone();
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
    s->reset_by_peer = status == UCS_ERR_CONNECTION_RESET;
    s->failure =
        "connection to rank " + std::to_string(s->rank) + " failed (" + status_str(status) + ")";
  };
  p.err_handler.arg = &slot;
  const ucs_status_t status = ucp_ep_create(worker_, &p, &slot.ep);
  if (status != UCS_OK && liveness_.gone_or_exiting(peer)) throw gone();
  check(status, "ucp_ep_create to rank " + std::to_string(peer));
  ++endpoints_created_;
  if (auto exited = liveness_.watch(peer)) {
    slot.failure = exited;
    close_failed_ = true;
  }
  return slot.ep;
}

void UcxTransport::hold(const std::shared_ptr<UcxRequest>& req) {
  req->slot = inflight_.size();
  inflight_.push_back(req);
}

std::shared_ptr<UcxRequest> UcxTransport::release(UcxRequest* req) {
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

void UcxTransport::track(const std::shared_ptr<UcxRequest>& req, void* r, const char* what) {
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

void UcxTransport::finish(UcxRequest* req, ucs_status_t status, size_t length, const char* what) {
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

void UcxTransport::post_send(const std::shared_ptr<UcxRequest>& req, const void* data,
                             size_t length, uint64_t tag) {
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

void UcxTransport::post_recv(const std::shared_ptr<UcxRequest>& req, void* buffer, size_t capacity,
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

void UcxTransport::send_notification(const std::shared_ptr<UcxRequest>& req) {
  req->payload.resize(sizeof(uint64_t));
  std::memcpy(req->payload.data(), &req->signal, sizeof(uint64_t));
  try {
    post_send(req, req->payload.data(), req->payload.size(), req->signal);
  } catch (const Error& e) {
    req->fail(e.what());
  }
}

}  // namespace rdmacoll::transport::ucx_impl
