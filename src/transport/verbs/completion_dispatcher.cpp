// The CQ's reader (completion_dispatcher.hpp).

#include "transport/verbs/completion_dispatcher.hpp"

namespace rdmacoll::transport::verbs_impl {

bool CompletionDispatcher::poll(ibv_cq* cq, Handler& handler) {
  constexpr int kBatch = 32;
  ibv_wc wc[kBatch];
  bool any = false;
  for (;;) {
    const int n = ibv_poll_cq(cq, kBatch, wc);
    if (n <= 0) return any;
    counters_.completions += static_cast<uint64_t>(n);
    any = true;
    for (int i = 0; i < n; ++i) {
      const ibv_wc& c = wc[i];
      const auto kind = static_cast<WrKind>(c.wr_id >> 62);
      const uint32_t number = static_cast<uint32_t>(c.wr_id);  // receive slot, or the lane's number
      if (kind == kRecvWr) {
        const auto from = lane_of_qpn_.find(c.qp_num);
        if (from == lane_of_qpn_.end()) {
          handler.on_receive(c, -1, -1, number);
        } else {
          handler.on_receive(c, from->second.first, from->second.second, number);
        }
      } else {
        handler.on_send(c, static_cast<int>((c.wr_id >> 32) & 0xffffff),
                        static_cast<int>((c.wr_id >> 56) & 0x3f), number);
      }
    }
  }
}

}  // namespace rdmacoll::transport::verbs_impl
