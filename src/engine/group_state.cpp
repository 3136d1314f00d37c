#include "engine/group_state.hpp"

#include <sstream>

namespace rdmacoll::detail {

std::string GroupState::describe() const {
  std::ostringstream os;
  os << "group " << id << " (ranks [";
  for (size_t i = 0; i < members.size(); ++i)
    os << (i ? ", " : "") << members[i];
  os << "])";
  return os.str();
}

}  // namespace rdmacoll::detail
