#include "engine/group_state.hpp"

#include "common/ranks.hpp"
#include "engine/p2p.hpp"

namespace rdmacoll::detail {

std::string GroupState::describe(uint32_t id, const std::vector<int>& members) {
  return "group " + std::to_string(id) + " (ranks " + join_ranks(members) + ")";
}

void GroupState::release() {
  queue.drain();
  if (auto p = p2p.lock()) {
    p->abandon(*this, "its group was destroyed while it was in flight");
  }
  if (auto t = transport.lock()) mailbox.release(t);
  windows->clear();
}

}  // namespace rdmacoll::detail
