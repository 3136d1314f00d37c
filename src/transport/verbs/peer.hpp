#pragma once
// One connected peer's state in the verbs transport, apart from the transport that wires the
// peers together: its QPs ("lanes") with their send queues, the link's state machine, the eager
// ring it writes into and we write into, the receive credits both ways, and its failure or data
// QP reset; and the requests, regions and address they exchange. The transport class
// (transport_impl.hpp) holds a Peer per rank and the state shared by all (CQ, SRQ, buffers).

#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/transport.hpp"
#include "transport/verbs/handles.hpp"
#include "transport/verbs/mr_cache.hpp"
#include "transport/verbs/receive_credits.hpp"

namespace rdmacoll::transport::verbs_impl {

using verbs_plan::CountWord;
using verbs_plan::ReceiveCredits;
using verbs_plan::WordWriter;

// The words a peer writes into our block, and we into its (eager_ring.hpp's lines).
enum class Word : uint8_t { EagerCredit, SleepEpoch, ReceiveCredit };
constexpr int kWords = 3;

// wr_id: kind (2 bits) | lane (6) | peer (24) | the lane's work-request number, or receive slot
// (32). Every work request has a number of its own, so a completion names exactly one; the
// lane's Posted entry maps it to its request (64-bit ids, which never wrap).
enum WrKind : uint64_t { kRecvWr = 0, kSendWr = 1, kWriteWr = 2 };
inline uint64_t make_wr_id(WrKind kind, uint32_t peer, uint32_t id, uint32_t lane = 0) {
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
  std::optional<Word> word;  // a write of one of our block's words (WordWriter)
  // The registration a write reads from, held until its work requests retire: a failed call
  // drops its buffers' registrations while its writes may still be posted, and a region
  // deregistered under a posted write fails it with a protection error, which would fail the
  // healthy peer it was going to.
  std::shared_ptr<const MrCache::Region> source;
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
  uint8_t lanes;         // RDMACOLL_IB_QPS_PER_PEER: must match on every rank
  uint8_t gid_type;      // fabric::GidType of the GID in use
  uint16_t pkey;         // the P_Key our QPs use (fabric::incompatibility checks the pair)
  uint32_t piece_bytes;  // RDMACOLL_IB_CHUNK: how the sender cuts (the receiver counts lanes)
  char device[24];       // "mlx5_0:1", for errors that name both ends (cut to fit)
  // A peer's QP numbers travel later, through the store, when the pair first talks.
};

// How many lanes a write of `length` bytes, cut into pieces of `piece` bytes, uses: the
// sender stripes and the receiver counts arrivals by the same rule.
inline int lanes_used(size_t length, size_t piece, int lanes) {
  const size_t pieces = std::max<size_t>(1, (length + piece - 1) / piece);
  return static_cast<int>(std::min<size_t>(pieces, static_cast<size_t>(lanes)));
}

// Memory from aligned_alloc, freed with the owner (the eager ring's block).
struct FreeAligned {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBlock = std::unique_ptr<uint8_t, FreeAligned>;

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
  verbs_handles::QueuePair qp;
  std::deque<Posted> posted;   // on the send queue, in post order
  std::vector<Staged> staged;  // built since the last flush
  int since_signal = 0;
  uint32_t next_number = 0;  // for the next posted work request
  uint32_t reset_below = 0;  // numbers below this were posted before the QP's last reset
  uint32_t their_qpn = 0;    // the peer's QP this one is paired with
  // Work waiting for send-queue room or a send buffer: fills a Staged, false when it cannot.
  std::deque<std::function<bool(Staged&)>> backlog;
  // The transport's own writes waiting for room (kUrgentPerQp): staged before the backlog.
  std::deque<std::function<bool(Staged&)>> urgent;
  size_t in_queue() const { return posted.size() + staged.size(); }
  bool waiting() const { return !backlog.empty() || !urgent.empty(); }
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
  std::vector<Lane> lanes;  // the data lanes, then the control QP; made on first use
  Link link = Link::Down;
  WireInfo info{};  // from the address published at init (its piece size: how it cuts writes)
  std::optional<std::string> failure;
  Clock::time_point failed_at{};  // when `failure` was set (retire_unflushed's grace)
  // Data QPs reset (lane_reset.cpp): their generation, whether work for them waits for the
  // peer's side of a reset, and how many resets the pair has had.
  uint32_t lane_generation = 0;
  bool data_paused = false;
  int resets = 0;
  // Eager slots (eager_ring.hpp): our ring, which the peer writes, and where we write in its
  // ring. Both sides use them only when both published a ring.
  struct Eager {
    AlignedBlock block;  // our ring, then the credit and epoch lines
    verbs_handles::Registration mr;
    uint32_t lkey = 0;  // mr's, for the writes of our words
    int slots = 0;
    uint64_t taken = 0;     // messages taken from our ring
    uint64_t credited = 0;  // `taken` as last written back to the peer
    uint64_t rung = 0;      // the peer's sleep epoch we last rang it for
    CountWord epoch;        // the peer's sleep epoch, as it writes it into our block
    CountWord credit;       // its credit for our messages: written, or carried by its messages
    std::array<WordWriter, kWords> writers;  // our words' writes into the peer's block
    uint64_t their_ring = 0;
    uint32_t their_rkey = 0;
    int their_slots = 0;        // used only when both sides have slots
    int their_block_slots = 0;  // what the peer's block has (where its lines are)
    uint64_t sent = 0;          // messages written into the peer's ring
  } eager;
  ReceiveCredits credits;  // receives of the shared queue, both ways (receive_credits.hpp)
  bool idle() const {
    return std::all_of(lanes.begin(), lanes.end(),
                       [](const Lane& l) { return l.in_queue() == 0 && !l.waiting(); });
  }
};
// An expected write's request and the lanes' immediates still to come.
struct Expected {
  RequestPtr request;
  int remaining = 1;
};

}  // namespace rdmacoll::transport::verbs_impl
