#include "engine/call.hpp"

#include "engine/control/agreement.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "engine/control/exchange_scratch.hpp"

namespace rdmacoll::engine {

void check_usable(const GroupState& g, const char* op) {
  if (!g.is_member()) {
    throw InvalidArgument(std::string(op) + ": this process is not a member of " + g.describe() +
                          "; only members may call collectives on it");
  }
  if (g.broken) {
    throw InvalidArgument(std::string(op) + ": " + g.describe() +
                          " is unusable after an earlier failure: " + *g.broken);
  }
}

CallDescriptor make_descriptor(Call& call, const RoundArgs& a) {
  const GroupState& g = call.group();
  CallDescriptor d;
  d.seq = call.seq();
  d.group = g.id;
  d.rank = g.rank;
  d.collective = a.collective->code;
  d.reduce_op = static_cast<uint8_t>(a.reduce_op);
  d.total_numel = a.total_numel;
  d.root = a.root;
  d.ok = a.local_error.empty();
  d.error = a.local_error;
  d.in_dtype = static_cast<uint8_t>(a.in_dtype);
  d.out_dtype = static_cast<uint8_t>(a.out_dtype);
  d.in_numel = static_cast<uint64_t>(a.in_numel);
  d.out_numel = static_cast<uint64_t>(a.out_numel);
  return d;
}

}  // namespace rdmacoll::engine
