#include "engine/call_descriptor.hpp"

#include <cstring>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::engine {

namespace {

constexpr uint32_t kMagic = 0x52444344;  // "RDCD"

struct Fixed {
  uint32_t magic;
  uint32_t group;
  uint64_t seq;
  int32_t rank;
  uint8_t op;
  uint8_t ok;
  uint8_t in_dtype;
  uint8_t out_dtype;
  uint64_t in_numel;
  uint64_t out_numel;
  uint64_t out_addr;
  uint64_t out_bytes;
  uint32_t key_len;
  uint32_t error_len;
  uint32_t inline_len;
  uint32_t reserved;
};

}  // namespace

std::vector<uint8_t> CallDescriptor::serialize() const {
  const std::string err = error.substr(0, 1024);
  Fixed f{kMagic,
          group,
          seq,
          rank,
          static_cast<uint8_t>(op),
          static_cast<uint8_t>(ok ? 1 : 0),
          in_dtype,
          out_dtype,
          in_numel,
          out_numel,
          out_addr,
          out_bytes,
          static_cast<uint32_t>(key.size()),
          static_cast<uint32_t>(err.size()),
          static_cast<uint32_t>(inline_data.size()),
          0};
  std::vector<uint8_t> out(sizeof f + key.size() + err.size() + inline_data.size());
  std::memcpy(out.data(), &f, sizeof f);
  if (!key.empty()) std::memcpy(out.data() + sizeof f, key.data(), key.size());
  if (!err.empty()) std::memcpy(out.data() + sizeof f + key.size(), err.data(), err.size());
  if (!inline_data.empty()) {
    std::memcpy(out.data() + sizeof f + key.size() + err.size(), inline_data.data(),
                inline_data.size());
  }
  if (out.size() > kMaxDescriptorBytes) {
    throw TransportError("call descriptor of " + std::to_string(out.size()) +
                         " bytes exceeds the limit of " + std::to_string(kMaxDescriptorBytes));
  }
  return out;
}

CallDescriptor CallDescriptor::parse(const uint8_t* data, size_t length) {
  Fixed f;
  if (length < sizeof f) {
    throw TransportError("malformed call descriptor: " + std::to_string(length) + " bytes");
  }
  std::memcpy(&f, data, sizeof f);
  if (f.magic != kMagic ||
      sizeof f + static_cast<size_t>(f.key_len) + f.error_len + f.inline_len != length) {
    throw TransportError("malformed call descriptor (bad magic or lengths)");
  }
  CallDescriptor d;
  d.seq = f.seq;
  d.group = f.group;
  d.rank = f.rank;
  d.op = static_cast<CollectiveOp>(f.op);
  d.ok = f.ok != 0;
  d.in_dtype = f.in_dtype;
  d.out_dtype = f.out_dtype;
  d.in_numel = f.in_numel;
  d.out_numel = f.out_numel;
  d.out_addr = f.out_addr;
  d.out_bytes = f.out_bytes;
  d.key.assign(data + sizeof f, data + sizeof f + f.key_len);
  d.error.assign(reinterpret_cast<const char*>(data) + sizeof f + f.key_len, f.error_len);
  const uint8_t* inl = data + sizeof f + f.key_len + f.error_len;
  d.inline_data.assign(inl, inl + f.inline_len);
  return d;
}

}  // namespace rdmacoll::engine
