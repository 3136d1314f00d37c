#pragma once
// The one interface the engine sees. Implementations: src/transport/ucx/, src/transport/verbs/.
//
// Model (after Gloo's device/pair/buffer, with one-sided writes as the data path):
//  - register_memory() exposes a local range; its packed_key() travels to peers, which turn it
//    into a RemoteRegion and write() into it at an offset.
//  - Every write carries a 64-bit signal. The receiver asks for that signal with expect() and
//    the expect request completes once the bytes have landed (RDMA WRITE WITH IMM on verbs;
//    put + flush + tagged notification or a tagged message straight into place on UCX).
//  - send()/recv() carry small control messages (call descriptors), matched by tag.
//  - progress() drives completions; wait_for_event() blocks (not spins) until something may
//    have happened or the deadline passes, so oversubscribed ranks yield the CPU.
// Requests never outlive their transport: cancel() them before the memory they touch goes away.
//
// Implementations are single-threaded; make_serialized() wraps one so that several threads
// (one per group running a collective) share it: every call under one lock, and one thread at
// a time blocked in the transport's fds while the others wait for it to report progress.

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace rdmacoll {
class Store;
}

namespace rdmacoll::transport {

using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

class MemoryRegion {
 public:
  MemoryRegion(void* base, size_t length) : base_(base), length_(length) {}
  virtual ~MemoryRegion() = default;
  void* base() const { return base_; }
  size_t length() const { return length_; }
  // What a peer needs (with base and length) to write here; may be empty.
  virtual Bytes packed_key() const = 0;

 private:
  void* base_;
  size_t length_;
};

// A peer's registered range, ready to be written to.
class RemoteRegion {
 public:
  RemoteRegion(int peer, uint64_t base, size_t length)
      : peer_(peer), base_(base), length_(length) {}
  virtual ~RemoteRegion() = default;
  int peer() const { return peer_; }
  uint64_t base() const { return base_; }
  size_t length() const { return length_; }

 private:
  int peer_;
  uint64_t base_;
  size_t length_;
};

// State is atomic: the thread that waits for a request may not be the one whose progress()
// completes it. length and error are written before the state is released.
class Request {
 public:
  enum class State { Pending, Done, Failed };
  virtual ~Request() = default;
  State state() const { return state_.load(std::memory_order_acquire); }
  bool done() const { return state() == State::Done; }
  bool failed() const { return state() == State::Failed; }
  const std::string& error() const { return error_; }
  int peer() const { return peer_; }
  // Bytes received (recv requests).
  size_t length() const { return length_; }

  void complete(size_t length = 0) {
    length_ = length;
    state_.store(State::Done, std::memory_order_release);
  }
  void fail(std::string why) {
    error_ = std::move(why);
    state_.store(State::Failed, std::memory_order_release);
  }
  // Failed because the peer refused it: the call it was for is over there (it failed and
  // dropped its registration), so that peer's own report says why (a ring call waits for it).
  void refuse(std::string why) {
    refused_ = true;
    fail(std::move(why));
  }
  bool refused() const { return refused_; }

 protected:
  explicit Request(int peer) : peer_(peer) {}

 private:
  std::atomic<State> state_{State::Pending};
  std::string error_;
  bool refused_ = false;
  int peer_;
  size_t length_ = 0;
};
using RequestPtr = std::shared_ptr<Request>;

class Transport {
 public:
  virtual ~Transport() = default;

  // "ucx" or "verbs", and a one-line description of devices/protocols for logs.
  virtual std::string name() const = 0;
  virtual std::string describe() const = 0;

  // Our address for a world of `world_size` ranks, published through the rendezvous store;
  // connect() takes every rank's (index = global rank). Endpoints may be created lazily.
  virtual Bytes address(int my_rank, int world_size) = 0;
  virtual void connect(int my_rank, const std::vector<Bytes>& addresses) = 0;
  // The store (the job's rendezvous, prefixed for this process group) through which a
  // transport that connects peers on first use exchanges what each connection needs; given
  // before connect(). Verbs publishes a peer's QP numbers there on first use and reads the
  // peer's, so a rank holds QPs only for the peers its schedules touch. The store must be safe
  // to call from the thread that runs progress().
  virtual void set_connection_store(std::shared_ptr<Store> /*store*/) {}
  // Whether it uses that store at all (a world met through PMIx opens one only then).
  virtual bool needs_connection_store() const { return false; }

