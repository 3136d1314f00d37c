// The verbs transport (transport_impl.hpp says which file holds what): the Transport interface.
#include "transport/verbs/transport_impl.hpp"

namespace rdmacoll::transport {
namespace verbs_impl {

VerbsTransport::VerbsTransport(const std::string& preferred_device)
    : dev_(preferred_device), port_(dev_.retry_budget()) {
  piece_bytes_ = write_piece_bytes();
  lanes_ = lanes_per_peer();
  adaptive_routing_ =
      settings::read(settings::kIbAdaptiveRouting) == settings::kIbAdaptiveRouting.value("1");
  log::info("verbs: writes in pieces of " + std::to_string(piece_bytes_) + " B over " +
            std::to_string(lanes_) + (lanes_ == 1 ? " QP" : " QPs") +
            " per peer, and one for control");
  // An int: verbs.h's ibv_reg_mr macro ANDs the flags with another enum's, which clang
  // rejects in C++20 (-Wdeprecated-enum-enum-conversion).
  // Relaxed ordering lets PCIe reorder the NIC's writes where the device supports it (an
  // optional flag: ignored by devices without it); completions still order what we read.
  constexpr int kDataAccess =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_RELAXED_ORDERING;
  ibv_pd* pd = dev_.pd;
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
  const char* ucx_events = std::getenv("UCX_MEM_EVENTS");  // UCX's own setting, not ours
  if (ucx_events && (std::string(ucx_events) == "no" || std::string(ucx_events) == "n" ||
                     std::string(ucx_events) == "0")) {
    no_events = "UCX_MEM_EVENTS=" + std::string(ucx_events);
  } else if (const ucs_status_t st = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, 1000,
                                                           &VerbsTransport::on_unmap, this);
             st != UCS_OK) {
    no_events = std::string("ucm_set_event_handler: ") + ucs_status_string(st);
  } else {
    hooked_ = true;
    if (!probe_unmap_event()) no_events = "a probe munmap or free() raised no event";
  }
  if (!no_events.empty()) {
    cache_->disable();
    log::info("verbs: no memory events (" + no_events +
              "): registration cache off, every call registers its buffers");
  }
}

VerbsTransport::~VerbsTransport() {
  // ucm holds its handler lock while a handler runs: none runs once this returns.
  if (hooked_) ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, &VerbsTransport::on_unmap, this);
  cache_->unpin_all();
  cache_->clear();
  // Verbs frees in dependency order: QPs before the SRQ and CQ they use, registrations before
  // the PD.
  for (auto& p : peers_) {
    for (auto& lane : p.lanes)
      lane.qp.reset();
    p.eager.mr.reset();
    p.eager.block.reset();
  }
  srq_.reset();
  receive_chunks_.clear();
  sends_.release_buffers();
  // The device (the CQ, its channel, the PD) goes last, as a member declared first.
}

