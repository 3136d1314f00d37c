#pragma once
// A request of a collective call in flight, and what it is for. Kept as numbers and spelled
// out only for an error message, so the hot path builds no strings.

#include <string>

#include "transport/transport.hpp"

namespace rdmacoll::engine {

struct Pending {
  enum class Kind { Descriptor, Arrival, Write, Error };
  transport::RequestPtr req;
  int peer;  // group rank
  Kind kind;
  int first = 0;  // chunk range, for Arrival and Write
  int count = 0;

  std::string what() const {
    const std::string range = std::to_string(first) + ".." + std::to_string(first + count - 1);
    switch (kind) {
      case Kind::Descriptor:
        return "call descriptor";
      case Kind::Arrival:
        return "chunks " + range;
      case Kind::Write:
        return "write of chunks " + range;
      case Kind::Error:
        return "error report";
    }
    return "request";
  }
};

}  // namespace rdmacoll::engine
