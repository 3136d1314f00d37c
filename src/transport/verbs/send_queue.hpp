#pragma once
// The verbs transport's send side as one object (after NCCL's net_ib and UCX's uct/ib): work is
// staged per lane, posted in chains with one doorbell, and retired by the completion that names
// it. It owns what the lanes share: the requests in flight, the cap on sends in flight (what the
// CQ is sized for), the registered send buffers, and the lists of lanes with staged or waiting
// work. Each lane's own queue (its QP, posted and staged work, backlogs) belongs to its peer
// (peer.hpp); the transport says when a lane may take work (SendQueue::Owner).

#include <infiniband/verbs.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "transport/verbs/footprint.hpp"
#include "transport/verbs/peer.hpp"

namespace rdmacoll::transport::verbs_impl {

using verbs_plan::kCtrlBytes;
using verbs_plan::kSendBuffers;
using verbs_plan::kSendDepth;
using verbs_plan::kSendsInFlight;

// Work requests built between two progress() calls are chained and posted with one doorbell,
// and only the last of a batch (and every kSignalEvery-th) asks for a completion: RC completes
// in order, so one completion retires everything posted before it.
constexpr int kSignalEvery = 16;
// Writes the transport makes for itself (credits, sleep epochs, rings, keepalives) never wait
// behind the work that waits for them: they have a queue of their own per QP, drained first,
// and room kept for them in each send queue and in the cap on sends in flight, which other work
// does not take. Both sides of a pair may each have a message waiting for the other's credit
// while owing the other credits: queued behind those messages, the credits would never leave.
constexpr int kUrgentPerQp = 8;
constexpr int kUrgentInFlight = 64;

// Fills a work request to stage; false when it cannot yet (no credit, slot or send buffer).
using Build = std::function<bool(Staged&)>;

class SendQueue {
 public:
  // What the queue asks of the transport that wires it.
  class Owner {
   public:
    virtual ~Owner() = default;
    // Whether `peer`'s `lane` takes work now (connected, not failed, not paused, port up).
    virtual bool lane_open(int peer, int lane) const = 0;
    // ibv_post_send refused a chain to `peer` with `err`: the peer fails (and what it had
    // posted is retired then).
    virtual void post_failed(int peer, int err) = 0;
    // Every work request of `req` completed without error.
    virtual void landed(int peer, const VerbsRequest& req) = 0;
  };

  SendQueue(Owner& owner, std::vector<Peer>& peers, Transport::Counters& counters)
      : owner_(owner), peers_(peers), counters_(counters) {}
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;

  // The shared send buffers (kSendBuffers of kCtrlBytes), registered on `pd`.
  void make_buffers(ibv_pd* pd);
  // Deregisters them: before the PD goes.
  void release_buffers() { buffers_mr_.reset(); }
  // A free send buffer (its slot), or -1; it comes back when its request's work retires.
  int take_buffer(VerbsRequest& req);
  uint8_t* buffer(int slot) { return pool_.data() + static_cast<size_t>(slot) * kCtrlBytes; }
  uint32_t buffer_lkey() const { return buffers_mr_->lkey; }

  // Holds `req` until its work requests retire; the key its staged work names.
  uint64_t track(const std::shared_ptr<VerbsRequest>& req);
  VerbsRequest* find(uint64_t id);

  // Stages `build` now if the lane is open and has room, else queues it (urgent: the
  // transport's own writes, which may use the room kept for them); the next flush posts it.
  void submit(int peer, int lane, Build build, bool urgent);
  // Posts each lane's staged work as one chain (one doorbell); false when nothing was staged.
  // Only the lanes with staged work: progress() runs this twice per call, and a scan of every
  // peer would cost O(p) on the hot path.
  bool flush_all();
  // Stages what the queued work of open lanes can now; forgets the lanes left empty.
  void drain_backlogs();

  // A completion for work request `number` on `peer`'s lane: it also retires every unsignaled
  // one posted before it. An error completion may name an unsignaled one (flushed); one
  // already retired is ignored.
  void complete_through(int peer, int lane, uint32_t number, bool ok);
  // One work request of request `id` retired (its send buffer back); the request completes
  // with its last one, or fails with the first failure.
  void complete_one(int peer, uint64_t id, bool ok);

  // What never reached the device (staged), and with `posted` what the device will not report
  // (a QP without a flush: not made, or reset), taken off `lane` with its caps; the requests'
  // keys, for complete_one.
  std::vector<uint64_t> drop(Lane& lane, bool posted);
  // Fails every pending request to `peer` and forgets its queued work.
  void fail_peer(int peer, const std::string& why);

  int in_flight() const { return in_flight_; }
  size_t buffers_in_use() const { return static_cast<size_t>(kSendBuffers) - free_.size(); }

 private:
  bool stage(int peer, int lane, Build& build, bool urgent);
  void flush(int peer, int lane);

  Owner& owner_;
  std::vector<Peer>& peers_;
  Transport::Counters& counters_;
  std::vector<uint8_t> pool_;  // the send buffers
  verbs_handles::Registration buffers_mr_;
  std::deque<int> free_;  // send buffers not in use
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<VerbsRequest>> inflight_;
  int in_flight_ = 0;  // staged or posted on any QP, at most kSendsInFlight
  std::vector<std::pair<int, int>> backlogged_;  // (peer, lane) with queued work, each once
  std::vector<std::pair<int, int>> staged_;      // (peer, lane) with staged work, each once
};

}  // namespace rdmacoll::transport::verbs_impl
