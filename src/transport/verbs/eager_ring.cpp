#include "transport/verbs/eager_ring.hpp"

#include <atomic>
#include <cstring>
#include <string>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::transport::eager_ring {

namespace {

// The NIC writes the slot while we read it: the numbers are read as atomics, the rest only
// after both matched.
uint64_t load_number(const uint8_t* at) {
  uint64_t v;
  __atomic_load(reinterpret_cast<const uint64_t*>(at), &v, __ATOMIC_ACQUIRE);
  return v;
}

void store_number(uint8_t* at, uint64_t v) {
  __atomic_store(reinterpret_cast<uint64_t*>(at), &v, __ATOMIC_RELEASE);
}

// A checksum of [at, at + bytes) (bytes a multiple of 8): a multiply-xorshift per word, so a
// word that differs, or words in another order, change it. Not cryptographic: it stands
// against packets landing out of order, not against a peer (an RC peer can write anything).
uint64_t checksum(const uint8_t* at, size_t bytes) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ bytes;
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, at + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 29;
  }
  return h;
}

}  // namespace

void pack(uint8_t* out, uint64_t number, uint64_t tag, const void* data, size_t length,
          uint32_t credit, uint16_t receives) {
  if (length > kMaxPayload) {
    throw TransportError("eager slot: a message of " + std::to_string(length) +
                         " bytes does not fit a slot of " + std::to_string(kMaxPayload));
  }
  static_assert(kMaxPayload <= UINT16_MAX, "a length fits its 16 bits");
  const uint16_t len = static_cast<uint16_t>(length);
  std::memset(out + 8, 0, kHeaderBytes - 8);
  std::memcpy(out + 8, &len, 2);
  std::memcpy(out + 10, &receives, 2);
  std::memcpy(out + 12, &credit, 4);
  std::memcpy(out + 16, &tag, 8);
  if (length) std::memcpy(out + kHeaderBytes, data, length);
  std::memset(out + kHeaderBytes + length, 0, round8(length) - length);
  const size_t covered = kHeaderBytes - 8 + round8(length);
  store_number(out + kHeaderBytes + round8(length), number ^ checksum(out + 8, covered));
  store_number(out, number);
}

std::optional<Message> read(const uint8_t* slot, uint64_t number) {
  if (load_number(slot) != number) return std::nullopt;
  uint16_t len = 0;
  std::memcpy(&len, slot + 8, 2);
  if (len > kMaxPayload) {
    throw TransportError("eager slot: message " + std::to_string(number) + " claims " +
                         std::to_string(len) + " bytes; a slot holds " +
                         std::to_string(kMaxPayload));
  }
  // The acquire loads of head and trailer order the reads below after them; the bytes may
  // still be landing, which the checksum catches.
  const uint64_t trailer = load_number(slot + kHeaderBytes + round8(len));
  if (trailer != (number ^ checksum(slot + 8, kHeaderBytes - 8 + round8(len)))) return std::nullopt;
  Message m;
  std::memcpy(&m.receives, slot + 10, 2);
  std::memcpy(&m.credit, slot + 12, 4);
  std::memcpy(&m.tag, slot + 16, 8);
  m.payload = std::span<const uint8_t>(slot + kHeaderBytes, len);
  return m;
}

}  // namespace rdmacoll::transport::eager_ring
