#pragma once
// Flow control of the shared receive queue (SRQ), as plain arithmetic so that it is unit-tested
// for any world size. Every SEND and every RDMA WRITE WITH IMM takes one receive from the SRQ
// that all of a rank's QPs share. Without flow control a receiver that stops polling (computing,
// holding the GIL, oversubscribed) runs the queue dry, and every sender's QP stalls in RNR
// retries, keepalives included. So each receiver grants each peer a number of receives when the
// pair connects (published with its QP numbers), posts at least as many receives as it has
// granted in all, and hands credits back on every eager message it sends the peer, or by an
// 8-byte RDMA WRITE (which takes no receive) once half the grant is owed and no message went.
// A sender posts a receive-taking work request only while it holds a credit; the
// others (plain writes: data, eager slots, credits, keepalives) never wait for one. The queue
// then never runs dry, so QPs retry RNR a bounded number of times and an exhausted retry is a
// peer failure, not a silent stall.

#include <algorithm>
#include <cstdint>

namespace rdmacoll::transport::verbs_plan {

// Receives granted to each peer where the queue can hold that many for every peer.
constexpr uint32_t kReceiveCredits = 8;
// Receives are posted (and their buffers pinned) in chunks as peers connect.
constexpr uint64_t kReceiveChunk = 512;
// The most receives the queue holds (and the CQ is sized for), whatever the world size.
constexpr uint64_t kMaxReceives = 8192;

// What the queue and CQ are sized for with `peers` possible peers, on a device whose SRQ holds
// at most `device_max` work requests: whole chunks (one part chunk on a device that holds less).
constexpr uint64_t receive_capacity(uint64_t peers, uint64_t device_max = kMaxReceives) {
  const uint64_t want = std::max(kReceiveChunk, peers * kReceiveCredits);
  const uint64_t chunks = (want + kReceiveChunk - 1) / kReceiveChunk * kReceiveChunk;
  if (device_max < kReceiveChunk) return device_max;
  return std::min({chunks, kMaxReceives, device_max / kReceiveChunk * kReceiveChunk});
}

// The grant each peer gets: the same for all, so that every peer's together fit the capacity
// (at least 1: past `capacity` peers the queue is oversubscribed, and says so).
constexpr uint32_t grant_per_peer(uint64_t peers, uint64_t capacity) {
  if (peers == 0) return kReceiveCredits;
  return static_cast<uint32_t>(std::clamp<uint64_t>(capacity / peers, 1, kReceiveCredits));
}

// The receives posted with `connected` peers connected: whole chunks covering their grants.
constexpr uint64_t receives_posted(uint64_t connected, uint32_t grant, uint64_t capacity) {
  const uint64_t need = connected * grant;
  const uint64_t chunks = std::max<uint64_t>(1, (need + kReceiveChunk - 1) / kReceiveChunk);
  return std::min(chunks * kReceiveChunk, capacity);
}

// A count a peer writes into our memory by plain RDMA WRITEs (credits, sleep epochs). It only
// grows at the writer, but two writes of it in flight may be placed in either order where the
// fabric routes packets adaptively (InfiniBand AR, RoCE packet spraying), so the word can go
// back; the reader keeps the largest value it has seen, which a late smaller write cannot undo.
// (The writer also keeps one write per word in flight: WordWriter.)
struct CountWord {
  uint64_t largest = 0;
  uint64_t read(uint64_t word) {
    largest = std::max(largest, word);
    return largest;
  }
};

// The writer's side of a CountWord: at most one write of the word in flight, so two writes of
// it are never in the fabric together and cannot land out of order. A new value while one is in
// flight is written when that one has landed (the write reads the word's source line when the
// NIC executes it, so it carries the newest value then).
struct WordWriter {
  bool in_flight = false;
  bool again = false;
  // A new value: true when a write is to be posted now.
  bool changed() {
    if (in_flight) {
      again = true;
      return false;
    }
    in_flight = true;
    return true;
  }
  // The write in flight has landed: true when another is to be posted now.
  bool landed() {
    in_flight = again;
    again = false;
    return in_flight;
  }
};

// One peer's credits, both ways. Counts are cumulative (they never wrap).
struct ReceiveCredits {
  // Toward the peer: its grant, how many receive-taking requests we posted, and the credits it
  // has handed back (the word it writes into our block: its largest value counts, and a count
  // above what we used is a lie that would only cost the peer its own receives).
  uint32_t their_grant = 0;
  uint64_t used = 0;
  CountWord returned;
  bool may_take(uint64_t word) { return used < their_grant + returned.read(std::min(word, used)); }

  // From the peer: our grant, the receives its requests took, and the credits written back.
  uint32_t our_grant = 0;
  uint64_t arrived = 0;
  uint64_t handed_back = 0;   // by a credit write, or riding on an eager message
  bool listed_owing = false;  // in the transport's list of peers it owes credits
  // More arrived than granted: the peer ignored its credits (broken or hostile).
  bool overran() const { return arrived > our_grant + handed_back; }
  // Worth a credit write: half the grant is owed. Below that the peer still holds more than
  // half its credits, so it never waits on credits we keep back.
  bool owes_credits() const {
    return arrived - handed_back >= std::max<uint64_t>(1, our_grant / 2);
  }
};

}  // namespace rdmacoll::transport::verbs_plan