  virtual std::shared_ptr<MemoryRegion> register_memory(void* base, size_t length) = 0;
  // Registers [base, base + length) once, for as long as the result is held: calls on memory
  // inside it then register nothing (verbs; symmetric memory across hosts). nullptr where a
  // call's registration costs nothing worth saving (UCX, in-process).
  virtual std::shared_ptr<MemoryRegion> pin_memory(void* /*base*/, size_t /*length*/) {
    return nullptr;
  }
  // After a failed call: stop reusing `region`'s registration (Call's cleanup, engine/call.hpp).
  virtual void forget_registration(const MemoryRegion& /*region*/) {}
  virtual std::unique_ptr<RemoteRegion> unpack_remote(int peer, uint64_t base, size_t length,
                                                      std::span<const uint8_t> packed_key) = 0;

  // Largest control message send() carries (the receiver's recv() capacity may not exceed it).
  virtual size_t max_message_bytes() const { return SIZE_MAX; }
  // Control messages (<= max_message_bytes()), copied before send() returns; matched by tag.
  virtual RequestPtr send(int peer, uint64_t tag, const void* data, size_t length) = 0;
  virtual RequestPtr recv(int peer, uint64_t tag, void* buffer, size_t capacity) = 0;

  // Whether write() needs its source inside a region from register_memory() (verbs: the
  // local key). UCX reads any memory, so the engine may send straight from the input.
  virtual bool needs_registered_source() const { return true; }

  // Writes of at least this many bytes move with one copy (UCX's CMA rendezvous on one
  // machine), so a chunk this large goes faster as a write into the final offset than inline
  // in a descriptor (copied in, then out). SIZE_MAX: no such size. The same on every rank of
  // a job (it follows from the job's placement, CreateHints).
  virtual size_t single_copy_bytes() const { return SIZE_MAX; }

  // The signals of one-sided writes are chosen by their receiver: a call that expects writes
  // reserves a token before its descriptor leaves, and every writer puts it in the signals of
  // what it writes there (write_signal(token, index)). Tokens are unique among the live ones of
  // this process, whatever group they serve, so one group's writes never complete another's
  // expects, however narrow the signal on the wire (verbs: 32-bit immediates). A call releases
  // its token when it ends; after a failure (`failed`) the token is fenced: writes that still
  // carry it land nowhere and complete nothing. The default: a 64-bit counter (UCX's tags are
  // 64 bits wide).
  virtual uint64_t reserve_token() { return next_token_++; }
  virtual void release_token(uint64_t /*token*/, bool /*failed*/) {}

  // One-sided write of src[src_offset, +length) into dst[dst_offset, +length) carrying
  // `signal` (write_signal: the receiver's token and an index). The caller has checked the
  // range against dst's length.
  virtual RequestPtr write(const MemoryRegion& src, size_t src_offset, const RemoteRegion& dst,
                           size_t dst_offset, size_t length, uint64_t signal) = 0;
  // Completes when the write carrying `signal` into region[offset, +length) has landed. A
  // second expect of a signal still expected is refused (TransportError), never overwritten.
  virtual RequestPtr expect(int peer, MemoryRegion& region, size_t offset, size_t length,
                            uint64_t signal) = 0;

  // Shared memory for load/store protocols (the engine's eager slots). allocate_mappable()
  // returns zeroed memory that same-host peers can map, or nullptr where the transport has
  // none (verbs, UCX without shared memory). The transport keeps it until free_mappable() (then
  // it goes with the caller's last reference) or its own end: a peer may still be about to map
  // it, and UCX 1.13 crashes unpacking the key of shared memory already gone. Peers that mapped
  // it keep their mapping until they unmap it. map_remote() turns a peer's (base, length, key)
  // into a pointer this process can load from and store to, or nullptr; the mapping lives
  // until unmap_remote(pointer) or the transport goes. A group frees its eager slots so when it
  // goes (each new_group once kept ~400 KiB of shared memory per rank to the end). doorbell() wakes
  // `peer` if it blocks in wait_for_event(); the message carries nothing and the receiving
  // transport consumes it.
  virtual std::shared_ptr<MemoryRegion> allocate_mappable(size_t /*length*/) { return nullptr; }
  virtual void* map_remote(int /*peer*/, uint64_t /*base*/, size_t /*length*/,
                           std::span<const uint8_t> /*packed_key*/) {
    return nullptr;
  }
  virtual void free_mappable(const std::shared_ptr<MemoryRegion>& /*region*/) {}
  virtual void unmap_remote(void* /*mapped*/) {}
  virtual void doorbell(int /*peer*/) {}

