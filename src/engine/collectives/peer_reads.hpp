#pragma once
// A call whose members copy out of each other's memory instead of writing (one host, where
// every member may read every other's: Mailbox::peer_reads; on Linux the kernel's CMA). Each
// member offers in its descriptor where its data lies (CallDescriptor::source_addr), and once
// the descriptors agree its peers read what they need straight into their outputs: no memory
// is exposed and no data message moves, where UCX's rendezvous makes the same copy only after
// an RTS and answers with an ATS (docs/performance.md, the middle sizes' floor).
//
// No member may return while a peer still reads its memory (the caller may change it at once):
// after the call's body every member meets the others in a barrier (finish()). A failed read
// travels in that barrier's descriptor, so every member raises it in the same call; a peer's
// death breaks the group. A peer that leaves early (a timeout) never meets us there, so a read
// of memory it no longer holds raises rather than passing as a result.

#include <cstddef>
#include <string>

#include "engine/call.hpp"
#include "engine/core/call_descriptor.hpp"
#include "engine/engine.hpp"
#include "engine/group_state.hpp"

namespace rdmacoll::engine {

class PeerReads {
 public:
  // From now on (the descriptors agreed) every member meets in finish().
  void offered() { offered_ = true; }
  // Copies `bytes` at `offset` past what group rank r offered (`d`, its descriptor) into
  // `dst`. False once a read has failed: the reason is kept for finish(), and nothing more
  // should be read. Throws PeerFailure (the group broken) if r is gone.
  bool read(Call& call, int r, const CallDescriptor& d, size_t offset, void* dst, size_t bytes);
  // After the call's body: the barrier, if the call offered. Raises a failed read on every
  // member.
  void finish(Engine& e, GroupState& g) const;

 private:
  bool offered_ = false;
  std::string error_;
};

}  // namespace rdmacoll::engine
