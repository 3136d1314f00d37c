#pragma once
// What the verbs transport pins and allocates per process, as a pure function of how many
// peers it connects, so the plan is unit-tested for any p and the live transport reports the
// same numbers (Transport::statistics().footprint). Every buffer and queue shared by the peers is
// sized by the traffic, not by p: control receives come from one shared receive queue (SRQ),
// control sends take buffers from one shared pool, and the send work requests in flight over all
// QPs are capped, which bounds the CQ. Before, every peer had 32 receive and 64 send buffers of 4
// KiB (about 400 KB pinned per peer, 400 MB per rank at 1024 ranks) and the CQ grew by 96 entries
// per peer. QPs are made on first use (connect.cpp), so `peers` is the peers a rank's
// schedules touch: O(log p) for recursive doubling and Bruck, 2 for the ring.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "transport/transport.hpp"
#include "transport/verbs/eager_ring.hpp"
#include "transport/verbs/receive_credits.hpp"

namespace rdmacoll::transport::verbs_plan {

// A tag and the largest control message: a call descriptor (up to 4 KiB) with the framing of a
// Bruck round (a flag byte and a length), so that such a round can go one descriptor at a time.
constexpr size_t kCtrlBytes = 8 + 4096 + 64;
// Receives shared by every QP (control messages and write immediates of all peers) are granted
// to the peers and posted in chunks as they connect: receive_credits.hpp.
constexpr int kSendDepth = 64;  // send work requests in flight per QP
// Send work requests in flight over all QPs together. An error flushes every posted request
// into the CQ, signalled or not, so this cap (with the receives) is what the CQ must hold.
constexpr int kSendsInFlight = 1024;
// Control send buffers shared by all peers (inline sends need none); a send that finds none
// waits in its QP's backlog for one to come back.
constexpr int kSendBuffers = 64;

// The transport's own report type: the live transport returns its plan as is.
using Footprint = Transport::Footprint;

// The CQ for `peers` peers with `lanes` QPs each: every send work request that may be in
// flight and every receive the queue may hold.
constexpr uint64_t cq_entries(uint64_t peers, uint64_t lanes) {
  return std::min<uint64_t>(peers * lanes * kSendDepth, kSendsInFlight) + receive_capacity(peers) +
         16;
}

// For `peers` connected peers with `lanes` data QPs each (RDMACOLL_IB_QPS_PER_PEER) and
// `eager_slots` eager slots per peer (RDMACOLL_IB_EAGER_SLOTS), in a world of `world_peers`
// other ranks (which sets each peer's grant). Pinned control bytes are the receive buffers
// posted for the connected peers' grants (a chunk of 512 from the start), the shared send
// buffers, and each connected peer's block of eager slots: what grows with the peers, about
// 35 KB each by default, so O(log p) where the schedules are.
constexpr Footprint plan(uint64_t peers, uint64_t lanes,
                         int eager_slots = eager_ring::kDefaultSlots, uint64_t world_peers = 0) {
  const uint64_t capacity = receive_capacity(std::max(world_peers, peers));
  const uint64_t receives =
      receives_posted(peers, grant_per_peer(std::max(world_peers, peers), capacity), capacity);
  // Each peer has `lanes` data QPs and one for control.
  return {peers * (lanes + 1),
          (receives + kSendBuffers) * kCtrlBytes + peers * eager_ring::block_bytes(eager_slots),
          cq_entries(std::max(world_peers, peers), lanes + 1), peers};
}

}  // namespace rdmacoll::transport::verbs_plan
