// libFuzzer target: an eager slot of verbs' ring (src/transport/verbs/eager_ring) as a peer's RDMA
// write leaves it. The slot's head says which message number it claims; read() must raise
// TransportError or return a message inside the slot, never read past it; one that reads must
// pack back into a slot that reads to the same tag and payload.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rdmacoll/errors.hpp"
#include "transport/verbs/eager_ring.hpp"

using namespace rdmacoll::transport::eager_ring;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Exactly one slot, so ASan sees any read past it; what the input leaves out stays zero.
  std::vector<uint8_t> slot(kSlotBytes, 0);
  std::memcpy(slot.data(), data, std::min(size, kSlotBytes));
  uint64_t number = 0;
  std::memcpy(&number, slot.data(), 8);  // the number the reader expects: the head's
  try {
    const auto m = read(slot.data(), number);
    if (!m) return 0;
    const uint8_t* lo = slot.data();
    if (m->payload.data() < lo || m->payload.data() + m->payload.size() > lo + kSlotBytes)
      std::abort();
    std::vector<uint8_t> again(kSlotBytes, 0);
    pack(again.data(), number, m->tag, m->payload.data(), m->payload.size(), m->credit);
    const auto back = read(again.data(), number);
    if (!back || back->tag != m->tag || back->credit != m->credit ||
        back->payload.size() != m->payload.size() ||
        !std::equal(back->payload.begin(), back->payload.end(), m->payload.begin()))
      std::abort();
  } catch (const rdmacoll::Error&) {
  }
  return 0;
}
