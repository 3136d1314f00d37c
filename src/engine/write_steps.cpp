#include "engine/write_steps.hpp"

#include <string>

namespace rdmacoll::engine {

void WriteSteps::expect_all(transport::MemoryRegion& local) {
  recv_base_ = call_.recvs().size();
  for (const PlannedArrival& a : plan_.arrivals()) {
    const uint64_t tag = transport::write_signal(call_.token(), a.signal);
    call_.recvs().push_back(
        {call_.guarded([&] { return t_.expect(call_.global(a.peer), local, a.at, a.length, tag); }),
         a.peer, Pending::Kind::Arrival, a.first, a.count});
  }
}

void WriteSteps::post_writes(size_t s, const std::vector<CallDescriptor>& peers,
                             std::span<const transport::MemoryRegion* const> sources) {
  const auto& writes = plan_.writes();
  for (size_t i = plan_.write_begin(s); i < plan_.write_end(s); ++i) {
    const PlannedWrite& w = writes[i];
    const CallDescriptor& dst = peers[w.peer];
    if (w.to > dst.out_bytes || w.length > dst.out_bytes - w.to) {
      // never write outside what the peer advertised
      throw TransportError(call_.where() + ": refusing to write bytes [" + std::to_string(w.to) +
                           ", " + std::to_string(w.to + w.length) + ") into rank " +
                           std::to_string(call_.global(w.peer)) + "'s " + plan_.target() + " of " +
                           std::to_string(dst.out_bytes) + " bytes");
    }
    if (remotes_.size() <= static_cast<size_t>(w.peer)) remotes_.resize(peers.size());
    auto& remote = remotes_[w.peer];
    if (!remote) {
      remote = call_.guarded([&] {
        return t_.unpack_remote(call_.global(w.peer), dst.out_addr, dst.out_bytes, dst.key);
      });
    }
    const uint64_t tag = transport::write_signal(dst.signal_token, w.signal);
    call_.sends().push_back({call_.guarded([&] {
                               return t_.write(*sources[w.source], w.from, *remote, w.to, w.length,
                                               tag);
                             }),
                             w.peer, Pending::Kind::Write, w.first, w.count});
  }
}

}  // namespace rdmacoll::engine
