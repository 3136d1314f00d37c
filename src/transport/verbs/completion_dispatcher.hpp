#pragma once
// The CQ's reader: it polls the one CQ every QP shares, in batches, and hands each completion to
// the part of the transport it is for, by the work request's id (make_wr_id: kind, lane, peer,
// number) or, for a shared receive (which names no peer), by the QP it arrived on. It owns the
// map from QP numbers to (peer, lane).

#include <infiniband/verbs.h>

#include <cstdint>
#include <unordered_map>
#include <utility>

#include "transport/transport.hpp"
#include "transport/verbs/peer.hpp"

namespace rdmacoll::transport::verbs_impl {

class CompletionDispatcher {
 public:
  // Where completions go.
  class Handler {
   public:
    virtual ~Handler() = default;
    // A shared receive's completion (its buffer `slot`); peer and lane -1 when it came on a QP
    // the transport no longer knows (its slot is still the queue's).
    virtual void on_receive(const ibv_wc& wc, int peer, int lane, uint32_t slot) = 0;
    // A send or write work request `number` on `peer`'s `lane`.
    virtual void on_send(const ibv_wc& wc, int peer, int lane, uint32_t number) = 0;
  };

  explicit CompletionDispatcher(Transport::Counters& counters) : counters_(counters) {}

  // Receives on `qpn` come from `peer`'s `lane`.
  void add_qp(uint32_t qpn, int peer, int lane) { lane_of_qpn_[qpn] = {peer, lane}; }

  // Polls `cq` until it is empty, each completion to `handler`; true if there was any.
  bool poll(ibv_cq* cq, Handler& handler);

 private:
  Transport::Counters& counters_;
  std::unordered_map<uint32_t, std::pair<int, int>> lane_of_qpn_;
};

}  // namespace rdmacoll::transport::verbs_impl
