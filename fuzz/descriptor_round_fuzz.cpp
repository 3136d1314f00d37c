// libFuzzer target: one message of a descriptor round (engine/descriptor_round), as a peer
// sends it in Bruck's or recursive doubling's all-gather of call descriptors. The first byte
// says how many descriptors the round carries (1 to 64); the rest is the message. A malformed
// message must raise TransportError, never read past its buffer; one that parses must pack
// back, at verbs' message limit, into messages that parse to the same descriptors.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "engine/control/descriptor_round.hpp"
#include "rdmacoll/errors.hpp"

using namespace rdmacoll::engine;
using Bytes = std::vector<uint8_t>;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int n = data[0] % 64 + 1;
  const Bytes message(data + 1, data + size);  // exactly its bytes, so ASan sees any overread
  constexpr size_t kCapacity = 4096;
  std::vector<Bytes> got;
  int received = 0;
  try {
    parse_round_message(message, n, received, kCapacity, [&](int i, std::span<const uint8_t> d) {
      if (i != static_cast<int>(got.size())) std::abort();
      got.emplace_back(d.begin(), d.end());
    });
  } catch (const rdmacoll::Error&) {
    return 0;
  }
  Bytes out;
  std::vector<size_t> starts;
  pack_round(
      static_cast<int>(got.size()), [&](int i) { return std::span<const uint8_t>(got[i]); }, 4160,
      out, starts);
  std::vector<Bytes> back;
  int again = 0;
  for (size_t j = 0; j < starts.size(); ++j) {
    const size_t end = j + 1 < starts.size() ? starts[j + 1] : out.size();
    const Bytes m(out.begin() + static_cast<std::ptrdiff_t>(starts[j]),
                  out.begin() + static_cast<std::ptrdiff_t>(end));
    parse_round_message(m, n, again, kCapacity, [&](int, std::span<const uint8_t> d) {
      back.emplace_back(d.begin(), d.end());
    });
  }
  if (back != got) std::abort();
  return 0;
}
