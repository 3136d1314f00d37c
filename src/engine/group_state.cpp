#include "engine/group_state.hpp"

#include <sstream>

#include "engine/p2p.hpp"

namespace rdmacoll::detail {

std::string GroupState::describe(uint32_t id, const std::vector<int>& members) {
  std::ostringstream os;
  os << "group " << id << " (ranks [";
  for (size_t i = 0; i < members.size(); ++i)
    os << (i ? ", " : "") << members[i];
  os << "])";
  return os.str();
}

void GroupState::release() {
  queue.drain();
  if (auto p = p2p.lock()) {
    p->abandon(*this, "its group was destroyed while it was in flight");
  }
  if (auto t = transport.lock()) scratch.slots.release(t);
  windows->clear();
}

}  // namespace rdmacoll::detail
