#pragma once
// What the verbs transport pins and allocates per process, as a pure function of how many
// peers it connects, so the plan is unit-tested for any p and the live transport reports the
// same numbers (Transport::footprint()). Control receives come from one shared receive queue
// (SRQ) sized by the traffic, not by p: before it, every peer had 32 receive and 64 send
// buffers of 4 KiB, about 400 KB pinned per peer (400 MB per rank at 1024 ranks).

#include <cstddef>
#include <cstdint>

#include "transports/transport.hpp"

namespace rdmacoll::transport::verbs_plan {

constexpr size_t kCtrlBytes = 8 + 4096;  // tag + the largest control message (call descriptor)
// Receives shared by every QP: control messages and write immediates of all peers. When it
// runs dry a sender is told to retry (RNR, retried without limit), so a burst only waits.
constexpr int kSrqDepth = 512;
constexpr int kSendDepth = 64;   // send work requests in flight per QP
constexpr int kSendBuffers = 8;  // control send buffers per peer (inline sends need none)

// The transport's own report type: the live transport returns its plan as is.
using Footprint = Transport::Footprint;

// For `peers` connected peers with `lanes` QPs each (RDMACOLL_IB_QPS_PER_PEER). Pinned control
// bytes are the registered receive and send buffers. The CQ holds every send work request that
// may complete (selective signalling does not bound it: each batch signals its last) and every
// receive.
constexpr Footprint plan(uint64_t peers, uint64_t lanes) {
  return {peers * lanes, (kSrqDepth + peers * kSendBuffers) * kCtrlBytes,
          peers * lanes * kSendDepth + kSrqDepth + 16, peers};
}

}  // namespace rdmacoll::transport::verbs_plan