  // Copies `length` bytes at `address` in `peer`'s memory into `dst`, for protocols in which the
  // receiver pulls (on one host: a kernel copy, CMA's process_vm_readv). False where this
  // transport cannot read that peer's memory (another host, the kernel's ptrace rules, turned
  // off); throws PeerFailure if the peer is gone and TransportError if the range is not
  // readable there. Thread-safe: no lock of a serialized transport is taken for it.
  virtual bool read_peer(int /*peer*/, uint64_t /*address*/, void* /*dst*/, size_t /*length*/) {
    return false;
  }
  // Whether read_peer() of `peer`'s memory at `address` (a byte it holds) works: a probe, not
  // counted as data read.
  virtual bool can_read_peer(int /*peer*/, uint64_t /*address*/) { return false; }

  // Stops a pending request; afterwards it no longer touches its buffer.
  virtual void cancel(const RequestPtr& request) = 0;

  // Drives completions; returns true if any progress was made.
  virtual bool progress() = 0;
  // Blocks until progress may be possible or `deadline` passes (at most 100 ms, so callers
  // recheck peers and deadlines): prepare_wait(), a poll() of wait_fds(), after_wait().
  virtual void wait_for_event(Clock::time_point deadline);
  // Blocking in three parts, so that a serialized transport can poll without holding its lock:
  // prepare_wait() arms notifications and returns false when progress() should run again
  // first (events pending, or nothing to block on); wait_fds() appends the fds whose
  // readiness means progress may be possible; after_wait() consumes the wake-up. Only
  // prepare_wait() and after_wait() touch the transport's state.
  virtual bool prepare_wait() = 0;
  virtual void wait_fds(std::vector<pollfd>& fds) = 0;
  virtual void after_wait() {}

  // Work the transport gave the NIC and the kernel (verbs; zeros elsewhere): what a call costs
  // beyond its bytes.
  struct Counters {
    uint64_t work_requests = 0;   // send-queue work requests posted (sends and write pieces)
    uint64_t doorbells = 0;       // ibv_post_send calls: one doorbell each
    uint64_t signaled = 0;        // work requests that asked for a completion
    uint64_t inline_sends = 0;    // sends whose bytes went in the work request
    uint64_t completions = 0;     // completion-queue entries polled
    uint64_t event_syscalls = 0;  // reads of the async-event fd
    uint64_t keepalives = 0;      // zero-byte writes to peers waited on (dead-host detection)
    uint64_t striped_writes = 0;  // writes spread over more than one QP (RDMACOLL_IB_QPS_PER_PEER)
    uint64_t eager_writes = 0;    // control messages written into a peer's eager slots
    uint64_t eager_slot_waits = 0;  // tries to build an eager message with no free slot at the peer
    uint64_t eager_credit_writes = 0;  // credits written back (no message of ours carried them)
    uint64_t eager_sleeps = 0;         // sleeps announced to the peers that write our eager slots
    uint64_t eager_rings = 0;          // wake-ups rung at peers that announced a sleep
    uint64_t eager_late = 0;  // eager messages found after a sleep that ran to its timeout (0)
    uint64_t receive_credit_writes = 0;  // receive credits handed back to peers
    uint64_t credit_waits = 0;           // tries to build a receive-taking request without a credit
    uint64_t receive_queue_low = 0;      // the shared receive queue's low-water events
    uint64_t port_down_events = 0;       // our port went down (a warning until past the budget)
    uint64_t ordering_writes = 0;  // zero-byte WRITE WITH IMM after plain data (adaptive routing)
    uint64_t lane_resets = 0;      // a pair's data QPs reset after a write refused there (N3)
  };
  // What the transport holds for its connections (verbs: QPs, pinned control buffers, CQ
  // entries; zero where the library below owns them, as in UCX), and how many peers it has
  // opened a connection to (verbs: QPs, UCX: endpoints, both made on first use).
  struct Footprint {
    uint64_t queue_pairs = 0;
    uint64_t pinned_control_bytes = 0;
    uint64_t cq_entries = 0;
    uint64_t connected_peers = 0;
    // Verbs: work requests staged or posted (capped; each takes a CQ entry) and the shared
    // send buffers in use; both return to 0 once nothing is in flight, failures included.
    uint64_t sends_in_flight = 0;
    uint64_t send_buffers_in_use = 0;
  };
  // What the transport has done and holds, as one snapshot: for tests, logs and the benchmarks,
  // never read on a call's path (a serialized transport takes its lock for it).
  struct Statistics {
    uint64_t registrations = 0;  // memory registrations made (registration-cache misses)
    Counters counters;
    Footprint footprint;
    uint64_t doorbells_rung = 0;          // tests: a late writer woke a sleeping reader
    uint64_t control_messages_sent = 0;   // send()s: what the scale benchmark reports per call
    std::vector<uint64_t> bytes_written;  // data bytes write() sent, by peer (not control)
    uint64_t bytes_read = 0;              // data bytes read_peer() copied, from all peers
    uint64_t bytes_written_to(int peer) const {
      return peer >= 0 && static_cast<size_t>(peer) < bytes_written.size() ? bytes_written[peer]
                                                                           : 0;
    }
  };
  // The counts every transport keeps (below); implementations add their own parts.
  virtual Statistics statistics() const {
    Statistics s;
    s.doorbells_rung = doorbells_;
    s.control_messages_sent = control_messages_;
    s.bytes_written = bytes_to_;
    s.bytes_read = bytes_read_.load(std::memory_order_relaxed);
    return s;
  }