std::string VerbsTransport::describe() const {
  return "verbs on " + dev_.choice.device + ":" + std::to_string(dev_.choice.port) + " gid_index " +
         std::to_string(dev_.choice.gid_index) + " (" +
         (dev_.port.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand") +
         ", active_mtu " + std::to_string(128 << dev_.port.active_mtu) + ")";
}

std::shared_ptr<MemoryRegion> VerbsTransport::register_memory(void* base, size_t length) {
  return std::make_shared<VerbsMemoryRegion>(base, length, cache_->get(base, length));
}

std::shared_ptr<MemoryRegion> VerbsTransport::pin_memory(void* base, size_t length) {
  return std::make_shared<VerbsMemoryRegion>(base, length, cache_->pin(base, length));
}

void VerbsTransport::forget_registration(const MemoryRegion& region) {
  cache_->evict(reinterpret_cast<uintptr_t>(region.base()), region.length());
}

std::unique_ptr<RemoteRegion> VerbsTransport::unpack_remote(int peer, uint64_t base, size_t length,
                                                            std::span<const uint8_t> packed_key) {
  uint32_t rkey = 0;
  if (packed_key.size() == 4) std::memcpy(&rkey, packed_key.data(), 4);
  return std::make_unique<VerbsRemoteRegion>(peer, base, length, rkey);
}

RequestPtr VerbsTransport::send(int peer, uint64_t tag, const void* data, size_t length) {
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
  const uint64_t id = sends_.track(req);
  // The send queue holds the request until its completion, and a failed peer's backlog is dropped,
  // so the raw pointer outlives every call of the builder (no lookup per message).
  VerbsRequest* const r = req.get();
  // Into the peer's eager slots where both sides have a ring, else as a SEND: one path per peer
  // (decided when the work request is built, once the pair has connected), so messages arrive
  // in the order they were sent, which point-to-point matching relies on. A message waits for
  // a free slot, or for a receive credit (a SEND takes one of the peer's receives).
  submit(peer, control_lane(), [this, peer, id, r, msg = std::move(msg)](Staged& st) mutable {
    Peer& p = peers_[peer];
    const bool eager = eager_.uses_slots(peer);
    if (eager && !eager_.slot_free(peer)) return false;
    if (!eager && !take_receive_credit(peer)) return false;
    Bytes framed;
    if (eager) {
      uint64_t tag = 0;
      std::memcpy(&tag, msg.data(), 8);
      framed = eager_.frame(peer, tag, std::span<const uint8_t>(msg).subspan(8));
    }
    Bytes& bytes = eager ? framed : msg;
    if (bytes.size() <= inline_max_) {
      // Inline: the post copies the bytes into the work request; no send buffer.
      st.sge.length = static_cast<uint32_t>(bytes.size());
      st.inline_bytes = std::move(bytes);  // built once: a backlog never retries this branch
      st.wr.send_flags = IBV_SEND_INLINE;
      ++counters_.inline_sends;
    } else {
      const int slot = sends_.take_buffer(*r);
      if (slot < 0) {
        if (!eager) --p.credits.used;  // not posted: the credit stays ours
        return false;
      }
      uint8_t* buf = sends_.buffer(slot);
      std::memcpy(buf, bytes.data(), bytes.size());
      st.sge = {reinterpret_cast<uint64_t>(buf), static_cast<uint32_t>(bytes.size()),
                sends_.buffer_lkey()};
    }
    st.wr.wr_id = make_wr_id(kSendWr, peer, 0);
    st.request = id;
    if (eager) {
      r->eager = true;
      eager_.take_slot(peer, st);
    } else {
      st.wr.opcode = IBV_WR_SEND;
    }
    return true;
  });
  return req;
}

void VerbsTransport::submit(int peer, int lane, Build build, bool urgent) {
  touch(peer);
  if (peers_[peer].failure) {
    fail_all_of(peer);
    return;
  }
  sends_.submit(peer, lane, std::move(build), urgent);
}

bool VerbsTransport::lane_open(int peer, int lane) const {
  const Peer& p = peers_[peer];
  // Nothing new goes to a port that is down: it waits in its queue until the port is back
  // (or fails with the peers past the retry budget). Posting would only spend the QP's
  // retries, and a software device (rxe) fails a QP whose send finds no route at once.
  return p.link == Link::Ready && !p.failure && !data_lane_paused(peer, lane) && !port_.down();
}

void VerbsTransport::post_failed(int peer, int err) {
  mark_failed(peer, "ibv_post_send to rank " + std::to_string(peer) + " on " + dev_.choice.device +
                        " failed: " + errno_text(err));
}

void VerbsTransport::landed(int peer, const VerbsRequest& req) {
  if (req.eager) eager_.wake_if_asleep(peer);  // it has landed: now look at the epoch
  if (req.word) eager_.word_landed(peer, *req.word);
}

void VerbsTransport::keepalive() {
  // The transport's own writes read the port's events first (here and before a sleep's
  // announcement): one posted in the moments after the link went down, before progress()
  // looked, finds no route, and rxe fails the QP for it at once where a hardware NIC retries.
  // That made a 1 s flap fatal now and then (once a keepalive fell in that window).
  drain_async();
  if (port_.down()) return;
  std::vector<bool> waited(world_, false);
  for (const auto& [key, req] : pending_recvs_)
    waited[key.first] = true;
  for (const auto& [key, req] : expects_)
    waited[key.first] = true;
  for (int r = 0; r < world_; ++r) {
    Peer& p = peers_[r];
    // Also a peer our queued work waits on (a message waiting for its credit): nothing of it is
    // posted, so nothing would fail if its process died on a host that stays up.
    bool queued = false;
    bool posted = false;
    for (const Lane& l : p.lanes) {
      queued = queued || l.waiting();
      posted = posted || l.in_queue() > 0;
    }
    if (!(waited[r] || queued) || r == me_ || p.failure || p.link != Link::Ready || posted) {
      continue;
    }
    ++counters_.keepalives;
    log::trace("verbs: keepalive write to rank " + std::to_string(r));
    post_unawaited_write(r, [](Staged& st) {
      st.wr.opcode = IBV_WR_RDMA_WRITE;  // zero bytes: no address or key is checked
    });
  }
}

RequestPtr VerbsTransport::recv(int peer, uint64_t tag, void* buffer, size_t capacity) {
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

RequestPtr VerbsTransport::write(const MemoryRegion& src, size_t src_offset,
                                 const RemoteRegion& dst, size_t dst_offset, size_t length,
                                 uint64_t signal) {
  const int peer = dst.peer();
  auto req = std::make_shared<VerbsRequest>(peer);
  count_write(peer, length);
  const auto& local = static_cast<const VerbsMemoryRegion&>(src);
  const auto& remote = static_cast<const VerbsRemoteRegion&>(dst);
  req->source = local.registration;
  const uint64_t id = sends_.track(req);
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
    // With adaptive routing the last piece goes plain too, and a zero-byte WRITE WITH IMM
    // after it carries the immediate: a fabric may route plain writes adaptively (spread over
    // paths, placed out of order), and the immediate's completion then still follows every
    // byte of the lane, as NCCL's net_ib sends its data (a WITH IMM of data is not routed so).
    const bool with_imm = last && !adaptive_routing_;
    submit(peer, lane, [=, this](Staged& st) {
      // The immediate takes one of the peer's receives: not without a credit for it.
      if (with_imm && !take_receive_credit(peer)) return false;
      st.sge = {from, static_cast<uint32_t>(n), lkey};
      st.wr.wr_id = make_wr_id(kWriteWr, peer, 0, static_cast<uint32_t>(lane));
      st.request = id;
      st.wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
      st.wr.imm_data = htonl(imm);
      st.wr.wr.rdma.remote_addr = to;
      st.wr.wr.rdma.rkey = rkey;
      return true;
    });
    if (last && adaptive_routing_) {
      ++req->pieces;
      ++counters_.ordering_writes;
      submit(peer, lane, [=, this](Staged& st) {
        if (!take_receive_credit(peer)) return false;
        st.wr.wr_id = make_wr_id(kWriteWr, peer, 0, static_cast<uint32_t>(lane));
        st.request = id;
        st.wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;  // zero bytes: no address or key is checked
        st.wr.imm_data = htonl(imm);
        return true;
      });
    }
  }
  return req;
}

uint64_t VerbsTransport::reserve_token() {
  const uint32_t t = tokens_.reserve();
  if (t == UINT32_MAX) {
    throw TransportError("verbs: " + std::to_string(verbs_imm::kTokens) +
                         " calls expect writes at once; no token is left for another");
  }
  return t;
}

void VerbsTransport::release_token(uint64_t token, bool failed) {
  const auto t = static_cast<uint32_t>(token);
  tokens_.release(t, failed);
  // Early arrivals kept for the token's expects (a failed call never posted them) go with it.
  std::erase_if(arrived_,
                [t](const auto& kv) { return verbs_imm::token_of(kv.first.second) == t; });
}

RequestPtr VerbsTransport::expect(int peer, MemoryRegion&, size_t, size_t length, uint64_t signal) {
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

void VerbsTransport::cancel(const RequestPtr& request) {
  if (request->state() != Request::State::Pending) return;
  std::erase_if(expects_, [&](const auto& kv) { return kv.second.request == request; });
  for (auto it = pending_recvs_.begin(); it != pending_recvs_.end();) {
    std::erase(it->second, request);
    it = it->second.empty() ? pending_recvs_.erase(it) : std::next(it);
  }
  // Posted writes cannot be recalled; the group is broken after a cancel anyway.
  request->fail("cancelled");
}

bool VerbsTransport::progress() {
  // The port's events before anything is posted: after a sleep the async fd may be what woke us.
  const auto now = Clock::now();
  bool any = false;
  if (async_due_ || now >= next_async_check_) {
    async_due_ = false;
    next_async_check_ = now + kAsyncEventInterval;
    any = drain_async();
    check_port(now);
  }
  any = sends_.flush_all() || any;
  cache_->collect();  // deregisters what unmapped memory invalidated (not in the hook)
  any = completions_.poll(dev_.cq, *this) || any;
  repost_receives();
  hand_back_credits();
  any = eager_.poll() || any;
  any = advance_connections() || any;
  if (now >= next_keepalive_) {
    next_keepalive_ = now + kKeepaliveInterval;
    keepalive();
    retire_unflushed(now);
  }
  sends_.drain_backlogs();  // completions, connections and send buffers may have made room
  return sends_.flush_all() || any;
}

bool VerbsTransport::prepare_wait() {
  if (sends_.flush_all()) return false;  // nothing staged may wait for the next wake-up
  // What the connector brought since the last look first; later news writes its fd.
  if (!connecting_.empty() && connector_->generation() != connect_seen_) return false;
  if (!eager_.may_sleep()) {
    // Eager writes complete nothing here: tell the ring peers first (eager_ring.hpp). The
    // writes' completions wake us, and progress() looks at the rings after them.
    drain_async();  // as keepalive() does
    eager_.announce_sleep();
    return false;
  }
  if (dev_.armed()) {
    sleep_began_ = Clock::now();
    return true;
  }
  dev_.arm();
  return false;  // the caller progresses once more before sleeping: no lost wakeup
}

void VerbsTransport::wait_fds(std::vector<pollfd>& fds) {
  fds.push_back({dev_.channel->fd, POLLIN, 0});
  fds.push_back({dev_.ctx->async_fd, POLLIN, 0});
  if (connector_) fds.push_back({connector_->wake_fd(), POLLIN, 0});
  for (int fd : liveness_.fds())
    fds.push_back({fd, POLLIN, 0});
}

void VerbsTransport::after_wait() {
  async_due_ = true;  // the async-event fd may be what woke us
  const bool connecting = connector_ && connector_->clear_wake();
  const bool completion = dev_.take_event();
  // poll() gives up after 100 ms: a sleep that long which no completion or timer ended.
  eager_.slept(!completion && !connecting &&
               Clock::now() - sleep_began_ >= std::chrono::milliseconds(90));
}

Transport::Footprint VerbsTransport::footprint() const {
  Footprint f = verbs_plan::plan(connected_, static_cast<uint64_t>(lanes_), eager_.slots(),
                                 static_cast<uint64_t>(std::max(world_ - 1, 0)));
  f.cq_entries = cq_size_;
  f.sends_in_flight = static_cast<uint64_t>(sends_.in_flight());
  f.send_buffers_in_use = sends_.buffers_in_use();
  return f;
}

std::optional<std::string> VerbsTransport::peer_failure(int peer) {
  if (peer < 0 || peer >= world_) return std::nullopt;
  Peer& p = peers_[peer];
  if (!p.failure) {
    // A process seen gone: its QPs go to ERR as for any failure, so what was posted to it
    // is flushed now, not after the QPs' retries (tens of seconds).
    if (auto gone = liveness_.failure(peer)) mark_failed(peer, std::move(*gone));
  }
  return p.failure;
}

bool VerbsTransport::probe_unmap_event() {
  // A direct munmap, and glibc's own unmap inside free(): a tensor freed by torch's CPU
  // allocator goes that way, and a new one at the same address must not find the old
  // registration. In ucm's "reloc" mode only the first is seen (the PLT of our library, not
  // glibc's internal calls); then the cache is off. 64 MiB is past glibc's largest dynamic
  // mmap threshold (32 MiB), so the chunk is mmapped whatever was freed before; it is never
  // touched, so it costs no memory.
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* p = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  uint64_t before = cache_->stats().unmaps_seen;
  ::munmap(p, page);
  if (cache_->stats().unmaps_seen == before) return false;
  void* chunk = std::malloc(size_t{64} << 20);
  if (!chunk) return false;
  asm volatile("" : : "r"(chunk) : "memory");  // the compiler may not elide the pair
  before = cache_->stats().unmaps_seen;
  std::free(chunk);
  return cache_->stats().unmaps_seen > before;
}

void VerbsTransport::on_unmap(ucm_event_type_t, ucm_event_t* event, void* self) {
  static_cast<VerbsTransport*>(self)->cache_->invalidate(
      reinterpret_cast<uintptr_t>(event->vm_unmapped.address), event->vm_unmapped.size);
}

}  // namespace verbs_impl

using verbs_device::init_fork_safety;
using verbs_device::open_device;
using verbs_device::OpenDevice;
using verbs_impl::VerbsTransport;

VerbsDeviceChoice probe_verbs_device() {
  init_fork_safety();
  OpenDevice dev = open_device();
  if (dev.ctx) ibv_close_device(dev.ctx);
  return dev.choice;
}

void check_verbs_settings() {
  verbs_device::check_settings();
}

std::unique_ptr<Transport> create_verbs_transport(const std::string& preferred_device) {
  return std::make_unique<VerbsTransport>(preferred_device);
}

}  // namespace rdmacoll::transport
