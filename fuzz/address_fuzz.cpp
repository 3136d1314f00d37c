// libFuzzer target: what a rank reads from the store before any transport sees it: the
// transport address envelope (bootstrap/address_envelope) and a rank's published placement
// (topology::LocalPlacement). Malformed input must be refused with a reason or an
// rdmacoll::Error, never crash; an accepted envelope must be exactly what wrap_address makes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "bootstrap/address_envelope.hpp"
#include "rdmacoll/errors.hpp"
#include "topology/topology.hpp"

using namespace rdmacoll;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int rank = data[0] % 4;
  const std::vector<uint8_t> in(data + 1, data + size);
  for (const std::string transport : {"ucx", "verbs"}) {
    std::string why;
    const auto address = bootstrap::unwrap_address(in, rank, transport, why);
    if (address) {
      if (bootstrap::wrap_address(rank, transport, *address) != in) std::abort();
    } else if (why.empty()) {
      std::abort();
    }
  }
  try {
    (void)topology::LocalPlacement::parse(std::string(in.begin(), in.end()));
  } catch (const Error&) {
  }
  return 0;
}