 protected:
  // Implementations call this from write().
  void count_write(int peer, size_t bytes) {
    if (static_cast<size_t>(peer) >= bytes_to_.size()) bytes_to_.resize(peer + 1, 0);
    bytes_to_[peer] += bytes;
  }
  void count_doorbell() { ++doorbells_; }
  // Implementations call this from read_peer(), which may run on several threads at once.
  void count_read(size_t bytes) { bytes_read_.fetch_add(bytes, std::memory_order_relaxed); }
  // Implementations call this from send().
  void count_control_message() { ++control_messages_; }

 public:
  // Set once a peer is known dead or unreachable (the reason), for peers we talked to.
  virtual std::optional<std::string> peer_failure(int peer) = 0;
  // The process is leaving without waiting for anyone (abort_process_group): connections are
  // closed at once when the transport goes, not flushed (a stopped peer would hold a flush).
  virtual void close_without_flush() {}
  // Whether `peer`'s process is known to have exited (its pidfd on this host, or a connection
  // its host reset): a rank destroy_process_group need not wait for. Stricter than
  // peer_failure, which also covers a peer alive but unreachable (a refused pair, a link down),
  // for which rank 0 must keep the store up.
  virtual bool peer_exited(int /*peer*/) { return false; }
  // The process id of `peer` on this host as it published it at init; 0 when it is on another
  // host or the transport does not know.
  virtual int peer_pid(int /*peer*/) const { return 0; }

 private:
  std::vector<uint64_t> bytes_to_;
  std::atomic<uint64_t> bytes_read_{0};
  uint64_t doorbells_ = 0;
  uint64_t control_messages_ = 0;
  uint64_t next_token_ = 0;
};

// A write's signal: 01 (2 bits, apart from the engine's control tags, 00 and 10) | the
// receiver's token (38) | an index the receiver tells its writes apart by (24: the first chunk
// of the range written).
inline constexpr uint64_t kTokenMask = (uint64_t{1} << 38) - 1;
inline uint64_t write_signal(uint64_t token, uint32_t index) {
  return (uint64_t{1} << 62) | ((token & kTokenMask) << 24) | (index & 0xffffff);
}
inline uint64_t signal_token(uint64_t signal) {
  return (signal >> 24) & kTokenMask;
}
inline uint32_t signal_index(uint64_t signal) {
  return static_cast<uint32_t>(signal & 0xffffff);
}

enum class TransportKind { Auto, Ucx, Verbs };

// What the job's placement tells a transport, the same on every rank.
struct CreateHints {
  // Every rank runs on one machine, with no more ranks than it has online CPUs: a peer is
  // there to answer a rendezvous at once, so UCX's single-copy path pays off from 16 KiB.
  bool one_uncrowded_machine = false;
};

// Creates the transport for `kind` (Verbs or Ucx; the caller resolves Auto, since every rank
// must agree). Throws TransportError with the reason when the kind is unavailable.
// `preferred_device`: the RDMA device nearest this rank (topology), used by verbs when it has an
// ACTIVE port and RDMACOLL_IB_DEVICE does not say otherwise.
std::unique_ptr<Transport> create_transport(TransportKind kind,
                                            const std::string& preferred_device = "",
                                            CreateHints hints = {});

// Wraps `inner` for use by several threads at once (see the top of this file).
std::unique_ptr<Transport> make_serialized(std::unique_ptr<Transport> inner);

// Why this process cannot use the verbs transport (no ACTIVE RDMA port, ...), or nullopt.
std::optional<std::string> verbs_unusable_reason();

// Parses every transport's settings that are set, whichever transport the job takes:
// InvalidArgument naming a bad one.
void check_settings();

}  // namespace rdmacoll::transport
