#pragma once
// How errors and logs write a list of ranks: "[0, 1, 3]".

#include <sstream>
#include <string>
#include <vector>

namespace rdmacoll {

inline std::string join_ranks(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < ranks.size(); ++i)
    os << (i ? ", " : "") << ranks[i];
  os << ']';
  return os.str();
}

}  // namespace rdmacoll
