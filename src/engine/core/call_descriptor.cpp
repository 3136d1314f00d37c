#include "engine/core/call_descriptor.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "engine/core/descriptor_fields.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::engine {

namespace {

constexpr uint32_t kMagic = 0x52444344;  // "RDCD"

static_assert(sizeof(DescriptorHeader) + kMaxSlotKeyBytes <= kInlineOverhead,
              "descriptor_capacity() leaves room for the header and a slot key");

// A variable part as the bytes that travel (an error is cut at kMaxErrorBytes), and back.
std::span<const uint8_t> wire_bytes(std::span<const uint8_t> part) {
  return part;
}
std::span<const uint8_t> wire_bytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), std::min(text.size(), kMaxErrorBytes)};
}
void view(std::span<const uint8_t>& part, const uint8_t* p, size_t n) {
  part = {p, n};
}
void view(std::string_view& text, const uint8_t* p, size_t n) {
  text = {reinterpret_cast<const char*>(p), n};
}

}  // namespace

size_t eager_limit(int p, int hosts, size_t max_message, std::optional<size_t> forced) {
  if (forced) return std::min(*forced, max_message / 2);
  const size_t per_peer = (size_t{1} << 20) / static_cast<size_t>(std::max(p, 1));
  const size_t limit = hosts > 1 ? 2048 : std::clamp<size_t>(per_peer, 2048, 64 << 10);
  return std::min(limit, max_message / 2);
}

size_t CallDescriptor::serialized_size() const {
  size_t total = sizeof(DescriptorHeader);
#define RDMACOLL_PART(member) total += wire_bytes(member).size();
  RDMACOLL_DESCRIPTOR_PARTS(RDMACOLL_PART)
#undef RDMACOLL_PART
  return total;
}

size_t CallDescriptor::serialize_to(uint8_t* dst, size_t capacity) const {
  const size_t total = serialized_size();
  if (total > capacity) {
    throw TransportError("call descriptor of " + std::to_string(total) +
                         " bytes exceeds the limit of " + std::to_string(capacity));
  }
  DescriptorHeader h;
  h.magic = kMagic;
#define RDMACOLL_FIELD(member, wire, kind) h.member = static_cast<wire>(member);
#define RDMACOLL_LENGTH(member) h.member##_len = static_cast<uint32_t>(wire_bytes(member).size());
  RDMACOLL_DESCRIPTOR_HEADER(RDMACOLL_FIELD, RDMACOLL_LENGTH)
#undef RDMACOLL_FIELD
#undef RDMACOLL_LENGTH
  uint8_t* p = dst;
  std::memcpy(p, &h, sizeof h);
  p += sizeof h;
#define RDMACOLL_PART(member)                                  \
  if (const auto bytes = wire_bytes(member); !bytes.empty()) { \
    std::memcpy(p, bytes.data(), bytes.size());                \
    p += bytes.size();                                         \
  }
  RDMACOLL_DESCRIPTOR_PARTS(RDMACOLL_PART)
#undef RDMACOLL_PART
  return total;
}

void CallDescriptor::serialize_into(std::vector<uint8_t>& out, size_t limit) const {
  const size_t total = serialized_size();
  if (total > limit) {
    throw TransportError("call descriptor of " + std::to_string(total) +
                         " bytes exceeds the limit of " + std::to_string(limit));
  }
  out.resize(total);
  serialize_to(out.data(), total);
}

std::vector<uint8_t> CallDescriptor::serialize() const {
  std::vector<uint8_t> out;
  serialize_into(out, SIZE_MAX);
  return out;
}

bool CallDescriptor::peek_seq(const uint8_t* data, size_t length, uint64_t& seq) {
  DescriptorHeader h;
  if (length < sizeof h) return false;
  std::memcpy(&h, data, sizeof h);
  if (h.magic != kMagic) return false;
  seq = h.seq;
  return true;
}

CallDescriptor CallDescriptor::parse(const uint8_t* data, size_t length) {
  DescriptorHeader h;
  if (length < sizeof h) {
    throw TransportError("malformed call descriptor: " + std::to_string(length) + " bytes");
  }
  std::memcpy(&h, data, sizeof h);
  if (h.refused > static_cast<uint8_t>(Refusal::TransportError) || h.group_broken > 1) {
    throw TransportError("malformed call descriptor (refusal " + std::to_string(h.refused) + ")");
  }
  size_t total = sizeof h;
#define RDMACOLL_PART(member) total += h.member##_len;
  RDMACOLL_DESCRIPTOR_PARTS(RDMACOLL_PART)
#undef RDMACOLL_PART
  if (h.magic != kMagic || total != length) {
    throw TransportError("malformed call descriptor (bad magic or lengths)");
  }
  CallDescriptor d;
#define RDMACOLL_FIELD(member, wire, kind) d.member = static_cast<decltype(d.member)>(h.member);
#define RDMACOLL_LENGTH(member)
  RDMACOLL_DESCRIPTOR_HEADER(RDMACOLL_FIELD, RDMACOLL_LENGTH)
#undef RDMACOLL_FIELD
#undef RDMACOLL_LENGTH
  const uint8_t* p = data + sizeof h;
#define RDMACOLL_PART(member)        \
  view(d.member, p, h.member##_len); \
  p += h.member##_len;
  RDMACOLL_DESCRIPTOR_PARTS(RDMACOLL_PART)
#undef RDMACOLL_PART
  return d;
}

}  // namespace rdmacoll::engine
