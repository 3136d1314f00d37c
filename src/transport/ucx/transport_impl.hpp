#pragma once
// The UCX transport's class, shared by the files that implement it: ucx_transport.cpp (the
// Transport interface: messages, writes, progress), memory.cpp (registration and shared-memory
// mapping), requests.cpp (UCX requests and their completions, endpoints). Nothing outside
// src/transport/ucx includes it.

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
#include "transport/ucx/ucx_transport.hpp"

namespace rdmacoll::transport::ucx_impl {

inline std::string status_str(ucs_status_t s) {
  return ucs_status_string(s);
}

inline void check(ucs_status_t s, const std::string& what) {
  if (s != UCS_OK) throw TransportError("UCX: " + what + " failed: " + status_str(s));
}

enum class Protocol { Auto, Tag, Put };

inline Protocol protocol_from_env() {
  using settings::kUcxProtocol;
  const auto s = settings::read(kUcxProtocol);
  return s == kUcxProtocol.value("put")   ? Protocol::Put
         : s == kUcxProtocol.value("tag") ? Protocol::Tag
                                          : Protocol::Auto;
}

// UCX_TLS that leaves out every shared-memory transport (e.g. "tcp") forces the network even
// between processes of one host.
inline bool shared_memory_allowed() {
  const char* v = std::getenv("UCX_TLS");
  if (!v || !*v) return true;
  const std::string tls = v;
  for (const char* t : {"all", "sm", "shm", "posix", "sysv", "cma", "xpmem", "knem"}) {
    if (tls.find(t) != std::string::npos) return true;
  }
  return false;
}

// Over shared memory put + flush + notify beats tagged messages for small writes, is close at
// 1 MiB and loses at 16 MiB; with more ranks than cores, large puts collapse because their
// completion needs the sleeping peer to progress. Over TCP UCX emulates put and tagged
// messages win at every size (scripts/measure-core.sh; docs/performance.md, the code's
// thresholds).
constexpr size_t kPutMaxBytes = 64u << 10;

// On one machine with a core for every rank, UCX's rendezvous (one CMA copy straight into the
// posted receive) beats its eager path (copied into a shared FIFO and out again) from here up;
// 8 KiB still goes faster inline. With more ranks than cores a rendezvous waits for the peer
// to be scheduled, and inline wins (docs/performance.md, the code's thresholds).
constexpr size_t kSingleCopyBytes = 16u << 10;

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
  bool reset_by_peer = false;  // its host reset the connection: the process is gone
  bool close_pending = false;
};

class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(CreateHints hints = {});

  ~UcxTransport() override;

  std::string name() const override { return "ucx"; }
  // Any length; RDMACOLL_TEST_MAX_MESSAGE caps it in tests, so that the engine's paths for a
  // transport with a limit (verbs: 4 KiB) run over TCP in CI too.
  size_t max_message_bytes() const override { return max_message_; }

  std::string describe() const override;

  Bytes address(int, int) override { return address_; }

  void connect(int my_rank, const std::vector<Bytes>& addresses) override;

  std::shared_ptr<MemoryRegion> register_memory(void* base, size_t length) override;

  std::unique_ptr<RemoteRegion> unpack_remote(int peer, uint64_t base, size_t length,
                                              std::span<const uint8_t> packed_key) override;

  std::shared_ptr<MemoryRegion> allocate_mappable(size_t length) override;

  // Works when UCX reached the peer's memory through a shared-memory transport that maps
  // it (sysv or posix); otherwise (cma, tcp) there is no pointer and the caller falls back.
  void* map_remote(int peer, uint64_t base, size_t length,
                   std::span<const uint8_t> packed_key) override;

  void free_mappable(const std::shared_ptr<MemoryRegion>& region) override;

  void unmap_remote(void* mapped) override;

  void doorbell(int peer) override;

  RequestPtr send(int peer, uint64_t tag, const void* data, size_t length) override;

  RequestPtr recv(int peer, uint64_t tag, void* buffer, size_t capacity) override;

  bool needs_registered_source() const override { return false; }
  size_t single_copy_bytes() const override { return single_copy_; }

  RequestPtr write(const MemoryRegion& src, size_t src_offset, const RemoteRegion& dst,
                   size_t dst_offset, size_t length, uint64_t signal) override;

  RequestPtr expect(int peer, MemoryRegion& region, size_t offset, size_t length,
                    uint64_t signal) override;

  void cancel(const RequestPtr& request) override;

  bool progress() override;

  bool prepare_wait() override;

  // Also wake when a same-host peer exits.
  void wait_fds(std::vector<pollfd>& fds) override;

  std::optional<std::string> peer_failure(int peer) override;
  bool peer_exited(int peer) override;
  void close_without_flush() override { close_without_flush_ = true; }
  int peer_pid(int peer) const override { return liveness_.pid_of(peer); }
  bool read_peer(int peer, uint64_t address, void* dst, size_t length) override;
  bool can_read_peer(int peer, uint64_t address) override;

  // UCX owns its endpoints' resources; what we report is how many we opened (on first use).
  Statistics statistics() const override {
    Statistics s = Transport::statistics();
    s.footprint = footprint();
    return s;
  }
  Footprint footprint() const;

  void flushed(UcxRequest* req, ucs_status_t status);

 private:
  pid_t readable_pid(int peer) const;  // read_peer()'s process, or 0

  // Both sides of a write evaluate this alike, so writer and receiver agree on the protocol.
  bool use_put(int peer, size_t length) const;

  ucp_ep_h ep(int peer);

  // In-flight requests: kept alive until UCX's callback, and cancelled at shutdown. A vector
  // with each request's index (swap-remove) costs no hashing or allocation per message.
  void hold(const std::shared_ptr<UcxRequest>& req);

  std::shared_ptr<UcxRequest> release(UcxRequest* req);

  // `what` ("send to", "receive from"): the error message is built only on failure.
  void track(const std::shared_ptr<UcxRequest>& req, void* r, const char* what);

  void finish(UcxRequest* req, ucs_status_t status, size_t length, const char* what);

  void post_send(const std::shared_ptr<UcxRequest>& req, const void* data, size_t length,
                 uint64_t tag);

  void post_recv(const std::shared_ptr<UcxRequest>& req, void* buffer, size_t capacity,
                 uint64_t tag);

  void send_notification(const std::shared_ptr<UcxRequest>& req);

  Protocol protocol_;
  bool close_failed_ = false;         // a peer was marked failed: progress() closes its endpoint
  bool close_without_flush_ = false;  // abort_process_group: endpoints are forced closed
  size_t max_message_ = settings::read(settings::kTestMaxMessage).value_or(SIZE_MAX);
  uint64_t endpoints_created_ = 0;
  bool shm_;
  bool peer_reads_;                // RDMACOLL_PEER_READS
  std::string rndv_thresh_;        // set by us, when not by the user
  size_t single_copy_ = SIZE_MAX;  // single_copy_bytes(): from our rendezvous threshold
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
  // Flushes UCX has not completed: they complete in progress() with no event on the worker's
  // fd (cma's puts finish locally), so a wait must not block on that fd while any is out.
  size_t flushes_in_flight_ = 0;
};

}  // namespace rdmacoll::transport::ucx_impl
