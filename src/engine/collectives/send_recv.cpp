// send and recv: the group's issue order hands them to the world's point-to-point engine
// (p2p.hpp), which carries them to the end on its own thread.

#include "engine/engine.hpp"
#include "engine/p2p.hpp"

namespace rdmacoll::engine {

void Engine::send(GroupState& g, const void* data, size_t bytes, int peer, uint32_t tag,
                  const std::shared_ptr<WorkState>& work) {
  g.p2p = p2p_;
  p2p_->send(g, data, bytes, peer, tag, work);
}

void Engine::recv(GroupState& g, void* data, size_t bytes, int peer, uint32_t tag,
                  const std::shared_ptr<WorkState>& work) {
  g.p2p = p2p_;
  p2p_->recv(g, data, bytes, peer, tag, work);
}

}  // namespace rdmacoll::engine
