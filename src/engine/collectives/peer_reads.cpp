#include "engine/collectives/peer_reads.hpp"

#include "engine/collectives/barrier.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::engine {

bool PeerReads::read(Call& call, int r, const CallDescriptor& d, size_t offset, void* dst,
                     size_t bytes) {
  if (!error_.empty()) return false;
  const int peer = call.global(r);
  auto whose = [&] { return "rank " + std::to_string(peer) + "'s data"; };
  call.guarded([&] {
    try {
      if (!call.transport().read_peer(peer, d.source_addr + offset, dst, bytes)) {
        error_ = "cannot read " + whose() +
                 ": the kernel refused a read it allowed when the group was made";
      }
    } catch (const PeerFailure&) {
      throw;  // the group breaks: that peer meets nobody
    } catch (const TransportError& e) {
      error_ = "reading " + whose() + " failed: " + e.what();
    }
  });
  if (error_.empty()) return true;
  error_ = call.where() + ": " + error_;
  return false;
}

void PeerReads::finish(Engine& e, GroupState& g) const {
  if (offered_) barrier(e, g, {.local_error = error_});
}

}  // namespace rdmacoll::engine
