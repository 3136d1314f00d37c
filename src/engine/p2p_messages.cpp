#include "engine/p2p_messages.hpp"

#include <algorithm>
#include <cstring>

namespace rdmacoll::engine::p2p {

namespace {

constexpr uint32_t kDataMagic = 0x50325044;  // "P2PD"
constexpr uint32_t kCtsMagic = 0x50325043;   // "P2PC"

struct CtsFixed {
  uint32_t magic;
  uint32_t ok;
  uint64_t bytes;
  uint64_t seq;
  uint64_t addr;
  uint64_t token;
  uint32_t key_len;
  uint32_t error_len;
};

}  // namespace

uint64_t tag(uint32_t group, uint32_t user_tag, Direction direction, uint32_t from) {
  return (uint64_t{3} << 62) | ((static_cast<uint64_t>(group) & 0x3fff) << 48) |
         ((static_cast<uint64_t>(user_tag) & kMaxUserTag) << 24) | (uint64_t{1} << 23) |
         (static_cast<uint64_t>(direction) << 22) | (static_cast<uint64_t>(from) & kMaxRank);
}

uint64_t refusal_tag(uint32_t group, uint32_t from) {
  return (uint64_t{2} << 62) | ((static_cast<uint64_t>(group) & 0x3fff) << 48) |
         (uint64_t{1} << 23) | (static_cast<uint64_t>(from) & kMaxRank);
}

void encode(const DataHeader& h, uint8_t* out) {
  const uint32_t magic = kDataMagic, kind = static_cast<uint32_t>(h.kind);
  std::memcpy(out, &magic, 4);
  std::memcpy(out + 4, &kind, 4);
  std::memcpy(out + 8, &h.bytes, 8);
  std::memcpy(out + 16, &h.seq, 8);
}

std::optional<DataHeader> parse_data(std::span<const uint8_t> data) {
  if (data.size() < kDataHeaderBytes) return std::nullopt;
  uint32_t magic, kind;
  DataHeader h;
  std::memcpy(&magic, data.data(), 4);
  std::memcpy(&kind, data.data() + 4, 4);
  std::memcpy(&h.bytes, data.data() + 8, 8);
  std::memcpy(&h.seq, data.data() + 16, 8);
  if (magic != kDataMagic) return std::nullopt;
  if (kind != static_cast<uint32_t>(DataKind::Inline) &&
      kind != static_cast<uint32_t>(DataKind::RequestToSend)) {
    return std::nullopt;
  }
  h.kind = static_cast<DataKind>(kind);
  // An inline message carries exactly its bytes; a request to send nothing more.
  const size_t payload = data.size() - kDataHeaderBytes;
  if (h.kind == DataKind::Inline ? payload != h.bytes : payload != 0) return std::nullopt;
  return h;
}

std::vector<uint8_t> encode(const ClearToSend& c) {
  const size_t error_len = std::min(c.error.size(), kMaxClearToSendBytes / 2);
  const CtsFixed f{kCtsMagic,
                   c.ok ? 1u : 0u,
                   c.bytes,
                   c.seq,
                   c.addr,
                   c.token,
                   static_cast<uint32_t>(c.key.size()),
                   static_cast<uint32_t>(error_len)};
  std::vector<uint8_t> out(sizeof f + c.key.size() + error_len);
  std::memcpy(out.data(), &f, sizeof f);
  if (!c.key.empty()) std::memcpy(out.data() + sizeof f, c.key.data(), c.key.size());
  if (error_len) std::memcpy(out.data() + sizeof f + c.key.size(), c.error.data(), error_len);
  return out;
}

std::optional<ClearToSend> parse_clear_to_send(std::span<const uint8_t> data) {
  CtsFixed f;
  if (data.size() < sizeof f) return std::nullopt;
  std::memcpy(&f, data.data(), sizeof f);
  if (f.magic != kCtsMagic || f.ok > 1 ||
      sizeof f + static_cast<size_t>(f.key_len) + f.error_len != data.size()) {
    return std::nullopt;
  }
  ClearToSend c;
  c.ok = f.ok == 1;
  c.bytes = f.bytes;
  c.seq = f.seq;
  c.addr = f.addr;
  c.token = f.token;
  c.key = data.subspan(sizeof f, f.key_len);
  c.error = {reinterpret_cast<const char*>(data.data() + sizeof f + f.key_len), f.error_len};
  return c;
}

}  // namespace rdmacoll::engine::p2p
